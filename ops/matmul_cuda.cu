/*
 * ops/matmul_cuda.cu - matmul_forward / matmul_backward of ops/ops.h on
 * cuBLASLt: bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F).
 *
 * ops.h speaks row-major; cuBLASLt speaks column-major. A row-major [R,C]
 * matrix is the same bytes as a column-major [C,R] one, so each product is
 * written for the transposed result:
 *   out[N,OC] = inp[N,IC] @ w[OC,IC]^T + bias
 *     col-major: out^T[OC,N] = (w as [IC,OC])^T @ (inp as [IC,N])   m=OC n=N k=IC, A=w (T), B=inp (N)
 *     bias (length OC = rows of D) through the CUBLASLT_EPILOGUE_BIAS epilogue.
 *   dinp[N,IC] = dout[N,OC] @ w[OC,IC]
 *     col-major: dinp^T[IC,N] = (w as [IC,OC]) @ (dout as [OC,N])  m=IC n=N k=OC, A=w (N), B=dout (N)
 *   dw[OC,IC] += dout^T @ inp
 *     col-major: dw^T[IC,OC] = (inp as [IC,N]) @ (dout as [OC,N])^T m=IC n=OC k=N, A=inp (N), B=dout (T)
 *     C = D = dw in fp32 with beta = 1: cuBLASLt takes bf16 A/B with fp32 C/D,
 *     so the gradient accumulates in fp32 inside the GEMM (ops.h: ACCUMULATE).
 *   dbias += column sums of dout: bias_backward (bias_cuda.cu), a deterministic
 *     two-stage reduction. (The BGRADB epilogue writes, in the output type,
 *     rather than accumulating in fp32, so it does not fit our convention.)
 *
 * Plans: descriptors, layouts and the heuristic's algorithm are cached per
 * (shape, transposes, types, epilogue, pointer alignments). The heuristic is
 * asked once per key, so every call of a shape runs the same algorithm; with
 * one stream and our own workspace, cuBLASLt is then bit-reproducible (cuBLAS
 * documentation, "Results reproducibility").
 */
#include <cublasLt.h>
#include <cublas_api.h>
#include <string.h>

#include "ops/cuda_common.cuh"

#define CUBLAS_CHECK(call)                                                                        \
    do {                                                                                          \
        cublasStatus_t st_ = (call);                                                              \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                         \
            check_fatal(__FILE__, __LINE__, "cuBLAS call failed: %s: %s (status %d)", #call,       \
                        cublasGetStatusString(st_), (int)st_);                                    \
    } while (0)

#define MATMUL_WORKSPACE_BYTES ((size_t)32 << 20)
#define MATMUL_MAX_PLANS 128

static cublasLtHandle_t g_lt = nullptr;
static void* g_workspace = nullptr;

struct GemmKey {
    int transa, transb;
    int m, n, k;
    int lda, ldb, ldc;
    int dtype;     /* cudaDataType of C and D */
    int epilogue;  /* cublasLtEpilogue_t */
    int align[5];  /* A, B, C, D, bias pointer alignment in bytes (capped at 16) */
};

struct GemmPlan {
    GemmKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

static GemmPlan g_plans[MATMUL_MAX_PLANS];
static int g_nplans = 0;

void matmul_cuda_init(void) {
    if (g_lt) return;
    CUBLAS_CHECK(cublasLtCreate(&g_lt));
    CUDA_CHECK(cudaMalloc(&g_workspace, MATMUL_WORKSPACE_BYTES));
}

static int ptr_align(const void* p) {
    uintptr_t a = (uintptr_t)p;
    int al = 16;
    while (al > 1 && (a % (uintptr_t)al)) al >>= 1;
    return al;
}

static GemmPlan* gemm_plan(const GemmKey& key, const void* bias) {
    for (int i = 0; i < g_nplans; i++)
        if (memcmp(&g_plans[i].key, &key, sizeof(GemmKey)) == 0) return &g_plans[i];
    if (g_nplans == MATMUL_MAX_PLANS)
        FATAL("more than %d distinct matmul shapes; raise MATMUL_MAX_PLANS in %s", MATMUL_MAX_PLANS, __FILE__);
    GemmPlan* p = &g_plans[g_nplans];
    memset(p, 0, sizeof(*p));
    p->key = key;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = key.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = key.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key.epilogue;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (epi == CUBLASLT_EPILOGUE_BIAS) {
        cudaDataType_t bt = CUDA_R_16BF;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
        /* the heuristic reads the pointer's alignment */
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    /* stored (untransposed) shapes: A is m x k (or k x m if transposed), column-major */
    const int arows = key.transa ? key.k : key.m, acols = key.transa ? key.m : key.k;
    const int brows = key.transb ? key.n : key.k, bcols = key.transb ? key.k : key.n;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, arows, acols, key.lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, brows, bcols, key.ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, (cudaDataType_t)key.dtype, key.m, key.n, key.ldc));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = MATMUL_WORKSPACE_BYTES;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    uint32_t al[4] = {(uint32_t)key.align[0], (uint32_t)key.align[1], (uint32_t)key.align[2], (uint32_t)key.align[3]};
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof(uint32_t)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof(uint32_t)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof(uint32_t)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof(uint32_t)));
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof(res));
    int nres = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(g_lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &nres));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (nres == 0 || res.state != CUBLAS_STATUS_SUCCESS)
        FATAL("cuBLASLt found no algorithm for a matmul: m=%d n=%d k=%d transa=%d transb=%d lda=%d ldb=%d "
              "ldc=%d out=%s epilogue=%d alignments A/B/C/D/bias=%d/%d/%d/%d/%d bytes. Dims that are "
              "multiples of 8 and 16-byte-aligned tensors always work",
              key.m, key.n, key.k, key.transa, key.transb, key.lda, key.ldb, key.ldc,
              key.dtype == CUDA_R_32F ? "fp32" : "bf16", key.epilogue, key.align[0], key.align[1],
              key.align[2], key.align[3], key.align[4]);
    p->algo = res.algo;
    g_nplans++;
    return p;
}

/* D = alpha * op(A) @ op(B) + beta * D (C and D are the same buffer);
 * column-major, A/B bf16, D bf16 or fp32, optional bf16 bias on D's rows. */
static void gemm(int transa, int transb, int m, int n, int k, const bf16* A, int lda, const bf16* B, int ldb,
                 void* D, int ldc, cudaDataType_t dtype, float beta, const bf16* bias) {
    if (!g_lt) FATAL("matmul before ops_init(local_rank): call ops_init first");
    GemmKey key;
    memset(&key, 0, sizeof(key)); /* padding bytes too: the key is compared with memcmp */
    key.transa = transa;
    key.transb = transb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.dtype = (int)dtype;
    key.epilogue = bias ? (int)CUBLASLT_EPILOGUE_BIAS : (int)CUBLASLT_EPILOGUE_DEFAULT;
    key.align[0] = ptr_align(A);
    key.align[1] = ptr_align(B);
    key.align[2] = key.align[3] = ptr_align(D);
    key.align[4] = bias ? ptr_align(bias) : 0;
    GemmPlan* p = gemm_plan(key, bias);
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(g_lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->lc, D, p->lc, &p->algo,
                                g_workspace, MATMUL_WORKSPACE_BYTES, cuda_stream()));
}

void matmul_forward(floatX* out, const floatX* inp, const floatX* w, const floatX* bias,
                    int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) FATAL("matmul_forward with IC = %d", IC);
    /* out^T[OC,N] = w^T (w stored [IC,OC] col-major, transposed) @ inp^T [IC,N] */
    gemm(1, 0, OC, N, IC, (const bf16*)w, IC, (const bf16*)inp, IC, out, OC, CUDA_R_16BF, 0.0f,
         (const bf16*)bias);
}

void matmul_backward(floatX* dinp, float* dw, float* dbias, const floatX* dout, const floatX* inp,
                     const floatX* w, int N, int IC, int OC) {
    if (N <= 0 || IC <= 0 || OC <= 0) return;
    /* dinp^T[IC,N] = w [IC,OC] @ dout^T [OC,N]; overwritten (beta 0) */
    if (dinp)
        gemm(0, 0, IC, N, OC, (const bf16*)w, IC, (const bf16*)dout, OC, dinp, IC, CUDA_R_16BF, 0.0f, nullptr);
    /* dw^T[IC,OC] += inp^T [IC,N] @ (dout^T [OC,N])^T; fp32, accumulated (beta 1) */
    gemm(0, 1, IC, OC, N, (const bf16*)inp, IC, (const bf16*)dout, OC, dw, IC, CUDA_R_32F, 1.0f, nullptr);
    if (dbias) bias_backward(dbias, dout, N, OC);
}
