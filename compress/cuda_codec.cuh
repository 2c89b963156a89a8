/*
 * compress/cuda_codec.cuh - one unit through a method: the kernels' view of a
 * method (Codec), and a unit's encode (the FP8 pipeline, the bare cast,
 * int8_group, raw fp32 / bf16 words) with its per-thread statistics, and
 * its decode.
 */
#ifndef COMPRESS_CUDA_CODEC_CUH
#define COMPRESS_CUDA_CODEC_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "common/bf16.h"
#include "compress/compress_cuda.h"
#include "compress/cuda_device.cuh"
#include "compress/cuda_unit_io.cuh"

namespace {

/* The kernels' code paths (a template parameter): methods.h's families, with
 * the bare cast run by the FP8 path (Codec.cast). FAM_NONE: raw fp32 or bf16
 * words (Codec.eb 4 or 2). */
enum Family { FAM_FP8 = 0, FAM_INT8 = 1, FAM_NONE = 2 };

/* Everything a kernel needs to know about a method: its row in methods.h,
 * resolved for the CompressParams on the host (compress_cuda.cu's codec_of). */
struct Codec {
    int fam;          /* Family */
    int fmt;          /* Fp8Format */
    int G, tpg, ltpg; /* group length (16 for methods without groups), lanes per group, log2(tpg) */
    int cast;         /* the bare codec: no scaling, NaN stays NaN, inf saturates */
    int hadamard, adaptive, dual;
    int delayed;      /* dual scale from delayed_amax (valid: > 0 and finite) */
    int stochastic;
    int hdr, gb, eb;  /* wire: header bytes, bytes per group, bytes per element */
    int stats_amax_r; /* stats amax = amax of the transformed values (methods with a chunk scale), else raw input amax */
    float L;          /* fp8 max */
    float norm;       /* hadamard_norm(G) */
    float delayed_amax;
    u64 seed;
};

/* a thread's statistics, block-reduced by the kernel at its end */
struct TStats {
    unsigned sat, nf;
    float amax; /* >= 0, NaN-free */
};

/* ========================================================================== */
/* encode                                                                      */

/* where an encoded range goes */
struct ORange {
    uint8_t* exps;
    uint8_t* codes;
    Span sp;
    u64 stream;
};

/* the finite amax of the unit (as float bits) and which elements are inf/NaN */
struct Scan {
    unsigned amax_u, nfmask, nanmask;
};
__device__ __forceinline__ Scan scan_finite(const float (&v)[UNIT]) {
    Scan s = {0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < UNIT; j++) s.amax_u = max(s.amax_u, __float_as_uint(v[j]) & 0x7FFFFFFFu);
    if (s.amax_u >= 0x7F800000u) { /* rare: some element is inf or NaN */
        s.amax_u = 0u;
#pragma unroll
        for (int j = 0; j < UNIT; j++) {
            const unsigned ab = __float_as_uint(v[j]) & 0x7FFFFFFFu;
            if (ab >= 0x7F800000u) {
                s.nfmask |= 1u << j;
                if (ab > 0x7F800000u) s.nanmask |= 1u << j;
            } else {
                s.amax_u = max(s.amax_u, ab);
            }
        }
    }
    return s;
}

/* taco.c's taco_group_prepare for the thread's share of a group: v becomes r
 * (scaled by 2^-e_u, nonfinite slots zeroed, rotated if the group is full and
 * finite). Returns the thread's max |r| (NaN-ignoring). */
struct Prep {
    Scan sc;
    int e_u;
    float tr;
};
__device__ __forceinline__ Prep fp8_prepare(const Codec& c, float (&v)[UNIT], unsigned u, const Span& sp, int lane) {
    Prep p;
    p.sc = scan_finite(v);
    p.e_u = 0;
    if (c.adaptive) {
        const unsigned ga = group_max_u32(p.sc.amax_u, c.tpg);
        p.e_u = -pow2_fit_dev(__uint_as_float(ga), 1.0f);
        const float down = pow2f_dev(-p.e_u);
#pragma unroll
        for (int j = 0; j < UNIT; j++) v[j] = __fmul_rn(v[j], down);
    }
    if (p.sc.nfmask) {
#pragma unroll
        for (int j = 0; j < UNIT; j++)
            if ((p.sc.nfmask >> j) & 1u) v[j] = 0.0f;
    }
    if (c.hadamard) {
        const bool full = (u >> c.ltpg) < (sp.nfull >> c.ltpg);
        const bool gnf = group_any(p.sc.nfmask != 0u, c.tpg, lane);
        hadamard_unit(v, c.tpg, lane, full && !gnf, c.norm);
    }
    float tr = 0.0f;
#pragma unroll
    for (int j = 0; j < UNIT; j++) tr = fmaxf(tr, fabsf(v[j]));
    p.tr = tr;
    return p;
}

/* 16 codes of v (element i0 + j of the chunk), RNE or SR; then the NaN code
 * 0x7F in the slots of nanmask */
template <int FMT, bool SR>
__device__ __forceinline__ void quantize16(const Codec& c, const float (&v)[UNIT], unsigned nanmask, u64 i0, u64 stream,
                                           unsigned (&w)[4]) {
    if constexpr (!SR) {
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = fp8x2_rne<FMT>(v[4 * k], v[4 * k + 1]) | (fp8x2_rne<FMT>(v[4 * k + 2], v[4 * k + 3]) << 16);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint4 r = philox_block(c.seed, stream, (i0 >> 2) + (u64)k);
            w[k] = fp8_encode_sw<FMT>(v[4 * k], true, r.x) | (fp8_encode_sw<FMT>(v[4 * k + 1], true, r.y) << 8) |
                   (fp8_encode_sw<FMT>(v[4 * k + 2], true, r.z) << 16) | (fp8_encode_sw<FMT>(v[4 * k + 3], true, r.w) << 24);
        }
    }
    if (nanmask) {
#pragma unroll
        for (int j = 0; j < UNIT; j++)
            if ((nanmask >> j) & 1u) w[j >> 2] = (w[j >> 2] & ~(0xFFu << (8 * (j & 3)))) | (0x7Fu << (8 * (j & 3)));
    }
}

/* The FP8 pipeline's encode of one unit (taco.c pass 2, or cast_encode). */
template <int FMT, bool SR>
__device__ __forceinline__ void fp8_encode_unit(const Codec& c, float (&v)[UNIT], int nv, unsigned u, const ORange& o,
                                                int kc, int lane, TStats& ts) {
    const u64 i0 = (u64)UNIT * u; /* the element's index in the chunk: the Philox counter */
    unsigned w[4];
    if (c.cast) {
        /* the bare codec: NaN -> 0x7F, +-inf -> +-max, |finite| > L counted */
        const Scan sc = scan_finite(v);
        ts.nf += __popc(sc.nfmask);
        const float a = __uint_as_float(sc.amax_u);
        ts.amax = fmaxf(ts.amax, a);
        if (a > c.L) {
#pragma unroll
            for (int j = 0; j < UNIT; j++)
                if (!((sc.nfmask >> j) & 1u) && fabsf(v[j]) > c.L) ts.sat++;
        }
        quantize16<FMT, SR>(c, v, sc.nanmask, i0, o.stream, w);
    } else {
        const Prep p = fp8_prepare(c, v, u, o.sp, lane);
        ts.nf += __popc(p.sc.nfmask);
        ts.amax = fmaxf(ts.amax, c.stats_amax_r ? p.tr : __uint_as_float(p.sc.amax_u));
        int b = 0, km = 0;
        if (c.dual) {
            b = p.e_u;
            km = kc;
        } else if (c.adaptive) {
            /* the group's own exponent maps it onto the fp8 range */
            const int kg = pow2_fit_dev(group_max_f32(p.tr, c.tpg), c.L);
            b = min(max(p.e_u - kg, TACO_EXP_MIN), TACO_EXP_MAX);
            km = p.e_u - b;
        }
        if (o.exps && nv > 0 && (lane & (c.tpg - 1)) == 0) o.exps[(u >> c.ltpg) - (o.sp.u0 >> c.ltpg)] = (uint8_t)(b + 127);
        const float m = pow2f_dev(km);
#pragma unroll
        for (int j = 0; j < UNIT; j++) v[j] = __fmul_rn(v[j], m);
        /* saturation: max |v| = round(max |r| * m) (rounding is monotonic), so
         * one compare decides for the whole unit; a NaN r (overflow inside
         * the transform) is only possible with adaptive off and Hadamard on */
        if ((c.hadamard && !c.adaptive) || !(__fmul_rn(p.tr, m) <= c.L)) {
#pragma unroll
            for (int j = 0; j < UNIT; j++) {
                if (j < nv && !((p.sc.nfmask >> j) & 1u) && !(fabsf(v[j]) <= c.L)) {
                    ts.sat++;
                    if (isnan(v[j])) v[j] = __uint_as_float(0x7F800000u); /* never a NaN code for finite input */
                }
            }
        }
        quantize16<FMT, SR>(c, v, p.sc.nfmask, i0, o.stream, w);
    }
    store_bytes16(o.codes, u, o.sp, nv, w, lane);
}

/* int8_group (compress.c int8_encode): step d = amax / 127 per group, q =
 * round(x / d), -128 for NaN/inf; RNE by rintf, SR with F = frac * 2^32. */
__device__ __forceinline__ void int8_encode_unit(const Codec& c, const float (&v)[UNIT], int nv, unsigned u,
                                                 const ORange& o, int lane, TStats& ts) {
    const Scan sc = scan_finite(v);
    ts.nf += __popc(sc.nfmask);
    ts.amax = fmaxf(ts.amax, __uint_as_float(sc.amax_u));
    const float d = __fdiv_rn(__uint_as_float(group_max_u32(sc.amax_u, c.tpg)), 127.0f);
    const u64 i0 = (u64)UNIT * u;
    if (o.exps && nv > 0 && (lane & (c.tpg - 1)) == 0)
        store_u32_any(o.exps + 4 * (size_t)((u >> c.ltpg) - (o.sp.u0 >> c.ltpg)), __float_as_uint(d));
    unsigned rw[UNIT];
    if (c.stochastic) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint4 r = philox_block(c.seed, o.stream, (i0 >> 2) + (u64)k);
            rw[4 * k] = r.x; rw[4 * k + 1] = r.y; rw[4 * k + 2] = r.z; rw[4 * k + 3] = r.w;
        }
    }
    unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < UNIT; j++) {
        int q = 0;
        if ((sc.nfmask >> j) & 1u) {
            q = -128;
        } else if (d != 0.0f && j < nv) {
            const float t = __fdiv_rn(v[j], d);
            const float a = fabsf(t);
            float r;
            if (c.stochastic) {
                const float fl = floorf(a);
                const unsigned F = __float2uint_rz(__fmul_rn(__fsub_rn(a, fl), 4294967296.0f));
                r = __fadd_rn(fl, ((u64)F + rw[j] >= 0x100000000ull) ? 1.0f : 0.0f);
            } else {
                r = rintf(a);
            }
            if (r > 127.0f) {
                r = 127.0f;
                ts.sat++;
            }
            q = (t < 0.0f) ? -(int)r : (int)r;
        }
        w[j >> 2] |= ((unsigned)q & 0xFFu) << (8 * (j & 3));
    }
    store_bytes16(o.codes, u, o.sp, nv, w, lane);
}

/* none: the fp32 bits as they are (eb = 4); bf16: rounded to nearest even
 * by bf16.h's integer rule, the CPU's bytes exactly (eb = 2) */
__device__ __forceinline__ void raw_encode_unit(const Codec& c, const float (&v)[UNIT], int nv, unsigned u, const ORange& o,
                                                TStats& ts) {
    const Scan sc = scan_finite(v);
    ts.nf += __popc(sc.nfmask);
    ts.amax = fmaxf(ts.amax, __uint_as_float(sc.amax_u));
    if (c.eb == 4) {
        unsigned w[UNIT];
#pragma unroll
        for (int j = 0; j < UNIT; j++) w[j] = __float_as_uint(v[j]);
        store_words16(o.codes + (size_t)UNIT * 4 * (u - o.sp.u0), nv, w);
    } else {
        unsigned w[UNIT / 2];
#pragma unroll
        for (int k = 0; k < UNIT / 2; k++) {
            const unsigned b0 = __float_as_uint(v[2 * k]), b1 = __float_as_uint(v[2 * k + 1]);
            w[k] = (unsigned)bf16_from_bits(b0) | ((unsigned)bf16_from_bits(b1) << 16);
            ts.sat += (unsigned)bf16_overflows(b0) + (unsigned)bf16_overflows(b1); /* slots past nv hold 0 */
        }
        store_halves16(o.codes + (size_t)UNIT * 2 * (u - o.sp.u0), nv, w);
    }
}

template <int FAM, int FMT, bool SR>
__device__ __forceinline__ void encode_unit(const Codec& c, float (&v)[UNIT], int nv, unsigned u, const ORange& o, int kc,
                                            int lane, TStats& ts) {
    if constexpr (FAM == FAM_FP8) fp8_encode_unit<FMT, SR>(c, v, nv, u, o, kc, lane, ts);
    else if constexpr (FAM == FAM_INT8) int8_encode_unit(c, v, nv, u, o, lane, ts);
    else raw_encode_unit(c, v, nv, u, o, ts);
}

/* the chunk scale exponent k_c of taco.c step 4 (0 without dual scale) */
__device__ __forceinline__ int chunk_kc(const Codec& c, const CompressStatsDev* st) {
    if (c.fam != FAM_FP8 || c.cast || !c.dual) return 0;
    if (c.delayed) return pow2_fit_dev(c.delayed_amax, __fdiv_rn(c.L, COMPRESS_HEADROOM_DELAYED));
    return pow2_fit_dev(__uint_as_float(st->scale_amax_bits), __fdiv_rn(c.L, COMPRESS_HEADROOM_CURRENT));
}

/* ========================================================================== */
/* decode                                                                      */

/* unit lu of a raw (none / bf16) input as fp32 */
__device__ __forceinline__ void raw_decode_unit(const Codec& c, const uint8_t* codes, unsigned lu, int nv, float (&d)[UNIT]) {
    if (c.eb == 4) {
        unsigned w[UNIT];
        load_words16(codes + (size_t)UNIT * 4 * lu, nv, w);
#pragma unroll
        for (int j = 0; j < UNIT; j++) d[j] = __uint_as_float(w[j]);
    } else {
        unsigned w[UNIT / 2];
        load_halves16(codes + (size_t)UNIT * 2 * lu, nv, w);
#pragma unroll
        for (int k = 0; k < UNIT / 2; k++) {
            d[2 * k] = __uint_as_float(w[k] << 16);
            d[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
        }
    }
}

/* one compressed FP8 input's unit, decoded and inverse-transformed, times 2^b */
template <int FMT>
__device__ __forceinline__ void fp8_decode_unit(const Codec& ci, const unsigned (&w)[4], unsigned ebyte, const DecConst& dc,
                                                bool full, int lane, float (&d)[UNIT]) {
    const unsigned nanmask = fp8_decode16<FMT>(w, dc, d);
    if (ci.hadamard) {
        const bool gnan = group_any(nanmask != 0u, ci.tpg, lane);
        hadamard_unit(d, ci.tpg, lane, full && !gnan, ci.norm);
    }
    if (ci.gb) {
        const float up = pow2f_dev((int)ebyte - 127);
#pragma unroll
        for (int j = 0; j < UNIT; j++) d[j] = __fmul_rn(d[j], up);
    }
}

/* acc = d (the first copy of a sum that starts with it) or acc + d */
__device__ __forceinline__ void accumulate(float (&acc)[UNIT], const float (&d)[UNIT], bool assign) {
    if (assign) {
#pragma unroll
        for (int j = 0; j < UNIT; j++) acc[j] = d[j];
    } else {
#pragma unroll
        for (int j = 0; j < UNIT; j++) acc[j] = __fadd_rn(acc[j], d[j]);
    }
}

} /* namespace */

#endif /* COMPRESS_CUDA_CODEC_CUH */
