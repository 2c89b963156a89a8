/*
 * tests/test_compress.c - every compressor on every kind of data.
 *
 * For each method (and the TACO ablations, both formats, RNE and SR, several
 * group sizes) on Gaussian, outlier-heavy, Student-t, dense near-zero,
 * all-zero, constant and tiny (~1e-30) data of sizes 1, 7, 1000 and 12345:
 * compress writes exactly compress_bound bytes (and not one more),
 * decompress(compress(x)) is within compress_error_bound, zeros come back
 * exactly, "none" is bit-exact, decompress_sum of one copy is decompress to
 * the bit. Then: NaN/inf stay in their own slot and are counted; stochastic
 * rounding is reproducible per (seed, stream) and differs across streams;
 * delayed scaling falls back, saturates and counts as documented; the Philox
 * generator matches Random123's known answers; TACO beats fp8_tensor on
 * outlier-heavy data; the fused recompress (taco's sum kept in the rotated
 * domain) equals a slow re-derivation from the wire bytes and keeps the
 * all-reduce's error. Prints an error table; exit status 0 when all pass.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "compress/compress.h"
#include "compress/methods.h"
#include "compress/rng.h"

#include "tests/testing.h"

/* ------------------------------------------------------------------------ */
/* data */

typedef enum { D_GAUSS, D_OUTLIERS, D_STUDENT_T, D_NEAR_ZERO, D_ZERO, D_CONSTANT, D_TINY, NUM_DISTS } Dist;
static const char* DIST_NAMES[NUM_DISTS] = {"gaussian", "outliers", "student_t", "near_zero", "zero", "constant", "tiny"};

static double uniform01(uint64_t stream, uint64_t i) { return (rng_u32(2024, stream, i) + 0.5) / 4294967296.0; }

static double gauss(uint64_t stream, uint64_t i) {
    double u1 = uniform01(stream, 2 * i), u2 = uniform01(stream, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void fill(float* x, size_t n, Dist d, uint64_t seed) {
    uint64_t s = seed * 16 + (uint64_t)d;
    for (size_t i = 0; i < n; i++) {
        double g = gauss(s, i);
        switch (d) {
        case D_GAUSS: x[i] = (float)g; break;
        case D_OUTLIERS: /* Gaussian plus a spike of 100-200x on ~1 element in 500 */
            x[i] = (float)g;
            if (uniform01(s + 1, i) < 0.002) x[i] = (float)((g < 0 ? -100.0 : 100.0) * (1.0 + uniform01(s + 2, i)));
            break;
        case D_STUDENT_T: { /* 3 degrees of freedom: g / sqrt(chi2_3 / 3) */
            double c = 0.0;
            for (int k = 0; k < 3; k++) {
                double z = gauss(s + 10 + (uint64_t)k, i);
                c += z * z;
            }
            x[i] = (float)(g / sqrt(c / 3.0));
            break;
        }
        case D_NEAR_ZERO: /* most ~1e-3, 1% of order 1 */
            x[i] = (float)(uniform01(s + 1, i) < 0.01 ? g : 1e-3 * g);
            break;
        case D_ZERO: x[i] = 0.0f; break;
        case D_CONSTANT: x[i] = 0.7f; break;
        case D_TINY: x[i] = (float)(1e-30 * g); break;
        default: break;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* helpers */

static double rel_err(const float* x, const float* y, size_t n) {
    double e = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)y[i] - (double)x[i];
        e += d * d;
        s += (double)x[i] * x[i];
    }
    if (s == 0.0) return e == 0.0 ? 0.0 : INFINITY;
    return sqrt(e / s);
}

#define GUARD 64
#define GUARD_BYTE 0xA5

/* One round trip with every structural check; returns the relative error. */
static double roundtrip(const CompressParams* p, const float* x, size_t n, uint64_t stream, float* y,
                        CompressStats* st, const char* what) {
    size_t bound = compress_bound(p, n);
    uint8_t* wire = malloc(bound + GUARD);
    memset(wire, GUARD_BYTE, bound + GUARD);
    size_t w = compress(p, x, n, stream, wire, st);
    CHECK(w == bound, "%s: compress returned %zu, bound %zu", what, w, bound);
    int overrun = 0;
    for (size_t i = bound; i < bound + GUARD; i++) overrun |= wire[i] != GUARD_BYTE;
    CHECK(!overrun, "%s: compress wrote past compress_bound", what);
    decompress(p, wire, n, y);

    /* decompress_sum of one copy is decompress, to the bit; of the copy and
     * itself, 2y (doubling is exact, in the rotated domain too) unless
     * something overflowed; 2y may round only in the subnormal range */
    float* one = malloc((n ? n : 1) * sizeof(float));
    const uint8_t* two[2] = {wire, wire};
    if (n) decompress_sum(p, two, 1, n, one);
    CHECK(memcmp(one, y, n * sizeof(float)) == 0, "%s: decompress_sum of 1 copy != decompress", what);
    if (n) decompress_sum(p, two, 2, n, one);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = y[i] + y[i];
        if (isnan(want) ? !isnan(one[i]) : (isfinite(want) && fabsf(want) > 1e-37f && one[i] != want)) bad++;
    }
    CHECK(bad == 0, "%s: decompress_sum of a copy and itself != 2 decompress in %zu of %zu elements", what, bad, n);
    free(one);
    free(wire);
    return rel_err(x, y, n);
}

/* The configurations under test: every method, the TACO ablations, SR, E5M2. */
typedef struct {
    const char* name;
    CompressMethod m;
    int hadamard, adaptive, dual, stochastic;
    Fp8Format format;
} Config;

static const Config CONFIGS[] = {
    {"none", CM_NONE, 1, 1, 1, 0, FP8_E4M3},
    {"bf16", CM_BF16, 1, 1, 1, 0, FP8_E4M3},
    {"cast", CM_CAST, 1, 1, 1, 0, FP8_E4M3},
    {"cast_e5m2", CM_CAST, 1, 1, 1, 0, FP8_E5M2},
    {"fp8_tensor", CM_FP8_TENSOR, 1, 1, 1, 0, FP8_E4M3},
    {"fp8_tensor_sr", CM_FP8_TENSOR, 1, 1, 1, 1, FP8_E4M3},
    {"fp8_group", CM_FP8_GROUP, 1, 1, 1, 0, FP8_E4M3},
    {"int8_group", CM_INT8_GROUP, 1, 1, 1, 0, FP8_E4M3},
    {"int8_group_sr", CM_INT8_GROUP, 1, 1, 1, 1, FP8_E4M3},
    {"taco", CM_TACO, 1, 1, 1, 0, FP8_E4M3},
    {"taco_sr", CM_TACO, 1, 1, 1, 1, FP8_E4M3},
    {"taco_e5m2", CM_TACO, 1, 1, 1, 0, FP8_E5M2},
    {"taco_e5m2_sr", CM_TACO, 1, 1, 1, 1, FP8_E5M2},
    {"taco-hadamard", CM_TACO, 0, 1, 1, 0, FP8_E4M3},
    {"taco-adaptive", CM_TACO, 1, 0, 1, 0, FP8_E4M3},
    {"taco-dual", CM_TACO, 1, 1, 0, 0, FP8_E4M3},
    {"taco-dual_sr", CM_TACO, 1, 1, 0, 1, FP8_E4M3},
    {"taco-adaptive-dual", CM_TACO, 1, 0, 0, 0, FP8_E4M3},
    {"taco-all", CM_TACO, 0, 0, 0, 0, FP8_E4M3},
};
#define NUM_CONFIGS ((int)(sizeof(CONFIGS) / sizeof(CONFIGS[0])))

static CompressParams params_of(const Config* c, int G) {
    CompressParams p;
    compress_params_default(&p, c->m);
    p.group_size = G;
    p.hadamard = c->hadamard;
    p.adaptive_scale = c->adaptive;
    p.dual_scale = c->dual;
    p.stochastic = c->stochastic;
    p.format = c->format;
    p.seed = 1234;
    return p;
}

/* A bare cast (no scale at all) only promises its bound for data inside the
 * format's normal range; everything else scales first. */
static int is_bare_cast(const CompressParams* p) {
    return p->method == CM_CAST || (p->method == CM_TACO && !p->adaptive_scale && !p->dual_scale);
}
static int in_cast_range(Dist d) { return d == D_GAUSS || d == D_ZERO || d == D_CONSTANT || d == D_STUDENT_T; }

/* ------------------------------------------------------------------------ */
/* the sweep */

static void test_sweep(void) {
    const size_t sizes[] = {1, 7, 1000, 12345};
    const int groups[] = {16, 64, 256};
    float* x = malloc(12345 * sizeof(float));
    float* y = malloc(12345 * sizeof(float));
    double table[NUM_CONFIGS][NUM_DISTS];

    for (int ci = 0; ci < NUM_CONFIGS; ci++) {
        for (int d = 0; d < NUM_DISTS; d++) {
            table[ci][d] = 0.0;
            for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
                for (size_t gi = 0; gi < sizeof(groups) / sizeof(groups[0]); gi++) {
                    size_t n = sizes[si];
                    CompressParams p = params_of(&CONFIGS[ci], groups[gi]);
                    char what[128];
                    snprintf(what, sizeof(what), "%s on %s n=%zu G=%d", CONFIGS[ci].name, DIST_NAMES[d], n, groups[gi]);
                    fill(x, n, (Dist)d, si * 10 + gi);
                    CompressStats st;
                    double err = roundtrip(&p, x, n, 5, y, &st, what);
                    double bound = compress_error_bound(&p);
                    CHECK(st.nonfinite == 0, "%s: nonfinite %llu on finite data", what, (unsigned long long)st.nonfinite);
                    if (p.method == CM_NONE) {
                        CHECK(memcmp(x, y, n * sizeof(float)) == 0, "%s: none is not bit-exact", what);
                    }
                    if (d == D_ZERO) {
                        int exact = 1;
                        for (size_t i = 0; i < n; i++) exact &= y[i] == 0.0f;
                        CHECK(exact, "%s: zeros did not come back as zeros", what);
                    }
                    if (!is_bare_cast(&p) || in_cast_range((Dist)d)) {
                        CHECK(err <= bound, "%s: rel err %.4g > bound %.4g", what, err, bound);
                        if (!(p.method == CM_TACO && p.delayed)) {
                            CHECK(st.saturated == 0, "%s: %llu saturated with current scaling", what,
                                  (unsigned long long)st.saturated);
                        }
                    }
                    if (n == 12345 && groups[gi] == 64) table[ci][d] = err;
                }
            }
        }
    }
    /* the table the README quotes: relative error, n = 12345, G = 64 */
    printf("relative error ||x_hat - x|| / ||x||, n = 12345, G = 64 (bound = compress_error_bound)\n");
    printf("%-20s", "config");
    for (int d = 0; d < NUM_DISTS; d++) printf(" %10s", DIST_NAMES[d]);
    printf(" %10s\n", "bound");
    for (int ci = 0; ci < NUM_CONFIGS; ci++) {
        CompressParams p = params_of(&CONFIGS[ci], 64);
        printf("%-20s", CONFIGS[ci].name);
        for (int d = 0; d < NUM_DISTS; d++) printf(" %10.3g", table[ci][d]);
        printf(" %10.3g\n", compress_error_bound(&p));
    }
    free(x);
    free(y);
}

/* ------------------------------------------------------------------------ */
/* special cases */

static void test_nonfinite(void) {
    const size_t n = 1000;
    float x[1000], y[1000];
    for (int ci = 0; ci < NUM_CONFIGS; ci++) {
        CompressParams p = params_of(&CONFIGS[ci], 64);
        fill(x, n, D_GAUSS, 77);
        x[5] = NAN;
        x[130] = INFINITY;
        x[131] = -INFINITY;
        x[999] = NAN; /* in the short tail group */
        CompressStats st;
        roundtrip(&p, x, n, 3, y, &st, CONFIGS[ci].name);
        CHECK(st.nonfinite == 4, "%s: nonfinite = %llu, want 4", CONFIGS[ci].name, (unsigned long long)st.nonfinite);
        CHECK(isfinite(st.amax), "%s: amax %g not finite", CONFIGS[ci].name, st.amax);
        int spread = 0;
        for (size_t i = 0; i < n; i++) {
            int bad_slot = i == 5 || i == 130 || i == 131 || i == 999;
            if (!bad_slot) spread += !isfinite(y[i]);
        }
        CHECK(spread == 0, "%s: NaN/inf spread to %d other elements", CONFIGS[ci].name, spread);
        if (p.method == CM_NONE || p.method == CM_BF16) {
            CHECK(isnan(y[5]) && y[130] == INFINITY && y[131] == -INFINITY, "%s keeps NaN and inf", CONFIGS[ci].name);
        } else if (p.method == CM_CAST) {
            /* the bare codec: NaN stays NaN, inf saturates */
            CHECK(isnan(y[5]) && y[130] == fp8_max(p.format) && y[131] == -fp8_max(p.format), "cast: NaN/inf");
        } else {
            CHECK(isnan(y[5]) && isnan(y[130]) && isnan(y[131]) && isnan(y[999]), "%s: nonfinite slots must decode NaN",
                  CONFIGS[ci].name);
        }
        /* the rest of the chunk is still compressed within the bound */
        if (!is_bare_cast(&p)) {
            float xf[1000], yf[1000];
            size_t m = 0;
            for (size_t i = 0; i < n; i++) {
                if (isfinite(x[i])) {
                    xf[m] = x[i];
                    yf[m] = y[i];
                    m++;
                }
            }
            double err = rel_err(xf, yf, m);
            CHECK(err <= compress_error_bound(&p), "%s: finite part rel err %g with NaN present", CONFIGS[ci].name, err);
        }
    }
}

static void test_stochastic(void) {
    const size_t n = 5000;
    float x[5000];
    fill(x, n, D_GAUSS, 3);
    const CompressMethod methods[] = {CM_CAST, CM_FP8_TENSOR, CM_FP8_GROUP, CM_INT8_GROUP, CM_TACO};
    for (size_t k = 0; k < sizeof(methods) / sizeof(methods[0]); k++) {
        CompressParams p;
        compress_params_default(&p, methods[k]);
        p.stochastic = 1;
        p.seed = 99;
        size_t b = compress_bound(&p, n);
        uint8_t* w1 = malloc(b);
        uint8_t* w2 = malloc(b);
        uint8_t* w3 = malloc(b);
        compress(&p, x, n, 11, w1, NULL);
        compress(&p, x, n, 11, w2, NULL);
        compress(&p, x, n, 12, w3, NULL);
        CHECK(memcmp(w1, w2, b) == 0, "%s SR: same seed and stream gave different bytes", compress_method_name(p.method));
        CHECK(memcmp(w1, w3, b) != 0, "%s SR: another stream gave the same bytes", compress_method_name(p.method));
        p.seed = 100;
        compress(&p, x, n, 11, w2, NULL);
        CHECK(memcmp(w1, w2, b) != 0, "%s SR: another seed gave the same bytes", compress_method_name(p.method));
        /* SR is unbiased: the average of many decodes approaches x */
        float* y = malloc(n * sizeof(float));
        double* mean = calloc(n, sizeof(double));
        const int R = 200;
        for (int r = 0; r < R; r++) {
            compress(&p, x, n, 1000 + (uint64_t)r, w1, NULL);
            decompress(&p, w1, n, y);
            for (size_t i = 0; i < n; i++) mean[i] += y[i] / R;
        }
        float* mf = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) mf[i] = (float)mean[i];
        compress(&p, x, n, 1000, w1, NULL);
        float* one = malloc(n * sizeof(float));
        decompress(&p, w1, n, one);
        double e_mean = rel_err(x, mf, n), e_one = rel_err(x, one, n);
        CHECK(e_mean < e_one / 5.0, "%s SR: mean of %d draws err %g vs one draw %g (not unbiased?)",
              compress_method_name(p.method), R, e_mean, e_one);
        free(y);
        free(mean);
        free(mf);
        free(one);
        free(w1);
        free(w2);
        free(w3);
    }
}

static void test_delayed(void) {
    const size_t n = 4096;
    float x[4096], y[4096];
    fill(x, n, D_OUTLIERS, 9);
    const CompressMethod methods[] = {CM_TACO, CM_FP8_TENSOR};
    for (size_t k = 0; k < 2; k++) {
        CompressParams p;
        compress_params_default(&p, methods[k]);
        const char* nm = compress_method_name(p.method);
        size_t b = compress_bound(&p, n);
        uint8_t* cur = malloc(b);
        uint8_t* del = malloc(b);
        CompressStats st_cur, st;
        compress(&p, x, n, 0, cur, &st_cur);
        CHECK(st_cur.amax > 0.0f, "%s: amax", nm);
        /* delayed without history falls back to current, bit for bit */
        p.delayed = 1;
        p.delayed_amax = 0.0f;
        compress(&p, x, n, 0, del, &st);
        CHECK(memcmp(cur, del, b) == 0, "%s: delayed with no history differs from current", nm);
        /* delayed with the true amax: within the bound, no saturation, same reported amax */
        p.delayed_amax = st_cur.amax;
        double err = roundtrip(&p, x, n, 0, y, &st, "delayed");
        CHECK(err <= compress_error_bound(&p) && st.saturated == 0, "%s: delayed(true amax) err %g sat %llu", nm, err,
              (unsigned long long)st.saturated);
        CHECK(st.amax == st_cur.amax, "%s: delayed must still report the current amax", nm);
        /* an amax predicted 8x too small: values saturate and are counted */
        p.delayed_amax = st_cur.amax / 8.0f;
        roundtrip(&p, x, n, 0, y, &st, "delayed too small");
        CHECK(st.saturated > 0, "%s: underestimated delayed amax should saturate", nm);
        int finite = 1;
        for (size_t i = 0; i < n; i++) finite &= isfinite(y[i]);
        CHECK(finite, "%s: saturation must stay finite", nm);
        free(cur);
        free(del);
    }
}

static void test_philox(void) {
    /* Random123's known-answer vectors for Philox4x32-10 */
    const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                 {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                 {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        rng_philox4x32_10(ctr[t], key[t], out);
        CHECK(memcmp(out, want[t], sizeof(out)) == 0, "Philox KAT %d: %08x %08x %08x %08x", t, out[0], out[1], out[2],
              out[3]);
    }
    /* the (seed, stream, i) mapping: counter {i/4, stream}, key seed, word i%4 */
    uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull, i = 0x100000007ull;
    uint32_t c[4] = {(uint32_t)(i >> 2), (uint32_t)(i >> 34), (uint32_t)stream, (uint32_t)(stream >> 32)};
    uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    rng_philox4x32_10(c, k, out);
    CHECK(rng_u32(seed, stream, i) == out[3], "rng_u32 mapping");
    RngCursor cur;
    rng_cursor_init(&cur, seed, stream);
    int same = 1;
    for (uint64_t j = 0; j < 40; j++) same &= rng_cursor_u32(&cur, j) == rng_u32(seed, stream, j);
    CHECK(same, "cursor and rng_u32 disagree");
}

/* Stochastic rounding's word (rng.h rng_sr_word): element i takes byte i % 4
 * of word i / 4, placed as r * 2^24 + 2^23. Then, for a value whose dropped
 * fraction is R = m / 512 + a hair, exactly the bytes r >= (511 - m) / 2
 * round it up: over all 256 bytes the count is floor((m + 1) / 2), R to the
 * nearest 1/256; an exact value never moves, and m = 511 moves for every
 * byte. */
static void test_sr_word(void) {
    const uint64_t seed = 77, stream = 5;
    RngCursor cur;
    rng_cursor_init(&cur, seed, stream);
    int same = 1;
    for (uint64_t i = 0; i < 100; i++) {
        const uint32_t r = (rng_u32(seed, stream, i / 4) >> (8 * (i % 4))) & 0xFFu;
        same &= rng_sr_word(&cur, i) == ((r << 24) | 0x800000u);
    }
    CHECK(same, "rng_sr_word: not byte i%%4 of word i/4 as r*2^24 + 2^23");
    /* E4M3 codes of 1 + (m + 0.25) / 512 units: 1.0 = code 0x38, one unit 2^-3 */
    for (int m = 0; m < 512; m += 1) {
        const float x = 1.0f + ((float)m + 0.25f) / 512.0f * 0x1p-3f;
        int ups = 0;
        for (uint32_t r = 0; r < 256; r++) ups += fp8_encode_sr(x, FP8_E4M3, (r << 24) | 0x800000u) == 0x39;
        CHECK(ups == (m + 1) / 2, "SR up-count at fraction %d/512: %d of 256 bytes, want %d", m, ups, (m + 1) / 2);
    }
    int moved = 0;
    for (uint32_t r = 0; r < 256; r++) moved += fp8_encode_sr(1.125f, FP8_E4M3, (r << 24) | 0x800000u) != 0x39;
    CHECK(moved == 0, "SR moved an exact value for %d bytes", moved);
}

/* The point of the method. TP activation gradients are rows (tokens) whose
 * magnitudes differ by orders of magnitude, with a few huge outliers. One
 * tensor-wide scale spends the fp8 range on the outliers and flushes the
 * quiet rows into the subnormals or to zero; TACO's per-group exponent lifts
 * every group to unit range first, so every row keeps its relative precision.
 * Measured per row (every token's gradient matters), TACO must win by 5x. */
static void test_taco_beats_tensor(void) {
    const size_t C = 768, rows = 32, n = C * rows;
    float* x = malloc(n * sizeof(float));
    float* yt = malloc(n * sizeof(float));
    float* yc = malloc(n * sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        double row_scale = pow(2.0, -24.0 * (double)r / (double)(rows - 1)); /* 1 .. 2^-24 */
        for (size_t c = 0; c < C; c++) {
            size_t i = r * C + c;
            double v = row_scale * gauss(4242, i);
            if (uniform01(4243, i) < 0.002) v *= 100.0; /* outliers */
            x[i] = (float)v;
        }
    }
    CompressParams pt, pc;
    compress_params_default(&pt, CM_FP8_TENSOR);
    compress_params_default(&pc, CM_TACO);
    CompressStats st;
    double et = roundtrip(&pt, x, n, 0, yt, &st, "fp8_tensor rows");
    double ec = roundtrip(&pc, x, n, 0, yc, &st, "taco rows");
    /* the mean over rows of the per-row relative error: every token counts */
    double mt = 0.0, mc = 0.0;
    for (size_t r = 0; r < rows; r++) {
        mt += rel_err(x + r * C, yt + r * C, C) / rows;
        mc += rel_err(x + r * C, yc + r * C, C) / rows;
    }
    printf("outlier-heavy rows (32 x 768, row scales 1..2^-24, 0.2%% 100x spikes):\n"
           "  whole-tensor rel err: fp8_tensor %.4g  taco %.4g\n"
           "  mean per-row rel err: fp8_tensor %.4g  taco %.4g\n", et, ec, mt, mc);
    CHECK(mc < mt / 5.0, "taco per-row error %.4g should be far below fp8_tensor's %.4g", mc, mt);
    /* The whole-tensor norm is dominated by the loud rows, where a log-spaced
     * grid gives both methods the same relative precision; the collapse of
     * the quiet rows is invisible in it. So here both only have to keep
     * their bound. */
    CHECK(ec <= compress_error_bound(&pc) && et <= compress_error_bound(&pt), "whole-tensor errors %.4g %.4g", ec, et);
    free(x);
    free(yt);
    free(yc);
}

/* bf16.h's integer rounding against the definition: the nearer of the two
 * bf16 neighbours of x (computed in double, where both and their midpoint
 * are exact), ties to the even one; overflow past the largest bf16 to inf. */
static uint16_t bf16_reference(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    uint16_t lo = (uint16_t)(b >> 16); /* truncation: the neighbour toward zero */
    if ((b & 0xFFFFu) == 0) return lo;
    uint16_t hi = (uint16_t)(lo + 1); /* away from zero (a carry moves the exponent: still the next value) */
    double dx = fabs((double)x), dl = fabs((double)bf16_to_f32(lo));
    double dh = (hi & 0x7FFFu) == 0x7F80u ? ldexp(1.0, 128) : fabs((double)bf16_to_f32(hi)); /* past max: as if 2^128 */
    if (dx - dl < dh - dx) return lo;
    if (dh - dx < dx - dl) return hi;
    return (lo & 1u) ? hi : lo;
}

static void test_bf16_rounding(void) {
    long bad = 0;
    uint32_t first = 0;
    uint64_t s = 99;
    /* every bf16 value's neighbourhood (the exact midpoints and one off
     * either side), plus random bit patterns */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const uint32_t lows[] = {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu};
        for (int k = 0; k < 6; k++) {
            uint32_t b = (h << 16) | lows[k];
            float x;
            memcpy(&x, &b, 4);
            if (isnan(x)) continue;
            if (bf16_from_bits(b) != bf16_reference(x) && !bad++) first = b;
        }
    }
    for (int i = 0; i < 4000000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t b = (uint32_t)(s >> 32);
        float x;
        memcpy(&x, &b, 4);
        if (isnan(x)) continue;
        if (bf16_from_bits(b) != bf16_reference(x) && !bad++) first = b;
    }
    CHECK(bad == 0, "bf16 rounding: %ld patterns differ from round-to-nearest-even, first 0x%08x", bad, first);
    /* every NaN becomes the canonical 0x7FC0, even one with only low payload bits */
    CHECK(bf16_from_bits(0x7F800001u) == 0x7FC0u && bf16_from_bits(0xFF800001u) == 0x7FC0u &&
              bf16_from_bits(0xFFC00000u) == 0x7FC0u && bf16_from_bits(0x7FFFFFFFu) == 0x7FC0u,
          "bf16 NaN");
    CHECK(bf16_from_bits(0x7F800000u) == 0x7F80u && bf16_overflows(0x7F7FFFFFu) && !bf16_overflows(0x7F7F7FFFu) &&
              !bf16_overflows(0x7F800000u),
          "bf16 inf / overflow");
    /* on the wire: compress == bf16_from_f32 of each element, decode is exact */
    float x[257], y[257];
    fill(x, 257, D_OUTLIERS, 4);
    CompressParams p;
    compress_params_default(&p, CM_BF16);
    uint8_t wire[514];
    CHECK(compress(&p, x, 257, 0, wire, NULL) == 514, "bf16 size");
    decompress(&p, wire, 257, y);
    int ok = 1;
    for (int i = 0; i < 257; i++) ok &= y[i] == bf16_to_f32(bf16_from_f32(x[i]));
    CHECK(ok, "bf16 wire decodes to the rounded values");
}

static void test_api(void) {
    for (int m = 0; m < CM_NUM_METHODS; m++) {
        CompressMethod got;
        CHECK(compress_method_parse(compress_method_name((CompressMethod)m), &got) == 0 && got == (CompressMethod)m,
              "name/parse round trip for %d", m);
    }
    CompressMethod got;
    CHECK(compress_method_parse("fp16", &got) == -1, "unknown method parses");
    CompressParams p;
    compress_params_default(&p, CM_TACO);
    CHECK(compress_params_error(&p) == NULL, "defaults valid");
    p.group_size = 48;
    CHECK(compress_params_error(&p) != NULL, "G = 48 accepted");
    p.group_size = 512;
    CHECK(compress_params_error(&p) != NULL, "G = 512 accepted");
    p.group_size = 64;
    /* exact sizes: taco 4 ceil(n/8192) + ceil(n/G) + n (a scale per tile) */
    CHECK(compress_bound(&p, 1000) == 4 + 16 + 1000, "taco bound");
    CHECK(compress_bound(&p, 0) == 0, "taco bound n = 0");
    CHECK(compress_bound(&p, 8192) == 4 + 128 + 8192, "taco bound, one tile");
    CHECK(compress_bound(&p, 8193) == 8 + 129 + 8193, "taco bound, two tiles");
    p.method = CM_FP8_GROUP;
    CHECK(compress_bound(&p, 130) == 3 + 130, "fp8_group bound");
    p.method = CM_INT8_GROUP;
    CHECK(compress_bound(&p, 130) == 12 + 130, "int8_group bound");
    p.method = CM_FP8_TENSOR;
    CHECK(compress_bound(&p, 130) == 4 + 130, "fp8_tensor bound");
    p.method = CM_NONE;
    CHECK(compress_bound(&p, 130) == 520, "none bound");
    p.method = CM_BF16;
    CHECK(compress_bound(&p, 130) == 260, "bf16 bound");
    /* the taco switches do not change the baselines */
    float x[300], y1[300], y2[300];
    fill(x, 300, D_OUTLIERS, 1);
    const CompressMethod base[] = {CM_FP8_TENSOR, CM_FP8_GROUP, CM_INT8_GROUP};
    for (int k = 0; k < 3; k++) {
        CompressParams a, b;
        compress_params_default(&a, base[k]);
        b = a;
        b.hadamard = b.adaptive_scale = b.dual_scale = 0;
        CompressStats st;
        roundtrip(&a, x, 300, 0, y1, &st, "switch a");
        roundtrip(&b, x, 300, 0, y2, &st, "switch b");
        CHECK(memcmp(y1, y2, sizeof(y1)) == 0, "%s depends on the taco switches", compress_method_name(base[k]));
    }
}

/* A taco wire of two tiles is the two tiles' own wires, field by field: each
 * tile's second scale comes from its own data alone (one-pass current scaling). */
static void test_tiles(void) {
    const size_t T = COMPRESS_WIRE_TILE, n = 2 * T, G = 64;
    CompressParams p;
    compress_params_default(&p, CM_TACO);
    float* x = malloc(n * sizeof(float));
    /* tile 0 Gaussian, tile 1 constant: after the adaptive scale and the rotation a constant
     * group has all its energy in one coefficient (sqrt(G) = 8), a Gaussian one ~3, so the
     * second scales of the two tiles differ by 2^1-2^2 */
    for (size_t i = 0; i < n; i++) x[i] = i < T ? (float)gauss(77, i) : 3.0f;
    uint8_t* w = malloc(compress_bound(&p, n));
    uint8_t* a = malloc(compress_bound(&p, T));
    uint8_t* b = malloc(compress_bound(&p, T));
    compress(&p, x, n, 5, w, NULL);
    compress(&p, x, T, 5, a, NULL);
    compress(&p, x + T, T, 5, b, NULL);
    const size_t ng = T / G;
    CHECK(memcmp(w, a, 4) == 0 && memcmp(w + 4, b, 4) == 0, "tile scales are the tiles' own");
    CHECK(memcmp(w, w + 4, 4) != 0, "tiles of different shape get different scales");
    CHECK(memcmp(w + 8, a + 4, ng) == 0 && memcmp(w + 8 + ng, b + 4, ng) == 0, "group bytes by tile");
    CHECK(memcmp(w + 8 + 2 * ng, a + 4 + ng, T) == 0 && memcmp(w + 8 + 2 * ng + T, b + 4 + ng, T) == 0,
          "codes by tile");
    float* y = malloc(n * sizeof(float));
    decompress(&p, w, n, y);
    CHECK(rel_err(x + T, y + T, T) < compress_error_bound(&p), "the loud tile decodes within the bound");
    CHECK(rel_err(x, y, T) < compress_error_bound(&p), "the quiet tile decodes within the bound");
    free(x);
    free(w);
    free(a);
    free(b);
    free(y);
}

/* ------------------------------------------------------------------------ */
/* the fused recompress (decompress_sum_recompress), re-derived slowly        */

/* The rotated-domain sum from the wire bytes, without taco.c: copy p's
 * group is rotated iff it is full and holds no NaN code; its values are
 * ldexpf(code, b - k) (b: the exponent byte - 127, 2^k: the tile's scale).
 * A group whose copies are all rotated stays as their rank-order sum (all
 * NaN if it overflowed); every other group takes decompress_sum's values.
 * Then encoded as taco with the Hadamard off. */
static void slow_recompress(const CompressParams* p, const uint8_t* const* w, int P, size_t n, uint64_t stream,
                            uint8_t* out, int* stayed) {
    const CompressWireLayout l = compress_wire_layout(p);
    const size_t G = (size_t)p->group_size, go = compress_wire_groups_offset(&l, n), co = compress_wire_codes_offset(&l, n);
    float* z = malloc(n * sizeof(float));
    decompress_sum(p, w, P, n, z);
    *stayed = 0;
    for (size_t b0 = 0; b0 < n; b0 += G) {
        if (n - b0 < G) break; /* a short tail is never rotated */
        double r[256];
        int all = 1, finite = 1;
        for (int c = 0; c < P && all; c++) {
            float sc;
            memcpy(&sc, w[c] + 4 * (b0 / COMPRESS_WIRE_TILE), 4);
            int k;
            frexpf(sc, &k);
            const int b = (int)w[c][go + b0 / G] - 127;
            for (size_t j = 0; j < G; j++) {
                float v = fp8_decode(w[c][co + b0 + j], p->format);
                if (isnan(v)) all = 0;
                float d = ldexpf(v, b - (k - 1));
                r[j] = c == 0 ? d : (double)((float)r[j] + d); /* fp32 sums, in rank order */
            }
        }
        if (!all) continue;
        for (size_t j = 0; j < G; j++) finite = finite && isfinite((float)r[j]);
        for (size_t j = 0; j < G; j++) z[b0 + j] = finite ? (float)r[j] : NAN;
        (*stayed)++;
    }
    CompressParams q = *p;
    q.hadamard = 0;
    compress(&q, z, n, stream, out, NULL);
    free(z);
}

/* The fused recompress == the slow path, byte for byte; it sends no
 * transform's worth of error: the two-shot all-reduce (RS encode, the
 * recompress, decode) stays within the bound of two quantisations, and its
 * error within 2% of the order it replaced (decode, sum, compress). */
static void test_recompress(void) {
    const int Ps[] = {1, 2, 4};
    const Dist dists[] = {D_GAUSS, D_OUTLIERS, D_STUDENT_T, D_NEAR_ZERO, D_TINY};
    const size_t n = 3 * COMPRESS_WIRE_TILE + 64 * 5 + 17; /* tiles, and a short tail group */
    const char* cfgs[] = {"taco", "taco_sr", "taco_e5m2", "taco-adaptive", "taco-dual", "taco-adaptive-dual"};
    float** x = malloc(4 * sizeof(float*));
    uint8_t** w = malloc(4 * sizeof(uint8_t*));
    float* exact = malloc(n * sizeof(float));
    float* y = malloc(n * sizeof(float));
    float* z = malloc(n * sizeof(float));
    for (int i = 0; i < 4; i++) x[i] = malloc(n * sizeof(float));
    for (size_t ci = 0; ci < sizeof(cfgs) / sizeof(cfgs[0]); ci++) {
        const Config* cf = NULL;
        for (int i = 0; i < NUM_CONFIGS; i++)
            if (!strcmp(CONFIGS[i].name, cfgs[ci])) cf = &CONFIGS[i];
        for (int G = 16; G <= 256; G *= 4) {
            const CompressParams p = params_of(cf, G);
            const size_t bound = compress_bound(&p, n);
            for (int i = 0; i < 4; i++) w[i] = malloc(bound);
            uint8_t* fused = malloc(bound + GUARD);
            uint8_t* slow = malloc(bound);
            uint8_t* old = malloc(bound);
            for (int pi = 0; pi < 3; pi++)
                for (int di = 0; di < 5; di++) {
                    const int P = Ps[pi];
                    char what[120];
                    snprintf(what, sizeof(what), "recompress %s G=%d P=%d %s", cf->name, G, P, DIST_NAMES[dists[di]]);
                    for (size_t j = 0; j < n; j++) exact[j] = 0.0f;
                    for (int i = 0; i < P; i++) {
                        fill(x[i], n, dists[di], (uint64_t)(17 * i + 3 * di + G));
                        if (i == 1) x[i][70] = NAN; /* one copy's group unrotated: the sum leaves the rotated domain there */
                        compress(&p, x[i], n, 40 + (uint64_t)i, w[i], NULL);
                        for (size_t j = 0; j < n; j++) exact[j] += x[i][j];
                    }
                    memset(fused, GUARD_BYTE, bound + GUARD);
                    CompressStats st;
                    size_t got = decompress_sum_recompress(&p, (const uint8_t* const*)w, P, n, &p, 9, fused, &st);
                    int stayed, over = 0;
                    slow_recompress(&p, (const uint8_t* const*)w, P, n, 9, slow, &stayed);
                    for (size_t j = bound; j < bound + GUARD; j++) over |= fused[j] != GUARD_BYTE;
                    CHECK(got == bound && !over && memcmp(fused, slow, bound) == 0, "%s: fused != slow path", what);
                    CHECK(stayed >= (int)(n / (size_t)G) - 2, "%s: only %d groups stayed rotated", what, stayed);
                    CHECK(st.nonfinite == (P > 1 ? 1u : 0u), "%s: %llu nonfinite", what, (unsigned long long)st.nonfinite);
                    /* the error of the two-shot all-reduce, and of the order it replaced */
                    exact[70] = 0.0f;
                    decompress(&p, fused, n, y);
                    decompress_sum(&p, (const uint8_t* const*)w, P, n, z);
                    compress(&p, z, n, 9, old, NULL);
                    decompress(&p, old, n, z);
                    y[70] = z[70] = 0.0f;
                    const double e_new = rel_err(exact, y, n), e_old = rel_err(exact, z, n);
                    double sum_norm = 0.0, ex_norm = 0.0;
                    for (int i = 0; i < P; i++) {
                        x[i][70] = 0.0f;
                        double t = 0.0;
                        for (size_t j = 0; j < n; j++) t += (double)x[i][j] * x[i][j];
                        sum_norm += sqrt(t);
                    }
                    for (size_t j = 0; j < n; j++) ex_norm += (double)exact[j] * exact[j];
                    ex_norm = sqrt(ex_norm);
                    const double B = compress_error_bound(&p); /* each copy, then the sum: two quantisations */
                    const double bound2 = B * (sum_norm * (1.0 + B) + ex_norm) / ex_norm;
                    CHECK(e_new <= bound2 || (is_bare_cast(&p) && !in_cast_range(dists[di])), "%s: error %.4g above the two-stage bound %.4g", what, e_new, bound2);
                    CHECK(e_new <= 1.02 * e_old + 1e-9, "%s: error %.5g vs %.5g before", what, e_new, e_old);
                }
            for (int i = 0; i < 4; i++) free(w[i]);
            free(fused);
            free(slow);
            free(old);
        }
    }
    /* huge values: the rotated-domain sum overflows, those groups go out as NaN codes */
    {
        const CompressParams p = params_of(&CONFIGS[9], 64);
        const size_t m = 4096, bound = compress_bound(&p, m);
        uint8_t *fused = malloc(bound), *slow = malloc(bound);
        for (int i = 0; i < 2; i++) {
            w[i] = malloc(bound);
            fill(x[i], m, D_GAUSS, (uint64_t)(90 + i));
            for (size_t j = 0; j < m; j++) x[i][j] = (j < 2048 ? 3.0e38f : 1.0f) * (0.5f + 0.1f * fabsf(x[i][j]));
            compress(&p, x[i], m, (uint64_t)i, w[i], NULL);
        }
        CompressStats st;
        int stayed;
        decompress_sum_recompress(&p, (const uint8_t* const*)w, 2, m, &p, 5, fused, &st);
        slow_recompress(&p, (const uint8_t* const*)w, 2, m, 5, slow, &stayed);
        CHECK(memcmp(fused, slow, bound) == 0 && st.nonfinite > 0 && st.nonfinite % 64 == 0,
              "recompress of an overflowing sum: fused != slow path, or %llu nonfinite", (unsigned long long)st.nonfinite);
        for (int i = 0; i < 2; i++) free(w[i]);
        free(fused);
        free(slow);
    }
    /* only taco into taco stays rotated; other pairs are compress(decompress_sum) */
    CompressParams t = params_of(&CONFIGS[9], 64), g, h = t;
    compress_params_default(&g, CM_FP8_GROUP);
    h.hadamard = 0;
    CHECK(compress_sum_stays_rotated(&t, &t) && !compress_sum_stays_rotated(&t, &g) && !compress_sum_stays_rotated(&h, &t),
          "compress_sum_stays_rotated: taco only");
    for (int i = 0; i < 4; i++) free(x[i]);
    free(x);
    free(w);
    free(exact);
    free(y);
    free(z);
}

int main(void) {
    test_api();
    test_tiles();
    test_bf16_rounding();
    test_philox();
    test_sr_word();
    test_sweep();
    test_nonfinite();
    test_stochastic();
    test_delayed();
    test_taco_beats_tensor();
    test_recompress();
    if (failures) {
        printf("test_compress: %d check(s) FAILED\n", failures);
        return 1;
    }
    printf("test_compress: all checks passed\n");
    return 0;
}
