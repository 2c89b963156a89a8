/*
 * comm/nccl_util.h - NCCL_CHECK, the NCCL twin of MPI_CHECK / CUDA_CHECK, and
 * nccl_comm_over, the one way this project makes an NCCL communicator.
 *
 * A failed NCCL call prints the call, NCCL's error string and its last
 * error message (which usually names the cause: a duplicate GPU, a failed
 * connection), says how to get more, and ends every rank (check_fatal).
 */
#ifndef NCCL_UTIL_H
#define NCCL_UTIL_H

#include <mpi.h>
#include <nccl.h>

#include "common/check.h"

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

#endif /* NCCL_UTIL_H */
