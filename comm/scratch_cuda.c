/*
 * comm/scratch_cuda.c - the life of a CollScratchDev (comm/collectives_cuda.h):
 * its default settings, what it holds for the transports (streams, events,
 * device and pinned buffers, the IPC transport's mappings) and how it is
 * grown as calls need it and given back, and whether MPI takes device
 * pointers.
 */
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support */
#endif
#endif

#include "comm/collectives_cuda.h"
#include "comm/ipc_cuda.h"
#include "common/check.h"

int coll_mpi_cuda_aware(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() == 1;
#else
    return 0;
#endif
}

void coll_scratch_dev_init(CollScratchDev* s) {
    memset(s, 0, sizeof(*s));
    s->K = COLL_DEV_DEFAULT_K;
    s->min_sub = 65536;
    s->cuda_aware = -1;
}

void coll_scratch_dev_free(CollScratchDev* s) {
    coll_ipc_free(s);
    if (s->d_buf) CUDA_CHECK(cudaFree(s->d_buf));
    if (s->h_buf) CUDA_CHECK(cudaFreeHost(s->h_buf));
    if (s->d_acc) CUDA_CHECK(cudaFree(s->d_acc));
    if (s->d_st) compress_stats_dev_free(s->d_st);
    if (s->h_st) CUDA_CHECK(cudaFreeHost(s->h_st));
    if (s->s_d2h) CUDA_CHECK(cudaStreamDestroy(s->s_d2h));
    if (s->s_h2d) CUDA_CHECK(cudaStreamDestroy(s->s_h2d));
    if (s->s_net) CUDA_CHECK(cudaStreamDestroy(s->s_net));
    for (int i = 0; i < s->ev_cap; i++) CUDA_CHECK(cudaEventDestroy(s->ev[i]));
    free(s->ev);
    free(s->req);
    free(s->plan);
    if (s->d_one) CUDA_CHECK(cudaFree(s->d_one));
    if (s->d_ost) compress_stats_dev_free(s->d_ost);
    if (s->h_ost) CUDA_CHECK(cudaFreeHost(s->h_ost));
    if (s->ev_one) CUDA_CHECK(cudaEventDestroy(s->ev_one));
    int K = s->K;
    size_t min_sub = s->min_sub;
    int aware = s->cuda_aware;
    void* nccl = s->nccl;
    int unfused = s->unfused, ipc = s->ipc;
    memset(s, 0, sizeof(*s));
    s->unfused = unfused;
    s->ipc = ipc;
    s->K = K; /* keep the settings: the struct can be used again */
    s->min_sub = min_sub;
    s->cuda_aware = aware;
    s->nccl = nccl;
}

static int g_frozen = 0; /* coll_dev_freeze was called */

void coll_dev_freeze(void) { g_frozen = 1; }

void coll_dev_may_grow(const char* what, size_t bytes) {
    if (g_frozen)
        FATAL("%s must grow to %zu bytes while or after the training step is captured as a CUDA graph, whose nodes "
              "use the old one: the warm-up step before the capture should have sized it (run with "
              "train.cuda_graph=false and report this)", what, bytes);
}

/* Grow what a call needs, never shrink: the streams (made once), d_buf (and
 * its pinned mirror when staged) to `bytes`, the fp32 sum to `acc` floats,
 * nst statistics slots, nev events, nreq MPI requests, the message table to
 * plan_bytes. Growing waits for the device (first calls only). */
void coll_scratch_dev_ensure(CollScratchDev* s, int nst, int nev, int nreq, size_t bytes, size_t acc, size_t plan_bytes) {
    if (!s->initialized) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&s->s_d2h, cudaStreamNonBlocking));
        CUDA_CHECK(cudaStreamCreateWithFlags(&s->s_h2d, cudaStreamNonBlocking));
        CUDA_CHECK(cudaStreamCreateWithFlags(&s->s_net, cudaStreamNonBlocking));
        /* NCCL moves device memory itself: no host mirror */
        s->aware = s->nccl ? 1 : s->cuda_aware < 0 ? coll_mpi_cuda_aware() : s->cuda_aware != 0;
        s->initialized = 1;
    }
    /* growing: wait for everything queued (copies, kernels, the stats copy)
     * that may still use the old buffers; happens on the first calls only */
    if (bytes > s->buf_cap || acc > s->acc_cap || nst > s->st_cap) {
        coll_dev_may_grow("the device exchange's buffers", bytes);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    if (bytes > s->buf_cap) {
        if (s->d_buf) CUDA_CHECK(cudaFree(s->d_buf));
        if (s->h_buf) CUDA_CHECK(cudaFreeHost(s->h_buf));
        s->h_buf = NULL;
        s->buf_cap = bytes + bytes / 4 + 4096;
        CUDA_CHECK(cudaMalloc((void**)&s->d_buf, s->buf_cap));
        if (!s->aware) CUDA_CHECK(cudaMallocHost((void**)&s->h_buf, s->buf_cap));
    }
    if (!s->aware && !s->h_buf && s->buf_cap) CUDA_CHECK(cudaMallocHost((void**)&s->h_buf, s->buf_cap));
    if (acc > s->acc_cap) {
        if (s->d_acc) CUDA_CHECK(cudaFree(s->d_acc));
        s->acc_cap = acc + acc / 4 + 1024;
        CUDA_CHECK(cudaMalloc((void**)&s->d_acc, s->acc_cap * sizeof(float)));
    }
    if (nst > s->st_cap) {
        if (s->d_st) compress_stats_dev_free(s->d_st);
        if (s->h_st) CUDA_CHECK(cudaFreeHost(s->h_st));
        s->st_cap = nst;
        s->d_st = compress_stats_dev_alloc(s->st_cap);
        CUDA_CHECK(cudaMallocHost((void**)&s->h_st, sizeof(CompressStatsDev) * (size_t)s->st_cap));
    }
    if (nev > s->ev_cap) {
        s->ev = realloc(s->ev, sizeof(cudaEvent_t) * (size_t)nev);
        if (!s->ev) FATAL("out of host memory for %d CUDA events", nev);
        for (int i = s->ev_cap; i < nev; i++) {
            /* (waiting on a never-recorded event is a no-op: the first call's EV_END) */
            CUDA_CHECK(cudaEventCreateWithFlags(&s->ev[i], cudaEventDisableTiming));
        }
        s->ev_cap = nev;
    }
    if (nreq > s->req_cap) {
        free(s->req);
        s->req = mallocCheck(sizeof(MPI_Request) * (size_t)nreq);
        s->req_cap = nreq;
    }
    if (plan_bytes > s->plan_cap) {
        free(s->plan);
        s->plan_cap = plan_bytes;
        s->plan = mallocCheck(s->plan_cap);
    }
}
