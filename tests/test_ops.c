/*
 * tests/test_ops.c - unit tests of the CPU backend (model/ops_cpu.c) against
 * independent double-precision references.
 *
 * Method. Each op's fp32 forward is compared with a naive double reference
 * written here from the textbook formula. Each backward is compared with
 * central finite differences of that double reference, for the random linear
 * functional L = sum(r * out), whose gradient w.r.t. out is r: so the analytic
 * gradient is the backward called with dout = r. Differencing the double
 * reference (h = 1e-5) makes the numerical gradient accurate to ~1e-10, far
 * below fp32 rounding, so the only error left is the op's own fp32 rounding and
 * the tolerances can be tight (see TOL_* below).
 *
 * Errors are norm-wise: max_i |got_i - want_i| / max_i |want_i|. That is the
 * relative error an fp32 dot product or sum actually guarantees (a single
 * element near zero can have a large elementwise relative error after
 * cancellation while being perfectly accurate in absolute terms).
 *
 * The test also pins the contract's semantics (overwrite vs accumulate, NULL
 * arguments, vocab-parallel slicing), and that results are bit-identical for
 * 1, 2 and 3 OpenMP threads. No MPI is needed: the vocab-parallel all-reduces
 * are simulated by combining slice outputs in the test.
 *
 * Build and run:
 *   mkdir -p build/h3 && mpicc -std=c11 -O2 -fopenmp -Wall -Wextra -Icommon -Imodel \
 *     tests/test_ops.c model/ops_cpu.c common/check.c -o build/h3/test_ops -lm && build/h3/test_ops
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "ops/ops.h"

/* ---- tolerances (norm-wise relative, see the header) ---------------------
 * TOL_FWD: an fp32 forward against the exact (double) value. A length-K fp32
 *   sum has a worst-case relative error ~K*6e-8 and typically ~sqrt(K)*6e-8;
 *   the longest reductions here have ~130 terms (and exp/log/tanh add ~1 ulp
 *   each), so errors sit around 1e-7..5e-7. 1e-5 leaves a factor 20 for other
 *   compilers and flags (e.g. FMA contraction), while a wrong term, index or
 *   constant shows up at 1e-4 or more (checked by mutating ops_cpu.c: a wrong
 *   layernorm eps, GELU constant, attention scale or AdamW decay all fail).
 * TOL_GRAD: an fp32 backward against finite differences of the double
 *   reference. A backward chains two or three fp32 reductions (e.g.
 *   layernorm's row means, attention's D = dout.out then ds = p(dp - D)), which
 *   roughly doubles the forward's error, and the FD itself is accurate to
 *   ~1e-9; observed errors are <= 6e-7, so 2e-5.
 * TOL_LOSS: cross-entropy losses against a double log-softmax. The loss is
 *   log(sum of <= 40 exps) + mx - target logit; the sum is ~1e-7 accurate, but
 *   the test's rows shifted by +-120 lose up to ~ulp(120) = 8e-6 absolute to the
 *   mx - target cancellation, ~1e-6 of a loss of a few nats. So 1e-5. */
#define TOL_FWD 1e-5
#define TOL_GRAD 2e-5
#define TOL_LOSS 1e-5
#define FD_H 1e-5 /* central-difference step on the double reference: truncation
                   * error ~h^2 = 1e-10, rounding ~1e-16/h = 1e-11 */

static int g_checks = 0, g_failed = 0;

/* record one named check: passes iff err <= tol (a NaN err fails) */
static void expect(const char* what, double err, double tol) {
    g_checks++;
    int ok = err <= tol;
    if (!ok) g_failed++;
    printf("  %s %-66s err %.2e (tol %.0e)\n", ok ? "ok  " : "FAIL", what, err, tol);
}

/* record a yes/no property (bitwise equality, untouched memory, ...) */
static void expect_true(const char* what, int cond) {
    g_checks++;
    if (!cond) g_failed++;
    printf("  %s %s\n", cond ? "ok  " : "FAIL", what);
}

/* max |got - want| / max |want| (absolute if want is all zero) */
static double rel_err(const float* got, const double* want, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= num)) num = d; /* keeps a NaN */
        if (fabs(want[i]) > den) den = fabs(want[i]);
    }
    return den > 0.0 ? num / den : num;
}

/* ---- random numbers: splitmix64, so every run and machine sees the same data */
static uint64_t g_rng = 0x5eed1234abcdULL;
static uint64_t rng_next(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static float rng_uniform(void) { return (float)((rng_next() >> 40) / 16777216.0) * 2.0f - 1.0f; } /* [-1,1) */
static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

static float* rand_floats(size_t n, float scale) {
    float* x = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_uniform();
    return x;
}
static double* dcopy(const float* x, size_t n) {
    double* d = (double*)mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static double* dalloc(size_t n) { return (double*)callocCheck(n, sizeof(double)); }
static float* falloc(size_t n) { return (float*)callocCheck(n, sizeof(float)); }
static float* ffill(size_t n, float v) {
    float* x = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}
static double dot_fd(const double* r, const double* y, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += r[i] * y[i];
    return s;
}

/* ---- finite differences --------------------------------------------------
 * fd_grad perturbs x[i] of a double reference in place and differences the
 * loss; loss(ctx) reruns the reference forward on whatever its inputs hold. */
typedef double (*loss_fn)(void* ctx);
static void fd_grad(double* grad, double* x, size_t n, loss_fn loss, void* ctx) {
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + FD_H;
        double lp = loss(ctx);
        x[i] = x0 - FD_H;
        double lm = loss(ctx);
        x[i] = x0;
        grad[i] = (lp - lm) / (2.0 * FD_H);
    }
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
/* memory ops */

static void test_memory(void) {
    printf("memory ops (backend %s)\n", ops_backend_name());
    ops_init(0);
    size_t n = 1000;
    float* a = (float*)ops_malloc(n * sizeof(float));
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= a[i] == 0.0f;
    expect_true("ops_malloc returns zero-filled memory", zero);
    float* src = rand_floats(n, 1.0f);
    float* b = (float*)ops_malloc(n * sizeof(float));
    float* back = falloc(n);
    ops_from_host(a, src, n * sizeof(float));
    ops_copy(b, a, n * sizeof(float));
    ops_to_host(back, b, n * sizeof(float));
    expect_true("from_host -> copy -> to_host round-trips bit-exactly", memcmp(back, src, n * sizeof(float)) == 0);
    floatX* x = (floatX*)ops_malloc(n * sizeof(floatX));
    ops_f32_to_X(x, src, n);
    ops_X_to_f32(back, x, n);
    expect_true("f32_to_X -> X_to_f32 round-trips bit-exactly (fp32 build)", memcmp(back, src, n * sizeof(float)) == 0);
    ops_f32_to_X(back, back, n); /* aliasing is legal on the CPU build */
    expect_true("f32_to_X with dst == src leaves the data", memcmp(back, src, n * sizeof(float)) == 0);
    ops_zero(b, n * sizeof(float));
    zero = 1;
    for (size_t i = 0; i < n; i++) zero &= b[i] == 0.0f;
    expect_true("ops_zero clears", zero);
    ops_sync();
    ops_free(a);
    ops_free(b);
    ops_free(x);
    free(src);
    free(back);
}

/* ======================================================================== */
/* embedding */

static void test_encoder(void) {
    printf("encoder (vocab-parallel) and position\n");
    const int N = 12, C = 10, Vp = 40;
    float* wte = rand_floats((size_t)Vp * C, 1.0f);
    int tok[12];
    for (int n = 0; n < N; n++) tok[n] = rng_int(Vp);
    tok[3] = tok[7] = tok[10] = 13; /* repeats: backward must add both */
    tok[0] = 0;
    tok[1] = Vp - 1;
    float* dout = rand_floats((size_t)N * C, 1.0f);

    /* full-table references */
    double* want_out = dalloc((size_t)N * C);
    double* want_dwte = dalloc((size_t)Vp * C);
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            want_out[(size_t)n * C + c] = wte[(size_t)tok[n] * C + c];
            want_dwte[(size_t)tok[n] * C + c] += dout[(size_t)n * C + c];
        }
    }

    for (int P = 1; P <= 4; P *= 2) {
        int Vr = Vp / P;
        float* sum = falloc((size_t)N * C);
        float* out = falloc((size_t)N * C);
        double* got_dwte = dalloc((size_t)Vp * C);
        int untouched = 1;
        for (int r = 0; r < P; r++) {
            int v0 = r * Vr;
            encoder_forward(out, tok, wte + (size_t)v0 * C, N, C, v0, Vr);
            for (size_t i = 0; i < (size_t)N * C; i++) sum[i] += out[i]; /* the all-reduce */
            /* the slice's dwte sits between guard rows that must stay untouched */
            size_t G = (size_t)C;
            float* buf = ffill((size_t)Vr * C + 2 * G, 7.0f);
            float* dwte = buf + G;
            memset(dwte, 0, (size_t)Vr * C * sizeof(float));
            encoder_backward(dwte, dout, tok, N, C, v0, Vr);
            for (size_t i = 0; i < G; i++) untouched &= buf[i] == 7.0f && buf[G + (size_t)Vr * C + i] == 7.0f;
            for (size_t i = 0; i < (size_t)Vr * C; i++) got_dwte[(size_t)v0 * C + i] = dwte[i];
            free(buf);
        }
        char what[96];
        float* got = falloc((size_t)Vp * C);
        for (size_t i = 0; i < (size_t)Vp * C; i++) got[i] = (float)got_dwte[i];
        snprintf(what, sizeof what, "encoder fwd, P=%d slices summed == full lookup", P);
        expect(what, rel_err(sum, want_out, (size_t)N * C), 0.0); /* one non-zero term: exact */
        snprintf(what, sizeof what, "encoder bwd, P=%d slices == full scatter-add", P);
        expect(what, rel_err(got, want_dwte, (size_t)Vp * C), TOL_FWD);
        snprintf(what, sizeof what, "encoder bwd, P=%d writes only inside its slice", P);
        expect_true(what, untouched);
        free(sum);
        free(out);
        free(got);
        free(got_dwte);
    }
    /* accumulate: a second call doubles dwte */
    float* dwte = falloc((size_t)Vp * C);
    encoder_backward(dwte, dout, tok, N, C, 0, Vp);
    encoder_backward(dwte, dout, tok, N, C, 0, Vp);
    double* want2 = dalloc((size_t)Vp * C);
    for (size_t i = 0; i < (size_t)Vp * C; i++) want2[i] = 2.0 * want_dwte[i];
    expect("encoder bwd accumulates (called twice == 2x)", rel_err(dwte, want2, (size_t)Vp * C), TOL_FWD);

    /* position embedding */
    const int B = 3, T = 4;
    float* x = rand_floats((size_t)B * T * C, 1.0f);
    float* wpe = rand_floats((size_t)T * C, 1.0f);
    double* want = dcopy(x, (size_t)B * T * C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) want[((size_t)b * T + t) * C + c] += wpe[(size_t)t * C + c];
    position_forward(x, wpe, B, T, C);
    expect("position fwd: x += wpe[t]", rel_err(x, want, (size_t)B * T * C), TOL_FWD);
    float* dx = rand_floats((size_t)B * T * C, 1.0f);
    float* dwpe = ffill((size_t)T * C, 0.5f); /* non-zero start: must accumulate */
    double* wdwpe = dalloc((size_t)T * C);
    for (size_t i = 0; i < (size_t)T * C; i++) wdwpe[i] = 0.5;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) wdwpe[(size_t)t * C + c] += dx[((size_t)b * T + t) * C + c];
    position_backward(dwpe, dx, B, T, C);
    expect("position bwd: dwpe += sum_b dx (accumulates)", rel_err(dwpe, wdwpe, (size_t)T * C), TOL_FWD);

    free(wte); free(dout); free(want_out); free(want_dwte); free(dwte); free(want2);
    free(x); free(wpe); free(want); free(dx); free(dwpe); free(wdwpe);
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
    layernorm_backward(dinp, dw, db, r, x, w, mean, rstd, N, C);
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
    layernorm_backward(dinp, dw, db, r, x, w, mean, rstd, N, C);
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

/* ======================================================================== */
/* vocab-parallel cross-entropy */

static void test_crossentropy_case(int N, int V, int Vp, int P, const int* targets) {
    char what[112];
    int Vr = Vp / P;
    float dloss = 1.0f / N;
    float* logits = rand_floats((size_t)N * Vp, 4.0f);
    /* padding logits larger than every real one: any leak into the max, the
     * sum or the gradient shows */
    /* rows shifted far up and down: exp overflows or underflows to 0 unless
     * the max over the real columns is subtracted first */
    for (int v = 0; v < Vp; v++) {
        logits[(size_t)1 * Vp + v] += 120.0f;
        logits[(size_t)2 * Vp + v] -= 120.0f;
    }
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) logits[(size_t)n * Vp + v] = 50.0f;

    /* reference: full-vocab log-softmax in double */
    double* wloss = dalloc((size_t)N);
    double* wgrad = dalloc((size_t)N * Vp);
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        double mx = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        for (int v = 0; v < V; v++) sum += exp(l[v] - mx);
        wloss[n] = -(l[targets[n]] - mx - log(sum));
        for (int v = 0; v < V; v++)
            wgrad[(size_t)n * Vp + v] = (exp(l[v] - mx) / sum - (v == targets[n])) * dloss;
    }

    /* each slice runs the three calls; the test plays the all-reduces */
    float** slice = (float**)mallocCheck((size_t)P * sizeof(float*));
    float* mx = ffill((size_t)N, -INFINITY);
    float* stats = falloc((size_t)2 * N);
    float* part_mx = falloc((size_t)N);
    float* part_stats = falloc((size_t)2 * N);
    for (int r = 0; r < P; r++) {
        slice[r] = falloc((size_t)N * Vr);
        for (int n = 0; n < N; n++)
            memcpy(slice[r] + (size_t)n * Vr, logits + (size_t)n * Vp + (size_t)r * Vr, (size_t)Vr * sizeof(float));
        crossentropy_max(part_mx, slice[r], N, Vr, r * Vr, V);
        for (int n = 0; n < N; n++) mx[n] = part_mx[n] > mx[n] ? part_mx[n] : mx[n]; /* MAX */
    }
    for (int r = 0; r < P; r++) {
        crossentropy_stats(part_stats, slice[r], mx, targets, N, Vr, r * Vr, V);
        for (int i = 0; i < 2 * N; i++) stats[i] += part_stats[i]; /* SUM */
    }
    double loss_err = 0.0, grad_err = 0.0;
    int pad_zero = 1;
    float* losses = falloc((size_t)N);
    float* got = falloc((size_t)N * Vp);
    for (int r = 0; r < P; r++) {
        crossentropy_backward(slice[r], losses, mx, stats, targets, N, Vr, r * Vr, V, dloss);
        loss_err = fmax(loss_err, rel_err(losses, wloss, (size_t)N)); /* every slice gets the loss */
        for (int n = 0; n < N; n++)
            for (int j = 0; j < Vr; j++) {
                int v = r * Vr + j;
                got[(size_t)n * Vp + v] = slice[r][(size_t)n * Vr + j];
                if (v >= V) pad_zero &= slice[r][(size_t)n * Vr + j] == 0.0f;
            }
    }
    grad_err = rel_err(got, wgrad, (size_t)N * Vp);
    snprintf(what, sizeof what, "crossentropy V=%d Vp=%d P=%d: losses vs double log-softmax", V, Vp, P);
    expect(what, loss_err, TOL_LOSS);
    snprintf(what, sizeof what, "crossentropy V=%d Vp=%d P=%d: dlogits vs (softmax - onehot)*dloss", V, Vp, P);
    expect(what, grad_err, TOL_GRAD);
    snprintf(what, sizeof what, "crossentropy V=%d Vp=%d P=%d: padding columns get exactly 0", V, Vp, P);
    expect_true(what, pad_zero);

    for (int r = 0; r < P; r++) free(slice[r]);
    free(slice); free(mx); free(stats); free(part_mx); free(part_stats); free(losses); free(got);
    free(logits); free(wloss); free(wgrad);
}

static void test_crossentropy(void) {
    printf("vocab-parallel cross-entropy\n");
    /* targets in every slice of P = 4 (slices of 10: [0,10) [10,20) [20,30)
     * [30,40)), on slice edges, and the last real id 36 */
    int targets[8] = {0, 9, 10, 19, 25, 30, 36, 5};
    for (int P = 1; P <= 4; P *= 2) test_crossentropy_case(8, 37, 40, P, targets);
    /* V = 25 leaves slice 3 of P = 4 all padding: its max is -inf and it must
     * add nothing (and no NaN) */
    int targets2[8] = {0, 24, 10, 19, 20, 3, 24, 12};
    test_crossentropy_case(8, 25, 40, 4, targets2);
}

/* ======================================================================== */
/* AdamW */

static void test_adamw(void) {
    printf("adamw\n");
    const size_t n = 6;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float* master = rand_floats(n, 1.0f);
    float* param = falloc(n);
    float* m = falloc(n);
    float* v = falloc(n);
    float* g1 = rand_floats(n, 1.0f);
    float* g2 = rand_floats(n, 1.0f);
    double* wm = dalloc(n);
    double* wv = dalloc(n);
    double* ww = dcopy(master, n);
    for (int t = 1; t <= 2; t++) {
        const float* g = t == 1 ? g1 : g2;
        adamw_update(master, param, g, m, v, n, lr, b1, b2, eps, wd, gs, t);
        /* hand-written reference: Loshchilov & Hutter's AdamW */
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            wm[i] = b1 * wm[i] + (1.0 - b1) * gi;
            wv[i] = b2 * wv[i] + (1.0 - b2) * gi * gi;
            double mhat = wm[i] / (1.0 - pow(b1, t)), vhat = wv[i] / (1.0 - pow(b2, t));
            ww[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * ww[i]);
        }
        char what[96];
        snprintf(what, sizeof what, "adamw step %d: master", t);
        expect(what, rel_err(master, ww, n), TOL_FWD);
        snprintf(what, sizeof what, "adamw step %d: m, v", t);
        expect(what, fmax(rel_err(m, wm, n), rel_err(v, wv, n)), TOL_FWD);
        snprintf(what, sizeof what, "adamw step %d: param == master", t);
        expect_true(what, memcmp(param, master, n * sizeof(float)) == 0);
    }
    /* decoupled decay: with a zero gradient the adaptive term is 0 and the
     * step is exactly w *= (1 - lr*wd). (L2-in-the-gradient Adam would instead
     * move each weight by ~lr, normalised by sqrt(vhat).) Param aliases master. */
    float* w = rand_floats(n, 1.0f);
    float* zero = falloc(n);
    float* m0 = falloc(n);
    float* v0 = falloc(n);
    double* want = dalloc(n);
    for (size_t i = 0; i < n; i++) want[i] = w[i] * (1.0 - (double)lr * wd);
    adamw_update(w, w, zero, m0, v0, n, lr, b1, b2, eps, wd, 1.0f, 1);
    expect("adamw zero grad: w *= 1 - lr*wd (decoupled), param aliases master", rel_err(w, want, n), TOL_FWD);

    free(master); free(param); free(m); free(v); free(g1); free(g2); free(wm); free(wv); free(ww);
    free(w); free(zero); free(m0); free(v0); free(want);
}

/* ======================================================================== */
/* norms */

static void test_norms(void) {
    printf("sumsq, sum, all_finite\n");
    size_t n = 200003; /* several 65536-chunks and a ragged tail */
    float* x = rand_floats(n, 1.0f);
    long double s = 0.0L, s2 = 0.0L;
    for (size_t i = 0; i < n; i++) { s += x[i]; s2 += (long double)x[i] * x[i]; }
    /* double accumulation of 2e5 terms: ~1e-12 relative; 1e-10 is loose */
    expect("ops_sumsq vs long double", fabs(ops_sumsq(x, n) - (double)s2) / (double)s2, 1e-10);
    expect("ops_sum vs long double", fabs(ops_sum(x, n) - (double)s) / fabs((double)s), 1e-10);
    expect_true("ops_sumsq of n = 0 is 0", ops_sumsq(x, 0) == 0.0);
    expect_true("ops_all_finite on finite data", ops_all_finite(x, n) == 1);
    x[n - 1] = NAN;
    expect_true("ops_all_finite sees a NaN in the last element", ops_all_finite(x, n) == 0);
    x[n - 1] = 0.0f;
    x[70000] = -INFINITY;
    expect_true("ops_all_finite sees -inf", ops_all_finite(x, n) == 0);
    free(x);
}

/* ======================================================================== */
/* determinism across thread counts */

static void test_determinism(void) {
    printf("determinism across OpenMP thread counts\n");
    int saved = omp_get_max_threads();
    const int N = 67, IC = 96, OC = 80;
    const int B = 2, T = 33, NH = 3, hs = 16;
    size_t C3 = (size_t)3 * NH * hs, Co = (size_t)NH * hs;
    float* x = rand_floats((size_t)N * IC, 1.0f);
    float* w = rand_floats((size_t)OC * IC, 1.0f);
    float* dout = rand_floats((size_t)N * OC, 1.0f);
    float* qkv = rand_floats((size_t)B * T * C3, 2.0f);
    float* datt = rand_floats((size_t)B * T * Co, 1.0f);
    float* lnw = rand_floats((size_t)IC, 1.0f);
    int tok[67];
    for (int i = 0; i < N; i++) tok[i] = rng_int(5); /* many repeats */

    /* outputs per thread count: [0] with 1 thread, [1] with 2, [2] with 3 */
    float *mm_out[3], *mm_dinp[3], *mm_dw[3], *mm_db[3], *att_out[3], *att_lse[3], *att_d[3];
    float *ln_dinp[3], *ln_dw[3], *enc_dw[3];
    double sumsq[3];
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(k + 1);
        mm_out[k] = falloc((size_t)N * OC);
        mm_dinp[k] = falloc((size_t)N * IC);
        mm_dw[k] = ffill((size_t)OC * IC, 0.25f);
        mm_db[k] = falloc((size_t)OC);
        matmul_forward(mm_out[k], x, w, NULL, N, IC, OC);
        matmul_backward(mm_dinp[k], mm_dw[k], mm_db[k], dout, x, w, N, IC, OC);
        att_out[k] = falloc((size_t)B * T * Co);
        att_lse[k] = falloc((size_t)B * NH * T);
        att_d[k] = falloc((size_t)B * T * C3);
        attention_forward(att_out[k], att_lse[k], qkv, B, T, NH, hs);
        attention_backward(att_d[k], datt, qkv, att_out[k], att_lse[k], B, T, NH, hs);
        float* lnout = falloc((size_t)N * IC);
        float* mean = falloc((size_t)N);
        float* rstd = falloc((size_t)N);
        ln_dinp[k] = falloc((size_t)N * IC);
        ln_dw[k] = falloc((size_t)IC);
        float* lndb = falloc((size_t)IC);
        layernorm_forward(lnout, mean, rstd, x, lnw, lnw, N, IC);
        layernorm_backward(ln_dinp[k], ln_dw[k], lndb, x, x, lnw, mean, rstd, N, IC);
        enc_dw[k] = falloc((size_t)5 * IC);
        encoder_backward(enc_dw[k], x, tok, N, IC, 0, 5);
        sumsq[k] = ops_sumsq(x, (size_t)N * IC);
        free(lnout); free(mean); free(rstd); free(lndb);
    }
    omp_set_num_threads(saved);
#define SAME(arr, n) (memcmp(arr[0], arr[1], (n) * sizeof(float)) == 0 && memcmp(arr[0], arr[2], (n) * sizeof(float)) == 0)
    expect_true("matmul_forward bit-identical with 1, 2, 3 threads", SAME(mm_out, (size_t)N * OC));
    expect_true("matmul_backward dinp, dw, dbias bit-identical with 1, 2, 3 threads",
                SAME(mm_dinp, (size_t)N * IC) && SAME(mm_dw, (size_t)OC * IC) && SAME(mm_db, (size_t)OC));
    expect_true("attention_forward out, lse bit-identical with 1, 2, 3 threads",
                SAME(att_out, (size_t)B * T * Co) && SAME(att_lse, (size_t)B * NH * T));
    expect_true("attention_backward dqkv bit-identical with 1, 2, 3 threads", SAME(att_d, (size_t)B * T * C3));
    expect_true("layernorm_backward dinp, dw bit-identical with 1, 2, 3 threads",
                SAME(ln_dinp, (size_t)N * IC) && SAME(ln_dw, (size_t)IC));
    expect_true("encoder_backward bit-identical with 1, 2, 3 threads", SAME(enc_dw, (size_t)5 * IC));
    expect_true("ops_sumsq bit-identical with 1, 2, 3 threads", sumsq[0] == sumsq[1] && sumsq[0] == sumsq[2]);
#undef SAME
    for (int k = 0; k < 3; k++) {
        free(mm_out[k]); free(mm_dinp[k]); free(mm_dw[k]); free(mm_db[k]);
        free(att_out[k]); free(att_lse[k]); free(att_d[k]); free(ln_dinp[k]); free(ln_dw[k]); free(enc_dw[k]);
    }
    free(x); free(w); free(dout); free(qkv); free(datt); free(lnw);
}

int main(void) {
    printf("test_ops: CPU backend vs double references (%d OpenMP threads)\n", omp_get_max_threads());
    test_memory();
    test_encoder();
    test_layernorm();
    test_matmul();
    test_elementwise();
    test_attention();
    test_crossentropy();
    test_adamw();
    test_norms();
    test_determinism();
    printf("%s: %d of %d checks passed\n", g_failed ? "FAILED" : "PASSED", g_checks - g_failed, g_checks);
    return g_failed ? 1 : 0;
}
