/*
 * tests/ops_ref.h - the fp32 CPU reference backend (ops/ops_cpu.c and
 * ops/ops_cpu_qwen2.c) under the names cpu_F, for tests that link it next
 * to the CUDA backend.
 *
 * The two files are compiled as usual (floatX = float), joined into one
 * object (ld -r), and every function F of ops/ops.h is renamed to cpu_F
 *   objcopy --redefine-syms=tests/ops_ref.syms ops_cpu_plain.o ops_cpu_ref.o
 * so the two implementations of one interface coexist in one binary. These
 * prototypes are ops.h's with floatX spelled float; all pointers are host
 * memory.
 */
#ifndef OPS_REF_H
#define OPS_REF_H

#include <stddef.h>

#include "ops/ops.h" /* StepScalars */

#ifdef __cplusplus
extern "C" {
#endif

void cpu_ops_init(int local_rank);
const char* cpu_ops_backend_name(void);
void* cpu_ops_malloc(size_t bytes);
void cpu_ops_free(void* p);
void cpu_ops_zero(void* p, size_t bytes);
void cpu_ops_copy(void* dst, const void* src, size_t bytes);
void cpu_ops_to_host(void* host_dst, const void* src, size_t bytes);
void cpu_ops_from_host(void* dst, const void* host_src, size_t bytes);
void cpu_ops_f32_to_X(float* dst, const float* src, size_t n);
void cpu_ops_X_to_f32(float* dst, const float* src, size_t n);
void cpu_ops_sync(void);

void cpu_encoder_forward(float* out, const int* tok, const float* wte, int N, int C, int v0, int Vr);
void cpu_encoder_backward(float* dwte, const float* dout, const int* plan, int N, int C, int Vr);
void cpu_position_forward(float* x, const float* wpe, int B, int T, int C);
void cpu_position_backward(float* dwpe, const float* dx, int B, int T, int C);

void cpu_layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                           const float* w, const float* b, int N, int C);
void cpu_layernorm_backward(float* dinp, float* dw, float* db, float* dsum, const float* dout, const float* inp,
                            const float* w, const float* mean, const float* rstd, int N, int C);

void cpu_matmul_forward(float* out, const float* inp, const float* w, const float* bias,
                        int N, int IC, int OC);
void cpu_matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                         const float* w, int N, int IC, int OC);

void cpu_bias_forward(float* x, const float* bias, int N, int C);
void cpu_bias_backward(float* dbias, const float* dout, int N, int C);
void cpu_residual_forward(float* out, const float* a, const float* b, size_t n);

void cpu_gelu_forward(float* out, const float* inp, size_t n);
void cpu_gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);
void cpu_matmul_gelu_forward(float* out, float* pre, const float* inp, const float* w, const float* bias, int N,
                             int IC, int OC);
void cpu_gelu_matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                              const float* w, const float* pre, int N, int IC, int OC);
void cpu_residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* x, const float* y,
                                    const float* bias, const float* w, const float* b, int N, int C);

void cpu_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int hs);
void cpu_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int B, int T, int NH, int hs);

void cpu_attention_gqa_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int NKV, int hs);
void cpu_attention_gqa_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                const float* lse, int B, int T, int NH, int NKV, int hs);
void cpu_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C, float eps);
void cpu_rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                          const float* rstd, int N, int C);
void cpu_rope_forward(float* x, int B, int T, int ld, int nh, int hs, float theta);
void cpu_rope_backward(float* dx, int B, int T, int ld, int nh, int hs, float theta);
void cpu_swiglu_forward(float* out, const float* gu, int N, int F);
void cpu_swiglu_backward(float* dgu, const float* gu, const float* dout, int N, int F);

void cpu_crossentropy_max(float* mx, const float* logits, int N, int Vr, int v0, int V);
void cpu_crossentropy_stats(float* stats, const float* logits, const float* mx, const int* targets,
                            int N, int Vr, int v0, int V);
void cpu_crossentropy_backward(float* logits_dlogits, float* losses, const float* mx, const float* stats,
                               const int* targets, int N, int Vr, int v0, int V, float dloss);

void cpu_adamw_update(float* master, float* param, const float* grad, float* m, float* v, size_t n,
                      const StepScalars* s, float beta1, float beta2, float eps, float weight_decay);
void cpu_adamw_update_tensors(float* master, float* param, const float* grad, float* m, float* v, int ntensors,
                              const size_t* off, const size_t* n, const float* wd, const StepScalars* s, float beta1,
                              float beta2, float eps);
void cpu_ops_grad_clip(StepScalars* s, float grad_clip);
void cpu_ops_sumsq_acc(double* acc, const float* x, size_t n);
void cpu_ops_mean(float* mean, const float* x, size_t n);
double cpu_ops_sumsq(const float* x, size_t n);
double cpu_ops_sum(const float* x, size_t n);
int cpu_ops_all_finite(const float* x, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* OPS_REF_H */
