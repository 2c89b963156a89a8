/*
 * comm/ipc_cuda.c - the CUDA IPC transport of the device collectives; the
 * design is in comm/ipc_cuda.h.
 *
 * Per call e (parity p = e & 1), rank r, a two-shot all-reduce:
 *   1. encode the P chunks of x into region p of my buffer (RS slots);
 *      record my RS event of parity p; post "RS recorded for e";
 *   2. wait (host) for every peer's RS token >= e; queue waits for their RS
 *      events; sum chunk r from the P ranks' RS slots, read in place, in rank
 *      order, re-encoding the sum into my AG slot (fused, or two passes, or
 *      through fp32: the staged transport's rules); record my AG event;
 *      post "AG recorded for e";
 *   3. wait for every peer's AG token; queue waits for their AG events;
 *      decode every chunk from its owner's AG slot into x.
 * The layout of a region depends only on (n, P, methods), so every rank
 * knows where a peer keeps chunk j, and every rank grows its buffer at the
 * same call (a collective: handles are exchanged then).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "comm/ipc_cuda.h"
#include "comm/watchdog.h"
#include "common/check.h"
#include "common/cuda_check.h"

enum { TOK_RS = 0, TOK_AG = 1, TOKEN_BYTES = 64 }; /* a rank's two counters on a cache line of their own */

typedef struct CollIpc {
    MPI_Comm comm;          /* a duplicate of the group's: the handle exchanges */
    int P, r;
    MPI_Comm shm;           /* the node's ranks (= the group) */
    MPI_Win win;            /* the tokens: P cache lines of shared host memory */
    volatile uint64_t** tok; /* [P]: rank q's counters */
    uint64_t epoch;
    cudaEvent_t ev[2][2];   /* mine, [parity][phase], interprocess */
    cudaEvent_t* pev;       /* [P][2][2]: the peers' (mine unused) */
    uint8_t* buf;           /* mine: two regions of `region` bytes */
    uint8_t** peer;         /* [P]: every rank's buffer mapped here (mine: buf) */
    size_t region;
    float* acc;             /* fp32 sum of my chunk when the all-gather is not fused */
    size_t acc_cap;
} CollIpc;

static size_t up16(size_t v) { return (v + 15) & ~(size_t)15; }

#define BUS_ID_BYTES 32

/* Collective over comm: every rank's GPU as a PCI bus id, BUS_ID_BYTES each
 * in rank order (the caller frees); mine also in bus. */
static char* gather_bus_ids(MPI_Comm comm, int P, char* bus) {
    int dev;
    memset(bus, 0, BUS_ID_BYTES);
    char* all = mallocCheck((size_t)P * BUS_ID_BYTES);
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, BUS_ID_BYTES, dev));
    MPI_CHECK(MPI_Allgather(bus, BUS_ID_BYTES, MPI_CHAR, all, BUS_ID_BYTES, MPI_CHAR, comm));
    return all;
}

int coll_ipc_usable(MPI_Comm comm) {
    int P, r, dev;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    MPI_CHECK(MPI_Comm_rank(comm, &r));
    MPI_Comm shm;
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &shm));
    int local = 0;
    MPI_CHECK(MPI_Comm_size(shm, &local));
    MPI_CHECK(MPI_Comm_free(&shm));
    int ok = local == P;
    char bus[BUS_ID_BYTES], *all = gather_bus_ids(comm, P, bus);
    CUDA_CHECK(cudaGetDevice(&dev));
    for (int q = 0; q < P && ok; q++) {
        const char* b = all + (size_t)q * sizeof(bus);
        if (q == r || !strcmp(b, bus)) continue; /* one GPU: IPC needs nothing more */
        int pd = -1, can = 0;
        if (cudaDeviceGetByPCIBusId(&pd, b) != cudaSuccess) { /* that GPU is not visible to this process */
            (void)cudaGetLastError();
            ok = 0;
            break;
        }
        CUDA_CHECK(cudaDeviceCanAccessPeer(&can, dev, pd));
        ok = can;
    }
    free(all);
    int all_ok = 0;
    MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
    return all_ok;
}

int coll_ranks_share_gpu(MPI_Comm comm) {
    int P;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    char bus[BUS_ID_BYTES], *all = gather_bus_ids(comm, P, bus);
    int shared = 0; /* the same answer on every rank: all hold the same list */
    for (int q = 0; q < P && !shared; q++)
        for (int u = q + 1; u < P && !shared; u++)
            shared = !strcmp(all + (size_t)q * BUS_ID_BYTES, all + (size_t)u * BUS_ID_BYTES);
    free(all);
    return shared;
}

/* ---- setup: tokens and events once, buffers when they grow ------------------------- */

static CollIpc* ipc_setup(MPI_Comm comm, CollScratchDev* s) {
    if (s->ipc_state) return s->ipc_state;
    CollIpc* g = callocCheck(1, sizeof(CollIpc));
    MPI_CHECK(MPI_Comm_dup(comm, &g->comm));
    MPI_CHECK(MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_size(comm, &g->P));
    MPI_CHECK(MPI_Comm_rank(comm, &g->r));
    const int P = g->P;
    MPI_CHECK(MPI_Comm_split_type(g->comm, MPI_COMM_TYPE_SHARED, g->r, MPI_INFO_NULL, &g->shm));
    int local = 0;
    MPI_CHECK(MPI_Comm_size(g->shm, &local));
    if (local != P)
        FATAL("comm.transport \"ipc\": only %d of the %d ranks of a tensor-parallel group share this node; IPC needs the "
              "whole group on one node. Pack each group on a node, or use comm.transport \"staged\" or \"nccl\"", local, P);
    void* mine = NULL;
    MPI_CHECK(MPI_Win_allocate_shared(TOKEN_BYTES, 1, MPI_INFO_NULL, g->shm, &mine, &g->win));
    MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, g->win)); /* one passive epoch: plain loads and stores from now on */
    memset(mine, 0, TOKEN_BYTES);
    g->tok = mallocCheck(sizeof(*g->tok) * (size_t)P);
    for (int q = 0; q < P; q++) {
        MPI_Aint size = 0;
        int disp = 0;
        void* base = NULL;
        MPI_CHECK(MPI_Win_shared_query(g->win, q, &size, &disp, &base));
        g->tok[q] = (volatile uint64_t*)base;
    }
    cudaIpcEventHandle_t h[2][2];
    for (int p = 0; p < 2; p++)
        for (int ph = 0; ph < 2; ph++) {
            CUDA_CHECK(cudaEventCreateWithFlags(&g->ev[p][ph], cudaEventDisableTiming | cudaEventInterprocess));
            CUDA_CHECK(cudaIpcGetEventHandle(&h[p][ph], g->ev[p][ph]));
        }
    cudaIpcEventHandle_t* all = mallocCheck(sizeof(h) * (size_t)P);
    /* the zeroed counters are in place on every rank before anyone posts */
    MPI_CHECK(MPI_Allgather(h, (int)sizeof(h), MPI_BYTE, all, (int)sizeof(h), MPI_BYTE, g->comm));
    g->pev = callocCheck((size_t)P * 4, sizeof(cudaEvent_t));
    for (int q = 0; q < P; q++)
        if (q != g->r)
            for (int i = 0; i < 4; i++) CUDA_CHECK(cudaIpcOpenEventHandle(&g->pev[q * 4 + i], all[q * 4 + i]));
    free(all);
    g->peer = callocCheck((size_t)P, sizeof(uint8_t*));
    s->ipc_state = g;
    return g;
}

static void unmap_buffers(CollIpc* g) {
    for (int q = 0; q < g->P; q++)
        if (q != g->r && g->peer[q]) CUDA_CHECK(cudaIpcCloseMemHandle(g->peer[q]));
    if (g->buf) CUDA_CHECK(cudaFree(g->buf));
    memset(g->peer, 0, sizeof(uint8_t*) * (size_t)g->P);
    g->buf = NULL;
    g->region = 0;
}

/* Every rank asks for the same `region` at the same call (the layout is
 * rank-independent), so growing is collective: all device work done on every
 * rank (no peer still reads the old buffer), then new handles all round. */
static void ipc_buffers(CollIpc* g, CollScratchDev* s, size_t region) {
    if (region <= g->region) return;
    CUDA_CHECK(cudaDeviceSynchronize());
    s->host_syncs++;
    wd_barrier(g->comm, "IPC transport (buffer growth)");
    unmap_buffers(g);
    g->region = up16(region + region / 4 + 4096);
    CUDA_CHECK(cudaMalloc((void**)&g->buf, 2 * g->region));
    cudaIpcMemHandle_t h, *all = mallocCheck(sizeof(h) * (size_t)g->P);
    CUDA_CHECK(cudaIpcGetMemHandle(&h, g->buf));
    MPI_CHECK(MPI_Allgather(&h, (int)sizeof(h), MPI_BYTE, all, (int)sizeof(h), MPI_BYTE, g->comm));
    for (int q = 0; q < g->P; q++) {
        if (q == g->r) g->peer[q] = g->buf;
        else CUDA_CHECK(cudaIpcOpenMemHandle((void**)&g->peer[q], all[q], cudaIpcMemLazyEnablePeerAccess));
    }
    free(all);
}

void coll_ipc_free(CollScratchDev* s) {
    CollIpc* g = s->ipc_state;
    if (!g) return;
    CUDA_CHECK(cudaDeviceSynchronize());
    wd_barrier(g->comm, "IPC transport (teardown)"); /* no peer reads my buffer any more */
    unmap_buffers(g);
    wd_barrier(g->comm, "IPC transport (teardown, unmapped)");
    for (int q = 0; q < g->P * 4; q++)
        if (g->pev[q]) CUDA_CHECK(cudaEventDestroy(g->pev[q]));
    for (int p = 0; p < 2; p++)
        for (int ph = 0; ph < 2; ph++) CUDA_CHECK(cudaEventDestroy(g->ev[p][ph]));
    if (g->acc) CUDA_CHECK(cudaFree(g->acc));
    MPI_CHECK(MPI_Win_unlock_all(g->win));
    MPI_CHECK(MPI_Win_free(&g->win));
    MPI_CHECK(MPI_Comm_free(&g->shm));
    MPI_CHECK(MPI_Comm_free(&g->comm));
    free(g->tok);
    free(g->pev);
    free(g->peer);
    free(g);
    s->ipc_state = NULL;
}

/* ---- tokens --------------------------------------------------------------------------- */

/* my events of phase ph are recorded for call e: say so */
static void token_post(CollIpc* g, int ph, uint64_t e) { __atomic_store_n(&g->tok[g->r][ph], e, __ATOMIC_RELEASE); }

/* wait until every peer has recorded its phase-ph event for call e, then
 * make cs wait for those records (the device-side order) */
static void token_wait(CollIpc* g, int ph, uint64_t e, cudaStream_t cs, const char* op) {
    WdClock k;
    wd_clock_start(&k);
    for (int q = 0; q < g->P; q++) {
        if (q == g->r) continue;
        while (__atomic_load_n(&g->tok[q][ph], __ATOMIC_ACQUIRE) < e) {
            wd_poll(&k, g->comm, op);
            sched_yield();
        }
        CUDA_CHECK(cudaStreamWaitEvent(cs, g->pev[q * 4 + (int)(e & 1) * 2 + ph], 0));
    }
}

static void mark(CollIpc* g, int ph, uint64_t e, cudaStream_t cs) {
    CUDA_CHECK(cudaEventRecord(g->ev[e & 1][ph], cs));
    token_post(g, ph, e);
}

/* ---- the layout: a whole-chunk wire per slot, element bytes 16-byte aligned ----------- */

typedef struct {
    size_t b[COMPRESS_DEV_MAX_IN], c[COMPRESS_DEV_MAX_IN];
    size_t rs[COMPRESS_DEV_MAX_IN], ag[COMPRESS_DEV_MAX_IN]; /* slot offsets in a region */
    size_t bytes;
} Layout;

static size_t slot(size_t* cursor, const CompressParams* p, size_t n) {
    const CompressWireLayout l = compress_wire_layout(p);
    const size_t off = *cursor + (16 - compress_wire_codes_offset(&l, n) % 16) % 16;
    *cursor = up16(off + compress_bound(p, n));
    return off;
}

static CompressWireOut wire_out_at(uint8_t* w, const CompressParams* p, size_t n) {
    const CompressWireLayout l = compress_wire_layout(p);
    CompressWireOut o;
    o.scale = (l.hdr || l.tbytes) ? w : NULL;
    o.exps = l.gbytes ? w + compress_wire_groups_offset(&l, n) : NULL;
    o.codes = w + compress_wire_codes_offset(&l, n);
    return o;
}

static CompressWireIn wire_in_at(const uint8_t* w, const CompressParams* p, size_t n) {
    const CompressWireOut o = wire_out_at((uint8_t*)w, p, n);
    CompressWireIn i = {o.scale, o.exps, o.codes};
    return i;
}

/* a whole-chunk job: [0, n) of a chunk of n elements */
static void job_whole(CompressJobDev* j, size_t n) {
    memset(j, 0, sizeof(*j));
    j->n = n;
    j->e1 = n;
}

/* ---- the two-shot shapes -------------------------------------------------------------- */

void coll_ipc_two_shot(MPI_Comm comm, const CollIpcCall* a, CollScratchDev* s, cudaStream_t cs) {
    CollIpc* g = ipc_setup(comm, s);
    const int P = g->P, r = g->r;
    if (P > COMPRESS_DEV_MAX_IN) FATAL("the IPC transport supports up to %d ranks per group, not %d", COMPRESS_DEV_MAX_IN, P);
    const CompressParams* pl = a->do_rs ? a->p_rs : a->p_ag;
    const size_t align = a->unit ? a->unit : coll_align(pl); /* sequence parallelism's row cut, or coll_chunk's */
    Layout L;
    size_t cursor = 0;
    for (int j = 0; j < P; j++) coll_chunk(a->n, P, j, align, &L.b[j], &L.c[j]);
    for (int j = 0; j < P && a->do_rs; j++) L.rs[j] = slot(&cursor, a->p_rs, L.c[j]);
    for (int j = 0; j < P && a->do_ag; j++) L.ag[j] = slot(&cursor, a->p_ag, L.c[j]);
    L.bytes = cursor;
    ipc_buffers(g, s, L.bytes);
    const uint64_t e = ++g->epoch;
    const size_t base = (size_t)(e & 1) * g->region;
    uint8_t* my = g->buf + base;
    CompressJobDev jobs[COMPRESS_DEV_MAX_IN];
    const int fused = a->do_rs && a->do_ag && !s->unfused && compress_dev_can_fuse(a->p_rs, a->p_ag);
    CompressJobDev* j = &jobs[0];

    if (a->do_rs) {
        for (int q = 0; q < P; q++) { /* 1. my copy of every chunk */
            job_whole(&jobs[q], L.c[q]);
            jobs[q].x = a->x_rs + L.b[q];
            jobs[q].out = wire_out_at(my + L.rs[q], a->p_rs, L.c[q]);
            jobs[q].stream = coll_stream_of(a->stream, r, q, 0);
            jobs[q].st = &s->d_st[q];
            jobs[q].delayed_amax = a->damax_rs;
        }
        compress_jobs_amax_dev(a->p_rs, 1, jobs, P, cs);
        compress_jobs_encode_dev(a->p_rs, 1, jobs, P, cs);
        mark(g, TOK_RS, e, cs);
        token_wait(g, TOK_RS, e, cs, "device exchange (IPC, reduce-scatter)");
        job_whole(j, L.c[r]); /* 2. the P copies of my chunk, where they lie */
        j->nin = P;
        for (int i = 0; i < P; i++) j->in[i] = wire_in_at(g->peer[i] + base + L.rs[r], a->p_rs, L.c[r]);
        if (!a->do_ag) {
            j->y = a->rs_out;
            decompress_jobs_dev(a->p_rs, j, 1, a->rs_out_bf16 ? CDEV_REDUCE_BF16 : CDEV_REDUCE_F32, NULL, cs);
            return;
        }
        j->out = wire_out_at(my + L.ag[r], a->p_ag, L.c[r]);
        j->stream = coll_stream_of(a->stream, r, r, 1);
        j->st = &s->d_st[P];
        j->delayed_amax = a->damax_ag;
        if (fused) {
            if (compress_dev_two_pass(a->p_ag)) decompress_jobs_dev(a->p_rs, j, 1, CDEV_REDUCE_AMAX, a->p_ag, cs);
            decompress_jobs_dev(a->p_rs, j, 1, CDEV_REDUCE_RECOMPRESS, a->p_ag, cs);
        } else { /* through an fp32 sum, as the staged transport's AG_VIA_F32 */
            if (L.c[r] > g->acc_cap) { /* (first calls only) the old sum's readers must be done */
                CUDA_CHECK(cudaStreamSynchronize(cs));
                s->host_syncs++;
                if (g->acc) CUDA_CHECK(cudaFree(g->acc));
                g->acc_cap = L.c[r] + L.c[r] / 4 + 1024;
                CUDA_CHECK(cudaMalloc((void**)&g->acc, g->acc_cap * sizeof(float)));
            }
            j->y = g->acc; /* the sum the fused step encodes, and its parameters: the same bytes */
            decompress_jobs_dev(a->p_rs, j, 1, CDEV_REDUCE_ROTATED_F32, a->p_ag, cs);
            CompressJobDev k = *j;
            k.nin = 0;
            k.x = g->acc;
            const CompressParams pe = compress_recompress_params(a->p_rs, a->p_ag);
            compress_jobs_amax_dev(&pe, 0, &k, 1, cs);
            compress_jobs_encode_dev(&pe, 0, &k, 1, cs);
        }
    } else { /* all-gather only: my chunk as given */
        job_whole(j, L.c[r]);
        j->x = a->ag_in;
        j->out = wire_out_at(my + L.ag[r], a->p_ag, L.c[r]);
        j->stream = coll_stream_of(a->stream, r, r, 1);
        j->st = &s->d_st[P];
        j->delayed_amax = a->damax_ag;
        compress_jobs_amax_dev(a->p_ag, a->ag_in_bf16, j, 1, cs);
        compress_jobs_encode_dev(a->p_ag, a->ag_in_bf16, j, 1, cs);
    }
    mark(g, TOK_AG, e, cs);
    token_wait(g, TOK_AG, e, cs, "device exchange (IPC, all-gather)");
    for (int q = 0; q < P; q++) { /* 3. every chunk from its owner's bytes, mine included */
        job_whole(&jobs[q], L.c[q]);
        jobs[q].y = a->ag_out + L.b[q];
        jobs[q].nin = 1;
        jobs[q].in[0] = wire_in_at(g->peer[q] + base + L.ag[q], a->p_ag, L.c[q]);
    }
    decompress_jobs_dev(a->p_ag, jobs, P, CDEV_DECODE_BF16, NULL, cs);
}

/* ---- the one-shot shape: every rank's whole wire in its slot, summed in rank order ---- */

void coll_ipc_one_shot(MPI_Comm comm, const CompressParams* p, uint16_t* x, size_t n, uint64_t stream,
                       const float* damax, CompressStatsDev* st, CollScratchDev* s, cudaStream_t cs) {
    CollIpc* g = ipc_setup(comm, s);
    const int P = g->P, r = g->r;
    size_t cursor = 0;
    const size_t off = slot(&cursor, p, n);
    ipc_buffers(g, s, cursor);
    const uint64_t e = ++g->epoch;
    const size_t base = (size_t)(e & 1) * g->region;
    compress_dev_scaled(p, x, 1, n, coll_stream_of(stream, r, 0, 2), g->buf + base + off, st, damax, cs);
    mark(g, TOK_RS, e, cs);
    token_wait(g, TOK_RS, e, cs, "one-shot all-reduce (IPC)");
    const uint8_t* copies[COMPRESS_DEV_MAX_IN];
    for (int i = 0; i < P; i++) copies[i] = g->peer[i] + base + off;
    decompress_reduce_dev(p, copies, P, n, x, CDEV_SUM_BF16, cs);
}
