/*
 * compress/cuda_decode.cuh - one unit's decode: what a copy's scale means
 * (InScale), its NaN codes and fp8 values per sub-block, dequantisation, the
 * group exponent bytes, and the rank-order sums of P copies that
 * k_decompress builds on. The arithmetic is taco.c's dq and compress.c's
 * decoders, step for step; the work mapping is cuda_codec.cuh's.
 */
#ifndef COMPRESS_CUDA_DECODE_CUH
#define COMPRESS_CUDA_DECODE_CUH

#include <stdint.h>

#include "compress/cuda_codec.cuh"
#include "compress/cuda_device.cuh"

namespace {

/* What a copy's scale means for dequantisation (taco.c's dq): k = its
 * exponent when it is a normal power of two, else foreign (divide). */
struct InScale {
    float s;
    int k;
    int foreign;
};
__device__ __forceinline__ InScale in_scale(unsigned bits) {
    InScale is;
    is.s = __uint_as_float(bits);
    is.foreign = !pow2_normal(is.s);
    is.k = is.foreign ? 0 : (int)(bits >> 23) - 127;
    return is;
}

/* Which sub-blocks of a row of codes hold a NaN code (nan: that copy's group
 * was sent unrotated), by byte arithmetic on whole words: adding 1 to each
 * 7-bit magnitude carries into bit 7 exactly for 0x7F (E4M3's NaN); adding 3
 * does it for the magnitudes above 0x7C (E5M2's NaNs). */
template <int FMT>
__device__ __forceinline__ void fp8_row_nan(const Row<1>& r, unsigned (&nan)[SB]) {
    constexpr unsigned ADD = FMT == FP8_E4M3 ? 0x01010101u : 0x03030303u;
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        unsigned t = 0u;
#pragma unroll
        for (int i = 4 * sb; i < 4 * sb + 4; i++) t |= (row_word(r, i) & 0x7F7F7F7Fu) + ADD;
        nan[sb] = (t & 0x80808080u) != 0u ? 1u : 0u;
    }
}

/* The 16 codes of sub-block sb as their fp8 values (fp8_decode), two at a
 * time by the hardware conversion to f16 pairs (exact: f16 holds every E4M3
 * and E5M2 value, inf and NaN included), then to fp32 (exact). */
template <int FMT>
__device__ __forceinline__ void fp8_sb_values(const Row<1>& r, int sb, float (&f)[16]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const unsigned w = row_word(r, 4 * sb + i);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> (16 * h)),
                                                             FMT == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
            const float2 v = __half22float2(__half2(hr));
            f[4 * i + 2 * h] = v.x;
            f[4 * i + 2 * h + 1] = v.y;
        }
    }
}

/* dq(f) = ldexpf(f, b - k) (or ldexpf(f / s, b) for a foreign scale): one
 * multiply by 2^(b - k) when that is a normal power of two (one rounding of
 * the exact product, as ldexpf), else ldexpf itself */
__device__ __forceinline__ void dequant16(float (&f)[16], int b, const InScale& is) {
    const int e = b - is.k;
    if (!is.foreign && e >= -126 && e <= 127) {
        const float m = pow2f_normal(e);
#pragma unroll
        for (int j = 0; j < 16; j++) f[j] = __fmul_rn(f[j], m);
        return;
    }
    /* rare: a loop over a local copy */
    float t[16];
#pragma unroll
    for (int j = 0; j < 16; j++) t[j] = f[j];
#pragma unroll 1
    for (int j = 0; j < 16; j++) t[j] = is.foreign ? ldexpf(__fdiv_rn(t[j], is.s), b) : ldexpf(t[j], e);
#pragma unroll
    for (int j = 0; j < 16; j++) f[j] = t[j];
}

/* The group exponent bytes of the lane's four sub-blocks (byte sb of the
 * result; 127, the neutral byte, where a sub-block is past the unit's end or
 * there are no group bytes): one load per group the unit holds. */
/* What the loads of a copy's group bytes need of its codec (a few scalars,
 * not a pointer to the Codec: a pointer made the kernels keep a copy of the
 * Codec in local memory and reload its fields at every step) */
struct GroupShape {
    int G, lg, gb;
};
__device__ __forceinline__ GroupShape group_shape(const Codec& c) { return GroupShape{c.G, c.lg, c.gb}; }

__device__ __forceinline__ unsigned load_group_bytes(const GroupShape& c, const uint8_t* exps, unsigned g0, unsigned u, int nv) {
    if (!c.gb || nv <= 0) return 0x7F7F7F7Fu;
    const unsigned gi = (unsigned)(((u64)UNIT * u) >> c.lg) - g0; /* the unit's first group, in the range */
    if (c.G >= UNIT) return 0x01010101u * (unsigned)exps[gi];
    unsigned r = 0x7F7F7F7Fu;
    if (c.G == 32) {
        r = 0x0101u * (unsigned)exps[gi];
        r |= (nv > 32 ? 0x0101u * (unsigned)exps[gi + 1] : 0x7F7Fu) << 16;
        return r;
    }
#pragma unroll
    for (int sb = 0; sb < SB; sb++)
        if (16 * sb < nv) r = (r & ~(0xFFu << (8 * sb))) | ((unsigned)exps[gi + (unsigned)sb] << (8 * sb));
    return r;
}

/* A single copy's rotated group can skip dequantising: H_un(dq(f)) * norm
 * == H_un(f) * C with C = norm * 2^(b - k), to the bit, when C is a normal
 * float, dq(f) = ldexpf(f, b - k) is exact (b - k >= -130: no fp8 value's
 * bits fall off) and no sum overflows (b - k <= 100): every rounding of the
 * butterflies then happens at the same relative place. */
__device__ __forceinline__ bool fold_const(const Codec& ci, int b, const InScale& is, float* C) {
    if (is.foreign) return false;
    const int e = b - is.k;
    if (e < -126 || e > 100) return false;
    const float c = __fmul_rn(ci.norm, pow2f_normal(e));
    *C = c;
    return c >= 1.17549435e-38f;
}

/* acc's sub-block sb += d */
__device__ __forceinline__ void add_sb(float (&acc)[UNIT], const float (&d)[16], int sb) {
#pragma unroll
    for (int j = 0; j < 16; j++) acc[16 * sb + j] = __fadd_rn(acc[16 * sb + j], d[j]);
}

} /* namespace */

#endif /* COMPRESS_CUDA_DECODE_CUH */
