/*
 * comm/nccl_util.h - NCCL_CHECK, the NCCL twin of MPI_CHECK / CUDA_CHECK,
 * nccl_comm_over, the one way this project makes an NCCL communicator, and
 * the watched waits that put NCCL exchanges under comm.timeout_s.
 *
 * A failed NCCL call prints the call, NCCL's error string and its last
 * error message (which usually names the cause: a duplicate GPU, a failed
 * connection), says how to get more, and ends every rank (check_fatal).
 */
#ifndef NCCL_UTIL_H
#define NCCL_UTIL_H

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "comm/watchdog.h"
#include "common/check.h"
#include "common/cuda_check.h"

#define NCCL_CHECK(call)                                                                                     \
    do {                                                                                                     \
        ncclResult_t nccl_r_ = (call);                                                                       \
        if (nccl_r_ != ncclSuccess)                                                                          \
            check_fatal(__FILE__, __LINE__, "NCCL call failed: %s: %s (%s). Rerun with NCCL_DEBUG=WARN for NCCL's own report", \
                        #call, ncclGetErrorString(nccl_r_), ncclGetLastError(NULL));                         \
    } while (0)

/* An NCCL communicator over the ranks of the MPI communicator g, with the
 * same rank order: rank 0 makes the unique id and broadcasts it over MPI.
 * Collective over g; every rank's device must be set before. */
static inline ncclComm_t nccl_comm_over(MPI_Comm g) {
    int P, r;
    MPI_CHECK(MPI_Comm_size(g, &P));
    MPI_CHECK(MPI_Comm_rank(g, &r));
    ncclUniqueId id;
    if (r == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, g));
    ncclComm_t nc;
    NCCL_CHECK(ncclCommInitRank(&nc, P, id, r));
    return nc;
}

/* Wait for event ev (recorded after an exchange's device work) under the
 * watchdog's deadline (comm/watchdog.h). An NCCL exchange with a stopped
 * peer does not fail: its kernels wait inside the GPU, and a host blocked in
 * cudaEventSynchronize would wait with them forever. Polling lets the
 * watchdog name the operation and the peers of comm, then end the job. */
static inline void wd_event_wait(cudaEvent_t ev, MPI_Comm comm, const char* op) {
    WdClock k;
    wd_clock_start(&k);
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        wd_poll(&k, comm, op);
    }
}

/* The same for everything queued on stream s so far (one event per
 * translation unit, made on first use). On a stream being captured into a
 * CUDA graph nothing can be waited for, so nothing is: the step's closing
 * wait (comm_step_wait) watches the replay instead. */
static inline void wd_stream_wait(cudaStream_t s, MPI_Comm comm, const char* op) {
    static cudaEvent_t ev = NULL;
    if (cuda_stream_capturing(s)) return;
    if (!ev) CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ev, s));
    wd_event_wait(ev, comm, op);
}

#endif /* NCCL_UTIL_H */
