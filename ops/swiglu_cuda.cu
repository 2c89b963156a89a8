/*
 * ops/swiglu_cuda.cu - swiglu_forward / swiglu_backward of ops/ops.h, the
 * gated MLP activation of Qwen2: out[n,i] = silu(gate[n,i]) * up[n,i] with
 * gu[N,2F] = (gate | up) as the one gate|up GEMM writes it, out[N,F].
 *
 * silu(g) = g s(g), s the sigmoid; silu'(g) = s(g) (1 + g (1 - s(g))), so
 *   dgate = dout * up * s(g) (1 + g (1 - s(g))),   dup = dout * silu(g).
 * The backward overwrites dgu[N,2F] (gate half, then up half, as gu).
 *
 * Flat over the N*F outputs like the element-wise kernels (cuda_common.cuh):
 * thread i owns outputs [8i, 8i+8); with F % 8 == 0 and aligned pointers a
 * chunk never crosses a row, so it is one 16-byte access per operand (VEC);
 * otherwise element by element. fp32 math with expf (not __expf), as the CPU
 * reference, one bf16 rounding per output. Memory-bound.
 */
#include <math.h>

#include "ops/cuda_common.cuh"

__device__ __forceinline__ float sigmoid_f(float g) { return 1.0f / (1.0f + expf(-g)); }

/* one thread per chunk of 8 outputs (fewer at the end) */
template <bool VEC>
__global__ void swiglu_forward_kernel(bf16* out, const bf16* gu, int N, int F) {
    const size_t n_out = (size_t)N * F;
    const size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n_out) return;
    if (VEC) {   /* F % 8 == 0: the chunk is inside row i0 / F */
        const size_t n = i0 / F, f = i0 % F;
        const bf16* g = gu + n * 2 * F + f;
        float gv[8], uv[8], o[8];
        load8(gv, g);
        load8(uv, g + F);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = gv[k] / (1.0f + expf(-gv[k])) * uv[k];
        store8(out + i0, o);
    } else {
        for (size_t i = i0; i < n_out && i < i0 + 8; i++) {
            const size_t n = i / F, f = i % F;
            const float g = __bfloat162float(gu[n * 2 * F + f]), u = __bfloat162float(gu[n * 2 * F + F + f]);
            out[i] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
        }
    }
}

template <bool VEC>
__global__ void swiglu_backward_kernel(bf16* dgu, const bf16* gu, const bf16* dout, int N, int F) {
    const size_t n_out = (size_t)N * F;
    const size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n_out) return;
    if (VEC) {
        const size_t n = i0 / F, f = i0 % F;
        const size_t off = n * 2 * F + f;
        float gv[8], uv[8], d[8], dg[8], du[8];
        load8(gv, gu + off);
        load8(uv, gu + off + F);
        load8(d, dout + i0);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float s = sigmoid_f(gv[k]);
            dg[k] = d[k] * uv[k] * s * (1.0f + gv[k] * (1.0f - s));
            du[k] = d[k] * gv[k] * s;
        }
        store8(dgu + off, dg);
        store8(dgu + off + F, du);
    } else {
        for (size_t i = i0; i < n_out && i < i0 + 8; i++) {
            const size_t n = i / F, f = i % F, off = n * 2 * F + f;
            const float g = __bfloat162float(gu[off]), u = __bfloat162float(gu[off + F]);
            const float d = __bfloat162float(dout[i]), s = sigmoid_f(g);
            dgu[off] = __float2bfloat16_rn(d * u * s * (1.0f + g * (1.0f - s)));
            dgu[off + F] = __float2bfloat16_rn(d * g * s);
        }
    }
}

void swiglu_forward(floatX* out, const floatX* gu, int N, int F) {
    if (N <= 0 || F <= 0) return;
    const size_t n = (size_t)N * F;
    bf16* o = (bf16*)out;
    const bf16* x = (const bf16*)gu;
    if (rows_vec_ok(F) && is_aligned16(o) && is_aligned16(x))
        swiglu_forward_kernel<true><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(o, x, N, F);
    else
        swiglu_forward_kernel<false><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(o, x, N, F);
    CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

void swiglu_backward(floatX* dgu, const floatX* gu, const floatX* dout, int N, int F) {
    if (N <= 0 || F <= 0) return;
    const size_t n = (size_t)N * F;
    bf16* dx = (bf16*)dgu;
    const bf16 *x = (const bf16*)gu, *d = (const bf16*)dout;
    if (rows_vec_ok(F) && is_aligned16(dx) && is_aligned16(x) && is_aligned16(d))
        swiglu_backward_kernel<true><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(dx, x, d, N, F);
    else
        swiglu_backward_kernel<false><<<ew_blocks(n), EW_THREADS, 0, cuda_stream()>>>(dx, x, d, N, F);
    CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}
