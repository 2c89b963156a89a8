/*
 * comm/reduce_cuda.cu - reduce_rank_order_dev (comm/reduce_cuda.h): one
 * thread per element walks the P copies in rank order. Memory-bound and
 * small next to the transfers it follows; written for exactness (explicit
 * IEEE roundings, no contraction), not for speed.
 */
#include <cuda_runtime.h>

#include "comm/reduce_cuda.h"
#include "ops/cuda_common.cuh"

__global__ void k_reduce_rank_order(float* out, const float* __restrict__ in, size_t stride, int P, size_t n, int op,
                                    float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = op == REDUCE_MEAN ? __fadd_rn(0.0f, in[i]) : in[i];
        for (int p = 1; p < P; p++) {
            const float a = in[(size_t)p * stride + i];
            v = op == REDUCE_MAX ? (a > v ? a : v) : __fadd_rn(v, a);
        }
        out[i] = op == REDUCE_MEAN ? __fmul_rn(v, scale) : v;
    }
}

void reduce_rank_order_dev(float* out, const float* in, size_t stride, int P, size_t n, ReduceOp op, float scale,
                           void* stream) {
    if (n == 0) return;
    const int threads = 256;
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    k_reduce_rank_order<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(out, in, stride, P, n, (int)op, scale);
    CUDA_CHECK_LAUNCH("k_reduce_rank_order");
}
