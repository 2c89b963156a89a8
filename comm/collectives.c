/*
 * comm/collectives.c - compressed reduce-scatter, all-gather and all-reduce.
 *
 * Sums cannot happen in FP8 on the wire, so an all-reduce over P ranks is
 * built from two halves (docs/ARCHITECTURE.md draws them):
 *
 *   reduce-scatter: every rank compresses its tensor as P chunks and sends
 *                   chunk j to rank j (one all-to-all); rank j decodes the P
 *                   chunks it received and sums them in fp32, in rank order
 *                   (fused decompress_sum), so the result is deterministic.
 *   all-gather:     rank j compresses its summed chunk once, all ranks gather
 *                   every compressed chunk and decode it. A rank decodes its
 *                   own chunk from the same bytes it sent, so every rank ends
 *                   with bit-identical results.
 *
 * In the all-reduce the sum and the all-gather's encode are one step,
 * decompress_sum_recompress: for taco the sum of the P copies is re-encoded
 * without leaving the rotated domain (compress/README.md), so the result is
 * not bit-equal to coll_reduce_scatter + coll_all_gather of its fp32 output.
 *
 * The one-shot all-reduce (coll_allreduce_one_shot) is the other shape:
 * every rank compresses its whole tensor once, all ranks gather every
 * rank's bytes and each decodes and sums the P copies in rank order. One
 * phase and one quantisation; (P - 1) compressed tensors sent per rank
 * instead of 2 (P - 1) / P. At P = 2 that is the same bytes in half the
 * phases; for larger P it pays only while a phase's fixed cost dominates.
 *
 * With method "none" the "compression" is a byte copy of fp32, so the same
 * code is the exact path: a deterministic, rank-order summation that gives
 * identical results on all ranks (MPI_Allreduce promises neither).
 *
 * Chunk boundaries fall on multiples of the compressor's group size, so no
 * group straddles two ranks; the last chunk may end in a partial group.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/collectives.h"
#include "comm/watchdog.h"
#include "common/check.h"
#include "compress/methods.h"

size_t coll_align(const CompressParams* p) {
    return compress_method_uses_groups(p->method) ? (size_t)p->group_size : 1;
}

void coll_chunk(size_t n, int P, int i, size_t align, size_t* begin, size_t* count) {
    size_t units = (n + align - 1) / align;            /* groups, the last maybe partial */
    size_t u0 = units * (size_t)i / (size_t)P;
    size_t u1 = units * (size_t)(i + 1) / (size_t)P;
    size_t b = u0 * align, e = u1 * align;
    if (b > n) b = n;
    if (e > n) e = n;
    *begin = b;
    *count = e - b;
}

static void* grow(void* p, size_t* cap, size_t need) {
    if (need <= *cap) return p;
    free(p);
    *cap = need + need / 4;
    return mallocCheck(*cap);
}

uint64_t coll_stream_of(uint64_t stream, int rank, int chunk, int phase) {
    return stream * 0x9E3779B97F4A7C15ull + ((uint64_t)rank << 40) + ((uint64_t)chunk << 20) +
           (uint64_t)phase;
}

static void stats_add(CollStats* st, const CompressStats* cs, int phase) {
    if (!st) return;
    st->saturated += cs->saturated;
    st->nonfinite += cs->nonfinite;
    float* a = phase == 0 ? &st->amax_rs : &st->amax_ag;
    if (cs->amax > *a) *a = cs->amax;
}

void coll_reduce_scatter(MPI_Comm comm, const CompressParams* p, const float* x, size_t n, float* out,
                         uint64_t stream, CollScratch* s, CollStats* st) {
    coll_reduce_scatter_unit(comm, p, x, n, coll_align(p), out, stream, s, st);
}

/* The reduce-scatter's exchange: my P chunks compressed, chunk j sent to
 * rank j; on return the P copies of my chunk lie in s->recv, csz bytes
 * apart, in rank order, and *mcnt is my chunk's length. */
static void rs_exchange(MPI_Comm comm, const CompressParams* p, const float* x, size_t n, size_t align,
                        uint64_t stream, CollScratch* s, CollStats* st, size_t* mcnt_out, size_t* csz_out) {
    int P, r;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    MPI_CHECK(MPI_Comm_rank(comm, &r));
    int* scount = mallocCheck(4 * sizeof(int) * (size_t)P);
    int* sdispl = scount + P;
    int* rcount = sdispl + P;
    int* rdispl = rcount + P;

    /* compress my P chunks, chunk j destined for rank j */
    size_t total = 0;
    for (int j = 0; j < P; j++) {
        size_t b, cnt;
        coll_chunk(n, P, j, align, &b, &cnt);
        total += compress_bound(p, cnt);
    }
    s->send = grow(s->send, &s->send_cap, total);
    size_t off = 0;
    for (int j = 0; j < P; j++) {
        size_t b, cnt;
        coll_chunk(n, P, j, align, &b, &cnt);
        CompressStats cs = {0};
        size_t w = compress(p, x + b, cnt, coll_stream_of(stream, r, j, 0), s->send + off, &cs);
        stats_add(st, &cs, 0);
        if (w > (size_t)INT32_MAX) FATAL("exchange chunk of %zu bytes is too large for MPI int counts", w);
        scount[j] = (int)w;
        sdispl[j] = (int)off;
        if (st && j != r) st->bytes_sent += w;
        off += w;
    }

    /* everyone sends me their copy of my chunk, all of the same size */
    size_t mb, mcnt;
    coll_chunk(n, P, r, align, &mb, &mcnt);
    size_t csz = compress_bound(p, mcnt);
    s->recv = grow(s->recv, &s->recv_cap, csz * (size_t)P);
    for (int i = 0; i < P; i++) {
        rcount[i] = (int)csz;
        rdispl[i] = (int)(csz * (size_t)i);
    }
    MPI_Request req;   /* nonblocking, so the watchdog can bound the wait */
    MPI_CHECK(MPI_Ialltoallv(s->send, scount, sdispl, MPI_BYTE, s->recv, rcount, rdispl, MPI_BYTE, comm, &req));
    wd_waitall(1, &req, comm, "reduce-scatter (all-to-all)");
    free(scount);
    *mcnt_out = mcnt;
    *csz_out = csz;
}

/* the P copies of my chunk in s->recv (rs_exchange), in rank order */
static const uint8_t** rs_copies(const CollScratch* s, int P, size_t csz) {
    const uint8_t** copies = mallocCheck(sizeof(uint8_t*) * (size_t)P);
    for (int i = 0; i < P; i++) copies[i] = s->recv + (size_t)i * csz;
    return copies;
}

void coll_reduce_scatter_unit(MPI_Comm comm, const CompressParams* p, const float* x, size_t n, size_t align,
                              float* out, uint64_t stream, CollScratch* s, CollStats* st) {
    int P;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    size_t mcnt, csz;
    rs_exchange(comm, p, x, n, align, stream, s, st, &mcnt, &csz);
    /* fused decode + fp32 sum, in rank order */
    const uint8_t** copies = rs_copies(s, P, csz);
    if (mcnt) decompress_sum(p, copies, P, mcnt, out);
    free(copies);
}

void coll_all_gather(MPI_Comm comm, const CompressParams* p, const float* mine, size_t n, float* out,
                     uint64_t stream, CollScratch* s, CollStats* st) {
    coll_all_gather_unit(comm, p, mine, n, coll_align(p), out, stream, s, st);
}

/* the wire sizes of the P chunks of the all-gather, and their offsets in s->recv */
static void ag_layout(const CompressParams* p, size_t n, int P, size_t align, int* rcount, int* rdispl) {
    size_t total = 0;
    for (int i = 0; i < P; i++) {
        size_t b, cnt;
        coll_chunk(n, P, i, align, &b, &cnt);
        size_t w = compress_bound(p, cnt);
        if (total + w > (size_t)INT32_MAX) FATAL("all-gather of %zu elements is too large for MPI int counts", n);
        rcount[i] = (int)w;
        rdispl[i] = (int)total;
        total += w;
    }
}

/* The all-gather's exchange and decode: s->send holds my chunk's wire
 * (rcount[r] bytes); every chunk is decoded from the gathered bytes. */
static void ag_exchange(MPI_Comm comm, const CompressParams* p, size_t n, size_t align, const int* rcount,
                        const int* rdispl, float* out, CollScratch* s, CollStats* st) {
    int P, r;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    MPI_CHECK(MPI_Comm_rank(comm, &r));
    if (st) st->bytes_sent += (uint64_t)rcount[r] * (uint64_t)(P - 1);
    s->recv = grow(s->recv, &s->recv_cap, (size_t)rdispl[P - 1] + (size_t)rcount[P - 1]);
    MPI_Request req;
    MPI_CHECK(MPI_Iallgatherv(s->send, rcount[r], MPI_BYTE, s->recv, rcount, rdispl, MPI_BYTE, comm, &req));
    wd_waitall(1, &req, comm, "all-gather");
    for (int i = 0; i < P; i++) {
        size_t b, cnt;
        coll_chunk(n, P, i, align, &b, &cnt);
        decompress(p, s->recv + rdispl[i], cnt, out + b);
    }
}

void coll_all_gather_unit(MPI_Comm comm, const CompressParams* p, const float* mine, size_t n, size_t align,
                          float* out, uint64_t stream, CollScratch* s, CollStats* st) {
    int P, r;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    MPI_CHECK(MPI_Comm_rank(comm, &r));
    int* rcount = mallocCheck(2 * sizeof(int) * (size_t)P);
    int* rdispl = rcount + P;
    ag_layout(p, n, P, align, rcount, rdispl);
    size_t mb, mcnt;
    coll_chunk(n, P, r, align, &mb, &mcnt);
    s->send = grow(s->send, &s->send_cap, (size_t)rcount[r]);
    CompressStats cs = {0};
    compress(p, mine, mcnt, coll_stream_of(stream, r, r, 1), s->send, &cs);
    stats_add(st, &cs, 1);
    ag_exchange(comm, p, n, align, rcount, rdispl, out, s, st);
    free(rcount);
}

void coll_allreduce(MPI_Comm comm, const CompressParams* p_rs, const CompressParams* p_ag, float* x,
                    size_t n, uint64_t stream, CollScratch* s, CollStats* st) {
    int P, r;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    if (P == 1) return; /* nothing to exchange, nothing to compress */
    MPI_CHECK(MPI_Comm_rank(comm, &r));
    /* both halves must cut the tensor identically */
    size_t align = coll_align(p_rs);
    if (coll_align(p_ag) != align) FATAL("all-reduce halves use different group sizes (%zu vs %zu)", align, coll_align(p_ag));
    /* reduce-scatter, then my chunk's copies summed and re-encoded for the
     * all-gather in one step (decompress_sum_recompress: in the rotated
     * domain for taco), then the all-gather of the wires */
    size_t mcnt, csz;
    rs_exchange(comm, p_rs, x, n, align, stream, s, st, &mcnt, &csz);
    int* rcount = mallocCheck(2 * sizeof(int) * (size_t)P);
    int* rdispl = rcount + P;
    ag_layout(p_ag, n, P, align, rcount, rdispl);
    s->send = grow(s->send, &s->send_cap, (size_t)rcount[r]);
    const uint8_t** copies = rs_copies(s, P, csz);
    CompressStats cs = {0};
    decompress_sum_recompress(p_rs, copies, P, mcnt, p_ag, coll_stream_of(stream, r, r, 1), s->send, &cs);
    free(copies);
    stats_add(st, &cs, 1);
    ag_exchange(comm, p_ag, n, align, rcount, rdispl, x, s, st);
    free(rcount);
}

void coll_allreduce_one_shot(MPI_Comm comm, const CompressParams* p, float* x, size_t n, uint64_t stream,
                             CollScratch* s, CollStats* st) {
    int P, r;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    if (P == 1) return;
    MPI_CHECK(MPI_Comm_rank(comm, &r));
    /* every rank's wire has the same size (it depends on n and p only) */
    size_t slot = compress_bound(p, n);
    if (slot > (size_t)INT32_MAX) FATAL("one-shot all-reduce of %zu elements is too large for MPI int counts", n);
    s->recv = grow(s->recv, &s->recv_cap, (slot ? slot : 1) * (size_t)P);
    CompressStats cs = {0};
    /* phase 2: a stream of its own, distinct from both halves of the two-shot form */
    compress(p, x, n, coll_stream_of(stream, r, 0, 2), s->recv + (size_t)r * slot, &cs);
    stats_add(st, &cs, 0);
    if (st) st->bytes_sent += (uint64_t)slot * (uint64_t)(P - 1);
    MPI_Request req;
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, s->recv, (int)slot, MPI_BYTE, comm, &req));
    wd_waitall(1, &req, comm, "one-shot all-reduce (all-gather)");
    const uint8_t** copies = mallocCheck(sizeof(uint8_t*) * (size_t)P);
    for (int i = 0; i < P; i++) copies[i] = s->recv + (size_t)i * slot;
    if (n) decompress_sum(p, copies, P, n, x);
    free(copies);
}

void coll_scratch_free(CollScratch* s) {
    free(s->send);
    free(s->recv);
    free(s->acc);
    memset(s, 0, sizeof(*s));
}
