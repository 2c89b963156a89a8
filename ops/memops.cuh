/*
 * ops/memops.cuh - pieces shared by the memory-bound row and column kernels
 * (layernorm_cuda.cu, bias_cuda.cu): the run-time choice between kernel
 * variants, streaming loads, and the in-kernel fixed-order finish of a
 * column sum (colsum_tail).
 *
 * Variants. Each of these ops has several kernels that compute the same
 * function; an environment variable picks one at every call (0 = the kernel
 * the backend had before the variants, the default while the others are
 * being measured on the H200):
 *   TPFP8_LN_FWD_VARIANT    (0..2) layernorm_forward, residual_layernorm_forward, rmsnorm_forward
 *   TPFP8_LN_BWD_VARIANT    (0..3) layernorm_backward, rmsnorm_backward
 * Every variant is deterministic (its reduction order depends on shapes
 * only); two variants agree within rounding, not bit for bit.
 * tests/test_ops_gpu.cu runs its norm checks under every variant;
 * tools/bench_ops_gpu.cu times them side by side.
 *
 * colsum_tail: the second stage of a deterministic column sum inside the
 * kernel of the first, so it costs no launch of its own. Each block of a
 * grid has written its partial row (part p of nparts); the parts are cut into
 * groups of COLSUM_TAIL_GROUP. The last block of a group to arrive (an
 * integer ticket, atomicAdd on a counter: which block that is depends on
 * timing, what it computes does not) adds the group's parts in part order
 * into a group row; the last group to arrive adds the group rows in group
 * order and hands each column's sum to the caller. So every column is
 * sum_g (sum_{p in g} part p), both sums ascending: an order fixed by nparts.
 * Two levels keep each finishing block's reads small (16 rows, then
 * nparts/16 rows) where one block reading every part would crawl at one
 * SM's bandwidth. Counters start at zero (colsum_tail_counters allocates them
 * zeroed) and each finisher puts its counter back to zero, so the next
 * launch on the stream finds them so.
 */
#ifndef OPS_MEMOPS_CUH
#define OPS_MEMOPS_CUH

#include <stdlib.h>
#include <string.h>

#include "ops/cuda_common.cuh"

/* the variant an environment variable selects, 0 .. nvariants-1 (unset or
 * empty: 0); anything else is a fatal error naming the variable */
static inline int memops_variant(const char* env, int nvariants) {
    const char* s = getenv(env);
    if (!s || !*s) return 0;
    char* end = nullptr;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0 || v >= nvariants)
        FATAL("%s=%s: expected an integer from 0 to %d (ops/memops.cuh lists the variants)", env, s, nvariants - 1);
    return (int)v;
}

/* Packed rows as raw words. A kernel that keeps rows (or w and b) packed in
 * registers across a loop wants them unpacked where they are used: left to
 * itself the compiler hoists the loop-invariant unpacking of w and b out of
 * the row loop (8 floats per 4 registers) and keeps a row's unpacked floats
 * live between two passes, which took the forward to 147 registers where 80
 * were planned. opaque_u4 tells it the words may have changed (an empty asm,
 * no instruction), so the unpacking stays at the use. */
__device__ __forceinline__ void opaque_u4(uint4& u) {
#ifndef CUDA_EMU
    asm volatile("" : "+r"(u.x), "+r"(u.y), "+r"(u.z), "+r"(u.w));
#else
    (void)u;
#endif
}
/* 8 bf16 in 4 words -> fp32 (element 2i is the low half of word i; a bf16 is the top half of its fp32) */
__device__ __forceinline__ void unpack_u4(const uint4& u, float (&f)[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
/* 8 bf16 of a row from column c as 4 words; columns past C read 0 */
template <bool VEC>
__device__ __forceinline__ uint4 ldu4(const bf16* row, int c, int C) {
    if constexpr (VEC) {
        return *reinterpret_cast<const uint4*>(row + c);
    } else {
        const bf16x8 v = ldpack8<false>(row, c, C);
        uint4 u;
        memcpy(&u, &v, sizeof u);
        return u;
    }
}
/* the same through the streaming cache hint (ld.global.cs: evict first), for
 * data that no later kernel reads soon */
template <bool VEC>
__device__ __forceinline__ uint4 ldu4_cs(const bf16* row, int c, int C) {
    if constexpr (VEC) {
        return __ldcs(reinterpret_cast<const uint4*>(row + c));
    } else {
        return ldu4<false>(row, c, C);
    }
}

/* fp32 -> 8 bf16 in 4 words, round to nearest even */
__device__ __forceinline__ uint4 pack_u4(const float (&f)[8]) {
    const bf16x8 v = pack8(f);
    uint4 u;
    memcpy(&u, &v, sizeof u);
    return u;
}
/* 4 words of 8 bf16 stored at column c of a row; columns past C not written */
template <bool VEC>
__device__ __forceinline__ void stu4(bf16* row, int c, int C, const uint4& u) {
    if constexpr (VEC) {
        *reinterpret_cast<uint4*>(row + c) = u;
    } else {
        float f[8];
        unpack_u4(u, f);
        st8<false>(row, c, C, f);
    }
}

#define COLSUM_TAIL_GROUP 16

__host__ __device__ static inline int colsum_tail_groups(int nparts) { return (nparts + COLSUM_TAIL_GROUP - 1) / COLSUM_TAIL_GROUP; }

/* bias_cuda.cu: n zeroed counters (grown on demand, never shrunk); every
 * kernel that uses them leaves them zero */
unsigned* colsum_tail_counters(size_t n);

/* Columns ca and cb (cb < 0: none) of rows 0..n-1 summed in row order, UNR
 * rows at a time with both columns' loads in flight (L2 loads: other blocks
 * wrote the rows). T is float4 (four columns per index) or float. */
__device__ __forceinline__ void colsum_add(float4& s, const float4& v) {
    s.x += v.x;
    s.y += v.y;
    s.z += v.z;
    s.w += v.w;
}
__device__ __forceinline__ void colsum_add(float& s, float v) { s += v; }
template <int UNR, typename T>
__device__ __forceinline__ void colsum_rows2(const T* rows, size_t stride, int n, int ca, int cb, T& sa, T& sb) {
    for (int j0 = 0; j0 < n; j0 += UNR) {
        T va[UNR], vb[UNR];
#pragma unroll
        for (int j = 0; j < UNR; j++) {
            if (j0 + j < n) {
                va[j] = __ldcg(&rows[(size_t)(j0 + j) * stride + ca]);
                if (cb >= 0) vb[j] = __ldcg(&rows[(size_t)(j0 + j) * stride + cb]);
            }
        }
#pragma unroll
        for (int j = 0; j < UNR; j++) {
            if (j0 + j < n) {
                colsum_add(sa, va[j]);
                if (cb >= 0) colsum_add(sb, vb[j]);
            }
        }
    }
}

/* One stage of colsum_tail over n rows of ncols (in units of T) from
 * `rows`: each thread takes two columns at a time. FINAL: add the sums to
 * *dst(c) (read before the rows are, so that load is not one more round
 * trip); else store them to out. */
template <int UNR, bool FINAL, typename T, typename Dst>
__device__ __forceinline__ void colsum_stage(const T* rows, size_t stride, int n, int ncols, T* out, Dst dst,
                                             int tid, int nthr) {
    constexpr int W = sizeof(T) / sizeof(float);
    for (int ca = tid; ca < ncols; ca += 2 * nthr) {
        const int cb = ca + nthr < ncols ? ca + nthr : -1;
        float da[W] = {}, db[W] = {};
        if constexpr (FINAL) {
#pragma unroll
            for (int k = 0; k < W; k++) {
                da[k] = *dst(W * ca + k);
                if (cb >= 0) db[k] = *dst(W * cb + k);
            }
        }
        T sa, sb;
        memset(&sa, 0, sizeof sa);
        memset(&sb, 0, sizeof sb);
        colsum_rows2<UNR>(rows, stride, n, ca, cb, sa, sb);
        if constexpr (FINAL) {
            const float* fa = reinterpret_cast<const float*>(&sa);
            const float* fb = reinterpret_cast<const float*>(&sb);
#pragma unroll
            for (int k = 0; k < W; k++) {
                *dst(W * ca + k) = da[k] + fa[k];
                if (cb >= 0) *dst(W * cb + k) = db[k] + fb[k];
            }
        } else {
            out[ca] = sa;
            if (cb >= 0) out[cb] = sb;
        }
    }
}

/* Called by every thread of a block, after the block's partial row
 * partial[part * pstride + c], c < ncols, is written (by any of its threads),
 * as the block's last action. gpart: colsum_tail_groups(nparts) rows of the
 * same stride; counters: colsum_tail_groups(nparts) + 1, zero. dst(c) is the
 * float* that column c's sum is added to, by the one block that finishes.
 * Columns go four at a time (16-byte loads) when the rows allow it, two
 * columns per thread with UNR rows of each in flight: the finishing blocks
 * wait on L2 latency (a round trip per step), not on bandwidth. */
template <int UNR = 8, typename Dst>
__device__ void colsum_tail(const float* partial, float* gpart, unsigned* counters, int part, int nparts, int ncols,
                            size_t pstride, Dst dst) {
    __shared__ unsigned ticket;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nthr = blockDim.x * blockDim.y;
    const int ngroups = colsum_tail_groups(nparts);
    const int g = part / COLSUM_TAIL_GROUP, p0 = g * COLSUM_TAIL_GROUP;
    const int gsize = min(COLSUM_TAIL_GROUP, nparts - p0);
    const bool vec4 = ncols % 4 == 0 && pstride % 4 == 0 && ((uintptr_t)partial & 15u) == 0 && ((uintptr_t)gpart & 15u) == 0;
    __threadfence(); /* this thread's partial stores, visible device-wide before the ticket */
    __syncthreads();
    if (tid == 0) ticket = atomicAdd(&counters[g], 1u);
    __syncthreads();
    if (ticket != (unsigned)gsize - 1) return; /* the whole block: ticket is shared */
    /* the last of group g: its parts in part order */
    if (vec4)
        colsum_stage<UNR, false>(reinterpret_cast<const float4*>(partial + (size_t)p0 * pstride), pstride / 4, gsize,
                                 ncols / 4, reinterpret_cast<float4*>(gpart + (size_t)g * pstride), dst, tid, nthr);
    else
        colsum_stage<UNR, false>(partial + (size_t)p0 * pstride, pstride, gsize, ncols, gpart + (size_t)g * pstride,
                                 dst, tid, nthr);
    if (tid == 0) counters[g] = 0;
    __threadfence();
    __syncthreads();
    if (tid == 0) ticket = atomicAdd(&counters[ngroups], 1u);
    __syncthreads();
    if (ticket != (unsigned)ngroups - 1) return;
    /* the last group: the group rows in group order, added to dst */
    if (vec4)
        colsum_stage<UNR, true>(reinterpret_cast<const float4*>(gpart), pstride / 4, ngroups, ncols / 4,
                                (float4*)nullptr, dst, tid, nthr);
    else
        colsum_stage<UNR, true>(gpart, pstride, ngroups, ncols, (float*)nullptr, dst, tid, nthr);
    if (tid == 0) counters[ngroups] = 0;
}

#endif /* OPS_MEMOPS_CUH */
