/*
 * comm/sites_dev.c - the device half of the exchange sites (comm/sites_dev.h):
 * their delayed-scale state and statistics in device memory, the exchange
 * on the compute stream with nothing for the host to wait for, and the few
 * points where the host does read: the log, the exchange clock, checkpoints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm/collectives_cuda.h"
#include "comm/ipc_cuda.h"
#include "comm/sites.h"
#include "comm/sites_dev.h"
#include "comm/sp_cuda.h"
#include "comm/nccl_util.h" /* wd_stream_wait */
#include "common/check.h"
#include "common/cuda_check.h"
#include "ops/ops_cuda.h"

_Static_assert(SITE_DEV_HISTORY == SITE_HISTORY, "the device history has the host's length (checkpoints hold one)");

typedef struct SitesDev {
    int nsites;
    SiteScaleDev* d_scale; /* [nsites] */
    CollDevStats* d_step;  /* [nsites]: this step's totals */
    CollDevStats* d_call;  /* the exchange in flight (stream order makes one enough) */
    CollDevStats* h_step;  /* pinned copy of d_step */
    cudaEvent_t* ev;       /* the step's exchange marks: start, end, start, end, ... */
    int ev_cap, ev_used;
} SitesDev;

static cudaStream_t cs_of(void) { return (cudaStream_t)ops_cuda_stream(); }

static SitesDev* sites_dev(Comm* c) {
    if (c->sdev) return c->sdev;
    SitesDev* d = callocCheck(1, sizeof(SitesDev));
    d->nsites = c->nsites;
    const size_t ns = (size_t)(c->nsites > 0 ? c->nsites : 1);
    CUDA_CHECK(cudaMalloc((void**)&d->d_scale, ns * sizeof(SiteScaleDev)));
    CUDA_CHECK(cudaMalloc((void**)&d->d_step, ns * sizeof(CollDevStats)));
    CUDA_CHECK(cudaMalloc((void**)&d->d_call, sizeof(CollDevStats)));
    CUDA_CHECK(cudaMallocHost((void**)&d->h_step, ns * sizeof(CollDevStats)));
    /* an empty history predicts nothing (0: the kernels use the current amax) */
    CUDA_CHECK(cudaMemsetAsync(d->d_scale, 0, ns * sizeof(SiteScaleDev), cs_of()));
    CUDA_CHECK(cudaMemsetAsync(d->d_step, 0, ns * sizeof(CollDevStats), cs_of()));
    CUDA_CHECK(cudaMemsetAsync(d->d_call, 0, sizeof(CollDevStats), cs_of()));
    c->sdev = d;
    return d;
}

/* comm.transport: which one moves the TP exchanges (CommPolicy.transport).
 * Collective over the TP group (the IPC check), the same answer everywhere. */
static int pick_ipc(Comm* c) {
    const int t = c->policy.transport;
    if (t == COMM_TRANSPORT_NCCL && !c->nccl_tp)
        FATAL("comm.transport \"nccl\" needs comm.backend \"nccl\" (it makes the NCCL communicators)");
    if (t == COMM_TRANSPORT_STAGED || t == COMM_TRANSPORT_NCCL) return 0;
    if (t == COMM_TRANSPORT_AUTO && c->nccl_tp) return 0;
    const int ok = coll_ipc_usable(c->tp_comm);
    if (t == COMM_TRANSPORT_IPC && !ok)
        FATAL("comm.transport \"ipc\": the ranks of a tensor-parallel group must share a node and be on one GPU or on GPUs "
              "with peer access. Use comm.transport \"staged\" (or \"nccl\" with comm.backend \"nccl\")");
    return ok;
}

CollScratchDev* sites_dev_scratch(Comm* c) {
    if (!c->dscratch) {
        const int ipc = pick_ipc(c);
        c->dscratch = callocCheck(1, sizeof(CollScratchDev));
        coll_scratch_dev_init(c->dscratch);
        c->dscratch->ipc = ipc;
        c->dscratch->nccl = ipc ? NULL : c->nccl_tp; /* NULL: MPI */
        if (c->world_rank == 0)
            printf("comm: TP exchanges by %s\n", ipc ? "CUDA IPC" : c->nccl_tp ? "NCCL" : "MPI (staged)");
        /* a piece waiting on a peer process resolves only when the GPU switches processes, which it
         * does at a time slice while this one has GEMMs queued (docs/RESULTS.md section 5) */
        if (ipc && c->policy.overlap && coll_ranks_share_gpu(c->tp_comm) && c->world_rank == 0)
            printf("warning: comm.overlap with ranks sharing a GPU over CUDA IPC is slow: without MPS the GPU runs "
                   "one process at a time, so each piece waits for a time slice (measured about 2 ms a piece, a 7x "
                   "slower GPT-2 124M step), and under MPS the ranks' GEMMs and exchanges share the same SMs "
                   "(measured 3%% slower). It pays with one rank per GPU; here set comm.overlap false\n");
        if (c->policy.pipeline_depth > 0) c->dscratch->K = c->policy.pipeline_depth;
        c->dscratch->unfused = !c->policy.fuse;
    }
    return c->dscratch;
}

uint64_t sites_dev_allreduce(Comm* c, int site, int one_shot, const CompressParams* p_rs, const CompressParams* p_ag,
                             void* x, size_t n, uint64_t stream) {
    SitesDev* d = sites_dev(c);
    if (site < 0 || site >= d->nsites) FATAL("internal: site %d of %d", site, d->nsites);
    CollDevSite ds = {d->d_scale[site].delayed, d->d_call};
    CollScratchDev* s = sites_dev_scratch(c);
    if (one_shot) return coll_allreduce_one_shot_site_dev(c->tp_comm, p_rs, x, n, stream, s, &ds, NULL, cs_of());
    return coll_allreduce_site_dev(c->tp_comm, p_rs, p_ag, x, n, stream, s, &ds, NULL, cs_of());
}

uint64_t sites_dev_rows(Comm* c, int site, int rs, const CompressParams* p, const void* in, void* out, int rows,
                        int cols, int k0, int k1, uint64_t stream, void* cs) {
    SitesDev* d = sites_dev(c);
    if (site < 0 || site >= d->nsites) FATAL("internal: site %d of %d", site, d->nsites);
    CollDevSite ds = {d->d_scale[site].delayed, d->d_call};
    CollScratchDev* s = sites_dev_scratch(c);
    const cudaStream_t st = cs ? (cudaStream_t)cs : cs_of();
    const int K = c->policy.sp_chunks;
    if (rs) return sp_reduce_scatter_dev(c->tp_comm, K, p, in, out, rows, cols, k0, k1, stream, s, &ds, NULL, st);
    return sp_all_gather_dev(c->tp_comm, K, p, in, out, rows, cols, k0, k1, stream, s, &ds, NULL, st);
}

void sites_dev_after(Comm* c, int site, int keep, int push) {
    SitesDev* d = sites_dev(c);
    site_scale_push_dev(&d->d_scale[site], d->d_call, keep ? &d->d_step[site] : NULL, push, cs_of());
}

void sites_dev_step_begin(Comm* c) {
    SitesDev* d = sites_dev(c);
    CUDA_CHECK(cudaMemsetAsync(d->d_step, 0, sizeof(CollDevStats) * (size_t)(d->nsites > 0 ? d->nsites : 1), cs_of()));
    d->ev_used = 0;
}

void sites_dev_mark(Comm* c, void* cs) {
    SitesDev* d = sites_dev(c);
    if (d->ev_used == d->ev_cap) {
        int cap = d->ev_cap ? 2 * d->ev_cap : 64;
        d->ev = realloc(d->ev, sizeof(cudaEvent_t) * (size_t)cap);
        if (!d->ev) FATAL("out of host memory for %d CUDA events", cap);
        for (int i = d->ev_cap; i < cap; i++) CUDA_CHECK(cudaEventCreate(&d->ev[i])); /* with timing */
        d->ev_cap = cap;
    }
    /* in a step captured into a CUDA graph, as a node of its own that each
     * replay records (a plain record would only be an edge of the graph) */
    const cudaStream_t st = cs ? (cudaStream_t)cs : cs_of();
    CUDA_CHECK(cudaEventRecordWithFlags(d->ev[d->ev_used++], st, cuda_stream_capturing(st) ? cudaEventRecordExternal : 0));
}

int sites_dev_marks(const Comm* c) { return c->sdev ? c->sdev->ev_used : 0; }
void sites_dev_marks_set(Comm* c, int n) { sites_dev(c)->ev_used = n; }

double sites_dev_step_ms(Comm* c) {
    SitesDev* d = sites_dev(c);
    if (d->ev_used < 2) return 0.0;
    CUDA_CHECK(cudaEventSynchronize(d->ev[d->ev_used - 1]));
    double ms = 0.0;
    for (int i = 0; i + 1 < d->ev_used; i += 2) {
        float t = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&t, d->ev[i], d->ev[i + 1]));
        ms += t;
    }
    return ms;
}

void sites_dev_read(Comm* c) {
    SitesDev* d = sites_dev(c);
    if (d->nsites < 1) return;
    CUDA_CHECK(cudaMemcpyAsync(d->h_step, d->d_step, sizeof(CollDevStats) * (size_t)d->nsites, cudaMemcpyDeviceToHost,
                               cs_of()));
    wd_stream_wait(cs_of(), c->tp_comm, "reading the exchange statistics");
    for (int i = 0; i < d->nsites; i++) {
        c->sites[i].saturated = d->h_step[i].saturated;
        c->sites[i].nonfinite = d->h_step[i].nonfinite;
    }
}

void sites_dev_scale_get(Comm* c, SiteScaleDev* all) {
    SitesDev* d = sites_dev(c);
    CUDA_CHECK(cudaMemcpyAsync(all, d->d_scale, sizeof(SiteScaleDev) * (size_t)d->nsites, cudaMemcpyDeviceToHost, cs_of()));
    wd_stream_wait(cs_of(), c->tp_comm, "reading the delayed-scale history");
}

void sites_dev_scale_put(Comm* c, const SiteScaleDev* all) {
    SitesDev* d = sites_dev(c);
    CUDA_CHECK(cudaMemcpyAsync(d->d_scale, all, sizeof(SiteScaleDev) * (size_t)d->nsites, cudaMemcpyHostToDevice, cs_of()));
    /* `all` may be freed when this returns: the copy must have read it */
    wd_stream_wait(cs_of(), c->tp_comm, "restoring the delayed-scale history");
}

void sites_dev_free(Comm* c) {
    SitesDev* d = c->sdev;
    if (!d) return;
    CUDA_CHECK(cudaFree(d->d_scale));
    CUDA_CHECK(cudaFree(d->d_step));
    CUDA_CHECK(cudaFree(d->d_call));
    CUDA_CHECK(cudaFreeHost(d->h_step));
    for (int i = 0; i < d->ev_cap; i++) CUDA_CHECK(cudaEventDestroy(d->ev[i]));
    free(d->ev);
    free(d);
    c->sdev = NULL;
}
