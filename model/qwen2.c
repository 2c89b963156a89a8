/*
 * model/qwen2.c - forward and backward pass of tensor-parallel Qwen2
 * (model.arch = "qwen2"), as transformers' Qwen2ForCausalLM computes it.
 *
 * One layer, with P = TP degree, N = B*T rows, NHr = NH/P query heads and
 * KVr = KV/P kv heads of hs each, Fr = d_ff/P:
 *
 *   ln1  = RMSNorm(x)                          replicated
 *   qkv  = ln1 @ qkvw^T + qkvb [N,(NHr+2KVr)hs] column-parallel (local heads)
 *   q,k  = RoPE(q), RoPE(k)                    in place
 *   atty = attention(qkv)      [N,NHr*hs]      grouped-query, local heads
 *   a    = atty @ oprojw^T     [N,C]           row-parallel: partial sums
 *   a    = EXCHANGE attn.fwd (a)               (no bias)
 *   res2 = x + a
 *   ln2  = RMSNorm(res2)
 *   gu   = ln2 @ gateupw^T     [N,2Fr]         column-parallel (gate | up)
 *   h    = silu(gate) * up     [N,Fr]
 *   f    = h @ downw^T         [N,C]           row-parallel: partial sums
 *   f    = EXCHANGE mlp.fwd (f)
 *   res3 = res2 + f
 *
 * Around the layers: the vocab-parallel embedding (no positions: RoPE
 * carries them) exchanged at embed.fwd, the final RMSNorm, the LM head
 * (wte when tied, lmhead otherwise; vocab-parallel) and the shared
 * cross-entropy. The same named sites as GPT-2 (model/gpt.c), so every
 * compressor, the policy and the statistics apply unchanged; with
 * parallel.sp the same reduce-scatters and all-gathers of rows as GPT-2
 * (the helpers of model/gpt.c), RoPE and attention staying on all N rows.
 *
 * Both builds run it: the CPU ops (ops/ops_cpu.c, ops_cpu_qwen2.c) and the
 * CUDA ones (ops/attention_cuda.cu, layernorm_cuda.cu, rope_cuda.cu,
 * swiglu_cuda.cu) implement every op it calls.
 */
#include "model/gpt.h"

/* the LM head's weights: wte when tied */
static floatX* head_weights(GPT* m, floatX* P) { return m->pl.s.tied ? TENSOR(P, Q_WTE) : TENSOR(P, Q_LMHEAD); }
static float* head_grads(GPT* m, float* G) { return m->pl.s.tied ? TENSOR(G, Q_WTE) : TENSOR(G, Q_LMHEAD); }

void qwen2_forward(GPT* m, Comm* c) {
    const GPTShape* s = &m->pl.s;
    int B = m->B, T = m->T, C = s->C, N = B * T, R = m->R;
    floatX* P = m->params;

    gpt_embed_forward(m, c, TENSOR(P, Q_WTE));

    for (int l = 0; l < s->L; l++) {
        LayerActs* a = &m->acts[l];
        floatX* x = l == 0 ? m->x0 : m->acts[l - 1].res3;
        rmsnorm_forward(gpt_norm_out(m, a->ln1), a->ln1_rstd, x, LAYER(P, Q_LN1W, l), R, C, s->norm_eps);
        gpt_colpar_forward(m, c, SITE_ATTN_AG, l, a->qkv, a->ln1, LAYER(P, Q_QKVW, l), LAYER(P, Q_QKVB, l), m->QKVr);
        rope_forward(a->qkv, B, T, m->QKVr, m->NHr + m->KVr, m->hs, s->rope_theta);   /* q heads, then k heads */
        attention_gqa_forward(a->atty, a->lse, a->qkv, B, T, m->NHr, m->KVr, m->hs);
        gpt_rowpar_forward(m, c, SITE_ATTN_FWD, SITE_ATTN_RS, l, a->attproj, a->atty, LAYER(P, Q_OPROJW, l), m->Cr);
        residual_forward(a->res2, x, a->attproj, (size_t)R * C);

        rmsnorm_forward(gpt_norm_out(m, a->ln2), a->ln2_rstd, a->res2, LAYER(P, Q_LN2W, l), R, C, s->norm_eps);
        gpt_colpar_forward(m, c, SITE_MLP_AG, l, a->fch, a->ln2, LAYER(P, Q_GATEUPW, l), NULL, m->FCr);
        swiglu_forward(a->fch_gelu, a->fch, N, m->Fr);
        gpt_rowpar_forward(m, c, SITE_MLP_FWD, SITE_MLP_RS, l, a->fcproj, a->fch_gelu, LAYER(P, Q_DOWNW, l), m->Fr);
        residual_forward(a->res3, a->res2, a->fcproj, (size_t)R * C);
    }

    floatX* last = m->acts[s->L - 1].res3;
    rmsnorm_forward(gpt_norm_out(m, m->lnf), m->lnf_rstd, last, TENSOR(P, Q_NORMW), R, C, s->norm_eps);
    gpt_colpar_forward(m, c, SITE_LMHEAD_AG, -1, m->logits, m->lnf, head_weights(m, P), NULL, m->Vr);
    gpt_head_loss(m, c);
}

void qwen2_backward(GPT* m, Comm* c) {
    const GPTShape* s = &m->pl.s;
    int B = m->B, T = m->T, C = s->C, N = B * T, R = m->R;
    floatX* P = m->params;
    float* G = m->grads;

    const floatX* dl = gpt_head_backward(m, c, head_weights(m, P), head_grads(m, G));
    floatX* last = m->acts[s->L - 1].res3;
    rmsnorm_backward(m->dres, TENSOR(G, Q_NORMW), dl, last, TENSOR(P, Q_NORMW), m->lnf_rstd, R, C);

    for (int l = s->L - 1; l >= 0; l--) {
        LayerActs* a = &m->acts[l];
        floatX* x = l == 0 ? m->x0 : m->acts[l - 1].res3;
        /* MLP: res3 = res2 + down(silu(gate) * up) */
        gpt_rowpar_backward(m, c, SITE_MLP_RS_BWD, l, m->dfch_gelu, LAYER(G, Q_DOWNW, l), a->fch_gelu, LAYER(P, Q_DOWNW, l),
                            m->Fr);
        swiglu_backward(m->dfch, a->fch, m->dfch_gelu, N, m->Fr);
        dl = gpt_colpar_backward(m, c, SITE_MLP_BWD, SITE_MLP_AG_BWD, l, LAYER(G, Q_GATEUPW, l), NULL, m->dfch, a->ln2,
                                 LAYER(P, Q_GATEUPW, l), m->FCr);
        rmsnorm_backward(m->dres, LAYER(G, Q_LN2W, l), dl, a->res2, LAYER(P, Q_LN2W, l), a->ln2_rstd, R, C);
        /* attention: res2 = x + oproj(attention(rope(qkv))) */
        gpt_rowpar_backward(m, c, SITE_ATTN_RS_BWD, l, m->datty, LAYER(G, Q_OPROJW, l), a->atty, LAYER(P, Q_OPROJW, l),
                            m->Cr);
        attention_gqa_backward(m->dqkv, m->datty, a->qkv, a->atty, a->lse, B, T, m->NHr, m->KVr, m->hs);
        rope_backward(m->dqkv, B, T, m->QKVr, m->NHr + m->KVr, m->hs, s->rope_theta);
        dl = gpt_colpar_backward(m, c, SITE_ATTN_BWD, SITE_ATTN_AG_BWD, l, LAYER(G, Q_QKVW, l), LAYER(G, Q_QKVB, l), m->dqkv,
                                 a->ln1, LAYER(P, Q_QKVW, l), m->QKVr);
        rmsnorm_backward(m->dres, LAYER(G, Q_LN1W, l), dl, x, LAYER(P, Q_LN1W, l), a->ln1_rstd, R, C);
    }
    norm_backward_finish(); /* the last norm's dw (ops.h) */
    encoder_backward(TENSOR(G, Q_WTE), gpt_grad_in(m, c, SITE_EMBED_RS_BWD, -1), m->plan, N, C, m->Vr);
    gpt_replicated_grads(m, c);
}
