/*
 * comm/collectives.h - the compressed collectives on host fp32 buffers
 * (comm/collectives.c), usable on any MPI communicator.
 *
 * Sums cannot be taken in FP8 on the wire, so an all-reduce over P ranks is a
 * compressed reduce-scatter (each rank compresses its tensor in P chunks,
 * sends chunk j to rank j, which decodes and sums the P copies in rank order
 * in fp32) followed by a compressed all-gather (each rank compresses its
 * summed chunk once; every rank decodes every chunk, its own included, from
 * the same bytes). The result is deterministic and bit-identical on every
 * rank, and exact when both methods are "none". This is also the CPU
 * reference of the device collectives (comm/collectives_cuda.h).
 */
#ifndef COMM_COLLECTIVES_H
#define COMM_COLLECTIVES_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "compress/compress.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint8_t* send;      /* compressed chunks going out */
    uint8_t* recv;      /* compressed chunks coming in */
    float* acc;         /* unused (the fp32 sum of the all-reduce before 2026-12) */
    size_t send_cap, recv_cap, acc_cap;
} CollScratch;

typedef struct {
    uint64_t bytes_sent;   /* bytes this rank put on the wire (to other ranks) */
    uint64_t saturated;    /* elements clamped by the FP8 cast */
    uint64_t nonfinite;    /* NaN/inf elements seen by the compressor */
    float amax_rs, amax_ag;/* chunk amax seen by the two phases (delayed-scale history) */
} CollStats;

/* Split n elements into P chunks whose boundaries fall on multiples of
 * align (so no compression group straddles two ranks). */
void coll_chunk(size_t n, int P, int i, size_t align, size_t* begin, size_t* count);
size_t coll_align(const CompressParams* p);
/* The stochastic-rounding stream of one compress call of a collective: one
 * per (call's stream, rank, chunk, phase: 0 reduce-scatter, 1 all-gather, 2
 * one-shot), so no two calls share random numbers; the device collectives
 * use the same, for the same bits. */
uint64_t coll_stream_of(uint64_t stream, int rank, int chunk, int phase);

/* x[n] -> out[count of my chunk]: sum over ranks of my chunk. p compresses
 * what is sent. stream seeds stochastic rounding. */
void coll_reduce_scatter(MPI_Comm comm, const CompressParams* p, const float* x, size_t n, float* out,
                         uint64_t stream, CollScratch* s, CollStats* st);
/* mine[count of my chunk] -> out[n]: every rank gets every chunk, decoded
 * from the same bytes (so all ranks hold identical results, their own chunk
 * included). */
void coll_all_gather(MPI_Comm comm, const CompressParams* p, const float* mine, size_t n, float* out,
                     uint64_t stream, CollScratch* s, CollStats* st);
/* The two halves with the chunks cut on multiples of `align` elements
 * instead of the group size: with n = P * align, chunk j is elements
 * [j align, (j+1) align), e.g. rank j's rows under sequence parallelism
 * (comm/sp.c). Each chunk is compressed from its own start, so its groups
 * never straddle two chunks. */
void coll_reduce_scatter_unit(MPI_Comm comm, const CompressParams* p, const float* x, size_t n, size_t align,
                              float* out, uint64_t stream, CollScratch* s, CollStats* st);
void coll_all_gather_unit(MPI_Comm comm, const CompressParams* p, const float* mine, size_t n, size_t align,
                          float* out, uint64_t stream, CollScratch* s, CollStats* st);
/* In place: x = sum over ranks, by reduce-scatter (p_rs) + all-gather (p_ag).
 * The middle step, my chunk's P copies summed and re-encoded as p_ag, is
 * decompress_sum_recompress (compress.h): for taco into taco the sum stays
 * in the rotated domain, so this is NOT coll_reduce_scatter followed by
 * coll_all_gather of its fp32 result (for other pairs it is, bit for bit).
 * Deterministic, identical on every rank, exact when both methods are none.
 * (acc in CollScratch is no longer used by it.) */
void coll_allreduce(MPI_Comm comm, const CompressParams* p_rs, const CompressParams* p_ag, float* x,
                    size_t n, uint64_t stream, CollScratch* s, CollStats* st);
/* In place, in one phase: every rank compresses all of x with p once, every
 * rank gathers every rank's bytes and decodes and sums the P copies in rank
 * order (decompress_sum). Deterministic, identical on every rank, one
 * quantisation; with "none" the same bits as coll_allreduce's exact path.
 * Sends (P - 1) compress_bound(p, n) bytes per rank. */
void coll_allreduce_one_shot(MPI_Comm comm, const CompressParams* p, float* x, size_t n, uint64_t stream,
                             CollScratch* s, CollStats* st);
void coll_scratch_free(CollScratch* s);

#ifdef __cplusplus
}
#endif
#endif /* COMM_COLLECTIVES_H */
