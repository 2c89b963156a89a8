/*
 * tests/emu/emu_cublaslt.cpp - cuBLASLt for the emulator (tests/emu/emu_cuda.h
 * says what it is for), on host memory.
 *
 * Emulated from its documented semantics: column-major D = alpha op(A) op(B)
 * + beta C (+ bias per row of D with the BIAS epilogue), A/B bf16, C/D bf16 or
 * fp32, fp32 accumulation; C is not read when beta == 0. The heuristic call
 * checks that the layouts agree with m, n, k and the transposes - the part of
 * matmul_cuda.cu most likely to be wrong - and fails loudly if they do not.
 *
 * The GELU epilogues (cublasLt.h): GELU_AUX[_BIAS] writes D = gelu(v) and
 * aux = v for v = alpha AB (+ bias), gelu taken of the fp32 v; DGELU writes
 * D = alpha AB * gelu'(aux). GELU is the tanh approximation. Aux is a
 * column-major m x n matrix of D's type (bf16 only here) at the aux ld, which
 * must be divisible by 8 and >= m (the documented precondition: a call that
 * breaks it fails here, as the library would refuse it); the aux pointer
 * must be set and, as we ask of our own code, 16-byte aligned.
 *
 * A matmul is queued like a kernel (emu_enqueue): run at once, or recorded
 * on a stream being captured, with its descriptor, layouts and the alpha /
 * beta values copied when it is queued (the library bakes them into the
 * kernels it records), its matrices read when the node runs.
 */
#include "tests/emu/emu_cuda.h" /* first: it defines the CUDA keywords before the CUDA headers do */

#include <math.h>

#include <vector>

#include <cublasLt.h>

#include "tests/emu/emu_internal.h"

using namespace emu;

namespace {
struct EmuDesc {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    int bias_type = -1;
    const void* aux = nullptr;
    int64_t aux_ld = 0;
    int aux_type = -1;   /* unset: D's type */
    cublasComputeType_t compute;
    cudaDataType_t scale;
};
struct EmuLayout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};

template <typename T>
void set_attr(T& dst, const void* buf, size_t size) {
    if (size != sizeof(T)) emu_fail("cuBLASLt attribute with the wrong size");
    memcpy(&dst, buf, sizeof(T));
}

bool has_bias(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool has_aux(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

/* The shape checks cuBLASLt itself makes: op(A) is m x k, op(B) k x n, C and D m x n. */
void check_shapes(const EmuDesc* e, const EmuLayout* a, const EmuLayout* b, const EmuLayout* c, const EmuLayout* d) {
    const uint64_t m = c->rows, n = c->cols;
    const uint64_t am = e->ta == CUBLAS_OP_N ? a->rows : a->cols, ak = e->ta == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t bk = e->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = e->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != m || bn != n || ak != bk || d->rows != m || d->cols != n)
        emu_fail("cuBLASLt shapes disagree: op(A), op(B), C, D are not m x k, k x n, m x n");
    if (a->type != CUDA_R_16BF || b->type != CUDA_R_16BF) emu_fail("cuBLASLt: only bf16 A/B are emulated");
    if (c->type != d->type || (c->type != CUDA_R_16BF && c->type != CUDA_R_32F))
        emu_fail("cuBLASLt: C/D type not emulated");
    if (has_bias(e->epi) && e->bias_type != CUDA_R_16BF) emu_fail("cuBLASLt: only bf16 bias is emulated");
    if (e->epi != CUBLASLT_EPILOGUE_BIAS && e->epi != CUBLASLT_EPILOGUE_DEFAULT && !has_aux(e->epi))
        emu_fail("cuBLASLt: epilogue not emulated");
    if (has_aux(e->epi)) {
        if (e->aux_ld % 8 != 0 || e->aux_ld < (int64_t)m)
            emu_fail("cuBLASLt: GELU aux ld %lld must be divisible by 8 and >= the %llu rows of D",
                     (long long)e->aux_ld, (unsigned long long)m);
        if (d->type != CUDA_R_16BF || (e->aux_type != -1 && e->aux_type != CUDA_R_16BF))
            emu_fail("cuBLASLt: only bf16 D and aux are emulated with the GELU epilogues");
        if (!e->aux || ((uintptr_t)e->aux & 15u)) emu_fail("cuBLASLt: GELU aux pointer unset or not 16-byte aligned");
    }
}

/* GELU, tanh approximation, and its derivative (fp32) */
float gelu_f(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
float gelu_grad_f(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x), th = tanhf(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

float load_as_f32(const void* p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float*)p)[i];
    return __bfloat162float(((const __nv_bfloat16*)p)[i]);
}
} /* namespace */

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    static int token;
    *h = (cublasLtHandle_t)&token;
    return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS error"; }
const char* cublasLtGetStatusString(cublasStatus_t s) { return cublasGetStatusString(s); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    EmuDesc* e = new EmuDesc();
    e->compute = compute;
    e->scale = scale;
    *d = (cublasLtMatmulDesc_t)e;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    EmuDesc* e = (EmuDesc*)d;
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA: set_attr(e->ta, buf, size); break;
        case CUBLASLT_MATMUL_DESC_TRANSB: set_attr(e->tb, buf, size); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE: set_attr(e->epi, buf, size); break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: set_attr(e->bias, buf, size); break;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: set_attr(e->bias_type, buf, size); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: set_attr(e->aux, buf, size); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: set_attr(e->aux_ld, buf, size); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: set_attr(e->aux_type, buf, size); break;
        default: emu_fail("cuBLASLt descriptor attribute %d not emulated", (int)attr);
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;
    *l = (cublasLtMatrixLayout_t) new EmuLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    *p = (cublasLtMatmulPreference_t) new uint64_t[8];
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void*, size_t) {
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete[] (uint64_t*)p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* count) {
    check_shapes((EmuDesc*)d, (EmuLayout*)a, (EmuLayout*)b, (EmuLayout*)c, (EmuLayout*)dd);
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    memset(&results[0], 0, sizeof(results[0]));
    results[0].state = CUBLAS_STATUS_SUCCESS;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t*, void*, size_t,
                              cudaStream_t stream) {
    check_stream(stream, "cublasLtMatmul");
    const EmuDesc e = *(const EmuDesc*)desc;
    const EmuLayout la = *(const EmuLayout*)Adesc, lb = *(const EmuLayout*)Bdesc, lc = *(const EmuLayout*)Cdesc,
                    ld = *(const EmuLayout*)Ddesc;
    check_shapes(&e, &la, &lb, &lc, &ld);
    const float al = *(const float*)alpha, be = *(const float*)beta;
    if (e.epi == CUBLASLT_EPILOGUE_DGELU && be != 0.0f) emu_fail("cuBLASLt: DGELU with beta != 0 is not emulated");
    auto run = [=]() {
        const uint64_t m = lc.rows, n = lc.cols, k = e.ta == CUBLAS_OP_N ? la.cols : la.rows;
        std::vector<float> out(m * n);
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float s = 0.0f;
                for (uint64_t p = 0; p < k; p++) {
                    /* column-major: element (r, c) of a layout at r + c * ld */
                    const size_t ai = e.ta == CUBLAS_OP_N ? i + p * la.ld : p + i * la.ld;
                    const size_t bi = e.tb == CUBLAS_OP_N ? p + j * lb.ld : j + p * lb.ld;
                    s += load_as_f32(A, la.type, ai) * load_as_f32(B, lb.type, bi);
                }
                float v = al * s;
                if (be != 0.0f) v += be * load_as_f32(C, lc.type, i + j * lc.ld);
                if (has_bias(e.epi)) v += __bfloat162float(((const __nv_bfloat16*)e.bias)[i]);
                __nv_bfloat16* aux = (__nv_bfloat16*)e.aux;   /* written (GELU_AUX) or read (DGELU) */
                const size_t xi = i + j * (size_t)e.aux_ld;
                if (e.epi == CUBLASLT_EPILOGUE_GELU_AUX || e.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                    aux[xi] = __float2bfloat16_rn(v);
                    v = gelu_f(v);
                } else if (e.epi == CUBLASLT_EPILOGUE_DGELU) {
                    v *= gelu_grad_f(__bfloat162float(aux[xi]));
                }
                out[i + j * m] = v;
            }
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                const size_t di = i + j * ld.ld;
                if (ld.type == CUDA_R_32F) ((float*)D)[di] = out[i + j * m];
                else ((__nv_bfloat16*)D)[di] = __float2bfloat16_rn(out[i + j * m]);
            }
        check_all_guards("after cublasLtMatmul");
    };
    return emu_enqueue(stream, "cublasLtMatmul", run) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                      : CUBLAS_STATUS_EXECUTION_FAILED;
}

} /* extern "C" */
