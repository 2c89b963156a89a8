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
 * GELU in the epilogues (the fused ops of ops.h; cublasLt.h documents them):
 *   matmul_gelu_forward: CUBLASLT_EPILOGUE_GELU_AUX_BIAS (GELU_AUX without a
 *     bias): D = gelu(AB + bias), and the aux matrix gets the GELU input
 *     AB + bias, the backward's pre-activation. Aux: column-major like D
 *     (m = OC rows, ld = OC), in D's type (bf16: the default when
 *     CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE is left unset).
 *   gelu_matmul_backward: CUBLASLT_EPILOGUE_DGELU reads that aux back (m = IC
 *     rows, ld = IC) and writes D = (AB) * gelu'(aux), i.e. dinp = (dout @ w)
 *     * gelu'(pre), replacing gelu_backward's pass over dinp.
 *   cuBLASLt's GELU is the tanh approximation, the formula of GPT-2 and of
 *   the CPU op (ops_cpu.c: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))));
 *   the header does not spell it out, but the frameworks fuse only tanh-GELU
 *   into it (PyTorch's _addmm_activation(use_gelu) for gelu(approximate=
 *   "tanh"), XLA's rewriter for the approximate form; llm.c's GPT-2 uses
 *   these same two epilogues), and test_ops_gpu checks the result against
 *   the CPU op. In bf16 the erf form would differ by less than one rounding
 *   anyway, so that test cannot tell them apart: it guards the wiring.
 *   Preconditions (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD): the aux
 *   ld divisible by 8 and >= the rows of D; we also ask for a 16-byte-aligned
 *   aux pointer. Where they fail, or where the heuristic offers no algorithm
 *   for the epilogue, the op runs unfused: the plain GEMM, then gelu_forward /
 *   gelu_backward (elementwise_cuda.cu), the same result within bf16 rounding.
 *   The fused forward rounds once: gelu is taken of the fp32 AB + bias, not
 *   of its bf16 copy in aux (the unfused path rounds pre first).
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
    int ldaux;     /* the GELU epilogues' aux ld (elements), else 0 */
    int align[6];  /* A, B, C, D, bias, aux pointer alignment in bytes (capped at 16) */
};

struct GemmPlan {
    GemmKey key;
    int ok;        /* 0: the heuristic had no algorithm (kept so it is asked once) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

/* What runs after the product: nothing, the bias (BIAS), GELU keeping its
 * input in aux (GELU_AUX[_BIAS]), GELU's derivative from aux (DGELU). */
enum GemmEpi { EPI_PLAIN, EPI_GELU_AUX, EPI_DGELU };

struct GemmExtra {
    int epi;           /* GemmEpi */
    const bf16* bias;  /* EPI_PLAIN / EPI_GELU_AUX: may be NULL */
    bf16* aux;         /* EPI_GELU_AUX: written; EPI_DGELU: read */
    int ldaux;
};

static bool epi_has_bias(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool epi_has_aux(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}
static cublasLtEpilogue_t epilogue_of(const GemmExtra& x) {
    switch (x.epi) {
        case EPI_GELU_AUX: return x.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        case EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
        default: return x.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* the pointer attributes the heuristic reads for alignment and every call sets */
static void set_epilogue_pointers(cublasLtMatmulDesc_t desc, cublasLtEpilogue_t e, const void* bias, const void* aux) {
    if (epi_has_bias(e))
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (epi_has_aux(e))
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
}

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

/* may_fail: a plan the heuristic has no algorithm for comes back with ok = 0
 * (the fused epilogues, which have an unfused fallback); otherwise fatal */
static GemmPlan* gemm_plan(const GemmKey& key, const void* bias, const void* aux, bool may_fail) {
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
    if (epi_has_bias(epi)) {
        cudaDataType_t bt = CUDA_R_16BF;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    if (epi_has_aux(epi)) {
        /* aux type left unset: D's (bf16); its ld is a multiple of 8 (checked by the callers) */
        const int64_t ld = key.ldaux;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    /* the heuristic reads the pointers' alignment */
    set_epilogue_pointers(p->desc, epi, bias, aux);
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
    if ((nres == 0 || res.state != CUBLAS_STATUS_SUCCESS) && may_fail) {
        fprintf(stderr, "note: cuBLASLt has no algorithm for epilogue %d at m=%d n=%d k=%d (aux ld %d); that "
                "matmul runs unfused\n", key.epilogue, key.m, key.n, key.k, key.ldaux);
        p->ok = 0;
        g_nplans++;
        return p;
    }
    if (nres == 0 || res.state != CUBLAS_STATUS_SUCCESS)
        FATAL("cuBLASLt found no algorithm for a matmul: m=%d n=%d k=%d transa=%d transb=%d lda=%d ldb=%d "
              "ldc=%d out=%s epilogue=%d alignments A/B/C/D/bias=%d/%d/%d/%d/%d bytes. Dims that are "
              "multiples of 8 and 16-byte-aligned tensors always work",
              key.m, key.n, key.k, key.transa, key.transb, key.lda, key.ldb, key.ldc,
              key.dtype == CUDA_R_32F ? "fp32" : "bf16", key.epilogue, key.align[0], key.align[1],
              key.align[2], key.align[3], key.align[4]);
    p->ok = 1;
    p->algo = res.algo;
    g_nplans++;
    return p;
}

/* D = alpha * op(A) @ op(B) + beta * D (C and D are the same buffer);
 * column-major, A/B bf16, D bf16 or fp32, then the epilogue of x (bias on
 * D's rows, GELU with aux). Returns false, having run nothing, only when x
 * asks for a GELU epilogue the heuristic has no algorithm for. */
static bool gemm(int transa, int transb, int m, int n, int k, const bf16* A, int lda, const bf16* B, int ldb,
                 void* D, int ldc, cudaDataType_t dtype, float beta, const GemmExtra& x) {
    if (!g_lt) FATAL("matmul before ops_init(local_rank): call ops_init first");
    const cublasLtEpilogue_t epi = epilogue_of(x);
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
    key.epilogue = (int)epi;
    key.ldaux = epi_has_aux(epi) ? x.ldaux : 0;
    key.align[0] = ptr_align(A);
    key.align[1] = ptr_align(B);
    key.align[2] = key.align[3] = ptr_align(D);
    key.align[4] = x.bias ? ptr_align(x.bias) : 0;
    key.align[5] = epi_has_aux(epi) ? ptr_align(x.aux) : 0;
    GemmPlan* p = gemm_plan(key, x.bias, x.aux, x.epi != EPI_PLAIN);
    if (!p->ok) return false;
    set_epilogue_pointers(p->desc, epi, x.bias, x.aux);
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(g_lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->lc, D, p->lc, &p->algo,
                                g_workspace, MATMUL_WORKSPACE_BYTES, cuda_stream()));
    return true;
}

static const GemmExtra kPlain = {EPI_PLAIN, nullptr, nullptr, 0};

/* The GELU epilogues' preconditions on the aux matrix (ld in elements). */
static bool gelu_aux_ok(const void* aux, int ld) { return ld % 8 == 0 && is_aligned16(aux); }

void matmul_forward(floatX* out, const floatX* inp, const floatX* w, const floatX* bias,
                    int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) FATAL("matmul_forward with IC = %d", IC);
    /* out^T[OC,N] = w^T (w stored [IC,OC] col-major, transposed) @ inp^T [IC,N] */
    const GemmExtra x = {EPI_PLAIN, (const bf16*)bias, nullptr, 0};
    gemm(1, 0, OC, N, IC, (const bf16*)w, IC, (const bf16*)inp, IC, out, OC, CUDA_R_16BF, 0.0f, x);
}

void matmul_gelu_forward(floatX* out, floatX* pre, const floatX* inp, const floatX* w, const floatX* bias,
                         int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) FATAL("matmul_gelu_forward with IC = %d", IC);
    /* as matmul_forward, D = out = gelu(AB + bias), aux = pre = AB + bias ([OC,N] col-major, ld OC) */
    const GemmExtra x = {EPI_GELU_AUX, (const bf16*)bias, (bf16*)pre, OC};
    if (gelu_aux_ok(pre, OC) &&
        gemm(1, 0, OC, N, IC, (const bf16*)w, IC, (const bf16*)inp, IC, out, OC, CUDA_R_16BF, 0.0f, x))
        return;
    matmul_forward(pre, inp, w, bias, N, IC, OC);
    gelu_forward(out, pre, (size_t)N * OC);
}

/* dw^T[IC,OC] += inp^T [IC,N] @ (dout^T [OC,N])^T in fp32 (beta 1), then dbias */
static void matmul_backward_params(float* dw, float* dbias, const floatX* dout, const floatX* inp, int N, int IC,
                                   int OC) {
    gemm(0, 1, IC, OC, N, (const bf16*)inp, IC, (const bf16*)dout, OC, dw, IC, CUDA_R_32F, 1.0f, kPlain);
    if (dbias) bias_backward(dbias, dout, N, OC);
}

void matmul_backward(floatX* dinp, float* dw, float* dbias, const floatX* dout, const floatX* inp,
                     const floatX* w, int N, int IC, int OC) {
    if (N <= 0 || IC <= 0 || OC <= 0) return;
    /* dinp^T[IC,N] = w [IC,OC] @ dout^T [OC,N]; overwritten (beta 0) */
    if (dinp)
        gemm(0, 0, IC, N, OC, (const bf16*)w, IC, (const bf16*)dout, OC, dinp, IC, CUDA_R_16BF, 0.0f, kPlain);
    matmul_backward_params(dw, dbias, dout, inp, N, IC, OC);
}

void gelu_matmul_backward(floatX* dinp, float* dw, float* dbias, const floatX* dout, const floatX* inp,
                          const floatX* w, const floatX* pre, int N, int IC, int OC) {
    if (N <= 0 || IC <= 0 || OC <= 0) return;
    /* dinp^T[IC,N] = (w [IC,OC] @ dout^T [OC,N]) * gelu'(pre^T [IC,N], ld IC) */
    const GemmExtra x = {EPI_DGELU, nullptr, (bf16*)pre, IC};
    if (!gelu_aux_ok(pre, IC) ||
        !gemm(0, 0, IC, N, OC, (const bf16*)w, IC, (const bf16*)dout, OC, dinp, IC, CUDA_R_16BF, 0.0f, x)) {
        gemm(0, 0, IC, N, OC, (const bf16*)w, IC, (const bf16*)dout, OC, dinp, IC, CUDA_R_16BF, 0.0f, kPlain);
        gelu_backward(dinp, pre, dinp, (size_t)N * IC); /* in place */
    }
    matmul_backward_params(dw, dbias, dout, inp, N, IC, OC);
}
