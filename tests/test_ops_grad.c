/*
 * tests/test_ops_grad.c - unit tests of the CPU backend's ops with a
 * reduction in their backward (ops/ops_cpu.c: layernorm, matmul, bias /
 * residual / GELU, attention) against independent double-precision
 * references and finite differences. The other ops, the contract's slicing
 * and determinism are tests/test_ops.c's; tests/ops_testing.h has the shared
 * checks and tolerances.
 *
 * Method. Each op's fp32 forward is compared with a naive double reference
 * written here from the textbook formula. Each backward is compared with
 * central finite differences of that double reference, for the random linear
 * functional L = sum(r * out), whose gradient w.r.t. out is r: so the analytic
 * gradient is the backward called with dout = r. Differencing the double
 * reference (h = 1e-5) makes the numerical gradient accurate to ~1e-10, far
 * below fp32 rounding, so the only error left is the op's own fp32 rounding and
 * the tolerances can be tight (TOL_* in tests/ops_testing.h). Overwrite vs
 * accumulate and NULL arguments are pinned too.
 *
 * Build and run: make build/test_ops_grad && build/test_ops_grad
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "ops/ops.h"
#include "tests/ops_testing.h"


static double dot_fd(const double* r, const double* y, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += r[i] * y[i];
    return s;
}

/* ======================================================================== */
/* double references (naive loops straight from the formulas) */

static void ref_layernorm(double* out, double* mean, double* rstd, const double* x, const double* w,
                          const double* b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double* xn = x + (size_t)n * C;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += xn[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (xn[c] - m) * (xn[c] - m);
        v /= C;
        double s = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (xn[c] - m) * s * w[c] + b[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

static void ref_matmul(double* out, const double* x, const double* w, const double* bias, int N, int IC, int OC) {
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < IC; i++) s += x[(size_t)n * IC + i] * w[(size_t)o * IC + i];
            out[(size_t)n * OC + o] = s;
        }
    }
}

static double ref_gelu1(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

/* Naive causal attention: materialise the whole T x T score matrix of a head,
 * mask j > t, softmax each row, multiply by V. Independent of the op's
 * online row loop and lse bookkeeping. */
static void ref_attention(double* out, double* lse, const double* qkv, int B, int T, int NH, int hs) {
    size_t C3 = (size_t)3 * NH * hs, Co = (size_t)NH * hs;
    double* S = dalloc((size_t)T * T);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                for (int j = 0; j < T; j++) {
                    double s = -INFINITY; /* the causal mask */
                    if (j <= t) {
                        s = 0.0;
                        for (int i = 0; i < hs; i++) {
                            s += qkv[((size_t)b * T + t) * C3 + (size_t)h * hs + i] *
                                 qkv[((size_t)b * T + j) * C3 + Co + (size_t)h * hs + i];
                        }
                        s /= sqrt((double)hs);
                    }
                    S[(size_t)t * T + j] = s;
                }
            }
            for (int t = 0; t < T; t++) {
                double* row = S + (size_t)t * T;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j < T; j++) mx = row[j] > mx ? row[j] : mx;
                for (int j = 0; j < T; j++) sum += exp(row[j] - mx);
                for (int j = 0; j < T; j++) row[j] = exp(row[j] - mx) / sum;
                if (lse) lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
            }
            for (int t = 0; t < T; t++) {
                for (int i = 0; i < hs; i++) {
                    double o = 0.0;
                    for (int j = 0; j < T; j++) {
                        o += S[(size_t)t * T + j] * qkv[((size_t)b * T + j) * C3 + 2 * Co + (size_t)h * hs + i];
                    }
                    out[((size_t)b * T + t) * Co + (size_t)h * hs + i] = o;
                }
            }
        }
    }
    free(S);
}

/* ======================================================================== */
/* layernorm */

typedef struct { double *x, *w, *b, *r, *out; int N, C; } ln_ctx;
static double ln_loss(void* p) {
    ln_ctx* c = (ln_ctx*)p;
    ref_layernorm(c->out, NULL, NULL, c->x, c->w, c->b, c->N, c->C);
    return dot_fd(c->r, c->out, (size_t)c->N * c->C);
}

static void test_layernorm_case(int N, int C, float xscale, float xshift) {
    char what[96];
    size_t NC = (size_t)N * C;
    float* x = rand_floats(NC, xscale);
    for (size_t i = 0; i < NC; i++) x[i] += xshift;
    float* w = rand_floats((size_t)C, 1.0f);
    float* b = rand_floats((size_t)C, 1.0f);
    float* r = rand_floats(NC, 1.0f);
    float* out = falloc(NC);
    float* mean = falloc((size_t)N);
    float* rstd = falloc((size_t)N);
    layernorm_forward(out, mean, rstd, x, w, b, N, C);

    ln_ctx c = {dcopy(x, NC), dcopy(w, C), dcopy(b, C), dcopy(r, NC), dalloc(NC), N, C};
    double* wmean = dalloc((size_t)N);
    double* wrstd = dalloc((size_t)N);
    double* wout = dalloc(NC);
    ref_layernorm(wout, wmean, wrstd, c.x, c.w, c.b, N, C);
    snprintf(what, sizeof what, "layernorm fwd out  N=%d C=%d x~%g+-%g", N, C, xshift, xscale);
    expect(what, rel_err(out, wout, NC), TOL_FWD);
    snprintf(what, sizeof what, "layernorm fwd mean, rstd");
    expect(what, fmax(rel_err(mean, wmean, N), rel_err(rstd, wrstd, N)), TOL_FWD);

    /* backward with dout = r; dinp starts non-zero to check it accumulates */
    float* d0 = rand_floats(NC, 1.0f);
    float* dinp = (float*)mallocCheck(NC * sizeof(float));
    memcpy(dinp, d0, NC * sizeof(float));
    float* dw = falloc((size_t)C);
    float* db = falloc((size_t)C);
    layernorm_backward(dinp, dw, db, NULL, r, x, w, mean, rstd, N, C);
    double* gx = dalloc(NC);
    double* gw = dalloc((size_t)C);
    double* gb = dalloc((size_t)C);
    fd_grad(gx, c.x, NC, ln_loss, &c);
    fd_grad(gw, c.w, (size_t)C, ln_loss, &c);
    fd_grad(gb, c.b, (size_t)C, ln_loss, &c);
    float* dx_only = falloc(NC);
    for (size_t i = 0; i < NC; i++) dx_only[i] = dinp[i] - d0[i];
    expect("layernorm bwd dinp vs finite differences", rel_err(dx_only, gx, NC), TOL_GRAD);
    expect("layernorm bwd dw vs finite differences", rel_err(dw, gw, (size_t)C), TOL_GRAD);
    expect("layernorm bwd db vs finite differences", rel_err(db, gb, (size_t)C), TOL_GRAD);
    /* accumulation: dinp = d0 + g, and a second call gives d0 + 2g, 2 dw, 2 db */
    double* want = dalloc(NC);
    for (size_t i = 0; i < NC; i++) want[i] = (double)d0[i] + gx[i];
    expect("layernorm bwd dinp ACCUMULATES (d0 + g)", rel_err(dinp, want, NC), TOL_GRAD);
    float* ds = falloc((size_t)C); /* dsum: the column sums of dinp as the call leaves it */
    layernorm_backward(dinp, dw, db, ds, r, x, w, mean, rstd, N, C);
    double* cs = dalloc((size_t)C);
    for (size_t i = 0; i < NC; i++) cs[i % (size_t)C] += dinp[i];
    expect("layernorm bwd dsum == column sums of the new dinp", rel_err(ds, cs, (size_t)C), 1e-6);
    free(ds);
    free(cs);
    for (size_t i = 0; i < NC; i++) want[i] = (double)d0[i] + 2.0 * gx[i];
    expect("layernorm bwd twice: dinp == d0 + 2g", rel_err(dinp, want, NC), TOL_GRAD);
    for (int i = 0; i < C; i++) { gw[i] *= 2.0; gb[i] *= 2.0; }
    expect("layernorm bwd twice: dw, db doubled", fmax(rel_err(dw, gw, C), rel_err(db, gb, C)), TOL_GRAD);

    free(x); free(w); free(b); free(r); free(out); free(mean); free(rstd);
    free(c.x); free(c.w); free(c.b); free(c.r); free(c.out); free(wmean); free(wrstd); free(wout);
    free(d0); free(dinp); free(dw); free(db); free(gx); free(gw); free(gb); free(dx_only); free(want);
}

static void test_layernorm(void) {
    printf("layernorm\n");
    test_layernorm_case(5, 8, 1.0f, 0.0f);
    /* tiny variance (~3e-5, three times eps): a wrong or misplaced eps moves
     * rstd by percents. (No offset here: with |mean| >> std the fp32 mean's
     * own rounding, ~|mean|*1e-7, is amplified by 1/std, an ill-conditioning of
     * the problem, not an error of the op.) */
    test_layernorm_case(4, 13, 0.01f, 0.0f);
    /* an offset mean with a moderate std: the variance is computed around the mean */
    test_layernorm_case(3, 96, 2.0f, -1.0f);
}

/* ======================================================================== */
/* matmul */

typedef struct { double *x, *w, *b, *r, *out; int N, IC, OC; } mm_ctx;
static double mm_loss(void* p) {
    mm_ctx* c = (mm_ctx*)p;
    ref_matmul(c->out, c->x, c->w, c->b, c->N, c->IC, c->OC);
    return dot_fd(c->r, c->out, (size_t)c->N * c->OC);
}

/* fd = 1: gradients from finite differences of the reference (small shapes);
 * fd = 0: from the closed forms dinp = dout w, dw = dout^T x in double */
static void test_matmul_case(int N, int IC, int OC, int with_bias, int fd) {
    char what[112], shape[48];
    snprintf(shape, sizeof shape, "N=%d IC=%d OC=%d %s", N, IC, OC, with_bias ? "bias" : "no bias");
    size_t NI = (size_t)N * IC, NO = (size_t)N * OC, OI = (size_t)OC * IC;
    float* x = rand_floats(NI, 1.0f);
    float* w = rand_floats(OI, 1.0f);
    float* b = with_bias ? rand_floats((size_t)OC, 1.0f) : NULL;
    float* r = rand_floats(NO, 1.0f);
    float* out = ffill(NO, NAN); /* overwritten: NaN garbage must not leak */
    matmul_forward(out, x, w, b, N, IC, OC);
    mm_ctx c = {dcopy(x, NI), dcopy(w, OI), b ? dcopy(b, OC) : NULL, dcopy(r, NO), dalloc(NO), N, IC, OC};
    ref_matmul(c.out, c.x, c.w, c.b, N, IC, OC);
    snprintf(what, sizeof what, "matmul fwd %s", shape);
    expect(what, rel_err(out, c.out, NO), TOL_FWD);

    double* gx = dalloc(NI);
    double* gw = dalloc(OI);
    double* gb = dalloc((size_t)OC);
    if (fd) {
        fd_grad(gx, c.x, NI, mm_loss, &c);
        fd_grad(gw, c.w, OI, mm_loss, &c);
        if (b) fd_grad(gb, c.b, (size_t)OC, mm_loss, &c);
    } else {
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double d = c.r[(size_t)n * OC + o];
                for (int i = 0; i < IC; i++) {
                    gx[(size_t)n * IC + i] += d * c.w[(size_t)o * IC + i];
                    gw[(size_t)o * IC + i] += d * c.x[(size_t)n * IC + i];
                }
                gb[o] += d;
            }
    }
    const char* how = fd ? "finite differences" : "double closed form";
    float* dinp = ffill(NI, NAN); /* overwritten */
    float* dw = falloc(OI);
    float* db = b ? falloc((size_t)OC) : NULL;
    matmul_backward(dinp, dw, db, r, x, w, N, IC, OC);
    snprintf(what, sizeof what, "matmul bwd dinp (overwritten) vs %s", how);
    expect(what, rel_err(dinp, gx, NI), TOL_GRAD);
    snprintf(what, sizeof what, "matmul bwd dw vs %s", how);
    expect(what, rel_err(dw, gw, OI), TOL_GRAD);
    if (b) {
        snprintf(what, sizeof what, "matmul bwd dbias vs %s", how);
        expect(what, rel_err(db, gb, (size_t)OC), TOL_GRAD);
    }
    /* second call with dinp = NULL: dw (and dbias) accumulate to 2x */
    matmul_backward(NULL, dw, db, r, x, w, N, IC, OC);
    for (size_t i = 0; i < OI; i++) gw[i] *= 2.0;
    for (int i = 0; i < OC; i++) gb[i] *= 2.0;
    snprintf(what, sizeof what, "matmul bwd twice (dinp NULL): dw%s doubled", b ? ", dbias" : "");
    expect(what, fmax(rel_err(dw, gw, OI), b ? rel_err(db, gb, (size_t)OC) : 0.0), TOL_GRAD);

    free(x); free(w); free(b); free(r); free(out);
    free(c.x); free(c.w); free(c.b); free(c.r); free(c.out);
    free(gx); free(gw); free(gb); free(dinp); free(dw); free(db);
}

static void test_matmul(void) {
    printf("matmul\n");
    /* shapes off every tile size of the kernel (4 x 16 micro-tiles, 64-row blocks) */
    test_matmul_case(7, 13, 5, 1, 1);
    test_matmul_case(7, 13, 5, 0, 1);
    test_matmul_case(3, 5, 21, 1, 1);
    test_matmul_case(64, 96, 80, 1, 0);
    test_matmul_case(64, 96, 80, 0, 0);
    test_matmul_case(131, 37, 33, 1, 0);
    test_matmul_case(1, 1, 1, 1, 1);
}

/* ======================================================================== */
/* bias, residual, GELU */

typedef struct { double *x, *r, *out; size_t n; } gelu_ctx;
static double gelu_loss(void* p) {
    gelu_ctx* c = (gelu_ctx*)p;
    for (size_t i = 0; i < c->n; i++) c->out[i] = ref_gelu1(c->x[i]);
    return dot_fd(c->r, c->out, c->n);
}

static void test_elementwise(void) {
    printf("bias, residual, gelu\n");
    const int N = 9, C = 70;
    size_t NC = (size_t)N * C;
    float* x = rand_floats(NC, 1.0f);
    float* bias = rand_floats((size_t)C, 1.0f);
    double* want = dalloc(NC);
    for (size_t i = 0; i < NC; i++) want[i] = (double)x[i] + bias[i % C];
    bias_forward(x, bias, N, C);
    expect("bias fwd: x += bias", rel_err(x, want, NC), TOL_FWD);
    float* dbias = ffill((size_t)C, 1.0f);
    double* wdb = dalloc((size_t)C);
    for (int c = 0; c < C; c++) wdb[c] = 1.0;
    for (size_t i = 0; i < NC; i++) wdb[i % C] += x[i];
    bias_backward(dbias, x, N, C);
    expect("bias bwd: dbias += colsum (accumulates)", rel_err(dbias, wdb, (size_t)C), TOL_FWD);

    float* a = rand_floats(NC, 1.0f);
    float* b = rand_floats(NC, 1.0f);
    for (size_t i = 0; i < NC; i++) want[i] = (double)a[i] + b[i];
    float* out = ffill(NC, NAN);
    residual_forward(out, a, b, NC);
    expect("residual fwd: out = a + b", rel_err(out, want, NC), TOL_FWD);
    residual_forward(a, a, b, NC); /* in place, as the model uses it */
    expect("residual fwd in place (out == a)", rel_err(a, want, NC), TOL_FWD);

    /* GELU over [-5, 5], where both tails and the bend are exercised */
    size_t n = 200;
    float* gx = rand_floats(n, 5.0f);
    float* r = rand_floats(n, 1.0f);
    float* gout = falloc(n);
    gelu_forward(gout, gx, n);
    gelu_ctx c = {dcopy(gx, n), dcopy(r, n), dalloc(n), n};
    double* wg = dalloc(n);
    for (size_t i = 0; i < n; i++) wg[i] = ref_gelu1(c.x[i]);
    expect("gelu fwd vs double tanh formula", rel_err(gout, wg, n), TOL_FWD);
    /* pins the constants: GPT-2's tanh GELU at x = 1 is 0.8411919906 (the
     * exact erf GELU would give 0.8413447461) */
    float one = 1.0f, g1 = 0.0f;
    gelu_forward(&g1, &one, 1);
    expect("gelu(1) == 0.8411919906 (tanh approximation)", fabs(g1 - 0.8411919906) / 0.8411919906, TOL_FWD);
    /* the tanh's argument constants matter most where 1 + tanh(u) is small:
     * at x = -2 a 3e-4 relative change of 0.044715 moves gelu by ~2e-4
     * relative. Elementwise relative error at fixed points pins them (no
     * reduction here, so elementwise is fair; x <= -3 would lose accuracy to
     * the cancellation in 1 + tanh). */
    float pts[6] = {-2.0f, -1.5f, -1.0f, -0.25f, 0.5f, 2.0f}, gpts[6];
    gelu_forward(gpts, pts, 6);
    double pt_err = 0.0;
    for (int i = 0; i < 6; i++) pt_err = fmax(pt_err, fabs(gpts[i] - ref_gelu1(pts[i])) / fabs(ref_gelu1(pts[i])));
    expect("gelu at x in {-2 .. 2}, elementwise relative", pt_err, TOL_FWD);
    float* dinp = ffill(n, NAN); /* overwritten */
    gelu_backward(dinp, gx, r, n);
    double* gd = dalloc(n);
    fd_grad(gd, c.x, n, gelu_loss, &c);
    expect("gelu bwd (overwritten) vs finite differences", rel_err(dinp, gd, n), TOL_GRAD);

    free(x); free(bias); free(want); free(dbias); free(wdb); free(a); free(b); free(out);
    free(gx); free(r); free(gout); free(c.x); free(c.r); free(c.out); free(wg); free(dinp); free(gd);
}

/* ======================================================================== */
/* attention */

typedef struct { double *qkv, *r, *out; int B, T, NH, hs; } att_ctx;
static double att_loss(void* p) {
    att_ctx* c = (att_ctx*)p;
    ref_attention(c->out, NULL, c->qkv, c->B, c->T, c->NH, c->hs);
    return dot_fd(c->r, c->out, (size_t)c->B * c->T * c->NH * c->hs);
}

static void test_attention_case(int B, int T, int NH, int hs, float qk_scale) {
    char what[112], shape[64];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d hs=%d", B, T, NH, hs);
    size_t C3 = (size_t)3 * NH * hs, Co = (size_t)NH * hs;
    size_t nqkv = (size_t)B * T * C3, nout = (size_t)B * T * Co, nlse = (size_t)B * NH * T;
    float* qkv = rand_floats(nqkv, 1.0f);
    /* larger q, k make the softmax peaked, so p spans many orders of magnitude */
    for (size_t i = 0; i < nqkv; i++) if (i % C3 < 2 * Co) qkv[i] *= qk_scale;
    float* out = ffill(nout, NAN);
    float* lse = falloc(nlse);
    attention_forward(out, lse, qkv, B, T, NH, hs);

    att_ctx c = {dcopy(qkv, nqkv), NULL, dalloc(nout), B, T, NH, hs};
    double* wlse = dalloc(nlse);
    ref_attention(c.out, wlse, c.qkv, B, T, NH, hs);
    snprintf(what, sizeof what, "attention fwd out vs naive TxT softmax, %s", shape);
    expect(what, rel_err(out, c.out, nout), TOL_FWD);
    expect("attention fwd lse vs naive log-sum-exp", rel_err(lse, wlse, nlse), TOL_FWD);

    /* causality: new k, v for token t1 leave every output before t1 untouched */
    if (T > 2) {
        int t1 = T / 2;
        float* qkv2 = (float*)mallocCheck(nqkv * sizeof(float));
        memcpy(qkv2, qkv, nqkv * sizeof(float));
        for (int b = 0; b < B; b++)
            for (size_t i = Co; i < C3; i++) qkv2[((size_t)b * T + t1) * C3 + i] += 1.0f;
        float* out2 = falloc(nout);
        float* lse2 = falloc(nlse);
        attention_forward(out2, lse2, qkv2, B, T, NH, hs);
        int same_past = 1, changed_future = 1;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                int same = memcmp(out + ((size_t)b * T + t) * Co, out2 + ((size_t)b * T + t) * Co,
                                  Co * sizeof(float)) == 0;
                for (int h = 0; h < NH; h++)
                    same &= lse[((size_t)b * NH + h) * T + t] == lse2[((size_t)b * NH + h) * T + t];
                if (t < t1) same_past &= same;
                else changed_future &= !same;
            }
        }
        snprintf(what, sizeof what, "attention causal: changing k,v at t=%d keeps t<%d bit-identical", t1, t1);
        expect_true(what, same_past);
        expect_true("attention causal: ... and changes every t >= that token", changed_future);
        free(qkv2); free(out2); free(lse2);
    }

    /* backward: L = sum r*out; dqkv starts as NaN garbage (overwritten) */
    float* r = rand_floats(nout, 1.0f);
    c.r = dcopy(r, nout);
    float* dqkv = ffill(nqkv, NAN);
    attention_backward(dqkv, r, qkv, out, lse, B, T, NH, hs);
    double* g = dalloc(nqkv);
    fd_grad(g, c.qkv, nqkv, att_loss, &c);
    /* report q, k, v separately: split the columns of every row */
    const char* names[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) {
        size_t m = (size_t)B * T * Co;
        float* got = falloc(m);
        double* want = dalloc(m);
        for (size_t row = 0; row < (size_t)B * T; row++)
            for (size_t i = 0; i < Co; i++) {
                got[row * Co + i] = dqkv[row * C3 + part * Co + i];
                want[row * Co + i] = g[row * C3 + part * Co + i];
            }
        snprintf(what, sizeof what, "attention bwd %s vs finite differences", names[part]);
        expect(what, rel_err(got, want, m), TOL_GRAD);
        free(got); free(want);
    }
    free(qkv); free(out); free(lse); free(c.qkv); free(c.r); free(c.out); free(wlse);
    free(r); free(dqkv); free(g);
}

static void test_attention(void) {
    printf("attention\n");
    test_attention_case(2, 5, 2, 4, 1.0f);
    test_attention_case(1, 17, 3, 8, 3.0f);
    test_attention_case(2, 1, 1, 3, 1.0f); /* T = 1: p = 1, out = v, dq = dk = 0 */
}

int main(void) {
    printf("test_ops_grad: CPU backend vs double references and finite differences (%d OpenMP threads)\n",
           omp_get_max_threads());
    test_layernorm();
    test_matmul();
    test_elementwise();
    test_attention();
    return checks_verdict();
}
