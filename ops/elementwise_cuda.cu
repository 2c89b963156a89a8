/*
 * ops/elementwise_cuda.cu - the flat element-wise ops of ops/ops.h on bf16:
 * residual_forward (out = a + b) and GELU forward / backward (the tanh
 * approximation of GPT-2).
 *
 * Flat kernels (cuda_common.cuh: EW_THREADS, ew_blocks): thread i owns
 * elements [8i, 8i+8). VEC: all pointers 16-byte aligned, so full chunks are
 * single 16-byte accesses; the last partial chunk (n % 8) always goes element
 * by element. fp32 math, one bf16 rounding per output. Memory-bound: one
 * read per input and one write per output element.
 */
#include <math.h>

#include "ops/cuda_common.cuh"

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
