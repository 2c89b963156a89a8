/*
 * compress/cuda_kernels.cuh - the compression kernels and the launch
 * parameters they take; compress_cuda.cu launches them.
 *
 * Kernels (grid-stride over units; gridDim.y = job, several chunks per launch):
 *   k_amax        pass 1 of current dual scaling: the chunk amax of the
 *                 transformed values, atomicMax into the job's slot;
 *   k_compress    encode (pass 2, or the only pass): group exponent, Hadamard,
 *                 chunk scale, FP8 cast (hardware cvt with satfinite, or the
 *                 integer encoder for stochastic rounding), codes + exponent
 *                 bytes + statistics;
 *   k_decompress  decode 1..16 compressed copies of a chunk range, inverse
 *                 Hadamard each, sum in fp32 in rank order (acc = 0.0f first),
 *                 then store fp32/bf16, or reduce the sum's transformed amax,
 *                 or re-compress the sum directly (the fused all-gather step).
 */
#ifndef COMPRESS_CUDA_KERNELS_CUH
#define COMPRESS_CUDA_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "compress/compress_cuda.h"
#include "compress/cuda_codec.cuh"
#include "compress/cuda_device.cuh"
#include "compress/cuda_unit_io.cuh"

namespace {

constexpr int THREADS = 256;            /* threads per block */
constexpr int WARPS = THREADS / 32;
constexpr int MAX_IN = COMPRESS_DEV_MAX_IN;
constexpr int MAX_JOBS = COMPRESS_DEV_MAX_JOBS;

/* one chunk range a compress launch works on */
struct CJob {
    const void* x;     /* element 0 of the chunk's input */
    uint8_t* scale;    /* chunk scale bytes (written by the range that starts the chunk) */
    uint8_t* exps;     /* group bytes of the range's first group */
    uint8_t* codes;    /* element bytes of unit u0 */
    Span sp;
    u64 stream;
    CompressStatsDev* st;
};
struct CLaunch {
    int njobs;
    CJob job[MAX_JOBS];
};

struct DIn {
    const uint8_t* scale;
    const uint8_t* exps;
    const uint8_t* codes;
};
struct DJob {
    void* y;                                    /* element 0 of the chunk's output (fp32 / bf16) */
    uint8_t* oscale; uint8_t* oexps; uint8_t* ocodes; /* recompressed output of the range */
    Span sp;
    u64 stream;
    CompressStatsDev* st;
    int in_first, nin;                          /* inputs in[in_first .. in_first + nin) in sum order */
};
struct DLaunch {
    int njobs;
    DJob job[MAX_JOBS];
    DIn in[MAX_IN];
};

/* Minimum resident blocks per SM asked of the register allocator
 * (__launch_bounds__): 4 x 256 threads caps a kernel at 64 registers, 3 at 80,
 * 2 at 128. Memory-bound kernels want many loads in flight, so the RNE paths
 * get the tight cap (they fit without spilling); the variants that need more
 * registers get fewer blocks: int8 compress one less, stochastic rounding
 * (Philox words) two less in compress and one less in the recompress. The
 * register report (compress/CUDA.md) flags any spill. */
#ifndef COMPRESS_MIN_BLOCKS
#define COMPRESS_MIN_BLOCKS 4
#endif
#ifndef DECOMPRESS_MIN_BLOCKS
#define DECOMPRESS_MIN_BLOCKS 3
#endif
/* compressed inputs whose 16-byte loads a decompress thread issues before
 * decoding the first of them */
#ifndef PREFETCH
#define PREFETCH 2
#endif

/* what k_decompress does with the sum, and what the sum starts from (the
 * first copy, 0.0f, or the output's fp32 values) */
enum OutKind { OUT_F32 = 0, OUT_BF16 = 1, OUT_AMAX = 2, OUT_RECOMP = 3 };
enum AccInit { INIT_FIRST = 0, INIT_ZERO = 1, INIT_LOAD = 2 };

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
/* kernels                                                                     */

/* Pass 1 of current dual scaling: max |r| over the job's range -> its slot. */
template <bool BF16>
__global__ void __launch_bounds__(THREADS, COMPRESS_MIN_BLOCKS) k_amax(const Codec c, const __grid_constant__ CLaunch L) {
    const CJob& J = L.job[blockIdx.y];
    const int lane = threadIdx.x & 31;
    const Span sp = J.sp;
    const unsigned nunits = sp.u1 - sp.u0, stride = gridDim.x * THREADS;
    float tam = 0.0f;
    /* t0 is the warp's first unit: the loop condition is warp-uniform, so
     * every lane reaches the shuffles of every iteration */
    for (unsigned t0 = blockIdx.x * THREADS + (threadIdx.x & ~31u); t0 < nunits; t0 += stride) {
        const unsigned u = sp.u0 + t0 + lane;
        const int nv = unit_valid(u, sp);
        float v[UNIT];
        load_x16<BF16>(J.x, u, nv, v);
        tam = fmaxf(tam, fp8_prepare(c, v, u, sp, lane).tr);
    }
    flush_scale_amax(tam, J.st);
}

/* The loads of the warp's next unit are issued before this unit is encoded
 * (one unit of raw words in registers), so part of the memory latency hides
 * behind the encode. Measured on the H200 (compress/CUDA.md): 0-9% faster
 * depending on the method, never slower; the kernel is issue-bound. */
template <int FAM, int FMT, bool SR, bool BF16>
__global__ void __launch_bounds__(THREADS, SR ? COMPRESS_MIN_BLOCKS - 2 : FAM == FAM_INT8 ? COMPRESS_MIN_BLOCKS - 1 : COMPRESS_MIN_BLOCKS)
    k_compress(const Codec c, const __grid_constant__ CLaunch L) {
    const CJob& J = L.job[blockIdx.y];
    const int lane = threadIdx.x & 31;
    const Span sp = J.sp;
    const int kc = chunk_kc(c, J.st);
    if (blockIdx.x == 0 && threadIdx.x == 0 && sp.u0 == 0 && J.scale) store_u32_any(J.scale, __float_as_uint(pow2f_dev(kc)));
    const ORange o = {J.exps, J.codes, sp, J.stream};
    TStats ts = {0u, 0u, 0.0f};
    const unsigned nunits = sp.u1 - sp.u0, stride = gridDim.x * THREADS;
    unsigned t0 = blockIdx.x * THREADS + (threadIdx.x & ~31u); /* the warp's first unit: uniform loop tests */
    Raw16<BF16> next;
    unsigned u = sp.u0 + t0 + lane;
    int nv = 0;
    if (t0 < nunits) {
        nv = unit_valid(u, sp);
        load_raw16<BF16>(J.x, u, nv, next);
    }
    for (; t0 < nunits; t0 += stride) {
        float v[UNIT];
        raw_to_x16<BF16>(next, v);
        const unsigned uc = u;
        const int nvc = nv;
        if (t0 + stride < nunits) {
            u = sp.u0 + t0 + stride + lane;
            nv = unit_valid(u, sp);
            load_raw16<BF16>(J.x, u, nv, next);
        }
        encode_unit<FAM, FMT, SR>(c, v, nvc, uc, o, kc, lane, ts);
    }
    flush_stats(ts, J.st);
}

/* Decode (and sum) the job's inputs over its range, then OUT. */
template <int OUT, int FMT_OUT, bool SR>
__global__ void __launch_bounds__(THREADS, SR ? DECOMPRESS_MIN_BLOCKS - 1 : DECOMPRESS_MIN_BLOCKS) k_decompress(const Codec ci, const Codec co, const int init,
                                                        const __grid_constant__ DLaunch L) {
    const DJob& J = L.job[blockIdx.y];
    const int lane = threadIdx.x & 31;
    const Span sp = J.sp;
    __shared__ DecConst s_dc[MAX_IN];
    if ((int)threadIdx.x < J.nin) {
        const uint8_t* sp = L.in[J.in_first + (int)threadIdx.x].scale;
        if (ci.fam == FAM_FP8) s_dc[threadIdx.x] = ci.fmt == FP8_E4M3 ? dec_const<FP8_E4M3>(sp) : dec_const<FP8_E5M2>(sp);
        else s_dc[threadIdx.x] = DecConst{1.0f, 1.0f, 1.0f, 0};
    }
    __syncthreads();
    int kc = 0;
    if (OUT == OUT_RECOMP) {
        kc = chunk_kc(co, J.st);
        if (blockIdx.x == 0 && threadIdx.x == 0 && sp.u0 == 0 && J.oscale) store_u32_any(J.oscale, __float_as_uint(pow2f_dev(kc)));
    }
    const ORange o = {J.oexps, J.ocodes, sp, J.stream};
    TStats ts = {0u, 0u, 0.0f};
    float tam = 0.0f;
    const unsigned nunits = sp.u1 - sp.u0, stride = gridDim.x * THREADS;
    for (unsigned t0 = blockIdx.x * THREADS + (threadIdx.x & ~31u); t0 < nunits; t0 += stride) {
        const unsigned u = sp.u0 + t0 + lane;
        const int nv = unit_valid(u, sp);
        const bool next_ok = unit_valid(u + 1, sp) == UNIT;
        const unsigned lu = u - sp.u0;                                  /* unit inside the range */
        const bool full = (u >> ci.ltpg) < (sp.nfull >> ci.ltpg);
        const unsigned lg = (u >> ci.ltpg) - (sp.u0 >> ci.ltpg);        /* group inside the range */
        float acc[UNIT];
        if (init == INIT_LOAD) {
            load_x16<false>(J.y, u, nv, acc);
        } else {
#pragma unroll
            for (int j = 0; j < UNIT; j++) acc[j] = 0.0f;
        }
        if (ci.fam == FAM_NONE) {
            for (int i = 0; i < J.nin; i++) {
                float d[UNIT];
                raw_decode_unit(ci, L.in[J.in_first + i].codes, lu, nv, d);
                accumulate(acc, d, i == 0 && init == INIT_FIRST);
            }
        } else {
            /* PREFETCH inputs' loads in flight before the first is decoded */
            for (int i0 = 0; i0 < J.nin; i0 += PREFETCH) {
                unsigned cw[PREFETCH][4], eb[PREFETCH];
#pragma unroll
                for (int q = 0; q < PREFETCH; q++) {
                    eb[q] = 0u;
                    if (i0 + q < J.nin) {
                        const DIn in = L.in[J.in_first + i0 + q];
                        load_bytes16(in.codes + (size_t)UNIT * lu, nv, next_ok, cw[q]);
                        if (ci.gb == 1 && nv > 0) eb[q] = in.exps[lg];
                        else if (ci.gb == 4 && nv > 0) eb[q] = load_u32_any(in.exps + 4 * (size_t)lg);
                    }
                }
#pragma unroll
                for (int q = 0; q < PREFETCH; q++) {
                    if (i0 + q < J.nin) {
                        float d[UNIT];
                        if (ci.fam == FAM_INT8) {
                            const float step = __uint_as_float(eb[q]);
#pragma unroll
                            for (int j = 0; j < UNIT; j++) {
                                const int qv = (int)(signed char)byte_of(cw[q], j);
                                d[j] = qv == -128 ? __uint_as_float(0x7FC00000u) : __fmul_rn((float)qv, step);
                            }
                        } else if (ci.fmt == FP8_E4M3) {
                            fp8_decode_unit<FP8_E4M3>(ci, cw[q], eb[q], s_dc[i0 + q], full, lane, d);
                        } else {
                            fp8_decode_unit<FP8_E5M2>(ci, cw[q], eb[q], s_dc[i0 + q], full, lane, d);
                        }
                        accumulate(acc, d, i0 + q == 0 && init == INIT_FIRST);
                    }
                }
            }
        }
        if constexpr (OUT == OUT_F32 || OUT == OUT_BF16) {
            store_y16<OUT == OUT_BF16>(J.y, u, nv, acc);
        } else if constexpr (OUT == OUT_AMAX) {
            tam = fmaxf(tam, fp8_prepare(co, acc, u, sp, lane).tr);
        } else {
            if (co.fam == FAM_NONE) encode_unit<FAM_NONE, FMT_OUT, false>(co, acc, nv, u, o, kc, lane, ts);
            else encode_unit<FAM_FP8, FMT_OUT, SR>(co, acc, nv, u, o, kc, lane, ts);
        }
    }
    if constexpr (OUT == OUT_AMAX) flush_scale_amax(tam, J.st);
    if constexpr (OUT == OUT_RECOMP) flush_stats(ts, J.st);
}

/* ---- self-checks used by tests/test_compress_gpu.cu ---------------------- */

} /* namespace */

#endif /* COMPRESS_CUDA_KERNELS_CUH */
