/*
 * ops/crossentropy_cuda.cu - the vocab-parallel softmax cross-entropy of
 * ops/ops.h: crossentropy_max, crossentropy_stats, crossentropy_backward, and
 * crossentropy_local, the three in one kernel when no rank splits the vocab.
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

#include "common/cuda_async.cuh"
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

/* exp(v - m) as every kernel here takes it, nml = -m log2(e): 2^(v log2(e) - m log2(e))
 * on the SFU, one FMA and one ex2.approx (relative error ~2^-21, far below the bf16
 * gradient's). With expf (about ten instructions) twice per element, and a column test
 * per element, the one-pass kernel was bound by instruction issue, not by memory: 1.60
 * ms, 69% of the copy bandwidth for its 2 passes; 1.10 ms, 100%, like this (GPT-2 124M's
 * logits, B = 16, T = 1024; H100, 2026-12-06). */
__device__ __forceinline__ float ce_exp(float v, float nml) { return fast_exp2(fmaf(v, LOG2E, nml)); }

/* Calls f(j, value) for each real column j of the row, in column order per thread;
 * VEC: Vr % 8 == 0 and logits 16-byte aligned (a chunk wholly inside nv skips the
 * per-column test). */
template <bool VEC, typename F>
__device__ __forceinline__ void ce_foreach(const bf16* row, int nv, F f) {
    if (VEC) {
        for (int j0 = threadIdx.x * 8; j0 < nv; j0 += blockDim.x * 8) {
            float v[8];
            load8(v, row + j0);
            if (j0 + 8 <= nv) {
#pragma unroll
                for (int k = 0; k < 8; k++) f(j0 + k, v[k]);
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++)
                    if (j0 + k < nv) f(j0 + k, v[k]);
            }
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
    const float nml = -mx[n] * LOG2E;
    float s = 0.0f;
    ce_foreach<VEC>(row, nv, [&](int, float v) { s += ce_exp(v, nml); });
    s = block_sum(s, buf);
    if (threadIdx.x == 0) {
        const int jt = targets[n] - v0;
        stats[2 * n] = s;
        stats[2 * n + 1] = (jt >= 0 && jt < nv) ? __bfloat162float(row[jt]) : 0.0f;
    }
}

/* (softmax - onehot) * dloss over this thread's 8-column chunks of a row, read from
 * src and written to dst (the row in place, or from its shared-memory copy);
 * padding columns get 0. A chunk of real columns without the target takes p * dloss,
 * which is (p - 0) * dloss exactly, without the per-column tests. */
__device__ __forceinline__ void ce_grad_vec(bf16* dst, const bf16* src, int Vr, int nv, int jt, float nml, float inv,
                                            float dloss) {
    for (int j0 = threadIdx.x * 8; j0 < Vr; j0 += blockDim.x * 8) {
        float v[8];
        load8(v, src + j0);
        if (j0 + 8 <= nv && (unsigned)(jt - j0) >= 8u) {
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = ce_exp(v[k], nml) * inv * dloss;
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const int j = j0 + k;
                const float p = ce_exp(v[k], nml) * inv;
                v[k] = j < nv ? (p - (j == jt ? 1.0f : 0.0f)) * dloss : 0.0f;
            }
        }
        store8(dst + j0, v);
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
    const float nml = -m * LOG2E;
    if (VEC) {
        ce_grad_vec(row, row, Vr, nv, jt, nml, inv, dloss);
    } else {
        for (int j = threadIdx.x; j < Vr; j += blockDim.x) {
            float g = 0.0f;
            if (j < nv) {
                float p = ce_exp(__bfloat162float(row[j]), nml) * inv;
                g = (p - (j == jt ? 1.0f : 0.0f)) * dloss;
            }
            row[j] = __float2bfloat16_rn(g);
        }
    }
}

/* All three steps for a row this rank holds whole (no vocab split, so nothing to
 * exchange between them): the row comes into shared memory once, by cp.async, and
 * the max, the sums and the gradient read it there. The split kernels read it from
 * device memory three times (and write it once): 4 passes over the logits where this
 * takes 2. Each step is the split kernel's arithmetic in the split kernel's order
 * (ce_foreach's columns per thread, the same block reductions), so mx, stats, the
 * losses and the gradient are bit-identical to those of the three calls. VEC only. */
#define CE_LOCAL_BUF 128 /* bytes before the row in ce_local_kernel's shared memory */
__global__ void __launch_bounds__(CE_THREADS)
ce_local_kernel(bf16* logits, float* losses, float* mx, float* stats, const int* targets, int Vr, int nv,
                float dloss) {
    DYNAMIC_SMEM(smem_raw); /* the block reductions' 32 floats, then the row: no static shared
                               memory, so that the row may take all the opt-in limit */
    float* buf = reinterpret_cast<float*>(smem_raw);
    bf16* srow = reinterpret_cast<bf16*>(smem_raw + CE_LOCAL_BUF);
    const int n = blockIdx.x;
    bf16* row = logits + (size_t)n * Vr;
    for (int c = threadIdx.x; c < Vr / 8; c += blockDim.x) cp_async16(srow + 8 * c, row + 8 * c, true);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    float m = -INFINITY;
    ce_foreach<true>(srow, nv, [&](int, float v) { m = fmaxf(m, v); });
    m = block_max(m, buf);
    const float nml = -m * LOG2E;
    float sum = 0.0f;
    ce_foreach<true>(srow, nv, [&](int, float v) { sum += ce_exp(v, nml); });
    sum = block_sum(sum, buf);
    const int jt = targets[n];
    const float tl = (jt >= 0 && jt < nv) ? __bfloat162float(srow[jt]) : 0.0f;
    if (threadIdx.x == 0) {
        mx[n] = m;
        stats[2 * n] = sum;
        stats[2 * n + 1] = tl;
        losses[n] = logf(sum) + m - tl;
    }
    ce_grad_vec(row, srow, Vr, nv, jt, nml, 1.0f / sum, dloss);
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

/* the shared memory a block may have (the device's opt-in limit), asked once; the
 * kernel is allowed all of it, so that every row width up to it launches */
static int ce_local_smem_limit(void) {
    static int lim = -1;
    if (lim < 0) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&lim, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        CUDA_CHECK(cudaFuncSetAttribute(ce_local_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, lim));
    }
    return lim;
}

void crossentropy_local(floatX* logits_dlogits, float* losses, float* mx, float* stats, const int* targets, int N,
                        int Vr, int V, float dloss) {
    if (N <= 0) return;
    bf16* l = (bf16*)logits_dlogits;
    const size_t smem = CE_LOCAL_BUF + (size_t)Vr * sizeof(bf16);
    if (!ce_vec_ok(l, Vr) || smem > (size_t)ce_local_smem_limit()) { /* the three steps, nothing between */
        crossentropy_max(mx, logits_dlogits, N, Vr, 0, V);
        crossentropy_stats(stats, logits_dlogits, mx, targets, N, Vr, 0, V);
        crossentropy_backward(logits_dlogits, losses, mx, stats, targets, N, Vr, 0, V, dloss);
        return;
    }
    ce_local_kernel<<<N, CE_THREADS, smem, cuda_stream()>>>(l, losses, mx, stats, targets, Vr, ce_nvalid(Vr, 0, V),
                                                            dloss);
    CUDA_CHECK_LAUNCH("ce_local_kernel");
}
