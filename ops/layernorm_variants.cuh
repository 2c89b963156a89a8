/*
 * ops/layernorm_variants.cuh - the kernels of the layernorm / RMSNorm
 * variants 1-3 (ops/memops.cuh: TPFP8_LN_FWD_VARIANT, TPFP8_LN_BWD_VARIANT),
 * device code only (the launchers are in the .cu, where the emulator's build
 * rewrites launches); included once, by ops/layernorm_cuda.cu, after its
 * LN_WARPS and LN_MAX_NCH and the kernels of variant 0, which its header
 * comment describes. Held apart only while the variants are being measured
 * on the H200: the losers go, the winners move into layernorm_cuda.cu.
 *
 * Numerics and determinism are variant 0's: fp32 arithmetic per element in
 * the reference's order (variant 3: by fma's, rounding apart), dw / db
 * summed over a warp's rows in row order, warps in warp order, blocks in the
 * fixed two-level order of colsum_tail; the grid of the backward depends on
 * N only.
 */
#ifndef OPS_LAYERNORM_VARIANTS_CUH
#define OPS_LAYERNORM_VARIANTS_CUH

#include "common/cuda_async.cuh"
#include "ops/cuda_common.cuh"
#include "ops/memops.cuh"

#ifdef CUDA_EMU
/* g++ -O2 reports the variant kernels' packed register arrays (w, b, the
 * prefetched rows) as (maybe) used uninitialized, on paths their guards
 * exclude: every element is written before it is read (and nvcc, which
 * compiles the same code for the GPU, finds nothing) */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

/* ---- variants 1 and 2 (ops/memops.cuh: TPFP8_LN_FWD_VARIANT / _BWD_) ----------
 * What the H200 profile of the kernels above showed (ncu, GPT-2 124M shapes):
 * the forward kept the L1/TEX pipe at 85% busy with DRAM at a third to a half
 * of its peak - every warp loads w and b (and the residual's bias) again for
 * its one row, twice the row's own bytes through L1 - and the backward (16
 * warps per SM, 128 registers) issued one instruction per 11 cycles per warp
 * with DRAM at 42%, while its two colsum_finish launches took 4-5 us each of
 * a 58 us call. So the variants:
 *  - forward: warps persist over rows (grid = one wave, rows balanced), with
 *    w, b and the bias packed in registers, loaded once per warp; row loads
 *    with the streaming hint; PREF = true (variant 2) also loads the next row
 *    before the current one's two reductions, so a load is always in flight;
 *  - backward: dw / db accumulate in the warp's own slice of shared memory
 *    instead of 48 registers, w packed in registers, so variant 1 runs 24
 *    warps per SM (80 registers) and variant 2 (PREF, next row's x, dout,
 *    dinp loaded before the current row's reductions) 16; the block partials
 *    are added by colsum_tail inside the same kernel (no second launch).
 * Same fixed-order reductions as the kernels above (rows in order within a
 * warp, warps in warp order, blocks in a fixed tree), arithmetic per element
 * as theirs. */

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

/* The variant kernels serve C <= 32 * 8 * LN_VAR_MAX_NCH (1024): wider rows
 * would not fit their registers (w, b and the bias held for the whole
 * kernel) and run the kernels above whatever the variant. */
#define LN_VAR_MAX_NCH 4

/* blocks per SM their register caps are set for (C <= 768 with 16-byte
 * accesses, the GPT-2 shapes; the rest take what they need, unspilled) */
static constexpr int ln_minblocks(int nch, bool vec, bool pref) { return vec && nch <= 3 ? (pref ? 2 : 3) : 1; }

template <int NCH, bool VEC, bool RMS, bool RES, bool PREF>
__global__ void __launch_bounds__(LN_WARPS * 32, ln_minblocks(NCH, VEC, PREF))
layernorm_forward_rows_kernel(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b,
                              int N, int C, float eps, bf16* res, const bf16* y, const bf16* ybias) {
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
        if (PREF && next < N) ln_fwd_load<NCH, VEC, RES>(xn, yn, inp, y, next, lane, nch8, C);
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            opaque_u4(wp[i]);
            if constexpr (!RMS) opaque_u4(bp[i]);
            if constexpr (RES) opaque_u4(yb[i]);
        }
        /* the row stays packed: each pass unpacks it (RES: the rounded sum is
         * exactly a bf16 row, packed and stored as res, then normalised) */
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            float x[8];
            unpack_u4(xp[i], x); /* zero past C */
            if (RES && ch < nch8) {
                /* as the kernel above: res = x + (y + bias), rounded, stored, normalised */
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
                for (int k = 0; k < 8; k++) o[k] = x[k] * s * wv[k];
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
            if constexpr (PREF) {
#pragma unroll
                for (int i = 0; i < NCH; i++) {
                    xp[i] = xn[i];
                    yp[i] = yn[i];
                }
            } else {
                ln_fwd_load<NCH, VEC, RES>(xp, yp, inp, y, next, lane, nch8, C);
            }
        }
    }
}

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

/* the float4 of warp `warp`'s accumulator slice (part a = dw / db, chunk i,
 * half h of its 8 columns) that lane `lane` owns: lanes adjacent, so a warp's
 * 16-byte accesses meet no bank conflict */
template <int NCH, int NPART>
__device__ __forceinline__ int ln_acc_index(int warp, int a, int i, int h, int lane) {
    return (((warp * NPART + a) * NCH + i) * 2 + h) * 32 + lane;
}

template <int NCH, bool VEC, bool RMS, bool PREF>
__global__ void __launch_bounds__(LN_WARPS * 32, ln_minblocks(NCH, VEC, PREF))
layernorm_backward_smem_kernel(bf16* dinp, float* partial, float* gpart, unsigned* counters, float* dw, float* db,
                               const bf16* dout, const bf16* inp, const bf16* w, const float* mean, const float* rstd,
                               int N, int C, int rows_per_block) {
    constexpr int NPART = RMS ? 1 : 2;
    DYNAMIC_SMEM(smem_raw); /* [LN_WARPS][NPART][NCH][2][32] float4 */
    float4* acc = reinterpret_cast<float4*>(smem_raw);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nch8 = (C + 7) / 8;
#pragma unroll
    for (int a = 0; a < NPART; a++)
#pragma unroll
        for (int i = 0; i < NCH; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) acc[ln_acc_index<NCH, NPART>(warp, a, i, h, lane)] = make_float4(0.f, 0.f, 0.f, 0.f);
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
    for (; row < r1; row += LN_WARPS) {
        const int next = row + LN_WARPS;
        LnBwdRow<NCH, VEC, RMS> nxt;
        if (PREF && next < r1) nxt.load(inp, dout, dinp, mean, rstd, next, lane, nch8, C);
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
        if (next < r1) {
            if constexpr (PREF) cur = nxt;
            else cur.load(inp, dout, dinp, mean, rstd, next, lane, nch8, C);
        }
    }
    __syncthreads();
    /* warps -> the block's partial, in warp order */
    const float* accf = reinterpret_cast<const float*>(smem_raw);
    float* pb = partial + (size_t)blockIdx.x * NPART * C;
    for (int c = threadIdx.x; c < NPART * C; c += blockDim.x) {
        const int a = c / C, cc = c - a * C, ch = cc >> 3, k = cc & 7;
        float t = 0.0f;
#pragma unroll
        for (int wi = 0; wi < LN_WARPS; wi++)
            t += accf[ln_acc_index<NCH, NPART>(wi, a, ch >> 5, k >> 2, ch & 31) * 4 + (k & 3)];
        pb[c] = t;
    }
    colsum_tail<PREF ? 8 : 4>(partial, gpart, counters, blockIdx.x, gridDim.x, NPART * C, (size_t)NPART * C,
                [&](int c) { return c < C ? dw + c : db + (c - C); });
}

/* Variant 3 of the backward: variant 2 cut down to fewer instructions per
 * row, for rows of whole 256-column chunks with 16-byte accesses (GPT-2's C
 * = 768; other rows run variant 2). The H200 profile of variant 2 showed the
 * schedulers issuing every other cycle (781 instructions per row, 0.49 issued
 * per cycle) and a quarter of the SM cycles idle at the start and the end:
 *  - no bounds guards (no predicated loads, no selects of zeros);
 *  - dw / db accumulate in the first pass, where xhat and dout are at hand;
 *  - the second pass needs no xhat: dx += s g - s gmean - s xhat gxmean is
 *    formed as s g + (A x + B) with the row constants A = -s^2 gxmean and
 *    B = s^2 gxmean m - s gmean (fma's; it differs from the reference's
 *    order by rounding only);
 *  - two row buffers used in turn (the loop unrolled by two) instead of
 *    copying the prefetched row into the current one;
 *  - the block finish loads a group's 16 parts at once.
 * xhat itself is fma(x, s, -m s), also a rounding away from (x - m) s. */
template <int NCH, bool RMS>
__device__ __forceinline__ void ln_bwd3_row(const LnBwdRow<NCH, true, RMS>& r, float m, float s, const uint4 (&wp)[NCH],
                                            float4* acc, int warp, int lane, bf16* di_row, int C) {
    constexpr int NPART = RMS ? 1 : 2;
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
        store8(di_row + (lane + 32 * i) * 8, di);
    }
}

template <int NCH, bool RMS>
__global__ void __launch_bounds__(LN_WARPS * 32, ln_minblocks(NCH, true, true))
layernorm_backward_smem3_kernel(bf16* dinp, float* partial, float* gpart, unsigned* counters, float* dw, float* db,
                                const bf16* dout, const bf16* inp, const bf16* w, const float* mean,
                                const float* rstd, int N, int C, int rows_per_block) {
    constexpr int NPART = RMS ? 1 : 2;
    DYNAMIC_SMEM(smem_raw); /* [LN_WARPS][NPART][NCH][2][32] float4 */
    float4* acc = reinterpret_cast<float4*>(smem_raw);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nch8 = C / 8; /* = 32 * NCH */
#pragma unroll
    for (int a = 0; a < NPART; a++)
#pragma unroll
        for (int i = 0; i < NCH; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) acc[ln_acc_index<NCH, NPART>(warp, a, i, h, lane)] = make_float4(0.f, 0.f, 0.f, 0.f);
    uint4 wp[NCH];
#pragma unroll
    for (int i = 0; i < NCH; i++) wp[i] = ldu4<true>(w, (lane + 32 * i) * 8, C);
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = min(N, r0 + rows_per_block);
    LnBwdRow<NCH, true, RMS> ra, rb;
    int row = r0 + warp;
    if (row < r1) ra.template load<true, false>(inp, dout, dinp, mean, rstd, row, lane, nch8, C);
    /* the block's mean / rstd in shared memory, after the accumulators (saves
     * two registers per row buffer and two loads per row) */
    float* sms = reinterpret_cast<float*>(acc + LN_WARPS * NPART * NCH * 64);
    for (int t = threadIdx.x; t < r1 - r0; t += blockDim.x) {
        sms[2 * t] = RMS ? 0.0f : mean[r0 + t];
        sms[2 * t + 1] = rstd[r0 + t];
    }
    __syncthreads();
    for (; row < r1; row += 2 * LN_WARPS) {
        const int row_b = row + LN_WARPS, row_c = row_b + LN_WARPS;
        if (row_b < r1) rb.template load<true, false>(inp, dout, dinp, mean, rstd, row_b, lane, nch8, C);
        ln_bwd3_row<NCH, RMS>(ra, sms[2 * (row - r0)], sms[2 * (row - r0) + 1], wp, acc, warp, lane,
                              dinp + (size_t)row * C, C);
        if (row_b >= r1) break;
        if (row_c < r1) ra.template load<true, false>(inp, dout, dinp, mean, rstd, row_c, lane, nch8, C);
        ln_bwd3_row<NCH, RMS>(rb, sms[2 * (row_b - r0)], sms[2 * (row_b - r0) + 1], wp, acc, warp, lane,
                              dinp + (size_t)row_b * C, C);
    }
    __syncthreads();
    const float* accf = reinterpret_cast<const float*>(smem_raw);
    float* pb = partial + (size_t)blockIdx.x * NPART * C;
    for (int c = threadIdx.x; c < NPART * C; c += blockDim.x) {
        const int a = c / C, cc = c - a * C, ch = cc >> 3, k = cc & 7;
        float t = 0.0f;
#pragma unroll
        for (int wi = 0; wi < LN_WARPS; wi++)
            t += accf[ln_acc_index<NCH, NPART>(wi, a, ch >> 5, k >> 2, ch & 31) * 4 + (k & 3)];
        pb[c] = t;
    }
    colsum_tail<6>(partial, gpart, counters, blockIdx.x, gridDim.x, NPART * C, (size_t)NPART * C,
                [&](int c) { return c < C ? dw + c : db + (c - C); });
}

#endif /* OPS_LAYERNORM_VARIANTS_CUH */
