/*
 * comm/sp_cuda.h - the row exchanges of sequence parallelism on DEVICE
 * buffers (comm/sp_cuda.c): sp_reduce_scatter_host / sp_all_gather_host of
 * comm/sp.h on bf16 tensors, bit for bit the host versions on float(x)
 * rounded to bf16, in stream order on cs.
 */
#ifndef COMM_SP_CUDA_H
#define COMM_SP_CUDA_H

#include "comm/collectives_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Segments [k0, k1) of K: full[N, C] (bf16) partial sums -> this rank's
 * rows local[N/P, C] (bf16), and back by the all-gather. site (may be NULL):
 * the exchange site's scale and statistics in device memory
 * (CollDevSite; comm/sites_dev.c), the same for every segment, so nothing
 * waits for the host; st (may be NULL) makes the host wait for the
 * statistics, as in coll_allreduce_site_dev. Return the bytes this rank
 * sent. Every transport of CollScratchDev, the IPC one included. */
uint64_t sp_reduce_scatter_dev(MPI_Comm comm, int K, const CompressParams* p, const uint16_t* full, uint16_t* local,
                               int N, int C, int k0, int k1, uint64_t stream, CollScratchDev* s, const CollDevSite* site,
                               CollStats* st, cudaStream_t cs);
uint64_t sp_all_gather_dev(MPI_Comm comm, int K, const CompressParams* p, const uint16_t* local, uint16_t* full, int N,
                           int C, int k0, int k1, uint64_t stream, CollScratchDev* s, const CollDevSite* site,
                           CollStats* st, cudaStream_t cs);

/* comm.overlap's second stream: segment exchanges run on `side` while the
 * compute stream runs the GEMMs; the events order the two. Mark i of a
 * stream (i < SP_SIDE_DONE: a segment's input is ready; SP_SIDE_DONE: all
 * queued segments are done) is waited for by the other. */
#define SP_SIDE_DONE 64 /* comm.sp_chunks is at most 64 */
typedef struct SpSide {
    cudaStream_t side;
    cudaEvent_t ev[SP_SIDE_DONE + 1];
} SpSide;
/* *slot, created on the first call */
SpSide* sp_side_get(SpSide** slot);
void sp_side_mark(SpSide* s, int i, cudaStream_t on);
void sp_side_follow(SpSide* s, int i, cudaStream_t waiter);
void sp_side_free(SpSide* s);

#ifdef __cplusplus
}
#endif
#endif /* COMM_SP_CUDA_H */
