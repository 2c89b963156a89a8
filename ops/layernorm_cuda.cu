/*
 * ops/layernorm_cuda.cu - layernorm_forward / layernorm_backward of
 * ops/ops.h (eps 1e-5), one warp per row with the row held in registers.
 *
 * Forward: two-pass mean and variance (as the CPU reference: no
 * cancellation), writes out (bf16) and the fp32 mean / rstd the backward
 * reuses. Backward: dinp ACCUMULATES (the one activation gradient of ops.h
 * that does); dw / db accumulate in fp32 through a fixed-order reduction:
 * registers over a warp's rows, warps in warp order in shared memory, block
 * partials to scratch, then colsum_finish (bias_cuda.cu) adds the blocks in
 * block order. The number of blocks is a function of N only, so the result is
 * bit-reproducible.
 *
 * C is a template parameter in chunks of 256 columns (NCH = 1..LN_MAX_NCH),
 * so the row lives in registers; a larger C is a clear fatal error.
 */
#include <math.h>

#include "ops/cuda_common.cuh"

/* ------------------------------------------------------------------------ */
/* layernorm (eps 1e-5): one warp per row. Lane l owns chunks l, l+32, ... of 8
 * columns; NCH = chunks per lane is a template parameter so the row lives in
 * registers (arrays indexed by unrolled constants only). C <= 32*8*LN_MAX_NCH. */
#define LN_MAX_NCH 8   /* C up to 2048 (GPT-2 XL has 1600) */
#define LN_WARPS 8     /* rows in flight per block */

template <int NCH, bool VEC>
__global__ void __launch_bounds__(LN_WARPS * 32)
layernorm_forward_kernel(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N, int C) {
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
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) x[i][k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 8; k++) sum += x[i][k];
    }
    const float m = warp_sum(sum) / C;
    /* two-pass variance (as the CPU reference): no cancellation */
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
    const float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    bf16* o_row = out + (size_t)row * C;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int ch = lane + 32 * i;
        if (ch >= nch8) continue;
        float wv[8], bv[8], o[8];
        ld8<VEC>(wv, w, ch * 8, C);
        ld8<VEC>(bv, b, ch * 8, C);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = (x[i][k] - m) * s * wv[k] + bv[k];
        st8<VEC>(o_row, ch * 8, C, o);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

/* Backward. Block = LN_WARPS warps over a contiguous chunk of rows; each warp
 * takes rows warp, warp+8, ... of the chunk. dinp is row-local and
 * ACCUMULATES: dx += rstd * (g - mean(g) - xhat * mean(g*xhat)), g = w*dout.
 * dw, db: each lane accumulates its columns over the warp's rows in
 * registers; the warps of the block are then added in warp order in shared
 * memory, and the block's sums go to partial[block][0..C) (dw) and
 * [C..2C) (db). colsum_finish adds the blocks in block order. */
template <int NCH, bool VEC>
__global__ void __launch_bounds__(LN_WARPS * 32)
layernorm_backward_kernel(bf16* dinp, float* partial, const bf16* dout, const bf16* inp, const bf16* w,
                          const float* mean, const float* rstd, int N, int C, int rows_per_block) {
    __shared__ float sred[2 * NCH * 256];
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
        const float m = mean[row], s = rstd[row];
        /* pass 1: the two row means */
        float gsum = 0.0f, gxsum = 0.0f;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            if (ch >= nch8) continue;
            float xv[8], dv[8], wv[8];
            ld8<VEC>(xv, x_row, ch * 8, C);
            ld8<VEC>(dv, d_row, ch * 8, C);
            ld8<VEC>(wv, w, ch * 8, C);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float g = wv[k] * dv[k];
                gsum += g;
                gxsum += g * (xv[k] - m) * s; /* padded lanes: g = 0 */
            }
        }
        const float gmean = warp_sum(gsum) / C;
        const float gxmean = warp_sum(gxsum) / C;
        /* pass 2 (the row is still in L1): dinp and the parameter partials */
        bf16* di_row = dinp + (size_t)row * C;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            if (ch >= nch8) continue;
            float xv[8], dv[8], wv[8], di[8];
            ld8<VEC>(xv, x_row, ch * 8, C);
            ld8<VEC>(dv, d_row, ch * 8, C);
            ld8<VEC>(wv, w, ch * 8, C);
            ld8<VEC>(di, di_row, ch * 8, C);
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
                        sred[C + c] = (wi == 0 ? 0.0f : sred[C + c]) + dbacc[i][k];
                    }
                }
            }
        }
        __syncthreads();
    }
    float* pb = partial + (size_t)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) pb[c] = sred[c];
}

template <int NCH>
static void layernorm_launch(bool vec, floatX* out, float* mean, float* rstd, const floatX* inp,
                             const floatX* w, const floatX* b, int N, int C) {
    const unsigned grid = ceil_div_u(N, LN_WARPS);
    if (vec)
        layernorm_forward_kernel<NCH, true><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)out, mean, rstd, (const bf16*)inp, (const bf16*)w, (const bf16*)b, N, C);
    else
        layernorm_forward_kernel<NCH, false><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)out, mean, rstd, (const bf16*)inp, (const bf16*)w, (const bf16*)b, N, C);
    CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}

template <int NCH>
static void layernorm_bwd_launch(bool vec, unsigned grid, int rpb, floatX* dinp, float* partial,
                                 const floatX* dout, const floatX* inp, const floatX* w,
                                 const float* mean, const float* rstd, int N, int C) {
    if (vec)
        layernorm_backward_kernel<NCH, true><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)dinp, partial, (const bf16*)dout, (const bf16*)inp, (const bf16*)w, mean, rstd, N, C, rpb);
    else
        layernorm_backward_kernel<NCH, false><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)dinp, partial, (const bf16*)dout, (const bf16*)inp, (const bf16*)w, mean, rstd, N, C, rpb);
    CUDA_CHECK_LAUNCH("layernorm_backward_kernel");
}

static int ln_nch(int C) {
    int nch = (int)ceil_div_u(ceil_div_u(C, 8), 32);
    if (nch < 1 || nch > LN_MAX_NCH)
        FATAL("layernorm: C = %d is outside the supported 1..%d (raise LN_MAX_NCH in %s)", C,
              32 * 8 * LN_MAX_NCH, __FILE__);
    return nch;
}

void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* w, const floatX* b, int N, int C) {
    if (N <= 0) return;
    const int nch = ln_nch(C);
    const bool vec = rows_vec_ok(C) && is_aligned16(out) && is_aligned16(inp) && is_aligned16(w) && is_aligned16(b);
    switch (nch) {
        case 1: layernorm_launch<1>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 2: layernorm_launch<2>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 3: layernorm_launch<3>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 4: layernorm_launch<4>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 5: layernorm_launch<5>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 6: layernorm_launch<6>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 7: layernorm_launch<7>(vec, out, mean, rstd, inp, w, b, N, C); break;
        default: layernorm_launch<8>(vec, out, mean, rstd, inp, w, b, N, C); break;
    }
}

#define LN_BWD_MAX_BLOCKS 512 /* fixed, not per-device: the reduction order depends on shapes only */

void layernorm_backward(floatX* dinp, float* dw, float* db, const floatX* dout, const floatX* inp,
                        const floatX* w, const float* mean, const float* rstd, int N, int C) {
    if (N <= 0) return;
    const int nch = ln_nch(C);
    const bool vec = rows_vec_ok(C) && is_aligned16(dinp) && is_aligned16(dout) && is_aligned16(inp) && is_aligned16(w);
    int rpb = (int)ceil_div_u(N, LN_BWD_MAX_BLOCKS);
    if (rpb < LN_WARPS) rpb = LN_WARPS;
    const unsigned grid = ceil_div_u(N, rpb);
    float* partial = (float*)cuda_scratch(SCRATCH_LN_PARTIAL, (size_t)grid * 2 * C * sizeof(float));
    switch (nch) {
        case 1: layernorm_bwd_launch<1>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 2: layernorm_bwd_launch<2>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 3: layernorm_bwd_launch<3>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 4: layernorm_bwd_launch<4>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 5: layernorm_bwd_launch<5>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 6: layernorm_bwd_launch<6>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 7: layernorm_bwd_launch<7>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        default: layernorm_bwd_launch<8>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
    }
    colsum_finish(dw, partial, (int)grid, C, (size_t)2 * C);
    colsum_finish(db, partial + C, (int)grid, C, (size_t)2 * C);
}
