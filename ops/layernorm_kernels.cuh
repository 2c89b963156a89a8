/*
 * ops/layernorm_kernels.cuh - the device code of the row norms (layernorm,
 * RMSNorm, residual + layernorm); ops/layernorm_cuda.cu has the design and
 * the host launchers (kept apart because the emulator's build rewrites the
 * launches of a .cu). Included once, by layernorm_cuda.cu.
 *
 * Two kinds of kernel:
 *  - rows of C <= 32 * 8 * LN_NARROW_NCH (1024; every GPT-2 width up to
 *    350M, Qwen2-0.5B's 896): the row, w and b live packed in registers
 *    (4 words per 8 columns) across a loop over rows, and the next row is
 *    loaded before the current one's reductions, so a load is always in
 *    flight. layernorm_forward_kernel; layernorm_backward_kernel for rows of
 *    whole 256-column chunks with 16-byte accesses, _guarded_kernel for the
 *    rest. The backward's block partials of dw / db are added by the next
 *    norm backward on the stream, at its start (ops/colsum_deferred.cuh).
 *  - wider rows (GPT-2 XL's 1600, Qwen2-1.5B's 1536), which would not fit
 *    those registers: one row per warp (_wide_kernel), the backward's dw / db
 *    accumulated in registers and finished by colsum_finish (bias_cuda.cu).
 * Each is a template over NCH (chunks of 8 columns per lane, so the row is
 * in registers), VEC (16-byte accesses), RMS (no mean, no bias, no db) and,
 * in the forward, RES (the row formed as x + (y + bias) and stored first).
 *
 * Numerics: fp32 per element in the CPU reference's order (the whole-chunk
 * backward by fma's, and xhat as fma(x, s, -m s): rounding apart); dw / db
 * summed over a warp's rows in row order, warps in warp order, blocks in a
 * fixed order; the backward's grid depends on N only, so its results are
 * bit-reproducible.
 */
#ifndef OPS_LAYERNORM_KERNELS_CUH
#define OPS_LAYERNORM_KERNELS_CUH

#include "common/cuda_async.cuh"
#include "ops/colsum_deferred.cuh"
#include "ops/cuda_common.cuh"

#ifdef CUDA_EMU
/* g++ -O2 reports the packed register arrays (w, b, the prefetched rows) as
 * (maybe) used uninitialized, on paths their guards exclude: every element
 * is written before it is read (and nvcc, which compiles the same code for
 * the GPU, finds nothing) */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define LN_WARPS 8       /* warps per block (rows in flight per block in the wide kernels) */
#define LN_MAX_NCH 8     /* C up to 2048 (GPT-2 XL has 1600) */
#define LN_NARROW_NCH 4  /* the register-resident kernels: C up to 1024 */

/* blocks per SM the narrow kernels' register caps are set for (C <= 768
 * with 16-byte accesses, the GPT-2 shapes; the rest take what they need,
 * unspilled) */
static constexpr int ln_minblocks(int nch, bool vec) { return vec && nch <= 3 ? 2 : 1; }

/* ---- forward, C <= 1024 ------------------------------------------------------
 * What the H200 profile of the one-row-per-warp kernel (the wide one below)
 * showed at C = 768: the L1/TEX pipe 85% busy with DRAM at a third to a half
 * of its peak - every warp loaded w and b (and the residual's bias) again for
 * its one row, twice the row's own bytes through L1. Here warps persist over
 * rows (one wave, the launcher spreads the rows evenly) with w, b and the
 * bias packed in registers, loaded once per warp; rows are loaded with the
 * streaming hint, the next one before the current one's two reductions. */

/* the row's x (and, for RES, y) chunks of this lane; chunks past C are zero */
template <int NCH, bool VEC, bool RES>
__device__ __forceinline__ void ln_fwd_load(uint4 (&xp)[NCH], uint4 (&yp)[NCH], const bf16* inp, const bf16* y, int row,
                                            int lane, int nch8, int C) {
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int ch = lane + 32 * i;
        xp[i] = yp[i] = make_uint4(0u, 0u, 0u, 0u);
        if (ch < nch8) {
            xp[i] = ldu4_cs<VEC>(inp + (size_t)row * C, ch * 8, C);
            if constexpr (RES) yp[i] = ldu4_cs<VEC>(y + (size_t)row * C, ch * 8, C);
        }
    }
}

template <int NCH, bool VEC, bool RMS, bool RES>
__global__ void __launch_bounds__(LN_WARPS * 32, ln_minblocks(NCH, VEC))
layernorm_forward_kernel(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N,
                         int C, float eps, bf16* res, const bf16* y, const bf16* ybias) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nwarps = gridDim.x * LN_WARPS;
    int row = blockIdx.x * LN_WARPS + warp;
    if (row >= N) return;
    const int nch8 = (C + 7) / 8;
    uint4 wp[NCH], bp[NCH], yb[NCH];
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int ch = lane + 32 * i;
        wp[i] = make_uint4(0u, 0u, 0u, 0u);
        bp[i] = make_uint4(0u, 0u, 0u, 0u);
        yb[i] = make_uint4(0u, 0u, 0u, 0u);
        if (ch < nch8) {
            wp[i] = ldu4<VEC>(w, ch * 8, C);
            if constexpr (!RMS) bp[i] = ldu4<VEC>(b, ch * 8, C);
            if constexpr (RES) yb[i] = ldu4<VEC>(ybias, ch * 8, C);
        }
    }
    uint4 xp[NCH], yp[NCH];
    ln_fwd_load<NCH, VEC, RES>(xp, yp, inp, y, row, lane, nch8, C);
    for (; row < N; row += nwarps) {
        const int next = row + nwarps;
        uint4 xn[NCH], yn[NCH];
        if (next < N) ln_fwd_load<NCH, VEC, RES>(xn, yn, inp, y, next, lane, nch8, C);
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            opaque_u4(wp[i]);
            if constexpr (!RMS) opaque_u4(bp[i]);
            if constexpr (RES) opaque_u4(yb[i]);
        }
        /* the row stays packed: each pass unpacks it */
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            float x[8];
            unpack_u4(xp[i], x); /* zero past C */
            if (RES && ch < nch8) {
                /* res = x + (y + bias), the CPU's order, rounded to bf16 and
                 * stored (the residual stream the backward reads); what is
                 * normalised is that stored row. Each lane has read its chunk
                 * before writing it: res may alias x or y. */
                float yv[8], bv[8];
                unpack_u4(yp[i], yv);
                unpack_u4(yb[i], bv);
#pragma unroll
                for (int k = 0; k < 8; k++) x[k] += yv[k] + bv[k];
                xp[i] = pack_u4(x);
                stu4<VEC>(res + (size_t)row * C, ch * 8, C, xp[i]);
                unpack_u4(xp[i], x);
            }
#pragma unroll
            for (int k = 0; k < 8; k++) sum += x[k];
        }
        const float m = RMS ? 0.0f : warp_sum(sum) / C;
        /* two-pass variance (as the CPU reference): no cancellation */
        float var = 0.0f;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            opaque_u4(xp[i]);
            float x[8];
            unpack_u4(xp[i], x);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float d = x[k] - m;
                if (ch < nch8 && ch * 8 + k < C) var += d * d;
            }
        }
        const float s = 1.0f / sqrtf(warp_sum(var) / C + eps);
        bf16* o_row = out + (size_t)row * C;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            if (ch >= nch8) continue;
            opaque_u4(xp[i]);
            float x[8], wv[8], bv[8], o[8];
            unpack_u4(xp[i], x);
            unpack_u4(wp[i], wv);
            if (RMS) {
#pragma unroll
                for (int k = 0; k < 8; k++) o[k] = x[k] * s * wv[k]; /* the CPU's order */
            } else {
                unpack_u4(bp[i], bv);
#pragma unroll
                for (int k = 0; k < 8; k++) o[k] = (x[k] - m) * s * wv[k] + bv[k];
            }
            st8<VEC>(o_row, ch * 8, C, o);
        }
        if (lane == 0) {
            if (!RMS) mean[row] = m;
            rstd[row] = s;
        }
        if (next < N) {
#pragma unroll
            for (int i = 0; i < NCH; i++) {
                xp[i] = xn[i];
                yp[i] = yn[i];
            }
        }
    }
}

/* ---- backward, C <= 1024 -----------------------------------------------------
 * dinp ACCUMULATES: dx += rstd * (g - mean(g) - xhat * mean(g*xhat)), g =
 * w*dout (RMS: mean 0 and no mean(g) term). A block takes a contiguous run of
 * rows, whole warps' worth (the launcher's rows_per_block is a multiple of
 * LN_WARPS), and warp `warp` its rows warp, warp + LN_WARPS, ... What the
 * profile of the wide kernel showed at C = 768 (16 warps per SM, 128
 * registers): one instruction per 11 cycles per warp with DRAM at 42%, and
 * its two colsum_finish launches 4-5 us each of a 58 us call. So here dw / db
 * accumulate in the warp's own slice of shared memory instead of registers,
 * w is packed in registers, the next row's x, dout and dinp are loaded before
 * the current row's reductions, and the block partials are left to the next
 * launch (colsum_deferred). */

/* one row's backward inputs, packed, for this lane's chunks (zero past C) */
template <int NCH, bool VEC, bool RMS>
struct LnBwdRow {
    uint4 x[NCH], d[NCH], di[NCH];
    float m, s;
    /* FULL: the row is whole 256-column chunks (C = 256 NCH), no guard; MS:
     * load the row's mean and rstd too */
    template <bool FULL = false, bool MS = true>
    __device__ __forceinline__ void load(const bf16* inp, const bf16* dout, const bf16* dinp, const float* mean,
                                         const float* rstd, int row, int lane, int nch8, int C) {
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            if (!FULL) x[i] = d[i] = di[i] = make_uint4(0u, 0u, 0u, 0u);
            if (FULL || ch < nch8) {
                x[i] = ldu4_cs<VEC>(inp + (size_t)row * C, ch * 8, C);
                d[i] = ldu4_cs<VEC>(dout + (size_t)row * C, ch * 8, C);
                di[i] = ldu4_cs<VEC>(dinp + (size_t)row * C, ch * 8, C);
            }
        }
        if constexpr (MS) {
            m = RMS ? 0.0f : mean[row];
            s = rstd[row];
        }
    }
};

/* The accumulators in shared memory: [LN_WARPS][NPART][NCH][2][32] float4,
 * NPART = 2 (dw, db), 3 (dw, db and DSUM's column sums of the new dinp) or
 * 1 (RMS: dw). ln_acc_index is the float4 of warp
 * `warp`'s slice (part a, chunk i, half h of its 8 columns) that lane `lane`
 * owns: lanes adjacent, so a warp's 16-byte accesses meet no bank conflict. */
__host__ __device__ static constexpr int ln_nparts(bool rms, bool dsum) { return rms ? 1 : dsum ? 3 : 2; }
template <int NCH, int NPART>
__device__ __forceinline__ int ln_acc_index(int warp, int a, int i, int h, int lane) {
    return (((warp * NPART + a) * NCH + i) * 2 + h) * 32 + lane;
}
template <int NCH, int NPART>
__device__ __forceinline__ void ln_acc_zero(float4* acc, int warp, int lane) {
#pragma unroll
    for (int a = 0; a < NPART; a++)
#pragma unroll
        for (int i = 0; i < NCH; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) acc[ln_acc_index<NCH, NPART>(warp, a, i, h, lane)] = make_float4(0.f, 0.f, 0.f, 0.f);
}
/* the block's end: its warps' sums, in warp order, to its partial row
 * partial[block][0..NPART C) (dw, then db, then ds), which the next launch
 * adds into dw / db / ds (colsum_deferred). A float4 of one warp's slice and
 * the same float4 of the next warp's are S apart, so a thread adds whole
 * float4s; an earlier version took one column per thread, with a division
 * and the slice's index arithmetic per column, while DRAM idled. FULL:
 * C = 256 NCH, every float4 is 4 columns of one part, stored as one. */
template <int NCH, int NPART, bool FULL>
__device__ __forceinline__ void ln_acc_finish(const float4* acc, float* partial, int C) {
    constexpr int S = NPART * NCH * 64; /* float4s in one warp's slice */
    __syncthreads();
    float* pb = partial + (size_t)blockIdx.x * NPART * C;
    for (int f = threadIdx.x; f < S; f += blockDim.x) {
        float4 t = make_float4(0.f, 0.f, 0.f, 0.f); /* from +0, in warp order: the old order, bit for bit */
#pragma unroll
        for (int wi = 0; wi < LN_WARPS; wi++) {
            const float4 v = acc[wi * S + f];
            t.x += v.x;
            t.y += v.y;
            t.z += v.z;
            t.w += v.w;
        }
        /* f = ((a NCH + i) 2 + h) 32 + lane (ln_acc_index of warp 0) */
        const int lane = f & 31, h = (f >> 5) & 1, i = (f >> 6) % NCH, a = (f >> 6) / NCH;
        const int col = (32 * i + lane) * 8 + 4 * h;
        float* d = pb + (size_t)a * C + col;
        if constexpr (FULL) {
            *reinterpret_cast<float4*>(d) = t;
        } else {
            if (col < C) d[0] = t.x;
            if (col + 1 < C) d[1] = t.y;
            if (col + 2 < C) d[2] = t.z;
            if (col + 3 < C) d[3] = t.w;
        }
    }
}

/* a backward kernel's first act: the previous launch's column sums, spread
 * over every warp of the grid (the warps with no share go straight on) */
__device__ __forceinline__ void ln_prev_colsums(const ColsumPending& prev, int warp, int lane) {
    colsum_deferred(prev, warp * (int)gridDim.x + (int)blockIdx.x, (int)gridDim.x * LN_WARPS, lane);
}

/* Rows of whole 256-column chunks with 16-byte accesses (GPT-2's C = 768).
 * The guarded kernel below issued every other cycle at C = 768 (781
 * instructions per row) with a quarter of the SM cycles idle at the start
 * and the end; this one does the same work in fewer instructions:
 *  - no bounds guards (no predicated loads, no selects of zeros);
 *  - dw / db accumulate in the first pass, where xhat and dout are at hand;
 *  - the second pass needs no xhat: dx += s g - s gmean - s xhat gxmean is
 *    formed as s g + (A x + B) with the row constants A = -s^2 gxmean and
 *    B = s^2 gxmean m - s gmean (fma's; it differs from the reference's
 *    order by rounding only);
 *  - two row buffers used in turn (the loop unrolled by two) instead of
 *    copying the prefetched row into the current one;
 *  - the block's mean / rstd staged in shared memory. */
/* DSUM: part 2 of the accumulators adds the new dinp row as stored (bf16) */
template <int NCH, int NPART>
__device__ __forceinline__ void ln_acc_dsum(float4* acc, const uint4& stored, int warp, int i, int lane) {
    float v[8];
    unpack_u4(stored, v);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float4* p = &acc[ln_acc_index<NCH, NPART>(warp, 2, i, h, lane)];
        float4 t = *p;
        t.x += v[4 * h];
        t.y += v[4 * h + 1];
        t.z += v[4 * h + 2];
        t.w += v[4 * h + 3];
        *p = t;
    }
}

template <int NCH, bool RMS, bool DSUM>
__device__ __forceinline__ void layernorm_backward_row(const LnBwdRow<NCH, true, RMS>& r, float m, float s,
                                                       const uint4 (&wp)[NCH], float4* acc, int warp, int lane,
                                                       bf16* di_row, int C) {
    constexpr int NPART = ln_nparts(RMS, DSUM);
    const float ms = m * s;
    float gsum = 0.0f, gxsum = 0.0f;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        uint4 wi = wp[i];
        opaque_u4(wi);
        /* four columns at a time (half a chunk): fewer values live at once */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t xw[2] = {h ? r.x[i].z : r.x[i].x, h ? r.x[i].w : r.x[i].y};
            const uint32_t dw2[2] = {h ? r.d[i].z : r.d[i].x, h ? r.d[i].w : r.d[i].y};
            const uint32_t ww[2] = {h ? wi.z : wi.x, h ? wi.w : wi.y};
            float xh[4], dv[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t sh = (k & 1) ? 0u : 16u, mk = (k & 1) ? 0xffff0000u : 0xffffffffu;
                const float xv = __uint_as_float((xw[k >> 1] << sh) & mk);
                const float wv = __uint_as_float((ww[k >> 1] << sh) & mk);
                dv[k] = __uint_as_float((dw2[k >> 1] << sh) & mk);
                const float g = wv * dv[k];
                xh[k] = fmaf(xv, s, -ms);
                gsum += g;
                gxsum = fmaf(g, xh[k], gxsum);
            }
            float4* pw = &acc[ln_acc_index<NCH, NPART>(warp, 0, i, h, lane)];
            float4 t = *pw;
            t.x = fmaf(xh[0], dv[0], t.x);
            t.y = fmaf(xh[1], dv[1], t.y);
            t.z = fmaf(xh[2], dv[2], t.z);
            t.w = fmaf(xh[3], dv[3], t.w);
            *pw = t;
            if constexpr (!RMS) {
                float4* pb = &acc[ln_acc_index<NCH, NPART>(warp, 1, i, h, lane)];
                float4 u = *pb;
                u.x += dv[0];
                u.y += dv[1];
                u.z += dv[2];
                u.w += dv[3];
                *pb = u;
            }
        }
    }
    const float gmean = RMS ? 0.0f : warp_sum(gsum) / C;
    const float gxmean = warp_sum(gxsum) / C;
    const float A = -s * s * gxmean, B = s * s * gxmean * m - s * gmean;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        uint4 xi = r.x[i], dd = r.d[i], wi = wp[i];
        opaque_u4(xi);
        opaque_u4(dd);
        opaque_u4(wi);
        float xv[8], dv[8], wv[8], di[8];
        unpack_u4(xi, xv);
        unpack_u4(dd, dv);
        unpack_u4(wi, wv);
        unpack_u4(r.di[i], di);
#pragma unroll
        for (int k = 0; k < 8; k++) di[k] += fmaf(s, wv[k] * dv[k], fmaf(A, xv[k], B));
        const uint4 st = pack_u4(di);
        *reinterpret_cast<uint4*>(di_row + (lane + 32 * i) * 8) = st;
        if constexpr (DSUM) ln_acc_dsum<NCH, NPART>(acc, st, warp, i, lane);
    }
}

/* dynamic shared memory: the accumulators, then 2 rows_per_block floats (mean, rstd) */
template <int NCH, bool RMS, bool DSUM>
__global__ void __launch_bounds__(LN_WARPS * 32, ln_minblocks(NCH, true))
layernorm_backward_kernel(bf16* dinp, float* partial, const ColsumPending prev, const bf16* dout, const bf16* inp,
                          const bf16* w, const float* mean, const float* rstd, int N, int C, int rows_per_block) {
    constexpr int NPART = ln_nparts(RMS, DSUM);
    DYNAMIC_SMEM(smem_raw);
    float4* acc = reinterpret_cast<float4*>(smem_raw);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nch8 = C / 8; /* = 32 * NCH */
    ln_acc_zero<NCH, NPART>(acc, warp, lane);
    uint4 wp[NCH];
#pragma unroll
    for (int i = 0; i < NCH; i++) wp[i] = ldu4<true>(w, (lane + 32 * i) * 8, C);
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = min(N, r0 + rows_per_block);
    LnBwdRow<NCH, true, RMS> ra, rb;
    int row = r0 + warp;
    if (row < r1) ra.template load<true, false>(inp, dout, dinp, mean, rstd, row, lane, nch8, C);
    /* mean / rstd from shared memory: two registers fewer per row buffer and
     * two loads fewer per row */
    float* sms = reinterpret_cast<float*>(acc + LN_WARPS * NPART * NCH * 64);
    for (int t = threadIdx.x; t < r1 - r0; t += blockDim.x) {
        sms[2 * t] = RMS ? 0.0f : mean[r0 + t];
        sms[2 * t + 1] = rstd[r0 + t];
    }
    __syncthreads();
    /* the previous launch's sums, after the barrier (the block's other warps
     * go on with their rows meanwhile; before it, every block waited for
     * them: 0.89 ms against 0.79 without them) and with this warp's first
     * row in flight */
    ln_prev_colsums(prev, warp, lane);
    for (; row < r1; row += 2 * LN_WARPS) {
        const int row_b = row + LN_WARPS, row_c = row_b + LN_WARPS;
        if (row_b < r1) rb.template load<true, false>(inp, dout, dinp, mean, rstd, row_b, lane, nch8, C);
        layernorm_backward_row<NCH, RMS, DSUM>(ra, sms[2 * (row - r0)], sms[2 * (row - r0) + 1], wp, acc, warp, lane,
                                         dinp + (size_t)row * C, C);
        if (row_b >= r1) break;
        if (row_c < r1) ra.template load<true, false>(inp, dout, dinp, mean, rstd, row_c, lane, nch8, C);
        layernorm_backward_row<NCH, RMS, DSUM>(rb, sms[2 * (row_b - r0)], sms[2 * (row_b - r0) + 1], wp, acc, warp, lane,
                                         dinp + (size_t)row_b * C, C);
    }
    ln_acc_finish<NCH, NPART, true>(acc, partial, C);
}

/* Any other C <= 1024 (not whole 256-column chunks, or scalar accesses):
 * the same scheme with bounds guards, one row buffer prefetched into the
 * other, xhat formed in both passes. dynamic shared memory: the accumulators */
template <int NCH, bool VEC, bool RMS, bool DSUM>
__global__ void __launch_bounds__(LN_WARPS * 32, ln_minblocks(NCH, VEC))
layernorm_backward_guarded_kernel(bf16* dinp, float* partial, const ColsumPending prev, const bf16* dout,
                                  const bf16* inp, const bf16* w, const float* mean, const float* rstd, int N, int C,
                                  int rows_per_block) {
    constexpr int NPART = ln_nparts(RMS, DSUM);
    DYNAMIC_SMEM(smem_raw);
    float4* acc = reinterpret_cast<float4*>(smem_raw);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nch8 = (C + 7) / 8;
    ln_acc_zero<NCH, NPART>(acc, warp, lane);
    uint4 wp[NCH];
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int ch = lane + 32 * i;
        wp[i] = make_uint4(0u, 0u, 0u, 0u);
        if (ch < nch8) wp[i] = ldu4<VEC>(w, ch * 8, C);
    }
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = min(N, r0 + rows_per_block);
    int row = r0 + warp;
    LnBwdRow<NCH, VEC, RMS> cur;
    if (row < r1) cur.load(inp, dout, dinp, mean, rstd, row, lane, nch8, C);
    ln_prev_colsums(prev, warp, lane); /* its loads in flight with the first row's */
    for (; row < r1; row += LN_WARPS) {
        const int next = row + LN_WARPS;
        LnBwdRow<NCH, VEC, RMS> nxt;
        if (next < r1) nxt.load(inp, dout, dinp, mean, rstd, next, lane, nch8, C);
#pragma unroll
        for (int i = 0; i < NCH; i++) opaque_u4(wp[i]);
        const float m = cur.m, s = cur.s;
        float gsum = 0.0f, gxsum = 0.0f;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            float xv[8], dv[8], wv[8];
            unpack_u4(cur.x[i], xv);
            unpack_u4(cur.d[i], dv);
            unpack_u4(wp[i], wv);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float g = wv[k] * dv[k];
                gsum += g;
                gxsum += g * (xv[k] - m) * s; /* padded columns: g = 0 */
            }
        }
        const float gmean = RMS ? 0.0f : warp_sum(gsum) / C;
        const float gxmean = warp_sum(gxsum) / C;
        /* the second pass unpacks again rather than keep 16 floats per chunk live across the reductions */
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            opaque_u4(cur.x[i]);
            opaque_u4(cur.d[i]);
            opaque_u4(wp[i]);
        }
        bf16* di_row = dinp + (size_t)row * C;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            if (ch >= nch8) continue;
            float xv[8], dv[8], wv[8], di[8], xh[8];
            unpack_u4(cur.x[i], xv);
            unpack_u4(cur.d[i], dv);
            unpack_u4(cur.di[i], di);
            unpack_u4(wp[i], wv);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                xh[k] = (xv[k] - m) * s;
                di[k] += (wv[k] * dv[k] - gmean - xh[k] * gxmean) * s;
            }
            st8<VEC>(di_row, ch * 8, C, di);
            if constexpr (DSUM) { /* the stored values; columns past C add zeros */
                float dz[8];
#pragma unroll
                for (int k = 0; k < 8; k++) dz[k] = ch * 8 + k < C ? di[k] : 0.0f;
                ln_acc_dsum<NCH, NPART>(acc, pack_u4(dz), warp, i, lane);
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float4* pw = &acc[ln_acc_index<NCH, NPART>(warp, 0, i, h, lane)];
                float4 t = *pw;
                t.x += xh[4 * h] * dv[4 * h];
                t.y += xh[4 * h + 1] * dv[4 * h + 1];
                t.z += xh[4 * h + 2] * dv[4 * h + 2];
                t.w += xh[4 * h + 3] * dv[4 * h + 3];
                *pw = t;
                if constexpr (!RMS) {
                    float4* pb = &acc[ln_acc_index<NCH, NPART>(warp, 1, i, h, lane)];
                    float4 u = *pb;
                    u.x += dv[4 * h];
                    u.y += dv[4 * h + 1];
                    u.z += dv[4 * h + 2];
                    u.w += dv[4 * h + 3];
                    *pb = u;
                }
            }
        }
        if (next < r1) cur = nxt;
    }
    ln_acc_finish<NCH, NPART, false>(acc, partial, C);
}

/* norm_backward_finish's kernel: the last launch's column sums on their own */
__global__ void __launch_bounds__(LN_WARPS * 32) ln_colsums_kernel(const ColsumPending p) {
    colsum_deferred(p, (int)blockIdx.x * LN_WARPS + (int)(threadIdx.x >> 5), (int)gridDim.x * LN_WARPS,
                    (int)(threadIdx.x & 31));
}

/* ---- C > 1024: one row per warp ----------------------------------------------
 * Lane l owns chunks l, l+32, ... of 8 columns, NCH up to LN_MAX_NCH. The
 * forward loads w and b per row (registers are full of the row); RMS: mean
 * and b unused (may be NULL), the "variance" is mean(x^2). */
template <int NCH, bool VEC, bool RMS, bool RES>
__global__ void __launch_bounds__(LN_WARPS * 32)
layernorm_forward_wide_kernel(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b,
                              int N, int C, float eps, bf16* res, const bf16* y, const bf16* ybias) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * LN_WARPS + warp;
    if (row >= N) return;
    const int nch8 = (C + 7) / 8;
    const bf16* x_row = inp + (size_t)row * C;
    float x[NCH][8];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int ch = lane + 32 * i;
        if (ch < nch8) {
            ld8<VEC>(x[i], x_row, ch * 8, C);
            if constexpr (RES) {
                /* as layernorm_forward_kernel: res = x + (y + bias), rounded,
                 * stored, normalised; read before written (res may alias) */
                float yv[8], bv[8];
                ld8<VEC>(yv, y + (size_t)row * C, ch * 8, C);
                ld8<VEC>(bv, ybias, ch * 8, C);
#pragma unroll
                for (int k = 0; k < 8; k++) x[i][k] = __bfloat162float(__float2bfloat16_rn(x[i][k] + (yv[k] + bv[k])));
                st8<VEC>(res + (size_t)row * C, ch * 8, C, x[i]);
            }
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) x[i][k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 8; k++) sum += x[i][k];
    }
    const float m = RMS ? 0.0f : warp_sum(sum) / C;
    float var = 0.0f;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int ch = lane + 32 * i;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float d = x[i][k] - m;
            if (ch < nch8 && ch * 8 + k < C) var += d * d;
        }
    }
    const float s = 1.0f / sqrtf(warp_sum(var) / C + eps);
    bf16* o_row = out + (size_t)row * C;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int ch = lane + 32 * i;
        if (ch >= nch8) continue;
        float wv[8], bv[8], o[8];
        ld8<VEC>(wv, w, ch * 8, C);
        if (RMS) {
#pragma unroll
            for (int k = 0; k < 8; k++) o[k] = x[i][k] * s * wv[k];
        } else {
            ld8<VEC>(bv, b, ch * 8, C);
#pragma unroll
            for (int k = 0; k < 8; k++) o[k] = (x[i][k] - m) * s * wv[k] + bv[k];
        }
        st8<VEC>(o_row, ch * 8, C, o);
    }
    if (lane == 0) {
        if (!RMS) mean[row] = m;
        rstd[row] = s;
    }
}

/* Block = LN_WARPS warps over a contiguous chunk of rows, warp `warp` taking
 * rows warp, warp + 8, ... A row's x, dout and dinp are loaded at the row's
 * start (one memory latency per row, not one per pass) and held packed
 * between the two passes. dw, db: each lane accumulates its columns over the
 * warp's rows in registers; the warps are then added in warp order in shared
 * memory, and the block's sums go to partial[block][0..C) (dw) and [C..2C)
 * (db; not for RMS, whose partials are C wide), which colsum_finish adds in
 * block order. */
template <int NCH, bool VEC, bool RMS>
__global__ void __launch_bounds__(LN_WARPS * 32)
layernorm_backward_wide_kernel(bf16* dinp, float* partial, const bf16* dout, const bf16* inp, const bf16* w,
                               const float* mean, const float* rstd, int N, int C, int rows_per_block) {
    __shared__ float sred[(RMS ? 1 : 2) * NCH * 256]; /* dw (and db) of the block's columns */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nch8 = (C + 7) / 8;
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = min(N, r0 + rows_per_block);
    float dwacc[NCH][8], dbacc[NCH][8];
#pragma unroll
    for (int i = 0; i < NCH; i++)
#pragma unroll
        for (int k = 0; k < 8; k++) dwacc[i][k] = dbacc[i][k] = 0.0f;

    for (int row = r0 + warp; row < r1; row += LN_WARPS) {
        const bf16* x_row = inp + (size_t)row * C;
        const bf16* d_row = dout + (size_t)row * C;
        bf16* di_row = dinp + (size_t)row * C;
        bf16x8 xp[NCH], dp[NCH], ip[NCH];
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            if (ch < nch8) {
                xp[i] = ldpack8<VEC>(x_row, ch * 8, C);
                dp[i] = ldpack8<VEC>(d_row, ch * 8, C);
                ip[i] = ldpack8<VEC>(di_row, ch * 8, C);
            }
        }
        const float m = RMS ? 0.0f : mean[row], s = rstd[row];
        /* pass 1: the two row means */
        float gsum = 0.0f, gxsum = 0.0f;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            if (ch >= nch8) continue;
            float xv[8], dv[8], wv[8];
            unpack8(xp[i], xv);
            unpack8(dp[i], dv);
            ld8<VEC>(wv, w, ch * 8, C);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float g = wv[k] * dv[k];
                gsum += g;
                gxsum += g * (xv[k] - m) * s;
            }
        }
        const float gmean = RMS ? 0.0f : warp_sum(gsum) / C;
        const float gxmean = warp_sum(gxsum) / C;
        /* pass 2, from the registers: dinp and the parameter partials */
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            if (ch >= nch8) continue;
            float xv[8], dv[8], wv[8], di[8];
            unpack8(xp[i], xv);
            unpack8(dp[i], dv);
            unpack8(ip[i], di);
            ld8<VEC>(wv, w, ch * 8, C);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float xhat = (xv[k] - m) * s;
                di[k] += (wv[k] * dv[k] - gmean - xhat * gxmean) * s;
                dwacc[i][k] += xhat * dv[k];
                dbacc[i][k] += dv[k];
            }
            st8<VEC>(di_row, ch * 8, C, di);
        }
    }
    /* warps -> block, in warp order (each lane touches only its own columns) */
    for (int wi = 0; wi < LN_WARPS; wi++) {
        if (warp == wi) {
#pragma unroll
            for (int i = 0; i < NCH; i++) {
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const int c = (lane + 32 * i) * 8 + k;
                    if (c < C) {
                        sred[c] = (wi == 0 ? 0.0f : sred[c]) + dwacc[i][k];
                        if (!RMS) sred[C + c] = (wi == 0 ? 0.0f : sred[C + c]) + dbacc[i][k];
                    }
                }
            }
        }
        __syncthreads();
    }
    constexpr int NPART = RMS ? 1 : 2;
    float* pb = partial + (size_t)blockIdx.x * NPART * C;
    for (int c = threadIdx.x; c < NPART * C; c += blockDim.x) pb[c] = sred[c];
}

#endif /* OPS_LAYERNORM_KERNELS_CUH */
