/*
 * comm/comm.h - the process groups of a run and the exact collectives
 * (comm/comm.c).
 *
 * The world is split into tensor-parallel (TP) groups of contiguous ranks
 * (ranks 0..tp-1 form group 0, ...) and data-parallel (DP) groups made of
 * the ranks with the same TP rank. The traffic of a run, and where each kind
 * is declared:
 *
 *   tp_exchange()        the named TP exchange sites of the model, compressed
 *                        or exact per site (comm/sites.h)
 *   tp_allreduce_small() tiny exact all-reduces (cross-entropy max / sums)
 *   dp_allreduce_mean()  gradient averaging over DP (exact)
 *   coll_*()             the compressed collectives on host fp32 buffers
 *                        (comm/collectives.h); coll_*_dev() on device
 *                        buffers (comm/collectives_cuda.h)
 *
 * Buffers handed to tp_exchange / tp_allreduce_small / dp_allreduce_mean
 * live in backend memory (host for the CPU build, device for the GPU
 * build); comm stages them to host when needed, or, in the GPU build with
 * comm.backend "nccl", moves them with NCCL (comm/comm_nccl.h).
 */
#ifndef COMM_H
#define COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/collectives.h"
#include "comm/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int world_rank, world_size;
    int tp_rank, tp_size, dp_rank, dp_size;
    MPI_Comm tp_comm, dp_comm;
    CommPolicy policy;      /* what the sites do (comm_setup_sites) */
    /* the sites (comm/sites.h) */
    struct CommSite* sites;
    int nsites, L;
    int step;               /* training step being run (for streams and stats) */
    int train_mode;         /* 1: count stats (train step); 0: eval/sampling */
    /* per step totals */
    uint64_t step_bytes;
    double step_ms;
    /* host staging */
    float* host;            /* staging for one exchange */
    float* host_ref;        /* exact result when sampling errors */
    size_t host_cap;
#ifdef OPS_BF16
    float* dev_f32;         /* device fp32 copy of an exchange, for staging */
    size_t dev_cap;
    struct CollScratchDev* dscratch; /* the device collectives' buffers and streams */
    struct SitesDev* sdev;           /* the sites' scales and statistics on the device (comm/sites_dev.h) */
    struct SpSide* sp_side;          /* comm.overlap's second stream (comm/sp_cuda.h) */
    struct ncclComm* nccl_tp;        /* comm.backend "nccl" (comm_nccl_init): the groups' */
    struct ncclComm* nccl_dp;        /* NCCL communicators; NULL with the MPI backend */
    float* dev_gather;               /* device scratch of the NCCL backend's reductions */
    size_t dev_gather_cap;
    double* dev_sums;                /* ... and of its step sums (comm_nccl_step_sums) */
#endif
    CollScratch scratch;
    struct CommGraphTally* graph_tally; /* what a replayed step's exchanges leave on the host (comm/step_graph.h) */
    void* auto_x;           /* backend copy (floatX) of an exchange under an "auto" trial */
    size_t auto_cap;
} Comm;

/* MPI_Init must have run. Splits the world into TP and DP groups; sets
 * MPI_ERRORS_RETURN so failures reach MPI_CHECK. The policy starts as
 * comm_policy_default's (every site exact). */
void comm_init(Comm* c, int tp, int dp);
void comm_free(Comm* c);

/* Exact all-reduce of a small fp32 buffer in backend memory over TP. */
void tp_allreduce_small(Comm* c, float* x, size_t n, MPI_Op op);
/* Exact mean over DP of an fp32 buffer in backend memory (gradients). */
void dp_allreduce_mean(Comm* c, float* x, size_t n);
/* Exact sum over TP of an fp32 buffer in backend memory, identical on every
 * TP rank (the replicated tensors' gradients under sequence parallelism);
 * staged through host memory with either backend. */
void tp_allreduce_sum(Comm* c, float* x, size_t n);
/* Host staging buffer of at least n floats, reused (c->host). */
float* comm_host_buffer(Comm* c, size_t n);
/* Sum of a host double over a communicator (losses, norms). */
double comm_sum_double(MPI_Comm comm, double v);
/* The step's two scalars summed over the ranks where they lie, on the
 * device (backend memory): *sumsq over TP, *loss = the mean over DP, with
 * comm_sum_double's arithmetic. Returns 0, queueing nothing, when this run's
 * groups cannot (the MPI backend, the CPU build): the caller then sums them
 * on the host. */
int comm_sum_step_dev(Comm* c, double* sumsq, float* loss);

#ifdef __cplusplus
}
#endif
#endif /* COMM_H */
