/*
 * comm/comm_nccl.h - the NCCL backend of the GPU build (comm/comm_nccl.c):
 * comm.backend "nccl". The TP and DP groups get NCCL communicators
 * (bootstrapped over MPI), the device collectives move their messages with
 * NCCL, and the exact reductions below replace their MPI versions with the
 * same bits (sums in rank order, comm/reduce_cuda.cu).
 */
#ifndef COMM_NCCL_H
#define COMM_NCCL_H

#include <mpi.h>
#include <stddef.h>

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* After ops_init (the device is chosen): NCCL communicators for the TP and DP
 * groups, bootstrapped over MPI. Collective; 0 ok, or -1 with one line in err
 * (the same verdict on every rank), e.g. when ranks of a group share a GPU. */
int comm_nccl_init(Comm* c, char* err, size_t errlen);
void comm_nccl_free(Comm* c);
/* the NCCL versions of tp_allreduce_small / dp_allreduce_mean (same bits) */
void comm_nccl_allreduce_small(Comm* c, float* x, size_t n, MPI_Op op);
void comm_nccl_dp_mean(Comm* c, float* x, size_t n);
/* comm_sum_step_dev's NCCL version: the squared norm over TP and the loss
 * over DP (device pointers), gathered by NCCL and summed on the device */
void comm_nccl_step_sums(Comm* c, double* sumsq, float* loss);

#ifdef __cplusplus
}
#endif
#endif /* COMM_NCCL_H */
