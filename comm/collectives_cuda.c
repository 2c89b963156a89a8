/*
 * comm/collectives_cuda.c - compressed reduce-scatter, all-gather and
 * all-reduce of DEVICE buffers, pipelined over sub-chunks (the device twin
 * of comm/collectives.c; interface in comm/collectives_cuda.h).
 *
 * What is computed is exactly what collectives.c computes (same coll_chunk
 * cut, same SR stream per (rank, chunk, phase), same bytes per chunk, same
 * rank-order fp32 sums, every chunk decoded from the bytes that were sent),
 * so the result is bit-identical to the host version. What changes is how:
 *
 *   1. Every rank chunk is cut into K sub-chunks on multiples of the group
 *      size (coll_chunk's unit). Sub-chunk k of a chunk is one MESSAGE: the
 *      chunk's wire bytes of that range, [scale (k = 0 only)][its tiles' scales][its group
 *      bytes][its element bytes]. The concatenation of the K messages, taken
 *      field by field, is the host's wire; the receiver never needs it
 *      contiguous, because the kernels take each range's parts by pointer.
 *   2. Messages live in one device buffer, placed so that element bytes
 *      start 16-byte aligned (the fast path of the kernels), and the
 *      messages of one sub-chunk index k sit next to each other, so ONE
 *      D2H / H2D copy moves sub-chunk k for every peer (staged mode mirrors
 *      the same layout in pinned host memory).
 *   3. The host runs a small progress loop: as soon as sub-chunk k is
 *      compressed (and copied to the host) it is sent; as soon as sub-chunk
 *      k has arrived from every peer it is copied up and reduced. So the
 *      compress of k+1, the copies and the network transfer of k and the
 *      reduce of k-1 run at the same time. All kernels go to the caller's
 *      stream cs in that order; copies go to two copy streams, tied to cs
 *      by events.
 *   4. All-reduce: the reduce of sub-chunk k is fused with the all-gather's
 *      compression of it (decompress_jobs_dev, CDEV_REDUCE_RECOMPRESS), and
 *      the all-gather message k leaves at once - unless the all-gather's
 *      chunk scale needs the current amax of the whole sum (fp8_tensor with
 *      current scaling; taco's per-tile scales are computed within a
 *      sub-chunk): then the reduce pass of each k only reduces that amax, and
 *      a second pass re-decodes, re-sums and compresses once all K have
 *      arrived (no fp32 sum in memory). Pairs the fused kernel does not
 *      encode (compress_dev_can_fuse), and CollScratchDev.unfused, go
 *      through an fp32 sum (d_acc): CDEV_REDUCE_ROTATED_F32's, encoded with
 *      compress_recompress_params, so that taco's sum, kept in the rotated
 *      domain, gives the fused step's bytes (decompress_sum_recompress).
 *
 *   5. With an NCCL communicator set (CollScratchDev.nccl) the same messages
 *      go by ncclSend/ncclRecv between device buffers on a network stream,
 *      ordered by events; no host loop, no staging (run_nccl).
 *
 *   6. The one-shot all-reduce over MPI (comm/oneshot_cuda.c) is the
 *      reduce-scatter of point 3 with every rank's "chunk" its whole tensor:
 *      sub-chunk k of my tensor goes to every peer once it is compressed,
 *      and range k is summed over the P copies into x once it has arrived,
 *      so a large one-shot pipelines its copies as a two-shot does.
 *
 * K = 1 is the unpipelined reference point for the benchmark. min_sub keeps
 * sub-chunks from getting so small that launch and message overheads win.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "comm/collectives_cuda.h"
#include "comm/ipc_cuda.h"
#include "comm/watchdog.h"
#include "comm/nccl_util.h"
#include "common/check.h"

enum { TAG_RS = 0x5100, TAG_AG = 0x5100 + COLL_DEV_MAX_K }; /* + sub-chunk index */

/* ------------------------------------------------------------------------ */
/* the plan: where each message of a call lives                              */

typedef struct {
    size_t slot;   /* start of its 16-byte aligned slot in d_buf (and h_buf) */
    size_t off;    /* start of the message: element bytes at off + head are 16-byte aligned */
    size_t bytes;  /* message length; 0 = nothing to send */
    size_t e0, e1; /* the element range of its chunk */
    size_t hdr;    /* header bytes it starts with (the chunk scale, range at e0 == 0 only) */
    size_t tiles;  /* then the scales of its tiles (methods with tile scales) */
    size_t head;   /* bytes before its element bytes */
} Msg;

/* sub-chunk k of a chunk of c elements: K near-equal runs of gran-blocks */
static void sub_range(size_t c, size_t gran, int K, int k, size_t* e0, size_t* e1) {
    size_t nb = (c + gran - 1) / gran;
    size_t b0 = nb * (size_t)k / (size_t)K, b1 = nb * (size_t)(k + 1) / (size_t)K;
    *e0 = b0 * gran < c ? b0 * gran : c;
    *e1 = b1 * gran < c ? b1 * gran : c;
}

static void place(size_t* cursor, Msg* m, const CompressWireLayout* l, size_t c, int K, int k) {
    size_t e0, e1;
    sub_range(c, (size_t)l->gran, K, k, &e0, &e1);
    size_t G = (size_t)l->G, g0 = e0 / G, g1 = (e1 + G - 1) / G;
    m->e0 = e0;
    m->e1 = e1;
    m->hdr = e0 == 0 ? (size_t)l->hdr : 0;
    m->tiles = (size_t)l->tbytes * compress_wire_tiles(l, e0, e1);
    m->head = m->hdr + m->tiles + (size_t)l->gbytes * (g1 - g0);
    m->bytes = m->head + (size_t)l->ebytes * (e1 - e0);
    m->slot = *cursor;
    m->off = m->slot + (16 - m->head % 16) % 16;
    *cursor = (m->off + m->bytes + 15) / 16 * 16;
}

static CompressWireOut wire_out_of(uint8_t* d, const Msg* m) {
    CompressWireOut w;
    w.scale = m->hdr ? d + m->off : (m->tiles ? d + m->off : NULL); /* the chunk scale, or the range's tiles' */
    w.exps = d + m->off + m->hdr + m->tiles;
    w.codes = d + m->off + m->head;
    return w;
}

/* m0: message 0 of the same chunk copy, which carries the chunk scale */
static CompressWireIn wire_in_of(const uint8_t* d, const Msg* m, const Msg* m0) {
    CompressWireIn w;
    w.scale = m0->hdr ? d + m0->off : (m->tiles ? d + m->off : NULL);
    w.exps = d + m->off + m->hdr + m->tiles;
    w.codes = d + m->off + m->head;
    return w;
}

/* ------------------------------------------------------------------------ */
/* one call                                                                  */

typedef enum { AG_FROM_MINE, AG_FUSED_ONE_PASS, AG_FUSED_TWO_PASS, AG_VIA_F32 } AgSource;

typedef struct {
    MPI_Comm comm;
    int P, r, K;
    int do_rs, do_ag;
    AgSource ag_src;
    const CompressParams* p_rs;
    const CompressParams* p_ag;
    size_t n;
    size_t unit;          /* the chunk cut's unit: coll_align of the method, or a caller's (the *_unit calls) */
    uint64_t stream;
    const uint16_t* x_rs; /* RS input (bf16) */
    void* rs_out;         /* RS only: my chunk's sum */
    int rs_out_bf16;
    const void* ag_in;    /* AG only: my chunk */
    int ag_in_bf16;
    uint16_t* ag_out;     /* AG output (bf16), all chunks */
    cudaStream_t cs;
    CollScratchDev* s;
    size_t* b;            /* chunk begins and counts */
    size_t* c;
    Msg* plan;
    CompressJobDev* jobs; /* P jobs */
    const float* damax_rs; /* device delayed amax of each phase (CollDevSite), or NULL */
    const float* damax_ag;
    int host_stats;       /* the caller wants CollStats: copy the statistics to the host */
    int one_shot;         /* the one-shot all-reduce over MPI (coll_one_shot_mpi_dev): the reduce-scatter
                             machinery with every "chunk" the whole tensor, my one message sent to every
                             peer, the P copies summed into x */
} Call;

static Msg* rs_send(const Call* C, int k, int q) { return &C->plan[(size_t)k * C->P + q]; }
static Msg* rs_recv(const Call* C, int k, int q) { return &C->plan[(size_t)(C->K + k) * C->P + q]; }
static Msg* ag_msg(const Call* C, int k, int q) { return &C->plan[(size_t)(2 * C->K + k) * C->P + q]; }
/* position q (0 .. P-2 the peers, P-1 myself) <-> rank / chunk index */
static int rank_at(const Call* C, int q) { return (C->r + 1 + q) % C->P; }
static int pos_of(const Call* C, int i) { return (i - C->r - 1 + 2 * C->P) % C->P; }

static MPI_Request* rs_rreq(const Call* C, int k) { return &C->s->req[(size_t)(0 * C->K + k) * (C->P - 1)]; }
static MPI_Request* rs_sreq(const Call* C, int k) { return &C->s->req[(size_t)(1 * C->K + k) * (C->P - 1)]; }
static MPI_Request* ag_rreq(const Call* C, int k) { return &C->s->req[(size_t)(2 * C->K + k) * (C->P - 1)]; }
static MPI_Request* ag_sreq(const Call* C, int k) { return &C->s->req[(size_t)(3 * C->K + k) * (C->P - 1)]; }

enum { EV_END = 0, EV_STATS = 1, EV_NET_END = 2, EV_FIXED = 3 };
static cudaEvent_t ev_rs(const Call* C, int k) { return C->s->ev[EV_FIXED + k]; }
static cudaEvent_t ev_rs_h2d(const Call* C, int k) { return C->s->ev[EV_FIXED + C->K + k]; }
static cudaEvent_t ev_ag(const Call* C, int k) { return C->s->ev[EV_FIXED + 2 * C->K + k]; }
static cudaEvent_t ev_ag_h2d(const Call* C, int k) { return C->s->ev[EV_FIXED + 3 * C->K + k]; }

/* EV_END: the end of a call's work on cs, which the next call waits for
 * before it reuses the buffers. In a step captured into a CUDA graph
 * (train.cuda_graph) the records and waits are the graph's edges; an event
 * recorded outside the capture cannot be waited for inside it, nor one
 * recorded inside it outside (cudaErrorStreamCaptureIsolation), and neither
 * need be: the trainer synchronises with the device before each step, and
 * after the step it captured, so a capture starts and ends with no call's
 * work in flight. (Two captures back to back, with no call between them,
 * would find the first one's record: the trainer makes one.) */
static void end_record(CollScratchDev* s, cudaStream_t cs) {
    CUDA_CHECK(cudaEventRecord(s->ev[EV_END], cs));
    s->end_captured = cuda_stream_capturing(cs);
}
static int end_waitable(const CollScratchDev* s, cudaStream_t cs) { return s->end_captured == cuda_stream_capturing(cs); }

static uint8_t* mpi_base(const Call* C) { return C->s->aware ? C->s->d_buf : C->s->h_buf; }

/* (the progress loop's waits for device work: the transport's, counted in
 * CollScratchDev.host_syncs by their callers) */
static int event_done(cudaEvent_t e) {
    cudaError_t err = cudaEventQuery(e);
    if (err == cudaSuccess) return 1;
    if (err == cudaErrorNotReady) return 0;
    CUDA_CHECK(err);
    return 0;
}

static int all_done(MPI_Request* r, int count) {
    if (count <= 0) return 1;
    int flag = 0;
    MPI_CHECK(MPI_Testall(count, r, &flag, MPI_STATUSES_IGNORE));
    return flag;
}

/* copy [first slot of the span, end of the last message) between device and host */
static void copy_span(const Call* C, const Msg* first, const Msg* last, enum cudaMemcpyKind kind, cudaStream_t st) {
    size_t a = first->slot, e = last->off + last->bytes;
    if (e <= a) return;
    if (kind == cudaMemcpyDeviceToHost)
        CUDA_CHECK(cudaMemcpyAsync(C->s->h_buf + a, C->s->d_buf + a, e - a, cudaMemcpyDeviceToHost, st));
    else
        CUDA_CHECK(cudaMemcpyAsync(C->s->d_buf + a, C->s->h_buf + a, e - a, cudaMemcpyHostToDevice, st));
}

static int msg_count(size_t bytes) {
    if (bytes > (size_t)INT32_MAX) FATAL("a compressed message of %zu bytes is too large for MPI int counts", bytes);
    return (int)bytes;
}

/* sub-chunk k of the reduce-scatter is compressed (and on the host): send it */
static void rs_send_k(Call* C, int k) {
    for (int q = 0; q < C->P - 1; q++) {
        const Msg* m = rs_send(C, k, C->one_shot ? C->P - 1 : q); /* one-shot: my one message to all */
        if (m->bytes)
            MPI_CHECK(MPI_Isend(mpi_base(C) + m->off, msg_count(m->bytes), MPI_BYTE, rank_at(C, q), TAG_RS + k, C->comm,
                                &rs_sreq(C, k)[q]));
    }
}

static void ag_send_k(Call* C, int k) {
    const Msg* m = ag_msg(C, k, C->P - 1);
    for (int q = 0; q < C->P - 1; q++)
        if (m->bytes)
            MPI_CHECK(MPI_Isend(mpi_base(C) + m->off, msg_count(m->bytes), MPI_BYTE, rank_at(C, q), TAG_AG + k, C->comm,
                                &ag_sreq(C, k)[q]));
}

/* my all-gather message k is being written on cs: once it is done (and
 * copied to the host), it can be sent */
static void ag_mark_ready(Call* C, int k) {
    CUDA_CHECK(cudaEventRecord(ev_ag(C, k), C->cs));
    if (!C->s->aware && C->P > 1) {
        CUDA_CHECK(cudaStreamWaitEvent(C->s->s_d2h, ev_ag(C, k), 0));
        const Msg* m = ag_msg(C, k, C->P - 1);
        copy_span(C, m, m, cudaMemcpyDeviceToHost, C->s->s_d2h);
        CUDA_CHECK(cudaEventRecord(ev_ag(C, k), C->s->s_d2h));
    }
}

/* a cleared job over message m's element range of a chunk of n elements */
static void job_init(CompressJobDev* j, size_t n, const Msg* m) {
    memset(j, 0, sizeof(*j));
    j->n = n;
    j->e0 = m->e0;
    j->e1 = m->e1;
}

/* the recompress job of sub-chunk k of my chunk (all-gather message k) */
static void ag_job_from_sum(Call* C, int k, CompressJobDev* j) {
    const Msg* m = ag_msg(C, k, C->P - 1);
    job_init(j, C->c[C->r], m);
    j->out = wire_out_of(C->s->d_buf, m);
    j->stream = coll_stream_of(C->stream, C->r, C->r, 1);
    j->st = &C->s->d_st[C->P];
    j->delayed_amax = C->damax_ag;
}

/* the statistics to the pinned host copy, when the caller asked for CollStats */
static void stats_copy(Call* C) {
    if (!C->host_stats) return;
    CUDA_CHECK(cudaMemcpyAsync(C->s->h_st, C->s->d_st, sizeof(CompressStatsDev) * (size_t)(C->P + 1),
                             cudaMemcpyDeviceToHost, C->cs));
    CUDA_CHECK(cudaEventRecord(C->s->ev[EV_STATS], C->cs));
}

/* the all-gather compression of my chunk when it could not run inside the
 * reduce pass: after the last reduce (fused two-pass, or via fp32) */
static void ag_encode_all(Call* C) {
    CompressJobDev* j = &C->jobs[0];
    for (int k = 0; k < C->K; k++) {
        ag_job_from_sum(C, k, j);
        if (C->ag_src == AG_FUSED_TWO_PASS) {
            /* the second pass: decode and sum the same inputs again (still in
             * d_buf), now encoding with the scale of the whole sum's amax */
            int P = C->P;
            j->nin = P;
            for (int i = 0; i < P; i++) {
                if (i == C->r) j->in[i] = wire_in_of(C->s->d_buf, rs_send(C, k, P - 1), rs_send(C, 0, P - 1));
                else j->in[i] = wire_in_of(C->s->d_buf, rs_recv(C, k, pos_of(C, i)), rs_recv(C, 0, pos_of(C, i)));
            }
            decompress_jobs_dev(C->p_rs, j, 1, CDEV_REDUCE_RECOMPRESS, C->p_ag, C->cs);
        } else { /* AG_VIA_F32 or AG_FROM_MINE */
            int bf16 = 0;
            CompressParams pe = *C->p_ag;
            if (C->ag_src == AG_VIA_F32) {
                j->x = C->s->d_acc;
                pe = compress_recompress_params(C->p_rs, C->p_ag); /* the fused step's bytes */
            } else {
                j->x = C->ag_in;
                bf16 = C->ag_in_bf16;
            }
            if (k == 0 && compress_dev_two_pass(&pe)) {
                CompressJobDev whole = *j;
                whole.e0 = 0;
                whole.e1 = whole.n;
                compress_jobs_amax_dev(&pe, bf16, &whole, 1, C->cs);
            }
            compress_jobs_encode_dev(&pe, bf16, j, 1, C->cs);
        }
        ag_mark_ready(C, k);
    }
}

/* sub-chunk k of my chunk has arrived from every peer: copy it up and reduce */
static void rs_reduce_k(Call* C, int k) {
    int P = C->P;
    if (!C->s->aware && P > 1) {
        copy_span(C, rs_recv(C, k, 0), rs_recv(C, k, P - 2), cudaMemcpyHostToDevice, C->s->s_h2d);
        CUDA_CHECK(cudaEventRecord(ev_rs_h2d(C, k), C->s->s_h2d));
        CUDA_CHECK(cudaStreamWaitEvent(C->cs, ev_rs_h2d(C, k), 0));
    }
    CompressJobDev* j = &C->jobs[0];
    const Msg* mine = rs_send(C, k, P - 1);
    job_init(j, C->c[C->r], mine);
    j->nin = P;
    for (int i = 0; i < P; i++) { /* rank order: the order of the host's sum */
        if (i == C->r) j->in[i] = wire_in_of(C->s->d_buf, mine, rs_send(C, 0, P - 1));
        else j->in[i] = wire_in_of(C->s->d_buf, rs_recv(C, k, pos_of(C, i)), rs_recv(C, 0, pos_of(C, i)));
    }
    if (!C->do_ag) {
        j->y = C->rs_out;
        decompress_jobs_dev(C->p_rs, j, 1, C->rs_out_bf16 ? CDEV_REDUCE_BF16 : CDEV_REDUCE_F32, NULL, C->cs);
        return;
    }
    switch (C->ag_src) {
    case AG_FUSED_ONE_PASS: {
        CompressJobDev tmp = *j;
        ag_job_from_sum(C, k, j);
        j->nin = tmp.nin;
        memcpy(j->in, tmp.in, sizeof(tmp.in));
        decompress_jobs_dev(C->p_rs, j, 1, CDEV_REDUCE_RECOMPRESS, C->p_ag, C->cs);
        ag_mark_ready(C, k);
        break;
    }
    case AG_FUSED_TWO_PASS:
        j->st = &C->s->d_st[P]; /* the all-gather chunk's scale slot */
        decompress_jobs_dev(C->p_rs, j, 1, CDEV_REDUCE_AMAX, C->p_ag, C->cs);
        break;
    case AG_VIA_F32: /* the sum the fused step would encode (taco: in the rotated domain) */
        j->y = C->s->d_acc;
        decompress_jobs_dev(C->p_rs, j, 1, CDEV_REDUCE_ROTATED_F32, C->p_ag, C->cs);
        break;
    default: FATAL("internal: unexpected all-gather source %d", (int)C->ag_src);
    }
}

/* all-gather message k of every chunk is here: copy up and decode into ag_out */
static void ag_decode_k(Call* C, int k) {
    int P = C->P;
    if (!C->s->aware && P > 1) {
        copy_span(C, ag_msg(C, k, 0), ag_msg(C, k, P - 2), cudaMemcpyHostToDevice, C->s->s_h2d);
        CUDA_CHECK(cudaEventRecord(ev_ag_h2d(C, k), C->s->s_h2d));
        CUDA_CHECK(cudaStreamWaitEvent(C->cs, ev_ag_h2d(C, k), 0));
    }
    for (int q = 0; q < P; q++) {
        int jc = rank_at(C, q); /* q = P - 1: my own chunk, from the bytes I sent */
        const Msg* m = ag_msg(C, k, q);
        CompressJobDev* j = &C->jobs[q];
        job_init(j, C->c[jc], m);
        j->y = C->ag_out + C->b[jc];
        j->nin = 1;
        j->in[0] = wire_in_of(C->s->d_buf, m, ag_msg(C, 0, q));
    }
    decompress_jobs_dev(C->p_ag, C->jobs, P, CDEV_DECODE_BF16, NULL, C->cs);
}

/* the scratch grown to this call's needs: P + 1 statistics slots, the events
 * and requests of K sub-chunks in both phases, nplan messages */
static void ensure_state(CollScratchDev* s, int P, int K, size_t bytes, size_t acc, int nplan) {
    coll_scratch_dev_ensure(s, P + 1, EV_FIXED + 4 * K, 4 * K * (P > 1 ? P - 1 : 1), bytes, acc,
                            (size_t)nplan * sizeof(Msg));
}

/* the first reduce-scatter message a rank encodes and copies down: all P, or
 * for the one-shot only its own tensor's (q = P - 1) */
static int rs_first(const Call* C) { return C->one_shot ? C->P - 1 : 0; }

/* sub-chunk k of every chunk: compress it for the reduce-scatter (on cs) */
static void rs_encode_k(Call* C, int k) {
    CollScratchDev* s = C->s;
    const int q0 = rs_first(C);
    for (int q = q0; q < C->P; q++) {
        int jc = rank_at(C, q);
        const Msg* m = rs_send(C, k, q);
        CompressJobDev* jb = &C->jobs[q];
        job_init(jb, C->c[jc], m);
        jb->x = C->x_rs + C->b[jc];
        jb->out = wire_out_of(s->d_buf, m);
        /* (the one-shot's stream: coll_allreduce_one_shot's) */
        jb->stream = C->one_shot ? coll_stream_of(C->stream, C->r, 0, 2) : coll_stream_of(C->stream, C->r, jc, 0);
        jb->st = &s->d_st[jc];
        jb->delayed_amax = C->damax_rs;
    }
    compress_jobs_encode_dev(C->p_rs, 1, C->jobs + q0, C->P - q0, C->cs);
    CUDA_CHECK(cudaEventRecord(ev_rs(C, k), C->cs));
}

/* current scaling: the amax of every chunk before any of it is encoded */
static void rs_amax_all(Call* C) {
    if (!compress_dev_two_pass(C->p_rs)) return;
    const int j0 = C->one_shot ? C->r : 0, j1 = C->one_shot ? C->r + 1 : C->P;
    for (int j = j0; j < j1; j++) {
        CompressJobDev* jb = &C->jobs[j];
        memset(jb, 0, sizeof(*jb));
        jb->n = C->c[j];
        jb->e0 = 0;
        jb->e1 = C->c[j];
        jb->x = C->x_rs + C->b[j];
        jb->st = &C->s->d_st[j];
    }
    compress_jobs_amax_dev(C->p_rs, 1, C->jobs + j0, j1 - j0, C->cs);
}

/* MPI transport: nonblocking point-to-point driven by a host progress loop
 * (header comment, point 3) */
static void run_mpi(Call* C) {
    CollScratchDev* s = C->s;
    int P = C->P, K = C->K;
    for (int i = 0; i < s->req_cap; i++) s->req[i] = MPI_REQUEST_NULL;

    /* every receive is posted before anything is sent */
    uint8_t* mb = mpi_base(C);
    for (int k = 0; k < K; k++) {
        for (int q = 0; q < P - 1; q++) {
            if (C->do_rs) {
                const Msg* m = rs_recv(C, k, q);
                if (m->bytes)
                    MPI_CHECK(MPI_Irecv(mb + m->off, msg_count(m->bytes), MPI_BYTE, rank_at(C, q), TAG_RS + k, C->comm,
                                        &rs_rreq(C, k)[q]));
            }
            if (C->do_ag) {
                const Msg* m = ag_msg(C, k, q);
                if (m->bytes)
                    MPI_CHECK(MPI_Irecv(mb + m->off, msg_count(m->bytes), MPI_BYTE, rank_at(C, q), TAG_AG + k, C->comm,
                                        &ag_rreq(C, k)[q]));
            }
        }
    }

    /* reduce-scatter: compress every sub-chunk of every chunk, in order of k */
    if (C->do_rs) {
        rs_amax_all(C);
        for (int k = 0; k < K; k++) {
            rs_encode_k(C, k);
            if (!s->aware && P > 1) {
                CUDA_CHECK(cudaStreamWaitEvent(s->s_d2h, ev_rs(C, k), 0));
                /* the messages to peers: q = 0 .. P - 2, or the one-shot's one (P - 1) */
                copy_span(C, rs_send(C, k, rs_first(C)), rs_send(C, k, C->one_shot ? P - 1 : P - 2),
                          cudaMemcpyDeviceToHost, s->s_d2h);
                CUDA_CHECK(cudaEventRecord(ev_rs(C, k), s->s_d2h));
            }
        }
        if (!C->do_ag) stats_copy(C);
    }
    int ag_ready = 0;
    if (C->do_ag && !C->do_rs) {
        ag_encode_all(C);
        stats_copy(C);
        ag_ready = K;
    }

    /* the progress loop */
    int rs_sent = C->do_rs ? 0 : K, rs_done = C->do_rs ? 0 : K;
    int ag_sent = C->do_ag ? 0 : K, ag_done = C->do_ag ? 0 : K;
    WdClock wd;   /* the loop polls its own requests: bound it by the watchdog's deadline */
    wd_clock_start(&wd);
    while (rs_sent < K || rs_done < K || ag_sent < K || ag_done < K) {
        int progress = 0;
        if (rs_sent < K && event_done(ev_rs(C, rs_sent))) {
            s->host_syncs++;
            rs_send_k(C, rs_sent++);
            progress = 1;
        }
        if (rs_done < K && all_done(rs_rreq(C, rs_done), P - 1)) {
            rs_reduce_k(C, rs_done++);
            if (C->do_ag && C->ag_src == AG_FUSED_ONE_PASS) ag_ready = rs_done;
            if (rs_done == K && C->do_ag) {
                if (C->ag_src != AG_FUSED_ONE_PASS) ag_encode_all(C);
                stats_copy(C);
                ag_ready = K;
            }
            progress = 1;
        }
        if (ag_sent < ag_ready && event_done(ev_ag(C, ag_sent))) {
            s->host_syncs++;
            ag_send_k(C, ag_sent++);
            progress = 1;
        }
        if (ag_done < ag_ready && all_done(ag_rreq(C, ag_done), P - 1)) {
            ag_decode_k(C, ag_done++);
            progress = 1;
        }
        if (!progress) {
            wd_poll(&wd, C->comm, "device exchange (pipelined MPI)");
            sched_yield();
        }
    }
    if (P > 1) wd_waitall(4 * K * (P - 1), s->req, C->comm, "device exchange (send completion)");

    /* the next call may reuse every buffer: host copies done now, device work
     * fenced by EV_END; with device pointers in MPI, the next call's receives
     * would write under this call's kernels, so wait for them */
    end_record(s, C->cs);
    if (!s->aware) CUDA_CHECK(cudaStreamSynchronize(s->s_h2d));
    else CUDA_CHECK(cudaStreamSynchronize(C->cs));
    s->host_syncs++;
}

/* NCCL transport: sub-chunk k of phase ph (0 reduce-scatter, 1 all-gather)
 * goes to every peer and comes from every peer in one group of
 * ncclSend/ncclRecv on the network stream, once its encode is done on cs;
 * the "arrived" event tells cs when it may decode */
static void nccl_exchange_k(Call* C, int ph, int k) {
    CollScratchDev* s = C->s;
    ncclComm_t nc = (ncclComm_t)s->nccl;
    CUDA_CHECK(cudaStreamWaitEvent(s->s_net, ph == 0 ? ev_rs(C, k) : ev_ag(C, k), 0));
    NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < C->P - 1; q++) {
        const Msg* out = ph == 0 ? rs_send(C, k, q) : ag_msg(C, k, C->P - 1);
        const Msg* in = ph == 0 ? rs_recv(C, k, q) : ag_msg(C, k, q);
        if (out->bytes) NCCL_CHECK(ncclSend(s->d_buf + out->off, out->bytes, ncclUint8, rank_at(C, q), nc, s->s_net));
        if (in->bytes) NCCL_CHECK(ncclRecv(s->d_buf + in->off, in->bytes, ncclUint8, rank_at(C, q), nc, s->s_net));
    }
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaEventRecord(ph == 0 ? ev_rs_h2d(C, k) : ev_ag_h2d(C, k), s->s_net));
}

/* With NCCL everything is stream-ordered, so the whole call is queued
 * without waiting: cs runs encode 0..K-1, then reduce k as soon as message
 * k has arrived (fused all-gather encode included), then decode k as soon as
 * all-gather message k has arrived; the network stream moves message k
 * while cs works on k+1. The host only waits at the end for the statistics. */
static void run_nccl(Call* C) {
    CollScratchDev* s = C->s;
    int K = C->K;
    if (C->do_rs) {
        rs_amax_all(C);
        for (int k = 0; k < K; k++) {
            rs_encode_k(C, k);
            nccl_exchange_k(C, 0, k);
        }
        if (!C->do_ag) stats_copy(C);
        for (int k = 0; k < K; k++) {
            CUDA_CHECK(cudaStreamWaitEvent(C->cs, ev_rs_h2d(C, k), 0));
            rs_reduce_k(C, k);
            if (C->do_ag && C->ag_src == AG_FUSED_ONE_PASS) nccl_exchange_k(C, 1, k);
        }
    }
    if (C->do_ag) {
        if (!C->do_rs || C->ag_src != AG_FUSED_ONE_PASS) {
            ag_encode_all(C);
            for (int k = 0; k < K; k++) nccl_exchange_k(C, 1, k);
        }
        stats_copy(C);
        for (int k = 0; k < K; k++) {
            CUDA_CHECK(cudaStreamWaitEvent(C->cs, ev_ag_h2d(C, k), 0));
            ag_decode_k(C, k);
        }
    }
    /* the sends read d_buf until they are done: the next call's kernels
     * (stream order after EV_END) must wait for them too */
    CUDA_CHECK(cudaEventRecord(s->ev[EV_NET_END], s->s_net));
    CUDA_CHECK(cudaStreamWaitEvent(C->cs, s->ev[EV_NET_END], 0));
    end_record(s, C->cs);
}

/* IPC transport: the peers read what this rank encodes where it lies
 * (comm/ipc_cuda.c); the same arithmetic, so the same bits */
static void run_ipc(Call* C) {
    CollIpcCall a = {C->do_rs, C->do_ag, C->p_rs, C->p_ag, C->n, C->unit, C->stream, C->x_rs, C->rs_out, C->rs_out_bf16,
                     C->ag_in, C->ag_in_bf16, C->ag_out, C->damax_rs, C->damax_ag};
    coll_ipc_two_shot(C->comm, &a, C->s, C->cs);
    stats_copy(C);
    end_record(C->s, C->cs);
}

/* Runs the call; returns the bytes this rank sent. The host waits for the
 * statistics only when st is given (the tests' and tools' CollStats). */
static uint64_t coll_run(Call* C, CollStats* st, const CollDevSite* site) {
    CollScratchDev* s = C->s;
    int P = C->P, r = C->r;
    const CompressParams* pl = C->do_rs ? C->p_rs : C->p_ag;
    size_t align = C->unit ? C->unit : coll_align(pl);
    if (C->do_rs && C->do_ag && coll_align(C->p_ag) != align)
        FATAL("all-reduce halves use different group sizes (%zu vs %zu)", align, coll_align(C->p_ag));
    if (P > COMPRESS_DEV_MAX_IN) FATAL("device collectives support up to %d ranks per group, not %d", COMPRESS_DEV_MAX_IN, P);
    CompressWireLayout l_rs = compress_wire_layout(C->do_rs ? C->p_rs : C->p_ag);
    CompressWireLayout l_ag = compress_wire_layout(C->do_ag ? C->p_ag : C->p_rs);
    /* both halves cut the sub-chunks alike (the fused all-gather step turns RS
     * sub-chunk k into AG message k): on the coarser granularity, which is a
     * multiple of the finer (all are powers of two) */
    if (l_rs.gran != l_ag.gran) l_rs.gran = l_ag.gran = l_rs.gran > l_ag.gran ? l_rs.gran : l_ag.gran;

    /* the cut: coll_chunk's, then K sub-chunks (the same K on every rank) */
    C->b = mallocCheck(2 * sizeof(size_t) * (size_t)P);
    C->c = C->b + P;
    size_t cmax = 0;
    for (int j = 0; j < P; j++) {
        if (C->one_shot) { /* every rank's tensor whole */
            C->b[j] = 0;
            C->c[j] = C->n;
        } else {
            coll_chunk(C->n, P, j, align, &C->b[j], &C->c[j]);
        }
        if (C->c[j] > cmax) cmax = C->c[j];
    }
    /* a zeroed CollScratchDev means the defaults (cuda_aware 0: staged) */
    int K = s->K < 1 ? COLL_DEV_DEFAULT_K : (s->K > COLL_DEV_MAX_K ? COLL_DEV_MAX_K : s->K);
    size_t min_sub = s->min_sub ? s->min_sub : 65536;
    size_t kmax = (cmax + min_sub - 1) / min_sub;
    if (kmax < 1) kmax = 1;
    if ((size_t)K > kmax) K = (int)kmax;
    C->K = K;

    if (C->do_ag && C->do_rs) {
        if (s->unfused || !compress_dev_can_fuse(C->p_rs, C->p_ag)) C->ag_src = AG_VIA_F32;
        else C->ag_src = compress_dev_two_pass(C->p_ag) ? AG_FUSED_TWO_PASS : AG_FUSED_ONE_PASS;
    } else {
        C->ag_src = AG_FROM_MINE;
    }

    /* lay out every message (the IPC transport has a layout of its own) */
    int nplan = s->ipc ? 0 : 3 * K * P;
    ensure_state(s, P, K, 0, 0, nplan);
    C->plan = s->plan;
    size_t cursor = 0;
    for (int k = 0; k < K && C->do_rs && !s->ipc; k++)
        for (int q = 0; q < P; q++) {
            if (C->one_shot && q < P - 1) memset(rs_send(C, k, q), 0, sizeof(Msg)); /* only mine is sent */
            else place(&cursor, rs_send(C, k, q), &l_rs, C->c[rank_at(C, q)], K, k);
        }
    for (int k = 0; k < K && C->do_rs && !s->ipc; k++)
        for (int q = 0; q < P - 1; q++) place(&cursor, rs_recv(C, k, q), &l_rs, C->c[r], K, k);
    for (int k = 0; k < K && C->do_ag && !s->ipc; k++)
        for (int q = 0; q < P; q++) place(&cursor, ag_msg(C, k, q), &l_ag, C->c[rank_at(C, q)], K, k);
    if (!s->ipc) ensure_state(s, P, K, cursor, C->ag_src == AG_VIA_F32 ? C->c[r] : 0, nplan);
    C->plan = s->plan;
    C->jobs = callocCheck((size_t)P + 1, sizeof(CompressJobDev));

    /* the previous call's kernels and copies are done with the buffers (only
     * the MPI transport copies up on s_h2d) */
    if (end_waitable(s, C->cs)) {
        CUDA_CHECK(cudaStreamWaitEvent(C->cs, s->ev[EV_END], 0));
        if (!s->ipc && !s->nccl) CUDA_CHECK(cudaStreamWaitEvent(s->s_h2d, s->ev[EV_END], 0));
    }
    compress_stats_dev_reset(s->d_st, P + 1, C->cs);

    C->host_stats = st != NULL;
    if (site && site->delayed_amax) {
        C->damax_rs = &site->delayed_amax[0];
        C->damax_ag = &site->delayed_amax[1];
    }
    if (s->ipc) run_ipc(C);
    else if (s->nccl) run_nccl(C);
    else run_mpi(C);
    if (site && site->stats) coll_stats_fold_dev(site->stats, s->d_st, P, C->do_rs, C->do_ag, C->cs);

    uint64_t bytes = 0;
    if (C->do_rs)
        for (int j = 0; j < P; j++)
            if (j != r) bytes += compress_bound(C->p_rs, C->c[j]);
    if (C->do_ag) bytes += (uint64_t)compress_bound(C->p_ag, C->c[r]) * (uint64_t)(P - 1);
    if (st) {
        wd_event_wait(s->ev[EV_STATS], C->comm, s->nccl ? "device exchange (NCCL)" : "device exchange");
        s->host_syncs++;
        for (int j = 0; j <= P; j++) {
            if (j == P && !C->do_ag) break;
            if (j < P && !C->do_rs) continue;
            const CompressStatsDev* h = &s->h_st[j];
            st->saturated += h->saturated;
            st->nonfinite += h->nonfinite;
            float a;
            memcpy(&a, &h->amax_bits, sizeof(a));
            float* dst = j < P ? &st->amax_rs : &st->amax_ag;
            if (a > *dst) *dst = a;
        }
        st->bytes_sent += bytes;
    }
    free(C->b);
    free(C->jobs);
    return bytes;
}

static void call_init(Call* C, MPI_Comm comm, CollScratchDev* s, size_t n, uint64_t stream, cudaStream_t cs) {
    memset(C, 0, sizeof(*C));
    C->comm = comm;
    MPI_CHECK(MPI_Comm_size(comm, &C->P));
    MPI_CHECK(MPI_Comm_rank(comm, &C->r));
    C->s = s;
    C->n = n;
    C->stream = stream;
    C->cs = cs;
}

void coll_allreduce_dev(MPI_Comm comm, const CompressParams* p_rs, const CompressParams* p_ag, uint16_t* x, size_t n,
                        uint64_t stream, CollScratchDev* s, CollStats* st, cudaStream_t cs) {
    coll_allreduce_site_dev(comm, p_rs, p_ag, x, n, stream, s, NULL, st, cs);
}

uint64_t coll_allreduce_site_dev(MPI_Comm comm, const CompressParams* p_rs, const CompressParams* p_ag, uint16_t* x,
                                 size_t n, uint64_t stream, CollScratchDev* s, const CollDevSite* site, CollStats* st,
                                 cudaStream_t cs) {
    Call C;
    call_init(&C, comm, s, n, stream, cs);
    if (C.P == 1) return 0; /* as coll_allreduce: nothing to exchange, nothing to compress */
    /* a device amax replaces the host one: the host plans as for "no prediction yet" */
    CompressParams prs = *p_rs, pag = *p_ag;
    if (site && site->delayed_amax) prs.delayed_amax = pag.delayed_amax = 0.0f;
    C.do_rs = C.do_ag = 1;
    C.p_rs = &prs;
    C.p_ag = &pag;
    C.x_rs = x;
    C.ag_out = x;
    return coll_run(&C, st, site);
}

void coll_reduce_scatter_dev(MPI_Comm comm, const CompressParams* p, const uint16_t* x, size_t n, void* out,
                             int out_is_bf16, uint64_t stream, CollScratchDev* s, CollStats* st, cudaStream_t cs) {
    coll_reduce_scatter_unit_dev(comm, p, x, n, 0, out, out_is_bf16, stream, s, NULL, st, cs);
}

uint64_t coll_reduce_scatter_unit_dev(MPI_Comm comm, const CompressParams* p, const uint16_t* x, size_t n, size_t unit,
                                      void* out, int out_is_bf16, uint64_t stream, CollScratchDev* s,
                                      const CollDevSite* site, CollStats* st, cudaStream_t cs) {
    Call C;
    call_init(&C, comm, s, n, stream, cs);
    CompressParams pd = *p; /* a device amax replaces the host one (coll_allreduce_site_dev) */
    if (site && site->delayed_amax) pd.delayed_amax = 0.0f;
    C.unit = unit;
    C.do_rs = 1;
    C.p_rs = &pd;
    C.x_rs = x;
    C.rs_out = out;
    C.rs_out_bf16 = out_is_bf16;
    return coll_run(&C, st, site);
}

void coll_all_gather_dev(MPI_Comm comm, const CompressParams* p, const void* mine, int mine_is_bf16, size_t n,
                         uint16_t* out, uint64_t stream, CollScratchDev* s, CollStats* st, cudaStream_t cs) {
    coll_all_gather_unit_dev(comm, p, mine, mine_is_bf16, n, 0, out, stream, s, NULL, st, cs);
}

uint64_t coll_all_gather_unit_dev(MPI_Comm comm, const CompressParams* p, const void* mine, int mine_is_bf16, size_t n,
                                  size_t unit, uint16_t* out, uint64_t stream, CollScratchDev* s,
                                  const CollDevSite* site, CollStats* st, cudaStream_t cs) {
    Call C;
    call_init(&C, comm, s, n, stream, cs);
    CompressParams pd = *p;
    if (site && site->delayed_amax) pd.delayed_amax = 0.0f;
    C.unit = unit;
    C.do_ag = 1;
    C.p_ag = &pd;
    C.ag_in = mine;
    C.ag_in_bf16 = mine_is_bf16;
    C.ag_out = out;
    return coll_run(&C, st, site);
}

uint64_t coll_one_shot_mpi_dev(MPI_Comm comm, const CompressParams* p, uint16_t* x, size_t n, uint64_t stream,
                               CollScratchDev* s, const CollDevSite* site, CollStats* st, cudaStream_t cs) {
    Call C;
    call_init(&C, comm, s, n, stream, cs);
    if (s->ipc || s->nccl) FATAL("internal: coll_one_shot_mpi_dev is the MPI transport's one-shot");
    C.one_shot = 1;
    C.do_rs = 1;
    C.p_rs = p; /* the caller's copy, its delayed_amax already cleared for a device amax */
    C.x_rs = x;
    C.rs_out = x; /* sub-chunk k is summed into x after every encode is queued: in place is safe */
    C.rs_out_bf16 = 1;
    return coll_run(&C, st, site);
}
