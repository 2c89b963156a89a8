/*
 * compress/compress.c - the compress.h interface: default parameters, error
 * bounds, compress / decompress, and the methods outside the FP8 group
 * pipeline (raw fp32 / bf16 words, the bare cast, int8_group).
 *
 * Which method is what (wire layout, code path, pipeline switches) is the
 * table of methods.h; this file dispatches on a row's family and puts the
 * parts where compress_wire_layout says. The error bounds returned by
 * compress_error_bound are derived in compress/README.md. Build with
 * -ffp-contract=off: the GPU kernels repeat every rounding of this file, and
 * a fused multiply-add would round differently.
 */
#include "compress/compress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/check.h"
#include "compress/methods.h"
#include "compress/rng.h"
#include "compress/taco.h"

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

/* The pipeline configuration a CM_FAM_FP8 method runs with (taco.h). */
static TacoCfg taco_cfg_of(const CompressParams* p) {
    const CompressSwitches sw = compress_method_switches(p);
    TacoCfg c;
    c.format = p->format;
    c.G = compress_method_uses_groups(p->method) ? p->group_size : FP8_TENSOR_BLOCK;
    c.hadamard = sw.hadamard;
    c.adaptive = sw.adaptive;
    c.dual = sw.dual;
    c.stochastic = p->stochastic;
    c.seed = p->seed;
    c.delayed_amax = compress_method_delayed_amax(p);
    const CompressWireLayout l = compress_wire_layout(p);
    c.tile = l.tbytes ? (size_t)l.T : 0; /* a scale per tile, or one chunk scale in the header */
    return c;
}

double compress_error_bound(const CompressParams* p) {
    compress_params_check(p, "compress_error_bound");
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
        codes[i] = p->stochastic ? fp8_encode_sr(x[i], p->format, rng_sr_word(&rng, i)) : fp8_encode(x[i], p->format);
    }
}

/* int8_group: symmetric int8, one fp32 step per group, d = amax / 127 (IEEE
 * division), q = round(t) in [-127, 127] with t = x * (127 / amax): one
 * multiply per element by a per-group reciprocal (IEEE division, once),
 * and t = x / d only where that reciprocal overflows (amax below ~4e-37);
 * -128 marks a NaN/inf input. RNE is rintf (round half to even in the
 * default rounding mode). SR rounds the magnitude a = |t| up with
 * probability frac(a), with the same 32-bit fixed-point rule as
 * fp8_encode_sr: F = (uint32)(frac(a) * 2^32), up iff F + rnd >= 2^32
 * (frac(a) = a - floorf(a) is exact). */
#define INT8_NAN_CODE (-128)

static void int8_encode(const CompressParams* p, const float* x, size_t n, uint64_t stream, uint8_t* steps,
                        uint8_t* q8, CompressStats* st) {
    const size_t G = (size_t)p->group_size;
    RngCursor rng;
    rng_cursor_init(&rng, p->seed, stream);
    for (size_t b0 = 0, gi = 0; b0 < n; b0 += G, gi++) {
        size_t len = n - b0 < G ? n - b0 : G;
        const float* xg = x + b0;
        float amax = amax_finite(xg, len, NULL);
        float d = amax / 127.0f, inv = 127.0f / amax;
        memcpy(steps + 4 * gi, &d, 4);
        for (size_t j = 0; j < len; j++) {
            size_t i = b0 + j;
            int q;
            if (!isfinite(xg[j])) {
                q = INT8_NAN_CODE;
            } else if (d == 0.0f) {
                q = 0;
            } else {
                float t = inv <= 3.0e38f ? xg[j] * inv : xg[j] / d;
                float a = fabsf(t), r;
                if (p->stochastic) {
                    float fl = floorf(a);
                    uint32_t F = (uint32_t)((a - fl) * 4294967296.0f);
                    r = fl + (((uint64_t)F + rng_sr_word(&rng, i) >= 0x100000000ull) ? 1.0f : 0.0f);
                } else {
                    r = rintf(a);
                }
                if (r > 127.0f) { /* only where rounding of a tiny step pushed |t| past 127 */
                    r = 127.0f;
                    st->saturated++;
                }
                q = (t < 0.0f) ? -(int)r : (int)r;
            }
            q8[i] = (uint8_t)(int8_t)q;
        }
    }
}

/* element i of an int8_group copy (steps: its group bytes) */
static float int8_value(const CompressParams* p, const uint8_t* steps, const uint8_t* q8, size_t i) {
    float d;
    memcpy(&d, steps + 4 * (i / (size_t)p->group_size), 4);
    int q = (int8_t)q8[i];
    return q == INT8_NAN_CODE ? NAN : (float)q * d;
}

/* ------------------------------------------------------------------------ */
/* the interface */

/* The parts of a chunk of n on the wire (methods.h): the chunk scale or the
 * tile scales at 0 (a row has one or the other: methods.c checks), the group
 * bytes after them, the element bytes last; a part is present iff the row
 * gives it bytes. */
typedef struct {
    const CompressMethodInfo* m;
    int scaled;           /* the wire has second scales at offset 0 */
    size_t groups, codes; /* byte offsets */
} Wire;

static Wire wire_of(const CompressParams* p, size_t n) {
    const CompressWireLayout l = compress_wire_layout(p);
    Wire w;
    w.m = compress_method_info(p->method);
    w.scaled = l.hdr > 0 || l.tbytes > 0;
    w.groups = compress_wire_groups_offset(&l, n);
    w.codes = compress_wire_codes_offset(&l, n);
    return w;
}

size_t compress(const CompressParams* p, const float* x, size_t n, uint64_t stream, uint8_t* out, CompressStats* st) {
    compress_params_check(p, "compress");
    const Wire w = wire_of(p, n);
    uint8_t* codes = out + w.codes;
    CompressStats s = {0, 0, 0.0f};
    switch (w.m->family) {
    case CM_FAM_RAW:
        s.amax = amax_finite(x, n, &s.nonfinite);
        if (w.m->ebytes == 4) {
            if (n) memcpy(codes, x, 4 * n);
        } else {
            for (size_t i = 0; i < n; i++) {
                uint32_t b;
                memcpy(&b, &x[i], 4);
                uint16_t h = bf16_from_bits(b);
                memcpy(codes + 2 * i, &h, 2);
                s.saturated += (uint64_t)bf16_overflows(b);
            }
        }
        break;
    case CM_FAM_CAST:
        s.amax = amax_finite(x, n, &s.nonfinite);
        cast_encode(p, x, n, stream, codes, &s);
        break;
    case CM_FAM_INT8:
        s.amax = amax_finite(x, n, &s.nonfinite);
        int8_encode(p, x, n, stream, out + w.groups, codes, &s);
        break;
    case CM_FAM_FP8: {
        const TacoCfg c = taco_cfg_of(p);
        uint8_t one[4]; /* the second scale of a wire that has none (always 1.0f): not sent */
        taco_encode(&c, x, n, stream, w.scaled ? out : one, w.m->gbytes ? out + w.groups : NULL, codes, &s);
        /* without a second scale, report the input's amax: there is no scale
         * history to feed, and the raw magnitude is the useful number */
        if (!w.scaled) s.amax = amax_finite(x, n, NULL);
        break;
    }
    }
    if (st) *st = s;
    return compress_bound(p, n);
}

/* element i of one copy of a method decoded one element at a time (raw, cast, int8) */
static float element_value(const CompressParams* p, const Wire* w, const uint8_t* in, size_t n, size_t i) {
    const uint8_t* codes = in + w->codes;
    switch (w->m->family) {
    case CM_FAM_RAW:
        if (w->m->ebytes == 4) {
            float v;
            memcpy(&v, codes + 4 * i, 4);
            return v;
        } else {
            uint16_t h;
            memcpy(&h, codes + 2 * i, 2);
            return bf16_to_f32(h);
        }
    case CM_FAM_CAST: return fp8_decode(codes[i], p->format);
    case CM_FAM_INT8: return int8_value(p, in + w->groups, codes, i);
    default: break;
    }
    (void)n;
    FATAL("element_value: method %s is decoded by groups", compress_method_name(p->method));
}

/* the P copies' wire sections as the FP8 decoder takes them (the caller frees) */
static TacoWireIn* taco_wires_in(const Wire* w, const uint8_t* const* in, int P) {
    TacoWireIn* t = (TacoWireIn*)mallocCheck(sizeof(TacoWireIn) * (size_t)P);
    for (int i = 0; i < P; i++) {
        t[i].scales = w->scaled ? in[i] : NULL;
        t[i].exps = w->m->gbytes ? in[i] + w->groups : NULL;
        t[i].codes = in[i] + w->codes;
    }
    return t;
}

void decompress_sum(const CompressParams* p, const uint8_t* const* in, int P, size_t n, float* out) {
    compress_params_check(p, "decompress_sum");
    if (P < 1) FATAL("decompress_sum: %d copies; at least 1", P);
    const Wire w = wire_of(p, n);
    if (w.m->family == CM_FAM_FP8) {
        const TacoCfg c = taco_cfg_of(p);
        TacoWireIn* t = taco_wires_in(&w, in, P);
        taco_decode_sum(&c, t, P, n, out);
        free(t);
        return;
    }
    /* one element at a time: the first copy's value, then the others added in order */
    for (size_t i = 0; i < n; i++) {
        float acc = element_value(p, &w, in[0], n, i);
        for (int k = 1; k < P; k++) acc += element_value(p, &w, in[k], n, i);
        out[i] = acc;
    }
}

void decompress(const CompressParams* p, const uint8_t* in, size_t n, float* out) { decompress_sum(p, &in, 1, n, out); }

/* The sum as the recompress encodes it (README.md, "The fused
 * recompress"): taco_decode_sum_rotated's values (R where a group can stay
 * rotated, the decoded sum elsewhere) when the pair keeps the sum rotated,
 * decompress_sum's otherwise. */
void decompress_sum_rotated(const CompressParams* p_in, const CompressParams* p_out, const uint8_t* const* in, int P,
                            size_t n, float* out) {
    compress_params_check(p_in, "decompress_sum_rotated");
    if (P < 1) FATAL("decompress_sum_rotated: %d copies; at least 1", P);
    if (!compress_sum_stays_rotated(p_in, p_out)) {
        decompress_sum(p_in, in, P, n, out);
        return;
    }
    const Wire w = wire_of(p_in, n);
    const TacoCfg c = taco_cfg_of(p_in);
    TacoWireIn* t = taco_wires_in(&w, in, P);
    taco_decode_sum_rotated(&c, t, P, n, out);
    free(t);
}

/* The two-shot all-reduce's middle step: that sum, encoded by p_out's
 * pipeline with its Hadamard step skipped where the sum stayed rotated. A
 * group left as R is encoded as the encoder encodes a group it has just
 * rotated, and holds no NaN code, so the decoder's rule sees it rotated; a
 * group not left as R holds a NaN (a copy sent unrotated, or an overflowed
 * R) or is a short tail, which the encoder would not rotate either: so no
 * group needs the forward transform. */
size_t decompress_sum_recompress(const CompressParams* p_in, const uint8_t* const* in, int P, size_t n,
                                 const CompressParams* p_out, uint64_t stream, uint8_t* out, CompressStats* st) {
    compress_params_check(p_out, "decompress_sum_recompress");
    const CompressParams pe = compress_recompress_params(p_in, p_out);
    float* z = (float*)mallocCheck(sizeof(float) * (n ? n : 1));
    if (n) decompress_sum_rotated(p_in, p_out, in, P, n, z);
    size_t w = compress(&pe, z, n, stream, out, st);
    free(z);
    return w;
}
