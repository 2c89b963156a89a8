/*
 * compress/taco.c - the FP8 group pipeline: adaptive scale, Hadamard,
 * dual-scale quantization, FP8 cast (TACO, and fp8_tensor / fp8_group as
 * special cases; see taco.h).
 *
 * The exact arithmetic, which the GPU kernels repeat operation for operation.
 * A chunk of n values is cut into groups of G (the last one may be shorter);
 * L = fp8_max(format). For each group:
 *
 *   1. a   = max |x_i| over its finite elements (NaN/inf are left out).
 *      e_u = adaptive ? -taco_pow2_fit(a, 1.0f) : 0    (smallest e: a*2^-e <= 1)
 *   2. y_i = x_i * 2^-e_u, and 0 for a nonfinite x_i  (exact)
 *   3. r   = hadamard_transform(y)  if hadamard, the group is full (len == G)
 *                                   and it has no nonfinite element;
 *            y                      otherwise ("rotated" = the first case)
 * Then for the chunk (only when dual):
 *   4. A   = max |r_i| over the chunk (current), or p->delayed_amax (delayed)
 *      k_c = taco_pow2_fit(A, L / headroom)         (headroom: compress.h)
 *      chunk scale s = 2^k_c, written as fp32; s = 1 when dual is off
 * And for each group again:
 *   5. the wire exponent b and the cast multiplier 2^k_m:
 *        dual              b = e_u,  k_m = k_c
 *        !dual, adaptive   k_g = taco_pow2_fit(max|r|, L); b = clamp(e_u - k_g); k_m = e_u - b
 *                          (the group's own exponent now maps it onto the fp8 range)
 *        !dual, !adaptive  b = 0, k_m = 0                (a bare cast of r)
 *      exponent byte = b + 127, as E8M0 (value 2^(byte - 127))
 *   6. v_i = r_i * 2^k_m (one multiply, exact unless it under/overflows);
 *      code_i = NaN code 0x7F        if x_i was nonfinite
 *               fp8 encode of v_i    otherwise, RNE or SR with the Philox word
 *                                    of (seed, stream, i), i = index in the chunk;
 *      |v_i| > L counts as saturated (the encoder clamps it). A NaN v_i can only
 *      come from overflow inside the transform (adaptive off, |x| near FLT_MAX)
 *      and is encoded as +L, also counted, so a NaN code always means
 *      "this input element was NaN or inf".
 * Decode, per group:
 *   d_i = fp8_decode(code_i) / s;  d = hadamard_transform(d) if hadamard, the
 *   group is full and no code in it is NaN (exactly the encoder's "rotated");
 *   x_hat_i = d_i * 2^b  (stored, or added to the accumulator).
 *
 * So a NaN or inf input comes back as NaN in its own slot and nowhere else:
 * its group skips the rotation (costing that group only the Hadamard's
 * benefit) and the statistics ignore it. Every scale is a power of two, so the
 * only roundings are in the Hadamard and the fp8 cast.
 *
 * The CPU reference makes two passes when the chunk scale needs the current
 * amax (the GPU does a reduction first, or uses the delayed amax and one pass).
 * The group work is recomputed in pass 2 rather than stored: deterministic,
 * and no scratch allocation per call. Build with -ffp-contract=off.
 */
#include "compress/taco.h"

#include <math.h>

#include "common/check.h"
#include "compress/hadamard.h"
#include "compress/rng.h"

/* 2^k, exact for the k used here ([-126, 126]). */
static float pow2f(int k) { return ldexpf(1.0f, k); }

static int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

int taco_pow2_fit(float amax, float limit) {
    if (!(amax > 0.0f)) return 0;
    if (isinf(amax)) return TACO_EXP_MIN;
    int ea, el;
    float ma = frexpf(amax, &ea);  /* amax  = ma * 2^ea, ma in [0.5, 1) */
    float ml = frexpf(limit, &el); /* limit = ml * 2^el */
    /* amax * 2^k <= limit  <=>  ma * 2^(ea + k) <= ml * 2^el */
    int k = el - ea - (ma > ml ? 1 : 0);
    return clampi(k, TACO_EXP_MIN, TACO_EXP_MAX);
}

/* Steps 1-3 for one group: r[0..len) gets the scaled (and maybe rotated)
 * values. Returns what step 5 and the statistics need. */
typedef struct {
    int e_unit;        /* the adaptive exponent e_u */
    int nonfinite;     /* NaN/inf elements in the group */
    float amax_r;      /* max |r|, NaN-free */
} TacoGroup;

static TacoGroup taco_group_prepare(const TacoCfg* c, const float* x, int len, float* r) {
    TacoGroup g = {0, 0, 0.0f};
    float a = 0.0f;
    for (int j = 0; j < len; j++) {
        if (!isfinite(x[j])) { g.nonfinite++; continue; }
        float v = fabsf(x[j]);
        if (v > a) a = v;
    }
    g.e_unit = c->adaptive ? -taco_pow2_fit(a, 1.0f) : 0;
    float down = pow2f(-g.e_unit);
    for (int j = 0; j < len; j++) r[j] = isfinite(x[j]) ? x[j] * down : 0.0f;
    if (c->hadamard && len == c->G && g.nonfinite == 0) hadamard_transform(r, len);
    for (int j = 0; j < len; j++) {
        float v = fabsf(r[j]);
        if (v > g.amax_r) g.amax_r = v; /* comparison is false for NaN */
    }
    return g;
}

static void taco_check(const TacoCfg* c) {
    if (!hadamard_is_pow2(c->G) || c->G > TACO_GROUP_MAX) FATAL("taco: group length %d must be a power of two <= %d", c->G, TACO_GROUP_MAX);
}

void taco_encode(const TacoCfg* c, const float* x, size_t n, uint64_t stream, float* scale, uint8_t* exps,
                 uint8_t* codes, CompressStats* st) {
    taco_check(c);
    if (!exps && c->adaptive) FATAL("taco_encode: adaptive scale needs exponent bytes on the wire");
    const float L = fp8_max(c->format);
    const size_t G = (size_t)c->G;
    float r[TACO_GROUP_MAX];
    int delayed = c->delayed_amax > 0.0f && isfinite(c->delayed_amax);

    /* pass 1 (current dual scale only): the chunk amax of the prepared values */
    int k_c = 0;
    if (c->dual) {
        float A = 0.0f;
        if (delayed) {
            A = c->delayed_amax;
        } else {
            for (size_t b0 = 0; b0 < n; b0 += G) {
                int len = (int)(n - b0 < G ? n - b0 : G);
                TacoGroup g = taco_group_prepare(c, x + b0, len, r);
                if (g.amax_r > A) A = g.amax_r;
            }
        }
        k_c = taco_pow2_fit(A, L / (delayed ? COMPRESS_HEADROOM_DELAYED : COMPRESS_HEADROOM_CURRENT));
    }
    *scale = pow2f(k_c);

    /* pass 2: exponents and codes */
    CompressStats s = {0, 0, 0.0f};
    RngCursor rng;
    rng_cursor_init(&rng, c->seed, stream);
    for (size_t b0 = 0, gi = 0; b0 < n; b0 += G, gi++) {
        int len = (int)(n - b0 < G ? n - b0 : G);
        TacoGroup g = taco_group_prepare(c, x + b0, len, r);
        s.nonfinite += (uint64_t)g.nonfinite;
        if (g.amax_r > s.amax) s.amax = g.amax_r;

        int b = 0, k_m = 0;
        if (c->dual) {
            b = g.e_unit;
            k_m = k_c;
        } else if (c->adaptive) {
            int k_g = taco_pow2_fit(g.amax_r, L / COMPRESS_HEADROOM_CURRENT);
            b = clampi(g.e_unit - k_g, TACO_EXP_MIN, TACO_EXP_MAX);
            k_m = g.e_unit - b;
        }
        if (exps) exps[gi] = (uint8_t)(b + 127);
        float m = pow2f(k_m);

        for (int j = 0; j < len; j++) {
            size_t i = b0 + (size_t)j;
            if (!isfinite(x[i])) {
                codes[i] = FP8_NAN_CODE;
                continue;
            }
            float v = r[j] * m;
            if (!(fabsf(v) <= L)) {       /* beyond the range, or NaN from overflow */
                s.saturated++;
                if (isnan(v)) v = INFINITY; /* never emit a NaN code for a finite input */
            }
            codes[i] = c->stochastic ? fp8_encode_sr(v, c->format, rng_cursor_u32(&rng, i)) : fp8_encode(v, c->format);
        }
    }
    *st = s;
}

void taco_decode(const TacoCfg* c, float scale, const uint8_t* exps, const uint8_t* codes, size_t n, float* out,
                 int accumulate) {
    taco_check(c);
    const size_t G = (size_t)c->G;
    float d[TACO_GROUP_MAX];
    for (size_t b0 = 0, gi = 0; b0 < n; b0 += G, gi++) {
        int len = (int)(n - b0 < G ? n - b0 : G);
        int has_nan = 0;
        for (int j = 0; j < len; j++) {
            d[j] = fp8_decode(codes[b0 + (size_t)j], c->format) / scale;
            if (isnan(d[j])) has_nan = 1;
        }
        if (c->hadamard && len == c->G && !has_nan) hadamard_transform(d, len);
        float up = exps ? pow2f((int)exps[gi] - 127) : 1.0f;
        float* o = out + b0;
        if (accumulate) {
            for (int j = 0; j < len; j++) o[j] += d[j] * up;
        } else {
            for (int j = 0; j < len; j++) o[j] = d[j] * up;
        }
    }
}
