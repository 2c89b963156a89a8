/*
 * model/gpt.c - forward and backward pass of tensor-parallel GPT-2.
 *
 * One layer, with P = TP degree, N = B*T rows, Cr = C/P, Fr = 4C/P:
 *
 *   ln1  = LN(x)                               replicated
 *   qkv  = ln1 @ qkvw^T + qkvb      [N,3Cr]    column-parallel (local heads)
 *   atty = attention(qkv)           [N,Cr]     local heads
 *   a    = atty @ attprojw^T        [N,C]      row-parallel: partial sums
 *   a    = EXCHANGE attn.fwd (a)               all-reduce
 *   res2 = x + (a + attprojb)                  the bias once, after the sum
 *   ln2  = LN(res2)
 *   h    = gelu(ln2 @ fcw^T + fcb)  [N,Fr]     column-parallel
 *   f    = h @ fcprojw^T            [N,C]      row-parallel: partial sums
 *   f    = EXCHANGE mlp.fwd (f)
 *   res3 = res2 + (f + fcprojb)
 *
 * Fused (ops.h's fused ops, one kernel or GEMM epilogue each on the GPU, the
 * same arithmetic as the separate ops on the CPU): the bias, the residual add
 * and the norm after each row-parallel GEMM are one residual_layernorm_forward
 * (after the MLP the norm is the next layer's ln1, or lnf after the last
 * layer); the fc GEMM and its GELU are matmul_gelu_forward, which keeps the
 * pre-activation (fch) for the backward; and fcproj's input gradient goes
 * through GELU's derivative inside its GEMM (gelu_matmul_backward). The
 * exchanges stay where they were: between each row-parallel GEMM and the
 * bias, so the bias is still added once to the summed rows.
 *
 * The backward mirrors it: the gradients into ln2 and ln1 are partial sums
 * over the column-parallel weights, so they are exchanged too (mlp.bwd,
 * attn.bwd). Around the layers: the vocab-parallel embedding is exchanged
 * forward (embed.fwd) and the LM head's input gradient backward
 * (lm_head.bwd); the cross-entropy needs three small exact all-reduces.
 * That is 4 big exchanges per layer per step, all visible below.
 *
 * With sequence parallelism (parallel.sp) the norm / residual / bias rows
 * are split over the ranks (R = N/P each): every all-reduce above becomes a
 * reduce-scatter into this rank's rows, an all-gather of the norm's rows
 * precedes each column-parallel GEMM, and the backward mirrors them (8 row
 * exchanges per layer, the same bytes); the helpers at the end of this file
 * hold both layouts, so the passes below are written once.
 */
#include "model/gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/sp.h"
#include "comm/watchdog.h"
#include "common/check.h"
#include "ops/encoder_plan.h"
#ifdef OPS_BF16
#include "model/init_cuda.h"
#endif

/* gpt_init allocates through take(), so that gpt_backend_bytes can run the
 * same code to count the bytes instead: the memory estimate cannot drift
 * from the allocations. */
static int counting = 0;
static size_t counted = 0;

static void* take(size_t bytes) {
    if (!counting) return ops_malloc(bytes);
    counted += bytes;
    return NULL;
}
/* the host staging (a few ints per token): not backend memory, not counted */
static void* take_host(size_t bytes) { return counting ? NULL : ops_malloc_host(bytes); }

void gpt_init(GPT* m, GPTShape s, int tp_size, int tp_rank, int B, int T, int sp) {
    memset(m, 0, sizeof(*m));
    params_layout(&m->pl, s, tp_size, tp_rank);
    m->B = B;
    m->T = T;
    m->sp = sp && tp_size > 1;   /* at TP = 1 the two layouts are one */
    m->R = m->sp ? B * T / tp_size : B * T;
    m->Cr = s.C / tp_size;
    m->Fr = shape_ffn(&s) / tp_size;
    m->NHr = s.NH / tp_size;
    m->KVr = shape_kv(&s) / tp_size;
    m->hs = s.C / s.NH;
    m->QKVr = (m->NHr + 2 * m->KVr) * m->hs;             /* GPT-2: 3 Cr */
    m->FCr = s.arch == ARCH_QWEN2 ? 2 * m->Fr : m->Fr;   /* qwen2: gate and up rows */
    m->Vr = s.Vp / tp_size;
    m->v0 = tp_rank * m->Vr;

    size_t np = m->pl.total;
    m->params = take(np * sizeof(floatX));
#ifdef OPS_BF16
    m->master = take(np * sizeof(float));
#else
    m->master = m->params;    /* fp32 build: the working weights are the master weights */
#endif
    m->grads = take(np * sizeof(float));
    m->adam_m = take(np * sizeof(float));
    m->adam_v = take(np * sizeof(float));

    size_t N = (size_t)B * T, C = (size_t)s.C, R = (size_t)m->R;
    m->tok = take(N * sizeof(int));
    m->tgt = take(N * sizeof(int));
    m->plan = take(ENCODER_PLAN_INTS((int)N, m->Vr) * sizeof(int));
    m->step = take(sizeof(StepScalars));
    m->tok_host = take_host(N * sizeof(int));
    m->tgt_host = take_host(N * sizeof(int));
    m->plan_host = take_host(ENCODER_PLAN_INTS((int)N, m->Vr) * sizeof(int));
    m->step_host = take_host(sizeof(StepScalars));
    m->x0 = take(R * C * sizeof(floatX));
    m->acts = callocCheck((size_t)s.L, sizeof(LayerActs));
    for (int l = 0; l < s.L; l++) {
        LayerActs* a = &m->acts[l];
        a->ln1 = take(N * C * sizeof(floatX));
        a->qkv = take(N * m->QKVr * sizeof(floatX));
        a->atty = take(N * m->Cr * sizeof(floatX));
        a->attproj = take(R * C * sizeof(floatX));
        a->res2 = take(R * C * sizeof(floatX));
        a->ln2 = take(N * C * sizeof(floatX));
        a->fch = take(N * m->FCr * sizeof(floatX));
        a->fch_gelu = take(N * m->Fr * sizeof(floatX));
        a->fcproj = take(R * C * sizeof(floatX));
        a->res3 = take(R * C * sizeof(floatX));
        a->ln1_mean = take(R * sizeof(float));
        a->ln1_rstd = take(R * sizeof(float));
        a->ln2_mean = take(R * sizeof(float));
        a->ln2_rstd = take(R * sizeof(float));
        a->lse = take((size_t)B * m->NHr * T * sizeof(float));
    }
    m->lnf = take(N * C * sizeof(floatX));
    m->logits = take(N * m->Vr * sizeof(floatX));
    m->lnf_mean = take(R * sizeof(float));
    m->lnf_rstd = take(R * sizeof(float));
    m->ce_mx = take(N * sizeof(float));
    m->ce_stats = take(2 * N * sizeof(float));
    m->losses = take(N * sizeof(float));
    m->dres = take(R * C * sizeof(floatX));
    m->dln = take(N * C * sizeof(floatX));
    m->dfch = take(N * m->FCr * sizeof(floatX));
    /* SwiGLU's output gradient (qwen2); GPT-2's GELU backward runs inside fcproj's GEMM */
    if (s.arch == ARCH_QWEN2) m->dfch_gelu = take(N * m->Fr * sizeof(floatX));
    m->datty = take(N * m->Cr * sizeof(floatX));
    m->dqkv = take(N * m->QKVr * sizeof(floatX));
    m->logit_row = take((size_t)m->Vr * sizeof(float));
    if (m->sp) {
        m->xfull = take(N * C * sizeof(floatX));
        m->xloc = take(R * C * sizeof(floatX));
        m->dloc = take(R * C * sizeof(floatX));
    }
}

size_t gpt_backend_bytes(GPTShape s, int tp_size, int tp_rank, int B, int T, int sp) {
    GPT m;
    counting = 1;
    counted = 0;
    gpt_init(&m, s, tp_size, tp_rank, B, T, sp);
    counting = 0;
    free(m.acts);
    return counted;
}

void gpt_free(GPT* m) {
    ops_free(m->params);
#ifdef OPS_BF16
    ops_free(m->master);
#endif
    ops_free(m->grads);
    ops_free(m->adam_m);
    ops_free(m->adam_v);
    ops_free(m->tok);
    ops_free(m->tgt);
    ops_free(m->plan);
    ops_free(m->step);
    ops_free_host(m->tok_host);
    ops_free_host(m->tgt_host);
    ops_free_host(m->plan_host);
    ops_free_host(m->step_host);
    ops_free(m->x0);
    for (int l = 0; l < m->pl.s.L; l++) {
        LayerActs* a = &m->acts[l];
        floatX* xs[] = {a->ln1, a->qkv, a->atty, a->attproj, a->res2, a->ln2, a->fch, a->fch_gelu, a->fcproj, a->res3};
        float* fs[] = {a->ln1_mean, a->ln1_rstd, a->ln2_mean, a->ln2_rstd, a->lse};
        for (size_t k = 0; k < sizeof(xs) / sizeof(xs[0]); k++) ops_free(xs[k]);
        for (size_t k = 0; k < sizeof(fs) / sizeof(fs[0]); k++) ops_free(fs[k]);
    }
    free(m->acts);
    floatX* xs[] = {m->lnf, m->logits, m->dres, m->dln, m->dfch, m->dfch_gelu, m->datty, m->dqkv, m->xfull, m->xloc, m->dloc};
    float* fs[] = {m->lnf_mean, m->lnf_rstd, m->ce_mx, m->ce_stats, m->losses, m->logit_row};
    for (size_t k = 0; k < sizeof(xs) / sizeof(xs[0]); k++) ops_free(xs[k]);
    for (size_t k = 0; k < sizeof(fs) / sizeof(fs[0]); k++) ops_free(fs[k]);
}

void gpt_set_shard(GPT* m, const float* host) {
    ops_from_host(m->master, host, m->pl.total * sizeof(float));
#ifdef OPS_BF16
    ops_f32_to_X(m->params, m->master, m->pl.total);
#endif
}

void gpt_get_shard(const GPT* m, float* host) {
    ops_to_host(host, m->master, m->pl.total * sizeof(float));
}

void gpt_set_params(GPT* m, float* full) {
    float* shard = mallocCheck(m->pl.total * sizeof(float));
    params_copy_shard(&m->pl, full, shard, 1);
    gpt_set_shard(m, shard);
    free(shard);
}

#ifdef OPS_BF16
void gpt_init_device(GPT* m, unsigned long long seed) {
    params_init_device(&m->pl, m->master, seed);
    ops_f32_to_X(m->params, m->master, m->pl.total);
    ops_sync();
}

static int gpt_init_on_device(const GPT* m, const char* init) {
    if (strcmp(init, "auto") == 0) return params_full_count(&m->pl) >= GPT_INIT_DEVICE_MIN_PARAMS;
    return strcmp(init, "device") == 0;
}
#endif

const char* gpt_init_random(GPT* m, const char* init, unsigned long long seed) {
#ifdef OPS_BF16
    if (gpt_init_on_device(m, init)) {
        gpt_init_device(m, seed);
        return "device (cuRAND Philox)";
    }
#else
    /* config validation refuses it in this build; reaching here is a caller's bug */
    if (strcmp(init, "device") == 0) FATAL("model.init: \"device\" needs the GPU build (build/train_gpu)");
#endif
    float* full = params_init_full(&m->pl, seed);
    gpt_set_params(m, full);
    free(full);
    return "host (counter hash)";
}

/* GPT-2's MLP GEMMs with GELU in them (defined with the other GEMM helpers below) */
static void colpar_forward_gelu(GPT* m, Comm* c, SiteKind ag, int layer, floatX* out, floatX* pre, floatX* in,
                                const floatX* W, const floatX* b, int OC);
static void rowpar_backward_gelu(GPT* m, Comm* c, SiteKind ag, int layer, floatX* din, float* dW, const floatX* in,
                                 floatX* pre, const floatX* W, int IC);

/* GPT-2's position embedding on this rank's rows: x += wpe at each row's
 * position (forward; dwpe NULL), or dwpe += dx (backward). With sp the
 * rows are the pieces of comm/sp.h, each cut into runs that do not cross a
 * sequence boundary (so the ops' [B, T] view holds with wpe offset). */
static void positions(GPT* m, Comm* c, floatX* x, const floatX* wpe, float* dwpe, const floatX* dx) {
    const int T = m->T, C = m->pl.s.C, N = m->B * T, K = m->sp ? c->policy.sp_chunks : 1;
    for (int k = 0; k < K; k++) {
        int g0 = 0, rows = N;
        if (m->sp) sp_piece(N, m->pl.P, K, m->pl.r, k, &g0, &rows);
        for (int g = g0; g < g0 + rows;) {
            int t = g % T, left = g0 + rows - g, nb = 1, len = T - t < left ? T - t : left;
            if (t == 0 && left >= T) { nb = left / T; len = T; }   /* whole sequences in one call */
            const size_t at = ((size_t)k * rows + (size_t)(g - g0)) * C;
            if (dwpe) position_backward(dwpe + (size_t)t * C, dx + at, nb, len, C);
            else position_forward(x + at, wpe + (size_t)t * C, nb, len, C);
            g += nb * len;
        }
    }
}

void gpt_stage(GPT* m, const int* inputs, const int* targets) {
    const int N = m->B * m->T;
    ops_sync();   /* the previous batch's copies have read the staging */
    memcpy(m->tok_host, inputs, (size_t)N * sizeof(int));
    m->staged_targets = targets != NULL;
    if (!targets) return;
    memcpy(m->tgt_host, targets, (size_t)N * sizeof(int));
    encoder_plan(m->plan_host, inputs, N, m->v0, m->Vr);
}

void gpt_stage_step(GPT* m, float lr, float beta1, float beta2, int t) {
    m->step_host->lr = lr;
    m->step_host->bc1 = 1.0f - powf(beta1, (float)t);
    m->step_host->bc2 = 1.0f - powf(beta2, (float)t);
}

/* the staging's copies, queued: they read the host buffers when they run */
static void upload_staged(GPT* m) {
    const int N = m->B * m->T;
    ops_from_host_async(m->tok, m->tok_host, (size_t)N * sizeof(int));
    if (!m->staged_targets) return;
    ops_from_host_async(m->tgt, m->tgt_host, (size_t)N * sizeof(int));
    ops_from_host_async(m->plan, m->plan_host, ENCODER_PLAN_INTS(N, m->Vr) * sizeof(int));
}

static void gpt2_forward(GPT* m, Comm* c);

void gpt_forward_staged(GPT* m, Comm* c) {
    upload_staged(m);
    if (m->pl.s.arch == ARCH_QWEN2) qwen2_forward(m, c);
    else gpt2_forward(m, c);
}

float gpt_forward(GPT* m, Comm* c, const int* inputs, const int* targets) {
    gpt_stage(m, inputs, targets);
    gpt_forward_staged(m, c);
    if (!targets) return 0.0f;
    float loss;
    ops_to_host(&loss, &m->step->loss, sizeof(loss));
    return loss;
}

static void gpt2_forward(GPT* m, Comm* c) {
    const GPTShape* s = &m->pl.s;
    int B = m->B, T = m->T, C = s->C, R = m->R;
    floatX* P = m->params;

    gpt_embed_forward(m, c, TENSOR(P, P_WTE));
    positions(m, c, m->x0, TENSOR(P, P_WPE), NULL, NULL);
    /* the first norm alone: every later one is fused with the residual add before it */
    layernorm_forward(gpt_norm_out(m, m->acts[0].ln1), m->acts[0].ln1_mean, m->acts[0].ln1_rstd, m->x0,
                      LAYER(P, P_LN1W, 0), LAYER(P, P_LN1B, 0), R, C);

    for (int l = 0; l < s->L; l++) {
        LayerActs* a = &m->acts[l];
        floatX* x = l == 0 ? m->x0 : m->acts[l - 1].res3;
        gpt_colpar_forward(m, c, SITE_ATTN_AG, l, a->qkv, a->ln1, LAYER(P, P_QKVW, l), LAYER(P, P_QKVB, l), 3 * m->Cr);
        attention_forward(a->atty, a->lse, a->qkv, B, T, m->NHr, m->hs);
        gpt_rowpar_forward(m, c, SITE_ATTN_FWD, SITE_ATTN_RS, l, a->attproj, a->atty, LAYER(P, P_ATTPROJW, l), m->Cr);
        /* res2 = x + (attproj + attprojb), ln2 = LN(res2) */
        residual_layernorm_forward(a->res2, gpt_norm_out(m, a->ln2), a->ln2_mean, a->ln2_rstd, x, a->attproj,
                                   LAYER(P, P_ATTPROJB, l), LAYER(P, P_LN2W, l), LAYER(P, P_LN2B, l), R, C);

        colpar_forward_gelu(m, c, SITE_MLP_AG, l, a->fch_gelu, a->fch, a->ln2, LAYER(P, P_FCW, l), LAYER(P, P_FCB, l), m->Fr);
        gpt_rowpar_forward(m, c, SITE_MLP_FWD, SITE_MLP_RS, l, a->fcproj, a->fch_gelu, LAYER(P, P_FCPROJW, l), m->Fr);
        /* res3 = res2 + (fcproj + fcprojb), and the norm that reads it: layer l+1's ln1, or lnf */
        const int last = l == s->L - 1;
        LayerActs* n = last ? NULL : &m->acts[l + 1];
        residual_layernorm_forward(a->res3, gpt_norm_out(m, last ? m->lnf : n->ln1), last ? m->lnf_mean : n->ln1_mean,
                                   last ? m->lnf_rstd : n->ln1_rstd, a->res2, a->fcproj, LAYER(P, P_FCPROJB, l),
                                   last ? TENSOR(P, P_LNFW) : LAYER(P, P_LN1W, l + 1),
                                   last ? TENSOR(P, P_LNFB) : LAYER(P, P_LN1B, l + 1), R, C);
    }

    gpt_colpar_forward(m, c, SITE_LMHEAD_AG, -1, m->logits, m->lnf, TENSOR(P, P_WTE), NULL, m->Vr);
    gpt_head_loss(m, c);
}

void gpt_head_loss(GPT* m, Comm* c) {
    if (!m->staged_targets) return;
    const GPTShape* s = &m->pl.s;
    int N = m->B * m->T;
    /* vocab-parallel cross-entropy: global max, then global sum of exp and
     * target logit; the backward (softmax - onehot) / N is fused in. With the
     * whole vocab on this rank (TP = 1) nothing is exchanged between the three,
     * and crossentropy_local does them with the same bits in fewer passes. */
    if (c->tp_size == 1) {
        crossentropy_local(m->logits, m->losses, m->ce_mx, m->ce_stats, m->tgt, N, m->Vr, s->V, 1.0f / (float)N);
    } else {
        crossentropy_max(m->ce_mx, m->logits, N, m->Vr, m->v0, s->V);
        tp_allreduce_small(c, m->ce_mx, (size_t)N, MPI_MAX);
        crossentropy_stats(m->ce_stats, m->logits, m->ce_mx, m->tgt, N, m->Vr, m->v0, s->V);
        tp_allreduce_small(c, m->ce_stats, 2 * (size_t)N, MPI_SUM);
        crossentropy_backward(m->logits, m->losses, m->ce_mx, m->ce_stats, m->tgt, N, m->Vr, m->v0, s->V,
                              1.0f / (float)N);
    }
    ops_mean(&m->step->loss, m->losses, (size_t)N);
}

void gpt_zero_grad(GPT* m) { ops_zero(m->grads, m->pl.total * sizeof(float)); }

void gpt_backward(GPT* m, Comm* c) {
    if (m->pl.s.arch == ARCH_QWEN2) {
        qwen2_backward(m, c);
        return;
    }
    const GPTShape* s = &m->pl.s;
    int B = m->B, T = m->T, C = s->C, N = B * T, R = m->R;
    floatX* P = m->params;
    float* G = m->grads;

    const floatX* dl = gpt_head_backward(m, c, TENSOR(P, P_WTE), TENSOR(G, P_WTE)); /* tied to wte */
    floatX* last = m->acts[s->L - 1].res3;
    /* each norm's backward also sums the residual gradient it leaves in
     * m->dres into the bias added just below it: the last layer's fcprojb */
    layernorm_backward(m->dres, TENSOR(G, P_LNFW), TENSOR(G, P_LNFB), LAYER(G, P_FCPROJB, s->L - 1), dl, last,
                       TENSOR(P, P_LNFW), m->lnf_mean, m->lnf_rstd, R, C);

    /* m->dres carries the residual stream's gradient (this rank's R rows) down through the layers */
    for (int l = s->L - 1; l >= 0; l--) {
        LayerActs* a = &m->acts[l];
        floatX* x = l == 0 ? m->x0 : m->acts[l - 1].res3;
        /* MLP: res3 = res2 + fcproj + fcprojb (fcprojb's gradient: the norm above) */
        /* dfch = (dres @ fcprojw) * gelu'(fch): GELU's derivative in the GEMM */
        rowpar_backward_gelu(m, c, SITE_MLP_RS_BWD, l, m->dfch, LAYER(G, P_FCPROJW, l), a->fch_gelu, a->fch,
                             LAYER(P, P_FCPROJW, l), m->Fr);
        dl = gpt_colpar_backward(m, c, SITE_MLP_BWD, SITE_MLP_AG_BWD, l, LAYER(G, P_FCW, l), LAYER(G, P_FCB, l), m->dfch,
                                 a->ln2, LAYER(P, P_FCW, l), m->Fr);
        layernorm_backward(m->dres, LAYER(G, P_LN2W, l), LAYER(G, P_LN2B, l), LAYER(G, P_ATTPROJB, l), dl, a->res2,
                           LAYER(P, P_LN2W, l), a->ln2_mean, a->ln2_rstd, R, C);
        /* attention: res2 = x + attproj + attprojb (attprojb's gradient: the norm above) */
        gpt_rowpar_backward(m, c, SITE_ATTN_RS_BWD, l, m->datty, LAYER(G, P_ATTPROJW, l), a->atty,
                            LAYER(P, P_ATTPROJW, l), m->Cr);
        attention_backward(m->dqkv, m->datty, a->qkv, a->atty, a->lse, B, T, m->NHr, m->hs);
        dl = gpt_colpar_backward(m, c, SITE_ATTN_BWD, SITE_ATTN_AG_BWD, l, LAYER(G, P_QKVW, l), LAYER(G, P_QKVB, l),
                                 m->dqkv, a->ln1, LAYER(P, P_QKVW, l), 3 * m->Cr);
        layernorm_backward(m->dres, LAYER(G, P_LN1W, l), LAYER(G, P_LN1B, l), l > 0 ? LAYER(G, P_FCPROJB, l - 1) : NULL,
                           dl, x, LAYER(P, P_LN1W, l), a->ln1_mean, a->ln1_rstd, R, C);
    }
    norm_backward_finish(); /* the last norm's dw, db, dsum (ops.h) */
    /* embeddings: the gradient wrt x0 feeds wpe (replicated) and this rank's wte rows */
    positions(m, c, NULL, NULL, TENSOR(G, P_WPE), m->dres);
    encoder_backward(TENSOR(G, P_WTE), gpt_grad_in(m, c, SITE_EMBED_RS_BWD, -1), m->plan, N, C, m->Vr);
    gpt_replicated_grads(m, c);
}

void gpt_embed_forward(GPT* m, Comm* c, const floatX* wte) {
    const int N = m->B * m->T, C = m->pl.s.C;
    encoder_forward(gpt_partial(m, m->x0), m->tok, wte, N, C, m->v0, m->Vr);
    gpt_reduce(m, c, SITE_EMBED_FWD, SITE_EMBED_RS, -1, m->x0);
}

const floatX* gpt_head_backward(GPT* m, Comm* c, const floatX* W, float* dW) {
    const int C = m->pl.s.C;
    const floatX* dl = gpt_colpar_backward(m, c, SITE_LMHEAD_BWD, SITE_LMHEAD_AG_BWD, -1, dW, NULL, m->logits, m->lnf, W,
                                           m->Vr);
    ops_zero(m->dres, (size_t)m->R * C * sizeof(floatX));
    return dl;
}

/* ---- the two layouts of the norm and residual region ----------------------
 * Without sp every rank holds all N rows: a norm writes the column-parallel
 * GEMM's input directly, a row-parallel GEMM's partial sums are all-reduced
 * in place, the backward's residual gradient is already full. With sp a
 * rank holds its R = N/P rows (comm/sp.h): a norm writes m->xloc, gathered
 * into the GEMM's input; a row-parallel GEMM writes m->xfull, reduce-
 * scattered into the rows; the backward gathers the residual gradient
 * before a row-parallel GEMM's backward and reduce-scatters a
 * column-parallel one's input gradient.
 *
 * With sp the GEMMs next to an exchange run in K = tp_segments(c) pieces of
 * N/K rows (comm/sites.h shows the loops), whether or not comm.overlap lets
 * the exchange of one piece run beside the GEMM of the next: so the GEMM
 * calls, and their bits, are the same either way (a GEMM library may pick
 * another kernel for another row count). Each output row depends on its
 * own input row only, and a weight gradient accumulates the pieces in row
 * order. */

floatX* gpt_norm_out(GPT* m, floatX* full) { return m->sp ? m->xloc : full; }

floatX* gpt_partial(GPT* m, floatX* out) { return m->sp ? m->xfull : out; }

void gpt_reduce(GPT* m, Comm* c, SiteKind ar, SiteKind rs, int layer, floatX* out) {
    if (m->sp) tp_reduce_scatter(c, rs, layer, m->xfull, out, m->B * m->T, m->pl.s.C);
    else tp_exchange(c, ar, layer, out, m->B * m->T, m->pl.s.C);
}

const floatX* gpt_grad_in(GPT* m, Comm* c, SiteKind kind, int layer) {
    if (!m->sp) return m->dres;
    tp_all_gather(c, kind, layer, m->dres, m->xfull, m->B * m->T, m->pl.s.C);
    return m->xfull;
}

/* A GEMM beside an exchange, on rows [r0, r0 + n): forward out[N,OC] =
 * in[N,IC] W^T + b; backward out = din[N,IC] = dout[N,OC] W, dW +=
 * dout^T in, db += colsum(dout) (db may be NULL). With pre (GELU around
 * the GEMM, GPT-2's MLP): forward pre = in W^T + b and out = gelu(pre);
 * backward in = gelu(pre) and din = (dout W) * gelu'(pre). The fused ops
 * work row by row, so the pieces of comm.overlap and sp cut them as they
 * cut the plain GEMMs. */
typedef struct {
    int bwd;
    floatX* out;
    const floatX *in, *W, *b, *dout;
    float *dW, *db;
    floatX* pre;   /* NULL: no GELU; [N,OC] forward (written), [N,IC] backward (read) */
    int IC, OC;
} Gemm;

static void gemm_rows(const Gemm* g, size_t r0, int n) {
    const size_t ri = r0 * g->IC, ro = r0 * g->OC;
    if (!g->bwd && g->pre) matmul_gelu_forward(g->out + ro, g->pre + ro, g->in + ri, g->W, g->b, n, g->IC, g->OC);
    else if (!g->bwd) matmul_forward(g->out + ro, g->in + ri, g->W, g->b, n, g->IC, g->OC);
    else if (g->pre) gelu_matmul_backward(g->out + ri, g->dW, g->db, g->dout + ro, g->in + ri, g->W, g->pre + ri, n, g->IC, g->OC);
    else matmul_backward(g->out + ri, g->dW, g->db, g->dout + ro, g->in + ri, g->W, n, g->IC, g->OC);
}

/* sp: the GEMM writes partial sums [N, C] into g->out piece by piece, which
 * are reduce-scattered into local (piece k - 1 travels while piece k computes) */
static void gemm_reduce_scatter(GPT* m, Comm* c, SiteKind rs, int layer, const Gemm* g, floatX* local) {
    const int N = m->B * m->T, K = tp_segments(c), rows = N / K;
    TpSeg x;
    tp_rs_begin(c, &x, rs, layer, g->out, local, N, m->pl.s.C);
    for (int k = 0; k < K; k++) {
        gemm_rows(g, (size_t)k * rows, rows);
        tp_rs_ready(c, &x, k);
        if (k > 0) tp_rs_post(c, &x, k - 1);
    }
    tp_rs_post(c, &x, K - 1);
    tp_rs_end(c, &x);
}

/* sp: local's rows gathered into full ([N, C], the GEMM's input or its
 * dout), the GEMM running on each piece once it is in */
static void all_gather_gemm(GPT* m, Comm* c, SiteKind ag, int layer, const floatX* local, floatX* full, const Gemm* g) {
    const int N = m->B * m->T, K = tp_segments(c), rows = N / K;
    TpSeg x;
    tp_ag_begin(c, &x, ag, layer, local, full, N, m->pl.s.C);
    for (int k = 0; k < K; k++) {
        tp_ag_wait(c, &x, k);
        gemm_rows(g, (size_t)k * rows, rows);
    }
    tp_ag_end(c, &x);
}

static void colpar_forward(GPT* m, Comm* c, SiteKind ag, int layer, floatX* in, const Gemm* g) {
    if (m->sp) all_gather_gemm(m, c, ag, layer, m->xloc, in, g);
    else gemm_rows(g, 0, m->B * m->T);
}

void gpt_colpar_forward(GPT* m, Comm* c, SiteKind ag, int layer, floatX* out, floatX* in, const floatX* W,
                        const floatX* b, int OC) {
    const Gemm g = {.out = out, .in = in, .W = W, .b = b, .IC = m->pl.s.C, .OC = OC};
    colpar_forward(m, c, ag, layer, in, &g);
}

/* GPT-2's fc: out = gelu(pre), pre = in W^T + b kept for the backward */
static void colpar_forward_gelu(GPT* m, Comm* c, SiteKind ag, int layer, floatX* out, floatX* pre, floatX* in,
                                const floatX* W, const floatX* b, int OC) {
    const Gemm g = {.out = out, .in = in, .W = W, .b = b, .pre = pre, .IC = m->pl.s.C, .OC = OC};
    colpar_forward(m, c, ag, layer, in, &g);
}

void gpt_rowpar_forward(GPT* m, Comm* c, SiteKind ar, SiteKind rs, int layer, floatX* out, const floatX* in,
                        const floatX* W, int IC) {
    const Gemm g = {.out = gpt_partial(m, out), .in = in, .W = W, .IC = IC, .OC = m->pl.s.C};
    if (m->sp) {
        gemm_reduce_scatter(m, c, rs, layer, &g, out);
        return;
    }
    gemm_rows(&g, 0, m->B * m->T);
    tp_exchange(c, ar, layer, out, m->B * m->T, m->pl.s.C);
}

/* pre: NULL, or the GELU input whose output is `in` (din through GELU's derivative) */
static void rowpar_backward(GPT* m, Comm* c, SiteKind ag, int layer, floatX* din, float* dW, const floatX* in,
                            floatX* pre, const floatX* W, int IC) {
    const Gemm g = {.bwd = 1, .out = din, .in = in, .W = W, .dout = m->sp ? m->xfull : m->dres, .dW = dW,
                    .pre = pre, .IC = IC, .OC = m->pl.s.C};
    if (m->sp) all_gather_gemm(m, c, ag, layer, m->dres, m->xfull, &g);
    else gemm_rows(&g, 0, m->B * m->T);
}

void gpt_rowpar_backward(GPT* m, Comm* c, SiteKind ag, int layer, floatX* din, float* dW, const floatX* in,
                         const floatX* W, int IC) {
    rowpar_backward(m, c, ag, layer, din, dW, in, NULL, W, IC);
}

/* GPT-2's fcproj: in = gelu(pre), din = d pre */
static void rowpar_backward_gelu(GPT* m, Comm* c, SiteKind ag, int layer, floatX* din, float* dW, const floatX* in,
                                 floatX* pre, const floatX* W, int IC) {
    rowpar_backward(m, c, ag, layer, din, dW, in, pre, W, IC);
}

const floatX* gpt_colpar_backward(GPT* m, Comm* c, SiteKind ar, SiteKind rs, int layer, float* dW, float* db,
                                  const floatX* dout, const floatX* in, const floatX* W, int OC) {
    const Gemm g = {.bwd = 1, .out = m->dln, .in = in, .W = W, .dout = dout, .dW = dW, .db = db,
                    .IC = m->pl.s.C, .OC = OC};
    if (m->sp) {
        gemm_reduce_scatter(m, c, rs, layer, &g, m->dloc);
        return m->dloc;
    }
    gemm_rows(&g, 0, m->B * m->T);
    tp_exchange(c, ar, layer, m->dln, m->B * m->T, m->pl.s.C);
    return m->dln;
}

void gpt_replicated_grads(GPT* m, Comm* c) {
    if (!m->sp) return;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        if (!m->pl.sharded[t] && m->pl.local[t]) tp_allreduce_sum(c, TENSOR(m->grads, t), m->pl.local[t]);
}

/* this rank's squared gradient norm into m->step->sumsq, queued: one sum
 * per run of counted tensors that lie back to back in the gradient buffer
 * (all of them at one rank), since each sum costs two launches and a few
 * microseconds of latency whatever its size */
static void grad_sumsq_queue(const GPT* m, int count_replicated) {
    ops_zero(&m->step->sumsq, sizeof(double));
    size_t start = 0, len = 0; /* the run being gathered */
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if ((!m->pl.sharded[t] && !count_replicated) || !m->pl.local[t]) continue;
        if (len && m->pl.offset[t] != start + len) {
            ops_sumsq_acc(&m->step->sumsq, m->grads + start, len);
            len = 0;
        }
        if (!len) start = m->pl.offset[t];
        len += m->pl.local[t];
    }
    if (len) ops_sumsq_acc(&m->step->sumsq, m->grads + start, len);
}

double gpt_grad_sumsq(const GPT* m, int count_replicated) {
    grad_sumsq_queue(m, count_replicated);
    double ss;
    ops_to_host(&ss, &m->step->sumsq, sizeof(ss));
    return ss;
}

void gpt_grad_clip(GPT* m, Comm* c, float grad_clip) {
    grad_sumsq_queue(m, c->tp_rank == 0);
    if (c->world_size > 1 && !comm_sum_step_dev(c, &m->step->sumsq, &m->step->loss)) {
        StepScalars h;
        ops_to_host(&h, m->step, sizeof(h));
        h.sumsq = comm_sum_double(c->tp_comm, h.sumsq);
        h.loss = (float)(comm_sum_double(c->dp_comm, h.loss) / c->dp_size);
        ops_from_host(m->step, &h, sizeof(h));
    }
    ops_grad_clip(m->step, grad_clip);
}

_Static_assert(NUM_PARAM_TENSORS <= ADAMW_MAX_TENSORS, "one adamw_update_tensors call takes every tensor");

void gpt_update(GPT* m, float beta1, float beta2, float eps, float weight_decay) {
    float wd[NUM_PARAM_TENSORS];
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) wd[k] = m->pl.decayed[k] ? weight_decay : 0.0f;
    adamw_update_tensors(m->master, m->params, m->grads, m->adam_m, m->adam_v, NUM_PARAM_TENSORS, m->pl.offset,
                         m->pl.local, wd, m->step, beta1, beta2, eps);
}

void gpt_logits_row(GPT* m, Comm* c, int n, float* full_logits) {
    int Vr = m->Vr;
    float* slice = mallocCheck((size_t)Vr * sizeof(float));
    ops_X_to_f32(m->logit_row, m->logits + (size_t)n * Vr, (size_t)Vr);
    ops_to_host(slice, m->logit_row, (size_t)Vr * sizeof(float));
    float* all = mallocCheck((size_t)m->pl.s.Vp * sizeof(float));
    wd_allgather(slice, Vr, MPI_FLOAT, all, c->tp_comm, "gathering a logits row (sampling)");
    memcpy(full_logits, all, (size_t)m->pl.s.V * sizeof(float));
    free(all);
    free(slice);
}
