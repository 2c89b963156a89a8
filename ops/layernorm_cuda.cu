/*
 * ops/layernorm_cuda.cu - the row norms of ops/ops.h: layernorm_forward /
 * layernorm_backward (GPT-2, eps 1e-5), rmsnorm_forward / rmsnorm_backward
 * (Qwen2) and the fused residual_layernorm_forward: which kernel runs for
 * which shape, and their launches. The kernels are in
 * ops/layernorm_kernels.cuh, whose header says how they work.
 *
 * RMSNorm is layernorm without the mean and the bias: xhat = x * rstd with
 * rstd = 1 / sqrt(mean(x^2) + eps), out = xhat * w, and in the backward
 * dx += (w dy - xhat mean(w dy xhat)) rstd (layernorm's formula with the
 * mean(w dy) term gone). So both run the same kernels, with a template flag
 * RMS that removes the mean, the bias and db at compile time.
 *
 * Forward: two-pass mean and variance (as the CPU reference: no
 * cancellation), writes out (bf16) and the fp32 mean / rstd the backward
 * reuses. Backward: dinp ACCUMULATES (the two activation gradients of ops.h
 * that do: a norm's input is the residual stream); dw / db accumulate in
 * fp32 through a fixed-order reduction (warp rows in order, warps in order,
 * blocks in a fixed order over a grid that depends on N only), so the result
 * is bit-reproducible.
 *
 * residual_layernorm_forward (the fused op of ops.h) is the forward with
 * RES = true: it first forms the row as x + (y + bias), rounds it to bf16
 * and stores it (the residual stream), then normalises those stored values,
 * exactly what layernorm_forward would read back. One pass reads x and y and
 * writes res and out: 4 row transfers instead of the 7 of bias_forward +
 * residual_forward + layernorm_forward.
 *
 * Which kernel: C <= 1024 runs the register-resident kernels (the backward's
 * unguarded one when C is whole 256-column chunks with 16-byte accesses,
 * GPT-2's 768; the guarded one otherwise, e.g. Qwen2-0.5B's 896), wider rows
 * up to 32 * 8 * LN_MAX_NCH = 2048 the one-row-per-warp kernels, and a larger
 * C is a clear fatal error.
 */
#include <math.h>

#include <type_traits>

#include "ops/cuda_common.cuh"
#include "ops/layernorm_kernels.cuh"

/* The residual inputs of RES (res, y, ybias; NULL otherwise). */
struct LnRes {
    floatX* res;
    const floatX *y, *ybias;
};

/* C <= 1024: one wave of persistent warps with the rows spread evenly (each
 * warp takes rows gw, gw + W, ...; W = warps launched, so no warp has more
 * than one row over another). Rows are independent in the forward, so the
 * grid may follow the device. */
template <int NCH, bool VEC, bool RMS, bool RES>
static void layernorm_forward_launch(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                                     const floatX* b, int N, int C, float eps, LnRes r) {
    auto kernel = layernorm_forward_kernel<NCH, VEC, RMS, RES>;
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
    CUDA_CHECK_LAUNCH(RES ? "layernorm_forward_kernel<RES>"
                          : RMS ? "layernorm_forward_kernel<RMS>" : "layernorm_forward_kernel");
}

/* C > 1024: one row per warp */
template <int NCH, bool RMS, bool RES>
static void layernorm_forward_wide_launch(bool vec, floatX* out, float* mean, float* rstd, const floatX* inp,
                                          const floatX* w, const floatX* b, int N, int C, float eps, LnRes r) {
    const unsigned grid = ceil_div_u(N, LN_WARPS);
    if (vec)
        layernorm_forward_wide_kernel<NCH, true, RMS, RES><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)out, mean, rstd, (const bf16*)inp, (const bf16*)w, (const bf16*)b, N, C, eps, (bf16*)r.res,
            (const bf16*)r.y, (const bf16*)r.ybias);
    else
        layernorm_forward_wide_kernel<NCH, false, RMS, RES><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)out, mean, rstd, (const bf16*)inp, (const bf16*)w, (const bf16*)b, N, C, eps, (bf16*)r.res,
            (const bf16*)r.y, (const bf16*)r.ybias);
    CUDA_CHECK_LAUNCH(RES ? "layernorm_forward_wide_kernel<RES>"
                          : RMS ? "layernorm_forward_wide_kernel<RMS>" : "layernorm_forward_wide_kernel");
}

/* Fixed, not per-device: the reduction order depends on shapes only. 256
 * blocks of 8 warps are one wave on an H200 at C <= 768 (2 blocks per SM of
 * its 132), and fewer blocks mean fewer partial rows to add. */
#define LN_BWD_MAX_BLOCKS 256

static_assert(LN_BWD_MAX_BLOCKS <= COLSUM_MAX_PARTS, "colsum_deferred adds at most COLSUM_MAX_PARTS partial rows");

/* The column sums the last C <= 1024 backward launch left (its partial rows
 * of dw, db, ds): the next such launch adds them at its start, or
 * norm_backward_finish does (ops/colsum_deferred.cuh says why). The rows sit
 * in one of two scratch slots and each launch writes the other, so a launch
 * never overwrites the rows it is adding. */
static ColsumPending g_pending = {};
static int g_pending_slot = SCRATCH_LN_PARTIAL;

/* The grid of the C <= 1024 backward kernels, a function of N only: blocks
 * of whole warps' worth of rows, at most LN_BWD_MAX_BLOCKS; where they write
 * their partial rows, and the sums they add first (the previous launch's).
 * Records this launch's rows as the pending ones. */
struct LnBwdGrid {
    int rpb, grid;
    float* partial;
    ColsumPending prev;
};
static LnBwdGrid ln_bwd_grid(int N, int C, int npart, float* dw, float* db, float* ds) {
    LnBwdGrid g;
    g.rpb = (int)ceil_div_u(N, LN_BWD_MAX_BLOCKS);
    g.rpb = (g.rpb + LN_WARPS - 1) / LN_WARPS * LN_WARPS;
    g.grid = (int)ceil_div_u(N, g.rpb);
    const int slot = g_pending.partial && g_pending_slot == SCRATCH_LN_PARTIAL ? SCRATCH_LN_PARTIAL2 : SCRATCH_LN_PARTIAL;
    g.partial = (float*)cuda_scratch(slot, (size_t)g.grid * npart * C * sizeof(float));
    g.prev = g_pending;
    g_pending = ColsumPending{g.partial, {dw, db, ds}, g.grid, C, npart * C};
    g_pending_slot = slot;
    return g;
}

void norm_backward_finish(void) {
    if (!g_pending.partial) return;
    const int units = g_pending.C % 2 == 0 ? g_pending.ncols / 2 : g_pending.ncols; /* colsum_deferred's */
    ln_colsums_kernel<<<ceil_div_u(units, 2 * LN_WARPS), LN_WARPS * 32, 0, cuda_stream()>>>(g_pending);
    CUDA_CHECK_LAUNCH("ln_colsums_kernel");
    g_pending = ColsumPending{};
}

/* the forward of a step must not start with the last backward's sums still pending */
static void ln_check_finished(const char* who) {
    if (g_pending.partial)
        FATAL("%s: the column sums (dw, db) of the last layernorm_backward / rmsnorm_backward are still pending: "
              "call norm_backward_finish() at the end of the backward, before its gradients are read (ops.h)",
              who);
}

/* raise kernel's dynamic shared memory limit to smem if `raised` (the
 * launcher's record of it) is below */
template <typename Kernel>
static void ln_smem_limit(Kernel kernel, size_t smem, size_t& raised) {
    if (smem > raised) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        raised = smem;
    }
}

/* C = 256 NCH with 16-byte accesses */
template <int NCH, bool RMS, bool DSUM>
static void layernorm_backward_launch(floatX* dinp, float* dw, float* db, float* ds, const floatX* dout,
                                      const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N,
                                      int C) {
    constexpr int NPART = ln_nparts(RMS, DSUM);
    const LnBwdGrid g = ln_bwd_grid(N, C, NPART, dw, db, ds);
    auto kernel = layernorm_backward_kernel<NCH, RMS, DSUM>;
    const size_t smem = ((size_t)LN_WARPS * NPART * NCH * 256 + 2 * (size_t)g.rpb) * sizeof(float);
    static size_t raised = 0; /* rpb, and so smem, grows with N */
    ln_smem_limit(kernel, smem, raised);
    kernel<<<g.grid, LN_WARPS * 32, smem, cuda_stream()>>>((bf16*)dinp, g.partial, g.prev, (const bf16*)dout,
                                                           (const bf16*)inp, (const bf16*)w, mean, rstd, N, C, g.rpb);
    CUDA_CHECK_LAUNCH(RMS ? "layernorm_backward_kernel<RMS>" : "layernorm_backward_kernel");
}

/* any other C <= 1024 */
template <int NCH, bool VEC, bool RMS, bool DSUM>
static void layernorm_backward_guarded_launch(floatX* dinp, float* dw, float* db, float* ds, const floatX* dout,
                                              const floatX* inp, const floatX* w, const float* mean,
                                              const float* rstd, int N, int C) {
    constexpr int NPART = ln_nparts(RMS, DSUM);
    const LnBwdGrid g = ln_bwd_grid(N, C, NPART, dw, db, ds);
    auto kernel = layernorm_backward_guarded_kernel<NCH, VEC, RMS, DSUM>;
    const size_t smem = (size_t)LN_WARPS * NPART * NCH * 256 * sizeof(float);
    static size_t raised = 0;
    ln_smem_limit(kernel, smem, raised);
    kernel<<<g.grid, LN_WARPS * 32, smem, cuda_stream()>>>((bf16*)dinp, g.partial, g.prev, (const bf16*)dout,
                                                           (const bf16*)inp, (const bf16*)w, mean, rstd, N, C, g.rpb);
    CUDA_CHECK_LAUNCH(RMS ? "layernorm_backward_guarded_kernel<RMS>" : "layernorm_backward_guarded_kernel");
}

/* C > 1024: the block partials to scratch, then colsum_finish adds them
 * (after any sums still pending, so that dw's additions keep their order) */
template <int NCH, bool RMS>
static void layernorm_backward_wide_launch(bool vec, floatX* dinp, float* dw, float* db, const floatX* dout,
                                           const floatX* inp, const floatX* w, const float* mean, const float* rstd,
                                           int N, int C) {
    int rpb = (int)ceil_div_u(N, LN_BWD_MAX_BLOCKS);
    if (rpb < LN_WARPS) rpb = LN_WARPS;
    const unsigned grid = ceil_div_u(N, rpb);
    norm_backward_finish();
    const int npart = RMS ? 1 : 2; /* dw (and db) per block */
    float* partial = (float*)cuda_scratch(SCRATCH_LN_PARTIAL, (size_t)grid * npart * C * sizeof(float));
    if (vec)
        layernorm_backward_wide_kernel<NCH, true, RMS><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)dinp, partial, (const bf16*)dout, (const bf16*)inp, (const bf16*)w, mean, rstd, N, C, rpb);
    else
        layernorm_backward_wide_kernel<NCH, false, RMS><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)dinp, partial, (const bf16*)dout, (const bf16*)inp, (const bf16*)w, mean, rstd, N, C, rpb);
    CUDA_CHECK_LAUNCH(RMS ? "layernorm_backward_wide_kernel<RMS>" : "layernorm_backward_wide_kernel");
    colsum_finish(dw, partial, (int)grid, C, (size_t)npart * C);
    if (!RMS) colsum_finish(db, partial + C, (int)grid, C, (size_t)npart * C);
}

static int ln_nch(const char* who, int C) {
    int nch = (int)ceil_div_u(ceil_div_u(C, 8), 32);
    if (nch < 1 || nch > LN_MAX_NCH)
        FATAL("%s: C = %d is outside the supported 1..%d (raise LN_MAX_NCH in ops/layernorm_kernels.cuh)", who, C,
              32 * 8 * LN_MAX_NCH);
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

/* b and mean are NULL for RMS; r's pointers are those of RES (NULL otherwise) */
template <bool RMS, bool RES>
static void norm_forward(const char* who, floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                         const floatX* b, int N, int C, float eps, LnRes r) {
    ln_check_finished(who);
    if (N <= 0) return;
    const int nch = ln_nch(who, C);
    const bool vec = rows_vec_ok(C) && is_aligned16(out) && is_aligned16(inp) && is_aligned16(w) &&
                     (RMS || is_aligned16(b)) &&
                     (!RES || (is_aligned16(r.res) && is_aligned16(r.y) && is_aligned16(r.ybias)));
    ln_with_nch<1>(nch, [&](auto k) {
        constexpr int K = decltype(k)::value;
        if constexpr (K <= LN_NARROW_NCH) {
            if (vec) layernorm_forward_launch<K, true, RMS, RES>(out, mean, rstd, inp, w, b, N, C, eps, r);
            else layernorm_forward_launch<K, false, RMS, RES>(out, mean, rstd, inp, w, b, N, C, eps, r);
        } else {
            layernorm_forward_wide_launch<K, RMS, RES>(vec, out, mean, rstd, inp, w, b, N, C, eps, r);
        }
    });
}

/* the narrow kernels with DSUM: ds += the column sums of the new dinp */
template <int K, bool RMS, bool DSUM>
static void norm_backward_narrow(bool vec, floatX* dinp, float* dw, float* db, float* ds, const floatX* dout,
                                 const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N,
                                 int C) {
    if (vec && C == K * 256)
        layernorm_backward_launch<K, RMS, DSUM>(dinp, dw, db, ds, dout, inp, w, mean, rstd, N, C);
    else if (vec)
        layernorm_backward_guarded_launch<K, true, RMS, DSUM>(dinp, dw, db, ds, dout, inp, w, mean, rstd, N, C);
    else
        layernorm_backward_guarded_launch<K, false, RMS, DSUM>(dinp, dw, db, ds, dout, inp, w, mean, rstd, N, C);
}

/* db and mean are NULL for RMS; ds (the column sums of the new dinp) may be
 * NULL, and is for RMS */
template <bool RMS>
static void norm_backward(const char* who, floatX* dinp, float* dw, float* db, float* ds, const floatX* dout,
                          const floatX* inp, const floatX* w, const float* mean, const float* rstd, int N, int C) {
    if (N <= 0) return;
    const int nch = ln_nch(who, C);
    const bool vec = rows_vec_ok(C) && is_aligned16(dinp) && is_aligned16(dout) && is_aligned16(inp) && is_aligned16(w);
    ln_with_nch<1>(nch, [&](auto k) {
        constexpr int K = decltype(k)::value;
        if constexpr (K <= LN_NARROW_NCH) {
            if (!RMS && ds) norm_backward_narrow<K, RMS, true>(vec, dinp, dw, db, ds, dout, inp, w, mean, rstd, N, C);
            else norm_backward_narrow<K, RMS, false>(vec, dinp, dw, db, nullptr, dout, inp, w, mean, rstd, N, C);
        } else {
            layernorm_backward_wide_launch<K, RMS>(vec, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
            if (ds) bias_backward(ds, dinp, N, C); /* rows this wide: the separate column sum */
        }
    });
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

void layernorm_backward(floatX* dinp, float* dw, float* db, float* dsum, const floatX* dout, const floatX* inp,
                        const floatX* w, const float* mean, const float* rstd, int N, int C) {
    norm_backward<false>("layernorm", dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C);
}

void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C, float eps) {
    norm_forward<true, false>("rmsnorm", out, nullptr, rstd, inp, w, nullptr, N, C, eps, LnRes{});
}

void rmsnorm_backward(floatX* dinp, float* dw, const floatX* dout, const floatX* inp, const floatX* w,
                      const float* rstd, int N, int C) {
    norm_backward<true>("rmsnorm", dinp, dw, nullptr, nullptr, dout, inp, w, nullptr, rstd, N, C);
}
