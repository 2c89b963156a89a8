/*
 * ops/crossentropy_cuda.cu - the vocab-parallel softmax cross-entropy of
 * ops/ops.h: crossentropy_max, crossentropy_stats, crossentropy_backward.
 *
 * Each rank holds a slice of Vr logit columns starting at global id v0; the
 * caller combines the per-row maxima and the (sum of exp, target logit) pairs
 * across ranks between the calls, then the backward writes the loss and
 * (softmax - onehot) * dloss over the logits in place. One block of
 * CE_THREADS per row, fp32 math on bf16 logits; padding columns (ids >= V)
 * never take part and get a zero gradient. The block reductions are the
 * fixed-order block_max / block_sum of cuda_common.cuh: deterministic.
 */
#include <math.h>

#include "ops/cuda_common.cuh"

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
