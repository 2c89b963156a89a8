/*
 * comm/scratch_cuda.c - the life of a CollScratchDev (comm/collectives_cuda.h):
 * its default settings, what it holds for the transports (streams, events,
 * device and pinned buffers, the IPC transport's mappings) and how it is
 * given back, and whether MPI takes device pointers.
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
    if (s->h_one) CUDA_CHECK(cudaFreeHost(s->h_one));
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
