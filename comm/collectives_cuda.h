/*
 * comm/collectives_cuda.h - the compressed collectives of comm/collectives.c
 * on DEVICE buffers, pipelined (comm/collectives_cuda.c).
 *
 * Same chunking (coll_chunk / coll_align), same SR streams, same rank-order
 * fp32 sums and the same bytes on the wire as the host versions, so for
 * round-to-nearest the results are bit-identical to running coll_allreduce
 * on float(x) and rounding the result to bf16 (round to nearest even), and
 * identical on every rank. Each rank chunk is cut into K sub-chunks (on
 * multiples of the group size) that flow through
 *     compress -> D2H -> MPI_Isend/Irecv -> H2D -> decompress-reduce
 * with CUDA streams and events, so compression, copies and the network
 * overlap; the all-gather's message k leaves as soon as its fused
 * decompress-reduce-recompress is done (one pass when the all-gather's chunk
 * scale is delayed or absent; with current dual scaling the whole sum's amax
 * is needed first, so the all-gather starts after the reduce-scatter).
 * Device pointers go to MPI directly when it is CUDA-aware
 * (MPIX_Query_cuda_support), otherwise through pinned host buffers; or the
 * messages go by NCCL send/recv when the scratch holds an NCCL communicator,
 * or (CollScratchDev.ipc) the ranks of a node read each other's device
 * buffers through CUDA IPC (comm/ipc_cuda.h: whole chunks, no sub-chunks).
 * The _site_ variants keep the scale and the statistics in device memory, so
 * that only the staged transport's own progress ever waits for the device.
 * Design and measurements: compress/CUDA.md.
 */
#ifndef COLLECTIVES_CUDA_H
#define COLLECTIVES_CUDA_H

#if defined(__cplusplus) && !defined(OMPI_SKIP_MPICXX)
#define OMPI_SKIP_MPICXX 1 /* C++ files: MPI's C API only (its C++ bindings do not build warning-free) */
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "comm/collectives.h"
#include "comm/stats_cuda.h"
#include "compress/compress_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COLL_DEV_MAX_K 64    /* most sub-chunks per rank chunk */
#define COLL_DEV_DEFAULT_K 4 /* the default pipeline depth */

/* (tagged, so that comm.h can hold a `struct CollScratchDev*` without this header) */
typedef struct CollScratchDev {
    /* settings: coll_scratch_dev_init sets the defaults (a zeroed struct gets
     * K = 4, min_sub = 65536 and cuda_aware = 0); change them before a call */
    int K;              /* pipeline depth: sub-chunks per rank chunk (1 = no pipelining) */
    size_t min_sub;     /* fewest elements per sub-chunk: K shrinks for small tensors (default 65536) */
    int cuda_aware;     /* -1: ask MPI (MPIX_Query_cuda_support); 0: stage through pinned host
                           memory; 1: hand device pointers to MPI */
    int unfused;        /* 1: the all-reduce sums into fp32 and encodes the all-gather in a
                           separate pass, never fused into the reduce (for the benchmark);
                           the same bits (CDEV_REDUCE_ROTATED_F32) */
    void* nccl;         /* NULL: MPI moves the messages; else an ncclComm_t of the same group
                           with the same rank order: NCCL send/recv of device buffers */
    int ipc;            /* 1: the CUDA IPC transport (comm/ipc_cuda.h; the group on one node) */
    /* state (owned by the collectives; zero it or call coll_scratch_dev_init) */
    int initialized, aware;
    int end_captured;   /* EV_END was last recorded on a stream being captured into a CUDA graph */
    uint8_t* d_buf;     /* device: every message of a call, laid out by the plan */
    uint8_t* h_buf;     /* pinned host mirror of d_buf (staged mode) */
    size_t buf_cap;
    float* d_acc;       /* fp32 sum of my chunk when the all-gather method cannot be fused */
    size_t acc_cap;
    CompressStatsDev* d_st; /* per call: P reduce-scatter chunks + 1 all-gather chunk */
    CompressStatsDev* h_st; /* pinned copy */
    int st_cap;
    cudaStream_t s_d2h, s_h2d, s_net; /* copies down / up (MPI), NCCL's transfers */
    cudaEvent_t* ev;
    int ev_cap;
    MPI_Request* req;
    int req_cap;
    void* plan;         /* message table (internal) */
    size_t plan_cap;
    /* the one-shot all-reduce's over NCCL and IPC (comm/oneshot_cuda.c; over MPI it
       uses the two-shot's buffers above) */
    uint8_t* d_one;     /* P slots, one rank's wire each (NCCL) */
    size_t one_cap;
    CompressStatsDev* d_ost; /* its encode's statistics, and the pinned copy */
    CompressStatsDev* h_ost;
    cudaEvent_t ev_one;
    /* what the calls cost the host, for the benchmark and the tests: times
     * the host waited for device work (an event, a stream), counted since
     * the scratch was made */
    unsigned long long host_syncs;
    struct CollIpc* ipc_state; /* the IPC transport's buffers, events and tokens (comm/ipc_cuda.c) */
} CollScratchDev;

/* Where a site's exchange keeps its state in device memory (comm/stats_cuda.h),
 * so that the call never waits for the host: the kernels read the delayed
 * amax of each phase when they run, and the call's statistics are added to
 * a device record. Either pointer may be NULL. With delayed_amax set, the
 * params' own delayed_amax is ignored (the device value, under the same
 * rule, takes its place). */
typedef struct {
    const float* delayed_amax; /* device [2]: the reduce-scatter's and the all-gather's (one-shot: [0]) */
    CollDevStats* stats;       /* device: this call's statistics are added here */
} CollDevSite;

void coll_scratch_dev_init(CollScratchDev* s);
/* (collective over the group when the IPC transport was used) */
void coll_scratch_dev_free(CollScratchDev* s);

/* In place: x (bf16, device) = sum over ranks, reduce-scatter with p_rs then
 * all-gather with p_ag, on the caller's stream cs (the result is ready in
 * stream order; the call returns once every message has left and arrived).
 * stream seeds stochastic rounding as in coll_allreduce; st (may be NULL)
 * accumulates like CollStats in comm/collectives.h. */
void coll_allreduce_dev(MPI_Comm comm, const CompressParams* p_rs, const CompressParams* p_ag, uint16_t* x,
                        size_t n, uint64_t stream, CollScratchDev* s, CollStats* st, cudaStream_t cs);
/* The same for an exchange site: the scale and statistics in device memory
 * (site, may be NULL). st may be NULL; when it is not, the host WAITS for
 * the statistics (one synchronisation), as coll_allreduce_dev does. Returns
 * the bytes this rank sent (what CollStats.bytes_sent adds), known without
 * waiting. */
uint64_t coll_allreduce_site_dev(MPI_Comm comm, const CompressParams* p_rs, const CompressParams* p_ag, uint16_t* x,
                                 size_t n, uint64_t stream, CollScratchDev* s, const CollDevSite* site, CollStats* st,
                                 cudaStream_t cs);
/* x[n] (bf16) -> out[count of my chunk] (fp32, or bf16 if out_is_bf16): as
 * coll_reduce_scatter. */
void coll_reduce_scatter_dev(MPI_Comm comm, const CompressParams* p, const uint16_t* x, size_t n, void* out,
                             int out_is_bf16, uint64_t stream, CollScratchDev* s, CollStats* st, cudaStream_t cs);
/* mine[count of my chunk] (fp32, or bf16 if mine_is_bf16) -> out[n] (bf16):
 * as coll_all_gather (every rank decodes every chunk, its own included, from
 * the same bytes). */
void coll_all_gather_dev(MPI_Comm comm, const CompressParams* p, const void* mine, int mine_is_bf16, size_t n,
                         uint16_t* out, uint64_t stream, CollScratchDev* s, CollStats* st, cudaStream_t cs);

/* The two halves with the chunks cut on multiples of `unit` elements (0:
 * the group size), as coll_reduce_scatter_unit / coll_all_gather_unit: the
 * row cut of sequence parallelism (comm/sp.c). site (may be NULL): the
 * scale and statistics in device memory, as coll_allreduce_site_dev (the
 * reduce-scatter's phase is [0], the all-gather's [1]). Return the bytes
 * this rank sent. */
uint64_t coll_reduce_scatter_unit_dev(MPI_Comm comm, const CompressParams* p, const uint16_t* x, size_t n, size_t unit,
                                      void* out, int out_is_bf16, uint64_t stream, CollScratchDev* s,
                                      const CollDevSite* site, CollStats* st, cudaStream_t cs);
uint64_t coll_all_gather_unit_dev(MPI_Comm comm, const CompressParams* p, const void* mine, int mine_is_bf16, size_t n,
                                  size_t unit, uint16_t* out, uint64_t stream, CollScratchDev* s,
                                  const CollDevSite* site, CollStats* st, cudaStream_t cs);

/* In place, in one phase, as coll_allreduce_one_shot (comm/collectives.h):
 * every rank compresses x once with p, the wires are gathered, every rank
 * sums the P copies in rank order. Bit-identical to the host version on
 * float(x), rounded to bf16; with "none", to coll_allreduce_dev's exact
 * path. The result is ready in stream order on cs. */
void coll_allreduce_one_shot_dev(MPI_Comm comm, const CompressParams* p, uint16_t* x, size_t n, uint64_t stream,
                                 CollScratchDev* s, CollStats* st, cudaStream_t cs);
/* ... for an exchange site, as coll_allreduce_site_dev (the one phase is the
 * reduce-scatter's: site->delayed_amax[0], CollDevStats.amax_rs_bits). */
uint64_t coll_allreduce_one_shot_site_dev(MPI_Comm comm, const CompressParams* p, uint16_t* x, size_t n,
                                          uint64_t stream, CollScratchDev* s, const CollDevSite* site, CollStats* st,
                                          cudaStream_t cs);

/* (internal to the device collectives) The one-shot all-reduce over MPI,
 * pipelined in sub-chunks like the two-shot (comm/collectives_cuda.c, point
 * 6); p's delayed_amax already cleared where site carries a device one. */
uint64_t coll_one_shot_mpi_dev(MPI_Comm comm, const CompressParams* p, uint16_t* x, size_t n, uint64_t stream,
                               CollScratchDev* s, const CollDevSite* site, CollStats* st, cudaStream_t cs);
/* (internal to the device collectives: comm/scratch_cuda.c) */
void coll_scratch_dev_ensure(CollScratchDev* s, int nst, int nev, int nreq, size_t bytes, size_t acc, size_t plan_bytes);
/* Before device scratch of the exchanges grows (what: the buffer): a fatal
 * error once coll_dev_freeze has been called (by the trainer, as it starts
 * capturing a step into a CUDA graph, whose nodes will point at the buffers
 * as they are; the warm-up step before the capture sizes every one). */
void coll_dev_may_grow(const char* what, size_t bytes);
void coll_dev_freeze(void);

/* 1 if this MPI takes device pointers (compile-time and run-time check). */
int coll_mpi_cuda_aware(void);

#ifdef __cplusplus
}
#endif
#endif /* COLLECTIVES_CUDA_H */
