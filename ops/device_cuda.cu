/*
 * ops/device_cuda.cu - the backend itself: device selection (ops_init), the
 * one stream, the per-slot scratch and pinned buffers, device memory, pinned
 * host memory and copies, the CUDA graph of a step (ops_graph_*), and the
 * fp32 <-> bf16 conversions (ops_f32_to_X / ops_X_to_f32).
 *
 * Everything the other ops/..._cuda.cu files share at run time lives here
 * (cuda_common.cuh declares it): every kernel, memset and copy of the backend
 * goes on cuda_stream(), so the ops are ordered without events, and
 * ops_to_host / ops_from_host / ops_malloc synchronise before returning
 * (ops_from_host_async / ops_to_host_async, between device memory and
 * ops_malloc_host's pinned memory, only queue).
 * The backend state is per process, so two ranks sharing a GPU each have
 * their own stream and scratch.
 *
 * CUDA graphs (ops.h, train.cuda_graph): the stream is captured between
 * ops_graph_begin and ops_graph_end in the thread-local mode, which makes
 * the runtime refuse any call of this thread that could wait for the device
 * or allocate while it records (other threads, e.g. NCCL's, are not held to
 * it). A scratch slot that must grow after the capture would be freed under
 * the graph, so that is a fatal error naming the slot; one that must grow
 * during it, too (the warm-up step before the capture sizes every slot).
 *
 * The conversions are flat element-wise kernels (cuda_common.cuh: 8 elements
 * per thread, 16-byte accesses when aligned); __float2bfloat16_rn rounds to
 * nearest even, which tests/test_ops_gpu.cu checks bit for bit against the
 * host rounding of common/bf16.h (ties, subnormals, infinities included).
 */
#include <string.h>

#include "ops/cuda_common.cuh"
#include "ops/ops_cuda.h"

/* ------------------------------------------------------------------------ */
/* backend state: one device, one stream, scratch buffers (per process, so two
 * ranks sharing a GPU each have their own) */

static int g_inited = 0;
static cudaStream_t g_stream = nullptr;
static int g_num_sms = 0;
static void* g_scratch[SCRATCH_NSLOTS];
static size_t g_scratch_bytes[SCRATCH_NSLOTS];
static void* g_pinned[SCRATCH_NSLOTS];
static size_t g_pinned_bytes[SCRATCH_NSLOTS];
static cudaGraphExec_t g_graph = nullptr; /* the one instantiated graph (ops_graph_end) */
static int g_capturing = 0;               /* between ops_graph_begin and ops_graph_end */

/* a slot may not be reallocated while a graph records or holds its address */
static void scratch_may_grow(const char* kind, int slot, size_t bytes) {
    if (g_capturing || g_graph)
        FATAL("%s slot %d must grow to %zu bytes %s: the warm-up step before the capture should have sized it "
              "(run with train.cuda_graph=false and report this)", kind, slot, bytes,
              g_capturing ? "while the step is captured into a CUDA graph" : "after the CUDA graph captured it");
}

cudaStream_t cuda_stream(void) {
    if (!g_inited) FATAL("a CUDA op ran before ops_init(local_rank): call ops_init first");
    return g_stream;
}
int cuda_num_sms(void) { return g_num_sms; }
void* ops_cuda_stream(void) { return (void*)cuda_stream(); }

void* cuda_scratch(int slot, size_t bytes) {
    if (slot < 0 || slot >= SCRATCH_NSLOTS) FATAL("bad scratch slot %d", slot);
    if (bytes > g_scratch_bytes[slot]) {
        scratch_may_grow("scratch", slot, bytes);
        /* cudaFree waits for the device, so no queued kernel still uses the old buffer */
        CUDA_CHECK(cudaFree(g_scratch[slot]));
        g_scratch[slot] = nullptr;
        size_t want = bytes + bytes / 4; /* headroom: fewer regrowths when shapes creep up */
        cudaError_t e = cudaMalloc(&g_scratch[slot], want);
        if (e != cudaSuccess)
            FATAL("out of device memory for %zu bytes of scratch (slot %d): %s; use a smaller batch",
                  want, slot, cudaGetErrorString(e));
        g_scratch_bytes[slot] = want;
    }
    return g_scratch[slot];
}

void* cuda_pinned(int slot, size_t bytes) {
    if (slot < 0 || slot >= SCRATCH_NSLOTS) FATAL("bad pinned slot %d", slot);
    if (bytes > g_pinned_bytes[slot]) {
        scratch_may_grow("pinned", slot, bytes);
        CUDA_CHECK(cudaStreamSynchronize(cuda_stream())); /* no copy may still read the old one */
        CUDA_CHECK(cudaFreeHost(g_pinned[slot]));
        g_pinned[slot] = nullptr;
        size_t want = bytes + bytes / 4;
        CUDA_CHECK(cudaMallocHost(&g_pinned[slot], want));
        g_pinned_bytes[slot] = want;
    }
    return g_pinned[slot];
}

/* ------------------------------------------------------------------------ */
/* memory and backend */

void ops_init(int local_rank) {
    if (g_inited) return;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0)
        FATAL("no CUDA device is visible (%s); the GPU build needs one: check nvidia-smi and "
              "CUDA_VISIBLE_DEVICES, or use the CPU build",
              e != cudaSuccess ? cudaGetErrorString(e) : "device count 0");
    int dev = (local_rank < 0 ? 0 : local_rank) % count;
    CUDA_CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major < 8)
        FATAL("device %d (%s) has compute capability %d.%d; this backend needs >= 8.0 "
              "(bf16 tensor-core mma, cp.async)", dev, prop.name, prop.major, prop.minor);
    g_num_sms = prop.multiProcessorCount;
    /* A blocking stream (not cudaStreamNonBlocking): work another module puts on
     * the legacy default stream stays ordered with ours. */
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    g_inited = 1;
    matmul_cuda_init();
    attention_cuda_init();
}

const char* ops_backend_name(void) { return "cuda-bf16"; }

int ops_mem_info(size_t* free_bytes, size_t* total_bytes, int* device) {
    if (!g_inited) FATAL("ops_mem_info before ops_init(local_rank): call ops_init first");
    CUDA_CHECK(cudaGetDevice(device));
    CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return 1;
}

void* ops_malloc(size_t bytes) {
    cudaStream_t s = cuda_stream();
    void* p = nullptr;
    size_t want = bytes ? bytes : 16; /* never hand out NULL for an empty tensor */
    cudaError_t e = cudaMalloc(&p, want);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        FATAL("out of device memory allocating %zu bytes (%zu of %zu MiB free): %s; use a smaller "
              "model or batch", want, free_b >> 20, total_b >> 20, cudaGetErrorString(e));
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, want, s));
    /* Allocation is rare: wait, so the zeros are there for any stream or module. */
    CUDA_CHECK(cudaStreamSynchronize(s));
    return p;
}

void ops_free(void* p) {
    if (p) CUDA_CHECK(cudaFree(p));
}

void ops_zero(void* p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream()));
}

void ops_copy(void* dst, const void* src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream()));
}

/* Synchronous from the caller's view: on return the host buffer holds the
 * data (to_host) or may be reused (from_host). */
void ops_to_host(void* host_dst, const void* src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream()));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));
}
void ops_from_host(void* dst, const void* host_src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cuda_stream()));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));
}

void ops_sync(void) { CUDA_CHECK(cudaStreamSynchronize(cuda_stream())); }

void* ops_malloc_host(size_t bytes) {
    void* p = nullptr;
    size_t want = bytes ? bytes : 16;
    cudaError_t e = cudaMallocHost(&p, want);
    if (e != cudaSuccess) FATAL("out of pinned host memory allocating %zu bytes: %s", want, cudaGetErrorString(e));
    memset(p, 0, want);
    return p;
}
void ops_free_host(void* p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}
void ops_from_host_async(void* dst, const void* host_src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cuda_stream()));
}
void ops_to_host_async(void* host_dst, const void* src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream()));
}

/* ------------------------------------------------------------------------ */
/* CUDA graphs (ops.h) */

int ops_graph_supported(void) { return 1; }

void ops_graph_begin(void) {
    if (g_capturing || g_graph) FATAL("ops_graph_begin: a CUDA graph is already %s", g_capturing ? "being captured" : "held");
    CUDA_CHECK(cudaStreamBeginCapture(cuda_stream(), cudaStreamCaptureModeThreadLocal));
    g_capturing = 1;
}

int ops_graph_end(void) {
    if (!g_capturing) FATAL("ops_graph_end without ops_graph_begin");
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(cuda_stream(), &graph));
    g_capturing = 0;
    size_t nodes = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    CUDA_CHECK(cudaGraphInstantiate(&g_graph, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph)); /* the executable graph keeps what it needs */
    return (int)nodes;
}

void ops_graph_launch(void) {
    if (!g_graph) FATAL("ops_graph_launch without a captured graph");
    CUDA_CHECK(cudaGraphLaunch(g_graph, cuda_stream()));
}

void ops_graph_free(void) {
    if (!g_graph) return;
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream())); /* no replay may still run */
    CUDA_CHECK(cudaGraphExecDestroy(g_graph));
    g_graph = nullptr;
}

/* ------------------------------------------------------------------------ */
/* fp32 <-> bf16: flat element-wise kernels (cuda_common.cuh: EW_THREADS, ew_blocks) */

template <bool VEC>
__global__ void f32_to_bf16_kernel(bf16* dst, const float* src, size_t n) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    if (VEC && i0 + 8 <= n) {
        float4 a = *reinterpret_cast<const float4*>(src + i0);
        float4 b = *reinterpret_cast<const float4*>(src + i0 + 4);
        float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        store8(dst + i0, f);
    } else {
        for (size_t i = i0; i < n && i < i0 + 8; i++) dst[i] = __float2bfloat16_rn(src[i]);
    }
}

template <bool VEC>
__global__ void bf16_to_f32_kernel(float* dst, const bf16* src, size_t n) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    if (VEC && i0 + 8 <= n) {
        float f[8];
        load8(f, src + i0);
        *reinterpret_cast<float4*>(dst + i0) = make_float4(f[0], f[1], f[2], f[3]);
        *reinterpret_cast<float4*>(dst + i0 + 4) = make_float4(f[4], f[5], f[6], f[7]);
    } else {
        for (size_t i = i0; i < n && i < i0 + 8; i++) dst[i] = __bfloat162float(src[i]);
    }
}

void ops_f32_to_X(floatX* dst, const float* src, size_t n) {
    if (!n) return;
    bf16* d = (bf16*)dst;
    if (is_aligned16(d) && is_aligned16(src))
        f32_to_bf16_kernel<true><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(d, src, n);
    else
        f32_to_bf16_kernel<false><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(d, src, n);
    CUDA_CHECK_LAUNCH("f32_to_bf16_kernel");
}

void ops_X_to_f32(float* dst, const floatX* src, size_t n) {
    if (!n) return;
    const bf16* s = (const bf16*)src;
    if (is_aligned16(dst) && is_aligned16(s))
        bf16_to_f32_kernel<true><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(dst, s, n);
    else
        bf16_to_f32_kernel<false><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(dst, s, n);
    CUDA_CHECK_LAUNCH("bf16_to_f32_kernel");
}
