/*
 * comm/reduce_cuda.h - the rank-order reduction of gathered copies on the
 * device, for the NCCL backend's exact collectives (comm/comm_nccl.c), and
 * the sums of a step's two scalars over the ranks.
 *
 * in holds P copies of n floats, copy p at in + p * stride (rank order).
 * out[i] becomes, in fp32 with one rounding per step:
 *   REDUCE_SUM   in_0 + in_1 + ... + in_{P-1}      (tp_allreduce_small, sum)
 *   REDUCE_MAX   v = in_0; v = in_p > v ? in_p : v (tp_allreduce_small, max)
 *   REDUCE_MEAN  ((0 + in_0 + ... + in_{P-1}) * scale  (dp_allreduce_mean)
 * exactly the host's arithmetic in comm/comm.c and comm/collectives.c, so the
 * NCCL backend gives the MPI backend's bits. out must not overlap in.
 */
#ifndef REDUCE_CUDA_H
#define REDUCE_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { REDUCE_SUM, REDUCE_MAX, REDUCE_MEAN } ReduceOp;

/* queued on stream (a cudaStream_t as void*) */
void reduce_rank_order_dev(float* out, const float* in, size_t stride, int P, size_t n, ReduceOp op, float scale,
                           void* stream);

/* The step's two scalars, as comm_sum_double sums them on the host (a
 * double per rank, added in rank order): *sumsq = tp_all[0] + ... +
 * tp_all[tp-1] when tp > 1 (the squared gradient norm over TP); *loss =
 * (float)((dp_all[0] + ... + dp_all[dp-1]) / dp) when dp > 1 (the mean loss
 * over DP). dp_all comes from loss_to_double_dev on every DP rank. */
void loss_to_double_dev(double* dst, const float* loss, void* stream);
void step_sums_dev(double* sumsq, const double* tp_all, int tp, float* loss, const double* dp_all, int dp,
                   void* stream);

#ifdef __cplusplus
}
#endif
#endif /* REDUCE_CUDA_H */
