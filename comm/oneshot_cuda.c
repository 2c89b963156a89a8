/*
 * comm/oneshot_cuda.c - the one-shot all-reduce of comm/collectives.c
 * (coll_allreduce_one_shot) on device buffers.
 *
 * Every rank compresses its whole bf16 tensor once (compress_dev), the P
 * wires are gathered, and every rank sums the P copies in rank order
 * (decompress_reduce_dev): the host version's bytes and sums, so the result
 * is that of coll_allreduce_one_shot on float(x), rounded to bf16, and
 * identical on every rank. How the wires move:
 *   - IPC: each rank encodes into its slot of the shared buffers and reads
 *     the peers' slots where they lie (coll_ipc_one_shot);
 *   - NCCL: one all-gather of P slots, each `stride` bytes with the wire
 *     `pad` bytes in, so that its element bytes are 16-byte aligned (the
 *     kernels' fast path);
 *   - MPI (staged through pinned host memory, or device pointers when MPI is
 *     CUDA-aware): in sub-chunks, pipelined like the two-shot exchange
 *     (coll_one_shot_mpi_dev), because there the copies to and from the
 *     host cost as much as the bytes and overlap only in pieces.
 */
#include <stdint.h>
#include <string.h>

#include <mpi.h>

#include "comm/collectives_cuda.h"
#include "comm/ipc_cuda.h"
#include "comm/nccl_util.h"
#include "comm/watchdog.h"
#include "common/check.h"

static size_t up16(size_t v) { return (v + 15) & ~(size_t)15; }

/* the encode's statistics and the event of the host's waits (made once) */
static void one_shot_stats(CollScratchDev* s) {
    if (s->d_ost) return;
    s->d_ost = compress_stats_dev_alloc(1);
    CUDA_CHECK(cudaMallocHost((void**)&s->h_ost, sizeof(CompressStatsDev)));
    CUDA_CHECK(cudaEventCreateWithFlags(&s->ev_one, cudaEventDisableTiming));
}

/* the device slots, grown as needed */
static void one_shot_buffers(CollScratchDev* s, size_t bytes) {
    if (bytes <= s->one_cap) return;
    coll_dev_may_grow("the one-shot all-reduce's slots", bytes);
    CUDA_CHECK(cudaDeviceSynchronize()); /* queued work may still use the old buffer (first calls only) */
    if (s->d_one) CUDA_CHECK(cudaFree(s->d_one));
    s->one_cap = bytes + bytes / 4 + 4096;
    CUDA_CHECK(cudaMalloc((void**)&s->d_one, s->one_cap));
}

/* wait for what cs has queued so far, under the watchdog */
static void wait_cs(CollScratchDev* s, cudaStream_t cs, MPI_Comm comm, const char* op) {
    CUDA_CHECK(cudaEventRecord(s->ev_one, cs));
    wd_event_wait(s->ev_one, comm, op);
    s->host_syncs++;
}

/* NCCL: the P wires gathered into P slots, then summed */
static void one_shot_nccl(const CompressParams* p, uint16_t* x, size_t n, uint64_t stream, const float* damax,
                          CollScratchDev* s, cudaStream_t cs, int r, int P) {
    const CompressWireLayout l = compress_wire_layout(p);
    const size_t pad = (16 - compress_wire_codes_offset(&l, n) % 16) % 16;
    const size_t stride = up16(pad + compress_bound(p, n));
    one_shot_buffers(s, stride * (size_t)P);
    uint8_t* slot = s->d_one + (size_t)r * stride;
    compress_dev_scaled(p, x, 1, n, coll_stream_of(stream, r, 0, 2), slot + pad, s->d_ost, damax, cs);
    /* in place: my slot is where the gather puts my part */
    NCCL_CHECK(ncclAllGather(slot, s->d_one, stride, ncclUint8, (ncclComm_t)s->nccl, cs));
    const uint8_t* copies[COMPRESS_DEV_MAX_IN];
    for (int i = 0; i < P; i++) copies[i] = s->d_one + (size_t)i * stride + pad;
    decompress_reduce_dev(p, copies, P, n, x, CDEV_SUM_BF16, cs);
}

void coll_allreduce_one_shot_dev(MPI_Comm comm, const CompressParams* p, uint16_t* x, size_t n, uint64_t stream,
                                 CollScratchDev* s, CollStats* st, cudaStream_t cs) {
    coll_allreduce_one_shot_site_dev(comm, p, x, n, stream, s, NULL, st, cs);
}

uint64_t coll_allreduce_one_shot_site_dev(MPI_Comm comm, const CompressParams* p_in, uint16_t* x, size_t n,
                                          uint64_t stream, CollScratchDev* s, const CollDevSite* site, CollStats* st,
                                          cudaStream_t cs) {
    int P, r;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    if (P == 1) return 0; /* as the host version: nothing to exchange, nothing to compress */
    CompressParams pd = *p_in; /* a device amax replaces the host one (coll_allreduce_site_dev) */
    const float* damax = site ? site->delayed_amax : NULL;
    if (damax) pd.delayed_amax = 0.0f;
    const CompressParams* p = &pd;
    MPI_CHECK(MPI_Comm_rank(comm, &r));
    if (P > COMPRESS_DEV_MAX_IN) FATAL("the one-shot all-reduce sums up to %d ranks' copies, not %d", COMPRESS_DEV_MAX_IN, P);
    if (!s->ipc && !s->nccl) return coll_one_shot_mpi_dev(comm, p, x, n, stream, s, site, st, cs);

    one_shot_stats(s);
    compress_stats_dev_reset(s->d_ost, 1, cs);
    if (s->ipc) coll_ipc_one_shot(comm, p, x, n, stream, damax, s->d_ost, s, cs); /* read where it lies */
    else one_shot_nccl(p, x, n, stream, damax, s, cs, r, P);

    /* The next call reuses the slots in stream order: its encode runs on cs
     * after this call's decode. */
    if (site && site->stats) coll_stats_fold_dev(site->stats, s->d_ost, 1, 1, 0, cs); /* the one chunk as an RS chunk */
    const uint64_t bytes = (uint64_t)compress_bound(p, n) * (uint64_t)(P - 1);
    if (st) {
        CUDA_CHECK(cudaMemcpyAsync(s->h_ost, s->d_ost, sizeof(CompressStatsDev), cudaMemcpyDeviceToHost, cs));
        wait_cs(s, cs, comm, s->nccl ? "one-shot all-reduce (NCCL)" : "one-shot all-reduce (IPC)");
        float a;
        memcpy(&a, &s->h_ost->amax_bits, sizeof(a));
        st->saturated += s->h_ost->saturated;
        st->nonfinite += s->h_ost->nonfinite;
        if (a > st->amax_rs) st->amax_rs = a;
        st->bytes_sent += bytes;
    }
    return bytes;
}
