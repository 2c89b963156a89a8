/*
 * model/ops_cuda.cu - the CUDA backend of model/ops.h: device memory, the one
 * stream, and every op except the matmuls (matmul_cuda.cu) and attention
 * (attention_cuda.cu).
 *
 * Numerics: activations and working weights are bf16 (floatX = uint16_t bit
 * patterns, reinterpreted here as __nv_bfloat16); all arithmetic is fp32;
 * parameter gradients, master weights and optimizer moments are fp32.
 * Conventions of ops.h hold: activation gradients are overwritten except
 * layernorm_backward's dinp (accumulates); parameter gradients accumulate.
 *
 * Determinism: no float atomics anywhere. Every reduction that crosses rows
 * (dw, db, dbias, dwpe, dwte, norms) runs in a fixed order that depends only
 * on the shapes, never on timing or on the device's SM count: per-block
 * partial sums written to scratch, then a second kernel that adds them in
 * block order. Two identical runs are bit-identical.
 *
 * Speed: the element-wise and row kernels move 16 bytes per access (8 bf16)
 * when C % 8 == 0 and pointers are aligned (always the case for GPT-2 shapes
 * and ops_malloc'd buffers), with a scalar fallback otherwise.
 *
 * Dims: N = B*T rows, C channels, V real vocab, Vr vocab rows of this rank
 * starting at global id v0.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

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

cudaStream_t cuda_stream(void) {
    if (!g_inited) FATAL("a CUDA op ran before ops_init(local_rank): call ops_init first");
    return g_stream;
}
int cuda_num_sms(void) { return g_num_sms; }
void* ops_cuda_stream(void) { return (void*)cuda_stream(); }

void* cuda_scratch(int slot, size_t bytes) {
    if (slot < 0 || slot >= SCRATCH_NSLOTS) FATAL("bad scratch slot %d", slot);
    if (bytes > g_scratch_bytes[slot]) {
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
}

const char* ops_backend_name(void) { return "cuda-bf16"; }

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

/* ------------------------------------------------------------------------ */
/* flat element-wise kernels: thread i owns elements [8i, 8i+8). VEC: all
 * pointers 16-byte aligned, so full chunks are single 16-byte accesses; the
 * last partial chunk (n % 8) always goes element by element. */

#define EW_THREADS 256

static inline unsigned int ew_blocks(size_t n) { return ceil_div_u(ceil_div_u(n, 8), EW_THREADS); }

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

/* residual: out = a + b (out may alias a or b: each thread reads its chunk before writing it) */
template <bool VEC>
__global__ void residual_kernel(bf16* out, const bf16* a, const bf16* b, size_t n) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    if (VEC && i0 + 8 <= n) {
        float fa[8], fb[8];
        load8(fa, a + i0);
        load8(fb, b + i0);
#pragma unroll
        for (int k = 0; k < 8; k++) fa[k] += fb[k];
        store8(out + i0, fa);
    } else {
        for (size_t i = i0; i < n && i < i0 + 8; i++)
            out[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
    }
}

void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n) {
    if (!n) return;
    bf16 *o = (bf16*)out;
    const bf16 *pa = (const bf16*)a, *pb = (const bf16*)b;
    if (is_aligned16(o) && is_aligned16(pa) && is_aligned16(pb))
        residual_kernel<true><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(o, pa, pb, n);
    else
        residual_kernel<false><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(o, pa, pb, n);
    CUDA_CHECK_LAUNCH("residual_kernel");
}

/* GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * tanhf (not a fast approximation) so the fp32 math matches the CPU reference
 * to rounding; the kernel is memory-bound either way. */
#define GELU_K 0.7978845608028654f
#define GELU_A 0.044715f

__device__ __forceinline__ float gelu_f(float x) {
    float u = GELU_K * (x + GELU_A * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
    float u = GELU_K * (x + GELU_A * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
}

template <bool VEC>
__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, size_t n) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    if (VEC && i0 + 8 <= n) {
        float f[8];
        load8(f, inp + i0);
#pragma unroll
        for (int k = 0; k < 8; k++) f[k] = gelu_f(f[k]);
        store8(out + i0, f);
    } else {
        for (size_t i = i0; i < n && i < i0 + 8; i++) out[i] = __float2bfloat16_rn(gelu_f(__bfloat162float(inp[i])));
    }
}

template <bool VEC>
__global__ void gelu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    if (VEC && i0 + 8 <= n) {
        float x[8], d[8];
        load8(x, inp + i0);
        load8(d, dout + i0);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = gelu_grad_f(x[k]) * d[k];
        store8(dinp + i0, x);
    } else {
        for (size_t i = i0; i < n && i < i0 + 8; i++)
            dinp[i] = __float2bfloat16_rn(gelu_grad_f(__bfloat162float(inp[i])) * __bfloat162float(dout[i]));
    }
}

void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    if (!n) return;
    bf16* o = (bf16*)out;
    const bf16* x = (const bf16*)inp;
    if (is_aligned16(o) && is_aligned16(x))
        gelu_forward_kernel<true><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(o, x, n);
    else
        gelu_forward_kernel<false><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(o, x, n);
    CUDA_CHECK_LAUNCH("gelu_forward_kernel");
}

void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    if (!n) return;
    bf16* di = (bf16*)dinp;
    const bf16 *x = (const bf16*)inp, *d = (const bf16*)dout;
    if (is_aligned16(di) && is_aligned16(x) && is_aligned16(d))
        gelu_backward_kernel<true><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(di, x, d, n);
    else
        gelu_backward_kernel<false><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(di, x, d, n);
    CUDA_CHECK_LAUNCH("gelu_backward_kernel");
}

/* ------------------------------------------------------------------------ */
/* row-chunk kernels: rows of C bf16, one thread per 8-column chunk. VEC needs
 * C % 8 == 0 and aligned base pointers (then every row start is aligned). */

static inline bool rows_vec_ok(int C) { return C % 8 == 0; }

/* out[n,:] = wte[tok[n]-v0,:] inside the slice, else zeros */
template <bool VEC>
__global__ void encoder_forward_kernel(bf16* out, const int* tok, const bf16* wte, int N, int C, int v0, int Vr) {
    const int nch = (C + 7) / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * nch) return;
    int n = (int)(idx / nch), c = (int)(idx % nch) * 8;
    int row = tok[n] - v0;
    float f[8];
    if (row >= 0 && row < Vr) {
        ld8<VEC>(f, wte + (size_t)row * C, c, C);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) f[k] = 0.0f;
    }
    st8<VEC>(out + (size_t)n * C, c, C, f);
}

void encoder_forward(floatX* out, const int* tok, const floatX* wte, int N, int C, int v0, int Vr) {
    if (N <= 0 || C <= 0) return;
    size_t total = (size_t)N * ((C + 7) / 8);
    bf16* o = (bf16*)out;
    const bf16* w = (const bf16*)wte;
    if (rows_vec_ok(C) && is_aligned16(o) && is_aligned16(w))
        encoder_forward_kernel<true><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(o, tok, w, N, C, v0, Vr);
    else
        encoder_forward_kernel<false><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(o, tok, w, N, C, v0, Vr);
    CUDA_CHECK_LAUNCH("encoder_forward_kernel");
}

/* Encoder backward, deterministic. Positions holding the same token add into
 * the same dwte row, so the host buckets them first: the token ids come back
 * to the host (N ints), a stable counting sort groups positions by vocab row
 * (ascending n inside a row), and one block per touched row walks its list in
 * that order: dwte[row,c] = ((dwte + dout[n1]) + dout[n2]) + ..., the CPU
 * reference's exact order, so the result is bit-identical to it.
 * meta = [rows[nu] | start[nu+1] | pos[npos]] */
template <bool VEC>
__global__ void encoder_backward_kernel(float* dwte, const bf16* dout, const int* meta, int nu, int C) {
    const int u = blockIdx.x;
    const int* rows = meta;
    const int* start = meta + nu;
    const int* pos = meta + 2 * nu + 1;
    const int row = rows[u], p0 = start[u], p1 = start[u + 1];
    float* dw = dwte + (size_t)row * C;
    const int nch = (C + 7) / 8;
    for (int ch = threadIdx.x; ch < nch; ch += blockDim.x) {
        const int c = ch * 8;
        float acc[8];
        if (VEC) {
            float4 a = *reinterpret_cast<const float4*>(dw + c);
            float4 b = *reinterpret_cast<const float4*>(dw + c + 4);
            acc[0] = a.x; acc[1] = a.y; acc[2] = a.z; acc[3] = a.w;
            acc[4] = b.x; acc[5] = b.y; acc[6] = b.z; acc[7] = b.w;
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] = (c + k < C) ? dw[c + k] : 0.0f;
        }
        for (int p = p0; p < p1; p++) {
            float d[8];
            ld8<VEC>(d, dout + (size_t)pos[p] * C, c, C);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += d[k];
        }
        if (VEC) {
            *reinterpret_cast<float4*>(dw + c) = make_float4(acc[0], acc[1], acc[2], acc[3]);
            *reinterpret_cast<float4*>(dw + c + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (c + k < C) dw[c + k] = acc[k];
        }
    }
}

void encoder_backward(float* dwte, const floatX* dout, const int* tok, int N, int C, int v0, int Vr) {
    if (N <= 0 || C <= 0 || Vr <= 0) return;
    cudaStream_t s = cuda_stream();
    /* the ids to the host (pinned; synchronous: the bucketing needs them) */
    int* htok = (int*)cuda_pinned(SCRATCH_ENCODER_IDS, (size_t)N * sizeof(int));
    CUDA_CHECK(cudaMemcpyAsync(htok, tok, (size_t)N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    /* stable counting sort by local vocab row */
    static std::vector<int> count;
    count.assign((size_t)Vr, 0);
    int npos = 0;
    for (int n = 0; n < N; n++) {
        int r = htok[n] - v0;
        if (r >= 0 && r < Vr) {
            count[r]++;
            npos++;
        }
    }
    if (npos == 0) return; /* no token of this slice: nothing to add */
    int nu = 0;
    for (int r = 0; r < Vr; r++) nu += count[r] > 0;
    int* meta = (int*)cuda_pinned(SCRATCH_ENCODER, (size_t)(2 * nu + 1 + npos) * sizeof(int));
    int* rows = meta;
    int* start = meta + nu;
    int* pos = meta + 2 * nu + 1;
    /* count[r] becomes the write cursor of row r inside pos */
    int u = 0, off = 0;
    for (int r = 0; r < Vr; r++) {
        if (!count[r]) continue;
        rows[u] = r;
        start[u] = off;
        int c = count[r];
        count[r] = off;
        off += c;
        u++;
    }
    start[nu] = off;
    for (int n = 0; n < N; n++) {
        int r = htok[n] - v0;
        if (r >= 0 && r < Vr) pos[count[r]++] = n;
    }
    size_t meta_bytes = (size_t)(2 * nu + 1 + npos) * sizeof(int);
    int* dmeta = (int*)cuda_scratch(SCRATCH_ENCODER, meta_bytes);
    /* Async from pinned memory: the next call's synchronous id copy on this
     * stream orders after this upload, so `meta` is free again by then. */
    CUDA_CHECK(cudaMemcpyAsync(dmeta, meta, meta_bytes, cudaMemcpyHostToDevice, s));
    const bf16* d = (const bf16*)dout;
    if (rows_vec_ok(C) && is_aligned16(dwte) && is_aligned16(d))
        encoder_backward_kernel<true><<<nu, 128, 0, s>>>(dwte, d, dmeta, nu, C);
    else
        encoder_backward_kernel<false><<<nu, 128, 0, s>>>(dwte, d, dmeta, nu, C);
    CUDA_CHECK_LAUNCH("encoder_backward_kernel");
}

/* x[b,t,:] += wpe[t,:] */
template <bool VEC>
__global__ void position_forward_kernel(bf16* x, const bf16* wpe, int B, int T, int C) {
    const int nch = (C + 7) / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * nch) return;
    size_t bt = idx / nch;
    int c = (int)(idx % nch) * 8;
    int t = (int)(bt % T);
    float a[8], p[8];
    ld8<VEC>(a, x + bt * C, c, C);
    ld8<VEC>(p, wpe + (size_t)t * C, c, C);
#pragma unroll
    for (int k = 0; k < 8; k++) a[k] += p[k];
    st8<VEC>(x + bt * C, c, C, a);
}

void position_forward(floatX* x, const floatX* wpe, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    size_t total = (size_t)B * T * ((C + 7) / 8);
    bf16* px = (bf16*)x;
    const bf16* pw = (const bf16*)wpe;
    if (rows_vec_ok(C) && is_aligned16(px) && is_aligned16(pw))
        position_forward_kernel<true><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(px, pw, B, T, C);
    else
        position_forward_kernel<false><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(px, pw, B, T, C);
    CUDA_CHECK_LAUNCH("position_forward_kernel");
}

/* dwpe[t,:] += sum_b dx[b,t,:]: one thread per (t, chunk) adds b = 0..B-1 in
 * order onto dwpe, the CPU reference's order (bit-identical to it). */
template <bool VEC>
__global__ void position_backward_kernel(float* dwpe, const bf16* dx, int B, int T, int C) {
    const int nch = (C + 7) / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * nch) return;
    int t = (int)(idx / nch), c = (int)(idx % nch) * 8;
    float* dp = dwpe + (size_t)t * C;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = (VEC || c + k < C) ? dp[c + k] : 0.0f;
    for (int b = 0; b < B; b++) {
        float d[8];
        ld8<VEC>(d, dx + ((size_t)b * T + t) * C, c, C);
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += d[k];
    }
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (VEC || c + k < C) dp[c + k] = acc[k];
}

void position_backward(float* dwpe, const floatX* dx, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    size_t total = (size_t)T * ((C + 7) / 8);
    const bf16* d = (const bf16*)dx;
    if (rows_vec_ok(C) && is_aligned16(d))
        position_backward_kernel<true><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(dwpe, d, B, T, C);
    else
        position_backward_kernel<false><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(dwpe, d, B, T, C);
    CUDA_CHECK_LAUNCH("position_backward_kernel");
}

/* x[n,:] += bias */
template <bool VEC>
__global__ void bias_forward_kernel(bf16* x, const bf16* bias, int N, int C) {
    const int nch = (C + 7) / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * nch) return;
    size_t n = idx / nch;
    int c = (int)(idx % nch) * 8;
    float a[8], b[8];
    ld8<VEC>(a, x + n * C, c, C);
    ld8<VEC>(b, bias, c, C);
#pragma unroll
    for (int k = 0; k < 8; k++) a[k] += b[k];
    st8<VEC>(x + n * C, c, C, a);
}

void bias_forward(floatX* x, const floatX* bias, int N, int C) {
    if (N <= 0 || C <= 0) return;
    size_t total = (size_t)N * ((C + 7) / 8);
    bf16* px = (bf16*)x;
    const bf16* pb = (const bf16*)bias;
    if (rows_vec_ok(C) && is_aligned16(px) && is_aligned16(pb))
        bias_forward_kernel<true><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(px, pb, N, C);
    else
        bias_forward_kernel<false><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(px, pb, N, C);
    CUDA_CHECK_LAUNCH("bias_forward_kernel");
}

/* ---- deterministic column sums (bias_backward, and the second stage of the
 * layernorm dw/db reduction) ------------------------------------------------
 * Stage 1: block (32 x 8 threads) = 256 columns x one chunk of rows; thread
 * (tx, ty) sums rows ty, ty+8, ... of the chunk for its 8 columns; the 8
 * row-lanes are then added in ty order -> partial[chunk][c].
 * Stage 2: dst[c] += sum over chunks in chunk order.
 * The chunking depends only on (N, C), so the result is reproducible. */
#define CS_COLS 256 /* columns per stage-1 block: 32 threads x 8 */

template <bool VEC>
__global__ void colsum_partial_kernel(float* partial, const bf16* x, int N, int C, int rows_per_chunk) {
    __shared__ float sm[8][CS_COLS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = (blockIdx.x * 32 + tx) * 8;
    const int r0 = blockIdx.y * rows_per_chunk;
    const int r1 = min(N, r0 + rows_per_chunk);
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    if (c < C) {
        for (int n = r0 + ty; n < r1; n += 8) {
            float d[8];
            ld8<VEC>(d, x + (size_t)n * C, c, C);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += d[k];
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) sm[ty][tx * 8 + k] = acc[k];
    __syncthreads();
    /* 256 threads, 256 columns of this block: thread j finishes column j */
    const int j = ty * 32 + tx;
    const int cj = blockIdx.x * CS_COLS + j;
    if (cj < C) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) s += sm[k][j];
        partial[(size_t)blockIdx.y * C + cj] = s;
    }
}

/* dst[c] += sum_{p < nparts} partial[p*pstride + c], p ascending */
__global__ void colsum_finish_kernel(float* dst, const float* partial, int nparts, int C, size_t pstride) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int p = 0; p < nparts; p++) s += partial[(size_t)p * pstride + c];
    dst[c] += s;
}

static void colsum_finish(float* dst, const float* partial, int nparts, int C, size_t pstride) {
    colsum_finish_kernel<<<ceil_div_u(C, 256), 256, 0, cuda_stream()>>>(dst, partial, nparts, C, pstride);
    CUDA_CHECK_LAUNCH("colsum_finish_kernel");
}

void bias_backward(float* dbias, const floatX* dout, int N, int C) {
    if (N <= 0 || C <= 0) return;
    const int gx = (int)ceil_div_u(C, CS_COLS);
    /* about 1024 blocks in all, at least 32 rows per chunk */
    int nchunks = (int)ceil_div_u(N, 32);
    int cap = 1024 / gx > 1 ? 1024 / gx : 1;
    if (nchunks > cap) nchunks = cap;
    const int rpc = (int)ceil_div_u(N, nchunks);
    nchunks = (int)ceil_div_u(N, rpc);
    float* partial = (float*)cuda_scratch(SCRATCH_COLSUM, (size_t)nchunks * C * sizeof(float));
    const bf16* d = (const bf16*)dout;
    dim3 grid(gx, nchunks), block(32, 8);
    if (rows_vec_ok(C) && is_aligned16(d))
        colsum_partial_kernel<true><<<grid, block, 0, cuda_stream()>>>(partial, d, N, C, rpc);
    else
        colsum_partial_kernel<false><<<grid, block, 0, cuda_stream()>>>(partial, d, N, C, rpc);
    CUDA_CHECK_LAUNCH("colsum_partial_kernel");
    colsum_finish(dbias, partial, nchunks, C, (size_t)C);
}

/* ------------------------------------------------------------------------ */
/* layernorm (eps 1e-5): one warp per row. Lane l owns chunks l, l+32, ... of 8
 * columns; NCH = chunks per lane is a template parameter so the row lives in
 * registers (arrays indexed by unrolled constants only). C <= 32*8*LN_MAX_NCH. */
#define LN_MAX_NCH 8   /* C up to 2048 (GPT-2 XL has 1600) */
#define LN_WARPS 8     /* rows in flight per block */

template <int NCH, bool VEC>
__global__ void __launch_bounds__(LN_WARPS * 32)
layernorm_forward_kernel(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N, int C) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * LN_WARPS + warp;
    if (row >= N) return;
    const int nch8 = (C + 7) / 8;
    const bf16* x_row = inp + (size_t)row * C;
    float x[NCH][8];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int ch = lane + 32 * i;
        if (ch < nch8) {
            ld8<VEC>(x[i], x_row, ch * 8, C);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) x[i][k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 8; k++) sum += x[i][k];
    }
    const float m = warp_sum(sum) / C;
    /* two-pass variance (as the CPU reference): no cancellation */
    float var = 0.0f;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int ch = lane + 32 * i;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float d = x[i][k] - m;
            if (ch < nch8 && ch * 8 + k < C) var += d * d;
        }
    }
    const float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    bf16* o_row = out + (size_t)row * C;
#pragma unroll
    for (int i = 0; i < NCH; i++) {
        const int ch = lane + 32 * i;
        if (ch >= nch8) continue;
        float wv[8], bv[8], o[8];
        ld8<VEC>(wv, w, ch * 8, C);
        ld8<VEC>(bv, b, ch * 8, C);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = (x[i][k] - m) * s * wv[k] + bv[k];
        st8<VEC>(o_row, ch * 8, C, o);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

/* Backward. Block = LN_WARPS warps over a contiguous chunk of rows; each warp
 * takes rows warp, warp+8, ... of the chunk. dinp is row-local and
 * ACCUMULATES: dx += rstd * (g - mean(g) - xhat * mean(g*xhat)), g = w*dout.
 * dw, db: each lane accumulates its columns over the warp's rows in
 * registers; the warps of the block are then added in warp order in shared
 * memory, and the block's sums go to partial[block][0..C) (dw) and
 * [C..2C) (db). colsum_finish adds the blocks in block order. */
template <int NCH, bool VEC>
__global__ void __launch_bounds__(LN_WARPS * 32)
layernorm_backward_kernel(bf16* dinp, float* partial, const bf16* dout, const bf16* inp, const bf16* w,
                          const float* mean, const float* rstd, int N, int C, int rows_per_block) {
    __shared__ float sred[2 * NCH * 256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nch8 = (C + 7) / 8;
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = min(N, r0 + rows_per_block);
    float dwacc[NCH][8], dbacc[NCH][8];
#pragma unroll
    for (int i = 0; i < NCH; i++)
#pragma unroll
        for (int k = 0; k < 8; k++) dwacc[i][k] = dbacc[i][k] = 0.0f;

    for (int row = r0 + warp; row < r1; row += LN_WARPS) {
        const bf16* x_row = inp + (size_t)row * C;
        const bf16* d_row = dout + (size_t)row * C;
        const float m = mean[row], s = rstd[row];
        /* pass 1: the two row means */
        float gsum = 0.0f, gxsum = 0.0f;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            if (ch >= nch8) continue;
            float xv[8], dv[8], wv[8];
            ld8<VEC>(xv, x_row, ch * 8, C);
            ld8<VEC>(dv, d_row, ch * 8, C);
            ld8<VEC>(wv, w, ch * 8, C);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float g = wv[k] * dv[k];
                gsum += g;
                gxsum += g * (xv[k] - m) * s; /* padded lanes: g = 0 */
            }
        }
        const float gmean = warp_sum(gsum) / C;
        const float gxmean = warp_sum(gxsum) / C;
        /* pass 2 (the row is still in L1): dinp and the parameter partials */
        bf16* di_row = dinp + (size_t)row * C;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int ch = lane + 32 * i;
            if (ch >= nch8) continue;
            float xv[8], dv[8], wv[8], di[8];
            ld8<VEC>(xv, x_row, ch * 8, C);
            ld8<VEC>(dv, d_row, ch * 8, C);
            ld8<VEC>(wv, w, ch * 8, C);
            ld8<VEC>(di, di_row, ch * 8, C);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float xhat = (xv[k] - m) * s;
                di[k] += (wv[k] * dv[k] - gmean - xhat * gxmean) * s;
                dwacc[i][k] += xhat * dv[k];
                dbacc[i][k] += dv[k];
            }
            st8<VEC>(di_row, ch * 8, C, di);
        }
    }
    /* warps -> block, in warp order (each lane touches only its own columns) */
    for (int wi = 0; wi < LN_WARPS; wi++) {
        if (warp == wi) {
#pragma unroll
            for (int i = 0; i < NCH; i++) {
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const int c = (lane + 32 * i) * 8 + k;
                    if (c < C) {
                        sred[c] = (wi == 0 ? 0.0f : sred[c]) + dwacc[i][k];
                        sred[C + c] = (wi == 0 ? 0.0f : sred[C + c]) + dbacc[i][k];
                    }
                }
            }
        }
        __syncthreads();
    }
    float* pb = partial + (size_t)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) pb[c] = sred[c];
}

template <int NCH>
static void layernorm_launch(bool vec, floatX* out, float* mean, float* rstd, const floatX* inp,
                             const floatX* w, const floatX* b, int N, int C) {
    const unsigned grid = ceil_div_u(N, LN_WARPS);
    if (vec)
        layernorm_forward_kernel<NCH, true><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)out, mean, rstd, (const bf16*)inp, (const bf16*)w, (const bf16*)b, N, C);
    else
        layernorm_forward_kernel<NCH, false><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)out, mean, rstd, (const bf16*)inp, (const bf16*)w, (const bf16*)b, N, C);
    CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}

template <int NCH>
static void layernorm_bwd_launch(bool vec, unsigned grid, int rpb, floatX* dinp, float* partial,
                                 const floatX* dout, const floatX* inp, const floatX* w,
                                 const float* mean, const float* rstd, int N, int C) {
    if (vec)
        layernorm_backward_kernel<NCH, true><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)dinp, partial, (const bf16*)dout, (const bf16*)inp, (const bf16*)w, mean, rstd, N, C, rpb);
    else
        layernorm_backward_kernel<NCH, false><<<grid, LN_WARPS * 32, 0, cuda_stream()>>>(
            (bf16*)dinp, partial, (const bf16*)dout, (const bf16*)inp, (const bf16*)w, mean, rstd, N, C, rpb);
    CUDA_CHECK_LAUNCH("layernorm_backward_kernel");
}

static int ln_nch(int C) {
    int nch = (int)ceil_div_u(ceil_div_u(C, 8), 32);
    if (nch < 1 || nch > LN_MAX_NCH)
        FATAL("layernorm: C = %d is outside the supported 1..%d (raise LN_MAX_NCH in %s)", C,
              32 * 8 * LN_MAX_NCH, __FILE__);
    return nch;
}

void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* w, const floatX* b, int N, int C) {
    if (N <= 0) return;
    const int nch = ln_nch(C);
    const bool vec = rows_vec_ok(C) && is_aligned16(out) && is_aligned16(inp) && is_aligned16(w) && is_aligned16(b);
    switch (nch) {
        case 1: layernorm_launch<1>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 2: layernorm_launch<2>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 3: layernorm_launch<3>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 4: layernorm_launch<4>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 5: layernorm_launch<5>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 6: layernorm_launch<6>(vec, out, mean, rstd, inp, w, b, N, C); break;
        case 7: layernorm_launch<7>(vec, out, mean, rstd, inp, w, b, N, C); break;
        default: layernorm_launch<8>(vec, out, mean, rstd, inp, w, b, N, C); break;
    }
}

#define LN_BWD_MAX_BLOCKS 512 /* fixed, not per-device: the reduction order depends on shapes only */

void layernorm_backward(floatX* dinp, float* dw, float* db, const floatX* dout, const floatX* inp,
                        const floatX* w, const float* mean, const float* rstd, int N, int C) {
    if (N <= 0) return;
    const int nch = ln_nch(C);
    const bool vec = rows_vec_ok(C) && is_aligned16(dinp) && is_aligned16(dout) && is_aligned16(inp) && is_aligned16(w);
    int rpb = (int)ceil_div_u(N, LN_BWD_MAX_BLOCKS);
    if (rpb < LN_WARPS) rpb = LN_WARPS;
    const unsigned grid = ceil_div_u(N, rpb);
    float* partial = (float*)cuda_scratch(SCRATCH_LN_PARTIAL, (size_t)grid * 2 * C * sizeof(float));
    switch (nch) {
        case 1: layernorm_bwd_launch<1>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 2: layernorm_bwd_launch<2>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 3: layernorm_bwd_launch<3>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 4: layernorm_bwd_launch<4>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 5: layernorm_bwd_launch<5>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 6: layernorm_bwd_launch<6>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        case 7: layernorm_bwd_launch<7>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
        default: layernorm_bwd_launch<8>(vec, grid, rpb, dinp, partial, dout, inp, w, mean, rstd, N, C); break;
    }
    colsum_finish(dw, partial, (int)grid, C, (size_t)2 * C);
    colsum_finish(db, partial + C, (int)grid, C, (size_t)2 * C);
}

/* ------------------------------------------------------------------------ */
/* vocab-parallel softmax cross-entropy: one block per row n, fp32 math on
 * the bf16 logits. Column j of the slice is real iff j < nv = clamp(V - v0,
 * 0, Vr); padding columns never take part and get a zero gradient. Block
 * reductions use the fixed-order block_sum/block_max: deterministic. */
#define CE_THREADS 512

static inline int ce_nvalid(int Vr, int v0, int V) {
    int nv = V - v0;
    if (nv < 0) nv = 0;
    return nv < Vr ? nv : Vr;
}

/* Calls f(j, value) for each real column j of the row; VEC: Vr % 8 == 0 and
 * logits 16-byte aligned. */
template <bool VEC, typename F>
__device__ __forceinline__ void ce_foreach(const bf16* row, int nv, F f) {
    if (VEC) {
        for (int j0 = threadIdx.x * 8; j0 < nv; j0 += blockDim.x * 8) {
            float v[8];
            load8(v, row + j0);
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (j0 + k < nv) f(j0 + k, v[k]);
        }
    } else {
        for (int j = threadIdx.x; j < nv; j += blockDim.x) f(j, __bfloat162float(row[j]));
    }
}

template <bool VEC>
__global__ void __launch_bounds__(CE_THREADS)
ce_max_kernel(float* mx, const bf16* logits, int Vr, int nv) {
    __shared__ float buf[32];
    const int n = blockIdx.x;
    float m = -INFINITY;
    ce_foreach<VEC>(logits + (size_t)n * Vr, nv, [&](int, float v) { m = fmaxf(m, v); });
    m = block_max(m, buf);
    if (threadIdx.x == 0) mx[n] = m; /* -inf for a slice of padding only */
}

template <bool VEC>
__global__ void __launch_bounds__(CE_THREADS)
ce_stats_kernel(float* stats, const bf16* logits, const float* mx, const int* targets, int Vr, int v0, int nv) {
    __shared__ float buf[32];
    const int n = blockIdx.x;
    const bf16* row = logits + (size_t)n * Vr;
    const float m = mx[n];
    float s = 0.0f;
    ce_foreach<VEC>(row, nv, [&](int, float v) { s += expf(v - m); });
    s = block_sum(s, buf);
    if (threadIdx.x == 0) {
        const int jt = targets[n] - v0;
        stats[2 * n] = s;
        stats[2 * n + 1] = (jt >= 0 && jt < nv) ? __bfloat162float(row[jt]) : 0.0f;
    }
}

template <bool VEC>
__global__ void __launch_bounds__(CE_THREADS)
ce_backward_kernel(bf16* logits, float* losses, const float* mx, const float* stats, const int* targets,
                   int Vr, int v0, int nv, float dloss) {
    const int n = blockIdx.x;
    bf16* row = logits + (size_t)n * Vr;
    const float m = mx[n], sum = stats[2 * n];
    const float inv = 1.0f / sum;
    const int jt = targets[n] - v0;
    if (threadIdx.x == 0) losses[n] = logf(sum) + m - stats[2 * n + 1];
    if (VEC) {
        for (int j0 = threadIdx.x * 8; j0 < Vr; j0 += blockDim.x * 8) {
            float v[8];
            load8(v, row + j0);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const int j = j0 + k;
                float p = expf(v[k] - m) * inv;
                v[k] = j < nv ? (p - (j == jt ? 1.0f : 0.0f)) * dloss : 0.0f;
            }
            store8(row + j0, v);
        }
    } else {
        for (int j = threadIdx.x; j < Vr; j += blockDim.x) {
            float g = 0.0f;
            if (j < nv) {
                float p = expf(__bfloat162float(row[j]) - m) * inv;
                g = (p - (j == jt ? 1.0f : 0.0f)) * dloss;
            }
            row[j] = __float2bfloat16_rn(g);
        }
    }
}

static inline bool ce_vec_ok(const void* logits, int Vr) { return Vr % 8 == 0 && is_aligned16(logits); }

void crossentropy_max(float* mx, const floatX* logits, int N, int Vr, int v0, int V) {
    if (N <= 0) return;
    const int nv = ce_nvalid(Vr, v0, V);
    const bf16* l = (const bf16*)logits;
    if (ce_vec_ok(l, Vr))
        ce_max_kernel<true><<<N, CE_THREADS, 0, cuda_stream()>>>(mx, l, Vr, nv);
    else
        ce_max_kernel<false><<<N, CE_THREADS, 0, cuda_stream()>>>(mx, l, Vr, nv);
    CUDA_CHECK_LAUNCH("ce_max_kernel");
}

void crossentropy_stats(float* stats, const floatX* logits, const float* mx, const int* targets,
                        int N, int Vr, int v0, int V) {
    if (N <= 0) return;
    const int nv = ce_nvalid(Vr, v0, V);
    const bf16* l = (const bf16*)logits;
    if (ce_vec_ok(l, Vr))
        ce_stats_kernel<true><<<N, CE_THREADS, 0, cuda_stream()>>>(stats, l, mx, targets, Vr, v0, nv);
    else
        ce_stats_kernel<false><<<N, CE_THREADS, 0, cuda_stream()>>>(stats, l, mx, targets, Vr, v0, nv);
    CUDA_CHECK_LAUNCH("ce_stats_kernel");
}

void crossentropy_backward(floatX* logits_dlogits, float* losses, const float* mx, const float* stats,
                           const int* targets, int N, int Vr, int v0, int V, float dloss) {
    if (N <= 0) return;
    const int nv = ce_nvalid(Vr, v0, V);
    bf16* l = (bf16*)logits_dlogits;
    if (ce_vec_ok(l, Vr))
        ce_backward_kernel<true><<<N, CE_THREADS, 0, cuda_stream()>>>(l, losses, mx, stats, targets, Vr, v0, nv, dloss);
    else
        ce_backward_kernel<false><<<N, CE_THREADS, 0, cuda_stream()>>>(l, losses, mx, stats, targets, Vr, v0, nv, dloss);
    CUDA_CHECK_LAUNCH("ce_backward_kernel");
}

/* ------------------------------------------------------------------------ */
/* AdamW, the CPU reference's formula: g = grad*grad_scale; m, v moments;
 * bias-corrected; decoupled weight decay; param = bf16(master), round to
 * nearest even. 4 elements per thread (16-byte fp32 accesses). */
__device__ __forceinline__ float adamw_one(float& w, float gr, float& m, float& v, float lr, float b1, float b2,
                                           float eps, float wd, float gs, float bc1, float bc2) {
    float g = gr * gs;
    float mi = b1 * m + (1.0f - b1) * g;
    float vi = b2 * v + (1.0f - b2) * g * g;
    m = mi;
    v = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    w -= lr * (mhat / (sqrtf(vhat) + eps) + wd * w);
    return w;
}

template <bool VEC>
__global__ void adamw_kernel(float* master, bf16* param, const float* grad, float* m, float* v, size_t n,
                             float lr, float b1, float b2, float eps, float wd, float gs, float bc1, float bc2) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i0 >= n) return;
    if (VEC && i0 + 4 <= n) {
        float4 w4 = *reinterpret_cast<const float4*>(master + i0);
        float4 g4 = *reinterpret_cast<const float4*>(grad + i0);
        float4 m4 = *reinterpret_cast<const float4*>(m + i0);
        float4 v4 = *reinterpret_cast<const float4*>(v + i0);
        adamw_one(w4.x, g4.x, m4.x, v4.x, lr, b1, b2, eps, wd, gs, bc1, bc2);
        adamw_one(w4.y, g4.y, m4.y, v4.y, lr, b1, b2, eps, wd, gs, bc1, bc2);
        adamw_one(w4.z, g4.z, m4.z, v4.z, lr, b1, b2, eps, wd, gs, bc1, bc2);
        adamw_one(w4.w, g4.w, m4.w, v4.w, lr, b1, b2, eps, wd, gs, bc1, bc2);
        *reinterpret_cast<float4*>(master + i0) = w4;
        *reinterpret_cast<float4*>(m + i0) = m4;
        *reinterpret_cast<float4*>(v + i0) = v4;
        __nv_bfloat162 pk[2] = {__floats2bfloat162_rn(w4.x, w4.y), __floats2bfloat162_rn(w4.z, w4.w)};
        uint2 bits;
        memcpy(&bits, pk, sizeof(bits));
        *reinterpret_cast<uint2*>(param + i0) = bits; /* one 8-byte store */
    } else {
        for (size_t i = i0; i < n && i < i0 + 4; i++) {
            float w = master[i], mi = m[i], vi = v[i];
            adamw_one(w, grad[i], mi, vi, lr, b1, b2, eps, wd, gs, bc1, bc2);
            master[i] = w;
            m[i] = mi;
            v[i] = vi;
            param[i] = __float2bfloat16_rn(w);
        }
    }
}

void adamw_update(float* master, floatX* param, const float* grad, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int t) {
    if (!n) return;
    /* bias corrections on the host, in float, exactly as the CPU reference */
    const float bc1 = 1.0f - powf(beta1, (float)t);
    const float bc2 = 1.0f - powf(beta2, (float)t);
    bf16* p = (bf16*)param;
    const bool vec = is_aligned16(master) && is_aligned16(grad) && is_aligned16(m) && is_aligned16(v) &&
                     ((uintptr_t)p & 7u) == 0;
    const unsigned grid = ceil_div_u(ceil_div_u(n, 4), EW_THREADS);
    if (vec)
        adamw_kernel<true><<<grid, EW_THREADS, 0, cuda_stream()>>>(master, p, grad, m, v, n, lr, beta1, beta2, eps,
                                                                    weight_decay, grad_scale, bc1, bc2);
    else
        adamw_kernel<false><<<grid, EW_THREADS, 0, cuda_stream()>>>(master, p, grad, m, v, n, lr, beta1, beta2, eps,
                                                                     weight_decay, grad_scale, bc1, bc2);
    CUDA_CHECK_LAUNCH("adamw_kernel");
}

/* ------------------------------------------------------------------------ */
/* norms: a fixed grid of RED_BLOCKS x RED_THREADS threads (not the device's
 * SM count), each summing a fixed grid-stride set of elements in double;
 * per-block sums in fixed order, then one block adds the block sums in fixed
 * order. Same input -> same bits, on any run. */
#define RED_BLOCKS 1024
#define RED_THREADS 256

template <int MODE> /* 0: sum, 1: sum of squares */
__global__ void __launch_bounds__(RED_THREADS) reduce_partial_kernel(double* partial, const float* x, size_t n) {
    __shared__ double buf[32];
    double acc = 0.0;
    const size_t stride = (size_t)RED_BLOCKS * RED_THREADS;
    for (size_t i = (size_t)blockIdx.x * RED_THREADS + threadIdx.x; i < n; i += stride) {
        double v = (double)x[i];
        acc += MODE ? v * v : v;
    }
    acc = block_sum_d(acc, buf);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(RED_BLOCKS) reduce_final_kernel(double* out, const double* partial) {
    __shared__ double buf[32];
    double v = block_sum_d(partial[threadIdx.x], buf);
    if (threadIdx.x == 0) out[0] = v;
}

static double reduce_run(const float* x, size_t n, int square) {
    if (!n) return 0.0;
    cudaStream_t s = cuda_stream();
    double* partial = (double*)cuda_scratch(SCRATCH_REDUCE, (RED_BLOCKS + 1) * sizeof(double));
    if (square)
        reduce_partial_kernel<1><<<RED_BLOCKS, RED_THREADS, 0, s>>>(partial, x, n);
    else
        reduce_partial_kernel<0><<<RED_BLOCKS, RED_THREADS, 0, s>>>(partial, x, n);
    CUDA_CHECK_LAUNCH("reduce_partial_kernel");
    reduce_final_kernel<<<1, RED_BLOCKS, 0, s>>>(partial + RED_BLOCKS, partial);
    CUDA_CHECK_LAUNCH("reduce_final_kernel");
    double* h = (double*)cuda_pinned(SCRATCH_REDUCE, sizeof(double));
    CUDA_CHECK(cudaMemcpyAsync(h, partial + RED_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return h[0];
}

double ops_sumsq(const float* x, size_t n) { return reduce_run(x, n, 1); }
double ops_sum(const float* x, size_t n) { return reduce_run(x, n, 0); }

/* Any non-finite element stores 1 into the flag (all writers store the same
 * value, so the race is benign and the answer deterministic). */
__global__ void nonfinite_kernel(int* flag, const float* x, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    bool bad = false;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) bad |= !isfinite(x[i]);
    if (bad) *flag = 1;
}

int ops_all_finite(const float* x, size_t n) {
    if (!n) return 1;
    cudaStream_t s = cuda_stream();
    int* flag = (int*)cuda_scratch(SCRATCH_REDUCE, (RED_BLOCKS + 1) * sizeof(double)); /* shares the slot */
    CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), s));
    nonfinite_kernel<<<RED_BLOCKS, RED_THREADS, 0, s>>>(flag, x, n);
    CUDA_CHECK_LAUNCH("nonfinite_kernel");
    int* h = (int*)cuda_pinned(SCRATCH_REDUCE, sizeof(double));
    CUDA_CHECK(cudaMemcpyAsync(h, flag, sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return h[0] == 0;
}
