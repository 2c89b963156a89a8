/*
 * ops/ops_cpu.c - the fp32 reference backend: every op of ops/ops.h in
 * plain C with OpenMP.
 *
 * This file is the numerical definition the CUDA backend is tested against,
 * so it is written to be read first and to be fast second. Two rules hold
 * everywhere:
 *   - Determinism: every output element is computed by exactly one thread, in
 *     a fixed order that does not depend on the thread count. Reductions that
 *     cross rows (parameter gradients) are parallelised over the columns they
 *     reduce into, never over rows with atomics or per-thread partial sums.
 *     So a run with 1 or 64 threads gives bit-identical results.
 *   - The conventions of ops.h: activation gradients are overwritten, except
 *     layernorm_backward's dinp, which accumulates; parameter gradients
 *     accumulate.
 * Dimensions: N = B*T rows, C channels, IC/OC matmul in/out channels, NH heads
 * of size hs held by this rank, Vr vocab rows of this rank starting at global
 * id v0, V the real vocab size (ids >= V are padding).
 */
#include "ops/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "ops/encoder_plan.h"

#ifdef OPS_BF16
#error "ops_cpu.c is the fp32 backend: build it without -DOPS_BF16"
#endif

/* Column-parallel reductions hand each thread COL_CHUNK consecutive columns:
 * wide enough that threads rarely share a cache line, small enough to spread
 * C = 768 over many cores. */
#define COL_CHUNK 64

static inline int imin(int a, int b) { return a < b ? a : b; }

/* ------------------------------------------------------------------------ */
/* memory and backend: host memory, so everything is libc */

void ops_init(int local_rank) { (void)local_rank; }
const char* ops_backend_name(void) { return "cpu-fp32"; }
int ops_mem_info(size_t* free_bytes, size_t* total_bytes, int* device) {
    *free_bytes = *total_bytes = 0;
    *device = -1;
    return 0;
}
void* ops_malloc(size_t bytes) { return callocCheck(bytes, 1); }
void ops_free(void* p) { free(p); }
void ops_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
void ops_copy(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
void ops_to_host(void* host_dst, const void* src, size_t bytes) { memcpy(host_dst, src, bytes); }
void ops_from_host(void* dst, const void* host_src, size_t bytes) { memcpy(dst, host_src, bytes); }
/* floatX is float here, so the conversions are copies. The working copy of a
 * weight may alias its fp32 master on this backend, hence the dst != src test
 * (memcpy onto itself is undefined). */
void ops_f32_to_X(floatX* dst, const float* src, size_t n) {
    if (dst != src) memcpy(dst, src, n * sizeof(float));
}
void ops_X_to_f32(float* dst, const floatX* src, size_t n) {
    if (dst != src) memcpy(dst, src, n * sizeof(float));
}
void ops_sync(void) {}
void* ops_malloc_host(size_t bytes) { return callocCheck(bytes ? bytes : 1, 1); }
void ops_free_host(void* p) { free(p); }
void ops_from_host_async(void* dst, const void* host_src, size_t bytes) { memcpy(dst, host_src, bytes); }
void ops_to_host_async(void* host_dst, const void* src, size_t bytes) { memcpy(host_dst, src, bytes); }

/* No CUDA graphs here: the trainer asks ops_graph_supported first, so the
 * other calls are programming errors. */
int ops_graph_supported(void) { return 0; }
void ops_graph_begin(void) { FATAL("ops_graph_begin: the CPU backend has no CUDA graphs"); }
int ops_graph_end(void) { FATAL("ops_graph_end: the CPU backend has no CUDA graphs"); }
void ops_graph_launch(void) { FATAL("ops_graph_launch: the CPU backend has no CUDA graphs"); }
void ops_graph_free(void) {}

/* ------------------------------------------------------------------------ */
/* embedding */

void encoder_forward(floatX* out, const int* tok, const floatX* wte, int N, int C, int v0, int Vr) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* o = out + (size_t)n * C;
        int row = tok[n] - v0;
        if (row >= 0 && row < Vr) {
            memcpy(o, wte + (size_t)row * C, (size_t)C * sizeof(float));
        } else {
            /* another rank's slice holds this token: contribute zeros to the all-reduce */
            memset(o, 0, (size_t)C * sizeof(float));
        }
    }
}

void encoder_backward(float* dwte, const floatX* dout, const int* plan, int N, int C, int Vr) {
    /* Two positions with the same token add into the same row, so the plan
     * (ops/encoder_plan.h) groups them: a thread per row, its positions in
     * increasing n, which per element is the order of the plain loop over n */
    const int U = encoder_plan_rows(N, Vr), nu = plan[0];
    const int *rows = plan + 1, *start = plan + 1 + U, *pos = plan + 2 + 2 * U;
    #pragma omp parallel for schedule(dynamic, 8)
    for (int u = 0; u < nu; u++) {
        float* dw = dwte + (size_t)rows[u] * C;
        for (int p = start[u]; p < start[u + 1]; p++) {
            const float* d = dout + (size_t)pos[p] * C;
            for (int c = 0; c < C; c++) dw[c] += d[c];
        }
    }
}

void position_forward(floatX* x, const floatX* wpe, int B, int T, int C) {
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* xt = x + ((size_t)b * T + t) * C;
            const float* p = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) xt[c] += p[c];
        }
    }
}

void position_backward(float* dwpe, const floatX* dx, int B, int T, int C) {
    /* each t owns its row of dwpe; the sum over b runs in order */
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        float* dp = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float* d = dx + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) dp[c] += d[c];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* layernorm: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + 1e-5) */

void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* w, const floatX* b, int N, int C) {
    const float eps = 1e-5f;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        /* two-pass variance: no cancellation when |mean| >> std */
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += d * d;
        }
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

void layernorm_backward(floatX* dinp, float* dw, float* db, float* dsum, const floatX* dout, const floatX* inp,
                        const floatX* w, const float* mean, const float* rstd, int N, int C) {
    /* dinp is row-local: with xhat = (x - mean)*rstd and g = w*dout,
     * dx = rstd * (g - mean_c(g) - xhat * mean_c(g*xhat)). It ACCUMULATES
     * (dinp is the residual stream's gradient, see ops.h). */
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* d = dout + (size_t)n * C;
        float* dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float g = w[c] * d[c];
            g_mean += g;
            gx_mean += g * (x[c] - m) * s;
        }
        g_mean /= C;
        gx_mean /= C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            dx[c] += (w[c] * d[c] - g_mean - xhat * gx_mean) * s;
        }
    }
    /* dw, db sum over rows: split the channels across threads instead */
    #pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += COL_CHUNK) {
        int c1 = imin(C, c0 + COL_CHUNK);
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* d = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                dw[c] += (x[c] - m) * s * d[c];
                db[c] += d[c];
            }
        }
    }
    if (dsum) bias_backward(dsum, dinp, N, C); /* the same sums as the separate op */
}

/* every sum above is complete when it returns */
void norm_backward_finish(void) {}

/* ------------------------------------------------------------------------ */
/* matmul
 *
 * All three products (out = inp @ w^T, dinp = dout @ w, dw += dout^T @ inp)
 * are one kernel, gemm_f32, on strided views of row-major tensors:
 *   c[M,Nc] = init + A[M,K] @ B[K,Nc],  A(m,k) = a[m*a_m + k*a_k],
 *                                       B(k,j) = b[k*b_k + j*b_n],
 * init = c itself (accumulate), else bias[j], else 0.
 *
 * Speed: C is cut into micro-tiles of MM_TM rows x MM_TN columns held in
 * registers. For each k the kernel loads MM_TN consecutive values of B once
 * and reuses them for MM_TM rows; the j loop has a constant trip count, so the
 * compiler vectorises it without reassociating any sum. B's columns for one
 * tile are first packed into a contiguous, zero-padded panel (K x MM_TN), so
 * the inner loop always reads unit stride whatever b_k/b_n are, and partial
 * tiles run the same code (their extra lanes are computed and dropped).
 *
 * Determinism: each c element is produced by one thread as
 * init + a_0*b_0 + a_1*b_1 + ... in ascending k - the order of the naive
 * triple loop - so results do not depend on the tiling or thread count. */
#define MM_TM 4   /* rows per micro-tile: reuse of each loaded B vector */
#define MM_TN 16  /* columns per micro-tile: the vectorised dimension */
#define MM_MB 64  /* rows per work item: the packed panel is reused MM_MB/MM_TM times */

static void gemm_f32(float* c, const float* a, size_t a_m, size_t a_k,
                     const float* b, size_t b_k, size_t b_n, const float* bias,
                     int M, int K, int Nc, int accumulate) {
    int ntiles = (Nc + MM_TN - 1) / MM_TN;
    int mblocks = (M + MM_MB - 1) / MM_MB;
    #pragma omp parallel
    {
        float* panel = (float*)mallocCheck((size_t)K * MM_TN * sizeof(float));
        #pragma omp for collapse(2) schedule(static)
        for (int jt = 0; jt < ntiles; jt++) {
            for (int mb = 0; mb < mblocks; mb++) {
                int j0 = jt * MM_TN;
                int nj = imin(MM_TN, Nc - j0);
                /* pack B(:, j0 .. j0+nj) as panel[k][j], walking B's unit-stride
                 * direction in the inner loop */
                if (b_n == 1) {
                    for (int k = 0; k < K; k++) {
                        for (int j = 0; j < MM_TN; j++) {
                            panel[(size_t)k * MM_TN + j] = j < nj ? b[k * b_k + (size_t)(j0 + j)] : 0.0f;
                        }
                    }
                } else {
                    for (int j = 0; j < MM_TN; j++) {
                        for (int k = 0; k < K; k++) {
                            panel[(size_t)k * MM_TN + j] = j < nj ? b[k * b_k + (size_t)(j0 + j) * b_n] : 0.0f;
                        }
                    }
                }
                int m_end = imin(M, (mb + 1) * MM_MB);
                for (int m0 = mb * MM_MB; m0 < m_end; m0 += MM_TM) {
                    int nm = imin(MM_TM, m_end - m0);
                    /* rows past the end repeat the last row: no branch in the k loop */
                    const float* arow[MM_TM];
                    for (int r = 0; r < MM_TM; r++) arow[r] = a + (size_t)(m0 + imin(r, nm - 1)) * a_m;
                    float acc[MM_TM][MM_TN];
                    for (int r = 0; r < MM_TM; r++) {
                        for (int j = 0; j < MM_TN; j++) {
                            float init = 0.0f;
                            if (r < nm && j < nj) {
                                if (accumulate) init = c[(size_t)(m0 + r) * Nc + j0 + j];
                                else if (bias) init = bias[j0 + j];
                            }
                            acc[r][j] = init;
                        }
                    }
                    for (int k = 0; k < K; k++) {
                        const float* bk = panel + (size_t)k * MM_TN;
                        for (int r = 0; r < MM_TM; r++) {
                            float av = arow[r][k * a_k];
                            #pragma omp simd
                            for (int j = 0; j < MM_TN; j++) acc[r][j] += av * bk[j];
                        }
                    }
                    for (int r = 0; r < nm; r++) {
                        float* crow = c + (size_t)(m0 + r) * Nc + j0;
                        for (int j = 0; j < nj; j++) crow[j] = acc[r][j];
                    }
                }
            }
        }
        free(panel);
    }
}

void matmul_forward(floatX* out, const floatX* inp, const floatX* w, const floatX* bias,
                    int N, int IC, int OC) {
    /* out[n,o] = bias[o] + sum_i inp[n,i] * w[o,i]: A = inp (row n), B(i,o) = w[o*IC + i] */
    gemm_f32(out, inp, (size_t)IC, 1, w, 1, (size_t)IC, bias, N, IC, OC, 0);
}

void matmul_backward(floatX* dinp, float* dw, float* dbias, const floatX* dout, const floatX* inp,
                     const floatX* w, int N, int IC, int OC) {
    /* dinp[n,i] = sum_o dout[n,o] * w[o,i] (overwritten) */
    if (dinp) gemm_f32(dinp, dout, (size_t)OC, 1, w, (size_t)IC, 1, NULL, N, OC, IC, 0);
    /* dw[o,i] += sum_n dout[n,o] * inp[n,i]: rows of C are output channels,
     * so threads split o (and i), and each dw element sums n in order */
    gemm_f32(dw, dout, 1, (size_t)OC, inp, (size_t)IC, 1, NULL, OC, N, IC, 1);
    if (dbias) bias_backward(dbias, dout, N, OC);
}

/* ------------------------------------------------------------------------ */
/* bias and residual */

void bias_forward(floatX* x, const floatX* bias, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* xn = x + (size_t)n * C;
        for (int c = 0; c < C; c++) xn[c] += bias[c];
    }
}

void bias_backward(float* dbias, const floatX* dout, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += COL_CHUNK) {
        int c1 = imin(C, c0 + COL_CHUNK);
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) dbias[c] += d[c];
        }
    }
}

void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) {
    /* element-wise, so out may alias a or b */
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* ------------------------------------------------------------------------ */
/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + GELU_A * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    /* d/dx = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx, du/dx = K (1 + 3 A x^2) */
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + GELU_A * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        dinp[i] = local * dout[i];
    }
}

/* ------------------------------------------------------------------------ */
/* fused ops: on this backend each is the composition ops.h writes beside it,
 * the same fp32 operations in the same order, so a fused call gives the bits
 * of the separate calls (the CPU tests, checkpoints and the parity runs
 * compare exact bits across this change). The GPU backend fuses them. */

void matmul_gelu_forward(floatX* out, floatX* pre, const floatX* inp, const floatX* w, const floatX* bias,
                         int N, int IC, int OC) {
    matmul_forward(pre, inp, w, bias, N, IC, OC);
    gelu_forward(out, pre, (size_t)N * OC);
}

void gelu_matmul_backward(floatX* dinp, float* dw, float* dbias, const floatX* dout, const floatX* inp,
                          const floatX* w, const floatX* pre, int N, int IC, int OC) {
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC);
    gelu_backward(dinp, pre, dinp, (size_t)N * IC); /* in place: element-wise */
}

void residual_layernorm_forward(floatX* res, floatX* out, float* mean, float* rstd, const floatX* x,
                                const floatX* y, const floatX* bias, const floatX* w, const floatX* b, int N, int C) {
    /* bias_forward's y + bias, then residual_forward's x + that: y itself stays as it is */
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t r = (size_t)n * C;
        for (int c = 0; c < C; c++) res[r + c] = x[r + c] + (y[r + c] + bias[c]);
    }
    layernorm_forward(out, mean, rstd, res, w, b, N, C);
}

/* ------------------------------------------------------------------------ */
/* causal self-attention
 *
 * Row (b,t) of head h: s_j = q_t . k_j / sqrt(hs) for j <= t,
 * p_j = exp(s_j - lse_t), lse_t = log sum_j exp(s_j), out_t = sum_j p_j v_j.
 * Only lse is saved. The backward recomputes p_j from q, k and lse, so memory
 * stays O(T) instead of O(T^2), the same contract as the flash-style GPU kernel. */

/* Causal attention with NKV <= NH kv heads (grouped-query attention; GPT-2
 * is NKV = NH): qkv rows hold q of NH heads, then k and v of NKV heads, and
 * query head h reads kv head h / (NH / NKV). */
void attention_gqa_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int NKV, int hs) {
    size_t C3 = (size_t)(NH + 2 * NKV) * hs; /* qkv row: q of all heads, then k, then v */
    size_t Co = (size_t)NH * hs, Ck = (size_t)NKV * hs;
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel
    {
        float* att = (float*)mallocCheck((size_t)T * sizeof(float)); /* one score row per thread */
        #pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                for (int t = 0; t < T; t++) {
                    const float* q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                    size_t kh = (size_t)(h / group) * hs;
                    float mx = -INFINITY;
                    for (int j = 0; j <= t; j++) {
                        const float* k = qkv + ((size_t)b * T + j) * C3 + Co + kh;
                        float s = 0.0f;
                        for (int i = 0; i < hs; i++) s += q[i] * k[i];
                        s *= scale;
                        att[j] = s;
                        if (s > mx) mx = s;
                    }
                    /* subtract the row max before exp: no overflow */
                    float sum = 0.0f;
                    for (int j = 0; j <= t; j++) {
                        att[j] = expf(att[j] - mx);
                        sum += att[j];
                    }
                    lse[((size_t)b * NH + h) * T + t] = mx + logf(sum);
                    float inv = 1.0f / sum;
                    float* o = out + ((size_t)b * T + t) * Co + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) o[i] = 0.0f;
                    for (int j = 0; j <= t; j++) {
                        const float* v = qkv + ((size_t)b * T + j) * C3 + Co + Ck + kh;
                        float p = att[j] * inv;
                        for (int i = 0; i < hs; i++) o[i] += p * v[i];
                    }
                }
            }
        }
        free(att);
    }
}

void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int hs) {
    attention_gqa_forward(out, lse, qkv, B, T, NH, NH, hs);
}

void attention_gqa_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                            const float* lse, int B, int T, int NH, int NKV, int hs) {
    /* With dp_j = dout_t . v_j and ds_j = p_j (dp_j - D_t), where
     * D_t = sum_j p_j dp_j = dout_t . out_t:
     *   dv_j += p_j dout_t,  dq_t += scale ds_j k_j,  dk_j += scale ds_j q_t.
     * dk and dv of one key gather from every later query of every query head
     * of its group, so a whole (b, kv head) belongs to one thread, which walks
     * the group's heads, t and j in order: deterministic and no scratch at
     * all. dqkv is overwritten. */
    size_t C3 = (size_t)(NH + 2 * NKV) * hs;
    size_t Co = (size_t)NH * hs, Ck = (size_t)NKV * hs;
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            for (int t = 0; t < T; t++) {
                float* d = dqkv + ((size_t)b * T + t) * C3;
                for (int i = 0; i < hs; i++) d[Co + (size_t)g * hs + i] = d[Co + Ck + (size_t)g * hs + i] = 0.0f;
                for (int h = g * group; h < (g + 1) * group; h++)
                    for (int i = 0; i < hs; i++) d[(size_t)h * hs + i] = 0.0f;
            }
            for (int h = g * group; h < (g + 1) * group; h++) {
                for (int t = 0; t < T; t++) {
                    const float* q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                    float* dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                    const float* dot = dout + ((size_t)b * T + t) * Co + (size_t)h * hs;
                    const float* ot = out + ((size_t)b * T + t) * Co + (size_t)h * hs;
                    float l = lse[((size_t)b * NH + h) * T + t];
                    float D = 0.0f;
                    for (int i = 0; i < hs; i++) D += dot[i] * ot[i];
                    for (int j = 0; j <= t; j++) {
                        size_t rj = ((size_t)b * T + j) * C3 + (size_t)g * hs;
                        const float* k = qkv + rj + Co;
                        const float* v = qkv + rj + Co + Ck;
                        float* dk = dqkv + rj + Co;
                        float* dv = dqkv + rj + Co + Ck;
                        float s = 0.0f, dp = 0.0f;
                        for (int i = 0; i < hs; i++) {
                            s += q[i] * k[i];
                            dp += dot[i] * v[i];
                        }
                        float p = expf(s * scale - l);
                        float ds = p * (dp - D) * scale;
                        for (int i = 0; i < hs; i++) {
                            dv[i] += p * dot[i];
                            dq[i] += ds * k[i];
                            dk[i] += ds * q[i];
                        }
                    }
                }
            }
        }
    }
}

void attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, int B, int T, int NH, int hs) {
    attention_gqa_backward(dqkv, dout, qkv, out, lse, B, T, NH, NH, hs);
}

/* ------------------------------------------------------------------------ */
/* vocab-parallel softmax cross-entropy
 *
 * Each rank holds logits for global ids [v0, v0+Vr); ids >= V are padding and
 * never take part. Column j is real iff j < nvalid(v0, Vr, V). The caller
 * all-reduces mx (MAX) after the first call and stats (SUM) after the second,
 * so every rank ends with the full-vocab max, sum of exp and target logit. */

static inline int ce_nvalid(int Vr, int v0, int V) {
    int nv = V - v0;
    return nv < 0 ? 0 : imin(nv, Vr);
}

void crossentropy_max(float* mx, const floatX* logits, int N, int Vr, int v0, int V) {
    int nv = ce_nvalid(Vr, v0, V);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vr;
        /* -inf for a slice of padding only: the identity of the MAX reduction */
        float m = -INFINITY;
        for (int j = 0; j < nv; j++) m = l[j] > m ? l[j] : m;
        mx[n] = m;
    }
}

void crossentropy_stats(float* stats, const floatX* logits, const float* mx, const int* targets,
                        int N, int Vr, int v0, int V) {
    int nv = ce_nvalid(Vr, v0, V);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vr;
        float sum = 0.0f;
        for (int j = 0; j < nv; j++) sum += expf(l[j] - mx[n]);
        int jt = targets[n] - v0;
        stats[2 * n] = sum;
        stats[2 * n + 1] = (jt >= 0 && jt < nv) ? l[jt] : 0.0f;
    }
}

void crossentropy_backward(floatX* logits_dlogits, float* losses, const float* mx, const float* stats,
                           const int* targets, int N, int Vr, int v0, int V, float dloss) {
    int nv = ce_nvalid(Vr, v0, V);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* l = logits_dlogits + (size_t)n * Vr;
        float sum = stats[2 * n];
        /* loss = -log softmax(target) = log(sum exp(l - mx)) + mx - l_target */
        losses[n] = logf(sum) + mx[n] - stats[2 * n + 1];
        float inv = 1.0f / sum;
        int jt = targets[n] - v0;
        for (int j = 0; j < nv; j++) {
            float p = expf(l[j] - mx[n]) * inv;
            float onehot = (j == jt) ? 1.0f : 0.0f;
            l[j] = (p - onehot) * dloss;
        }
        for (int j = nv; j < Vr; j++) l[j] = 0.0f;
    }
}

void crossentropy_local(floatX* logits_dlogits, float* losses, float* mx, float* stats, const int* targets, int N,
                        int Vr, int V, float dloss) {
    crossentropy_max(mx, logits_dlogits, N, Vr, 0, V);
    crossentropy_stats(stats, logits_dlogits, mx, targets, N, Vr, 0, V);
    crossentropy_backward(logits_dlogits, losses, mx, stats, targets, N, Vr, 0, V, dloss);
}

/* ------------------------------------------------------------------------ */
/* optimizer and norms */

void adamw_update(float* master, floatX* param, const float* grad, float* m, float* v, size_t n,
                  const StepScalars* s, float beta1, float beta2, float eps, float weight_decay) {
    if (s->skip) return;
    const float lr = s->lr, bc1 = s->bc1, bc2 = s->bc2, grad_scale = s->scale;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        /* decoupled weight decay (AdamW): the decay is not part of g, so it is
         * not rescaled by the adaptive denominator */
        float w = master[i];
        w -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * w);
        master[i] = w;
        param[i] = w; /* param may alias master: a store of the same value */
    }
}

void adamw_update_tensors(float* master, floatX* param, const float* grad, float* m, float* v, int ntensors,
                          const size_t* off, const size_t* n, const float* wd, const StepScalars* s, float beta1,
                          float beta2, float eps) {
    if (ntensors < 0 || ntensors > ADAMW_MAX_TENSORS)
        FATAL("adamw_update_tensors: %d tensors (at most %d)", ntensors, ADAMW_MAX_TENSORS);
    for (int k = 0; k < ntensors; k++)
        adamw_update(master + off[k], param + off[k], grad + off[k], m + off[k], v + off[k], n[k], s, beta1, beta2,
                     eps, wd[k]);
}

void ops_grad_clip(StepScalars* s, float grad_clip) {
    s->norm = (float)sqrt(s->sumsq);
    s->scale = (grad_clip > 0 && s->norm > grad_clip) ? grad_clip / s->norm : 1.0f;
    s->skip = !isfinite(s->loss) || !isfinite(s->norm);
}

/* ops_sumsq / ops_sum: fixed-size chunks summed in double, then the chunk sums
 * added in chunk order, so the result does not depend on the thread count. */
#define SUM_CHUNK 65536

static double sum_chunked(const float* x, size_t n, int square) {
    size_t nchunks = (n + SUM_CHUNK - 1) / SUM_CHUNK;
    if (nchunks == 0) return 0.0;
    double* part = (double*)mallocCheck(nchunks * sizeof(double));
    #pragma omp parallel for schedule(static)
    for (size_t ch = 0; ch < nchunks; ch++) {
        size_t i1 = (ch + 1) * SUM_CHUNK < n ? (ch + 1) * SUM_CHUNK : n;
        double s = 0.0;
        for (size_t i = ch * SUM_CHUNK; i < i1; i++) s += square ? (double)x[i] * x[i] : (double)x[i];
        part[ch] = s;
    }
    double total = 0.0;
    for (size_t ch = 0; ch < nchunks; ch++) total += part[ch];
    free(part);
    return total;
}

double ops_sumsq(const float* x, size_t n) { return sum_chunked(x, n, 1); }
double ops_sum(const float* x, size_t n) { return sum_chunked(x, n, 0); }
void ops_sumsq_acc(double* acc, const float* x, size_t n) { *acc += sum_chunked(x, n, 1); }
void ops_mean(float* mean, const float* x, size_t n) { *mean = (float)(sum_chunked(x, n, 0) / (double)n); }

int ops_all_finite(const float* x, size_t n) {
    int ok = 1; /* AND is order-independent, so the reduction is deterministic */
    #pragma omp parallel for reduction(&& : ok) schedule(static)
    for (size_t i = 0; i < n; i++) ok = ok && isfinite(x[i]);
    return ok;
}
