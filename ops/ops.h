/*
 * ops/ops.h - the numerical seam between the model and a backend.
 *
 * Every op the GPT forward/backward pass needs is a plain C function on
 * pointers. ops/ops_cpu.c implements them in fp32 (the readable reference);
 * the ops/..._cuda.cu files implement them on the GPU with bf16 activations.
 * model/gpt.c, train/ and comm/ only ever call these, so one orchestration
 * drives both backends.
 *
 * Conventions (the whole file follows them):
 *   - floatX is the activation/working-weight type: float on the CPU build,
 *     bf16 bit patterns (uint16_t) on the GPU build (-DOPS_BF16). Code outside
 *     a backend never dereferences a floatX pointer; it only passes it on.
 *   - Parameter gradients, master weights, optimizer moments and loss
 *     statistics are always fp32 (float).
 *   - All pointers live in backend memory (host for CPU, device for GPU),
 *     except where a comment says "host".
 *   - Activation gradients are OVERWRITTEN (dinp = ...), except
 *     layernorm_backward, which ACCUMULATES into dinp because its dinp is the
 *     residual stream's gradient. Parameter gradients always ACCUMULATE
 *     (dw += ...), so gradient accumulation over micro-batches works.
 *   - Dimension names: N = B*T rows, C = d_model, IC/OC = in/out channels,
 *     NH = heads held by this rank, hs = head size, Vr = vocab rows held by
 *     this rank, v0 = first global vocab id of the slice, V = real vocab size.
 */
#ifndef OPS_H
#define OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef OPS_BF16
typedef uint16_t floatX; /* bf16 bit pattern */
#else
typedef float floatX;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- memory and backend ------------------------------------------------ */
void ops_init(int local_rank);            /* pick a device (GPU) / no-op (CPU) */
const char* ops_backend_name(void);       /* "cpu-fp32" or "cuda-bf16" */
void* ops_malloc(size_t bytes);           /* zero-filled; aborts with a message on failure */
void ops_free(void* p);
void ops_zero(void* p, size_t bytes);
void ops_copy(void* dst, const void* src, size_t bytes);       /* backend -> backend */
void ops_to_host(void* host_dst, const void* src, size_t bytes);
void ops_from_host(void* dst, const void* host_src, size_t bytes);
void ops_f32_to_X(floatX* dst, const float* src, size_t n);    /* both backend memory */
void ops_X_to_f32(float* dst, const floatX* src, size_t n);    /* both backend memory */
void ops_sync(void);                      /* wait for queued work (GPU) */
/* Host memory the backend copies from and to without waiting (pinned on the
 * GPU; plain memory on the CPU), zero-filled. */
void* ops_malloc_host(size_t bytes);
void ops_free_host(void* p);
/* Queued copies between backend memory and such host memory: they return at
 * once (GPU), and the host buffer must be left alone until the next
 * ops_sync. Inside a CUDA graph (below) the copy reads or writes the host
 * buffer when the replay runs, not when it was recorded. */
void ops_from_host_async(void* dst, const void* host_src, size_t bytes);
void ops_to_host_async(void* host_dst, const void* src, size_t bytes);
/* Device memory of this rank's GPU: returns 1 with free and total bytes and
 * the device index; 0 on the CPU backend (no device memory). */
int ops_mem_info(size_t* free_bytes, size_t* total_bytes, int* device);

/* ---- embedding --------------------------------------------------------- */
/* out[n,:] = wte[tok[n]-v0,:] if v0 <= tok[n] < v0+Vr else 0 (vocab-parallel).
 * tok is int[N] in backend memory. */
void encoder_forward(floatX* out, const int* tok, const floatX* wte, int N, int C, int v0, int Vr);
/* dwte[tok[n]-v0,:] += dout[n,:] for the tokens in the slice, each row's
 * positions added in increasing n (deterministic). plan: backend int[
 * ENCODER_PLAN_INTS(N, Vr)], the batch's positions grouped by row, made on
 * the host from the token ids by encoder_plan (ops/encoder_plan.h) and
 * copied in; so the backward needs no token id back from the device. */
void encoder_backward(float* dwte, const floatX* dout, const int* plan, int N, int C, int Vr);
/* x[b,t,:] += wpe[t,:] */
void position_forward(floatX* x, const floatX* wpe, int B, int T, int C);
/* dwpe[t,:] += sum_b dx[b,t,:] */
void position_backward(float* dwpe, const floatX* dx, int B, int T, int C);

/* ---- layernorm (eps 1e-5) ---------------------------------------------- */
/* mean, rstd: float[N] saved for the backward. */
void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* w, const floatX* b, int N, int C);
/* dinp += ..., dw += ..., db += ...; and, if dsum is not NULL, dsum +=
 * the column sums of the updated dinp: the gradient of a bias added into the
 * residual stream dinp carries (the projections' biases), computed while
 * the rows are at hand instead of read again by bias_backward. */
void layernorm_backward(floatX* dinp, float* dw, float* db, float* dsum, const floatX* dout, const floatX* inp,
                        const floatX* w, const float* mean, const float* rstd, int N, int C);
/* Completes the parameter sums (dw, db, dsum) of the layernorm_backward and
 * rmsnorm_backward calls made since the last call of it. Call it once at the
 * end of a backward, before those gradients are read. The GPU adds a call's
 * per-block partial sums at the start of the next norm backward, spread
 * over the whole grid, instead of at the end of its own (ops/colsum_deferred.cuh);
 * this adds the last call's. A norm forward while sums are pending is a
 * fatal error. The CPU's sums are always complete (a no-op there). */
void norm_backward_finish(void);

/* ---- matmul: out[N,OC] = inp[N,IC] @ w[OC,IC]^T (+ bias[OC]) ------------ */
void matmul_forward(floatX* out, const floatX* inp, const floatX* w, const floatX* bias,
                    int N, int IC, int OC);          /* bias may be NULL */
/* dinp = dout @ w (skipped if dinp NULL); dw += dout^T @ inp; dbias += colsum(dout)
 * (skipped if dbias NULL). */
void matmul_backward(floatX* dinp, float* dw, float* dbias, const floatX* dout, const floatX* inp,
                     const floatX* w, int N, int IC, int OC);

/* ---- bias and residual --------------------------------------------------- */
void bias_forward(floatX* x, const floatX* bias, int N, int C);       /* x[n,:] += bias */
void bias_backward(float* dbias, const floatX* dout, int N, int C);   /* dbias += colsum */
void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n); /* out = a+b */

/* ---- GELU (tanh approximation, as GPT-2) -------------------------------- */
void gelu_forward(floatX* out, const floatX* inp, size_t n);
/* dinp = gelu'(inp) * dout; dinp may alias dout (element-wise) */
void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n);

/* ---- fused ops ------------------------------------------------------------
 * Each is, on the CPU, exactly the composition written beside it (the same
 * fp32 arithmetic in the same order, so the same bits as the separate ops);
 * the GPU runs it as one GEMM epilogue or one kernel, within the separate
 * ops' bf16 tolerances (ops/CUDA.md, "Fused ops"). */
/* The MLP's first GEMM with GELU in its epilogue: pre[N,OC] = inp @ w^T + bias
 * (kept: the backward's GELU input), out[N,OC] = gelu(pre). bias may be NULL.
 * = matmul_forward(pre, inp, w, bias, N, IC, OC); gelu_forward(out, pre, N*OC). */
void matmul_gelu_forward(floatX* out, floatX* pre, const floatX* inp, const floatX* w, const floatX* bias,
                         int N, int IC, int OC);
/* The backward of a GEMM whose input is inp = gelu(pre) (the MLP's second),
 * through the GELU: dinp[N,IC] = (dout @ w) * gelu'(pre[N,IC]) (overwritten);
 * dw += dout^T @ inp; dbias += colsum(dout) (skipped if NULL).
 * = matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC); gelu_backward(dinp, pre, dinp, N*IC). */
void gelu_matmul_backward(floatX* dinp, float* dw, float* dbias, const floatX* dout, const floatX* inp,
                          const floatX* w, const floatX* pre, int N, int IC, int OC);
/* A row-parallel GEMM's bias (added once, after its all-reduce), the
 * residual add and the next LayerNorm in one pass over the rows:
 * res = x + (y + bias), then out, mean, rstd = layernorm(res; w, b).
 * = bias_forward(y, bias); residual_forward(res, x, y); layernorm_forward(out, mean, rstd, res, w, b),
 * except that y is left as it is. res may alias x or y. The GPU normalises
 * res as stored (bf16), as layernorm_forward would. */
void residual_layernorm_forward(floatX* res, floatX* out, float* mean, float* rstd, const floatX* x,
                                const floatX* y, const floatX* bias, const floatX* w, const floatX* b, int N, int C);

/* ---- causal self-attention over this rank's NH heads ---------------------
 * qkv[B,T,3*NH*hs]: q of all local heads, then k, then v (head h at h*hs).
 * out[B,T,NH*hs]. lse[B,NH,T]: log-sum-exp of each softmax row, the only
 * saved state (the backward recomputes probabilities: no O(T^2) memory). */
void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int hs);
void attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, int B, int T, int NH, int hs);

/* ---- the ops of Qwen2 (model.arch = "qwen2"): ops/ops_cpu.c (attention)
 * and ops/ops_cpu_qwen2.c (the rest) on the CPU; on the GPU
 * ops/attention_cuda.cu, ops/layernorm_cuda.cu (RMSNorm), ops/rope_cuda.cu
 * and ops/swiglu_cuda.cu. NKV = kv heads held by this rank. */
/* Grouped-query attention: qkv[B,T,(NH+2*NKV)*hs] holds q of NH heads, then
 * k and v of NKV heads (NH % NKV == 0); query head h reads kv head
 * h / (NH/NKV). out[B,T,NH*hs], lse[B,NH,T]. NKV = NH is attention_forward. */
void attention_gqa_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int NKV, int hs);
void attention_gqa_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                            const float* lse, int B, int T, int NH, int NKV, int hs);
/* RMSNorm: out = inp * rstd * w with rstd = 1 / sqrt(mean(inp^2) + eps),
 * saved in rstd[N]. The backward ACCUMULATES into dinp (the residual
 * stream's gradient, as layernorm_backward) and dw. */
void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C, float eps);
void rmsnorm_backward(floatX* dinp, float* dw, const floatX* dout, const floatX* inp, const floatX* w,
                      const float* rstd, int N, int C);
/* Rotate-half RoPE (transformers' Qwen2/Llama), in place on the first nh
 * heads of hs values of every row of x[B,T,ld], at position t: for
 * i < hs/2, angle a = t * theta^(-2i/hs),
 *   x[i] <- x[i] cos a - x[i+hs/2] sin a,  x[i+hs/2] <- x[i+hs/2] cos a + x[i] sin a.
 * The backward applies the transposed (inverse) rotation to the gradient. */
void rope_forward(floatX* x, int B, int T, int ld, int nh, int hs, float theta);
void rope_backward(floatX* dx, int B, int T, int ld, int nh, int hs, float theta);
/* SwiGLU: out[n,i] = silu(gu[n,i]) * gu[n,F+i], gu[N,2F] = (gate | up),
 * out[N,F]; the backward overwrites dgu[N,2F]. */
void swiglu_forward(floatX* out, const floatX* gu, int N, int F);
void swiglu_backward(floatX* dgu, const floatX* gu, const floatX* dout, int N, int F);

/* ---- vocab-parallel softmax cross-entropy --------------------------------
 * logits[N,Vr] hold global vocab ids [v0, v0+Vr); ids >= V are padding and
 * never take part. Between the three calls the caller all-reduces over TP:
 * mx with MAX, then stats (float[2N]: sum of exp(l - mx), target logit or 0)
 * with SUM. */
void crossentropy_max(float* mx, const floatX* logits, int N, int Vr, int v0, int V);
void crossentropy_stats(float* stats, const floatX* logits, const float* mx, const int* targets,
                        int N, int Vr, int v0, int V);
/* losses[n] = log(sum) + mx - target_logit; dlogits = (softmax - onehot) * dloss,
 * written over logits in place (padding columns get 0). */
void crossentropy_backward(floatX* logits_dlogits, float* losses, const float* mx, const float* stats,
                           const int* targets, int N, int Vr, int v0, int V, float dloss);
/* The three for rows held whole (Vr columns from id 0, nothing to exchange between
 * them: TP = 1), with the same results, bit for bit; mx and stats are written too.
 * The CUDA backend reads each row once into shared memory where it fits. */
void crossentropy_local(floatX* logits_dlogits, float* losses, float* mx, float* stats, const int* targets, int N,
                        int Vr, int V, float dloss);

/* ---- optimizer and norms -------------------------------------------------- */
/* The scalars of one training step, in backend memory. The host sets lr,
 * bc1 and bc2 before the step (a queued copy from ops_malloc_host memory);
 * the device fills the rest during it (loss: ops_mean; sumsq:
 * ops_sumsq_acc; norm, scale, skip: ops_grad_clip) and adamw_update reads
 * them there, so no value has to visit the host in the middle of a step. */
typedef struct {
    float lr;       /* learning rate */
    float bc1, bc2; /* AdamW's bias corrections 1 - beta1^t, 1 - beta2^t at the 1-based step t
                       (powf on the host, as the CPU reference always computed them) */
    float loss;     /* mean loss of the step's batch */
    double sumsq;   /* squared norm of the gradient */
    float norm;     /* sqrt(sumsq), before clipping */
    float scale;    /* what the gradient is multiplied by: grad_clip / norm when clipped, else 1 */
    int skip;       /* 1: the loss or the norm is not finite, adamw_update changes nothing */
    int pad_;
} StepScalars;

/* AdamW on one tensor: g = grad * s->scale; m,v moments; master fp32
 * weights; param = the working copy (may alias master on the CPU build);
 * learning rate and bias corrections from s (backend memory). Nothing is
 * written when s->skip. */
void adamw_update(float* master, floatX* param, const float* grad, float* m, float* v, size_t n,
                  const StepScalars* s, float beta1, float beta2, float eps, float weight_decay);
/* adamw_update on several tensors of the same five buffers, in one pass:
 * tensor k is elements [off[k], off[k] + n[k]) of each, with weight decay
 * wd[k]; at most ADAMW_MAX_TENSORS of them, not overlapping. Each element
 * gets adamw_update's arithmetic exactly; on the GPU it is one launch
 * instead of one per tensor. */
#define ADAMW_MAX_TENSORS 32
void adamw_update_tensors(float* master, floatX* param, const float* grad, float* m, float* v, int ntensors,
                          const size_t* off, const size_t* n, const float* wd, const StepScalars* s, float beta1,
                          float beta2, float eps);
/* From s->loss and s->sumsq: s->norm = sqrt(sumsq); s->scale = grad_clip /
 * norm if grad_clip > 0 and norm > grad_clip, else 1; s->skip = loss or norm
 * not finite. One scalar computation, queued (the host's arithmetic). */
void ops_grad_clip(StepScalars* s, float grad_clip);
/* Reductions in a fixed order (double accumulation): into backend memory,
 * queued, *acc += sum of x^2, *mean = (float)(sum of x / n) ... */
void ops_sumsq_acc(double* acc, const float* x, size_t n);
void ops_mean(float* mean, const float* x, size_t n);
/* ... and the same sums returned to the host (they wait for the device) */
double ops_sumsq(const float* x, size_t n);
double ops_sum(const float* x, size_t n);
/* 1 if every element of x[n] is finite */
int ops_all_finite(const float* x, size_t n);

/* ---- CUDA graphs (train.cuda_graph) ----------------------------------------
 * The GPU build records what is queued between ops_graph_begin and
 * ops_graph_end (kernels, copies, cuBLASLt calls; none of it runs then) as
 * one CUDA graph, and ops_graph_launch replays it: the same kernels on the
 * same pointers with the same arguments, each copy reading its host buffer
 * when the replay runs. So between replays only the contents of buffers may
 * change, never a pointer, a size or a scalar argument, and the recorded
 * work may not wait for the device or allocate (the runtime refuses both
 * during capture; backend scratch that would have to grow later is an
 * error). One graph per process. ops_graph_supported is 0 on the CPU build,
 * whose other graph calls are errors. */
int ops_graph_supported(void);
void ops_graph_begin(void);
int ops_graph_end(void);     /* instantiates the graph; returns its node count */
void ops_graph_launch(void);
void ops_graph_free(void);   /* no-op without a graph */

#ifdef __cplusplus
}
#endif
#endif /* OPS_H */
