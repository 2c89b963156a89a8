/*
 * comm/step_graph.c - the exchanges' side of a multi-rank step as one CUDA
 * graph (comm/step_graph.h says what qualifies and why).
 */
#include <stdlib.h>

#include "comm/sites.h"
#include "comm/step_graph.h"
#include "common/check.h"
#include "ops/ops.h"

#ifdef OPS_BF16
#include <cuda_runtime_api.h>

#include "comm/collectives_cuda.h"
#include "comm/nccl_util.h" /* wd_stream_wait */
#include "comm/sites_dev.h"
#include "ops/ops_cuda.h"
#endif

/* what a replay does not tell the host, as the captured step left it */
typedef struct CommGraphTally {
    uint64_t step_bytes;
    int marks; /* the exchange clock's events (sites_dev_mark) */
    uint64_t* bytes; /* per site */
    int* calls;
} CommGraphTally;

const char* comm_graph_blocker(const Comm* c) {
    if (c->world_size == 1) return NULL;
#ifdef OPS_BF16
    if (!c->nccl_tp || !c->nccl_dp)
        return "with more than one rank it needs every exchange queued on the device with no host wait, which "
               "comm.backend \"nccl\" does and \"mpi\" does not";
    if (c->tp_size > 1 && c->policy.transport != COMM_TRANSPORT_AUTO && c->policy.transport != COMM_TRANSPORT_NCCL)
        return "comm.transport moves the TP exchanges through host code; leave it \"auto\" (NCCL)";
#endif
    if (c->tp_size > 1 && c->policy.sp)
        return "sequence parallelism sums the replicated tensors' gradients through host memory";
    for (int i = 0; i < c->nsites; i++)
        if (c->sites[i].compressed && c->sites[i].p.stochastic)
            return "stochastic rounding draws new random streams every step, which a replay would repeat";
    return NULL;
}

int comm_step_plain(const Comm* c) {
    if (c->tp_size == 1) return 1; /* no exchange sites */
    const CommPolicy* p = &c->policy;
    if (p->dump_step == c->step && p->dump_sites[0]) return 0;
    for (int i = 0; i < c->nsites; i++) {
        const CommSite* s = &c->sites[i];
        if (s->calibrating || s->auto_pending) return 0;
        if (s->compressed && comm_step_samples(c)) return 0; /* the error sample's exact collective */
    }
    return 1;
}

static CommGraphTally* tally(Comm* c) {
    if (!c->graph_tally) {
        CommGraphTally* t = callocCheck(1, sizeof(CommGraphTally));
        const size_t ns = (size_t)(c->nsites > 0 ? c->nsites : 1);
        t->bytes = callocCheck(ns, sizeof(uint64_t));
        t->calls = callocCheck(ns, sizeof(int));
        c->graph_tally = t;
    }
    return c->graph_tally;
}

void comm_graph_begin(Comm* c) {
    (void)c;
#ifdef OPS_BF16
    coll_dev_freeze();
#endif
}

void comm_graph_captured(Comm* c) {
    CommGraphTally* t = tally(c);
    t->step_bytes = c->step_bytes;
    for (int i = 0; i < c->nsites; i++) {
        t->bytes[i] = c->sites[i].bytes;
        t->calls[i] = c->sites[i].calls;
    }
#ifdef OPS_BF16
    t->marks = c->tp_size > 1 ? sites_dev_marks(c) : 0;
#endif
}

void comm_graph_replayed(Comm* c) {
    if (!c->graph_tally) FATAL("internal: comm_graph_replayed before comm_graph_captured");
    const CommGraphTally* t = c->graph_tally;
    c->step_bytes = t->step_bytes;
    for (int i = 0; i < c->nsites; i++) {
        c->sites[i].bytes = t->bytes[i];
        c->sites[i].calls = t->calls[i];
    }
#ifdef OPS_BF16
    if (c->tp_size > 1) sites_dev_marks_set(c, t->marks);
#endif
}

void comm_graph_tally_free(Comm* c) {
    CommGraphTally* t = c->graph_tally;
    if (!t) return;
    free(t->bytes);
    free(t->calls);
    free(t);
    c->graph_tally = NULL;
}

void comm_step_wait(Comm* c) {
#ifdef OPS_BF16
    if (c->world_size > 1) {
        wd_stream_wait((cudaStream_t)ops_cuda_stream(), MPI_COMM_WORLD, "the training step's device work");
        return;
    }
#endif
    (void)c;
    ops_sync();
}
