/*
 * comm/ipc_cuda.h - the CUDA IPC transport of the device collectives
 * (comm.transport "ipc", comm/ipc_cuda.c): for the ranks of one node, on one
 * GPU or on GPUs with peer access.
 *
 * No copies and no host waits. Each rank encodes into a device buffer of its
 * own that every peer has mapped (cudaIpcGetMemHandle / cudaIpcOpenMemHandle,
 * handles exchanged over MPI when the buffer is made), and the kernels that
 * sum or decode read the peers' bytes where they lie. Cross-process order is
 * kept by interprocess CUDA events (cudaEventInterprocess): a reader's stream
 * waits for the writer's event. A stream can only wait for an event record
 * that has already been made, so the writer's host tells its peers "recorded
 * for call e" through a counter in host memory the node's ranks share (an
 * MPI shared-memory window); the reader's host spins on it, under the
 * watchdog, before queuing its wait. These are host-to-host tokens about
 * what was queued, not waits for the device, so the host never blocks on
 * the GPU here.
 *
 * The arithmetic is the staged transport's (same chunk cut, SR streams,
 * rank-order sums, each chunk decoded from the bytes sent), so the bits are
 * too. Unlike the staged path the chunks are not cut into pipelined
 * sub-chunks: with nothing to overlap (the reads are the transfer), every
 * sub-chunk would add a cross-process wait, and on a shared GPU each one is
 * a context switch (~150 us on an H200).
 *
 * Buffers are double-buffered by call parity; that two calls apart a writer
 * never overwrites what a reader still reads follows from every call making
 * every rank wait for every other rank's next writes (the comment at
 * ipc_run explains).
 */
#ifndef COMM_IPC_CUDA_H
#define COMM_IPC_CUDA_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "comm/collectives_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if the ranks of comm can use the IPC transport: all on one node (one
 * MPI shared-memory domain) and every pair on one GPU or with peer access.
 * Collective over comm; the same answer on every rank. */
int coll_ipc_usable(MPI_Comm comm);
/* 1 if two ranks of comm run on the same GPU (collective over comm). */
int coll_ranks_share_gpu(MPI_Comm comm);

/* The IPC versions of coll_run's three shapes, called by collectives_cuda.c
 * and oneshot_cuda.c when CollScratchDev.ipc is set. Same arguments and
 * results as the staged transport; returns the bytes this rank's peers read
 * from it (what the staged transport sends). */
typedef struct {
    int do_rs, do_ag;
    const CompressParams* p_rs;
    const CompressParams* p_ag;
    size_t n;
    size_t unit;             /* the chunks' cut: multiples of it (0: the group size; coll_run's) */
    uint64_t stream;
    const uint16_t* x_rs;    /* RS input (bf16) */
    void* rs_out;            /* RS only: my chunk's sum (fp32, or bf16 if rs_out_bf16) */
    int rs_out_bf16;
    const void* ag_in;       /* AG only: my chunk (fp32, or bf16 if ag_in_bf16) */
    int ag_in_bf16;
    uint16_t* ag_out;        /* AG output (bf16), every chunk */
    const float* damax_rs;   /* device delayed amax per phase (CollDevSite), or NULL */
    const float* damax_ag;
} CollIpcCall;
void coll_ipc_two_shot(MPI_Comm comm, const CollIpcCall* call, CollScratchDev* s, cudaStream_t cs);
void coll_ipc_one_shot(MPI_Comm comm, const CompressParams* p, uint16_t* x, size_t n, uint64_t stream,
                       const float* damax, CompressStatsDev* st, CollScratchDev* s, cudaStream_t cs);

/* Frees what the transport made (s->ipc_state); collective over the group
 * that used it (peers unmap this rank's buffers first). */
void coll_ipc_free(CollScratchDev* s);

#ifdef __cplusplus
}
#endif
#endif /* COMM_IPC_CUDA_H */
