/*
 * ops/rope_cuda.cu - rope_forward / rope_backward of ops/ops.h: the
 * rotate-half rotary position embedding of transformers' Qwen2 / Llama, in
 * place on the first nh heads (q heads, then k heads) of every row of
 * x[B,T,ld].
 *
 * For i < hs/2 at position t, with angle a = t * inv_freq_i:
 *   x[i] <- x[i] cos a - x[i+hs/2] sin a,   x[i+hs/2] <- x[i+hs/2] cos a + x[i] sin a;
 * the backward rotates the gradient back (sin -> -sin: the transpose).
 *
 * The angles: a cos / sin table [T][hs/2] is computed on the HOST exactly
 * as the CPU reference computes them (inv_freq_i = 1 / theta^(2i/hs) in
 * double rounded to float, a = inv_freq_i * t in float, cos and sin in
 * double of that float), so both backends rotate by bit-identical factors and
 * the only difference left is the bf16 rounding of the result. The table is
 * uploaded once per (T, hs, theta) and kept in a scratch slot: every layer
 * of every step reuses it. Memory-bound kernel: one read and one write of
 * each rotated element; a thread owns 2 consecutive i (bf16x2 accesses)
 * when hs/2, ld and the pointer allow it, else 1.
 */
#include <math.h>
#include <stdlib.h>

#include "ops/cuda_common.cuh"

/* the table this process holds: key (T, hs, theta) and where it is */
static const float* g_rope_tab = nullptr;
static int g_rope_T = 0, g_rope_hs = 0;
static float g_rope_theta = 0.0f;

/* The device table cos[t][i], then sin[t][i] (t < T, i < hs/2), built on a
 * miss. The host arithmetic is ops_cpu_qwen2.c's rope_apply, line for line. */
static const float* rope_table(int T, int hs, float theta) {
    const int half = hs / 2;
    const size_t n = (size_t)T * half;
    float* dev = (float*)cuda_scratch(SCRATCH_ROPE, 2 * n * sizeof(float));
    if (dev == g_rope_tab && T == g_rope_T && hs == g_rope_hs && theta == g_rope_theta) return dev;
    float* host = (float*)mallocCheck(2 * n * sizeof(float));
    for (int i = 0; i < half; i++) {
        float inv = (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)hs));
        for (int t = 0; t < T; t++) {
            float a = inv * (float)t;
            host[(size_t)t * half + i] = (float)cos((double)a);
            host[n + (size_t)t * half + i] = (float)sin((double)a);
        }
    }
    /* a kernel queued with the previous table may still read this buffer */
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));
    CUDA_CHECK(cudaMemcpy(dev, host, 2 * n * sizeof(float), cudaMemcpyHostToDevice));
    free(host);
    g_rope_tab = dev;
    g_rope_T = T;
    g_rope_hs = hs;
    g_rope_theta = theta;
    return dev;
}

/* One thread = W consecutive i of one (row, head); sign = +1 forward, -1 backward. */
template <int W>
__global__ void rope_kernel(bf16* x, const float* tab, int B, int T, int ld, int nh, int hs, float sign) {
    const int half = hs / 2, per_head = half / W;
    const size_t work = (size_t)B * T * nh * per_head;
    const size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= work) return;
    const int i = (int)(id % per_head) * W;
    const size_t rh = id / per_head;       /* (row, head) */
    const int h = (int)(rh % nh);
    const size_t bt = rh / nh;
    const int t = (int)(bt % T);
    bf16* v = x + bt * ld + (size_t)h * hs;
    const float* cs = tab + (size_t)t * half + i;
    const float* sn = cs + (size_t)T * half;
    float x1[W], x2[W];
    if (W == 2) {
        float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(v + i));
        float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(v + i + half));
        x1[0] = a.x; x1[W - 1] = a.y;
        x2[0] = b.x; x2[W - 1] = b.y;
    } else {
        x1[0] = __bfloat162float(v[i]);
        x2[0] = __bfloat162float(v[i + half]);
    }
    float y1[W], y2[W];
#pragma unroll
    for (int k = 0; k < W; k++) {
        const float c = cs[k], s = sign * sn[k];
        y1[k] = x1[k] * c - x2[k] * s;
        y2[k] = x2[k] * c + x1[k] * s;
    }
    if (W == 2) {
        *reinterpret_cast<__nv_bfloat162*>(v + i) = __floats2bfloat162_rn(y1[0], y1[W - 1]);
        *reinterpret_cast<__nv_bfloat162*>(v + i + half) = __floats2bfloat162_rn(y2[0], y2[W - 1]);
    } else {
        v[i] = __float2bfloat16_rn(y1[0]);
        v[i + half] = __float2bfloat16_rn(y2[0]);
    }
}

static void rope_apply(const char* who, floatX* x, int B, int T, int ld, int nh, int hs, float theta, float sign) {
    if (B <= 0 || T <= 0 || nh <= 0) return;
    if (hs <= 0 || hs % 2 != 0 || (size_t)nh * hs > (size_t)ld)
        FATAL("%s: bad shape hs=%d nh=%d ld=%d (hs must be even and nh*hs <= ld)", who, hs, nh, ld);
    const float* tab = rope_table(T, hs, theta);
    const int half = hs / 2;
    /* pairs need every (row, head, i) start 4-byte aligned: half, ld, hs even and x aligned */
    const bool pairs = half % 2 == 0 && ld % 2 == 0 && ((uintptr_t)x & 3u) == 0;
    const size_t work = (size_t)B * T * nh * (pairs ? half / 2 : half);
    if (pairs)
        rope_kernel<2><<<ceil_div_u(work, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>((bf16*)x, tab, B, T, ld, nh, hs, sign);
    else
        rope_kernel<1><<<ceil_div_u(work, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>((bf16*)x, tab, B, T, ld, nh, hs, sign);
    CUDA_CHECK_LAUNCH("rope_kernel");
}

void rope_forward(floatX* x, int B, int T, int ld, int nh, int hs, float theta) {
    rope_apply("rope_forward", x, B, T, ld, nh, hs, theta, 1.0f);
}

void rope_backward(floatX* dx, int B, int T, int ld, int nh, int hs, float theta) {
    rope_apply("rope_backward", dx, B, T, ld, nh, hs, theta, -1.0f);
}
