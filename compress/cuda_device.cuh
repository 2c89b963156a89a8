/*
 * compress/cuda_device.cuh - the device arithmetic of the compression kernels:
 * power-of-two scales, group reductions, the Hadamard of one unit, the FP8
 * codes (encode, decode) and the Philox words. Shared by the .cu files of
 * compress/ (a header: what an anonymous namespace holds is per file).
 *
 * Every function repeats the CPU reference (compress.c, taco.c, fp8.c,
 * hadamard.c) operation for operation, so that the bytes on the wire and the
 * decoded fp32 bits are IDENTICAL to the CPU's. The rules that make that
 * possible (compress/README.md):
 *   - every scale is a power of two: multiplying by it is exact unless the
 *     result under/overflows, and then it rounds once, like the CPU;
 *   - every float operation that rounds is written as an explicit _rn
 *     intrinsic (__fadd_rn, __fmul_rn, ...), which nvcc never contracts into
 *     an FMA, whatever --fmad says: the CPU reference is built with
 *     -ffp-contract=off and an FMA would round differently;
 *   - the Hadamard butterflies run in the CPU's stage order h = 1, 2, 4, ...
 *     (float addition is not associative); the normalisation is folded into
 *     the one per-group multiply that follows, as in taco.c.
 * The FP8 conversion: cvt.rn.satfinite.{e4m3,e5m2}x2.f32 is round-to-nearest-
 * even with saturation of finite overflow and of +-inf to +-max, the CPU's
 * rule. NaN gets no say: a NaN (or, in the group pipeline, inf) input's code
 * is overwritten with 0x7F, and a NaN produced by overflow inside the
 * transform is turned into +inf before the cast, as in taco.c. The test
 * checks it against the integer encoder for every one of the 2^32 floats
 * (compress_dev_selftest_fp8); -DCOMPRESS_CUDA_SOFT_FP8 uses the integer
 * encoder for RNE too.
 */
#ifndef COMPRESS_CUDA_DEVICE_CUH
#define COMPRESS_CUDA_DEVICE_CUH

#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <curand_kernel.h>
#include <math.h>
#include <stdint.h>

#include "compress/fp8.h"
#include "compress/methods.h"
#include "compress/taco.h" /* TACO_EXP_MIN / TACO_EXP_MAX; its functions are not used here */

namespace {

constexpr int UNIT = 64;                /* consecutive elements per thread and step */
constexpr int SB = 4;                   /* 16-element sub-blocks of a unit: the smallest group */
static_assert(UNIT == COMPRESS_WIRE_UNIT, "methods.h: ranges of methods without groups are cut on units");
constexpr unsigned FULL = 0xffffffffu;
typedef unsigned long long u64;

/* the two formats' constants (fp8.h) */
template <int FMT> struct Fp8T;
template <> struct Fp8T<FP8_E4M3> {
    static constexpr int MB = 3, BIAS = 7;
    static constexpr float MIN_NORMAL = 0x1p-6f;
    static constexpr int SHIFT = 20; /* (code & 0x7F) << SHIFT: the fp8 value times 2^-BA, as float bits */
    static constexpr int BA = 120;   /* 127 - BIAS */
    static constexpr unsigned MAXC = 0x7Eu;
    static constexpr int LIM = 9; /* every finite value is below 2^LIM in magnitude (448) */
    static constexpr int LOW = 9; /* the smallest subnormal: 2^-LOW */
};
template <> struct Fp8T<FP8_E5M2> {
    static constexpr int MB = 2, BIAS = 15, SHIFT = 21, BA = 112;
    static constexpr float MIN_NORMAL = 0x1p-14f;
    static constexpr unsigned MAXC = 0x7Bu;
    static constexpr int LIM = 16; /* 57344 < 2^16 */
    static constexpr int LOW = 16;
};

/* ========================================================================== */
/* scalar helpers                                                              */

/* 2^k for k in [-126, 127], a normal float: one instruction, no branch.
 * For callers that test k's range themselves, or whose k is bounded (a
 * group exponent, a copy's exponent fast_copy has checked). */
__device__ __forceinline__ float pow2f_normal(int k) { return __uint_as_float((unsigned)(k + 127) << 23); }

/* 2^k, exact (normal for k in [-126, 127], ldexpf's exact result otherwise) */
__device__ __forceinline__ float pow2f_dev(int k) { return (k >= -126 && k <= 127) ? pow2f_normal(k) : ldexpf(1.0f, k); }

/* frexpf for a positive finite float: v = m * 2^e, m in [0.5, 1); *frac gets
 * m's 23 fraction bits (normalised also for float subnormals), so comparing
 * two m's is comparing their fracs. */
__device__ __forceinline__ int frexp_dev(float v, unsigned* frac) {
    const unsigned b = __float_as_uint(v);
    int e = (int)(b >> 23);
    unsigned m = b & 0x7FFFFFu;
    if (e == 0) { /* subnormal: bring the leading one to bit 23 */
        const int sh = __clz(m) - 8;
        m = (m << sh) & 0x7FFFFFu;
        e = 1 - sh;
    }
    *frac = m;
    return e - 126;
}

/* taco_pow2_fit: the largest k in [EXP_MIN, EXP_MAX] with amax * 2^k <= limit;
 * 0 for amax == 0 (or NaN), EXP_MIN for inf. The same comparison as the CPU. */
__device__ __forceinline__ int pow2_fit_dev(float amax, float limit) {
    if (!(amax > 0.0f)) return 0;
    if (isinf(amax)) return TACO_EXP_MIN;
    unsigned fa, fl;
    const int ea = frexp_dev(amax, &fa), el = frexp_dev(limit, &fl);
    const int k = el - ea - (fa > fl ? 1 : 0);
    return min(max(k, TACO_EXP_MIN), TACO_EXP_MAX);
}

/* -pow2_fit_dev(a, 1.0f) for a positive normal float a (bits b): the
 * smallest e with a <= 2^e is a's exponent, plus one when its fraction is not
 * zero, which is exactly when adding 2^23 - 1 to the bits carries into the
 * exponent field; clamped to [-TACO_EXP_MAX, -TACO_EXP_MIN] as pow2_fit_dev
 * clamps k. Three instructions where frexp's subnormal branch and the
 * comparison took about twenty; checked against taco_pow2_fit for every
 * positive normal float (2026-12-07). */
__device__ __forceinline__ int pow2_ceil_normal(unsigned b) {
    return min(max((int)((b + 0x7FFFFFu) >> 23) - 127, -TACO_EXP_MAX), -TACO_EXP_MIN);
}

/* x is a positive power of two in the normal range (a scale, or a constant
 * that multiplies exactly) */
__device__ __forceinline__ bool pow2_normal(float x) {
    const unsigned b = __float_as_uint(x);
    return (b & 0x807FFFFFu) == 0u && b >= 0x00800000u && b < 0x7F800000u;
}

/* max(a, |b|) that propagates NaN (PTX max.NaN, one FMNMX with b's abs
 * folded in): over finite values it is the integer max of the magnitude
 * bits, and a NaN anywhere makes the result NaN (0x7FFFFFFF), so one compare
 * with the inf bits tells a scan that some element is not finite. */
__device__ __forceinline__ float max_abs_nan(float a, float b) {
#ifndef CUDA_EMU
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(fabsf(b)));
    return r;
#else
    b = fabsf(b);
    return (a != a || b != b) ? __uint_as_float(0x7FFFFFFFu) : (a > b ? a : b);
#endif
}

/* max(|a|, |b|) of each bf16 half of two packed words, NaN-keeping (PTX
 * max.NaN.xorsign.abs.bf16x2, one HMNMX2 with both abs folded in): a half
 * is the larger magnitude, or the canonical NaN 0x7FFF where either input
 * half is NaN, with the XOR of the inputs' sign bits, which the caller
 * masks. bf16 max keeps subnormals (PTX has no .ftz for it), so over finite
 * halves the magnitude is the integer max of the masked bits. */
__device__ __forceinline__ unsigned bf16x2_absmax_nan(unsigned a, unsigned b) {
#ifndef CUDA_EMU
    unsigned r;
    asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    unsigned r = 0u;
    for (int h = 0; h < 32; h += 16) {
        const unsigned x = (a >> h) & 0x7FFFu, y = (b >> h) & 0x7FFFu;
        const unsigned sign = ((a ^ b) >> h) & 0x8000u;
        const unsigned mag = (x > 0x7F80u || y > 0x7F80u) ? 0x7FFFu : (x > y ? x : y);
        r |= (sign | mag) << h;
    }
    return r;
#endif
}

__device__ __forceinline__ unsigned load_u32_any(const uint8_t* p) {
    if (((uintptr_t)p & 3u) == 0) return *reinterpret_cast<const unsigned*>(p);
    return (unsigned)p[0] | ((unsigned)p[1] << 8) | ((unsigned)p[2] << 16) | ((unsigned)p[3] << 24);
}
__device__ __forceinline__ void store_u32_any(uint8_t* p, unsigned v) {
    if (((uintptr_t)p & 3u) == 0) {
        *reinterpret_cast<unsigned*>(p) = v;
    } else {
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
    }
}

/* ========================================================================== */
/* FP8 codes                                                                   */

/* fp8.c's fp8_encode_core, integer operation for integer operation: RNE or
 * stochastic rounding (up iff F + rnd >= 2^32), saturating, NaN -> 0x7F.
 * The kernels use it for RNE under -DCOMPRESS_CUDA_SOFT_FP8 only; its SR is
 * the reference selftest_cuda.cu holds sr_cut to, over all floats. */
template <int FMT>
__device__ __forceinline__ unsigned fp8_encode_sw(float x, bool stochastic, unsigned rnd) {
    typedef Fp8T<FMT> T;
    const unsigned bits = __float_as_uint(x);
    const unsigned sign = (bits >> 24) & 0x80u;
    const unsigned a = bits & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7Fu;
    if (a == 0x7F800000u) return sign | T::MAXC;
    const unsigned fexp = a >> 23;
    unsigned sig = a & 0x7FFFFFu;
    int e;
    if (fexp == 0) {
        e = -126;
    } else {
        sig |= 0x800000u;
        e = (int)fexp - 127;
    }
    int eb = e + T::BIAS, shift = 23 - T::MB;
    if (eb < 1) {
        shift += 1 - eb;
        eb = 1;
    }
    const u64 t = shift < 64 ? (((u64)sig << 32) >> shift) : 0ull;
    const unsigned kept = (unsigned)(t >> 32), F = (unsigned)t;
    unsigned up;
    if (stochastic) up = ((u64)F + rnd) >= 0x100000000ull;
    else up = (F > 0x80000000u || (F == 0x80000000u && (kept & 1u))) ? 1u : 0u;
    unsigned code = ((unsigned)(eb - 1) << T::MB) + kept + up;
    if (code > T::MAXC) code = T::MAXC;
    return sign | code;
}

/* two codes, round to nearest even, saturating (+-inf -> +-max); lo in the
 * low byte. A NaN input's code is overwritten by the caller (cuda_codec.cuh). */
template <int FMT>
__device__ __forceinline__ unsigned fp8x2_rne(float lo, float hi) {
#ifdef COMPRESS_CUDA_SOFT_FP8
    return fp8_encode_sw<FMT>(lo, false, 0u) | (fp8_encode_sw<FMT>(hi, false, 0u) << 8);
#else
    return (unsigned)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE,
                                              FMT == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
#endif
}

/* The Philox4x32-10 words 4 blk .. 4 blk + 3 of (seed, stream): rng.h's
 * mapping, which is curand_init(seed, stream, 4 blk) + curand(). Stochastic
 * rounding takes a byte of a word per element (rng_sr_word), so block blk
 * serves elements 16 blk .. 16 blk + 15. */
__device__ __forceinline__ uint4 philox_block(u64 seed, u64 stream, u64 blk) {
    return curand_Philox4x32_10(make_uint4((unsigned)blk, (unsigned)(blk >> 32), (unsigned)stream, (unsigned)(stream >> 32)),
                                make_uint2((unsigned)seed, (unsigned)(seed >> 32)));
}

/* Stochastic rounding of v to the fp8 grid with the random byte r, as a
 * float the cast then encodes exactly (rng.h's rng_sr_word and fp8.c's rule:
 * up iff floor(R * 512) + 2r + 1 >= 512, R the dropped fraction of a unit).
 * In the fp8 normal range a unit is bit D = 23 - MB of the float, so R's
 * first 9 bits are the float's bits D-1 .. D-9: adding (2r + 1) << (D - 9)
 * to the bits carries into bit D exactly when the value rounds up (into the
 * exponent too, which is the next binade), and clearing bits 0 .. D-1 leaves
 * the rounded value. The cast's satfinite then saturates what went past the
 * largest code, as fp8.c clamps; the caller keeps |v| <= 2^127 so the add
 * cannot reach the inf/NaN bits.
 *
 * TINY: some |v| may lie below the normal range (2^-6 for E4M3), where the
 * unit is the fixed subnormal spacing. There a = |v| + 2^-6 rounded toward
 * zero is a number of the smallest normal binade whose bits hold a's units
 * and their first 23 - MB dropped bits (RZ truncates, so the first 9 are
 * a's own), the same add rounds it, and subtracting 2^-6 again is exact
 * (both are multiples of the subnormal spacing, Sterbenz). The sign is put
 * back by its bit, so -tiny that rounds to zero stays -0, as fp8.c. */
template <int FMT, bool TINY>
__device__ __forceinline__ float sr_cut(float v, unsigned r) {
    constexpr int D = 23 - Fp8T<FMT>::MB;
    constexpr unsigned KEEP = ~((1u << D) - 1u);
    const unsigned add = (2u * r + 1u) << (D - 9);
    if constexpr (!TINY) {
        return __uint_as_float((__float_as_uint(v) + add) & KEEP);
    } else {
        const float a = fabsf(v), off = a < Fp8T<FMT>::MIN_NORMAL ? Fp8T<FMT>::MIN_NORMAL : 0.0f;
        const float y = __uint_as_float((__float_as_uint(__fadd_rz(a, off)) + add) & KEEP);
        return __uint_as_float(__float_as_uint(__fsub_rn(y, off)) | (__float_as_uint(v) & 0x80000000u));
    }
}

/* fp8_decode: exact; NaN codes -> NaN, E5M2 inf -> inf */
template <int FMT>
__device__ __forceinline__ float fp8_decode_exact(unsigned c) {
    typedef Fp8T<FMT> T;
    const unsigned mag = c & 0x7Fu;
    float v;
    if (FMT == FP8_E4M3 && mag == 0x7Fu) v = __uint_as_float(0x7FC00000u);
    else if (FMT == FP8_E5M2 && mag >= 0x7Cu) v = __uint_as_float(mag == 0x7Cu ? 0x7F800000u : 0x7FC00000u);
    else v = __fmul_rn(__uint_as_float(mag << T::SHIFT), pow2f_dev(T::BA)); /* the fp8 value * 2^-BA, exact (also fp8 subnormals), then * 2^BA: exact */
    return (c & 0x80u) ? -v : v;
}

} /* namespace */

#endif /* COMPRESS_CUDA_DEVICE_CUH */
