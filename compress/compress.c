/*
 * compress/compress.c - the compress.h interface: parameters, wire layouts,
 * and the methods that are not the FP8 group pipeline (none, bf16, cast, int8_group).
 *
 * Wire layout of one chunk of n values (G = group_size, ng = ceil(n / G);
 * fp32 values little-endian, as on every host and GPU we run on):
 *
 *   none        [n fp32]                                 4n bytes, bit-exact
 *   cast        [n fp8]                                  n
 *   fp8_tensor  [fp32 chunk scale][n fp8]                4 + n
 *   fp8_group   [ng exponent bytes][n fp8]               ng + n
 *   int8_group  [ng fp32 group steps][n int8]            4 ng + n
 *   taco        [fp32 chunk scale][ng exponent bytes][n fp8]   4 + ng + n
 *   bf16        [n bf16]                                 2n, round to nearest even
 *
 * The taco layout is fixed whatever its switches: a disabled part is still
 * sent, holding its neutral value (scale 1.0f, exponent byte 127), so the
 * size depends on (method, G, n) only and the ablations pay the same bytes.
 * Exponent bytes are E8M0: value 2^(byte - 127), bytes 1..253 used.
 * The error bounds returned by compress_error_bound are derived in
 * compress/README.md. Build with -ffp-contract=off: decompress_reduce must
 * equal acc + decompress to the bit, which a fused multiply-add would break.
 */
#include "compress/compress.h"

#include <math.h>
#include <string.h>

#include "common/bf16.h"
#include "common/check.h"
#include "compress/hadamard.h"
#include "compress/rng.h"
#include "compress/taco.h"

static const char* METHOD_NAMES[CM_NUM_METHODS] = {"none", "cast", "fp8_tensor", "fp8_group", "int8_group", "taco", "bf16"};
#define NUM_METHODS ((int)CM_NUM_METHODS)

/* fp8_tensor has no groups on the wire; the pipeline still walks the chunk in
 * blocks, which with hadamard and adaptive off cannot change a single bit. */
#define FP8_TENSOR_BLOCK 256

/* ------------------------------------------------------------------------ */
/* parameters */

void compress_params_default(CompressParams* p, CompressMethod m) {
    memset(p, 0, sizeof(*p));
    p->method = m;
    p->format = FP8_E4M3;
    p->group_size = 64;
    p->hadamard = 1;
    p->adaptive_scale = 1;
    p->dual_scale = 1;
    p->stochastic = 0;
    p->seed = 0;
    p->delayed = 0;
    p->delayed_amax = 0.0f;
}

const char* compress_method_name(CompressMethod m) {
    return ((int)m >= 0 && (int)m < NUM_METHODS) ? METHOD_NAMES[m] : "unknown";
}

int compress_method_parse(const char* s, CompressMethod* out) {
    for (int i = 0; i < NUM_METHODS; i++) {
        if (strcmp(s, METHOD_NAMES[i]) == 0) {
            *out = (CompressMethod)i;
            return 0;
        }
    }
    return -1;
}

static int method_uses_groups(CompressMethod m) { return m == CM_FP8_GROUP || m == CM_INT8_GROUP || m == CM_TACO; }

const char* compress_params_error(const CompressParams* p) {
    if ((int)p->method < 0 || (int)p->method >= NUM_METHODS)
        return "unknown compression method (use none, bf16, cast, fp8_tensor, fp8_group, int8_group or taco)";
    if (p->format != FP8_E4M3 && p->format != FP8_E5M2) return "unknown fp8 format (use e4m3 or e5m2)";
    if (method_uses_groups(p->method) &&
        (p->group_size < 16 || p->group_size > TACO_GROUP_MAX || !hadamard_is_pow2(p->group_size)))
        return "group_size must be a power of two from 16 to 256";
    return NULL;
}

static void params_check(const CompressParams* p, const char* who) {
    const char* err = compress_params_error(p);
    if (err) FATAL("%s: invalid compression parameters (method %d, group_size %d): %s", who, (int)p->method,
                   p->group_size, err);
}

/* The pipeline configuration each FP8 method runs with (taco.h). */
static TacoCfg taco_cfg_of(const CompressParams* p) {
    TacoCfg c;
    c.format = p->format;
    c.G = p->group_size;
    c.stochastic = p->stochastic;
    c.seed = p->seed;
    c.delayed_amax = p->delayed ? p->delayed_amax : 0.0f;
    switch (p->method) {
    case CM_FP8_TENSOR: c.G = FP8_TENSOR_BLOCK; c.hadamard = 0; c.adaptive = 0; c.dual = 1; break;
    case CM_FP8_GROUP:  c.hadamard = 0; c.adaptive = 1; c.dual = 0; c.delayed_amax = 0.0f; break;
    default:            c.hadamard = p->hadamard != 0; c.adaptive = p->adaptive_scale != 0; c.dual = p->dual_scale != 0; break;
    }
    return c;
}

static size_t num_groups(const CompressParams* p, size_t n) {
    return (n + (size_t)p->group_size - 1) / (size_t)p->group_size;
}

size_t compress_bound(const CompressParams* p, size_t n) {
    params_check(p, "compress_bound");
    switch (p->method) {
    case CM_NONE: return 4 * n;
    case CM_CAST: return n;
    case CM_FP8_TENSOR: return 4 + n;
    case CM_FP8_GROUP: return num_groups(p, n) + n;
    case CM_INT8_GROUP: return 4 * num_groups(p, n) + n;
    case CM_TACO: return 4 + num_groups(p, n) + n;
    case CM_BF16: return 2 * n;
    case CM_NUM_METHODS: break;
    }
    return 0;
}

double compress_error_bound(const CompressParams* p) {
    params_check(p, "compress_error_bound");
    /* unit roundoff of the fp8 cast: half a unit in the last place relative
     * to the value for RNE, a whole unit for SR */
    double u = ldexp(1.0, -(fp8_mantissa_bits(p->format) + 1)) * (p->stochastic ? 2.0 : 1.0);
    switch (p->method) {
    case CM_NONE: return 0.0;
    case CM_BF16: return ldexp(1.0, -8); /* 8 significand bits, RNE: half an ulp */
    case CM_INT8_GROUP: {
        /* every element but the group's largest is off by at most half a step
         * (a whole step for SR), the largest is ~exact and is >= 127 steps */
        double steps = p->stochastic ? 127.0 : 254.0;
        return 1.01 * sqrt((double)(p->group_size - 1)) / steps;
    }
    default:
        /* cast, fp8_tensor, fp8_group, taco: u per element, plus a slack of
         * 10% for the subnormal floor and the fp32 transform (README.md) */
        return 1.1 * u;
    }
}

/* ------------------------------------------------------------------------ */
/* the methods outside the FP8 group pipeline */

static float amax_finite(const float* x, size_t n, uint64_t* nonfinite) {
    float a = 0.0f;
    uint64_t nf = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) { nf++; continue; }
        float v = fabsf(x[i]);
        if (v > a) a = v;
    }
    if (nonfinite) *nonfinite = nf;
    return a;
}

/* cast: the bare codec, no scale. NaN stays NaN, +-inf saturates (fp8.h). */
static void cast_encode(const CompressParams* p, const float* x, size_t n, uint64_t stream, uint8_t* codes,
                        CompressStats* st) {
    const float L = fp8_max(p->format);
    RngCursor rng;
    rng_cursor_init(&rng, p->seed, stream);
    for (size_t i = 0; i < n; i++) {
        if (isfinite(x[i]) && fabsf(x[i]) > L) st->saturated++;
        codes[i] = p->stochastic ? fp8_encode_sr(x[i], p->format, rng_cursor_u32(&rng, i)) : fp8_encode(x[i], p->format);
    }
}

/* int8_group: symmetric int8, one fp32 step per group, d = amax / 127 (IEEE
 * division), q = round(x / d) in [-127, 127]; -128 marks a NaN/inf input.
 * RNE is rintf (round half to even in the default rounding mode). SR rounds
 * the magnitude a = |x / d| up with probability frac(a), with the same 32-bit
 * fixed-point rule as fp8_encode_sr: F = (uint32)(frac(a) * 2^32), up iff
 * F + rnd >= 2^32 (frac(a) = a - floorf(a) is exact). */
#define INT8_NAN_CODE (-128)

static void int8_encode(const CompressParams* p, const float* x, size_t n, uint64_t stream, uint8_t* out,
                        CompressStats* st) {
    const size_t G = (size_t)p->group_size;
    uint8_t* q8 = out + 4 * num_groups(p, n);
    RngCursor rng;
    rng_cursor_init(&rng, p->seed, stream);
    for (size_t b0 = 0, gi = 0; b0 < n; b0 += G, gi++) {
        size_t len = n - b0 < G ? n - b0 : G;
        const float* xg = x + b0;
        float d = amax_finite(xg, len, NULL) / 127.0f;
        memcpy(out + 4 * gi, &d, 4);
        for (size_t j = 0; j < len; j++) {
            size_t i = b0 + j;
            int q;
            if (!isfinite(xg[j])) {
                q = INT8_NAN_CODE;
            } else if (d == 0.0f) {
                q = 0;
            } else {
                float t = xg[j] / d;
                float a = fabsf(t), r;
                if (p->stochastic) {
                    float fl = floorf(a);
                    uint32_t F = (uint32_t)((a - fl) * 4294967296.0f);
                    r = fl + (((uint64_t)F + rng_cursor_u32(&rng, i) >= 0x100000000ull) ? 1.0f : 0.0f);
                } else {
                    r = rintf(a);
                }
                if (r > 127.0f) { /* only when d was rounded down far (subnormal d) */
                    r = 127.0f;
                    st->saturated++;
                }
                q = (t < 0.0f) ? -(int)r : (int)r;
            }
            q8[i] = (uint8_t)(int8_t)q;
        }
    }
}

static void int8_decode(const CompressParams* p, const uint8_t* in, size_t n, float* out, int accumulate) {
    const size_t G = (size_t)p->group_size;
    const uint8_t* q8 = in + 4 * num_groups(p, n);
    for (size_t b0 = 0, gi = 0; b0 < n; b0 += G, gi++) {
        size_t len = n - b0 < G ? n - b0 : G;
        float d;
        memcpy(&d, in + 4 * gi, 4);
        for (size_t j = 0; j < len; j++) {
            int q = (int8_t)q8[b0 + j];
            float v = q == INT8_NAN_CODE ? NAN : (float)q * d;
            if (accumulate) out[b0 + j] += v;
            else out[b0 + j] = v;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* the interface */

/* Where the parts of an FP8 chunk sit on the wire: [fp32 chunk scale]
 * [one exponent byte per group][codes]; fp8_group has no chunk scale and
 * fp8_tensor no exponents. One description for the encoder and the decoder. */
typedef struct {
    int has_scale, has_exps;
    size_t exps, codes;   /* byte offsets */
} WireLayout;

static WireLayout wire_layout(const CompressParams* p, size_t n) {
    WireLayout w;
    w.has_scale = p->method != CM_FP8_GROUP;
    w.has_exps = p->method != CM_FP8_TENSOR;
    w.exps = w.has_scale ? 4 : 0;
    w.codes = w.exps + (w.has_exps ? num_groups(p, n) : 0);
    return w;
}

size_t compress(const CompressParams* p, const float* x, size_t n, uint64_t stream, uint8_t* out, CompressStats* st) {
    params_check(p, "compress");
    CompressStats s = {0, 0, 0.0f};
    switch (p->method) {
    case CM_NONE:
        if (n) memcpy(out, x, 4 * n);
        s.amax = amax_finite(x, n, &s.nonfinite);
        break;
    case CM_BF16:
        s.amax = amax_finite(x, n, &s.nonfinite);
        for (size_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &x[i], 4);
            uint16_t h = bf16_from_bits(b);
            memcpy(out + 2 * i, &h, 2);
            s.saturated += (uint64_t)bf16_overflows(b);
        }
        break;
    case CM_CAST:
        s.amax = amax_finite(x, n, &s.nonfinite);
        cast_encode(p, x, n, stream, out, &s);
        break;
    case CM_INT8_GROUP:
        s.amax = amax_finite(x, n, &s.nonfinite);
        int8_encode(p, x, n, stream, out, &s);
        break;
    case CM_FP8_TENSOR:
    case CM_FP8_GROUP:
    case CM_TACO: {
        TacoCfg c = taco_cfg_of(p);
        WireLayout w = wire_layout(p, n);
        float scale = 1.0f;
        taco_encode(&c, x, n, stream, &scale, w.has_exps ? out + w.exps : NULL, out + w.codes, &s);
        if (w.has_scale) memcpy(out, &scale, 4);
        /* without a chunk scale, report the input's amax: there is no scale
         * history to feed, and the raw magnitude is the useful number */
        if (p->method == CM_FP8_GROUP) s.amax = amax_finite(x, n, NULL);
        break;
    }
    case CM_NUM_METHODS: break; /* rejected by params_check */
    }
    if (st) *st = s;
    return compress_bound(p, n);
}

static void decompress_into(const CompressParams* p, const uint8_t* in, size_t n, float* out, int accumulate) {
    params_check(p, accumulate ? "decompress_reduce" : "decompress");
    switch (p->method) {
    case CM_NONE:
        for (size_t i = 0; i < n; i++) {
            float v;
            memcpy(&v, in + 4 * i, 4);
            if (accumulate) out[i] += v;
            else out[i] = v;
        }
        break;
    case CM_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, in + 2 * i, 2);
            float v = bf16_to_f32(h);
            if (accumulate) out[i] += v;
            else out[i] = v;
        }
        break;
    case CM_CAST:
        for (size_t i = 0; i < n; i++) {
            float v = fp8_decode(in[i], p->format);
            if (accumulate) out[i] += v;
            else out[i] = v;
        }
        break;
    case CM_INT8_GROUP:
        int8_decode(p, in, n, out, accumulate);
        break;
    case CM_FP8_TENSOR:
    case CM_FP8_GROUP:
    case CM_TACO: {
        TacoCfg c = taco_cfg_of(p);
        WireLayout w = wire_layout(p, n);
        float scale = 1.0f;
        if (w.has_scale) memcpy(&scale, in, 4);
        const uint8_t* exps = w.has_exps ? in + w.exps : NULL;
        const uint8_t* codes = in + w.codes;
        taco_decode(&c, scale, exps, codes, n, out, accumulate);
        break;
    }
    case CM_NUM_METHODS: break; /* rejected by params_check */
    }
}

void decompress(const CompressParams* p, const uint8_t* in, size_t n, float* out) { decompress_into(p, in, n, out, 0); }

void decompress_reduce(const CompressParams* p, const uint8_t* in, size_t n, float* acc) {
    decompress_into(p, in, n, acc, 1);
}
