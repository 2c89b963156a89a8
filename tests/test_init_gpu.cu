/*
 * tests/test_init_gpu.cu - the device weight init (model.init = "device",
 * model/init_cuda.cu and gpt_init_random) on a GPU.
 *
 *   (a) tp      the full model assembled from the shards of every rank at
 *               P = 2 and P = 4 (params_copy_shard, to_local = 0) equals the
 *               P = 1 init bit for bit; also for a shape whose padded vocab
 *               changes with P (P = 3: Vp 768 instead of 512), on the real rows
 *   (b) seed    the same seed gives the same bits, another seed other values
 *   (c) rules   biases exactly 0, LayerNorm gains exactly 1, wte's padding
 *               rows exactly 0, no element left unwritten
 *   (d) values  every weight equals std_t times cuRAND's own stream read the
 *               plain way (one thread walking subsequence t from its start,
 *               curand_normal4 after curand_normal4), with std_t written out
 *               here independently of params.c; and each weight tensor's
 *               sample mean and std match 0 and std_t (tolerance below)
 *   (e) 350M    GPT-2 350M shape (L=24, C=1024, NH=16, V=50257, maxT=1024)
 *               at P = 1 through gpt_init_random("auto"): it picks the device
 *               (>= GPT_INIT_DEVICE_MIN_PARAMS), finishes in seconds, and
 *               every tensor has the right mean/std or constant; the small
 *               model under "auto" keeps the host init (the CPU build's bits)
 *               and the bf16 working copy is round-to-nearest of the master.
 *   (f) qwen2   a Qwen2 shape (GQA, untied LM head) at P = 1 and P = 2:
 *               bit-identical, Qwen2's rule (norm gains exactly 1, q/k/v
 *               biases exactly 0, every weight N(0, 0.02) by its moments),
 *               the padding rows of wte AND of the LM head exactly 0.
 *
 * Tolerance of (d) and (e): n independent N(0, s^2) values have a sample
 * mean with standard error s/sqrt(n) and a sample std with standard error
 * s/sqrt(2(n-1)) (the variance's is s^2 sqrt(2/(n-1)), halved in relative
 * terms by the square root). We allow 6 standard errors: a correct init
 * fails with probability ~2e-9 per check (and the seed is fixed, so a pass
 * is reproducible), while a wrong std (0.02 instead of 0.02/sqrt(2L) = 0.01
 * here) or a uniform draw is off by tens of standard errors even for the
 * smallest tensor (wpe, n = 4096: 6 SE of the std = 6.6% of s).
 *
 * Usage: build/gpu/test_init_gpu   (exit status 0 iff every check passes)
 */
#define OMPI_SKIP_MPICXX 1 /* gpt.h -> comm/sites.h -> mpi.h: its C API only (the C++ bindings do not build warning-free) */
#define MPICH_SKIP_MPICXX 1

#include <curand_kernel.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bf16.h"
#include "model/gpt.h"
#include "model/init_cuda.h"
#include "model/params.h"
#include "ops/cuda_common.cuh"
#include "tests/testing.h"

static const unsigned long long SEED = 1337;

/* Small GPT of the test: L=2, C=64, NH=4, V=300 (padded to 384), maxT=64. */
static GPTShape small_shape(int P) {
    GPTShape s = gpt2_shape(64, 300, params_padded_vocab(300, P), 2, 4, 64);
    return s;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t full_offset(const ParamLayout* pl, int t) {
    size_t o = 0;
    for (int k = 0; k < t; k++) o += pl->full[k];
    return o;
}

/* Values of tensor t that are real weights or constants: all but wte's padding rows. */
static size_t real_count(const ParamLayout* pl, int t) {
    return t == P_WTE ? (size_t)pl->s.V * pl->s.C : pl->full[t];
}

/* The GPT-2 rule, written out here rather than taken from params_init_std,
 * so a wrong rule there fails (d). 0 = a constant tensor. */
static float expected_std(int t, int L) {
    switch (t) {
    case P_WTE: case P_WPE: case P_QKVW: case P_FCW: return 0.02f;
    case P_ATTPROJW: case P_FCPROJW: return 0.02f / sqrtf(2.0f * (float)L);
    default: return 0.0f;
    }
}
static int is_gain(int t) { return t == P_LN1W || t == P_LN2W || t == P_LNFW; }

/* The full model as the device init at TP degree P builds it: each rank's
 * shard drawn on the device into a NaN-poisoned buffer, copied to the host
 * and written into its place. Elements no shard covers stay NaN. */
static float* device_full(GPTShape s, int P, unsigned long long seed) {
    ParamLayout pl0;
    params_layout(&pl0, s, P, 0);
    size_t n = params_full_count(&pl0);
    float* full = (float*)mallocCheck(n * sizeof(float));
    memset(full, 0xFF, n * sizeof(float));   /* 0xFFFFFFFF is a NaN */
    for (int r = 0; r < P; r++) {
        ParamLayout pl;
        params_layout(&pl, s, P, r);
        float* d = (float*)ops_malloc(pl.total * sizeof(float));
        CUDA_CHECK(cudaMemset(d, 0xFF, pl.total * sizeof(float)));
        params_init_device(&pl, d, seed);
        float* h = (float*)mallocCheck(pl.total * sizeof(float));
        ops_to_host(h, d, pl.total * sizeof(float));
        params_copy_shard(&pl, full, h, 0);
        free(h);
        ops_free(d);
    }
    return full;
}

/* ---- (a) TP degrees start identical ------------------------------------------------ */

/* Tensor by tensor on the real values, so models of different padded vocab compare. */
static void check_same_model(const char* what, const float* a, const ParamLayout* pla, const float* b,
                             const ParamLayout* plb) {
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        const float* x = a + full_offset(pla, t);
        const float* y = b + full_offset(plb, t);
        size_t n = real_count(pla, t), bad = 0, first = 0;
        for (size_t i = 0; i < n; i++) {
            if (memcmp(&x[i], &y[i], sizeof(float)) != 0 && bad++ == 0) first = i;
        }
        CHECK(bad == 0, "%s: %s differs in %zu of %zu values (first at %zu: %.9g vs %.9g)", what, PARAM_NAMES[t], bad,
              n, first, x[first], y[first]);
    }
}

static void test_tp(void) {
    ParamLayout pl1;
    params_layout(&pl1, small_shape(1), 1, 0);
    float* m1 = device_full(small_shape(1), 1, SEED);
    for (int P = 2; P <= 4; P *= 2) {
        ParamLayout plp;
        params_layout(&plp, small_shape(P), P, 0);
        float* mp = device_full(small_shape(P), P, SEED);
        char what[64];
        snprintf(what, sizeof(what), "P=%d vs P=1", P);
        CHECK(params_full_count(&plp) == params_full_count(&pl1), "%s: same padded size", what);
        CHECK(memcmp(mp, m1, params_full_count(&pl1) * sizeof(float)) == 0, "%s: assembled model differs", what);
        check_same_model(what, mp, &plp, m1, &pl1);
        free(mp);
    }
    free(m1);

    /* V = 400, NH = 6: Vp = 512 at P = 1, 2 but 768 at P = 3 (a multiple of 384) */
    GPTShape s1 = gpt2_shape(32, 400, params_padded_vocab(400, 1), 2, 6, 96);
    GPTShape s3 = s1;
    s3.Vp = params_padded_vocab(400, 3);
    ParamLayout pla, plb;
    params_layout(&pla, s1, 1, 0);
    params_layout(&plb, s3, 3, 0);
    CHECK(s1.Vp == 512 && s3.Vp == 768, "padded vocab %d / %d", s1.Vp, s3.Vp);
    float* a = device_full(s1, 1, SEED);
    float* b = device_full(s3, 3, SEED);
    check_same_model("P=3 (Vp 768) vs P=1 (Vp 512)", b, &plb, a, &pla);
    free(a);
    free(b);
    printf("  (a) TP degrees: P = 1, 2, 4 bit-identical; P = 3 with another padding identical on the real rows\n");
}

/* ---- (b) seeds ------------------------------------------------------------------------ */

static void test_seed(void) {
    ParamLayout pl;
    params_layout(&pl, small_shape(2), 2, 0);
    size_t n = params_full_count(&pl);
    float* a = device_full(small_shape(2), 2, SEED);
    float* b = device_full(small_shape(2), 2, SEED);
    float* c = device_full(small_shape(2), 2, SEED + 1);
    CHECK(memcmp(a, b, n * sizeof(float)) == 0, "two inits with the same seed differ");
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (expected_std(t, pl.s.L) == 0.0f) continue;
        const float* x = a + full_offset(&pl, t);
        const float* y = c + full_offset(&pl, t);
        size_t m = real_count(&pl, t), same = 0;
        for (size_t i = 0; i < m; i++) same += x[i] == y[i];
        /* independent draws coincide only by accident (a handful of equal floats at most) */
        CHECK(same * 1000 < m, "seed %llu and %llu: %zu of %zu values of %s equal", SEED, SEED + 1, same, m,
              PARAM_NAMES[t]);
    }
    free(a);
    free(b);
    free(c);
    printf("  (b) seeds: same seed bit-identical, another seed different\n");
}

/* ---- (c) constants and (d) values ------------------------------------------------------ */

/* cuRAND's stream of tensor t read sequentially by ONE thread: curand_init at
 * the start of subsequence t, then curand_normal4 over and over. The init
 * under test jumps straight to each counter instead; both must agree. */
__global__ void ref_normals_kernel(float* z, size_t n, unsigned long long seed, int t) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    curandStatePhilox4_32_10_t st;
    curand_init(seed, (unsigned long long)t, 0, &st);
    for (size_t e = 0; e < n; e += 4) {
        float4 v = curand_normal4(&st);
        float w[4] = {v.x, v.y, v.z, v.w};
        for (int k = 0; k < 4 && e + k < n; k++) z[e + k] = w[k];
    }
}

static float* ref_normals(size_t n, int t) {
    float* d = (float*)ops_malloc(n * sizeof(float));
    ref_normals_kernel<<<1, 1, 0, cuda_stream()>>>(d, n, SEED, t);
    CUDA_CHECK_LAUNCH("ref_normals_kernel");
    float* h = (float*)mallocCheck(n * sizeof(float));
    ops_to_host(h, d, n * sizeof(float));
    ops_free(d);
    return h;
}

/* mean and std of n values against 0 and s, within 6 standard errors (header) */
static void check_moments(const char* what, double sum, double sumsq, size_t n, double s) {
    double mean = sum / (double)n;
    double sd = sqrt((sumsq - (double)n * mean * mean) / (double)(n - 1));
    double se_mean = s / sqrt((double)n), se_sd = s / sqrt(2.0 * (double)(n - 1));
    CHECK(fabs(mean) <= 6 * se_mean, "%s: mean %.3g, more than 6 standard errors (%.3g) from 0", what, mean, se_mean);
    CHECK(fabs(sd - s) <= 6 * se_sd, "%s: std %.6g, expected %.6g within 6 standard errors (%.3g)", what, sd, s,
          se_sd);
    printf("    %-9s n=%-10zu mean %+.2e (6 SE %.1e)  std %.6f (target %.6f, 6 SE %.1e)\n", what, n, mean,
           6 * se_mean, sd, s, 6 * se_sd);
}

static void test_values(void) {
    ParamLayout pl;
    params_layout(&pl, small_shape(1), 1, 0);
    float* m = device_full(small_shape(1), 1, SEED);
    const GPTShape* s = &pl.s;
    printf("  (d) per-tensor moments of the small model:\n");
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        const float* x = m + full_offset(&pl, t);
        size_t n = real_count(&pl, t), nonfinite = 0;
        for (size_t i = 0; i < pl.full[t]; i++) nonfinite += !isfinite(x[i]);
        CHECK(nonfinite == 0, "%s: %zu values unwritten or not finite", PARAM_NAMES[t], nonfinite);
        float std = expected_std(t, s->L);
        if (std == 0.0f) {   /* (c) */
            float want = is_gain(t) ? 1.0f : 0.0f;
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += x[i] != want;
            CHECK(bad == 0, "%s: %zu of %zu values are not exactly %g", PARAM_NAMES[t], bad, n, want);
            continue;
        }
        float* z = ref_normals(n, t);
        size_t bad = 0, first = 0;
        double sum = 0.0, sumsq = 0.0;
        for (size_t i = 0; i < n; i++) {
            if (x[i] != std * z[i] && bad++ == 0) first = i;
            sum += x[i];
            sumsq += (double)x[i] * x[i];
        }
        CHECK(bad == 0, "%s: %zu of %zu values differ from std * cuRAND's sequential stream (first at %zu: %.9g vs "
              "%.9g)", PARAM_NAMES[t], bad, n, first, x[first], std * z[first]);
        check_moments(PARAM_NAMES[t], sum, sumsq, n, std);
        free(z);
    }
    size_t pad = 0;   /* (c) wte rows V..Vp-1 */
    const float* wte = m + full_offset(&pl, P_WTE);
    for (size_t i = real_count(&pl, P_WTE); i < pl.full[P_WTE]; i++) pad += wte[i] != 0.0f;
    CHECK(pad == 0, "wte padding rows: %zu values are not exactly 0", pad);
    CHECK(pl.full[P_WTE] > real_count(&pl, P_WTE), "the test shape has padding rows");
    free(m);
    printf("  (c) biases 0, gains 1, padding rows 0; (d) values = std * cuRAND stream\n");
}

/* ---- (e) through gpt_init_random ---------------------------------------------------------- */

/* "auto" on the small model keeps the host init (both builds' bits); "device"
 * fills the bf16 working weights from the master. */
static void test_gpt_small(void) {
    GPT m;
    gpt_init(&m, small_shape(2), 2, 1, 2, 16, 0);
    size_t n = m.pl.total;
    float* master = (float*)mallocCheck(n * sizeof(float));
    const char* how = gpt_init_random(&m, "auto", SEED);
    CHECK(strncmp(how, "host", 4) == 0, "auto on a %.2fM model ran '%s', expected host",
          (double)params_full_count(&m.pl) / 1e6, how);
    float* full = params_init_full(&m.pl, SEED);
    float* shard = (float*)mallocCheck(n * sizeof(float));
    params_copy_shard(&m.pl, full, shard, 1);
    gpt_get_shard(&m, master);
    CHECK(memcmp(master, shard, n * sizeof(float)) == 0, "auto (host) is not params_init_full sliced");

    how = gpt_init_random(&m, "device", SEED);
    CHECK(strncmp(how, "device", 6) == 0, "init=device ran '%s'", how);
    gpt_get_shard(&m, master);
    float* dev = device_full(small_shape(2), 2, SEED);
    params_copy_shard(&m.pl, dev, shard, 1);
    CHECK(memcmp(master, shard, n * sizeof(float)) == 0, "gpt_init_device's master is not rank 1's device shard");
    uint16_t* work = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
    ops_to_host(work, m.params, n * sizeof(uint16_t));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += work[i] != bf16_from_f32(master[i]);
    CHECK(bad == 0, "bf16 working weights: %zu of %zu are not the master rounded to nearest", bad, n);
    free(work);
    free(dev);
    free(full);
    free(shard);
    free(master);
    gpt_free(&m);
    printf("  (e) small model: auto -> host init (CPU build's bits); device -> working copy = bf16(master)\n");
}

static void test_gpt_350m(void) {
    GPTShape s = gpt2_shape(1024, 50257, params_padded_vocab(50257, 1), 24, 16, 1024);
    GPT m;
    gpt_init(&m, s, 1, 0, 1, 64, 0);
    const ParamLayout* pl = &m.pl;
    double t0 = now_s();
    const char* how = gpt_init_random(&m, "auto", SEED);
    double dt = now_s() - t0;
    printf("  (e) GPT-2 350M shape: init %s, %.1fM params, %.3f s\n", how, (double)params_full_count(pl) / 1e6, dt);
    CHECK(strncmp(how, "device", 6) == 0, "auto on %.1fM params ran '%s', expected device",
          (double)params_full_count(pl) / 1e6, how);
    /* the time is printed, not asserted (timings are for benchmark tables) */
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        const float* x = m.master + pl->offset[t];
        size_t n = real_count(pl, t);
        float std = expected_std(t, s.L);
        double sum = ops_sum(x, n), sumsq = ops_sumsq(x, n);
        if (std > 0.0f) {
            check_moments(PARAM_NAMES[t], sum, sumsq, n, std);
        } else if (is_gain(t)) {   /* sum = sumsq = n  <=>  sum (x-1)^2 = 0: every gain exactly 1 */
            CHECK(sum == (double)n && sumsq == (double)n, "%s: sum %.17g sumsq %.17g, not all exactly 1 (n=%zu)",
                  PARAM_NAMES[t], sum, sumsq, n);
        } else {
            CHECK(sumsq == 0.0, "%s: sum of squares %g, not all exactly 0", PARAM_NAMES[t], sumsq);
        }
    }
    size_t real = real_count(pl, P_WTE), pad = pl->full[P_WTE] - real;
    CHECK(pad > 0 && ops_sumsq(m.master + pl->offset[P_WTE] + real, pad) == 0.0, "wte padding rows are not all 0");
    CHECK(ops_all_finite(m.master, pl->total), "non-finite master weights");
    gpt_free(&m);
}

/* ---- (f) qwen2 ------------------------------------------------------------------------ */

static void test_qwen2(void) {
    /* L=2, C=64, NH=4 over KV=2, d_ff 96, V=300 (padded to 384), untied head */
    GPTShape s = gpt2_shape(64, 300, params_padded_vocab(300, 2), 2, 4, 64);
    s.arch = ARCH_QWEN2;
    s.KV = 2;
    s.F = 96;
    s.tied = 0;
    s.norm_eps = 1e-6f;
    s.rope_theta = 10000.0f;
    ParamLayout pl;
    params_layout(&pl, s, 1, 0);
    const size_t n = params_full_count(&pl);
    float* m1 = device_full(s, 1, SEED);
    float* m2 = device_full(s, 2, SEED);
    CHECK(memcmp(m1, m2, n * sizeof(float)) == 0, "qwen2: P=2 assembled model differs from P=1");
    for (int t = 0; t < Q_NUM; t++) {
        const float* x = m1 + full_offset(&pl, t);
        const char* name = params_tensor_name(&pl, t);
        const int vocab_rows = t == Q_WTE || t == Q_LMHEAD;
        const size_t real = vocab_rows ? (size_t)s.V * s.C : pl.full[t];
        size_t off_rule = 0;
        double sum = 0.0, sumsq = 0.0;
        for (size_t i = 0; i < pl.full[t]; i++) {
            if (i >= real) {   /* padding rows */
                off_rule += x[i] != 0.0f;
                continue;
            }
            sum += x[i];
            sumsq += (double)x[i] * x[i];
            if (t == Q_LN1W || t == Q_LN2W || t == Q_NORMW) off_rule += x[i] != 1.0f;
            if (t == Q_QKVB) off_rule += x[i] != 0.0f;
            if (x[i] != x[i]) off_rule++;   /* unwritten (NaN-poisoned) */
        }
        CHECK(off_rule == 0, "qwen2: %s: %zu values off the rule (padding 0, gains 1, biases 0, all written)", name,
              off_rule);
        if (t != Q_LN1W && t != Q_LN2W && t != Q_NORMW && t != Q_QKVB) check_moments(name, sum, sumsq, real, 0.02);
    }
    CHECK(pl.full[Q_LMHEAD] == (size_t)s.Vp * s.C, "qwen2: the untied LM head has %zu values", pl.full[Q_LMHEAD]);
    free(m1);
    free(m2);
    printf("  (f) qwen2: P = 1, 2 bit-identical; gains 1, q/k/v biases 0, wte and lm_head padding 0, weights N(0, 0.02)\n");
}

int main(void) {
    if (testing_begin("test_init_gpu") != 0) return 1;
    ops_init(0);
    printf("device weight init (cuRAND Philox4_32_10), seed %llu\n", SEED);
    test_tp();
    test_seed();
    test_values();
    test_gpt_small();
    test_gpt_350m();
    test_qwen2();
    return testing_end("test_init_gpu");
}
