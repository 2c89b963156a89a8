/*
 * comm/sp_cuda.c - the row exchanges of sequence parallelism on device
 * buffers (the GPU build's sp_reduce_scatter / sp_all_gather, comm/sp.h).
 *
 * Segment k of the bf16 tensor is the row-cut device collective of
 * comm/collectives_cuda.c (coll_*_unit_dev, unit = one piece), with the
 * host version's cut, streams and rank-order sums, so it is bit-identical to
 * sp_*_host on float(x) rounded to bf16 (tests/test_coll_gpu.c). The
 * reduce-scatter writes the bf16 sum of this rank's piece; the all-gather
 * decodes every piece, this rank's included, from the gathered bytes.
 */
#include "comm/collectives_cuda.h"
#include "comm/sp.h"
#include "common/check.h"
#include "ops/ops_cuda.h"

void sp_reduce_scatter(Comm* c, const CompressParams* p, const floatX* full, floatX* local, int N, int C,
                       uint64_t stream, CollStats* st) {
    const int P = c->tp_size, K = c->policy.sp_chunks;
    sp_check_rows(N, P, K);
    const size_t seg = (size_t)(N / K) * C, piece = seg / (size_t)P;
    CollScratchDev* s = comm_dev_scratch(c);
    for (int k = 0; k < K; k++)
        coll_reduce_scatter_unit_dev(c->tp_comm, p, full + (size_t)k * seg, seg, piece, local + (size_t)k * piece, 1,
                                     sp_stream(stream, k), s, st, (cudaStream_t)ops_cuda_stream());
}

void sp_all_gather(Comm* c, const CompressParams* p, const floatX* local, floatX* full, int N, int C, uint64_t stream,
                   CollStats* st) {
    const int P = c->tp_size, K = c->policy.sp_chunks;
    sp_check_rows(N, P, K);
    const size_t seg = (size_t)(N / K) * C, piece = seg / (size_t)P;
    CollScratchDev* s = comm_dev_scratch(c);
    for (int k = 0; k < K; k++)
        coll_all_gather_unit_dev(c->tp_comm, p, local + (size_t)k * piece, 1, seg, piece, full + (size_t)k * seg,
                                 sp_stream(stream, k), s, st, (cudaStream_t)ops_cuda_stream());
}
