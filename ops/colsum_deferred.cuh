/*
 * ops/colsum_deferred.cuh - the second stage of a deterministic column sum,
 * run by the NEXT kernel: layernorm_backward's dw / db / dsum. Device code.
 *
 * A norm backward's blocks each leave a partial row (the sums of its rows'
 * columns). Adding those rows inside the same kernel means one block does it
 * after every other has finished: on the H200 that tail cost 15 us of a
 * 46 us layernorm_backward at GPT-2 124M shapes (a chain of L2 round trips
 * on one SM while the others idle). So the kernel only writes its partial
 * rows, and the next norm backward on the stream (or norm_backward_finish,
 * ops.h) adds them at its start, spread over all its warps: half a warp per
 * column pair, a lane per group of COLSUM_GROUP parts, every load of a
 * column in flight at once, issued while the warp's first row is in flight.
 *
 * The order is fixed by nparts: column c's sum is
 *   dst(c) + ((0 + G_0) + G_1) + ... ,  G_g = (0 + part 16g) + part 16g+1 + ...
 * (parts and groups ascending), so the result is bit-reproducible, and the
 * same as the two-level in-kernel finish it replaced.
 */
#ifndef OPS_COLSUM_DEFERRED_CUH
#define OPS_COLSUM_DEFERRED_CUH

#include <string.h>

#include "ops/cuda_common.cuh"

#define COLSUM_GROUP 16    /* parts per lane */
#define COLSUM_MAX_PARTS 256 /* 16 lanes of 16 parts */

/* A launch's partial rows still to be added: nparts rows of ncols floats
 * (pstride = ncols), column c to dst[c / C][c % C]. partial == NULL: none. */
struct ColsumPending {
    const float* partial;
    float* dst[3];
    int nparts, C, ncols;
};

__device__ __forceinline__ void colsum_add(float2& s, const float2& v) {
    s.x += v.x;
    s.y += v.y;
}
__device__ __forceinline__ void colsum_add(float& s, float v) { s += v; }
__device__ __forceinline__ float colsum_part(const float2& v, int k) { return k == 0 ? v.x : v.y; }
__device__ __forceinline__ float colsum_part(float v, int) { return v; }

/* Columns of W floats (T = float2 or float) of p: warp gwarp of nwarps takes
 * column units 2 gwarp + h (h = lane / 16) and on in steps of 2 nwarps. */
template <typename T>
__device__ __forceinline__ void colsum_deferred_units(const ColsumPending& p, int gwarp, int nwarps, int lane) {
    constexpr int W = sizeof(T) / sizeof(float);
    const T* rows = reinterpret_cast<const T*>(p.partial);
    const int units = p.ncols / W, h = lane >> 4, g = lane & 15;
    const int p0 = g * COLSUM_GROUP, n = min(COLSUM_GROUP, p.nparts - p0); /* n <= 0: a lane past the groups */
    const int ngroups = (p.nparts + COLSUM_GROUP - 1) / COLSUM_GROUP;
    for (int u0 = 2 * gwarp; u0 < units; u0 += 2 * nwarps) { /* warp-uniform */
        const int u = u0 + h;
        const bool on = u < units;
        T v[COLSUM_GROUP];
#pragma unroll
        for (int j = 0; j < COLSUM_GROUP; j++)
            if (on && j < n) v[j] = __ldcg(&rows[(size_t)(p0 + j) * units + u]);
        T s; /* this lane's group sum, from +0 */
        memset(&s, 0, sizeof s);
#pragma unroll
        for (int j = 0; j < COLSUM_GROUP; j++)
            if (on && j < n) colsum_add(s, v[j]);
        float t[W] = {}; /* the groups in order, on every lane of the half */
        for (int q = 0; q < ngroups; q++)
#pragma unroll
            for (int k = 0; k < W; k++) t[k] += __shfl_sync(0xffffffffu, colsum_part(s, k), 16 * h + q);
        if (on && g == 0) {
#pragma unroll
            for (int k = 0; k < W; k++) {
                const int c = W * u + k;
                float* d = p.dst[c / p.C] + c % p.C;
                *d = *d + t[k];
            }
        }
    }
}

/* Adds p's parts into its destinations (every thread of the calling warps;
 * warp gwarp of nwarps takes its share). Pairs of columns when C is even, so
 * that no pair straddles two destinations: 16 float2 loads in flight per lane,
 * few enough registers to sit beside a norm kernel's first row. */
__device__ __forceinline__ void colsum_deferred(const ColsumPending& p, int gwarp, int nwarps, int lane) {
    if (!p.partial) return;
    if (p.C % 2 == 0) colsum_deferred_units<float2>(p, gwarp, nwarps, lane);
    else colsum_deferred_units<float>(p, gwarp, nwarps, lane);
}

#endif /* OPS_COLSUM_DEFERRED_CUH */
