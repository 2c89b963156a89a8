/*
 * tests/ops_testing.h - what the CPU op tests (tests/test_ops.c,
 * tests/test_ops_grad.c) share: the tolerances, the named checks and their
 * verdict, and the seeded random data.
 *
 * Errors are norm-wise: max_i |got_i - want_i| / max_i |want_i|. That is the
 * relative error an fp32 dot product or sum actually guarantees (a single
 * element near zero can have a large elementwise relative error after
 * cancellation while being perfectly accurate in absolute terms).
 */
#ifndef OPS_TESTING_H
#define OPS_TESTING_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "common/check.h"

/* ---- tolerances (norm-wise relative, see above) --------------------------
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

static int g_checks = 0, g_failed = 0;

/* record one named check: passes iff err <= tol (a NaN err fails) */
static inline void expect(const char* what, double err, double tol) {
    g_checks++;
    int ok = err <= tol;
    if (!ok) g_failed++;
    printf("  %s %-66s err %.2e (tol %.0e)\n", ok ? "ok  " : "FAIL", what, err, tol);
}

/* record a yes/no property (bitwise equality, untouched memory, ...) */
static inline void expect_true(const char* what, int cond) {
    g_checks++;
    if (!cond) g_failed++;
    printf("  %s %s\n", cond ? "ok  " : "FAIL", what);
}

/* max |got - want| / max |want| (absolute if want is all zero) */
static inline double rel_err(const float* got, const double* want, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= num)) num = d; /* keeps a NaN */
        if (fabs(want[i]) > den) den = fabs(want[i]);
    }
    return den > 0.0 ? num / den : num;
}

/* ---- finite differences ----------------------------------------------------
 * fd_grad perturbs x[i] of a double reference in place by +-h and differences
 * the loss; loss(ctx) reruns the reference forward on whatever its inputs
 * hold. h = 1e-5 on doubles: truncation error ~h^2 = 1e-10, rounding
 * ~1e-16 / h = 1e-11. */
#define FD_H 1e-5
typedef double (*loss_fn)(void* ctx);
static inline void fd_grad(double* grad, double* x, size_t n, loss_fn loss, void* ctx) {
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

/* ---- random numbers: splitmix64, so every run and machine sees the same data */
static uint64_t g_rng = 0x5eed1234abcdULL;
static inline uint64_t rng_next(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline float rng_uniform(void) { return (float)((rng_next() >> 40) / 16777216.0) * 2.0f - 1.0f; } /* [-1,1) */
static inline int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

static inline float* rand_floats(size_t n, float scale) {
    float* x = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_uniform();
    return x;
}
static inline double* dcopy(const float* x, size_t n) {
    double* d = (double*)mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static inline double* dalloc(size_t n) { return (double*)callocCheck(n, sizeof(double)); }
static inline float* falloc(size_t n) { return (float*)callocCheck(n, sizeof(float)); }
static inline float* ffill(size_t n, float v) {
    float* x = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}

/* prints the verdict line; the test's exit status */
static inline int checks_verdict(void) {
    printf("%s: %d of %d checks passed\n", g_failed ? "FAILED" : "PASSED", g_checks - g_failed, g_checks);
    return g_failed ? 1 : 0;
}

#endif /* OPS_TESTING_H */
