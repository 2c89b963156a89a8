/*
 * compress/fp8.c - OCP FP8 E4M3/E5M2 encode (RNE and stochastic) and decode.
 *
 * The reference the GPU kernels are checked against bit for bit, so every step
 * is integer arithmetic on the float's bits; no float rounding is involved
 * except the (exact) construction of decoded values. See fp8.h for the exact
 * rounding definitions. Build with -ffp-contract=off like the rest of
 * compress/ (nothing here could contract, but the rule is per directory).
 */
#include "compress/fp8.h"

#include <math.h>
#include <string.h>

/* What distinguishes the two formats. Everything else is shared code. */
typedef struct {
    int mbits;          /* explicit mantissa bits */
    int bias;           /* exponent bias */
    uint8_t max_code;   /* largest finite positive code */
    float max;          /* its value */
    float min_normal;   /* 2^(1 - bias) */
    float min_sub;      /* 2^(1 - bias - mbits), the subnormal spacing */
} Fp8Spec;

static const Fp8Spec FP8_SPECS[2] = {
    [FP8_E4M3] = {3, 7, 0x7E, 448.0f, 0x1p-6f, 0x1p-9f},
    [FP8_E5M2] = {2, 15, 0x7B, 57344.0f, 0x1p-14f, 0x1p-16f},
};

static const Fp8Spec* fp8_spec(Fp8Format f) { return &FP8_SPECS[f == FP8_E5M2 ? FP8_E5M2 : FP8_E4M3]; }

/* The one encoder. |x| = sig * 2^(e - 23) with sig the 24-bit significand.
 * The fp8 code of a positive value is monotone in the value and contiguous
 * across binades, so "code = (biased exponent - 1) << mbits + (sig >> shift)"
 * followed by "code += 1 to round up" carries correctly from one binade into
 * the next, and from the subnormals into the smallest normal. Values below
 * the normal range keep the smallest normal's exponent and shift more bits
 * out of the significand; that is all subnormal handling needs. */
static uint8_t fp8_encode_core(float x, Fp8Format f, int stochastic, uint32_t rnd) {
    const Fp8Spec* s = fp8_spec(f);
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    uint8_t sign = (uint8_t)((bits >> 24) & 0x80u);
    uint32_t a = bits & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return FP8_NAN_CODE;              /* NaN -> canonical NaN */
    if (a == 0x7F800000u) return (uint8_t)(sign | s->max_code); /* inf saturates */

    uint32_t fexp = a >> 23;
    uint32_t sig = a & 0x7FFFFFu;
    int e;
    if (fexp == 0) {
        e = -126;                                          /* float subnormal: no implicit bit */
    } else {
        sig |= 0x800000u;
        e = (int)fexp - 127;
    }
    int eb = e + s->bias;                                  /* fp8 biased exponent */
    int shift = 23 - s->mbits;                             /* significand bits to drop */
    if (eb < 1) {                                          /* fp8 subnormal range */
        shift += 1 - eb;
        eb = 1;
    }
    /* t = sig * 2^(32 - shift) truncated: its high word is the kept part,
     * its low word F is the first 32 dropped bits (the fraction R of one unit
     * in the last kept place, as 32-bit fixed point). sig < 2^24, so for
     * shift > 32 nothing is kept and at most 2^-9 of a unit is dropped. */
    uint64_t t = shift < 64 ? ((uint64_t)sig << 32) >> shift : 0;
    uint32_t kept = (uint32_t)(t >> 32);
    uint32_t F = (uint32_t)t;
    uint32_t up;
    if (stochastic) {
        up = (uint64_t)F + rnd >= 0x100000000ull;          /* P(up) = F / 2^32 */
    } else {
        /* Exact for shift <= 32 (F holds every dropped bit); for shift > 32
         * the dropped part is < 1/2 and F < 2^31, so it rounds down, as RNE must. */
        up = F > 0x80000000u || (F == 0x80000000u && (kept & 1u));
    }
    uint32_t code = ((uint32_t)(eb - 1) << s->mbits) + kept + up;
    if (code > s->max_code) code = s->max_code;            /* saturate */
    return (uint8_t)(sign | code);
}

uint8_t fp8_encode(float x, Fp8Format f) { return fp8_encode_core(x, f, 0, 0); }

uint8_t fp8_encode_sr(float x, Fp8Format f, uint32_t rnd) { return fp8_encode_core(x, f, 1, rnd); }

float fp8_decode(uint8_t c, Fp8Format f) {
    const Fp8Spec* s = fp8_spec(f);
    int ebits = 7 - s->mbits;
    uint32_t emax = (1u << ebits) - 1u;
    uint32_t mant = c & ((1u << s->mbits) - 1u);
    uint32_t ex = ((uint32_t)c >> s->mbits) & emax;
    float v;
    if (f == FP8_E4M3 && ex == emax && mant == 7u) {
        v = NAN;
    } else if (f == FP8_E5M2 && ex == emax) {
        v = mant ? NAN : INFINITY;
    } else if (ex == 0) {
        v = (float)mant * s->min_sub;                      /* exact: small integer times 2^k */
    } else {
        uint32_t b = ((ex - (uint32_t)s->bias + 127u) << 23) | (mant << (23 - s->mbits));
        memcpy(&v, &b, sizeof(v));
    }
    return (c & 0x80u) ? -v : v;
}

int fp8_is_nan(uint8_t c, Fp8Format f) {
    if (f == FP8_E4M3) return (c & 0x7Fu) == 0x7Fu;
    return (c & 0x7Cu) == 0x7Cu && (c & 0x03u) != 0;
}

float fp8_max(Fp8Format f) { return fp8_spec(f)->max; }
float fp8_min_normal(Fp8Format f) { return fp8_spec(f)->min_normal; }
float fp8_min_subnormal(Fp8Format f) { return fp8_spec(f)->min_sub; }
int fp8_mantissa_bits(Fp8Format f) { return fp8_spec(f)->mbits; }

const char* fp8_format_name(Fp8Format f) { return f == FP8_E5M2 ? "e5m2" : "e4m3"; }

int fp8_format_parse(const char* s, Fp8Format* out) {
    if (strcmp(s, "e4m3") == 0) { *out = FP8_E4M3; return 0; }
    if (strcmp(s, "e5m2") == 0) { *out = FP8_E5M2; return 0; }
    return -1;
}
