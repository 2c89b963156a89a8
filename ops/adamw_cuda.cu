/*
 * ops/adamw_cuda.cu - adamw_update / adamw_update_tensors of ops/ops.h: one
 * fused pass over the fp32 master weights, gradients and moments that also
 * writes the bf16 working copy of the parameters, for all of a model's
 * tensors in one launch (16 launches of GPT-2's tensors each paid the ramp-up
 * and tail of a ~60 us kernel).
 *
 * The CPU reference's formula exactly (bias corrections computed on the host
 * in float, decoupled weight decay, param = bf16 round-to-nearest-even of the
 * master). Element-wise and memory-bound: 4 elements per thread with 16-byte
 * fp32 accesses (8-byte bf16 stores) when aligned, scalar otherwise.
 *
 * The step's scalars (learning rate, bias corrections, clip scale, skip) are
 * read from device memory (ops.h's StepScalars) rather than passed by value:
 * the clip scale is computed on the device, and a CUDA graph replaying this
 * launch must see each step's values, which a kernel argument would freeze.
 */
#include <math.h>
#include <string.h>

#include "ops/cuda_common.cuh"

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

/* one thread's 4 elements i0.. of a tensor of n (VEC: 16-byte aligned fp32, 8-byte aligned bf16) */
template <bool VEC>
__device__ __forceinline__ void adamw_four(float* master, bf16* param, const float* grad, float* m, float* v,
                                           size_t n, size_t i0, const StepScalars* s, float b1, float b2, float eps,
                                           float wd) {
    if (VEC && i0 + 4 <= n) {
        /* the data first, then the step's scalars: with the skip test ahead
         * of them, every thread waited for one L2 round trip before its
         * loads could start (the loads are harmless when the step skips) */
        float4 w4 = *reinterpret_cast<const float4*>(master + i0);
        float4 g4 = *reinterpret_cast<const float4*>(grad + i0);
        float4 m4 = *reinterpret_cast<const float4*>(m + i0);
        float4 v4 = *reinterpret_cast<const float4*>(v + i0);
        if (s->skip) return;
        const float lr = s->lr, gs = s->scale, bc1 = s->bc1, bc2 = s->bc2;
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
        if (s->skip) return;
        const float lr = s->lr, gs = s->scale, bc1 = s->bc1, bc2 = s->bc2;
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

/* The tensors of one launch: tensor k is [off[k], off[k] + n[k]) of every
 * buffer and takes blocks [block0[k], block0[k + 1]) of the grid, so a
 * block lies inside one tensor and its alignment (vec[k]) is the tensor's,
 * as when each tensor had a launch of its own. */
struct AdamwTensors {
    int count;
    unsigned block0[ADAMW_MAX_TENSORS + 1];
    size_t off[ADAMW_MAX_TENSORS], n[ADAMW_MAX_TENSORS];
    float wd[ADAMW_MAX_TENSORS];
    unsigned char vec[ADAMW_MAX_TENSORS];
};

__global__ void adamw_kernel(float* master, bf16* param, const float* grad, float* m, float* v,
                             const __grid_constant__ AdamwTensors T, const StepScalars* s, float b1, float b2,
                             float eps) {
    int lo = 0, hi = T.count - 1; /* the last k with block0[k] <= blockIdx.x (block-uniform) */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (T.block0[mid] <= blockIdx.x) lo = mid;
        else hi = mid - 1;
    }
    const int k = lo;
    const size_t i0 = ((size_t)(blockIdx.x - T.block0[k]) * blockDim.x + threadIdx.x) * 4;
    const size_t o = T.off[k], n = T.n[k];
    if (i0 >= n) return;
    if (T.vec[k]) adamw_four<true>(master + o, param + o, grad + o, m + o, v + o, n, i0, s, b1, b2, eps, T.wd[k]);
    else adamw_four<false>(master + o, param + o, grad + o, m + o, v + o, n, i0, s, b1, b2, eps, T.wd[k]);
}

void adamw_update_tensors(float* master, floatX* param, const float* grad, float* m, float* v, int ntensors,
                          const size_t* off, const size_t* n, const float* wd, const StepScalars* s, float beta1,
                          float beta2, float eps) {
    if (ntensors < 0 || ntensors > ADAMW_MAX_TENSORS)
        FATAL("adamw_update_tensors: %d tensors (at most %d)", ntensors, ADAMW_MAX_TENSORS);
    AdamwTensors T;
    memset(&T, 0, sizeof T);
    size_t blocks = 0;
    for (int k = 0; k < ntensors; k++) {
        if (!n[k]) continue; /* no blocks, so never found by the search */
        const int j = T.count++;
        bf16* p = (bf16*)param + off[k];
        T.block0[j] = (unsigned)blocks;
        T.off[j] = off[k];
        T.n[j] = n[k];
        T.wd[j] = wd[k];
        T.vec[j] = is_aligned16(master + off[k]) && is_aligned16(grad + off[k]) && is_aligned16(m + off[k]) &&
                   is_aligned16(v + off[k]) && ((uintptr_t)p & 7u) == 0;
        blocks += ceil_div_u(ceil_div_u(n[k], 4), EW_THREADS);
    }
    if (!T.count) return;
    if (blocks > 0x7fffffffu) FATAL("adamw_update_tensors: %zu blocks, more than a grid holds", blocks);
    T.block0[T.count] = (unsigned)blocks;
    adamw_kernel<<<(unsigned)blocks, EW_THREADS, 0, cuda_stream()>>>(master, (bf16*)param, grad, m, v, T, s, beta1,
                                                                     beta2, eps);
    CUDA_CHECK_LAUNCH("adamw_kernel");
}

void adamw_update(float* master, floatX* param, const float* grad, float* m, float* v, size_t n,
                  const StepScalars* s, float beta1, float beta2, float eps, float weight_decay) {
    const size_t off = 0;
    adamw_update_tensors(master, param, grad, m, v, 1, &off, &n, &weight_decay, s, beta1, beta2, eps);
}
