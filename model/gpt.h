/*
 * model/gpt.h - a GPT-2 model sharded over tensor-parallel ranks.
 *
 * Owns this rank's parameter shards (working copy floatX, fp32 master,
 * fp32 grads, AdamW moments) and the activations of one batch. The forward
 * and backward passes in gpt.c are sequences of ops (ops/ops.h) and named
 * TP exchanges (tp_exchange, comm/sites.h).
 */
#ifndef GPT_H
#define GPT_H

#include "comm/sites.h"
#include "model/params.h"
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* per layer; qwen2 uses the same buffers (model/qwen2.c): ln1/ln2 are the
 * RMSNorm outputs (the *_mean buffers unused), fch the gate|up GEMM output
 * and fch_gelu SwiGLU's output. With sequence parallelism attproj, res2,
 * fcproj, res3 and the norms' statistics hold R = N/P rows; ln1 and ln2 the
 * gathered N rows (the column-parallel GEMMs' inputs, kept for their
 * backward) */
typedef struct {
    floatX *ln1, *qkv, *atty, *attproj, *res2, *ln2, *fch, *fch_gelu, *fcproj, *res3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
} LayerActs;

typedef struct {
    ParamLayout pl;
    int B, T;                 /* the batch the activations are sized for */
    int sp, R;                /* sequence parallelism (parallel.sp); R = the rows of the norm and residual
                                 region held here: N/P with sp (comm/sp.h says which), else N */
    int Cr, Fr, NHr, hs;      /* this rank's attention width, MLP width, heads, head size */
    int KVr, QKVr, FCr;       /* kv heads, q+k+v width, first MLP GEMM's width (qwen2: 2 Fr) */
    int Vr, v0;               /* this rank's vocab slice [v0, v0+Vr) */
    /* parameters (backend memory), one flat buffer each */
    floatX* params;           /* working weights (== master on the CPU build) */
    float* master;            /* fp32 master weights */
    float* grads;
    float* adam_m;
    float* adam_v;
    /* activations (backend memory) */
    int* tok;                 /* inputs  [B*T] */
    int* tgt;                 /* targets [B*T] */
    int* plan;                /* encoder_backward's plan of the batch (ops/encoder_plan.h) */
    StepScalars* step;        /* the training step's scalars: loss, norm, clip, AdamW's lr (ops.h) */
    /* the staged batch and step (host memory the backend copies from without
     * waiting: pinned on the GPU): gpt_stage writes them, the step's queued
     * copies read them; step_host also receives the step's results */
    int *tok_host, *tgt_host, *plan_host;
    int staged_targets;       /* the staged batch has targets (and a plan) */
    StepScalars* step_host;
    floatX* x0;               /* embeddings [N,C] */
    LayerActs* acts;          /* [L] */
    floatX *lnf, *logits;     /* [N,C], [N,Vr] (dlogits after a forward with targets) */
    float *lnf_mean, *lnf_rstd, *ce_mx, *ce_stats, *losses;
    /* backward scratch */
    floatX *dres, *dln, *dfch, *dfch_gelu, *datty, *dqkv;
    /* sp only: a full [N,C] tensor of partial sums before a reduce-scatter
     * or of gathered gradients; a norm's output rows [R,C] before their
     * all-gather; a gradient's rows [R,C] after its reduce-scatter */
    floatX *xfull, *xloc, *dloc;
    float* logit_row;         /* [Vr] fp32, backend: for sampling */
} GPT;

/* Inside the model's code (a GPT* named m in scope): tensor t (layer l) in a
 * flat buffer of this rank's shards. */
#define TENSOR(buf, t) ((buf) + m->pl.offset[t])
#define LAYER(buf, t, l) (TENSOR(buf, t) + (size_t)(l) * (m->pl.local[t] / (size_t)m->pl.s.L))

/* Allocates shards and activations; the weights are zero until
 * gpt_set_params. */
void gpt_init(GPT* m, GPTShape s, int tp_size, int tp_rank, int B, int T, int sp);
/* The backend-memory bytes gpt_init would allocate (weights, gradients,
 * moments, activations), counted by running its allocations without
 * allocating. The shape must have passed params_shape_check. */
size_t gpt_backend_bytes(GPTShape s, int tp_size, int tp_rank, int B, int T, int sp);
void gpt_free(GPT* m);
/* Load this rank's shard from a full fp32 model (host, llm.c layout). */
void gpt_set_params(GPT* m, float* full);

/* model.init = "auto" draws on the device (GPU build) from this many
 * parameters on. Below it - GPT-2 124M and every test model - both builds
 * use the host init and so start from the same bits, which the CPU-vs-GPU
 * tests rely on; above it the host init costs seconds of CPU time and the
 * whole fp32 model in host memory on every rank (1.4 GB at 350M). */
#define GPT_INIT_DEVICE_MIN_PARAMS 300000000ull

/* Random weights from seed, drawn where init (a validated model.init:
 * "host", "device" or "auto") says: on the host, params_init_full sliced by
 * gpt_set_params; on the device, gpt_init_device. Either way every TP degree
 * starts from the same full model; host and device give different values of
 * the same distributions. Returns what ran, for the log: "host (counter
 * hash)" or "device (cuRAND Philox)". */
const char* gpt_init_random(GPT* m, const char* init, unsigned long long seed);
#ifdef OPS_BF16
/* The device init (model/init_cuda.h) into the master weights, then the bf16
 * working copy from them. */
void gpt_init_device(GPT* m, unsigned long long seed);
#endif
/* This rank's fp32 master shard copied to host (pl.total floats). */
void gpt_get_shard(const GPT* m, float* host);
void gpt_set_shard(GPT* m, const float* host);

/* The batch to the host staging (inputs, targets: host int[B*T]; targets
 * may be NULL), and with targets encoder_backward's plan of it. Waits for
 * the device first, so that no queued copy still reads the staging; the
 * device part of a step starts after it (gpt_forward_staged). */
void gpt_stage(GPT* m, const int* inputs, const int* targets);
/* The host's part of the step's scalars (m->step_host): the learning rate
 * and AdamW's bias corrections at the 1-based step t. Called after
 * gpt_stage, whose wait keeps it from rewriting what a queued copy still
 * reads; the step's first queued copy takes it in (train/main.c). */
void gpt_stage_step(GPT* m, float lr, float beta1, float beta2, int t);
/* Forward over the staged batch: queues the copies of the staging and the
 * forward, without waiting for the device where TP = 1. With targets: the
 * mean loss into m->step->loss and dlogits ready for gpt_backward; without:
 * the logits. */
void gpt_forward_staged(GPT* m, Comm* c);
/* gpt_stage + gpt_forward_staged, then the loss (0 without targets) read
 * back: evaluation, sampling and the tests. */
float gpt_forward(GPT* m, Comm* c, const int* inputs, const int* targets);
void gpt_zero_grad(GPT* m);
void gpt_backward(GPT* m, Comm* c);
/* sum of squared grads, returned to the host; replicated tensors only if
 * count_replicated */
double gpt_grad_sumsq(const GPT* m, int count_replicated);
/* The step's global gradient norm and loss into m->step, and from them the
 * clip scale and the skip flag (ops_grad_clip). This rank's squared norm is
 * summed on the device (replicated tensors counted on TP rank 0 only); with
 * more than one rank the sums over TP (norm) and DP (loss) are doubles added
 * in rank order: on the device with the NCCL backend (comm_sum_step_dev),
 * else on the host (comm_sum_double), the step's one wait for the device. */
void gpt_grad_clip(GPT* m, Comm* c, float grad_clip);
/* AdamW on every tensor, with the scalars of m->step (skipped when skip) */
void gpt_update(GPT* m, float beta1, float beta2, float eps, float weight_decay);
/* Shared by the architectures: the vocab-parallel cross-entropy over
 * m->logits against the staged targets, the mean loss into m->step->loss,
 * leaving dlogits (nothing without targets). */
void gpt_head_loss(GPT* m, Comm* c);
/* Shared: the vocab-parallel embedding of wte (this rank's rows) into m->x0,
 * summed over TP at embed.fwd. */
void gpt_embed_forward(GPT* m, Comm* c, const floatX* wte);
/* Its backward, shared too: dW += dlogits^T lnf, the gradient wrt lnf (a
 * partial sum over vocab slices, exchanged at lm_head.bwd / lm_head.ag.bwd)
 * returned as this rank's R rows, and m->dres zeroed for the final norm's
 * backward to add into. W / dW: the LM
 * head's weights and gradient (wte's when tied). */
const floatX* gpt_head_backward(GPT* m, Comm* c, const floatX* W, float* dW);
/* Shared: the GEMMs and exchanges around the norm and residual region, for
 * both layouts (model/gpt.c says what each does with and without sp):
 * norm_out is where a norm writes its output bound for the column-parallel
 * GEMM whose input is `full`; partial / reduce write and sum the
 * embedding's partial sums; grad_in is the residual gradient over all N
 * rows (the embedding's backward). The GEMMs: column-parallel out[N,OC] =
 * in[N,C] W^T + b after the gather into in; row-parallel out = in[N,IC]
 * W^T, summed into out (R rows); their backwards, the column-parallel one
 * returning the summed input gradient's R rows. */
floatX* gpt_norm_out(GPT* m, floatX* full);
floatX* gpt_partial(GPT* m, floatX* out);
void gpt_reduce(GPT* m, Comm* c, SiteKind ar, SiteKind rs, int layer, floatX* out);
const floatX* gpt_grad_in(GPT* m, Comm* c, SiteKind kind, int layer);
void gpt_colpar_forward(GPT* m, Comm* c, SiteKind ag, int layer, floatX* out, floatX* in, const floatX* W,
                        const floatX* b, int OC);
void gpt_rowpar_forward(GPT* m, Comm* c, SiteKind ar, SiteKind rs, int layer, floatX* out, const floatX* in,
                        const floatX* W, int IC);
void gpt_rowpar_backward(GPT* m, Comm* c, SiteKind ag, int layer, floatX* din, float* dW, const floatX* in,
                         const floatX* W, int IC);
const floatX* gpt_colpar_backward(GPT* m, Comm* c, SiteKind ar, SiteKind rs, int layer, float* dW, float* db,
                                  const floatX* dout, const floatX* in, const floatX* W, int OC);
/* sp: the replicated tensors' gradients summed over TP (each rank's are
 * over its rows); nothing without sp */
void gpt_replicated_grads(GPT* m, Comm* c);
/* model/qwen2.c: forward and backward of model.arch = "qwen2" (same
 * contract as gpt_forward_staged / gpt_backward, which call them for that
 * arch, after the staging's copies) */
void qwen2_forward(GPT* m, Comm* c);
void qwen2_backward(GPT* m, Comm* c);

/* Full-vocab logits (first V entries) of row n after a forward without
 * targets, gathered over TP into host memory. */
void gpt_logits_row(GPT* m, Comm* c, int n, float* full_logits);

#ifdef __cplusplus
}
#endif
#endif /* GPT_H */
