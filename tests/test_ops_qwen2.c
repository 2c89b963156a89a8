/*
 * tests/test_ops_qwen2.c - the CPU ops Qwen2 adds (ops/ops.h: RMSNorm,
 * rotate-half RoPE, SwiGLU, grouped-query attention) against double
 * references written here from transformers' definitions, and every backward
 * against central finite differences of those references.
 *
 * Method and tolerances as tests/test_ops_grad.c (tests/ops_testing.h): the
 * loss is L = sum(r * out) for a random r, so the analytic gradient is the
 * backward with dout = r; differencing the double reference with h = 1e-5
 * is accurate to ~1e-10, so TOL_FWD / TOL_GRAD (1e-5 / 2e-5, norm-wise)
 * only have to absorb the op's fp32 rounding. Each op also keeps its
 * contract: RMSNorm's backward accumulates, the others overwrite, and GQA
 * with NKV = NH is bit-identical to GPT-2's attention_forward.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tests/ops_testing.h"


typedef struct {
    int B, T, N, C, NH, NKV, hs, ld, nh, F;
    double eps, theta;
    double *x, *w, *r, *out;   /* reference inputs, loss weights, output */
    size_t nout;
    void (*fwd)(void* ctx);
} Ref;

static double ref_loss(Ref* c) {
    c->fwd(c);
    double s = 0.0;
    for (size_t i = 0; i < c->nout; i++) s += c->r[i] * c->out[i];
    return s;
}

static double ref_loss_fn(void* c) { return ref_loss((Ref*)c); }
static double* fd_of(Ref* c, double* x, size_t n) {
    double* g = dalloc(n);
    fd_grad(g, x, n, ref_loss_fn, c);
    return g;
}

/* ---- references ---------------------------------------------------------- */

static void ref_rmsnorm(void* p) {   /* transformers' Qwen2RMSNorm */
    Ref* c = p;
    for (int n = 0; n < c->N; n++) {
        double ss = 0.0;
        for (int k = 0; k < c->C; k++) ss += c->x[(size_t)n * c->C + k] * c->x[(size_t)n * c->C + k];
        double r = 1.0 / sqrt(ss / c->C + c->eps);
        for (int k = 0; k < c->C; k++) c->out[(size_t)n * c->C + k] = c->w[k] * c->x[(size_t)n * c->C + k] * r;
    }
}

static void ref_rope(void* p) {      /* q * cos + rotate_half(q) * sin, rotate_half(x) = (-x2, x1) */
    Ref* c = p;
    int half = c->hs / 2;
    memcpy(c->out, c->x, c->nout * sizeof(double));
    for (int bt = 0; bt < c->B * c->T; bt++) {
        double pos = bt % c->T;
        for (int h = 0; h < c->nh; h++) {
            const double* v = c->x + (size_t)bt * c->ld + (size_t)h * c->hs;
            double* o = c->out + (size_t)bt * c->ld + (size_t)h * c->hs;
            for (int i = 0; i < c->hs; i++) {
                double a = pos * pow(c->theta, -(double)(2 * (i % half)) / c->hs);
                double rot = i < half ? -v[i + half] : v[i - half];
                o[i] = v[i] * cos(a) + rot * sin(a);
            }
        }
    }
}

static void ref_swiglu(void* p) {    /* silu(gate) * up */
    Ref* c = p;
    for (int n = 0; n < c->N; n++)
        for (int i = 0; i < c->F; i++) {
            double g = c->x[(size_t)n * 2 * c->F + i], u = c->x[(size_t)n * 2 * c->F + c->F + i];
            c->out[(size_t)n * c->F + i] = g / (1.0 + exp(-g)) * u;
        }
}

static void ref_gqa(void* p) {       /* softmax(q k^T / sqrt(hs) + causal mask) v, kv head h / (NH/NKV) */
    Ref* c = p;
    int W = (c->NH + 2 * c->NKV) * c->hs, Co = c->NH * c->hs, Ck = c->NKV * c->hs;
    double* s = dalloc((size_t)c->T);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++) {
            int g = h / (c->NH / c->NKV);
            for (int t = 0; t < c->T; t++) {
                const double* q = c->x + ((size_t)b * c->T + t) * W + (size_t)h * c->hs;
                double mx = -INFINITY, z = 0.0;
                for (int j = 0; j <= t; j++) {
                    const double* k = c->x + ((size_t)b * c->T + j) * W + Co + (size_t)g * c->hs;
                    s[j] = 0.0;
                    for (int i = 0; i < c->hs; i++) s[j] += q[i] * k[i] / sqrt((double)c->hs);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= t; j++) z += exp(s[j] - mx);
                double* o = c->out + ((size_t)b * c->T + t) * Co + (size_t)h * c->hs;
                for (int i = 0; i < c->hs; i++) {
                    o[i] = 0.0;
                    for (int j = 0; j <= t; j++)
                        o[i] += exp(s[j] - mx) / z * c->x[((size_t)b * c->T + j) * W + Co + Ck + (size_t)g * c->hs + i];
                }
            }
        }
    free(s);
}

/* ---- tests --------------------------------------------------------------- */

static void test_rmsnorm(int N, int C, float scale) {
    char what[128];
    size_t n = (size_t)N * C;
    float* x = rand_floats(n, scale);
    float* w = rand_floats((size_t)C, 1.5f);
    float* out = ffill(n, NAN);
    float* rstd = falloc((size_t)N);
    rmsnorm_forward(out, rstd, x, w, N, C, 1e-6f);
    Ref c = {.N = N, .C = C, .eps = 1e-6, .x = dcopy(x, n), .w = dcopy(w, (size_t)C), .out = dalloc(n), .nout = n,
             .fwd = ref_rmsnorm};
    ref_rmsnorm(&c);
    snprintf(what, sizeof what, "rmsnorm fwd vs double, N=%d C=%d |x|<=%g", N, C, scale);
    expect(what, rel_err(out, c.out, n), TOL_FWD);
    float* r = rand_floats(n, 1.0f);
    c.r = dcopy(r, n);
    /* accumulates: start dinp at 1 and dw at 2, subtract afterwards */
    float* dx = ffill(n, 1.0f);
    float* dw = ffill((size_t)C, 2.0f);
    rmsnorm_backward(dx, dw, r, x, w, rstd, N, C);
    for (size_t i = 0; i < n; i++) dx[i] -= 1.0f;
    for (int i = 0; i < C; i++) dw[i] -= 2.0f;
    double* gx = fd_of(&c, c.x, n);
    double* gw = fd_of(&c, c.w, (size_t)C);
    expect("rmsnorm bwd dinp (accumulated) vs finite differences", rel_err(dx, gx, n), TOL_GRAD);
    expect("rmsnorm bwd dw (accumulated) vs finite differences", rel_err(dw, gw, (size_t)C), TOL_GRAD);
    free(x); free(w); free(out); free(rstd); free(r); free(dx); free(dw);
    free(c.x); free(c.w); free(c.out); free(c.r); free(gx); free(gw);
}

static void test_rope(int B, int T, int nh, int extra_heads, int hs, float theta) {
    char what[128];
    int ld = (nh + extra_heads) * hs;   /* heads past nh (v) stay untouched */
    size_t n = (size_t)B * T * ld;
    float* x = rand_floats(n, 1.0f);
    float* y = mallocCheck(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    rope_forward(y, B, T, ld, nh, hs, theta);
    Ref c = {.B = B, .T = T, .ld = ld, .nh = nh, .hs = hs, .theta = theta, .x = dcopy(x, n), .out = dalloc(n),
             .nout = n, .fwd = ref_rope};
    ref_rope(&c);
    snprintf(what, sizeof what, "rope fwd vs rotate_half reference, T=%d nh=%d hs=%d theta=%g", T, nh, hs, theta);
    expect(what, rel_err(y, c.out, n), TOL_FWD);
    int untouched = 1;
    for (int row = 0; row < B * T; row++)
        untouched &= memcmp(y + (size_t)row * ld + (size_t)nh * hs, x + (size_t)row * ld + (size_t)nh * hs,
                            (size_t)extra_heads * hs * sizeof(float)) == 0;
    expect_true("rope leaves the heads past nh bit-identical", untouched);
    float* r = rand_floats(n, 1.0f);
    c.r = dcopy(r, n);
    rope_backward(r, B, T, ld, nh, hs, theta);   /* in place: dout -> dinp */
    double* g = fd_of(&c, c.x, n);
    expect("rope bwd vs finite differences", rel_err(r, g, n), TOL_GRAD);
    free(x); free(y); free(r); free(c.x); free(c.out); free(c.r); free(g);
}

static void test_swiglu(int N, int F) {
    size_t nin = (size_t)N * 2 * F, nout = (size_t)N * F;
    float* x = rand_floats(nin, 4.0f);   /* covers silu's saturation on both sides */
    float* out = ffill(nout, NAN);
    swiglu_forward(out, x, N, F);
    Ref c = {.N = N, .F = F, .x = dcopy(x, nin), .out = dalloc(nout), .nout = nout, .fwd = ref_swiglu};
    ref_swiglu(&c);
    expect("swiglu fwd vs silu(gate) * up in double", rel_err(out, c.out, nout), TOL_FWD);
    float* r = rand_floats(nout, 1.0f);
    c.r = dcopy(r, nout);
    float* dx = ffill(nin, NAN);   /* overwritten */
    swiglu_backward(dx, x, r, N, F);
    double* g = fd_of(&c, c.x, nin);
    expect("swiglu bwd (gate and up) vs finite differences", rel_err(dx, g, nin), TOL_GRAD);
    free(x); free(out); free(r); free(dx); free(c.x); free(c.out); free(c.r); free(g);
}

static void test_gqa(int B, int T, int NH, int NKV, int hs) {
    char what[128];
    size_t W = (size_t)(NH + 2 * NKV) * hs, nin = (size_t)B * T * W, nout = (size_t)B * T * NH * hs;
    float* x = rand_floats(nin, 1.5f);
    float* out = ffill(nout, NAN);
    float* lse = falloc((size_t)B * NH * T);
    attention_gqa_forward(out, lse, x, B, T, NH, NKV, hs);
    Ref c = {.B = B, .T = T, .NH = NH, .NKV = NKV, .hs = hs, .x = dcopy(x, nin), .out = dalloc(nout), .nout = nout,
             .fwd = ref_gqa};
    ref_gqa(&c);
    snprintf(what, sizeof what, "gqa attention fwd vs naive softmax, B=%d T=%d NH=%d NKV=%d hs=%d", B, T, NH, NKV, hs);
    expect(what, rel_err(out, c.out, nout), TOL_FWD);
    float* r = rand_floats(nout, 1.0f);
    c.r = dcopy(r, nout);
    float* dx = ffill(nin, NAN);
    attention_gqa_backward(dx, r, x, out, lse, B, T, NH, NKV, hs);
    double* g = fd_of(&c, c.x, nin);
    snprintf(what, sizeof what, "gqa attention bwd dq, dk, dv vs finite differences (NH/NKV = %d)", NH / NKV);
    expect(what, rel_err(dx, g, nin), TOL_GRAD);
    if (NKV == NH) {   /* the GPT-2 entry points are the same code */
        float* o2 = ffill(nout, NAN);
        float* l2 = falloc((size_t)B * NH * T);
        attention_forward(o2, l2, x, B, T, NH, hs);
        expect_true("gqa with NKV = NH is bit-identical to attention_forward",
                    memcmp(o2, out, nout * sizeof(float)) == 0 && memcmp(l2, lse, (size_t)B * NH * T * sizeof(float)) == 0);
        free(o2); free(l2);
    }
    free(x); free(out); free(lse); free(r); free(dx); free(c.x); free(c.out); free(c.r); free(g);
}

int main(void) {
    printf("test_ops_qwen2: RMSNorm, RoPE, SwiGLU, GQA attention vs double references and finite differences\n");
    test_rmsnorm(5, 24, 1.0f);
    test_rmsnorm(3, 64, 30.0f);          /* large activations: rstd small */
    test_rope(2, 7, 3, 1, 8, 10000.0f);
    test_rope(1, 33, 2, 2, 16, 1e6f);    /* Qwen2.5's base, longer sequence */
    test_swiglu(4, 20);
    test_gqa(2, 6, 4, 2, 4);
    test_gqa(1, 9, 6, 1, 8);             /* multi-query */
    test_gqa(2, 5, 3, 3, 4);             /* NKV = NH: GPT-2's attention */
    return checks_verdict();
}
