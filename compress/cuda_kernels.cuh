/*
 * compress/cuda_kernels.cuh - the compression kernels and the launch
 * parameters they take (what each is built for: cuda_launch.cuh);
 * compress_cuda.cu launches them.
 *
 * Kernels (gridDim.y = job, several chunks per launch; a block walks the
 * job's units THREADS at a time, grid-stride; a warp's 32 units move through
 * its shared-memory staging area, cuda_unit_io.cuh):
 *   k_amax        pass 1 of current dual scaling: the chunk amax of the
 *                 transformed values, atomicMax into the job's slot;
 *   k_compress    encode (pass 2, or the only pass): group exponent, Hadamard,
 *                 chunk scale, FP8 cast (hardware cvt with satfinite, or the
 *                 integer encoder for stochastic rounding), codes + exponent
 *                 bytes + statistics;
 *   k_decompress  the sum of 1..16 compressed copies of a chunk range
 *                 (taco.c: rotated copies summed before ONE inverse
 *                 transform), then stored as fp32 / bf16, or its transformed
 *                 amax reduced, or re-compressed directly (the fused
 *                 all-gather step).
 */
#ifndef COMPRESS_CUDA_KERNELS_CUH
#define COMPRESS_CUDA_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "compress/compress_cuda.h"
#include "compress/cuda_codec.cuh"
#include "compress/cuda_decode.cuh"
#include "compress/cuda_device.cuh"
#include "compress/cuda_fast.cuh"
#include "compress/cuda_launch.cuh"
#include "compress/cuda_pipeline.cuh"
#include "compress/cuda_unit_io.cuh"

namespace {

constexpr int MAX_IN = COMPRESS_DEV_MAX_IN;
constexpr int MAX_JOBS = COMPRESS_DEV_MAX_JOBS;

/* the input pipelines of the two kernel families (cuda_pipeline.cuh); a
 * decompress kernel's M from decompress_loads */
template <int EB>
using CRows = InRows<EB, COMPRESS_STAGES, LOADS_NONE>;
template <int EB, int M>
using DRows = InRows<EB, DECOMPRESS_STAGES, M>;

/* one chunk range a compress launch works on */
struct CJob {
    const void* x;     /* element 0 of the chunk's input */
    uint8_t* scale;    /* chunk scale bytes (written by the range that starts the chunk) */
    uint8_t* exps;     /* group bytes of the range's first group */
    uint8_t* codes;    /* element bytes of unit u0 */
    Span sp;
    u64 stream;
    CompressStatsDev* st;
    const float* damax; /* device: the delayed amax, read when the kernel runs (job_codec); NULL: the Codec's */
};
struct CLaunch {
    int njobs;
    CJob job[MAX_JOBS];
};

struct DIn {
    const uint8_t* scale;
    const uint8_t* exps;  /* group bytes of the range's first group */
    const uint8_t* codes; /* element bytes of unit u0 */
};
struct DJob {
    void* y;                                    /* element 0 of the chunk's output (fp32 / bf16) */
    uint8_t* oscale; uint8_t* oexps; uint8_t* ocodes; /* recompressed output of the range */
    Span sp;
    u64 stream;
    CompressStatsDev* st;
    const float* damax;                         /* device: the recompression's delayed amax (job_codec) */
    int in_first, nin;                          /* inputs in[in_first .. in_first + nin) in sum order */
};
struct DLaunch {
    int njobs;
    DJob job[MAX_JOBS];
    DIn in[MAX_IN];
};

/* ========================================================================== */
/* statistics                                                                  */

/* block-reduce and add to st (all threads of the block call; st uniform) */
__device__ void flush_stats(const TStats& t, CompressStatsDev* st) {
    __shared__ unsigned s_sat[WARPS], s_nf[WARPS], s_am[WARPS];
    if (!st) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned sat = __reduce_add_sync(FULL, t.sat), nf = __reduce_add_sync(FULL, t.nf);
    const unsigned am = __reduce_max_sync(FULL, __float_as_uint(t.amax));
    if (lane == 0) {
        s_sat[warp] = sat;
        s_nf[warp] = nf;
        s_am[warp] = am;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 bs = 0, bn = 0;
        unsigned ba = 0;
        for (int i = 0; i < WARPS; i++) {
            bs += s_sat[i];
            bn += s_nf[i];
            ba = max(ba, s_am[i]);
        }
        if (bs) atomicAdd(&st->saturated, bs);
        if (bn) atomicAdd(&st->nonfinite, bn);
        if (ba) atomicMax(&st->amax_bits, ba);
    }
}

/* The exponent of a tile's current scale: the block's max of amax (>= 0,
 * NaN-free) fitted onto L. Every thread of the block calls; all get it. */
__device__ int block_tile_kc(float amax, const Codec& c) {
    __shared__ unsigned s_am[WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned am = __reduce_max_sync(FULL, __float_as_uint(amax));
    if (lane == 0) s_am[warp] = am;
    __syncthreads();
    unsigned m = 0u;
#pragma unroll
    for (int i = 0; i < WARPS; i++) m = max(m, s_am[i]);
    __syncthreads(); /* s_am is refilled by the next step */
    return pow2_fit_dev(__uint_as_float(m), __fdiv_rn(c.L, COMPRESS_HEADROOM_CURRENT));
}

/* block max of amax (>= 0) into the chunk's scale slot */
__device__ void flush_scale_amax(float amax, CompressStatsDev* st) {
    __shared__ unsigned s_am[WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned am = __reduce_max_sync(FULL, __float_as_uint(amax));
    if (lane == 0) s_am[warp] = am;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned ba = 0;
        for (int i = 0; i < WARPS; i++) ba = max(ba, s_am[i]);
        if (ba) atomicMax(&st->scale_amax_bits, ba);
    }
}

/* ========================================================================== */
/* units in and out                                                            */

/* a compress job's input unit as fp32 values, and its scan */
template <bool BF16>
__device__ __forceinline__ void input_values(const Row<BF16 ? 2 : 4>& r, float (&v)[UNIT], Scan& sc) {
    if constexpr (BF16) {
        sc = scan_bf16(r);
        bf16_row_to_f32(r, v);
    } else {
        f32_row_to_f32(r, v);
        sc = scan_f32(v);
    }
    scan_resolve(sc, v);
}

/* encode the unit's values v with c and store its element bytes at codes
 * (the job's unit u0) */
template <int FAM, int FMT, bool SR>
__device__ __forceinline__ void encode_store(const Codec& c, float (&v)[UNIT], const Scan& sc, const WarpUnits& w,
                                             const Span& sp, int kc, int lane, const GOut& go, u64 stream,
                                             uint8_t* codes, uint4* aout, TStats& ts) {
    const bool al = aligned16(codes);
    if constexpr (FAM == FAM_NONE) {
        raw_stats(sc, ts);
        if (c.eb == 4) {
            Row<4> r;
            f32_to_f32_row(v, r);
            store_row<4>(codes, w, al, aout, lane, r);
        } else {
            Row<2> r;
            raw_encode_bf16(v, r, ts);
            store_row<2>(codes, w, al, aout, lane, r);
        }
    } else {
        Row<1> r;
        if constexpr (FAM == FAM_INT8) int8_encode_unit(c, v, sc, w.u, w.nv, lane, go, stream, r, ts);
        else fp8_encode_unit<FMT, SR>(c, v, sc, w.u, w.nv, sp, kc, lane, go, stream, r, ts);
        store_row<1>(codes, w, al, aout, lane, r);
    }
}

/* ========================================================================== */
/* the sum of P compressed copies (taco.c's taco_decode_sum, compress.c)       */

/* the group exponent of sub-block sb from load_group_bytes' word */
__device__ __forceinline__ int group_exp(unsigned bytes, int sb) { return (int)((bytes >> (8 * sb)) & 0xFFu) - 127; }

/* copy i's row of this lane's unit, its group bytes and its (tile) scale,
 * loaded by this lane alone from memory: the rare paths' source, which need
 * not follow the warp's pipeline */
__device__ __forceinline__ void reload_copy(const Codec& ci, const DLaunch& L, const DJob& J, const WarpUnits& w, int i,
                                            Row<1>& r, unsigned* eb, unsigned* sc) {
    const unsigned g0 = (unsigned)(((u64)UNIT * J.sp.u0) >> ci.lg);
    const DIn in = L.in[J.in_first + i];
    load_row_slow<1>(in.codes + (size_t)UNIT * (w.lu0 + (threadIdx.x & 31)), w.nv, r);
    *eb = load_group_bytes(group_shape(ci), in.exps, g0, w.u, w.nv);
    *sc = in.scale ? load_u32_any(in.scale + (ci.tiled ? 4 * (size_t)(w.lu0 / TILE_UNITS) : 0)) : 0x3F800000u;
}

/* the rare copies whose group was sent unrotated inside a full group (a NaN
 * code): added after the transform, in order, from a per-lane reload */
template <int FMT>
__device__ __forceinline__ void add_late(const Codec& ci, const DLaunch& L, const DJob& J, const WarpUnits& w,
                                      u64 late, float (&acc)[UNIT]) {
    for (int i = 0; i < J.nin; i++) {
        if (!((late >> (4 * i)) & 0xFull)) continue;
        Row<1> r;
        unsigned eb, sc;
        reload_copy(ci, L, J, w, i, r, &eb, &sc);
        const InScale isc = in_scale(sc);
#pragma unroll
        for (int sb = 0; sb < SB; sb++) {
            if (!((late >> (4 * i + sb)) & 1ull)) continue;
            float f[16];
            fp8_sb_values<FMT>(r, sb, f);
            dequant16(f, group_exp(eb, sb), isc);
            add_sb(acc, f, sb);
        }
    }
}

/* copy i's row of step t, its group bytes and scale, and which of its
 * groups hold a NaN code: from the warp's pipeline (every lane calls), or,
 * RELOAD, by this lane alone (reload_copy) */
template <int FMT, bool RELOAD, class Rows>
__device__ __forceinline__ void take_codes(Rows& rows, const Codec& ci, const DLaunch& L, const DJob& J,
                                           unsigned t, int i, const WarpUnits& w, Row<1>& r, unsigned (&nan)[SB],
                                           unsigned* eb, unsigned* sc) {
    if (RELOAD) {
        reload_copy(ci, L, J, w, i, r, eb, sc);
    } else {
        rows.take(t, i, w, r);
        *eb = rows.eb;
        *sc = rows.sc;
    }
    fp8_row_nan<FMT>(r, nan);
    group_max(nan, ci);
}

/* taco.c's taco_decode_sum for the lane's unit (with ci.keep its rotated
 * form, taco_decode_sum_rotated: a group whose copies all came rotated is
 * left as R; *stay gets bit sb for its sub-blocks). A sum starts from -0.0f,
 * the exact identity of IEEE addition (-0 + x is x, also for x = +-0), so
 * "the first term, then the others added" needs no flags. */
template <int FMT, bool RELOAD, class Rows>
__device__ __forceinline__ void fp8_sum_unit(const Codec& ci, const DLaunch& L, const DJob& J, const WarpUnits& w,
                                             Rows& rows, unsigned t, int lane, float (&acc)[UNIT], unsigned* stay) {
    const Span& sp = J.sp;
    bool rotatable[SB], rsum[SB];
    float fin[SB]; /* the multiplier after the transform: norm, or C for a folded single copy */
    sbs_full(ci, w.u, sp, rotatable);
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        rotatable[sb] = ci.hadamard && rotatable[sb];
        rsum[sb] = false;
        fin[sb] = ci.norm;
    }
    u64 late = 0ull; /* bit 4 i + sb: copy i's sub-block sb came unrotated from a full group */
    if (J.nin == 1) { /* a plain decode: the values are the sum */
        Row<1> r;
        unsigned nan[SB];
        unsigned eb, sc;
        take_codes<FMT, RELOAD>(rows, ci, L, J, t, 0, w, r, nan, &eb, &sc);
        const InScale isc = in_scale(sc);
#pragma unroll
        for (int sb = 0; sb < SB; sb++) {
            const bool rot = rotatable[sb] && !nan[sb];
            const int b = group_exp(eb, sb);
            float f[16], C;
            fp8_sb_values<FMT>(r, sb, f);
            if (rot && !ci.keep && fold_const(ci, b, isc, &C)) fin[sb] = C;
            else dequant16(f, b, isc);
#pragma unroll
            for (int j = 0; j < 16; j++) acc[16 * sb + j] = f[j];
            rsum[sb] = rot;
        }
    } else {
#pragma unroll
        for (int j = 0; j < UNIT; j++) acc[j] = -0.0f;
        for (int i = 0; i < J.nin; i++) {
            Row<1> r;
            unsigned nan[SB];
            unsigned eb, sc;
            take_codes<FMT, RELOAD>(rows, ci, L, J, t, i, w, r, nan, &eb, &sc);
            const InScale isc = in_scale(sc);
#pragma unroll
            for (int sb = 0; sb < SB; sb++) {
                const bool rot = rotatable[sb] && !nan[sb];
                if (rotatable[sb] && !rot) {
                    late |= 1ull << (4 * i + sb);
                    continue;
                }
                float f[16];
                fp8_sb_values<FMT>(r, sb, f);
                dequant16(f, group_exp(eb, sb), isc);
                add_sb(acc, f, sb);
                rsum[sb] = rsum[sb] || rot;
            }
        }
    }
    *stay = 0u;
    bool transform = ci.hadamard != 0;
    if (ci.keep) { /* a rotated group stays as R unless a copy of it came unrotated (late) */
        bool any = false;
#pragma unroll
        for (int sb = 0; sb < SB; sb++) {
            const bool lt = ((late >> sb) & 0x1111111111111111ull) != 0ull; /* bit 4 i + sb for any copy i */
            if (rsum[sb] && !lt) *stay |= 1u << sb;
            rsum[sb] = rsum[sb] && lt;
            any = any || rsum[sb];
        }
        /* the cross-lane stages shuffle whatever rsum says: skip them when no lane transforms */
        transform = transform && (RELOAD ? any : __ballot_sync(FULL, any) != 0u); /* RELOAD: one lane, G <= 64 */
    }
    if (transform) {
        butterflies(acc, ci, rsum, lane);
        if (rsum[0] && rsum[1] && rsum[2] && rsum[3]) {
#pragma unroll
            for (int j = 0; j < UNIT; j++) acc[j] = __fmul_rn(acc[j], fin[j >> 4]);
        } else {
#pragma unroll
            for (int j = 0; j < UNIT; j++)
                if (rsum[j >> 4]) acc[j] = __fmul_rn(acc[j], fin[j >> 4]);
        }
    }
    if (late) add_late<FMT>(ci, L, J, w, late, acc);
}

/* fp8_sum_unit for one lane that fast_sum sent back, from memory (RELOAD).
 * Not inlined, and its result passed through a local array read with
 * constant indices, so that this rare path costs the common one neither
 * registers nor code (inlined, it put the kernel's values into local memory). */
template <int FMT>
__device__ __noinline__ void fp8_sum_redo_lane(const Codec ci, const DLaunch& L, const DJob& J, WarpUnits w, int lane,
                                               float* out, unsigned* stay) {
    DRows<1, LOADS_REGS> none; /* not read: RELOAD takes every copy from memory */
    float acc[UNIT];
    if (w.nv <= 0 && ci.tpg == 1) { /* a unit past the range's end (a tail warp's): nothing to load or store */
        for (int j = 0; j < UNIT; j++) out[j] = 0.0f;
        *stay = 0u;
        return;
    }
    fp8_sum_unit<FMT, true>(ci, L, J, w, none, 0u, lane, acc, stay);
    for (int j = 0; j < UNIT; j++) out[j] = acc[j];
}
template <int FMT>
__device__ __forceinline__ void fp8_sum_redo(const Codec& ci, const DLaunch& L, const DJob& J, const WarpUnits& w,
                                             int lane, float (&acc)[UNIT], unsigned* stay) {
    float t[UNIT];
    fp8_sum_redo_lane<FMT>(ci, L, J, w, lane, t, stay);
#pragma unroll
    for (int j = 0; j < UNIT; j++) acc[j] = t[j];
}

/* The scan sc of a sum kept as R (ci.keep), made right. A lane whose sum
 * came from fast_sum with its codes unscanned (unchecked) and holds an inf
 * or NaN redoes it on the general path, which tells a NaN code (a copy's
 * group sent unrotated) from an overflow. Then a group left as R whose sum
 * overflowed (an element is inf or NaN) is decoded as its inverse transform
 * would be: every output of the butterflies depends on every input, so all
 * of them are inf or NaN; here all NaN, which the encoder treats alike
 * (taco_decode_sum_rotated). Every lane of the warp calls. */
template <int FMT>
__device__ __forceinline__ void keep_check(const Codec& ci, const DLaunch& L, const DJob& J, const WarpUnits& w,
                                           int lane, bool unchecked, unsigned* stay, int* e0, float (&acc)[UNIT],
                                           Scan& sc) {
    if (__ballot_sync(FULL, sc.special) == 0u) return; /* the common case: the warp's sums are finite */
    const bool redo = unchecked && sc.special;
    if (ci.tpg > 1 ? __ballot_sync(FULL, redo) != 0u : redo) { /* groups across lanes: the whole warp redoes */
        fp8_sum_redo<FMT>(ci, L, J, w, lane, acc, stay);
        *e0 = 0;
        sc = scan_f32(acc);
    }
    unsigned nf[SB];
#pragma unroll
    for (int sb = 0; sb < SB; sb++) nf[sb] = ((*stay >> sb) & 1u) && sc.amax[sb] >= 0x7F800000u ? 1u : 0u;
    group_max(nf, ci);
    bool any = false;
#pragma unroll
    for (int j = 0; j < UNIT; j++)
        if (nf[j >> 4]) {
            acc[j] = __uint_as_float(0x7FC00000u);
            any = true;
        }
    if (any) sc = scan_f32(acc);
    scan_resolve(sc, acc);
}

/* acc = the job's sum for this lane's unit (step t), times 2^-*e0 (e0
 * non-NULL: fast_sum may take it relative to a copy's scale; *e0 = 0 when it
 * does not). Every lane of the warp calls. Returns true when the sum is kept
 * rotated and its codes were not scanned for NaN (fast_sum's
 * FAST_UNCHECKED): keep_check then tests it. */
template <int IN, class Rows>
__device__ __forceinline__ bool sum_unit(const Codec& ci, const DLaunch& L, const DJob& J, const WarpUnits& w,
                                         Rows& rows, unsigned t, int lane, float (&acc)[UNIT],
                                         unsigned* stay, int* e0) {
    *stay = 0u;
    if (e0) *e0 = 0;
    if constexpr (IN == IN_E4M3 || IN == IN_E5M2) {
        constexpr int FMT = IN == IN_E4M3 ? FP8_E4M3 : FP8_E5M2;
        /* the common case straight (cuda_fast.cuh); a lane whose numbers it
         * does not take redoes the sum from memory */
        const int fs = fast_sum<FMT>(ci, rows, t, w, J.nin, acc, stay, e0);
        if (fs == FAST_NO && fast_codec(ci)) {
            /* a straight-line shape's rare general sum (a chunk's part-filled
             * last unit): from memory, out of line, so that the kernel's
             * registers are the common case's; the rows of the step are
             * taken to keep the pipeline in step */
            Row<1> r;
            for (int i = 0; i < J.nin; i++) rows.take(t, i, w, r);
            fp8_sum_redo<FMT>(ci, L, J, w, lane, acc, stay);
        } else if (fs == FAST_NO) {
            fp8_sum_unit<FMT, false>(ci, L, J, w, rows, t, lane, acc, stay);
        } else {
            /* groups across lanes are redone by the whole warp: the general path's shuffles need every lane */
            const bool redo = ci.tpg > 1 ? __ballot_sync(FULL, fs == FAST_REDO) != 0u : fs == FAST_REDO;
            if (redo) {
                fp8_sum_redo<FMT>(ci, L, J, w, lane, acc, stay);
                if (e0) *e0 = 0;
            }
            return !redo && fs == FAST_UNCHECKED;
        }
    } else {
        const unsigned g0 = (unsigned)(((u64)UNIT * J.sp.u0) >> ci.lg);
#pragma unroll
        for (int j = 0; j < UNIT; j++) acc[j] = -0.0f; /* the identity of addition: see fp8_sum_unit */
        for (int i = 0; i < J.nin; i++) {
            Row<in_bytes(IN)> r;
            rows.take(t, i, w, r);
            if constexpr (IN == IN_F32) {
#pragma unroll
                for (int j = 0; j < UNIT; j++) {
                    const float d = __uint_as_float(row_word(r, j));
                    acc[j] = __fadd_rn(acc[j], d);
                }
            } else if constexpr (IN == IN_BF16) {
#pragma unroll
                for (int j = 0; j < UNIT; j++) {
                    const unsigned wd = row_word(r, j >> 1);
                    const float d = __uint_as_float((j & 1) ? (wd & 0xFFFF0000u) : (wd << 16));
                    acc[j] = __fadd_rn(acc[j], d);
                }
            } else { /* int8_group: q * step, -128 = NaN */
                const uint8_t* steps = L.in[J.in_first + i].exps;
                float step[SB];
#pragma unroll
                for (int sb = 0; sb < SB; sb++) {
                    step[sb] = 0.0f;
                    if (16 * sb < w.nv) {
                        const u64 gi = (((u64)UNIT * w.u + 16u * (unsigned)sb) >> ci.lg) - g0;
                        step[sb] = __uint_as_float(load_u32_any(steps + 4 * gi));
                    }
                }
#pragma unroll
                for (int j = 0; j < UNIT; j++) {
                    const int q = (int)(signed char)((row_word(r, j >> 2) >> (8 * (j & 3))) & 0xFFu);
                    const float d = q == -128 ? __uint_as_float(0x7FC00000u) : __fmul_rn((float)q, step[j >> 4]);
                    acc[j] = __fadd_rn(acc[j], d);
                }
            }
        }
    }
    return false;
}

/* ========================================================================== */
/* kernels                                                                     */

/* the dynamic shared memory of a block of each kernel (compress_cuda.cu
 * launches with it) */
template <bool BF16, int FAM>
__host__ __device__ constexpr int compress_smem_bytes() {
    return WARPS * warp_smem_bytes<BF16 ? 2 : 4, FAM == FAM_NONE ? 4 : 1, COMPRESS_STAGES, LOADS_NONE>();
}
template <int IN, int OUT>
__host__ __device__ constexpr int decompress_out_bytes() {
    /* a raw -> raw recompress may widen bf16 words to fp32 ones */
    return OUT == OUT_F32 ? 4 : (OUT == OUT_BF16 || OUT == OUT_BF16_SUM) ? 2 : OUT == OUT_RECOMP ? (in_bytes(IN) > 1 ? 4 : 1) : 1;
}
template <int IN, int OUT, int SHAPE>
__host__ __device__ constexpr int decompress_smem_bytes() {
    return WARPS * warp_smem_bytes<in_bytes(IN), decompress_out_bytes<IN, OUT>(), DECOMPRESS_STAGES,
                                   decompress_loads<OUT, SHAPE>()>();
}

/* The input rows of a compress kernel's warp, from its share of the smem. */
template <bool BF16, int EBO>
__device__ __forceinline__ CRows<BF16 ? 2 : 4> compress_rows(unsigned char* smem, int warp, const uint8_t* const* xb,
                                                             const Span& sp, int lane) {
    constexpr int EBI = BF16 ? 2 : 4;
    CRows<EBI> rows;
    rows.area0 = reinterpret_cast<uint4*>(smem + (size_t)warp * warp_smem_bytes<EBI, EBO, COMPRESS_STAGES, LOADS_NONE>());
    rows.bytes = xb;
    rows.gbytes = nullptr;
    rows.gshape = GroupShape{UNIT, 6, 0};
    rows.gscales = nullptr;
    rows.tiled = false;
    rows.P = 1;
    rows.ws = warp_steps(sp, warp);
    rows.sp = sp;
    rows.lane = lane;
    rows.start();
    return rows;
}

/* The block's steps: step t covers the units [b0, b0 + THREADS) of the job,
 * b0 = blockIdx.x THREADS + t gridDim.x THREADS: one tile. The loop test is
 * the block's, so that every thread reaches the barriers of a tile's
 * scale; a warp past the job's end runs on empty units (nv = 0). */
__device__ __forceinline__ bool block_has(const Span& sp, unsigned t) {
    return blockIdx.x * THREADS + t * gridDim.x * THREADS < sp.u1 - sp.u0;
}
/* the byte offset of step t's tile scale in a job's scales */
__device__ __forceinline__ size_t tile_scale_offset(unsigned t) {
    return 4 * (size_t)((blockIdx.x * THREADS + t * gridDim.x * THREADS) / TILE_UNITS);
}

/* Encode the unit's values with the FP8 pipeline (not the bare cast): the
 * second scale's exponent is kc, or, for a current tile scale, the block's
 * (tile_current), written by the block's first thread. The values are v
 * 2^e0 (a sum relative to a copy's scale, fast_sum; sc already scaled by
 * scan_scale): the straight-line path folds 2^e0 into its one multiplier
 * when that stays a normal float, where v 2^e0 Mv and v (2^e0 Mv) are both
 * the one rounding of the same product; any other path first makes v the
 * values (unscale, exact). Every thread of the block calls. */
template <int FMT, bool SR>
__device__ __forceinline__ void fp8_tile_encode(const Codec& c, float (&v)[UNIT], const Scan& sc, const WarpUnits& w,
                                                const Span& sp, int kc, unsigned t, int lane, const GOut& go,
                                                u64 stream, uint8_t* scales, uint8_t* codes, uint4* aout,
                                                TStats& ts, int fold_max, int e0 = 0) {
    /* the common case as straight-line code (cuda_fast.cuh), else the general path */
    int e = 0;
    unsigned m = 0u;
    bool fast = fast_unit(c, sc, w, fold_max, &e, &m);
    /* SR's quantize is warp-wide, and so is the general path of groups across
     * lanes (its shuffles): then the warp decides together */
    const bool together = fast_codec(c) && (SR || c.tpg > 1); /* a compile-time false for the general shapes */
    if (together) fast = __ballot_sync(FULL, fast) == FULL;
    if (!fast || c.hadamard) { /* only the straight-line encode without the transform takes v 2^e0 */
        unscale(v, e0);
        e0 = 0;
    }
    Prep p;
    if (fast) fast_prepare(c, v, sc, e, m, p);
    else p = fp8_prepare(c, v, sc, w.u, sp, lane, fold_max);
    const int k = tile_current(c) ? block_tile_kc(prep_amax_r(p), c) : kc;
    if (c.tiled && threadIdx.x == 0) store_u32_any(scales + tile_scale_offset(t), __float_as_uint(pow2f_dev(k)));
    Row<1> r;
    float Mv = 0.0f;
    int b = 0;
    bool fin = fast && fast_finish_ok<FMT>(c, p, k, &Mv, &b);
    if (fin && e0 != 0) { /* the sum's scale joins the multiplier (a power of two without the Hadamard) */
        Mv = __fmul_rn(Mv, pow2f_dev(e0));
        fin = Mv >= 1.17549435e-38f && Mv <= 0x1p127f;
    }
    if (together && fast) fin = __ballot_sync(FULL, fin) == FULL;
    if (fin) {
        fast_finish<FMT, SR>(c, v, p, w.u, Mv, b, lane, go, stream, r, ts);
    } else {
        unscale(v, e0);
        if (fast) fast_unfold(v, p);
        fp8_finish_unit<FMT, SR>(c, v, sc, p, w.u, w.nv, k, lane, go, stream, r, ts);
    }
    store_row<1>(codes, w, aligned16(codes), aout, lane, r);
}

/* step t's input unit of this lane as fp32 values and their scan; returns where the unit is */
template <bool BF16>
__device__ __forceinline__ WarpUnits take_input(CRows<BF16 ? 2 : 4>& rows, const Span& sp, unsigned t, int lane,
                                                float (&v)[UNIT], Scan& sc) {
    const WarpUnits w = warp_units(sp, rows.ws.lu(t), lane);
    Row<BF16 ? 2 : 4> r;
    rows.take(t, 0, w, r);
    input_values<BF16>(r, v, sc);
    return w;
}

/* Pass 1 of current dual scaling: max |r| over the job's range -> its slot. */
template <bool BF16>
__global__ void __launch_bounds__(THREADS, COMPRESS_MIN_BLOCKS) k_amax(const Codec c, const __grid_constant__ CLaunch L) {
    DYNAMIC_SMEM(smem);
    const CJob& J = L.job[blockIdx.y];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const Span sp = J.sp;
    const uint8_t* xb = static_cast<const uint8_t*>(J.x) + (size_t)(BF16 ? 2 : 4) * UNIT * sp.u0;
    CRows<BF16 ? 2 : 4> rows = compress_rows<BF16, 1>(smem, warp, &xb, sp, lane);
    float tam = 0.0f;
    for (unsigned t = 0; block_has(sp, t); t++) {
        float v[UNIT];
        Scan sc;
        const WarpUnits w = take_input<BF16>(rows, sp, t, lane, v, sc);
        tam = fmaxf(tam, prep_amax_r(fp8_prepare(c, v, sc, w.u, sp, lane, BF16 ? 16 : 0)));
    }
    flush_scale_amax(tam, J.st);
}

template <int FAM, int FMT, bool SR, bool BF16, int SHAPE>
__global__ void __launch_bounds__(THREADS, SR ? COMPRESS_SR_MIN_BLOCKS : COMPRESS_MIN_BLOCKS)
    k_compress(const Codec c0, const __grid_constant__ CLaunch L) {
    DYNAMIC_SMEM(smem);
    constexpr int EBO = FAM == FAM_NONE ? 4 : 1;
    const CJob& J = L.job[blockIdx.y];
    const Codec c = shape_codec<SHAPE>(job_codec(c0, J.damax));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const Span sp = J.sp;
    const int kc = chunk_kc(c, J.st);
    if (blockIdx.x == 0 && threadIdx.x == 0 && sp.u0 == 0 && J.scale && !c.tiled)
        store_u32_any(J.scale, __float_as_uint(pow2f_dev(kc)));
    const GOut go = {J.exps, (unsigned)(((u64)UNIT * sp.u0) >> c.lg)};
    TStats ts = {0u, 0u, 0.0f};
    const uint8_t* xb = static_cast<const uint8_t*>(J.x) + (size_t)(BF16 ? 2 : 4) * UNIT * sp.u0;
    CRows<BF16 ? 2 : 4> rows = compress_rows<BF16, EBO>(smem, warp, &xb, sp, lane);
    uint4* aout = out_area(rows);
    for (unsigned t = 0; block_has(sp, t); t++) {
        float v[UNIT];
        Scan sc;
        const WarpUnits w = take_input<BF16>(rows, sp, t, lane, v, sc);
        if (FAM == FAM_FP8 && !c.cast)
            fp8_tile_encode<FMT, SR>(c, v, sc, w, sp, kc, t, lane, go, J.stream, J.scale, J.codes, aout, ts, BF16 ? 16 : 0);
        else encode_store<FAM, FMT, SR>(c, v, sc, w, sp, kc, lane, go, J.stream, J.codes, aout, ts);
    }
    flush_stats(ts, J.st);
}

/* Sum the job's inputs over its range, then OUT. SHAPE is the input
 * codec's, and the output's too for OUT_RECOMP (compress_cuda.cu). */
template <int IN, int OUT, int FMT_OUT, bool SR, int SHAPE>
__global__ void __launch_bounds__(THREADS, decompress_min_blocks<IN, OUT, SR, SHAPE>())
    k_decompress(const Codec ci0, const Codec co0, const __grid_constant__ DLaunch L) {
    DYNAMIC_SMEM(smem);
    constexpr int EBI = in_bytes(IN), EBO = decompress_out_bytes<IN, OUT>();
    __shared__ const uint8_t* s_codes[MAX_IN];
    __shared__ const uint8_t* s_exps[MAX_IN];
    __shared__ const uint8_t* s_scales[MAX_IN];
    const DJob& J = L.job[blockIdx.y];
    const Codec ci = shape_codec<SHAPE>(ci0);
    const Codec co = shape_codec<OUT == OUT_RECOMP ? SHAPE : SHAPE_ANY>(job_codec(co0, OUT == OUT_RECOMP ? J.damax : nullptr));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const Span sp = J.sp;
    if ((int)threadIdx.x < J.nin) {
        const DIn& in = L.in[J.in_first + (int)threadIdx.x];
        s_codes[threadIdx.x] = in.codes;
        s_exps[threadIdx.x] = in.exps;
        s_scales[threadIdx.x] = in.scale;
    }
    __syncthreads();
    int kc = 0;
    if (OUT == OUT_RECOMP) {
        kc = chunk_kc(co, J.st);
        if (blockIdx.x == 0 && threadIdx.x == 0 && sp.u0 == 0 && J.oscale && !co.tiled)
            store_u32_any(J.oscale, __float_as_uint(pow2f_dev(kc)));
    }
    const GOut go = {J.oexps, (unsigned)(((u64)UNIT * sp.u0) >> co.lg)};
    TStats ts = {0u, 0u, 0.0f};
    float tam = 0.0f;
    constexpr int M = decompress_loads<OUT, SHAPE>();
    DRows<EBI, M> rows;
    rows.area0 = reinterpret_cast<uint4*>(smem + (size_t)warp * warp_smem_bytes<EBI, EBO, DECOMPRESS_STAGES, M>());
    rows.bytes = s_codes;
    rows.gbytes = s_exps;
    rows.gshape = group_shape(ci);
    if (!(IN == IN_E4M3 || IN == IN_E5M2)) rows.gshape.gb = 0; /* int8_group's steps are read by sum_unit */
    rows.gscales = (IN == IN_E4M3 || IN == IN_E5M2) ? s_scales : nullptr;
    rows.tiled = ci.tiled != 0;
    rows.P = J.nin;
    rows.ws = warp_steps(sp, warp);
    rows.sp = sp;
    rows.lane = lane;
    rows.start();
    uint4* aout = out_area(rows);
    for (unsigned t = 0; block_has(sp, t); t++) {
        const WarpUnits w = warp_units(sp, rows.ws.lu(t), lane);
        float acc[UNIT];
        unsigned stay;
        int e0 = 0; /* the recompress's sum may come as acc = sum 2^-e0 (fast_sum) */
        const bool unchecked = sum_unit<IN>(ci, L, J, w, rows, t, lane, acc, &stay, OUT == OUT_RECOMP ? &e0 : nullptr);
        constexpr int FMT_IN = IN == IN_E5M2 ? FP8_E5M2 : FP8_E4M3;
        if constexpr ((IN == IN_E4M3 || IN == IN_E5M2) && OUT == OUT_F32) {
            if (ci.keep) { /* the sum the recompress encodes, written out (CDEV_REDUCE_ROTATED_F32) */
                Scan sk = scan_f32(acc);
                keep_check<FMT_IN>(ci, L, J, w, lane, unchecked, &stay, &e0, acc, sk);
            }
        }
        if constexpr (OUT == OUT_F32 || OUT == OUT_BF16 || OUT == OUT_BF16_SUM) {
            uint8_t* yb = static_cast<uint8_t*>(J.y) + (size_t)EBO * UNIT * sp.u0;
            if constexpr (OUT == OUT_BF16 || OUT == OUT_BF16_SUM) {
                Row<2> r;
                f32_to_bf16_row(acc, r);
                store_row<2>(yb, w, aligned16(yb), aout, lane, r);
            } else {
                Row<4> r;
                f32_to_f32_row(acc, r);
                store_row<4>(yb, w, aligned16(yb), aout, lane, r);
            }
        } else {
            Scan sc = scan_f32(acc);
            if constexpr (IN == IN_E4M3 || IN == IN_E5M2) {
                if (ci.keep) keep_check<FMT_IN>(ci, L, J, w, lane, unchecked, &stay, &e0, acc, sc);
            }
            scan_resolve(sc, acc);
            scan_scale(sc, e0); /* the amax of the sum itself */
            if constexpr (OUT == OUT_AMAX) {
                tam = fmaxf(tam, prep_amax_r(fp8_prepare(co, acc, sc, w.u, sp, lane, 0)));
            } else if constexpr (IN == IN_BF16 || IN == IN_F32) {
                /* the pairs compress_cuda.cu fuses: raw -> raw, FP8 -> FP8 of one format */
                encode_store<FAM_NONE, FMT_OUT, false>(co, acc, sc, w, sp, kc, lane, go, J.stream, J.ocodes, aout, ts);
            } else if (co.cast) {
                unscale(acc, e0);
                encode_store<FAM_FP8, FMT_OUT, SR>(co, acc, sc, w, sp, kc, lane, go, J.stream, J.ocodes, aout, ts);
            } else {
                fp8_tile_encode<FMT_OUT, SR>(co, acc, sc, w, sp, kc, t, lane, go, J.stream, J.oscale, J.ocodes, aout, ts, 0,
                                             e0);
            }
        }
    }
    if constexpr (OUT == OUT_AMAX) flush_scale_amax(tam, J.st);
    if constexpr (OUT == OUT_RECOMP) flush_stats(ts, J.st);
}

} /* namespace */

#endif /* COMPRESS_CUDA_KERNELS_CUH */
