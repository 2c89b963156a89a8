/*
 * comm/sp_cuda.c - the row exchanges of sequence parallelism on device
 * buffers (comm/sp_cuda.h; the row layout: comm/sp.h).
 *
 * Segment k of the bf16 tensor is the row-cut device collective of
 * comm/collectives_cuda.c (coll_*_unit_dev, unit = one piece), with the
 * host version's cut, streams and rank-order sums, so it is bit-identical to
 * sp_*_host on float(x) rounded to bf16 (tests/test_coll_gpu.c). The
 * reduce-scatter writes the bf16 sum of this rank's piece; the all-gather
 * decodes every piece, this rank's included, from the gathered bytes.
 * With a CollDevSite the scale and statistics stay on the device
 * (comm/sites_dev.c), on any transport. Also the side stream of
 * comm.overlap (SpSide).
 */
#include "comm/sp_cuda.h"

#include <stdlib.h>

#include "comm/sp.h"
#include "common/check.h"
#include "common/cuda_check.h"

uint64_t sp_reduce_scatter_dev(MPI_Comm comm, int K, const CompressParams* p, const uint16_t* full, uint16_t* local,
                               int N, int C, int k0, int k1, uint64_t stream, CollScratchDev* s, const CollDevSite* site,
                               CollStats* st, cudaStream_t cs) {
    size_t seg, piece;
    sp_sizes(comm, N, C, K, &seg, &piece);
    uint64_t bytes = 0;
    for (int k = k0; k < k1; k++)
        bytes += coll_reduce_scatter_unit_dev(comm, p, full + k * seg, seg, piece, local + k * piece, 1,
                                              sp_stream(stream, k), s, site, st, cs);
    return bytes;
}

uint64_t sp_all_gather_dev(MPI_Comm comm, int K, const CompressParams* p, const uint16_t* local, uint16_t* full, int N,
                           int C, int k0, int k1, uint64_t stream, CollScratchDev* s, const CollDevSite* site,
                           CollStats* st, cudaStream_t cs) {
    size_t seg, piece;
    sp_sizes(comm, N, C, K, &seg, &piece);
    uint64_t bytes = 0;
    for (int k = k0; k < k1; k++)
        bytes += coll_all_gather_unit_dev(comm, p, local + k * piece, 1, seg, piece, full + k * seg,
                                          sp_stream(stream, k), s, site, st, cs);
    return bytes;
}

SpSide* sp_side_get(SpSide** slot) {
    if (*slot) return *slot;
    SpSide* s = callocCheck(1, sizeof(SpSide));
    CUDA_CHECK(cudaStreamCreateWithFlags(&s->side, cudaStreamNonBlocking));
    for (int i = 0; i <= SP_SIDE_DONE; i++) CUDA_CHECK(cudaEventCreateWithFlags(&s->ev[i], cudaEventDisableTiming));
    *slot = s;
    return s;
}

void sp_side_mark(SpSide* s, int i, cudaStream_t on) { CUDA_CHECK(cudaEventRecord(s->ev[i], on)); }

void sp_side_follow(SpSide* s, int i, cudaStream_t waiter) { CUDA_CHECK(cudaStreamWaitEvent(waiter, s->ev[i], 0)); }

void sp_side_free(SpSide* s) {
    if (!s) return;
    for (int i = 0; i <= SP_SIDE_DONE; i++) CUDA_CHECK(cudaEventDestroy(s->ev[i]));
    CUDA_CHECK(cudaStreamDestroy(s->side));
    free(s);
}
