/*
 * common/bf16.h - fp32 <-> bf16 by integer arithmetic, one definition for
 * the compression reference (compress/compress.c), its GPU kernels and the
 * tests, which must all round and map NaN the same way.
 *
 * bf16 is the top half of an fp32: same sign and 8-bit exponent, 7 explicit
 * mantissa bits. Decoding is exact (shift up by 16). Encoding rounds to
 * nearest, ties to even, by adding 0x7FFF plus the lowest kept bit to the
 * fp32 bits and dropping the low 16: a carry out of the mantissa bumps the
 * exponent, which is the correct rounding, and a finite value above the
 * largest bf16 (3.39e38) carries into the all-ones exponent, i.e. becomes
 * +-inf (bf16_overflows tells). Every NaN becomes the one quiet NaN 0x7FC0:
 * the carry trick could turn a NaN with only low payload bits into inf, and
 * the NaN an invalid operation makes differs between CPU and GPU (x86 gives
 * 0xFFC00000, CUDA 0x7FFFFFFF), so keeping its sign or payload would make the
 * two sides' bytes differ. Integers, not a hardware cast, make the GPU's
 * bytes equal the CPU's for every input.
 */
#ifndef BF16_H
#define BF16_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define BF16_HD __host__ __device__ __forceinline__
#else
#define BF16_HD static inline
#endif

BF16_HD uint16_t bf16_from_bits(uint32_t b) {
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u; /* NaN: the canonical quiet NaN */
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

BF16_HD uint16_t bf16_from_f32(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return bf16_from_bits(b);
}

BF16_HD float bf16_to_f32(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float x;
    memcpy(&x, &b, 4);
    return x;
}

/* 1 if the finite fp32 with bits b rounds to +-inf in bf16 */
BF16_HD int bf16_overflows(uint32_t b) {
    return (b & 0x7FFFFFFFu) < 0x7F800000u && (bf16_from_bits(b) & 0x7FFFu) == 0x7F80u;
}

#endif /* BF16_H */
