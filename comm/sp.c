/*
 * comm/sp.c - the row exchanges of sequence parallelism on host buffers
 * (the device versions: comm/sp_cuda.c; the sites call either from
 * comm/sites.c). The row layout and why pieces are compression units:
 * comm/sp.h.
 *
 * A segment's exchange is the row-cut collective of comm/collectives.c
 * (coll_*_unit with unit = one piece): the reduce-scatter encodes the P
 * pieces of a segment, one per destination, and every rank decodes and sums
 * the P copies of its piece in rank order in fp32 (decompress_sum), so the
 * result is deterministic and the same on every rank; the all-gather encodes
 * this rank's piece once and every rank decodes all P pieces from the
 * gathered bytes, its own too. Per rank and segment that is (P - 1) pieces
 * sent in each, the bytes of either half of the all-reduce.
 */
#include "comm/sp.h"

#include "common/check.h"

void sp_piece(int N, int P, int K, int r, int k, int* g0, int* rows) {
    const int seg = N / K, rs = seg / P;
    *g0 = k * seg + r * rs;
    *rows = rs;
}

void sp_sizes(MPI_Comm comm, int N, int C, int K, size_t* seg, size_t* piece) {
    int P;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    if (K < 1 || N % (P * K) != 0)   /* the config refuses such runs first; this is for callers that skipped it */
        FATAL("sequence parallelism: %d rows do not split into %d ranks x %d pieces", N, P, K);
    *seg = (size_t)(N / K) * C;
    *piece = *seg / (size_t)P;
}

void sp_reduce_scatter_host(MPI_Comm comm, int K, const CompressParams* p, const float* full, float* local, int N,
                            int C, int k0, int k1, uint64_t stream, CollScratch* s, CollStats* st) {
    size_t seg, piece;
    sp_sizes(comm, N, C, K, &seg, &piece);
    for (int k = k0; k < k1; k++)
        coll_reduce_scatter_unit(comm, p, full + k * seg, seg, piece, local + k * piece, sp_stream(stream, k), s, st);
}

void sp_all_gather_host(MPI_Comm comm, int K, const CompressParams* p, const float* local, float* full, int N, int C,
                        int k0, int k1, uint64_t stream, CollScratch* s, CollStats* st) {
    size_t seg, piece;
    sp_sizes(comm, N, C, K, &seg, &piece);
    for (int k = k0; k < k1; k++)
        coll_all_gather_unit(comm, p, local + k * piece, seg, piece, full + k * seg, sp_stream(stream, k), s, st);
}
