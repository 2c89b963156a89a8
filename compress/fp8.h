/*
 * compress/fp8.h - OCP FP8 (E4M3 and E5M2) codecs, the CPU reference.
 *
 * Both formats follow the OCP "8-bit Floating Point Specification (OFP8)":
 *
 *   E4M3: S.EEEE.MMM, bias 7, max 448 = S.1111.110, NO infinities,
 *         NaN = S.1111.111 (0x7F / 0xFF), subnormals down to 2^-9.
 *   E5M2: S.EEEEE.MM, bias 15, max 57344 = S.11110.11, IEEE-like:
 *         inf = S.11111.00, NaN = S.11111.{01,10,11}, subnormals down to 2^-16.
 *
 * Encoding (float -> fp8) is integer bit manipulation of the float, one
 * rounding step, and SATURATES: a finite value beyond the largest finite fp8
 * and +-inf become +-max (the "satfinite" behaviour of the GPU's cvt
 * instruction). NaN becomes the canonical NaN 0x7F for both formats (its sign
 * is dropped, as the GPU does). Negative values that round to zero give -0
 * (0x80). Float subnormal inputs are handled exactly (they are far below the
 * fp8 range, so they round to +-0, or round up with tiny probability in SR).
 *
 * Rounding. Let the kept bits be the fp8 code and R the dropped part of the
 * float's significand, read as a fraction of one unit of the code's last place
 * (0 <= R < 1):
 *   - fp8_encode     round to nearest, ties to even (RNE).
 *   - fp8_encode_sr  stochastic: with F = floor(R * 2^32) (the first 32 dropped
 *                    bits as a 32-bit fixed-point fraction) and rnd a uniform
 *                    32-bit value, round away from zero iff F + rnd >= 2^32.
 *                    So P(round up) = F / 2^32 = R exactly whenever at most 32
 *                    bits are dropped, i.e. for |x| >= 2^-18 (E4M3) or 2^-25
 *                    (E5M2); smaller values are below 2^-9 of the smallest
 *                    subnormal and F is R truncated to 32 bits. rnd = 0
 *                    always truncates toward zero, rnd = 0xFFFFFFFF rounds up
 *                    every value with F > 0; exact values never move. The
 *                    methods pass rng.h's rng_sr_word, r * 2^24 + 2^23 for a
 *                    random byte r: P(up) = R to the nearest 1/256.
 * A GPU kernel reproduces both bit for bit with the same integer operations.
 */
#ifndef FP8_H
#define FP8_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FP8_E4M3, FP8_E5M2 } Fp8Format;

/* The canonical NaN code the encoders emit (both formats). */
#define FP8_NAN_CODE 0x7F

/* RNE, saturating. */
uint8_t fp8_encode(float x, Fp8Format f);
/* Stochastic rounding with the random word rnd (see above), saturating. */
uint8_t fp8_encode_sr(float x, Fp8Format f, uint32_t rnd);
/* Exact: every fp8 code is a float. NaN codes give NaN, E5M2 inf gives inf. */
float fp8_decode(uint8_t c, Fp8Format f);
/* Largest finite value: 448 (E4M3) or 57344 (E5M2). */
float fp8_max(Fp8Format f);
/* Smallest positive normal: 2^-6 (E4M3) or 2^-14 (E5M2). */
float fp8_min_normal(Fp8Format f);
/* Smallest positive subnormal (= the subnormal spacing): 2^-9 or 2^-16. */
float fp8_min_subnormal(Fp8Format f);
/* Explicit mantissa bits: 3 (E4M3) or 2 (E5M2). */
int fp8_mantissa_bits(Fp8Format f);
/* 1 if the code is a NaN of the format. */
int fp8_is_nan(uint8_t c, Fp8Format f);

/* "e4m3" / "e5m2"; parse returns 0 on success, -1 for an unknown name. */
const char* fp8_format_name(Fp8Format f);
int fp8_format_parse(const char* s, Fp8Format* out);

#ifdef __cplusplus
}
#endif
#endif /* FP8_H */
