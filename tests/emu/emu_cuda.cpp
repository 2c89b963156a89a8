/*
 * tests/emu/emu_cuda.cpp - the CPU side of tests/emu/emu_cuda.h: the SIMT
 * scheduler and warp primitives, and the CUDA runtime and cuBLASLt functions
 * the backend calls, implemented on host memory.
 *
 * The runtime calls act at once (the "device" is host memory, a stream is a
 * token); cudaMalloc'd blocks carry guard zones checked by cudaFree, so an
 * out-of-bounds write by any kernel is caught. cuBLASLt is emulated from its documented semantics: column-major
 * D = alpha op(A) op(B) + beta C (+ bias per row of D with the BIAS
 * epilogue), A/B bf16, C/D bf16 or fp32, fp32 accumulation; C is not read
 * when beta == 0. The heuristic call checks that the layouts agree with
 * m, n, k and the transposes - the part of matmul_cuda.cu most likely to be
 * wrong - and fails loudly if they do not.
 */
#include "emu_cuda.h" /* first: it defines the CUDA keywords before the CUDA headers do */

#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <deque>
#include <map>
#include <vector>

#include <cublasLt.h>

dim3 threadIdx, blockIdx, blockDim, gridDim;

static void emu_fail(const char* what) {
    fprintf(stderr, "emu_cuda: %s (block %u,%u,%u thread %u,%u,%u)\n", what, blockIdx.x, blockIdx.y, blockIdx.z,
            threadIdx.x, threadIdx.y, threadIdx.z);
    exit(2);
}

/* ---- scheduler ---------------------------------------------------------------------- */
#define MAX_THREADS 1024
#define MAX_WARPS (MAX_THREADS / 32)
#define STACK_BYTES (128 * 1024)
#define SMEM_BYTES (228 * 1024)

struct Coroutine {
    ucontext_t uc;
    char* stack;
    bool done;
};
static Coroutine g_co[MAX_THREADS];
static ucontext_t g_sched;
static int g_cur, g_nthreads;
static EmuBody g_body;
static void* g_ctx;
alignas(16) static unsigned char g_smem[SMEM_BYTES];

unsigned char* emu_dynamic_smem() { return g_smem; }

static uint64_t g_rng = 0x853C49E6748FEA9Bull;
static uint64_t emu_rand() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng >> 11;
}

static void co_entry() {
    g_body(g_ctx);
    g_co[g_cur].done = true; /* returning resumes uc_link, the scheduler */
}
static void emu_yield() { swapcontext(&g_co[g_cur].uc, &g_sched); }

static void set_thread_coords(int t) {
    threadIdx = dim3((unsigned)t % blockDim.x, ((unsigned)t / blockDim.x) % blockDim.y,
                     (unsigned)t / (blockDim.x * blockDim.y));
}
static int linear_tid() { return g_cur; }
static int lane_id() { return g_cur & 31; }
static int warp_id() { return g_cur >> 5; }

/* a collective completes when n participants arrived; the last computes for all */
struct Coll {
    int arrived = 0, kind = -1;
    unsigned gen = 0;
};
static Coll g_warp_coll[MAX_WARPS], g_block_coll;

template <typename F>
static void collective(Coll& c, int n, int kind, F last) {
    if (c.arrived == 0) c.kind = kind;
    else if (c.kind != kind) emu_fail("threads reached different collectives (divergence)");
    const unsigned gen = c.gen;
    if (++c.arrived == n) {
        last();
        c.arrived = 0;
        c.gen++;
        return;
    }
    while (c.gen == gen) emu_yield();
}
/* a warp collective needs the whole warp present in the block */
static int warp_size_here() {
    int w0 = warp_id() * 32;
    int n = g_nthreads - w0;
    if (n < 32) emu_fail("warp collective in a partial warp is not emulated");
    return 32;
}

struct Copy {
    void* dst;
    const void* src;
    bool valid;
};
struct AsyncState {
    std::vector<Copy> open;
    std::deque<std::vector<Copy>> groups;
};
static AsyncState g_async[MAX_THREADS];

static void init_coroutine(int t) {
    Coroutine& c = g_co[t];
    if (!c.stack && !(c.stack = (char*)malloc(STACK_BYTES))) emu_fail("out of memory for coroutine stacks");
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = c.stack;
    c.uc.uc_stack.ss_size = STACK_BYTES;
    c.uc.uc_link = &g_sched;
    makecontext(&c.uc, co_entry, 0);
    c.done = false;
    g_async[t] = AsyncState();
}

static void run_block() {
    for (int t = 0; t < g_nthreads; t++) init_coroutine(t);
    for (int w = 0; w < MAX_WARPS; w++) g_warp_coll[w] = Coll();
    g_block_coll = Coll();
    /* each pass resumes a random non-empty subset of the warps: warps drift
     * apart between barriers, as on the hardware */
    const int nwarps = (g_nthreads + 31) / 32;
    std::vector<char> run(nwarps);
    for (bool busy = true; busy;) {
        busy = false;
        bool any = false;
        while (!any)
            for (int w = 0; w < nwarps; w++) any |= (run[w] = (char)(emu_rand() & 1)) != 0;
        for (int t = 0; t < g_nthreads; t++) {
            if (g_co[t].done) continue;
            busy = true;
            if (!run[t >> 5]) continue;
            g_cur = t;
            set_thread_coords(t);
            swapcontext(&g_sched, &g_co[t].uc);
        }
    }
}

/* dynamic shared memory limit per kernel, as cudaFuncSetAttribute raised it */
static std::map<const void*, int> g_smem_limit;
static cudaError_t g_last_error = cudaSuccess;

void emu_run_grid(const void* fn, dim3 grid, dim3 block, size_t smem, EmuBody body, void* ctx) {
    const size_t nthreads = (size_t)block.x * block.y * block.z;
    int limit = 48 * 1024;
    auto it = g_smem_limit.find(fn);
    if (it != g_smem_limit.end()) limit = it->second;
    if (nthreads == 0 || nthreads > MAX_THREADS || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
        grid.z > 65535 || block.z > 64) {
        g_last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (smem > (size_t)limit || smem > SMEM_BYTES) {
        g_last_error = cudaErrorInvalidValue; /* what the runtime says for too much dynamic shared memory */
        return;
    }
    g_body = body;
    g_ctx = ctx;
    g_nthreads = (int)nthreads;
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                memset(g_smem, 0xFF, smem ? smem : 16); /* NaN bytes: reads of unset data are loud */
                run_block();
            }
}

/* ---- primitives ---------------------------------------------------------------------- */
struct WarpBuf {
    const __nv_bfloat16* addr[32];
    uint32_t r[32][4];
    double vin[32], vout[32];
    uint32_t a[32][4], b[32][2];
    float c[32][4], d[32][4];
};
static WarpBuf g_wb[MAX_WARPS];

void __syncthreads() {
    collective(g_block_coll, g_nthreads, 100, [] {});
}

static double shfl_xor(double v, int o, int kind) {
    WarpBuf& wb = g_wb[warp_id()];
    wb.vin[lane_id()] = v;
    collective(g_warp_coll[warp_id()], warp_size_here(), kind, [&] {
        for (int l = 0; l < 32; l++) wb.vout[l] = wb.vin[l ^ o];
    });
    return wb.vout[lane_id()];
}
float emu_shfl_xor_f(float v, int o) { return (float)shfl_xor(v, o, 1); }
double emu_shfl_xor_d(double v, int o) { return shfl_xor(v, o, 5); }

static bool in_smem(const void* p, size_t bytes) {
    const unsigned char* q = (const unsigned char*)p;
    return q >= g_smem && q + bytes <= g_smem + SMEM_BYTES;
}

void cp_async16(void* smem, const void* gmem, bool valid) {
    if (((uintptr_t)smem & 15) || ((uintptr_t)gmem & 15)) emu_fail("cp.async address not 16-byte aligned");
    if (!in_smem(smem, 16)) emu_fail("cp.async destination outside shared memory");
    if (emu_rand() & 1) { /* lands at once ... */
        if (valid) memcpy(smem, gmem, 16);
        else memset(smem, 0, 16);
        return;
    }
    g_async[linear_tid()].open.push_back(Copy{smem, gmem, valid}); /* ... or at its wait */
}
void cp_async_commit() {
    AsyncState& s = g_async[linear_tid()];
    s.groups.push_back(s.open);
    s.open.clear();
}
void emu_cp_async_wait(int n) {
    AsyncState& s = g_async[linear_tid()];
    while ((int)s.groups.size() > n) {
        for (const Copy& c : s.groups.front()) {
            if (c.valid) memcpy(c.dst, c.src, 16);
            else memset(c.dst, 0, 16);
        }
        s.groups.pop_front();
    }
}

static uint16_t bits16(__nv_bfloat16 h) {
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

/* ldmatrix.x4: lanes 8i..8i+7 give the rows of matrix i; register i of lane l
 * holds row l/4, elements 2(l%4), 2(l%4)+1 of matrix i (of its transpose
 * with .trans) */
static void ldsm(uint32_t (&r)[4], const __nv_bfloat16* p, bool trans) {
    if ((uintptr_t)p & 15) emu_fail("ldmatrix row address not 16-byte aligned");
    if (!in_smem(p, 16)) emu_fail("ldmatrix row outside shared memory");
    WarpBuf& wb = g_wb[warp_id()];
    wb.addr[lane_id()] = p;
    collective(g_warp_coll[warp_id()], warp_size_here(), trans ? 3 : 2, [&] {
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++) {
                const __nv_bfloat16* const* rows = &wb.addr[8 * i];
                uint16_t e0, e1;
                if (!trans) {
                    e0 = bits16(rows[l / 4][2 * (l % 4)]);
                    e1 = bits16(rows[l / 4][2 * (l % 4) + 1]);
                } else {
                    e0 = bits16(rows[2 * (l % 4)][l / 4]);
                    e1 = bits16(rows[2 * (l % 4) + 1][l / 4]);
                }
                wb.r[l][i] = (uint32_t)e0 | ((uint32_t)e1 << 16);
            }
    });
    for (int i = 0; i < 4; i++) r[i] = wb.r[lane_id()][i];
}
void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p) { ldsm(r, p, false); }
void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16* p) { ldsm(r, p, true); }

static float bf_lo(uint32_t u) {
    uint32_t x = u << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
static float bf_hi(uint32_t u) {
    uint32_t x = u & 0xffff0000u;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* mma.m16n8k16 (g = lane/4, t = lane%4), per the PTX ISA:
 *   A reg i, half h -> (row g + 8(i%2), col 2t + h + 8(i/2))
 *   B reg i, half h -> (k 2t + h + 8i, n g)
 *   C/D element e   -> (row g + 8(e/2), col 2t + e%2) */
void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    WarpBuf& wb = g_wb[warp_id()];
    const int ln = lane_id();
    for (int i = 0; i < 4; i++) {
        wb.a[ln][i] = a[i];
        wb.c[ln][i] = d[i];
    }
    wb.b[ln][0] = b0;
    wb.b[ln][1] = b1;
    collective(g_warp_coll[warp_id()], warp_size_here(), 4, [&] {
        float A[16][16], B[16][8], C[16][8];
        for (int l = 0; l < 32; l++) {
            const int g = l / 4, t = l % 4;
            for (int i = 0; i < 4; i++) {
                A[g + 8 * (i % 2)][2 * t + 8 * (i / 2)] = bf_lo(wb.a[l][i]);
                A[g + 8 * (i % 2)][2 * t + 1 + 8 * (i / 2)] = bf_hi(wb.a[l][i]);
            }
            for (int i = 0; i < 2; i++) {
                B[2 * t + 8 * i][g] = bf_lo(wb.b[l][i]);
                B[2 * t + 1 + 8 * i][g] = bf_hi(wb.b[l][i]);
            }
            for (int e = 0; e < 4; e++) C[g + 8 * (e / 2)][2 * t + e % 2] = wb.c[l][e];
        }
        for (int l = 0; l < 32; l++) {
            const int g = l / 4, t = l % 4;
            for (int e = 0; e < 4; e++) {
                const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
                float s = C[row][col];
                for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
                wb.d[l][e] = s;
            }
        }
    });
    for (int e = 0; e < 4; e++) d[e] = wb.d[ln][e];
}

/* ---- CUDA runtime -------------------------------------------------------------------- */
extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof(*prop));
    strcpy(prop->name, "CPU emulation (tests/emu)");
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->sharedMemPerBlockOptin = 227 * 1024;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
    static int token;
    *s = (cudaStream_t)&token;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
/* Device allocations carry a guard zone on each side, checked when freed:
 * a kernel writing out of bounds fails the run there. */
#define GUARD_BYTES 256
static std::map<void*, size_t> g_allocs;
static bool guards_intact(unsigned char* p, size_t n) {
    for (size_t i = 0; i < GUARD_BYTES; i++)
        if (p[-(ptrdiff_t)GUARD_BYTES + (ptrdiff_t)i] != 0xC3 || p[n + i] != 0xC3) return false;
    return true;
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
    const size_t n = (bytes + 255) / 256 * 256;
    unsigned char* base = (unsigned char*)aligned_alloc(256, n + 2 * GUARD_BYTES);
    if (!base) return cudaErrorMemoryAllocation;
    memset(base, 0xC3, n + 2 * GUARD_BYTES);
    memset(base + GUARD_BYTES, 0xA5, n); /* fresh device memory is not zero: ops_malloc must clear it */
    *p = base + GUARD_BYTES;
    g_allocs[*p] = n;
    return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    auto it = g_allocs.find(p);
    if (it == g_allocs.end()) emu_fail("cudaFree of a pointer cudaMalloc did not return");
    if (!guards_intact((unsigned char*)p, it->second)) emu_fail("a kernel wrote outside its allocation (guard zone damaged)");
    g_allocs.erase(it);
    free((unsigned char*)p - GUARD_BYTES);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t) {
    memset(p, v, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
    memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    *free_b = *total_b = (size_t)1 << 34;
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value > 227 * 1024) return cudaErrorInvalidValue;
        g_smem_limit[func] = value;
    }
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_last_error;
    g_last_error = cudaSuccess;
    return e;
}
const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        default: return "emulated CUDA error";
    }
}
const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        default: return "cudaErrorUnknown";
    }
}

} /* extern "C" */

/* ---- cuBLASLt ---------------------------------------------------------------------------- */
struct EmuDesc {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    int bias_type = -1;
    cublasComputeType_t compute;
    cudaDataType_t scale;
};
struct EmuLayout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};

template <typename T>
static void set_attr(T& dst, const void* buf, size_t size) {
    if (size != sizeof(T)) emu_fail("cuBLASLt attribute with the wrong size");
    memcpy(&dst, buf, sizeof(T));
}

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
        default: emu_fail("cuBLASLt descriptor attribute not emulated");
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

/* The shape checks cuBLASLt itself makes: op(A) is m x k, op(B) k x n, C and D m x n. */
static void check_shapes(const EmuDesc* e, const EmuLayout* a, const EmuLayout* b, const EmuLayout* c,
                         const EmuLayout* d) {
    const uint64_t m = c->rows, n = c->cols;
    const uint64_t am = e->ta == CUBLAS_OP_N ? a->rows : a->cols, ak = e->ta == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t bk = e->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = e->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != m || bn != n || ak != bk || d->rows != m || d->cols != n)
        emu_fail("cuBLASLt shapes disagree: op(A), op(B), C, D are not m x k, k x n, m x n");
    if (a->type != CUDA_R_16BF || b->type != CUDA_R_16BF) emu_fail("only bf16 A/B are emulated");
    if (c->type != d->type || (c->type != CUDA_R_16BF && c->type != CUDA_R_32F)) emu_fail("C/D type not emulated");
    if (e->epi == CUBLASLT_EPILOGUE_BIAS && e->bias_type != CUDA_R_16BF) emu_fail("only bf16 bias is emulated");
    if (e->epi != CUBLASLT_EPILOGUE_BIAS && e->epi != CUBLASLT_EPILOGUE_DEFAULT) emu_fail("epilogue not emulated");
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

static float load_as_f32(const void* p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float*)p)[i];
    return __bfloat162float(((const __nv_bfloat16*)p)[i]);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
    const EmuDesc* e = (const EmuDesc*)desc;
    const EmuLayout *la = (const EmuLayout*)Adesc, *lb = (const EmuLayout*)Bdesc, *lc = (const EmuLayout*)Cdesc,
                    *ld = (const EmuLayout*)Ddesc;
    check_shapes(e, la, lb, lc, ld);
    const float al = *(const float*)alpha, be = *(const float*)beta;
    const uint64_t m = lc->rows, n = lc->cols, k = e->ta == CUBLAS_OP_N ? la->cols : la->rows;
    std::vector<float> out(m * n);
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            float s = 0.0f;
            for (uint64_t p = 0; p < k; p++) {
                /* column-major: element (r, c) of a layout at r + c * ld */
                const size_t ai = e->ta == CUBLAS_OP_N ? i + p * la->ld : p + i * la->ld;
                const size_t bi = e->tb == CUBLAS_OP_N ? p + j * lb->ld : j + p * lb->ld;
                s += load_as_f32(A, la->type, ai) * load_as_f32(B, lb->type, bi);
            }
            float v = al * s;
            if (be != 0.0f) v += be * load_as_f32(C, lc->type, i + j * lc->ld);
            if (e->epi == CUBLASLT_EPILOGUE_BIAS) v += __bfloat162float(((const __nv_bfloat16*)e->bias)[i]);
            out[i + j * m] = v;
        }
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            const size_t di = i + j * ld->ld;
            if (ld->type == CUDA_R_32F) ((float*)D)[di] = out[i + j * m];
            else ((__nv_bfloat16*)D)[di] = __float2bfloat16_rn(out[i + j * m]);
        }
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
