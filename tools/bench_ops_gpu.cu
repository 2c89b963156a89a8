/*
 * tools/bench_ops_gpu.cu - speed of the CUDA backend on one GPU: a full
 * GPT-2 124M training step (TP = 1) made of ops.h calls in model/gpt.c's
 * order - forward, vocab cross-entropy, backward, grad norm, AdamW - timed
 * end to end (median of --steps) and op by op, next to the two ceilings of
 * the library's METHOD.md measured in the same run (device copy bandwidth,
 * bf16 GEMM rate). The PyTorch reference of the same step is
 * tools/bench_pytorch.py (anchors on the H200: eager 46.7 ms, compiled 35.8 ms with clipping).
 *
 *   build/gpu/bench_ops_gpu [B] [T] [steps] [unfused]   (defaults 16 1024 10)
 *
 * The step calls the fused ops as gpt.c does (residual_layernorm_forward
 * after each row-parallel GEMM, matmul_gelu_forward, gelu_matmul_backward);
 * "unfused" runs the separate ops they replace (bias_forward,
 * residual_forward, layernorm_forward, gelu_forward, gelu_backward), gpt.c's
 * order before the fusion, for the before/after comparison in one session.
 *
 * Weights are random (GPT-2 init scale), tokens random; no communication
 * (the TP exchanges of gpt.c are no-ops at TP = 1). Each op's time is the
 * device time between events recorded around it, summed per op kind over a
 * step (the mean of OP_STEPS steps); "rate" is FLOP/s for matrix ops and
 * bytes moved (each input read once, each output written once) per second
 * for the rest.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common/check.h"
#include "common/cuda_check.h"
#include "ops/encoder_plan.h"
#include "ops/ops.h"
#include "ops/ops_cuda.h"

static cudaStream_t stream() { return (cudaStream_t)ops_cuda_stream(); }

/* ---- random init on the device (hash -> approx. normal) ------------------------------ */
__device__ float hash_normal(uint64_t i, uint64_t seed) {
    uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
    float s = 0.0f;
    for (int k = 0; k < 4; k++) { /* sum of 4 uniforms: bell-shaped, variance 1/3 */
        z ^= z >> 31;
        z *= 0xBF58476D1CE4E5B9ull;
        z ^= z >> 29;
        s += (float)(z >> 40) * (1.0f / 16777216.0f) - 0.5f;
    }
    return s * 1.7320508f; /* unit variance */
}
__global__ void init_kernel(float* master, size_t n, float scale, uint64_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) master[i] = scale * hash_normal(i, seed);
}
static void init_f32(float* p, size_t n, float scale, uint64_t seed) {
    init_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream()>>>(p, n, scale, seed);
    CUDA_CHECK(cudaGetLastError());
}

/* ---- per-op timing -------------------------------------------------------------------- */
struct OpStat {
    int calls = 0;
    double ms = 0, flops = 0, bytes = 0;
};
static std::map<std::string, OpStat> g_stats;
struct Pending {
    std::string name;
    cudaEvent_t a, b;
    double flops, bytes;
};
static std::vector<Pending> g_pending;
static std::vector<cudaEvent_t> g_event_pool;
static size_t g_event_next = 0;
static bool g_timing = false;

static cudaEvent_t next_event() {
    if (g_event_next == g_event_pool.size()) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        g_event_pool.push_back(e);
    }
    return g_event_pool[g_event_next++];
}

/* TIMED(name, flops, bytes, call): events around one op when timing */
#define TIMED(name, fl, by, call)                                           \
    do {                                                                    \
        if (g_timing) {                                                     \
            Pending p_{name, next_event(), next_event(), (fl), (by)};      \
            CUDA_CHECK(cudaEventRecord(p_.a, stream()));                    \
            call;                                                           \
            CUDA_CHECK(cudaEventRecord(p_.b, stream()));                    \
            g_pending.push_back(p_);                                        \
        } else {                                                            \
            call;                                                           \
        }                                                                   \
    } while (0)

#define OP_STEPS 5 /* steps timed op by op; the table shows their mean */

static void collect() {
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    for (auto& p : g_pending) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, p.a, p.b));
        OpStat& s = g_stats[p.name];
        s.calls++;
        s.ms += ms;
        s.flops += p.flops;
        s.bytes += p.bytes;
    }
    g_pending.clear();
    g_event_next = 0;
}

/* ---- the model ---------------------------------------------------------------------------- */
enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, APW, APB, LN2W, LN2B, FCW, FCB, FPW, FPB, LNFW, LNFB, NT };

struct Model {
    int B, T, C, L, NH, hs, V, Vp, N;
    size_t off[NT], size[NT], total;
    floatX* params;
    float *master, *grads, *m, *v;
    int *tok, *tgt, *plan;
    StepScalars* step;
    floatX *x0, *lnf, *logits, *dres, *dln, *dfch, *dfch_gelu, *datty, *dqkv;
    float *lnf_mean, *lnf_rstd, *ce_mx, *ce_stats, *losses;
    struct Layer {
        floatX *ln1, *qkv, *atty, *attproj, *res2, *ln2, *fch, *fch_gelu, *fcproj, *res3;
        float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
    };
    std::vector<Layer> layer;
};

static floatX* W(Model& M, int t, int l = 0) {
    return M.params + M.off[t] + (size_t)l * (M.size[t] / (t == WTE || t == WPE || t == LNFW || t == LNFB ? 1 : M.L));
}
static float* G(Model& M, int t, int l = 0) {
    return M.grads + M.off[t] + (size_t)l * (M.size[t] / (t == WTE || t == WPE || t == LNFW || t == LNFB ? 1 : M.L));
}

static void model_init(Model& M, int B, int T) {
    M.B = B;
    M.T = T;
    M.C = 768;
    M.L = 12;
    M.NH = 12;
    M.hs = 64;
    M.V = 50257;
    M.Vp = 50304;
    M.N = B * T;
    const size_t C = M.C, L = M.L;
    size_t sz[NT] = {M.Vp * C, (size_t)T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
                     L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C};
    M.total = 0;
    for (int t = 0; t < NT; t++) {
        M.off[t] = M.total;
        M.size[t] = sz[t];
        M.total += sz[t];
    }
    M.params = (floatX*)ops_malloc(M.total * 2);
    M.master = (float*)ops_malloc(M.total * 4);
    M.grads = (float*)ops_malloc(M.total * 4);
    M.m = (float*)ops_malloc(M.total * 4);
    M.v = (float*)ops_malloc(M.total * 4);
    for (int t = 0; t < NT; t++) {
        float scale = 0.02f;
        if (t == FPW || t == APW) scale = 0.02f / sqrtf(2.0f * L);
        if (t == LN1W || t == LN2W || t == LNFW) scale = 0.0f; /* set to 1 below */
        if (t == QKVB || t == APB || t == FCB || t == FPB || t == LN1B || t == LN2B || t == LNFB) scale = 0.0f;
        init_f32(M.master + M.off[t], M.size[t], scale, 1000 + t);
        if (t == LN1W || t == LN2W || t == LNFW) {
            std::vector<float> ones(M.size[t], 1.0f);
            ops_from_host(M.master + M.off[t], ones.data(), ones.size() * 4);
        }
    }
    ops_f32_to_X(M.params, M.master, M.total);

    const size_t N = M.N;
    M.tok = (int*)ops_malloc(N * 4);
    M.tgt = (int*)ops_malloc(N * 4);
    std::vector<int> h(N);
    uint64_t s = 12345;
    for (size_t i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (int)((s >> 33) % (uint64_t)M.V);
    }
    ops_from_host(M.tok, h.data(), N * 4);
    ops_from_host(M.tgt, h.data(), N * 4);
    /* encoder_backward's plan, made on the host as the trainer makes it when it stages a batch */
    std::vector<int> plan(ENCODER_PLAN_INTS(M.N, M.Vp));
    encoder_plan(plan.data(), h.data(), M.N, 0, M.Vp);
    M.plan = (int*)ops_malloc(plan.size() * 4);
    ops_from_host(M.plan, plan.data(), plan.size() * 4);
    StepScalars st = {};
    st.lr = 6e-4f;
    st.bc1 = 1.0f - 0.9f;
    st.bc2 = 1.0f - 0.95f;
    M.step = (StepScalars*)ops_malloc(sizeof(StepScalars));
    ops_from_host(M.step, &st, sizeof(st));
    auto X = [&](size_t n) { return (floatX*)ops_malloc(n * 2); };
    auto F = [&](size_t n) { return (float*)ops_malloc(n * 4); };
    M.x0 = X(N * C);
    M.layer.resize(L);
    for (auto& a : M.layer) {
        a.ln1 = X(N * C); a.qkv = X(N * 3 * C); a.atty = X(N * C); a.attproj = X(N * C); a.res2 = X(N * C);
        a.ln2 = X(N * C); a.fch = X(N * 4 * C); a.fch_gelu = X(N * 4 * C); a.fcproj = X(N * C); a.res3 = X(N * C);
        a.ln1_mean = F(N); a.ln1_rstd = F(N); a.ln2_mean = F(N); a.ln2_rstd = F(N); a.lse = F((size_t)B * M.NH * T);
    }
    M.lnf = X(N * C);
    M.logits = X(N * M.Vp);
    M.lnf_mean = F(N); M.lnf_rstd = F(N); M.ce_mx = F(N); M.ce_stats = F(2 * N); M.losses = F(N);
    M.dres = X(N * C); M.dln = X(N * C); M.dfch = X(N * 4 * C); M.dfch_gelu = X(N * 4 * C);
    M.datty = X(N * C); M.dqkv = X(N * 3 * C);
}

/* bytes/flops helpers (bf16 activations = 2 bytes) */
static double mm_f(double N, double IC, double OC) { return 2.0 * N * IC * OC; }

static bool g_fused = true; /* gpt.c's fused ops (false: the separate ops they replace) */

static double train_step(Model& M) {
    const int B = M.B, T = M.T, C = M.C, N = M.N, L = M.L, NH = M.NH, hs = M.hs, Vp = M.Vp, V = M.V;
    const double nc = (double)N * C, att_f = 2.0 * B * NH * (double)T * T * hs; /* causal: 2 matmuls x T^2/2 */
    /* the norms' bytes: the bf16 rows each way plus the fp32 mean and rstd (w, b: C wide, negligible);
     * the backward reads dout, x and dinp (it accumulates) and writes dinp: 4 row transfers */
    const double ln_fwd_b = 4.0 * nc + 8.0 * N, res_ln_b = 8.0 * nc + 8.0 * N, ln_bwd_b = 8.0 * nc + 8.0 * N;
    TIMED("encoder_forward", 0, 4.0 * nc, encoder_forward(M.x0, M.tok, W(M, WTE), N, C, 0, Vp));
    TIMED("position_forward", 0, 6.0 * nc, position_forward(M.x0, W(M, WPE), B, T, C));
    /* fused: the first norm alone, every later one inside residual_layernorm_forward */
    if (g_fused)
        TIMED("layernorm_forward", 0, ln_fwd_b, layernorm_forward(M.layer[0].ln1, M.layer[0].ln1_mean, M.layer[0].ln1_rstd, M.x0, W(M, LN1W, 0), W(M, LN1B, 0), N, C));
    for (int l = 0; l < L; l++) {
        auto& a = M.layer[l];
        floatX* x = l == 0 ? M.x0 : M.layer[l - 1].res3;
        if (!g_fused)
            TIMED("layernorm_forward", 0, ln_fwd_b, layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, W(M, LN1W, l), W(M, LN1B, l), N, C));
        TIMED("matmul_forward", mm_f(N, C, 3 * C), 0, matmul_forward(a.qkv, a.ln1, W(M, QKVW, l), W(M, QKVB, l), N, C, 3 * C));
        TIMED("attention_forward", att_f, 0, attention_forward(a.atty, a.lse, a.qkv, B, T, NH, hs));
        TIMED("matmul_forward", mm_f(N, C, C), 0, matmul_forward(a.attproj, a.atty, W(M, APW, l), nullptr, N, C, C));
        if (g_fused) {
            TIMED("residual_layernorm_forward", 0, res_ln_b, residual_layernorm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, a.attproj, W(M, APB, l), W(M, LN2W, l), W(M, LN2B, l), N, C));
            TIMED("matmul_gelu_forward", mm_f(N, C, 4 * C), 0, matmul_gelu_forward(a.fch_gelu, a.fch, a.ln2, W(M, FCW, l), W(M, FCB, l), N, C, 4 * C));
        } else {
            TIMED("bias_forward", 0, 4.0 * nc, bias_forward(a.attproj, W(M, APB, l), N, C));
            TIMED("residual_forward", 0, 6.0 * nc, residual_forward(a.res2, x, a.attproj, (size_t)N * C));
            TIMED("layernorm_forward", 0, ln_fwd_b, layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, W(M, LN2W, l), W(M, LN2B, l), N, C));
            TIMED("matmul_forward", mm_f(N, C, 4 * C), 0, matmul_forward(a.fch, a.ln2, W(M, FCW, l), W(M, FCB, l), N, C, 4 * C));
            TIMED("gelu_forward", 0, 16.0 * nc, gelu_forward(a.fch_gelu, a.fch, (size_t)N * 4 * C));
        }
        TIMED("matmul_forward", mm_f(N, 4 * C, C), 0, matmul_forward(a.fcproj, a.fch_gelu, W(M, FPW, l), nullptr, N, 4 * C, C));
        if (g_fused) {
            /* the next norm: layer l+1's ln1, or lnf after the last layer */
            const bool last = l == L - 1;
            Model::Layer* nx = last ? nullptr : &M.layer[l + 1];
            TIMED("residual_layernorm_forward", 0, res_ln_b,
                  residual_layernorm_forward(a.res3, last ? M.lnf : nx->ln1, last ? M.lnf_mean : nx->ln1_mean, last ? M.lnf_rstd : nx->ln1_rstd,
                                             a.res2, a.fcproj, W(M, FPB, l), last ? W(M, LNFW) : W(M, LN1W, l + 1), last ? W(M, LNFB) : W(M, LN1B, l + 1), N, C));
        } else {
            TIMED("bias_forward", 0, 4.0 * nc, bias_forward(a.fcproj, W(M, FPB, l), N, C));
            TIMED("residual_forward", 0, 6.0 * nc, residual_forward(a.res3, a.res2, a.fcproj, (size_t)N * C));
        }
    }
    floatX* last = M.layer[L - 1].res3;
    const double nv = (double)N * Vp;
    if (!g_fused)
        TIMED("layernorm_forward", 0, ln_fwd_b, layernorm_forward(M.lnf, M.lnf_mean, M.lnf_rstd, last, W(M, LNFW), W(M, LNFB), N, C));
    TIMED("matmul_forward (lm head)", mm_f(N, C, Vp), 0, matmul_forward(M.logits, M.lnf, W(M, WTE), nullptr, N, C, Vp));
    if (g_fused) { /* TP = 1: the three in one pass over the logits (read once, written once) */
        TIMED("crossentropy_local", 0, 4.0 * nv,
              crossentropy_local(M.logits, M.losses, M.ce_mx, M.ce_stats, M.tgt, N, Vp, V, 1.0f / N));
    } else {
        TIMED("crossentropy (3 kernels)", 0, 2.0 * nv, crossentropy_max(M.ce_mx, M.logits, N, Vp, 0, V));
        TIMED("crossentropy (3 kernels)", 0, 2.0 * nv, crossentropy_stats(M.ce_stats, M.logits, M.ce_mx, M.tgt, N, Vp, 0, V));
        TIMED("crossentropy (3 kernels)", 0, 4.0 * nv, crossentropy_backward(M.logits, M.losses, M.ce_mx, M.ce_stats, M.tgt, N, Vp, 0, V, 1.0f / N));
    }
    TIMED("ops_mean (loss)", 0, 4.0 * N, ops_mean(&M.step->loss, M.losses, N));

    TIMED("ops_zero", 0, 4.0 * M.total, ops_zero(M.grads, M.total * 4));
    TIMED("matmul_backward (lm head)", 2 * mm_f(N, C, Vp), 0, matmul_backward(M.dln, G(M, WTE), nullptr, M.logits, M.lnf, W(M, WTE), N, C, Vp));
    TIMED("ops_zero", 0, 2.0 * nc, ops_zero(M.dres, (size_t)N * C * 2));
    /* fused: each norm's backward also sums dres into the bias below it (model/gpt.c); else bias_backward */
    float* ds = g_fused ? G(M, FPB, L - 1) : nullptr;
    TIMED("layernorm_backward", 0, ln_bwd_b, layernorm_backward(M.dres, G(M, LNFW), G(M, LNFB), ds, M.dln, last, W(M, LNFW), M.lnf_mean, M.lnf_rstd, N, C));
    for (int l = L - 1; l >= 0; l--) {
        auto& a = M.layer[l];
        floatX* x = l == 0 ? M.x0 : M.layer[l - 1].res3;
        if (!g_fused) TIMED("bias_backward", 0, 2.0 * nc, bias_backward(G(M, FPB, l), M.dres, N, C));
        if (g_fused) {
            TIMED("gelu_matmul_backward", 2 * mm_f(N, 4 * C, C), 0, gelu_matmul_backward(M.dfch, G(M, FPW, l), nullptr, M.dres, a.fch_gelu, W(M, FPW, l), a.fch, N, 4 * C, C));
        } else {
            TIMED("matmul_backward", 2 * mm_f(N, 4 * C, C), 0, matmul_backward(M.dfch_gelu, G(M, FPW, l), nullptr, M.dres, a.fch_gelu, W(M, FPW, l), N, 4 * C, C));
            TIMED("gelu_backward", 0, 24.0 * nc, gelu_backward(M.dfch, a.fch, M.dfch_gelu, (size_t)N * 4 * C));
        }
        TIMED("matmul_backward", 2 * mm_f(N, C, 4 * C), 0, matmul_backward(M.dln, G(M, FCW, l), G(M, FCB, l), M.dfch, a.ln2, W(M, FCW, l), N, C, 4 * C));
        ds = g_fused ? G(M, APB, l) : nullptr;
        TIMED("layernorm_backward", 0, ln_bwd_b, layernorm_backward(M.dres, G(M, LN2W, l), G(M, LN2B, l), ds, M.dln, a.res2, W(M, LN2W, l), a.ln2_mean, a.ln2_rstd, N, C));
        if (!g_fused) TIMED("bias_backward", 0, 2.0 * nc, bias_backward(G(M, APB, l), M.dres, N, C));
        TIMED("matmul_backward", 2 * mm_f(N, C, C), 0, matmul_backward(M.datty, G(M, APW, l), nullptr, M.dres, a.atty, W(M, APW, l), N, C, C));
        TIMED("attention_backward", 2.5 * att_f, 0, attention_backward(M.dqkv, M.datty, a.qkv, a.atty, a.lse, B, T, NH, hs));
        TIMED("matmul_backward", 2 * mm_f(N, C, 3 * C), 0, matmul_backward(M.dln, G(M, QKVW, l), G(M, QKVB, l), M.dqkv, a.ln1, W(M, QKVW, l), N, C, 3 * C));
        ds = g_fused && l > 0 ? G(M, FPB, l - 1) : nullptr;
        TIMED("layernorm_backward", 0, ln_bwd_b, layernorm_backward(M.dres, G(M, LN1W, l), G(M, LN1B, l), ds, M.dln, x, W(M, LN1W, l), a.ln1_mean, a.ln1_rstd, N, C));
    }
    /* the last norm's dw / db / dsum (each earlier norm's are added by the next norm backward) */
    TIMED("norm_backward_finish", 0, 0, norm_backward_finish());
    TIMED("position_backward", 0, 2.0 * nc, position_backward(G(M, WPE), M.dres, B, T, C));
    TIMED("encoder_backward", 0, 6.0 * nc, encoder_backward(G(M, WTE), M.dres, M.plan, N, C, Vp));
    TIMED("ops_zero", 0, 8.0, ops_zero(&M.step->sumsq, sizeof(double)));
    /* fused: one sum over the whole gradient buffer, as model/gpt.c does at one rank; else per tensor */
    if (g_fused)
        TIMED("ops_sumsq_acc (grad norm)", 0, 4.0 * M.total, ops_sumsq_acc(&M.step->sumsq, M.grads, M.total));
    else
        for (int t = 0; t < NT; t++)
            TIMED("ops_sumsq_acc (grad norm)", 0, 4.0 * M.size[t], ops_sumsq_acc(&M.step->sumsq, M.grads + M.off[t], M.size[t]));
    TIMED("ops_grad_clip", 0, 0, ops_grad_clip(M.step, 1.0f));
    /* fused: every tensor in one launch, as model/gpt.c's gpt_update; else one launch per tensor */
    float wd[NT];
    for (int t = 0; t < NT; t++) {
        const bool decay = t == WTE || t == WPE || t == QKVW || t == APW || t == FCW || t == FPW;
        wd[t] = decay ? 0.1f : 0.0f;
    }
    if (g_fused)
        TIMED("adamw_update", 0, 26.0 * M.total,
              adamw_update_tensors(M.master, M.params, M.grads, M.m, M.v, NT, M.off, M.size, wd, M.step, 0.9f, 0.95f, 1e-8f));
    else
        for (int t = 0; t < NT; t++)
            TIMED("adamw_update", 0, 26.0 * M.size[t],
                  adamw_update(M.master + M.off[t], M.params + M.off[t], M.grads + M.off[t], M.m + M.off[t],
                               M.v + M.off[t], M.size[t], M.step, 0.9f, 0.95f, 1e-8f, wd[t]));
    StepScalars st;
    ops_to_host(&st, M.step, sizeof(st));   /* the step's one read, as the trainer's after its sync */
    return st.loss;
}

/* g_stats := the mean per step of OP_STEPS steps timed op by op */
static void time_ops(Model& M) {
    g_stats.clear();
    g_timing = true;
    for (int i = 0; i < OP_STEPS; i++) train_step(M);
    collect();
    g_timing = false;
    for (auto& kv : g_stats) {
        kv.second.calls /= OP_STEPS;
        kv.second.ms /= OP_STEPS;
        kv.second.flops /= OP_STEPS;
        kv.second.bytes /= OP_STEPS;
    }
}

int main(int argc, char** argv) {
    const int B = argc > 1 ? atoi(argv[1]) : 16;
    const int T = argc > 2 ? atoi(argv[2]) : 1024;
    const int steps = argc > 3 ? atoi(argv[3]) : 10;
    if (argc > 4 && strcmp(argv[4], "unfused") != 0) FATAL("usage: bench_ops_gpu [B] [T <= 1024] [steps] [unfused]");
    g_fused = argc <= 4;
    if (B <= 0 || T <= 0 || T > 1024 || steps <= 0) FATAL("usage: bench_ops_gpu [B] [T <= 1024] [steps] [unfused]");
    ops_init(0);
    cudaDeviceProp prop;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));

    /* ceilings: device copy (read + write) and a large bf16 GEMM through our matmul */
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    auto med_ms = [&](auto fn, int reps) {
        fn();
        std::vector<float> t;
        for (int r = 0; r < reps; r++) {
            CUDA_CHECK(cudaEventRecord(e0, stream()));
            fn();
            CUDA_CHECK(cudaEventRecord(e1, stream()));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        return (double)t[t.size() / 2];
    };
    double copy_gbs, gemm_tf;
    {
        size_t bytes = (size_t)1 << 30;
        void *a = ops_malloc(bytes), *b = ops_malloc(bytes);
        init_f32((float*)a, bytes / 4, 1.0f, 7);
        double ms = med_ms([&] { ops_copy(b, a, bytes); }, 10);
        copy_gbs = 2.0 * bytes / (ms / 1e3) / 1e9;
        ops_free(a);
        ops_free(b);
        const int m = 8192;
        float* f = (float*)ops_malloc((size_t)m * m * 4);
        floatX *x = (floatX*)ops_malloc((size_t)m * m * 2), *w = (floatX*)ops_malloc((size_t)m * m * 2),
               *o = (floatX*)ops_malloc((size_t)m * m * 2);
        init_f32(f, (size_t)m * m, 1.0f, 8);
        ops_f32_to_X(x, f, (size_t)m * m);
        init_f32(f, (size_t)m * m, 1.0f, 9);
        ops_f32_to_X(w, f, (size_t)m * m);
        ms = med_ms([&] { matmul_forward(o, x, w, nullptr, m, m, m); }, 10);
        gemm_tf = 2.0 * m * m * (double)m / (ms / 1e3) / 1e12;
        ops_free(f);
        ops_free(x);
        ops_free(w);
        ops_free(o);
    }

    Model M;
    model_init(M, B, T);
    for (int i = 0; i < 3; i++) train_step(M); /* warm-up: plans, attributes, scratch */
    ops_sync();
    std::vector<double> step_ms;
    double loss = 0;
    for (int i = 0; i < steps; i++) {
        CUDA_CHECK(cudaEventRecord(e0, stream()));
        loss = train_step(M);
        CUDA_CHECK(cudaEventRecord(e1, stream()));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        step_ms.push_back(ms);
    }
    /* OP_STEPS more steps with per-op events (they add a little overhead of their own) */
    time_ops(M);

    std::sort(step_ms.begin(), step_ms.end());
    const double med = step_ms[step_ms.size() / 2];
    printf("bench_ops_gpu: %s, %d SMs; GPT-2 124M, B=%d T=%d, %zu params; loss %.3f (random weights); %s ops; "
           "attention %s\n",
           prop.name, prop.multiProcessorCount, B, T, M.total, loss, g_fused ? "fused" : "unfused",
           attention_uses_wgmma() ? "wgmma" : "mma.sync");
    printf("ceilings: device copy %.0f GB/s (read+write), bf16 GEMM 8192^3 %.0f TFLOP/s\n", copy_gbs, gemm_tf);
    printf("step: median %.2f ms (min %.2f, max %.2f) over %d steps = %.0fk tok/s;  PyTorch anchors (2026-12-01/02): "
           "eager 46.7, compiled 35.8 ms\n\n", med, step_ms.front(), step_ms.back(), steps, B * T / med);
    double total = 0;
    for (auto& kv : g_stats) total += kv.second.ms;
    std::vector<std::pair<std::string, OpStat>> rows(g_stats.begin(), g_stats.end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
    printf("%-30s %6s %9s %6s %12s %9s\n", "op", "calls", "ms/step", "%", "rate", "of ceil");
    /* the fused GEMMs count their FLOPs; their epilogue traffic is not in the rate */
    for (auto& r : rows) {
        const OpStat& s = r.second;
        char rate[32] = "-", frac[16] = "-";
        if (s.flops > 0) {
            double tf = s.flops / (s.ms / 1e3) / 1e12;
            snprintf(rate, sizeof rate, "%.0f TFLOP/s", tf);
            snprintf(frac, sizeof frac, "%.0f%%", 100.0 * tf / gemm_tf);
        } else if (s.bytes > 0) {
            double gb = s.bytes / (s.ms / 1e3) / 1e9;
            snprintf(rate, sizeof rate, "%.0f GB/s", gb);
            snprintf(frac, sizeof frac, "%.0f%%", 100.0 * gb / copy_gbs);
        }
        printf("%-30s %6d %9.3f %5.1f%% %12s %9s\n", r.first.c_str(), s.calls, s.ms, 100.0 * s.ms / total, rate, frac);
    }
    printf("%-30s %6s %9.3f\n", "sum of op times", "", total);
    return 0;
}
