/*
 * compress/taco.c - the FP8 group pipeline: adaptive scale, Hadamard,
 * dual-scale quantization, FP8 cast (TACO, and fp8_tensor / fp8_group as
 * special cases; see taco.h).
 *
 * The exact arithmetic, which the GPU kernels repeat bit for bit. It is
 * written so that each element costs as few operations as the method allows:
 * the Hadamard's normalisation and every power-of-two scale after it are ONE
 * multiply by one per-group constant. A chunk of n values is cut into groups
 * of G (the last one may be shorter); L = fp8_max(format); H_un is the
 * unnormalised butterfly network (hadamard_butterflies) and norm =
 * hadamard_norm(G). For each group:
 *
 *   1. a   = max |x_i| over its finite elements (NaN/inf are left out).
 *      e_u = adaptive ? -taco_pow2_fit(a, 1.0f) : 0    (smallest e: a*2^-e <= 1)
 *   2. y_i = x_i * 2^-e_u, and 0 for a nonfinite x_i  (exact unless subnormal)
 *   3. rotated = hadamard, the group is full (len == G) and it has no
 *      nonfinite element;  h = rotated ? H_un(y) : y,  n_g = rotated ? norm : 1
 *      amax_r = max|h_i| * n_g  (= max_i |h_i * n_g|, as rounding is monotonic:
 *      the amax of the orthonormal transform, from one multiply per group)
 * Then for each tile of c->tile elements (the whole chunk when 0; only when dual):
 *   4. A   = max amax_r over the tile (current), or p->delayed_amax (delayed)
 *      k_c = taco_pow2_fit(A, L / headroom)         (headroom: compress.h)
 *      second scale s = 2^k_c, written as fp32; s = 1 when dual is off
 * And for each group again:
 *   5. the wire exponent b and the cast exponent k_m:
 *        dual              b = e_u,  k_m = k_c
 *        !dual, adaptive   k_g = taco_pow2_fit(amax_r, L); b = clamp(e_u - k_g); k_m = e_u - b
 *                          (the group's own exponent now maps it onto the fp8 range)
 *        !dual, !adaptive  b = 0, k_m = 0                (a bare cast of the values)
 *      exponent byte = b + 127, as E8M0 (value 2^(byte - 127))
 *   6. M = n_g * 2^k_m (one float multiply, per group);  v_i = h_i * M;
 *      code_i = NaN code 0x7F        if x_i was nonfinite
 *               fp8 encode of v_i    otherwise, RNE or SR with the Philox word
 *                                    of (seed, stream, i), i = index in the chunk;
 *      |v_i| > L counts as saturated (the encoder clamps it). A NaN v_i can only
 *      come from overflow inside the transform (adaptive off, |x| near FLT_MAX)
 *      and is encoded as +L, also counted, so a NaN code always means
 *      "this input element was NaN or inf".
 * For data in the float's normal range this is the textbook pipeline
 * (scale, orthonormal transform, scale, cast) to the bit: a power-of-two
 * factor commutes with rounding there.
 *
 * Decode of a SUM of P compressed copies (P = 1 is a plain decode), per group.
 * Each copy's code f (exact fp8 value) is dequantised, with s the second
 * scale of the group's tile, as
 *   dq(f) = ldexpf(f, b - k)      when its scale s is a normal power of two 2^k
 *           ldexpf(f / s, b)      otherwise (bytes our encoders never write)
 * with b its group exponent (0 without group bytes). A copy's group is
 * "rotated" when hadamard is on, the group is full and none of its codes is
 * NaN: exactly the encoder's rule. The sum is formed in the ROTATED domain,
 * where the transform is linear:
 *   R_i   = dq(f_i) of the first rotated copy + those of the next ones, in order
 *   acc_i = H_un(R)_i * norm                 (one transform for all P copies)
 * then the unrotated copies' dq(f_i) are added in order (to acc, or starting
 * from the first of them when no copy is rotated). So P copies cost one
 * inverse transform, and a NaN input still comes back as NaN in its own slot
 * only: its copy's group skipped the rotation, on both sides.
 *
 * The fused recompress (compress.c's decompress_sum_recompress) keeps that
 * sum in the rotated domain: taco_decode_sum_rotated leaves a group whose
 * copies are all rotated as R (all NaN if R overflowed), and the encoder runs
 * on it with hadamard off: e_u from max |R|, n_g = 1, the rest unchanged. No
 * group it leaves as R holds a NaN code, so the decoder sees it rotated.
 *
 * The CPU reference makes two passes over a tile when its scale needs the
 * current amax (the GPU holds a tile in one block and makes one). The group
 * work is recomputed in pass 2 rather than stored: deterministic, and no
 * scratch allocation per call. Build with -ffp-contract=off.
 */
#include "compress/taco.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* Steps 1-3 for one group: h[0..len) gets the scaled (and maybe rotated,
 * unnormalised) values. Returns what step 5 and the statistics need. */
typedef struct {
    int e_unit;    /* the adaptive exponent e_u */
    int nonfinite; /* NaN/inf elements in the group */
    float n_g;     /* norm if rotated, else 1 */
    float amax_r;  /* max |h| * n_g, NaN-free */
} TacoGroup;

static TacoGroup taco_group_prepare(const TacoCfg* c, const float* x, int len, float* h) {
    TacoGroup g = {0, 0, 1.0f, 0.0f};
    float a = 0.0f;
    for (int j = 0; j < len; j++) {
        if (!isfinite(x[j])) { g.nonfinite++; continue; }
        float v = fabsf(x[j]);
        if (v > a) a = v;
    }
    g.e_unit = c->adaptive ? -taco_pow2_fit(a, 1.0f) : 0;
    float down = pow2f(-g.e_unit);
    for (int j = 0; j < len; j++) h[j] = isfinite(x[j]) ? x[j] * down : 0.0f;
    if (c->hadamard && len == c->G && g.nonfinite == 0) {
        hadamard_butterflies(h, len);
        g.n_g = hadamard_norm(len);
    }
    float amax_h = 0.0f;
    for (int j = 0; j < len; j++) {
        float v = fabsf(h[j]);
        if (v > amax_h) amax_h = v; /* comparison is false for NaN */
    }
    g.amax_r = amax_h * g.n_g;
    return g;
}

static void taco_check(const TacoCfg* c) {
    if (!hadamard_is_pow2(c->G) || c->G > TACO_GROUP_MAX) FATAL("taco: group length %d must be a power of two <= %d", c->G, TACO_GROUP_MAX);
}

void taco_encode(const TacoCfg* c, const float* x, size_t n, uint64_t stream, uint8_t* scales, uint8_t* exps,
                 uint8_t* codes, CompressStats* st) {
    taco_check(c);
    if (!exps && c->adaptive) FATAL("taco_encode: adaptive scale needs exponent bytes on the wire");
    const float L = fp8_max(c->format);
    const size_t G = (size_t)c->G;
    if (c->tile && c->tile % G) FATAL("taco_encode: tile %zu is not a multiple of the group length %zu", c->tile, G);
    float h[TACO_GROUP_MAX];
    int delayed = c->delayed_amax > 0.0f && isfinite(c->delayed_amax);
    CompressStats s = {0, 0, 0.0f};
    RngCursor rng;
    rng_cursor_init(&rng, c->seed, stream);

    const size_t span = c->tile ? c->tile : (n ? n : 1);
    /* tiles; without them one span for the whole chunk, which writes its scale even when n == 0 */
    for (size_t t0 = 0, ti = 0; t0 < n || (c->tile == 0 && ti == 0); t0 += span, ti++) {
        const size_t t1 = n - t0 < span ? n : t0 + span;
        /* pass 1 (current dual scale only): the tile's amax of the prepared values */
        int k_c = 0;
        if (c->dual) {
            float A = 0.0f;
            if (delayed) {
                A = c->delayed_amax;
            } else {
                for (size_t b0 = t0; b0 < t1; b0 += G) {
                    int len = (int)(t1 - b0 < G ? t1 - b0 : G);
                    TacoGroup g = taco_group_prepare(c, x + b0, len, h);
                    if (g.amax_r > A) A = g.amax_r;
                }
            }
            k_c = taco_pow2_fit(A, L / (delayed ? COMPRESS_HEADROOM_DELAYED : COMPRESS_HEADROOM_CURRENT));
        }
        const float scale = pow2f(k_c);
        memcpy(scales + 4 * ti, &scale, 4);

        /* pass 2: exponents and codes */
        for (size_t b0 = t0; b0 < t1; b0 += G) {
            const size_t gi = b0 / G;
            int len = (int)(t1 - b0 < G ? t1 - b0 : G);
            TacoGroup g = taco_group_prepare(c, x + b0, len, h);
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
            const float M = g.n_g * pow2f(k_m);

            for (int j = 0; j < len; j++) {
                size_t i = b0 + (size_t)j;
                if (!isfinite(x[i])) {
                    codes[i] = FP8_NAN_CODE;
                    continue;
                }
                float v = h[j] * M;
                if (!(fabsf(v) <= L)) {       /* beyond the range, or NaN from overflow */
                    s.saturated++;
                    if (isnan(v)) v = INFINITY; /* never emit a NaN code for a finite input */
                }
                codes[i] = c->stochastic ? fp8_encode_sr(v, c->format, rng_sr_word(&rng, i)) : fp8_encode(v, c->format);
            }
        }
    }
    *st = s;
}

/* exponent k if s is a normal power of two 2^k, else INT32_MIN */
static int pow2_exponent(float s) {
    int e;
    float m = frexpf(s, &e); /* s = m * 2^e, m in [0.5, 1) */
    if (!(s > 0.0f) || isinf(s) || m != 0.5f || e - 1 < -126) return INT32_MIN;
    return e - 1;
}

/* dq(f) of the header: ldexpf(f, b - k) for a power-of-two scale, else ldexpf(f / s, b) */
static float dequant(float f, int b, int k, float s) { return k != INT32_MIN ? ldexpf(f, b - k) : ldexpf(f / s, b); }

/* the encoder's rule, seen from the codes: hadamard on, a full group, no NaN code */
static int copy_rotated(const TacoCfg* c, const uint8_t* codes, int len) {
    if (!c->hadamard || len != c->G) return 0;
    for (int j = 0; j < len; j++)
        if (isnan(fp8_decode(codes[j], c->format))) return 0;
    return 1;
}

/* taco_decode_sum, and with keep its rotated-domain form: a group whose
 * copies are all rotated is left as R (all NaN if R overflowed). */
static void decode_sum(const TacoCfg* c, const TacoWireIn* in, int P, size_t n, float* out, int keep) {
    taco_check(c);
    if (P < 1) FATAL("taco_decode_sum: %d copies; at least 1", P);
    const size_t G = (size_t)c->G;
    const float norm = hadamard_norm(c->G);
    float R[TACO_GROUP_MAX];
    int* k = (int*)mallocCheck(sizeof(int) * (size_t)P);
    float* sc = (float*)mallocCheck(sizeof(float) * (size_t)P);
    for (size_t b0 = 0, gi = 0; b0 < n; b0 += G, gi++) {
        int len = (int)(n - b0 < G ? n - b0 : G);
        float* o = out + b0;
        if (b0 == 0 || (c->tile && b0 % c->tile == 0)) { /* a new tile: the copies' second scales */
            const size_t ti = c->tile ? b0 / c->tile : 0;
            for (int p = 0; p < P; p++) {
                sc[p] = 1.0f;
                if (in[p].scales) memcpy(&sc[p], in[p].scales + 4 * ti, 4);
                k[p] = pow2_exponent(sc[p]);
            }
        }
        /* the rotated copies, summed in the rotated domain, then one transform */
        int have = 0, late = 0;
        for (int p = 0; p < P; p++) {
            const uint8_t* cp = in[p].codes + b0;
            if (!copy_rotated(c, cp, len)) {
                late = 1;
                continue;
            }
            int b = in[p].exps ? (int)in[p].exps[gi] - 127 : 0;
            for (int j = 0; j < len; j++) {
                float d = dequant(fp8_decode(cp[j], c->format), b, k[p], sc[p]);
                R[j] = have ? R[j] + d : d;
            }
            have = 1;
        }
        if (keep && have && !late) { /* every copy rotated: R stays */
            int finite = 1;
            for (int j = 0; j < len; j++) finite = finite && isfinite(R[j]);
            /* an overflowed R: its inverse transform would be inf or NaN in
             * every slot (each output of the butterflies involves every
             * input), which the encoder sends as NaN codes alike: all NaN */
            for (int j = 0; j < len; j++) o[j] = finite ? R[j] : NAN;
            continue;
        }
        if (have) {
            hadamard_butterflies(R, len);
            for (int j = 0; j < len; j++) o[j] = R[j] * norm;
        }
        /* then the copies whose group was sent unrotated, in order */
        for (int p = 0; p < P && late; p++) {
            const uint8_t* cp = in[p].codes + b0;
            if (copy_rotated(c, cp, len)) continue;
            int b = in[p].exps ? (int)in[p].exps[gi] - 127 : 0;
            for (int j = 0; j < len; j++) {
                float d = dequant(fp8_decode(cp[j], c->format), b, k[p], sc[p]);
                o[j] = have ? o[j] + d : d;
            }
            have = 1;
        }
    }
    free(k);
    free(sc);
}

void taco_decode_sum(const TacoCfg* c, const TacoWireIn* in, int P, size_t n, float* out) {
    decode_sum(c, in, P, n, out, 0);
}

void taco_decode_sum_rotated(const TacoCfg* c, const TacoWireIn* in, int P, size_t n, float* out) {
    decode_sum(c, in, P, n, out, 1);
}
