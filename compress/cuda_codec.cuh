/*
 * compress/cuda_codec.cuh - one unit through a method: the kernels' view of a
 * method (Codec), a unit's encode (the FP8 pipeline, the bare cast,
 * int8_group, raw fp32 / bf16 words) with its per-thread statistics. The
 * decode side is compress/cuda_decode.cuh. The arithmetic is taco.c's and
 * compress.c's, step for step.
 *
 * Work mapping: a thread owns a unit of 64 consecutive elements, which is
 * 64 / G whole groups (G <= 64) or 64 elements of one group (G = 128, 256:
 * tpg = G / 64 consecutive lanes). Group quantities (amax, exponent, the
 * per-group multiplier, "rotated") are kept per 16-element sub-block, SB = 4
 * copies per thread, equal within a group: group_max() combines them. The
 * Hadamard's stages h < 64 run on the thread's registers; G = 128 / 256 add
 * one / two stages across lanes (shuffles).
 */
#ifndef COMPRESS_CUDA_CODEC_CUH
#define COMPRESS_CUDA_CODEC_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "common/bf16.h"
#include "compress/compress_cuda.h"
#include "compress/cuda_bfly.cuh"
#include "compress/cuda_device.cuh"
#include "compress/cuda_unit_io.cuh"

namespace {

/* The kernels' code paths (a template parameter or a uniform branch):
 * methods.h's families, with the bare cast run by the FP8 path (Codec.cast).
 * FAM_NONE: raw fp32 or bf16 words (Codec.eb 4 or 2). */
enum Family { FAM_FP8 = 0, FAM_INT8 = 1, FAM_NONE = 2 };

/* Everything a kernel needs to know about a method: its row in methods.h,
 * resolved for the CompressParams on the host (compress_cuda.cu's codec_of). */
struct Codec {
    int fam;          /* Family */
    int fmt;          /* Fp8Format */
    int G, lg, tpg;   /* group length (UNIT for methods without groups), log2(G), lanes per group (1, 2 or 4) */
    int cast;         /* the bare codec: no scaling, NaN stays NaN, inf saturates */
    int hadamard, adaptive, dual;
    int delayed;      /* dual scale from delayed_amax (valid: > 0 and finite) */
    int delayed_dev;  /* the method scales by a delayed amax (dual, p->delayed): a job's device value may set it */
    int stochastic;
    int hdr, gb, eb;  /* wire: header bytes, bytes per group, bytes per element */
    int tiled;        /* an fp32 second scale per tile of COMPRESS_WIRE_TILE (taco), not one in the header */
    int gran;         /* ranges start on multiples of this (compress_wire_layout) */
    int stats_amax_r; /* stats amax = amax of the transformed values (methods with a chunk scale), else raw input amax */
    int keep;         /* input codec of a sum that stays rotated (compress_sum_stays_rotated): the
                         groups that can stay are left as R, no inverse transform (taco_decode_sum_rotated) */
    float L;          /* fp8 max */
    float norm;       /* hadamard_norm(G) */
    float delayed_amax;
    u64 seed;
    int fast;         /* the kernel holds cuda_fast.cuh's straight-line path for this codec: set, as a
                         compile-time constant, by shape_codec only (0 from the host) */
};

/* A kernel's shape (a template parameter): what is known of its launch's
 * Codec when the kernel is compiled. compress_cuda.cu launches the kernel of
 * the codec's shape (shape_of); the kernel overwrites the fields its shape
 * fixes with the same values as constants (shape_codec), so that the
 * compiler drops every test on them, and only the kernels whose codecs can
 * take the straight-line common case (cuda_fast.cuh) carry its code: each
 * kernel is the smaller for what it need not do (the kernels holding both
 * paths for every method cost fp8_group and int8_group 0-12%, H200,
 * 2026-12-02).
 *   SHAPE_ANY      any codec; no straight-line path
 *   SHAPE_GROUP64  FP8 with an adaptive group exponent per 64-element unit
 *                  and a second (dual) scale: TACO G = 64, its Hadamard on
 *                  or off (the fused recompress encodes with it off)
 *   SHAPE_TENSOR   FP8 with one chunk scale and nothing else: fp8_tensor
 *   SHAPE_GROUP128 FP8 with an adaptive group exponent per 128 elements (two
 *                  lanes) and nothing else: fp8_group at G = 128
 *   SHAPE_WIDE128  the same groups with the Hadamard or the dual scale, which
 *                  the straight-line path does not take across lanes: TACO
 *                  at G = 128 (general path only)
 *   SHAPE_INT8_64  int8_group at G = 64 (general path only) */
enum Shape { SHAPE_ANY = 0, SHAPE_GROUP64 = 1, SHAPE_TENSOR = 2, SHAPE_GROUP128 = 3, SHAPE_WIDE128 = 4, SHAPE_INT8_64 = 5 };
inline int shape_of(const Codec& c) {
    if (c.fam == FAM_INT8) return c.G == UNIT && c.tpg == 1 ? SHAPE_INT8_64 : SHAPE_ANY;
    if (c.fam != FAM_FP8 || c.cast) return SHAPE_ANY;
    if (c.adaptive && c.gb == 1 && c.G == 2 * UNIT && c.tpg == 2) return c.dual || c.hadamard ? SHAPE_WIDE128 : SHAPE_GROUP128;
    if (!c.dual || c.G != UNIT || c.tpg != 1) return SHAPE_ANY;
    if (c.adaptive && c.gb == 1) return SHAPE_GROUP64;
    if (!c.adaptive && !c.hadamard && c.gb == 0) return SHAPE_TENSOR;
    return SHAPE_ANY;
}
/* the shapes a family's kernels are built for */
__host__ __device__ constexpr bool shape_fits(int fam, int shape) {
    return shape == SHAPE_ANY || (fam == FAM_FP8 ? shape != SHAPE_INT8_64 : fam == FAM_INT8 && shape == SHAPE_INT8_64);
}
template <int SHAPE>
__device__ __forceinline__ Codec shape_codec(Codec c) {
    c.fast = SHAPE == SHAPE_GROUP64 || SHAPE == SHAPE_TENSOR || SHAPE == SHAPE_GROUP128;
    if (SHAPE == SHAPE_ANY) return c;
    if (SHAPE == SHAPE_INT8_64) {
        c.fam = FAM_INT8;
        c.G = UNIT;
        c.lg = 6;
        c.tpg = 1;
        c.gb = 4;
        return c;
    }
    c.fam = FAM_FP8;
    c.cast = 0;
    c.adaptive = SHAPE != SHAPE_TENSOR;
    c.gb = SHAPE == SHAPE_TENSOR ? 0 : 1;
    if (SHAPE == SHAPE_GROUP128 || SHAPE == SHAPE_WIDE128) {
        c.G = 2 * UNIT;
        c.lg = 7;
        c.tpg = 2;
        if (SHAPE == SHAPE_GROUP128) c.dual = c.hadamard = 0;
        return c;
    }
    c.dual = 1;
    c.G = UNIT;
    c.lg = 6;
    c.tpg = 1;
    if (SHAPE == SHAPE_TENSOR) c.hadamard = 0;
    return c;
}
static_assert(UNIT == 64, "shape_codec's lg");

/* a thread's statistics, block-reduced by the kernel at its end */
struct TStats {
    unsigned sat, nf;
    float amax; /* >= 0, NaN-free */
};

/* ========================================================================== */
/* groups on sub-blocks                                                        */

/* max over the sub-blocks (and lanes) of each group; every lane of the warp
 * calls (values >= 0 as float bits order like unsigned ints) */
__device__ __forceinline__ void group_max(unsigned (&a)[SB], const Codec& c) {
    if (c.G >= 32) {
        a[0] = a[1] = max(a[0], a[1]);
        a[2] = a[3] = max(a[2], a[3]);
    }
    if (c.G >= 64) a[0] = a[1] = a[2] = a[3] = max(a[0], a[2]);
    if (c.tpg > 1) a[0] = a[1] = a[2] = a[3] = max(a[0], __shfl_xor_sync(FULL, a[0], 1));
    if (c.tpg > 2) a[0] = a[1] = a[2] = a[3] = max(a[0], __shfl_xor_sync(FULL, a[0], 2));
}

/* 1 if sub-block sb of unit u lies in a full group of the chunk */
__device__ __forceinline__ bool sb_full(const Codec& c, unsigned u, int sb, const Span& sp) {
    const u64 n = (u64)UNIT * sp.nfull + sp.tail;
    const u64 gs = ((u64)UNIT * u + 16u * (unsigned)sb) & ~(u64)(c.G - 1);
    return gs + (u64)c.G <= n;
}
/* sb_full for the unit's four sub-blocks: all of them when the unit's last
 * group ends on a full unit (one compare, the common case), else each */
__device__ __forceinline__ void sbs_full(const Codec& c, unsigned u, const Span& sp, bool (&f)[SB]) {
    const bool all = (u | (unsigned)(c.tpg - 1)) < sp.nfull;
#pragma unroll
    for (int sb = 0; sb < SB; sb++) f[sb] = all;
    if (!all) {
#pragma unroll
        for (int sb = 0; sb < SB; sb++) f[sb] = sb_full(c, u, sb, sp);
    }
}

/* 1 if sub-block sb starts a group (G >= 16 is a power of two): group
 * quantities are computed there and copied to the rest of the group */
__device__ __forceinline__ bool sb_leads(const Codec& c, int sb) { return ((16 * sb) & (c.G - 1)) == 0; }

/* hadamard_butterflies on every group with rot[sb] set, in the CPU's stage
 * order. A cross-lane stage h = 64 m: the lane without bit m holds x[j] (a)
 * and computes a + b, its partner holds x[j + h] (b) and computes a - b =
 * partner - mine; both are fma(mine, +-1, partner), which rounds once (the
 * product is exact), like the CPU's add / subtract, signed zeros included.
 * Every lane of the warp calls (the shuffles run outside any branch). */
__device__ __forceinline__ void butterflies(float (&v)[UNIT], const Codec& c, const bool (&rot)[SB], int lane) {
    if (rot[0] && rot[1] && rot[2] && rot[3]) bfly_local_all(v, c.G);
    else bfly_local_some(v, c.G, rot);
    /* at most two stages, spelled out: a run-time loop over all 64 values
     * would pin them to fixed registers and cost a move each */
    if (c.tpg > 1) bfly_lanes(v, 1, rot[0], lane);
    if (c.tpg > 2) bfly_lanes(v, 2, rot[0], lane);
}

/* ========================================================================== */
/* encode                                                                      */

/* The finite amax of each sub-block (float bits), and which elements are
 * inf / NaN. The fast scans see only that some element may be (special);
 * scan_resolve then redoes the unit exactly, the rare case. */
struct Scan {
    unsigned amax[SB];
    u64 nfmask, nanmask;
    bool special;
};

/* max |bits| over 16 packed bf16 values: exact magnitudes over finite
 * values, and at least the inf bits when one is not finite (a NaN gives the
 * canonical NaN), which is all the scan's test needs; the exact masks and
 * amax of such a unit come from scan_exact. One bf16x2_absmax_nan per word,
 * where an integer max of the masked bits took two. */
__device__ __forceinline__ Scan scan_bf16(const Row<2>& r) {
    Scan s;
    bool special = false;
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        unsigned t[4];
#pragma unroll
        for (int i = 0; i < 4; i++) t[i] = bf16x2_absmax_nan(row_word(r, 8 * sb + 2 * i), row_word(r, 8 * sb + 2 * i + 1));
        /* a tree (three deep, not seven: the int8 encode waits for its amax) */
        unsigned m = bf16x2_absmax_nan(bf16x2_absmax_nan(t[0], t[1]), bf16x2_absmax_nan(t[2], t[3]));
        m &= 0x7FFF7FFFu; /* the sign bits xorsign left */
        s.amax[sb] = max(m << 16, m & 0xFFFF0000u);
        special |= s.amax[sb] >= 0x7F800000u;
    }
    s.nfmask = s.nanmask = 0ull;
    s.special = special;
    return s;
}
/* max |v| over sub-block sb as float bits: the finite amax when every value
 * is finite, else at least the inf bits (NaN wins); a tree of 15 NaN-keeping
 * maxima (one instruction per element, where an integer max of the masked
 * bits took two) */
__device__ __forceinline__ unsigned absmax_bits(const float (&v)[UNIT], int sb) {
    float m[8];
#pragma unroll
    for (int i = 0; i < 8; i++) m[i] = max_abs_nan(fabsf(v[16 * sb + 2 * i]), v[16 * sb + 2 * i + 1]);
#pragma unroll
    for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
        for (int i = 0; i < w; i++) m[i] = max_abs_nan(m[i], m[i + w]);
    return __float_as_uint(m[0]);
}
__device__ __forceinline__ Scan scan_f32(const float (&v)[UNIT]) {
    Scan s;
    bool special = false;
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        s.amax[sb] = absmax_bits(v, sb);
        special |= s.amax[sb] >= 0x7F800000u;
    }
    s.nfmask = s.nanmask = 0ull;
    s.special = special;
    return s;
}
/* A copy of the unit's values for a rare path's run-time loop: the loop
 * indexes the copy (local memory), so v keeps its registers. */
__device__ __forceinline__ void to_local(const float (&v)[UNIT], float (&t)[UNIT]) {
#pragma unroll
    for (int j = 0; j < UNIT; j++) t[j] = v[j];
}

/* the rare unit with an inf or NaN: exact masks, amax over the finite
 * elements (a loop over a local copy: small code, and v keeps its registers) */
__device__ __forceinline__ Scan scan_exact(const float (&v)[UNIT]) {
    float t[UNIT];
    to_local(v, t);
    Scan s;
    s.nfmask = 0ull;
    s.nanmask = 0ull;
    s.special = false;
    unsigned m[SB] = {0u, 0u, 0u, 0u};
#pragma unroll 1
    for (int j = 0; j < UNIT; j++) {
        const unsigned ab = __float_as_uint(t[j]) & 0x7FFFFFFFu;
        if (ab >= 0x7F800000u) {
            s.nfmask |= 1ull << j;
            if (ab > 0x7F800000u) s.nanmask |= 1ull << j;
        } else {
            m[j >> 4] = max(m[j >> 4], ab);
        }
    }
#pragma unroll
    for (int sb = 0; sb < SB; sb++) s.amax[sb] = m[sb];
    return s;
}
__device__ __forceinline__ void scan_resolve(Scan& s, const float (&v)[UNIT]) {
    if (s.special) s = scan_exact(v);
}

/* v = v 2^e, the values of a sum taken relative to a copy's scale (fast_sum:
 * e in [-126, 127], and each product exact) */
__device__ __forceinline__ void unscale(float (&v)[UNIT], int e) {
    if (e == 0) return;
    const float m = pow2f_dev(e);
#pragma unroll
    for (int j = 0; j < UNIT; j++) v[j] = __fmul_rn(v[j], m);
}
/* the scan of such v 2^-e made the scan of v: each amax times 2^e, exact (it
 * is one of the values); the masks stay */
__device__ __forceinline__ void scan_scale(Scan& s, int e) {
    if (e == 0) return;
    const float m = pow2f_dev(e);
#pragma unroll
    for (int sb = 0; sb < SB; sb++) s.amax[sb] = __float_as_uint(__fmul_rn(__uint_as_float(s.amax[sb]), m));
}

__device__ __forceinline__ unsigned max4f_bits(const unsigned (&a)[SB]) { return max(max(a[0], a[1]), max(a[2], a[3])); }
__device__ __forceinline__ float max4f(const unsigned (&a)[SB]) { return __uint_as_float(max4f_bits(a)); }

/* max |v| over sub-block sb, NaN-free (0 when all are NaN), as float bits:
 * a tree of fmaxf on |v| (one FMNMX per element; fmaxf drops a NaN operand,
 * like taco.c's comparison) */
__device__ __forceinline__ unsigned absmax16(const float (&v)[UNIT], int sb) {
    float m[8];
#pragma unroll
    for (int i = 0; i < 8; i++) m[i] = fmaxf(fabsf(v[16 * sb + 2 * i]), fabsf(v[16 * sb + 2 * i + 1]));
#pragma unroll
    for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
        for (int i = 0; i < w; i++) m[i] = fmaxf(m[i], m[i + w]);
    return __float_as_uint(fmaxf(m[0], 0.0f));
}

/* taco.c steps 1-3 for the thread's groups: v becomes h (scaled by 2^-e_u,
 * nonfinite slots zeroed, rotated by the unnormalised butterflies if the
 * group is full and finite). Every lane of the warp calls.
 *
 * The scale 2^-e_u is usually not applied here but folded into step 6's
 * multiplier (folded): H_un(x 2^-e) = H_un(x) 2^-e bit for bit when no value
 * of either domain loses bits to the subnormal range or overflows, and that
 * holds for every group of the unit when each e_u <= fold_max (taco.c's
 * arithmetic on a grid: every intermediate is a multiple of the inputs'
 * finest ulp 2^q, so a value below the normal range is exact in both domains
 * as long as q - e_u >= -149; bf16 inputs have q >= -133, so fold_max = 16,
 * and the sums stay below G 2^17; fp32 inputs may be subnormal: 0). */
struct Prep {
    int e_u[SB];
    float ng[SB];     /* norm if rotated, else 1 */
    unsigned amax_h[SB]; /* max |h| of the group, NaN-free (float bits), in the scaled domain */
    float amax_x;     /* max |x| over the unit's finite elements */
    bool folded;      /* v holds H_un(x) unscaled: step 6 multiplies by 2^-e_u too */
};
__device__ __forceinline__ Prep fp8_prepare(const Codec& c, float (&v)[UNIT], const Scan& sc, unsigned u, const Span& sp,
                                            int lane, int fold_max) {
    Prep p;
    p.amax_x = max4f(sc.amax);
    unsigned a[SB], nf[SB];
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        a[sb] = sc.amax[sb];
        nf[sb] = ((sc.nfmask >> (16 * sb)) & 0xFFFFull) != 0ull ? 1u : 0u;
    }
    group_max(a, c);
    group_max(nf, c);
    bool rot[SB], full[SB];
    sbs_full(c, u, sp, full);
    bool fold = true;
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        if (sb == 0 || sb_leads(c, sb)) p.e_u[sb] = c.adaptive ? -pow2_fit_dev(__uint_as_float(a[sb]), 1.0f) : 0;
        else p.e_u[sb] = p.e_u[sb - 1];
        rot[sb] = c.hadamard && !nf[sb] && full[sb];
        p.ng[sb] = rot[sb] ? c.norm : 1.0f;
        fold = fold && p.e_u[sb] <= fold_max;
    }
    p.folded = c.adaptive && fold;
    if (c.adaptive && !p.folded) {
        float down[SB];
#pragma unroll
        for (int sb = 0; sb < SB; sb++) down[sb] = pow2f_dev(-p.e_u[sb]);
#pragma unroll
        for (int j = 0; j < UNIT; j++) v[j] = __fmul_rn(v[j], down[j >> 4]);
    }
    if (sc.nfmask) {
#pragma unroll
        for (int j = 0; j < UNIT; j++)
            if ((sc.nfmask >> j) & 1ull) v[j] = 0.0f;
    }
    if (c.hadamard) butterflies(v, c, rot, lane);
    /* max |h| (a NaN only from overflow inside the transform is left out, as taco.c) */
#pragma unroll
    for (int sb = 0; sb < SB; sb++) p.amax_h[sb] = absmax16(v, sb);
    group_max(p.amax_h, c);
    /* folded: the scaled domain's max is this one times 2^-e_u, exactly */
    if (p.folded) {
#pragma unroll
        for (int sb = 0; sb < SB; sb++)
            p.amax_h[sb] = (sb == 0 || sb_leads(c, sb)) ? __float_as_uint(__fmul_rn(__uint_as_float(p.amax_h[sb]), pow2f_dev(-p.e_u[sb])))
                                                        : p.amax_h[sb - 1];
    }
    return p;
}

/* max |r| of the unit's groups: amax_h * n_g (taco.c's amax_r) */
__device__ __forceinline__ float prep_amax_r(const Prep& p) {
    float m = 0.0f;
#pragma unroll
    for (int sb = 0; sb < SB; sb++) m = fmaxf(m, __fmul_rn(__uint_as_float(p.amax_h[sb]), p.ng[sb]));
    return m;
}

/* SR's random words for sub-block sb of unit u: Philox block SB u + sb, so
 * element 16 sb + 4 k + b takes byte b of word k (rng.h's rng_sr_word:
 * element i, byte i % 4 of word i / 4) */
__device__ __forceinline__ void sr_words(const Codec& c, u64 stream, unsigned u, int sb, unsigned (&w)[4]) {
    const uint4 q = philox_block(c.seed, stream, (u64)SB * u + (u64)sb);
    w[0] = q.x;
    w[1] = q.y;
    w[2] = q.z;
    w[3] = q.w;
}

/* Sub-block sb's codes with stochastic rounding, from its random words w
 * (sr_words, sr_cut) */
template <int FMT, bool TINY>
__device__ __forceinline__ void quantize_sr_sb(const float (&v)[UNIT], int sb, const unsigned (&w)[4], Row<1>& out) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int j = 16 * sb + 4 * k;
        float t[4];
#pragma unroll
        for (int b = 0; b < 4; b++) t[b] = sr_cut<FMT, TINY>(v[j + b], (w[k] >> (8 * b)) & 0xFFu);
        row_set_word(out, 4 * sb + k, fp8x2_rne<FMT>(t[0], t[1]) | (fp8x2_rne<FMT>(t[2], t[3]) << 16));
    }
}

/* four codes of v[4i..4i+3], RNE (hardware, satfinite) or SR. SR needs
 * |v| <= 2^127 (sr_cut). A sub-block in which some lane of the warp has a
 * nonzero value below the fp8 normal range takes sr_cut's longer form,
 * decided per sub-block, not per unit: on the benchmark's data 94% of the
 * warps had such a value somewhere in their 2048 (H200, 2026-12-03), and the
 * longer form then ran on every element. Zeros round exactly on the short
 * form (the add stays below bit D) and must not count: a sum of P copies has
 * exact zeros wherever two codes cancel (1.4% of the benchmark's recompressed
 * values), so nearly every sub-block of a recompress has one. The test key
 * 2 bits - 2 drops the sign and wraps +-0 to the top, so one unsigned min
 * finds the smallest nonzero |v|. Every lane of the warp calls. */
template <int FMT, bool SR>
__device__ __forceinline__ void quantize(const Codec& c, const float (&v)[UNIT], unsigned u, u64 stream, Row<1>& out) {
    if constexpr (!SR) {
#pragma unroll
        for (int i = 0; i < UNIT / 4; i++)
            row_set_word(out, i, fp8x2_rne<FMT>(v[4 * i], v[4 * i + 1]) | (fp8x2_rne<FMT>(v[4 * i + 2], v[4 * i + 3]) << 16));
    } else {
        /* the four Philox calls and tests first, then the branches: calls
         * separated by branches ran one after another (each a chain of 10
         * dependent rounds), and fp8_group's SR encode was 6% slower that way */
        unsigned w[SB][4];
        unsigned tiny = 0u;
#pragma unroll
        for (int sb = 0; sb < SB; sb++) {
            sr_words(c, stream, u, sb, w[sb]);
            unsigned k = 0xFFFFFFFFu;
#pragma unroll
            for (int j = 16 * sb; j < 16 * sb + 16; j++) k = min(k, __float_as_uint(v[j]) * 2u - 2u);
            if (__ballot_sync(0xFFFFFFFFu, k < __float_as_uint(Fp8T<FMT>::MIN_NORMAL) * 2u - 2u)) tiny |= 1u << sb;
        }
#pragma unroll
        for (int sb = 0; sb < SB; sb++) {
            if ((tiny >> sb) & 1u) quantize_sr_sb<FMT, true>(v, sb, w[sb], out);
            else quantize_sr_sb<FMT, false>(v, sb, w[sb], out);
        }
    }
}

/* sr_cut's bound: |v| <= 2^127, NaN to +2^127 (a NaN from overflow, which the
 * CPU encodes as +inf); every value beyond the fp8 range encodes to +-max */
__device__ __forceinline__ void sr_clamp(float (&v)[UNIT]) {
#pragma unroll
    for (int j = 0; j < UNIT; j++) v[j] = isnan(v[j]) ? 0x1p127f : fminf(fmaxf(v[j], -0x1p127f), 0x1p127f);
}

/* taco.c step 5 for the group of sub-block sb: returns k_m, *b = the wire exponent */
__device__ __forceinline__ int group_km(const Codec& c, const Prep& p, int sb, int kc, int* b) {
    if (c.dual) {
        *b = p.e_u[sb];
        return kc;
    }
    if (c.adaptive) {
        /* the group's own exponent maps it onto the fp8 range */
        const int kg = pow2_fit_dev(__fmul_rn(__uint_as_float(p.amax_h[sb]), p.ng[sb]), c.L);
        *b = min(max(p.e_u[sb] - kg, TACO_EXP_MIN), TACO_EXP_MAX);
        return p.e_u[sb] - *b;
    }
    *b = 0;
    return 0;
}

/* code 0x7F in the slots of mask */
__device__ __forceinline__ void set_nan_codes(Row<1>& out, u64 mask) {
#pragma unroll
    for (int i = 0; i < UNIT / 4; i++) {
        unsigned w = row_word(out, i);
#pragma unroll
        for (int b = 0; b < 4; b++)
            if ((mask >> (4 * i + b)) & 1ull) w = (w & ~(0xFFu << (8 * b))) | (0x7Fu << (8 * b));
        row_set_word(out, i, w);
    }
}

/* where an encoded unit's group bytes go */
struct GOut {
    uint8_t* exps; /* group bytes of the job's first group (NULL when gb == 0) */
    unsigned g0;   /* that group's index in the chunk */
};

/* taco.c steps 5-6 for the thread's groups (after fp8_prepare), or the bare
 * cast (c.cast; v as given). kc = the chunk scale's exponent. */
template <int FMT, bool SR>
__device__ __forceinline__ void fp8_finish_unit(const Codec& c, float (&v)[UNIT], const Scan& sc, const Prep& p,
                                                unsigned u, int nv, int kc, int lane, const GOut& go, u64 stream,
                                                Row<1>& out, TStats& ts);
template <int FMT, bool SR>
__device__ __forceinline__ void fp8_encode_unit(const Codec& c, float (&v)[UNIT], const Scan& sc, unsigned u, int nv,
                                                const Span& sp, int kc, int lane, const GOut& go, u64 stream,
                                                Row<1>& out, TStats& ts) {
    if (c.cast) {
        /* the bare codec: NaN -> 0x7F, +-inf -> +-max, |finite| > L counted */
        ts.nf += __popcll(sc.nfmask);
        const float a = max4f(sc.amax);
        ts.amax = fmaxf(ts.amax, a);
        if (a > c.L) {
#pragma unroll
            for (int j = 0; j < UNIT; j++)
                if (!((sc.nfmask >> j) & 1ull) && fabsf(v[j]) > c.L) ts.sat++;
        }
        if (SR && (a > c.L || sc.nfmask)) sr_clamp(v); /* +-inf and huge values (NaN slots are overwritten) */
        quantize<FMT, SR>(c, v, u, stream, out);
        if (sc.nanmask) set_nan_codes(out, sc.nanmask);
        return;
    }
    const Prep p = fp8_prepare(c, v, sc, u, sp, lane, 0);
    fp8_finish_unit<FMT, SR>(c, v, sc, p, u, nv, kc, lane, go, stream, out, ts);
}

/* taco.c steps 5-6 for the thread's groups after fp8_prepare; kc = the
 * exponent of the second scale (of the chunk, or of the unit's tile) */
template <int FMT, bool SR>
__device__ __forceinline__ void fp8_finish_unit(const Codec& c, float (&v)[UNIT], const Scan& sc, const Prep& p,
                                                unsigned u, int nv, int kc, int lane, const GOut& go, u64 stream,
                                                Row<1>& out, TStats& ts) {
    ts.nf += __popcll(sc.nfmask);
    ts.amax = fmaxf(ts.amax, c.stats_amax_r ? prep_amax_r(p) : p.amax_x);
    float Mv[SB]; /* the multiplier applied to v: M, or M 2^-e_u when folded */
    bool check = c.hadamard && !c.adaptive; /* only then can h hold a NaN (overflow) */
    bool one = true; /* not folded, or every M 2^-e_u a normal float: one multiply per element */
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        if (sb == 0 || sb_leads(c, sb)) {
            int b;
            const int km = group_km(c, p, sb, kc, &b);
            const float M = __fmul_rn(p.ng[sb], pow2f_dev(km));
            /* max |v| = round(max |h| * M) (rounding is monotonic): one compare per group */
            check |= !(__fmul_rn(__uint_as_float(p.amax_h[sb]), M) <= c.L);
            if (p.folded) {
                const int kv = km - p.e_u[sb];
                Mv[sb] = __fmul_rn(p.ng[sb], pow2f_dev(kv));
                one = one && kv >= -126 && kv <= 127 && Mv[sb] >= 1.17549435e-38f;
            } else {
                Mv[sb] = M;
            }
            /* the group's byte, from the lane that starts it */
            if (go.exps && 16 * sb < nv && (lane & (c.tpg - 1)) == 0)
                go.exps[(((u64)UNIT * u + 16u * (unsigned)sb) >> c.lg) - go.g0] = (uint8_t)(b + 127);
        } else {
            Mv[sb] = Mv[sb - 1];
        }
    }
    if (one) {
#pragma unroll
        for (int j = 0; j < UNIT; j++) v[j] = __fmul_rn(v[j], Mv[j >> 4]);
    } else { /* rare: scale first (exact, see fp8_prepare), then M */
#pragma unroll
        for (int sb = 0; sb < SB; sb++) {
            int b;
            const float d = pow2f_dev(-p.e_u[sb]), M = __fmul_rn(p.ng[sb], pow2f_dev(group_km(c, p, sb, kc, &b)));
#pragma unroll
            for (int j = 16 * sb; j < 16 * sb + 16; j++) v[j] = __fmul_rn(__fmul_rn(v[j], d), M);
        }
    }
    if (check) { /* count what saturates (delayed scaling can), and turn an overflow NaN into +inf */
        unsigned s = 0u;
        if (nv == UNIT && !sc.nfmask) {
#pragma unroll
            for (int j = 0; j < UNIT; j++) s += fabsf(v[j]) > c.L ? 1u : 0u;
        } else {
#pragma unroll
            for (int j = 0; j < UNIT; j++) s += (j < nv && !((sc.nfmask >> j) & 1ull) && fabsf(v[j]) > c.L) ? 1u : 0u;
        }
        if (c.hadamard && !c.adaptive) { /* only then can v hold a NaN (overflow inside the transform) */
#pragma unroll
            for (int j = 0; j < UNIT; j++) {
                if (j < nv && !((sc.nfmask >> j) & 1ull) && isnan(v[j])) {
                    s++;
                    v[j] = __uint_as_float(0x7F800000u); /* never a NaN code for finite input */
                }
            }
        }
        ts.sat += s;
        if (SR) sr_clamp(v);
    }
    quantize<FMT, SR>(c, v, u, stream, out);
    if (sc.nfmask) set_nan_codes(out, sc.nfmask);
}

/* int8_group (compress.c int8_encode): step d = amax / 127 per group, q =
 * round(x * (127 / amax)) (x / d where 127 / amax overflows), -128 for
 * NaN/inf; RNE, or SR with F = frac * 2^32 and rng_sr_word's byte. RNE
 * rounds by the 1.5 * 2^23 trick: adding it leaves round(t) in the low bits of the sum, the same
 * ties-to-even rounding as rintf. */
__device__ __forceinline__ void int8_encode_unit(const Codec& c, const float (&v)[UNIT], const Scan& sc, unsigned u,
                                                 int nv, int lane, const GOut& go, u64 stream, Row<1>& out, TStats& ts) {
    ts.nf += __popcll(sc.nfmask);
    ts.amax = fmaxf(ts.amax, max4f(sc.amax));
    unsigned a[SB];
#pragma unroll
    for (int sb = 0; sb < SB; sb++) a[sb] = sc.amax[sb];
    group_max(a, c);
    float d[SB], inv[SB];
    bool slow = sc.nfmask != 0ull;
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        const float am = __uint_as_float(a[sb]);
        d[sb] = __fdiv_rn(am, 127.0f);
        inv[sb] = __fdiv_rn(127.0f, am);
        slow |= d[sb] == 0.0f || !(inv[sb] <= 3.0e38f);
        if (go.exps && 16 * sb < nv && ((16 * sb) & (c.G - 1)) == 0 && (lane & (c.tpg - 1)) == 0)
            store_u32_any(go.exps + 4 * (size_t)((((u64)UNIT * u + 16u * (unsigned)sb) >> c.lg) - go.g0), __float_as_uint(d[sb]));
    }
    if (!slow && !c.stochastic) {
#pragma unroll
        for (int i = 0; i < UNIT / 4; i++) {
            unsigned w = 0u;
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int j = 4 * i + b;
                const float t = __fadd_rn(__fmul_rn(v[j], inv[j >> 4]), 12582912.0f);
                w |= (__float_as_uint(t) & 0xFFu) << (8 * b);
            }
            row_set_word(out, i, w);
        }
        return;
    }
    if (!slow) {
        /* SR: with the random byte r, |q| = (floor(512 |t|) + 2r + 1) >> 9,
         * the CPU's "up iff F + rnd >= 2^32" for rnd = rng_sr_word (only F's
         * first 9 bits, floor(512 frac |t|), decide). 512 |t| is exact and
         * below 2^24 (|t| is clamped to 256: anything above 128 saturates). */
        unsigned sat = 0u;
#pragma unroll
        for (int sb = 0; sb < SB; sb++) {
            unsigned rw[4];
            sr_words(c, stream, u, sb, rw);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                unsigned w = 0u;
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    const int j = 16 * sb + 4 * k + b;
                    const float t = __fmul_rn(v[j], inv[sb]);
                    const unsigned t9 = __float2uint_rz(__fmul_rn(fminf(fabsf(t), 256.0f), 512.0f));
                    unsigned q = (t9 + 2u * ((rw[k] >> (8 * b)) & 0xFFu) + 1u) >> 9;
                    sat += q > 127u ? 1u : 0u;
                    q = min(q, 127u);
                    w |= ((t < 0.0f ? 0u - q : q) & 0xFFu) << (8 * b);
                }
                row_set_word(out, 4 * sb + k, w);
            }
        }
        ts.sat += sat;
        return;
    }
    /* nonfinite, or a step the reciprocal cannot take: element by element
     * over local copies (the rare path) */
    float t[UNIT];
    unsigned w[UNIT / 4];
    to_local(v, t);
#pragma unroll 1
    for (int i = 0; i < UNIT / 4; i++) {
        /* SR: word i % 4 of Philox block SB u + i / 4, byte b for element 4 i + b (rng_sr_word) */
        unsigned wd4 = 0u;
        if (c.stochastic) {
            unsigned rw[4];
            sr_words(c, stream, u, i >> 2, rw);
            wd4 = (i & 3) == 0 ? rw[0] : (i & 3) == 1 ? rw[1] : (i & 3) == 2 ? rw[2] : rw[3];
        }
        unsigned wd = 0u;
        for (int b = 0; b < 4; b++) {
            const int j = 4 * i + b, sb = j >> 4;
            int q = 0;
            const float dj = sb == 0 ? d[0] : sb == 1 ? d[1] : sb == 2 ? d[2] : d[3];
            const float ij = sb == 0 ? inv[0] : sb == 1 ? inv[1] : sb == 2 ? inv[2] : inv[3];
            if ((sc.nfmask >> j) & 1ull) {
                q = -128;
            } else if (dj != 0.0f && j < nv) {
                const float tq = (ij <= 3.0e38f) ? __fmul_rn(t[j], ij) : __fdiv_rn(t[j], dj);
                const float at = fabsf(tq);
                float rr;
                if (c.stochastic) {
                    const float fl = floorf(at);
                    const unsigned F = __float2uint_rz(__fmul_rn(__fsub_rn(at, fl), 4294967296.0f));
                    const unsigned rnd = (((wd4 >> (8 * b)) & 0xFFu) << 24) | 0x800000u;
                    rr = __fadd_rn(fl, ((u64)F + rnd >= 0x100000000ull) ? 1.0f : 0.0f);
                } else {
                    rr = rintf(at);
                }
                if (rr > 127.0f) {
                    rr = 127.0f;
                    ts.sat++;
                }
                q = (tq < 0.0f) ? -(int)rr : (int)rr;
            }
            wd |= ((unsigned)q & 0xFFu) << (8 * b);
        }
        w[i] = wd;
    }
#pragma unroll
    for (int i = 0; i < UNIT / 4; i++) row_set_word(out, i, w[i]);
}

/* none: the fp32 bits as they are (eb = 4); bf16: rounded to nearest even
 * by bf16.h's integer rule, the CPU's bytes exactly (eb = 2) */
__device__ __forceinline__ void raw_stats(const Scan& sc, TStats& ts) {
    ts.nf += __popcll(sc.nfmask);
    ts.amax = fmaxf(ts.amax, max4f(sc.amax));
}
__device__ __forceinline__ void raw_encode_bf16(const float (&v)[UNIT], Row<2>& out, TStats& ts) {
#pragma unroll
    for (int i = 0; i < UNIT / 2; i++) {
        const unsigned b0 = __float_as_uint(v[2 * i]), b1 = __float_as_uint(v[2 * i + 1]);
        row_set_word(out, i, (unsigned)bf16_from_bits(b0) | ((unsigned)bf16_from_bits(b1) << 16));
        ts.sat += (unsigned)bf16_overflows(b0) + (unsigned)bf16_overflows(b1); /* slots past nv hold 0 */
    }
}

/* the second scale's exponent k_c of taco.c step 4 (0 without dual scale)
 * when it is the same for the whole job: delayed, or a current chunk scale
 * from the amax pass; a current tile scale comes from its block (tile_kc) */
__device__ __forceinline__ int chunk_kc(const Codec& c, const CompressStatsDev* st) {
    if (c.fam != FAM_FP8 || c.cast || !c.dual) return 0;
    if (c.delayed) return pow2_fit_dev(c.delayed_amax, __fdiv_rn(c.L, COMPRESS_HEADROOM_DELAYED));
    if (c.tiled) return 0;
    return pow2_fit_dev(__uint_as_float(st->scale_amax_bits), __fdiv_rn(c.L, COMPRESS_HEADROOM_CURRENT));
}
/* The codec a job runs with: when the delayed amax lives in device memory
 * (a site's history, comm/site_dev.h), it is read here, as the kernel
 * starts, and taco_encode's rule applied to it as codec_of applies it on the
 * host: used when > 0 and finite, else the current amax. So the host never
 * needs the value, and an exchange never waits to learn it. */
__device__ __forceinline__ Codec job_codec(const Codec& c, const float* damax) {
    Codec r = c;
    if (damax && c.delayed_dev) {
        const float a = *damax;
        r.delayed = a > 0.0f && isfinite(a);
        r.delayed_amax = a;
    }
    return r;
}
/* 1 if each tile's scale comes from its own current amax (one block per tile) */
__device__ __forceinline__ bool tile_current(const Codec& c) {
    return c.fam == FAM_FP8 && !c.cast && c.dual && !c.delayed && c.tiled;
}

} /* namespace */

#endif /* COMPRESS_CUDA_CODEC_CUH */
