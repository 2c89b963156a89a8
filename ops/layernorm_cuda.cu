/*
 * ops/layernorm_cuda.cu - the row norms of ops/ops.h: layernorm_forward /
 * layernorm_backward (GPT-2, eps 1e-5) and rmsnorm_forward /
 * rmsnorm_backward (Qwen2), one warp per row with the row held in registers.
 *
 * RMSNorm is layernorm without the mean and the bias: xhat = x * rstd with
 * rstd = 1 / sqrt(mean(x^2) + eps), out = xhat * w, and in the backward
 * dx += (w dy - xhat mean(w dy xhat)) rstd (layernorm's formula with the
 * mean(w dy) term gone). So both run the same kernels, with a template flag
 * RMS that removes the mean, the bias and db at compile time: layernorm's
 * code and bits are what they were without it.
 *
 * Forward: two-pass mean and variance (as the CPU reference: no
 * cancellation), writes out (bf16) and the fp32 mean / rstd the backward
 * reuses. Backward: dinp ACCUMULATES (the two activation gradients of ops.h
 * that do: a norm's input is the residual stream); dw / db accumulate in
 * fp32 through a fixed-order reduction:
 * registers over a warp's rows, warps in warp order in shared memory, block
 * partials to scratch, then colsum_finish (bias_cuda.cu) adds the blocks in a
 * fixed order. The number of blocks is a function of N only, so the result is
 * bit-reproducible.
 *
 * residual_layernorm_forward (the fused op of ops.h) is the forward kernel
 * with RES = true: it first forms the row as x + (y + bias), rounds it to
 * bf16 and stores it (the residual stream), then normalises those stored
 * values, exactly what layernorm_forward would read back. One pass reads x
 * and y and writes res and out: 4 row transfers instead of the 7 of
 * bias_forward + residual_forward + layernorm_forward.
 *
 * C is a template parameter in chunks of 256 columns (NCH = 1..LN_MAX_NCH),
 * so the row lives in registers; a larger C is a clear fatal error.
 *
 * Variants (ops/memops.cuh; the kernels in ops/layernorm_variants.cuh, the
 * launchers here): TPFP8_LN_FWD_VARIANT = 1 / 2 and TPFP8_LN_BWD_VARIANT =
 * 1 / 2 / 3 run other kernels for C <= 1024 (variant 3: C a multiple of 256,
 * else variant 2), with the backward's block partials added inside the same
 * kernel (colsum_tail) instead of by colsum_finish; 0, the default, is the
 * kernels of this file.
 */
#include <math.h>

#include <type_traits>

#include "ops/cuda_common.cuh"
#include "ops/memops.cuh"

/* ------------------------------------------------------------------------ */
/* One warp per row. Lane l owns chunks l, l+32, ... of 8 columns; NCH =
 * chunks per lane is a template parameter so the row lives in registers
 * (arrays indexed by unrolled constants only). C <= 32*8*LN_MAX_NCH. RMS:
 * mean and b are unused (may be NULL), the "variance" is mean(x^2). */
#define LN_MAX_NCH 8   /* C up to 2048 (GPT-2 XL has 1600) */
#define LN_WARPS 8     /* rows in flight per block */

template <int NCH, bool VEC, bool RMS, bool RES>
__global__ void __launch_bounds__(LN_WARPS * 32)
layernorm_forward_kernel(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N, int C,
                         float eps, bf16* res, const bf16* y, const bf16* ybias) {
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
                /* res = x + (y + bias), the CPU's order; what is normalised is
                 * the bf16 value stored, which the backward reads back. Each
                 * lane reads its chunk before writing it: res may alias x or y. */
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
            for (int k = 0; k < 8; k++) o[k] = x[i][k] * s * wv[k];   /* the CPU's order */
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

/* Backward. Block = LN_WARPS warps over a contiguous chunk of rows; each warp
 * takes rows warp, warp+8, ... of the chunk. dinp is row-local and
 * ACCUMULATES: dx += rstd * (g - mean(g) - xhat * mean(g*xhat)), g = w*dout
 * (RMS: mean 0 and no mean(g) term).
 * A row's x, dout and dinp are loaded once, all at the row's start (one
 * memory latency per row, not one per pass), and held packed as bf16 (4
 * registers per 8 columns) between the two passes.
 * dw, db: each lane accumulates its columns over the warp's rows in
 * registers; the warps of the block are then added in warp order in shared
 * memory, and the block's sums go to partial[block][0..C) (dw) and
 * [C..2C) (db; not for RMS, whose partials are C wide).
 * colsum_finish adds the blocks in a fixed order. */
template <int NCH, bool VEC, bool RMS>
__global__ void __launch_bounds__(LN_WARPS * 32)
layernorm_backward_kernel(bf16* dinp, float* partial, const bf16* dout, const bf16* inp, const bf16* w,
                          const float* mean, const float* rstd, int N, int C, int rows_per_block) {
    __shared__ float sred[(RMS ? 1 : 2) * NCH * 256];   /* dw (and db) of the block's columns */
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
        /* the row's x, dout and dinp, all loads issued before any is used */
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
                gxsum += g * (xv[k] - m) * s; /* padded lanes: g = 0 */
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

/* The residual inputs of RES (res, y, ybias; NULL otherwise). */
struct LnRes {
    floatX* res;
    const floatX *y, *ybias;
};

#include "ops/layernorm_variants.cuh" /* the kernels of variants 1-3 */

template <int NCH, bool RMS, bool RES>
static void layernorm_launch(bool vec, floatX* out, float* mean, float* rstd, const floatX* inp,
                             const floatX* w, const floatX* b, int N, int C, float eps, LnRes r) {
    const unsigned grid = ceil_div_u(N, LN_WARPS);
    if (vec)
        layernorm_forward_kernel<NCH, true, RMS, RES><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)out, mean, rstd, (const bf16*)inp, (const bf16*)w, (const bf16*)b, N, C, eps, (bf16*)r.res,
            (const bf16*)r.y, (const bf16*)r.ybias);
    else
        layernorm_forward_kernel<NCH, false, RMS, RES><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)out, mean, rstd, (const bf16*)inp, (const bf16*)w, (const bf16*)b, N, C, eps, (bf16*)r.res,
            (const bf16*)r.y, (const bf16*)r.ybias);
    CUDA_CHECK_LAUNCH(RES ? "layernorm_forward_kernel<RES>"
                          : RMS ? "layernorm_forward_kernel<RMS>" : "layernorm_forward_kernel");
}

/* Variants 1 / 2 of the forward: one wave of persistent warps with the rows
 * spread evenly (each warp takes rows gw, gw + W, ...; W = warps launched, so
 * no warp has more than one row over another). Rows are independent in the
 * forward, so the grid may follow the device. */
template <int NCH, bool VEC, bool RMS, bool RES, bool PREF>
static void layernorm_rows_launch(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                                  const floatX* b, int N, int C, float eps, LnRes r) {
    auto kernel = layernorm_forward_rows_kernel<NCH, VEC, RMS, RES, PREF>;
    static int per_sm = 0;
    if (per_sm == 0) {
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, LN_WARPS * 32, 0));
        if (per_sm < 1) per_sm = 1;
    }
    const size_t slots = (size_t)per_sm * cuda_num_sms() * LN_WARPS; /* warps of one wave */
    const size_t rows_per_warp = (N + slots - 1) / slots;
    const unsigned grid = ceil_div_u(ceil_div_u(N, rows_per_warp), LN_WARPS);
    kernel<<<grid, LN_WARPS * 32, 0, cuda_stream()>>>((bf16*)out, mean, rstd, (const bf16*)inp, (const bf16*)w,
                                                      (const bf16*)b, N, C, eps, (bf16*)r.res, (const bf16*)r.y,
                                                      (const bf16*)r.ybias);
    CUDA_CHECK_LAUNCH("layernorm_forward_rows_kernel");
}

template <int NCH, bool RMS>
static void layernorm_bwd_launch(bool vec, unsigned grid, int rpb, floatX* dinp, float* partial,
                                 const floatX* dout, const floatX* inp, const floatX* w,
                                 const float* mean, const float* rstd, int N, int C) {
    if (vec)
        layernorm_backward_kernel<NCH, true, RMS><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)dinp, partial, (const bf16*)dout, (const bf16*)inp, (const bf16*)w, mean, rstd, N, C, rpb);
    else
        layernorm_backward_kernel<NCH, false, RMS><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)dinp, partial, (const bf16*)dout, (const bf16*)inp, (const bf16*)w, mean, rstd, N, C, rpb);
    CUDA_CHECK_LAUNCH(RMS ? "layernorm_backward_kernel<RMS>" : "layernorm_backward_kernel");
}

static int ln_nch(const char* who, int C) {
    int nch = (int)ceil_div_u(ceil_div_u(C, 8), 32);
    if (nch < 1 || nch > LN_MAX_NCH)
        FATAL("%s: C = %d is outside the supported 1..%d (raise LN_MAX_NCH in %s)", who, C,
              32 * 8 * LN_MAX_NCH, __FILE__);
    return nch;
}

/* f(std::integral_constant<int, nch>()): the NCH template argument from its
 * value, by recursion over 1..LN_MAX_NCH (ln_nch has checked the range) */
template <int K, typename F>
static void ln_with_nch(int nch, F&& f) {
    if constexpr (K < LN_MAX_NCH) {
        if (nch > K) {
            ln_with_nch<K + 1>(nch, f);
            return;
        }
    }
    f(std::integral_constant<int, K>());
}

#define LN_FWD_VARIANTS 3

/* b and mean are NULL for RMS; r's pointers are those of RES (NULL otherwise) */
template <bool RMS, bool RES>
static void norm_forward(const char* who, floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                         const floatX* b, int N, int C, float eps, LnRes r) {
    if (N <= 0) return;
    const int nch = ln_nch(who, C);
    const bool vec = rows_vec_ok(C) && is_aligned16(out) && is_aligned16(inp) && is_aligned16(w) &&
                     (RMS || is_aligned16(b)) &&
                     (!RES || (is_aligned16(r.res) && is_aligned16(r.y) && is_aligned16(r.ybias)));
    const int variant = memops_variant("TPFP8_LN_FWD_VARIANT", LN_FWD_VARIANTS);
    ln_with_nch<1>(nch, [&](auto k) {
        constexpr int K = decltype(k)::value;
        if constexpr (K <= LN_VAR_MAX_NCH) {
            if (variant == 1) {
                if (vec) layernorm_rows_launch<K, true, RMS, RES, false>(out, mean, rstd, inp, w, b, N, C, eps, r);
                else layernorm_rows_launch<K, false, RMS, RES, false>(out, mean, rstd, inp, w, b, N, C, eps, r);
                return;
            }
            if (variant == 2) {
                if (vec) layernorm_rows_launch<K, true, RMS, RES, true>(out, mean, rstd, inp, w, b, N, C, eps, r);
                else layernorm_rows_launch<K, false, RMS, RES, true>(out, mean, rstd, inp, w, b, N, C, eps, r);
                return;
            }
        }
        layernorm_launch<K, RMS, RES>(vec, out, mean, rstd, inp, w, b, N, C, eps, r);
    });
}

/* Fixed, not per-device: the reduction order depends on shapes only. 256
 * blocks of 8 warps are one wave on an H200 for C <= 768 (128 registers a
 * thread, 2 blocks per SM; C = 1024 takes 162 and fits 1),
 * and fewer blocks mean fewer partial sums for colsum_finish. */
#define LN_BWD_MAX_BLOCKS 256

/* Variants 1 / 2 of the backward (layernorm_backward_smem_kernel): blocks of
 * whole warps' worth of rows (rows_per_block a multiple of LN_WARPS), at most
 * LN_BWD_SMEM_BLOCKS_1 / _2: one wave on an H200 at C <= 768 (3 and 2 blocks
 * per SM of its 132), a function of N only. */
#define LN_BWD_SMEM_BLOCKS_1 384
#define LN_BWD_SMEM_BLOCKS_2 256

template <int NCH, bool VEC, bool RMS, bool PREF>
static void layernorm_bwd_smem_launch(floatX* dinp, float* dw, float* db, const floatX* dout, const floatX* inp,
                                      const floatX* w, const float* mean, const float* rstd, int N, int C) {
    constexpr int NPART = RMS ? 1 : 2;
    const int maxb = PREF ? LN_BWD_SMEM_BLOCKS_2 : LN_BWD_SMEM_BLOCKS_1;
    int rpb = (int)ceil_div_u(N, maxb);
    rpb = (rpb + LN_WARPS - 1) / LN_WARPS * LN_WARPS;
    const int grid = (int)ceil_div_u(N, rpb), ngroups = colsum_tail_groups(grid);
    const size_t pstride = (size_t)NPART * C;
    float* partial = (float*)cuda_scratch(SCRATCH_LN_PARTIAL, (size_t)(grid + ngroups) * pstride * sizeof(float));
    unsigned* counters = colsum_tail_counters((size_t)ngroups + 1);
    auto kernel = layernorm_backward_smem_kernel<NCH, VEC, RMS, PREF>;
    const size_t smem = (size_t)LN_WARPS * NPART * NCH * 256 * sizeof(float);
    static bool smem_set = false;
    if (!smem_set) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = true;
    }
    kernel<<<grid, LN_WARPS * 32, smem, cuda_stream()>>>((bf16*)dinp, partial, partial + (size_t)grid * pstride,
                                                         counters, dw, db, (const bf16*)dout, (const bf16*)inp,
                                                         (const bf16*)w, mean, rstd, N, C, rpb);
    CUDA_CHECK_LAUNCH("layernorm_backward_smem_kernel");
}

template <int NCH, bool RMS>
static void layernorm_bwd_smem3_launch(floatX* dinp, float* dw, float* db, const floatX* dout, const floatX* inp,
                                       const floatX* w, const float* mean, const float* rstd, int N, int C) {
    constexpr int NPART = RMS ? 1 : 2;
    int rpb = (int)ceil_div_u(N, LN_BWD_SMEM_BLOCKS_2);
    rpb = (rpb + LN_WARPS - 1) / LN_WARPS * LN_WARPS;
    const int grid = (int)ceil_div_u(N, rpb), ngroups = colsum_tail_groups(grid);
    const size_t pstride = (size_t)NPART * C;
    float* partial = (float*)cuda_scratch(SCRATCH_LN_PARTIAL, (size_t)(grid + ngroups) * pstride * sizeof(float));
    unsigned* counters = colsum_tail_counters((size_t)ngroups + 1);
    auto kernel = layernorm_backward_smem3_kernel<NCH, RMS>;
    const size_t smem = ((size_t)LN_WARPS * NPART * NCH * 256 + 2 * (size_t)rpb) * sizeof(float);
    static size_t smem_set = 0; /* the limit raised so far (rpb grows with N) */
    if (smem > smem_set) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = smem;
    }
    kernel<<<grid, LN_WARPS * 32, smem, cuda_stream()>>>((bf16*)dinp, partial, partial + (size_t)grid * pstride,
                                                         counters, dw, db, (const bf16*)dout, (const bf16*)inp,
                                                         (const bf16*)w, mean, rstd, N, C, rpb);
    CUDA_CHECK_LAUNCH("layernorm_backward_smem3_kernel");
}

#define LN_BWD_VARIANTS 4

/* db and mean are NULL for RMS */
template <bool RMS>
static void norm_backward(const char* who, floatX* dinp, float* dw, float* db, const floatX* dout, const floatX* inp,
                          const floatX* w, const float* mean, const float* rstd, int N, int C) {
    if (N <= 0) return;
    const int nch = ln_nch(who, C);
    const bool vec = rows_vec_ok(C) && is_aligned16(dinp) && is_aligned16(dout) && is_aligned16(inp) && is_aligned16(w);
    const int variant = memops_variant("TPFP8_LN_BWD_VARIANT", LN_BWD_VARIANTS);
    if (variant != 0 && nch <= LN_VAR_MAX_NCH) {
        ln_with_nch<1>(nch, [&](auto k) {
            constexpr int K = decltype(k)::value;
            if constexpr (K <= LN_VAR_MAX_NCH) {
                if (variant == 3 && vec && C == K * 256) {
                    layernorm_bwd_smem3_launch<K, RMS>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
                } else if (variant == 1) {
                    if (vec) layernorm_bwd_smem_launch<K, true, RMS, false>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
                    else layernorm_bwd_smem_launch<K, false, RMS, false>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
                } else {
                    if (vec) layernorm_bwd_smem_launch<K, true, RMS, true>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
                    else layernorm_bwd_smem_launch<K, false, RMS, true>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
                }
            }
        });
        return;
    }
    int rpb = (int)ceil_div_u(N, LN_BWD_MAX_BLOCKS);
    if (rpb < LN_WARPS) rpb = LN_WARPS;
    const unsigned grid = ceil_div_u(N, rpb);
    const int npart = RMS ? 1 : 2;   /* dw (and db) per block */
    float* partial = (float*)cuda_scratch(SCRATCH_LN_PARTIAL, (size_t)grid * npart * C * sizeof(float));
    ln_with_nch<1>(nch, [&](auto k) {
        layernorm_bwd_launch<decltype(k)::value, RMS>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C);
    });
    colsum_finish(dw, partial, (int)grid, C, (size_t)npart * C);
    if (!RMS) colsum_finish(db, partial + C, (int)grid, C, (size_t)npart * C);
}

void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* w, const floatX* b, int N, int C) {
    norm_forward<false, false>("layernorm", out, mean, rstd, inp, w, b, N, C, 1e-5f, LnRes{});
}

/* inp is x here: the kernel forms the row from x, y and the bias first (RES) */
void residual_layernorm_forward(floatX* res, floatX* out, float* mean, float* rstd, const floatX* x,
                                const floatX* y, const floatX* bias, const floatX* w, const floatX* b, int N, int C) {
    norm_forward<false, true>("residual_layernorm", out, mean, rstd, x, w, b, N, C, 1e-5f, LnRes{res, y, bias});
}

void layernorm_backward(floatX* dinp, float* dw, float* db, const floatX* dout, const floatX* inp,
                        const floatX* w, const float* mean, const float* rstd, int N, int C) {
    norm_backward<false>("layernorm", dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C, float eps) {
    norm_forward<true, false>("rmsnorm", out, nullptr, rstd, inp, w, nullptr, N, C, eps, LnRes{});
}

void rmsnorm_backward(floatX* dinp, float* dw, const floatX* dout, const floatX* inp, const floatX* w,
                      const float* rstd, int N, int C) {
    norm_backward<true>("rmsnorm", dinp, dw, nullptr, dout, inp, w, nullptr, rstd, N, C);
}
