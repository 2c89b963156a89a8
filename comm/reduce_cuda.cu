/*
 * comm/reduce_cuda.cu - reduce_rank_order_dev (comm/reduce_cuda.h): one
 * thread per element walks the P copies in rank order; and the step's
 * scalar sums (step_sums_dev), one thread. Memory-bound and
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

__global__ void k_loss_to_double(double* dst, const float* loss) { *dst = (double)*loss; }

void loss_to_double_dev(double* dst, const float* loss, void* stream) {
    k_loss_to_double<<<1, 1, 0, (cudaStream_t)stream>>>(dst, loss);
    CUDA_CHECK_LAUNCH("k_loss_to_double");
}

/* comm_sum_double's additions, then the host's (float)(sum / dp): IEEE
 * double add and divide, rounded to nearest, and a rounding to float */
__global__ void k_step_sums(double* sumsq, const double* tp_all, int tp, float* loss, const double* dp_all, int dp) {
    if (tp > 1) {
        double v = tp_all[0];
        for (int r = 1; r < tp; r++) v = __dadd_rn(v, tp_all[r]);
        *sumsq = v;
    }
    if (dp > 1) {
        double v = dp_all[0];
        for (int r = 1; r < dp; r++) v = __dadd_rn(v, dp_all[r]);
        *loss = __double2float_rn(__ddiv_rn(v, (double)dp));
    }
}

void step_sums_dev(double* sumsq, const double* tp_all, int tp, float* loss, const double* dp_all, int dp,
                   void* stream) {
    k_step_sums<<<1, 1, 0, (cudaStream_t)stream>>>(sumsq, tp_all, tp, loss, dp_all, dp);
    CUDA_CHECK_LAUNCH("k_step_sums");
}
