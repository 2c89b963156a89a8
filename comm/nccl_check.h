/*
 * comm/nccl_check.h - NCCL_CHECK, the NCCL twin of MPI_CHECK / CC_CHECK.
 *
 * A failed NCCL call prints the call, NCCL's error string and its last
 * error message (which usually names the cause: a duplicate GPU, a failed
 * connection), says how to get more, and ends every rank (check_fatal).
 */
#ifndef NCCL_CHECK_H
#define NCCL_CHECK_H

#include <nccl.h>

#include "check.h"

#define NCCL_CHECK(call)                                                                                     \
    do {                                                                                                     \
        ncclResult_t nccl_r_ = (call);                                                                       \
        if (nccl_r_ != ncclSuccess)                                                                          \
            check_fatal(__FILE__, __LINE__, "NCCL call failed: %s: %s (%s). Rerun with NCCL_DEBUG=WARN for NCCL's own report", \
                        #call, ncclGetErrorString(nccl_r_), ncclGetLastError(NULL));                         \
    } while (0)

#endif /* NCCL_CHECK_H */
