/*
 * comm/sp.h - the row exchanges of sequence parallelism (comm/sp.c): which
 * rows a TP rank owns, and the compressed reduce-scatter and all-gather of
 * rows on host buffers and on backend buffers.
 *
 * With P TP ranks and K = policy.sp_chunks pieces, the N rows of a full
 * tensor [N, C] are cut into K segments of N/K rows, and each segment into
 * P pieces of Rs = N/(K P) rows: rank r owns piece r of every segment. Its
 * N/P local rows are its K pieces in segment order:
 *
 *   local row k Rs + i  <->  global row k N/K + r Rs + i
 *
 * (K = 1: rank r owns the contiguous rows [r N/P, (r+1) N/P).) A segment
 * is a contiguous block of the full tensor, so the GEMM producing or
 * consuming it is one call, and its exchange is the row-cut collective of
 * comm/collectives.h on it: chunk j = rank j's piece, compressed from its
 * own start. Every piece is its own compression unit (its own chunk scale,
 * groups from its first element), whether the K segments go in one call
 * (comm.overlap off) or one at a time between GEMMs (on): that is why the
 * two schedules give the same bits.
 */
#ifndef COMM_SP_H
#define COMM_SP_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/collectives.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rows of piece k of rank r (of P ranks, K pieces, N rows): the first
 * global row and the count. */
void sp_piece(int N, int P, int K, int r, int k, int* g0, int* rows);
/* The elements of a segment and of a piece of [N, C] over comm's ranks;
 * stops with a message unless N rows split into P ranks x K pieces. */
void sp_sizes(MPI_Comm comm, int N, int C, int K, size_t* seg, size_t* piece);
/* the stochastic-rounding stream of segment k of an exchange */
static inline uint64_t sp_stream(uint64_t stream, int k) { return stream ^ ((uint64_t)k << 56); }

/* Segments [k0, k1) of the reduce-scatter / all-gather of rows on host fp32
 * buffers over comm: full[N, C], local[N/P, C] as above. The piece of
 * segment k uses the stochastic-rounding stream sp_stream(stream, k). */
void sp_reduce_scatter_host(MPI_Comm comm, int K, const CompressParams* p, const float* full, float* local, int N,
                            int C, int k0, int k1, uint64_t stream, CollScratch* s, CollStats* st);
void sp_all_gather_host(MPI_Comm comm, int K, const CompressParams* p, const float* local, float* full, int N, int C,
                        int k0, int k1, uint64_t stream, CollScratch* s, CollStats* st);

#ifdef __cplusplus
}
#endif
#endif /* COMM_SP_H */
