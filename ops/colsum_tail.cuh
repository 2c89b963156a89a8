/*
 * ops/colsum_tail.cuh - the second stage of a deterministic column sum run
 * inside the kernel that made the partial rows, so it costs no launch of its
 * own: layernorm_backward's dw / db (ops/layernorm_kernels.cuh). Device code.
 *
 * Each block of a grid has written its partial row (part p of nparts); the
 * parts are cut into groups of COLSUM_TAIL_GROUP. The last block of a group
 * to arrive (an integer ticket, atomicAdd on a counter: which block that is
 * depends on timing, what it computes does not) adds the group's parts in
 * part order into a group row; the last group to arrive adds the group rows
 * in group order and hands each column's sum to the caller. So every column
 * is sum_g (sum_{p in g} part p), both sums ascending: an order fixed by
 * nparts. Two levels keep each finishing block's reads small (16 rows, then
 * nparts/16 rows) where one block reading every part would crawl at one SM's
 * bandwidth. The counters start at zero (the caller allocates them zeroed)
 * and each finisher puts its counter back to zero, so the next launch on the
 * stream finds them so.
 *
 * It replaced two colsum_finish launches of 4-5 us each in a ~58 us
 * layernorm_backward (H200, GPT-2 124M shapes); the finishing blocks wait on
 * L2 latency (a round trip per step), not on bandwidth, hence two columns
 * per thread with several rows of each in flight.
 */
#ifndef OPS_COLSUM_TAIL_CUH
#define OPS_COLSUM_TAIL_CUH

#include <string.h>

#include "ops/cuda_common.cuh"

#define COLSUM_TAIL_GROUP 16

__host__ __device__ static inline int colsum_tail_groups(int nparts) { return (nparts + COLSUM_TAIL_GROUP - 1) / COLSUM_TAIL_GROUP; }

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

#endif /* OPS_COLSUM_TAIL_CUH */
