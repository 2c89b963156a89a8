/*
 * ops/ops_cpu_qwen2.c - the fp32 CPU ops that Qwen2 adds to GPT-2's: RMSNorm,
 * rotate-half RoPE and SwiGLU (ops/ops.h has their contracts; the
 * grouped-query attention lives beside GPT-2's attention in ops_cpu.c).
 *
 * Like ops_cpu.c: every loop over rows is parallel over rows, and every
 * reduction into a parameter gradient runs over rows in order, one column
 * per thread, so results do not depend on the thread count.
 */
#include <math.h>
#include <stdlib.h>

#include "ops/ops.h"

void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C, float eps) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / (float)C + eps);
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
        rstd[n] = s;
    }
}

void rmsnorm_backward(floatX* dinp, float* dw, const floatX* dout, const floatX* inp, const floatX* w,
                      const float* rstd, int N, int C) {
    /* y_c = w_c x_c r with r = (mean(x^2) + eps)^(-1/2), dr/dx_c = -r^3 x_c / C:
     *   dx_c = r w_c dy_c - (r^3 / C) x_c sum_k w_k dy_k x_k,   dw_c = sum_n dy_c x_c r */
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* dy = dout + (size_t)n * C;
        float* dx = dinp + (size_t)n * C;
        float r = rstd[n], dot = 0.0f;
        for (int c = 0; c < C; c++) dot += w[c] * dy[c] * x[c];
        float k = r * r * r * dot / (float)C;
        for (int c = 0; c < C; c++) dx[c] += r * w[c] * dy[c] - k * x[c];
    }
    #pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        float acc = 0.0f;
        for (int n = 0; n < N; n++) acc += dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
        dw[c] += acc;
    }
}

/* One rotation of every row's first nh heads; sign -1 rotates back (the
 * transposed matrix). The angle is computed as transformers computes it in
 * fp32: inv_freq_i = 1 / theta^(2i/hs) in float, times the position in float. */
static void rope_apply(float* x, int B, int T, int ld, int nh, int hs, float theta, float sign) {
    int half = hs / 2;
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        float pos = (float)(bt % T);
        float* row = x + (size_t)bt * ld;
        for (int i = 0; i < half; i++) {
            float inv = (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)hs));
            float a = inv * pos;
            float cs = (float)cos((double)a), sn = sign * (float)sin((double)a);
            for (int h = 0; h < nh; h++) {
                float* v = row + (size_t)h * hs;
                float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * cs - x2 * sn;
                v[i + half] = x2 * cs + x1 * sn;
            }
        }
    }
}

void rope_forward(floatX* x, int B, int T, int ld, int nh, int hs, float theta) {
    rope_apply(x, B, T, ld, nh, hs, theta, 1.0f);
}

void rope_backward(floatX* dx, int B, int T, int ld, int nh, int hs, float theta) {
    rope_apply(dx, B, T, ld, nh, hs, theta, -1.0f);
}

void swiglu_forward(floatX* out, const floatX* gu, int N, int F) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* g = gu + (size_t)n * 2 * F;
        const float* u = g + F;
        float* o = out + (size_t)n * F;
        for (int i = 0; i < F; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

void swiglu_backward(floatX* dgu, const floatX* gu, const floatX* dout, int N, int F) {
    /* silu(g) = g s(g) with s the sigmoid; silu'(g) = s(g) (1 + g (1 - s(g))) */
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* g = gu + (size_t)n * 2 * F;
        const float* u = g + F;
        const float* d = dout + (size_t)n * F;
        float* dg = dgu + (size_t)n * 2 * F;
        float* du = dg + F;
        for (int i = 0; i < F; i++) {
            float s = 1.0f / (1.0f + expf(-g[i]));
            dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
            du[i] = d[i] * g[i] * s;
        }
    }
}
