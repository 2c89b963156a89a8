/*
 * model/gpt.c - forward and backward pass of tensor-parallel GPT-2.
 *
 * One layer, with P = TP degree, N = B*T rows, Cr = C/P, Fr = 4C/P:
 *
 *   ln1  = LN(x)                               replicated
 *   qkv  = ln1 @ qkvw^T + qkvb      [N,3Cr]    column-parallel (local heads)
 *   atty = attention(qkv)           [N,Cr]     local heads
 *   a    = atty @ attprojw^T        [N,C]      row-parallel: partial sums
 *   a    = EXCHANGE attn.fwd (a) + attprojb    all-reduce, then the bias once
 *   res2 = x + a
 *   ln2  = LN(res2)
 *   h    = gelu(ln2 @ fcw^T + fcb)  [N,Fr]     column-parallel
 *   f    = h @ fcprojw^T            [N,C]      row-parallel: partial sums
 *   f    = EXCHANGE mlp.fwd (f) + fcprojb
 *   res3 = res2 + f
 *
 * The backward mirrors it: the gradients into ln2 and ln1 are partial sums
 * over the column-parallel weights, so they are exchanged too (mlp.bwd,
 * attn.bwd). Around the layers: the vocab-parallel embedding is exchanged
 * forward (embed.fwd) and the LM head's input gradient backward
 * (lm_head.bwd); the cross-entropy needs three small exact all-reduces.
 * That is 4 big exchanges per layer per step, all visible below.
 */
#include "model/gpt.h"

#include <stdlib.h>
#include <string.h>

#include "comm/watchdog.h"
#include "common/check.h"
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

void gpt_init(GPT* m, GPTShape s, int tp_size, int tp_rank, int B, int T) {
    memset(m, 0, sizeof(*m));
    params_layout(&m->pl, s, tp_size, tp_rank);
    m->B = B;
    m->T = T;
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

    size_t N = (size_t)B * T, C = (size_t)s.C;
    m->tok = take(N * sizeof(int));
    m->tgt = take(N * sizeof(int));
    m->x0 = take(N * C * sizeof(floatX));
    m->acts = callocCheck((size_t)s.L, sizeof(LayerActs));
    for (int l = 0; l < s.L; l++) {
        LayerActs* a = &m->acts[l];
        a->ln1 = take(N * C * sizeof(floatX));
        a->qkv = take(N * m->QKVr * sizeof(floatX));
        a->atty = take(N * m->Cr * sizeof(floatX));
        a->attproj = take(N * C * sizeof(floatX));
        a->res2 = take(N * C * sizeof(floatX));
        a->ln2 = take(N * C * sizeof(floatX));
        a->fch = take(N * m->FCr * sizeof(floatX));
        a->fch_gelu = take(N * m->Fr * sizeof(floatX));
        a->fcproj = take(N * C * sizeof(floatX));
        a->res3 = take(N * C * sizeof(floatX));
        a->ln1_mean = take(N * sizeof(float));
        a->ln1_rstd = take(N * sizeof(float));
        a->ln2_mean = take(N * sizeof(float));
        a->ln2_rstd = take(N * sizeof(float));
        a->lse = take((size_t)B * m->NHr * T * sizeof(float));
    }
    m->lnf = take(N * C * sizeof(floatX));
    m->logits = take(N * m->Vr * sizeof(floatX));
    m->lnf_mean = take(N * sizeof(float));
    m->lnf_rstd = take(N * sizeof(float));
    m->ce_mx = take(N * sizeof(float));
    m->ce_stats = take(2 * N * sizeof(float));
    m->losses = take(N * sizeof(float));
    m->dres = take(N * C * sizeof(floatX));
    m->dln = take(N * C * sizeof(floatX));
    m->dfch = take(N * m->FCr * sizeof(floatX));
    m->dfch_gelu = take(N * m->Fr * sizeof(floatX));
    m->datty = take(N * m->Cr * sizeof(floatX));
    m->dqkv = take(N * m->QKVr * sizeof(floatX));
    m->logit_row = take((size_t)m->Vr * sizeof(float));
}

size_t gpt_backend_bytes(GPTShape s, int tp_size, int tp_rank, int B, int T) {
    GPT m;
    counting = 1;
    counted = 0;
    gpt_init(&m, s, tp_size, tp_rank, B, T);
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
    ops_free(m->x0);
    for (int l = 0; l < m->pl.s.L; l++) {
        LayerActs* a = &m->acts[l];
        floatX* xs[] = {a->ln1, a->qkv, a->atty, a->attproj, a->res2, a->ln2, a->fch, a->fch_gelu, a->fcproj, a->res3};
        float* fs[] = {a->ln1_mean, a->ln1_rstd, a->ln2_mean, a->ln2_rstd, a->lse};
        for (size_t k = 0; k < sizeof(xs) / sizeof(xs[0]); k++) ops_free(xs[k]);
        for (size_t k = 0; k < sizeof(fs) / sizeof(fs[0]); k++) ops_free(fs[k]);
    }
    free(m->acts);
    floatX* xs[] = {m->lnf, m->logits, m->dres, m->dln, m->dfch, m->dfch_gelu, m->datty, m->dqkv};
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

float gpt_forward(GPT* m, Comm* c, const int* inputs, const int* targets) {
    if (m->pl.s.arch == ARCH_QWEN2) return qwen2_forward(m, c, inputs, targets);
    const GPTShape* s = &m->pl.s;
    int B = m->B, T = m->T, C = s->C, N = B * T;
    floatX* P = m->params;

    gpt_embed_forward(m, c, inputs, TENSOR(P, P_WTE));
    position_forward(m->x0, TENSOR(P, P_WPE), B, T, C);

    for (int l = 0; l < s->L; l++) {
        LayerActs* a = &m->acts[l];
        floatX* x = l == 0 ? m->x0 : m->acts[l - 1].res3;
        layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, LAYER(P, P_LN1W, l), LAYER(P, P_LN1B, l), N, C);
        matmul_forward(a->qkv, a->ln1, LAYER(P, P_QKVW, l), LAYER(P, P_QKVB, l), N, C, 3 * m->Cr);
        attention_forward(a->atty, a->lse, a->qkv, B, T, m->NHr, m->hs);
        matmul_forward(a->attproj, a->atty, LAYER(P, P_ATTPROJW, l), NULL, N, m->Cr, C);
        tp_exchange(c, SITE_ATTN_FWD, l, a->attproj, N, C);
        bias_forward(a->attproj, LAYER(P, P_ATTPROJB, l), N, C);
        residual_forward(a->res2, x, a->attproj, (size_t)N * C);

        layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, LAYER(P, P_LN2W, l), LAYER(P, P_LN2B, l), N, C);
        matmul_forward(a->fch, a->ln2, LAYER(P, P_FCW, l), LAYER(P, P_FCB, l), N, C, m->Fr);
        gelu_forward(a->fch_gelu, a->fch, (size_t)N * m->Fr);
        matmul_forward(a->fcproj, a->fch_gelu, LAYER(P, P_FCPROJW, l), NULL, N, m->Fr, C);
        tp_exchange(c, SITE_MLP_FWD, l, a->fcproj, N, C);
        bias_forward(a->fcproj, LAYER(P, P_FCPROJB, l), N, C);
        residual_forward(a->res3, a->res2, a->fcproj, (size_t)N * C);
    }

    floatX* last = m->acts[s->L - 1].res3;
    layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, last, TENSOR(P, P_LNFW), TENSOR(P, P_LNFB), N, C);
    matmul_forward(m->logits, m->lnf, TENSOR(P, P_WTE), NULL, N, C, m->Vr);
    return gpt_head_loss(m, c, targets);
}

float gpt_head_loss(GPT* m, Comm* c, const int* targets) {
    if (!targets) return 0.0f;
    const GPTShape* s = &m->pl.s;
    int N = m->B * m->T;
    /* vocab-parallel cross-entropy: global max, then global sum of exp and
     * target logit; the backward (softmax - onehot) / N is fused in. */
    ops_from_host(m->tgt, targets, (size_t)N * sizeof(int));
    crossentropy_max(m->ce_mx, m->logits, N, m->Vr, m->v0, s->V);
    tp_allreduce_small(c, m->ce_mx, (size_t)N, MPI_MAX);
    crossentropy_stats(m->ce_stats, m->logits, m->ce_mx, m->tgt, N, m->Vr, m->v0, s->V);
    tp_allreduce_small(c, m->ce_stats, 2 * (size_t)N, MPI_SUM);
    crossentropy_backward(m->logits, m->losses, m->ce_mx, m->ce_stats, m->tgt, N, m->Vr, m->v0, s->V, 1.0f / (float)N);
    return (float)(ops_sum(m->losses, (size_t)N) / N);
}

void gpt_zero_grad(GPT* m) { ops_zero(m->grads, m->pl.total * sizeof(float)); }

void gpt_backward(GPT* m, Comm* c) {
    if (m->pl.s.arch == ARCH_QWEN2) {
        qwen2_backward(m, c);
        return;
    }
    const GPTShape* s = &m->pl.s;
    int B = m->B, T = m->T, C = s->C, N = B * T;
    floatX* P = m->params;
    float* G = m->grads;

    gpt_head_backward(m, c, TENSOR(P, P_WTE), TENSOR(G, P_WTE)); /* tied to wte */
    floatX* last = m->acts[s->L - 1].res3;
    layernorm_backward(m->dres, TENSOR(G, P_LNFW), TENSOR(G, P_LNFB), m->dln, last, TENSOR(P, P_LNFW),
                       m->lnf_mean, m->lnf_rstd, N, C);

    /* m->dres carries the residual stream's gradient down through the layers */
    for (int l = s->L - 1; l >= 0; l--) {
        LayerActs* a = &m->acts[l];
        floatX* x = l == 0 ? m->x0 : m->acts[l - 1].res3;
        /* MLP: res3 = res2 + fcproj + fcprojb */
        bias_backward(LAYER(G, P_FCPROJB, l), m->dres, N, C);
        matmul_backward(m->dfch_gelu, LAYER(G, P_FCPROJW, l), NULL, m->dres, a->fch_gelu, LAYER(P, P_FCPROJW, l), N, m->Fr, C);
        gelu_backward(m->dfch, a->fch, m->dfch_gelu, (size_t)N * m->Fr);
        matmul_backward(m->dln, LAYER(G, P_FCW, l), LAYER(G, P_FCB, l), m->dfch, a->ln2, LAYER(P, P_FCW, l), N, C, m->Fr);
        tp_exchange(c, SITE_MLP_BWD, l, m->dln, N, C);
        layernorm_backward(m->dres, LAYER(G, P_LN2W, l), LAYER(G, P_LN2B, l), m->dln, a->res2, LAYER(P, P_LN2W, l),
                           a->ln2_mean, a->ln2_rstd, N, C);
        /* attention: res2 = x + attproj + attprojb */
        bias_backward(LAYER(G, P_ATTPROJB, l), m->dres, N, C);
        matmul_backward(m->datty, LAYER(G, P_ATTPROJW, l), NULL, m->dres, a->atty, LAYER(P, P_ATTPROJW, l), N, m->Cr, C);
        attention_backward(m->dqkv, m->datty, a->qkv, a->atty, a->lse, B, T, m->NHr, m->hs);
        matmul_backward(m->dln, LAYER(G, P_QKVW, l), LAYER(G, P_QKVB, l), m->dqkv, a->ln1, LAYER(P, P_QKVW, l), N, C, 3 * m->Cr);
        tp_exchange(c, SITE_ATTN_BWD, l, m->dln, N, C);
        layernorm_backward(m->dres, LAYER(G, P_LN1W, l), LAYER(G, P_LN1B, l), m->dln, x, LAYER(P, P_LN1W, l),
                           a->ln1_mean, a->ln1_rstd, N, C);
    }
    /* embeddings: the gradient wrt x0 feeds wpe (replicated) and this rank's wte rows */
    position_backward(TENSOR(G, P_WPE), m->dres, B, T, C);
    encoder_backward(TENSOR(G, P_WTE), m->dres, m->tok, N, C, m->v0, m->Vr);
}

void gpt_embed_forward(GPT* m, Comm* c, const int* inputs, const floatX* wte) {
    const int N = m->B * m->T, C = m->pl.s.C;
    ops_from_host(m->tok, inputs, (size_t)N * sizeof(int));
    encoder_forward(m->x0, m->tok, wte, N, C, m->v0, m->Vr);
    tp_exchange(c, SITE_EMBED_FWD, -1, m->x0, N, C);
}

void gpt_head_backward(GPT* m, Comm* c, const floatX* W, float* dW) {
    const int N = m->B * m->T, C = m->pl.s.C;
    matmul_backward(m->dln, dW, NULL, m->logits, m->lnf, W, N, C, m->Vr);
    tp_exchange(c, SITE_LMHEAD_BWD, -1, m->dln, N, C);
    ops_zero(m->dres, (size_t)N * C * sizeof(floatX));
}

double gpt_grad_sumsq(const GPT* m, int count_replicated) {
    double ss = 0.0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        if (!m->pl.sharded[t] && !count_replicated) continue;
        ss += ops_sumsq(TENSOR(m->grads, t), m->pl.local[t]);
    }
    return ss;
}

void gpt_update(GPT* m, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        size_t off = m->pl.offset[k];
        adamw_update(m->master + off, m->params + off, m->grads + off, m->adam_m + off, m->adam_v + off,
                     m->pl.local[k], lr, beta1, beta2, eps, m->pl.decayed[k] ? weight_decay : 0.0f, grad_scale, t);
    }
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
