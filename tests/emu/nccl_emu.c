/*
 * tests/emu/nccl_emu.c - the part of NCCL the trainer uses, over MPI, for
 * the CPU emulator's builds (tests/emu/emu_cuda.h; no GPU, no NCCL transport
 * here).
 *
 * It implements the real <nccl.h> declarations (linked in place of
 * libnccl), so comm/collectives_cuda.c is compiled unchanged and its NCCL
 * path - the message plan, the group structure, the event ordering - runs
 * in CI under `make test` (test_coll_gpu_emulated_nccl_np3). Under the
 * emulator every stream runs synchronously, so a group's transfers happen at
 * ncclGroupEnd: every receive and send of the group is posted (MPI_Irecv /
 * MPI_Isend), then all are waited for; since every rank issues the same
 * groups in the same order, that cannot deadlock. A communicator is an MPI
 * communicator split from MPI_COMM_WORLD by the colour the unique id carries
 * (so ncclCommInitRank must be called by every world rank at the same time,
 * as the trainer and the tests do). On a stream being captured into a CUDA
 * graph the group (or all-gather) is recorded instead, as NCCL's kernels
 * would be, and runs at every launch of the graph (emu_enqueue_host): every
 * rank replays the same operations in the same order. What it cannot show:
 * NCCL's own behaviour and speed.
 */
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/cuda_check.h"

struct ncclComm {
    MPI_Comm mpi;
    int rank, size;
};

typedef struct {
    int send; /* 1 send, 0 receive */
    void* buf;
    size_t bytes;
    int peer;
    ncclComm_t comm;
} PendingOp;

static PendingOp g_ops[4096];
static int g_nops = 0, g_depth = 0;
static cudaStream_t g_stream; /* the stream of the group's operations */

/* tests/emu/emu_runtime.cpp: fn(arg) queued on stream (run now, or recorded by a capture) */
cudaError_t emu_enqueue_host(cudaStream_t stream, const char* what, void (*fn)(void*), void* arg);

static size_t type_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: FATAL("nccl_emu: data type %d is not emulated", (int)t);
    }
    return 0;
}

/* a group's operations, as queued on its stream (a graph node keeps its own copy) */
typedef struct {
    int n;
    PendingOp op[];
} Group;

static void group_run(void* arg) {
    const Group* g = arg;
    MPI_Request* req = mallocCheck(sizeof(MPI_Request) * (size_t)g->n);
    for (int pass = 0; pass < 2; pass++) { /* receives first, then sends */
        for (int i = 0; i < g->n; i++) {
            const PendingOp* o = &g->op[i];
            if (o->send != pass) continue;
            if (o->bytes > (size_t)INT32_MAX) FATAL("nccl_emu: message of %zu bytes", o->bytes);
            if (o->send) MPI_CHECK(MPI_Isend(o->buf, (int)o->bytes, MPI_BYTE, o->peer, 77, o->comm->mpi, &req[i]));
            else MPI_CHECK(MPI_Irecv(o->buf, (int)o->bytes, MPI_BYTE, o->peer, 77, o->comm->mpi, &req[i]));
        }
    }
    MPI_CHECK(MPI_Waitall(g->n, req, MPI_STATUSES_IGNORE));
    free(req);
}

/* the group's operations onto its stream: run now, or kept by a capture for
 * its graph (that copy lives as long as the process: graphs are few) */
static void run_pending(void) {
    if (g_nops == 0) return;
    Group* g = mallocCheck(sizeof(Group) + sizeof(PendingOp) * (size_t)g_nops);
    g->n = g_nops;
    memcpy(g->op, g_ops, sizeof(PendingOp) * (size_t)g_nops);
    g_nops = 0;
    const int captured = cuda_stream_capturing(g_stream);
    CUDA_CHECK(emu_enqueue_host(g_stream, "an NCCL group", group_run, g));
    if (!captured) free(g);
}

static void push(int send, const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                 cudaStream_t s) {
    if (g_nops == (int)(sizeof(g_ops) / sizeof(g_ops[0]))) FATAL("nccl_emu: too many operations in one group");
    if (peer < 0 || peer >= comm->size) FATAL("nccl_emu: peer %d outside a communicator of %d", peer, comm->size);
    if (g_nops > 0 && s != g_stream) FATAL("nccl_emu: one group's operations on two streams (not emulated)");
    g_stream = s;
    g_ops[g_nops++] = (PendingOp){send, (void*)buf, count * type_bytes(t), peer, comm};
    if (g_depth == 0) run_pending();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    static int counter = 0;
    int wr;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &wr));
    memset(id, 0, sizeof(*id));
    int colour = wr * 1024 + (counter++ % 1024);
    memcpy(id->internal, &colour, sizeof(colour));
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    int colour;
    memcpy(&colour, id.internal, sizeof(colour));
    struct ncclComm* c = mallocCheck(sizeof(*c));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, colour, rank, &c->mpi));
    MPI_CHECK(MPI_Comm_rank(c->mpi, &c->rank));
    MPI_CHECK(MPI_Comm_size(c->mpi, &c->size));
    if (c->size != nranks || c->rank != rank) FATAL("nccl_emu: init of rank %d of %d gave %d of %d", rank, nranks, c->rank, c->size);
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    MPI_CHECK(MPI_Comm_free(&comm->mpi));
    free(comm);
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }
const char* ncclGetLastError(ncclComm_t comm) { (void)comm; return ""; }

ncclResult_t ncclGroupStart(void) {
    g_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (g_depth <= 0) return ncclInvalidUsage;
    if (--g_depth == 0) run_pending();
    return ncclSuccess;
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
    push(1, buf, count, t, peer, comm, s);
    return ncclSuccess;
}

ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
    push(0, buf, count, t, peer, comm, s);
    return ncclSuccess;
}

typedef struct {
    const void* sendbuf;
    void* recvbuf;
    size_t bytes;
    ncclComm_t comm;
} AllGather;

static void allgather_run(void* arg) {
    const AllGather* a = arg;
    const int b = (int)a->bytes;
    /* in place (sendbuf == recvbuf + rank * b) is allowed, as in NCCL */
    if ((const char*)a->sendbuf == (char*)a->recvbuf + (size_t)a->comm->rank * a->bytes)
        MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, a->recvbuf, b, MPI_BYTE, a->comm->mpi));
    else
        MPI_CHECK(MPI_Allgather(a->sendbuf, b, MPI_BYTE, a->recvbuf, b, MPI_BYTE, a->comm->mpi));
}

ncclResult_t ncclAllGather(const void* sendbuf, void* recvbuf, size_t count, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t s) {
    size_t b = count * type_bytes(t);
    if (b > (size_t)INT32_MAX) FATAL("nccl_emu: all-gather of %zu bytes", b);
    if (g_depth > 0) FATAL("nccl_emu: an all-gather inside a group (not emulated)");
    AllGather* a = mallocCheck(sizeof(AllGather));
    *a = (AllGather){sendbuf, recvbuf, b, comm};
    const int captured = cuda_stream_capturing(s);
    CUDA_CHECK(emu_enqueue_host(s, "ncclAllGather", allgather_run, a));
    if (!captured) free(a);
    return ncclSuccess;
}
