/*
 * comm/comm_nccl.c - the NCCL backend of the GPU build (comm.backend "nccl").
 *
 * MPI starts the processes and bootstraps NCCL (rank 0 of each TP and DP
 * group makes an ncclUniqueId and broadcasts it over the group's MPI
 * communicator); from then on every tensor exchange is NCCL between device
 * buffers, with no host staging:
 *   tp_exchange        the pipelined collectives of comm/collectives_cuda.c,
 *                      their messages by ncclSend/ncclRecv (CollScratchDev.nccl)
 *   tp_allreduce_small ncclAllGather + a rank-order reduction on the device
 *   dp_allreduce_mean  reduce-scatter by grouped ncclSend/ncclRecv, rank-order
 *                      sum and scale on the device, all-gather the same way
 * Every result is computed with the same fp32 operations in the same order
 * as the MPI backend (comm/comm.c), so both backends give identical bits and
 * identical runs. The step's two scalars (loss, grad norm^2) are gathered by
 * NCCL and summed on the device in comm_sum_double's order, so a step queues
 * no host wait (comm_nccl_step_sums).
 *
 * NCCL needs one GPU per rank within a communicator; ranks sharing a GPU
 * (as the one-GPU tests do) are detected here and told to use "mpi".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm/collectives_cuda.h"
#include "comm/comm_nccl.h"
#include "comm/nccl_util.h"
#include "comm/reduce_cuda.h"
#include "common/check.h"
#include "ops/ops_cuda.h"

/* host name + PCI bus id of this rank's GPU: two ranks with the same key share a GPU */
typedef struct {
    char key[MPI_MAX_PROCESSOR_NAME + 32];
} GpuKey;

static void gpu_key(GpuKey* k) {
    int dev, len = 0;
    char host[MPI_MAX_PROCESSOR_NAME], bus[32];
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), dev));
    MPI_CHECK(MPI_Get_processor_name(host, &len));
    memset(k, 0, sizeof(*k));
    snprintf(k->key, sizeof(k->key), "%s/%s", host, bus);
}

/* 0 if the ranks of g sit on distinct GPUs; else -1 and the first clash in err */
static int distinct_gpus(MPI_Comm g, const char* group, char* err, size_t errlen) {
    int P;
    MPI_CHECK(MPI_Comm_size(g, &P));
    GpuKey mine, *all = mallocCheck(sizeof(GpuKey) * (size_t)P);
    gpu_key(&mine);
    MPI_CHECK(MPI_Allgather(&mine, (int)sizeof(GpuKey), MPI_BYTE, all, (int)sizeof(GpuKey), MPI_BYTE, g));
    int bad = 0;
    for (int i = 0; i < P && !bad; i++) {
        for (int j = i + 1; j < P && !bad; j++) {
            if (strcmp(all[i].key, all[j].key) == 0) {
                snprintf(err, errlen,
                         "error: comm.backend \"nccl\": ranks %d and %d of a %s group share the GPU %s, and NCCL needs one "
                         "GPU per rank. Start at most one rank per GPU, or use comm.backend \"mpi\" (which allows sharing)",
                         i, j, group, all[i].key);
                bad = 1;
            }
        }
    }
    free(all);
    return bad ? -1 : 0;
}

int comm_nccl_init(Comm* c, char* err, size_t errlen) {
    /* every rank computes the same verdict from the same gathered keys */
    int bad_tp = distinct_gpus(c->tp_comm, "tensor-parallel", err, errlen);
    int bad_dp = bad_tp ? 0 : distinct_gpus(c->dp_comm, "data-parallel", err, errlen);
    int bad = bad_tp || bad_dp, any = 0;
    MPI_CHECK(MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (any) {
        if (!bad) snprintf(err, errlen, "error: comm.backend \"nccl\": another group has ranks sharing a GPU (see rank 0)");
        return -1;
    }
    c->nccl_tp = nccl_comm_over(c->tp_comm);
    c->nccl_dp = nccl_comm_over(c->dp_comm);
    return 0;
}

void comm_nccl_free(Comm* c) {
    if (c->nccl_tp) NCCL_CHECK(ncclCommDestroy(c->nccl_tp));
    if (c->nccl_dp) NCCL_CHECK(ncclCommDestroy(c->nccl_dp));
    c->nccl_tp = c->nccl_dp = NULL;
    if (c->dev_gather) CUDA_CHECK(cudaFree(c->dev_gather));
    c->dev_gather = NULL;
    c->dev_gather_cap = 0;
    if (c->dev_sums) CUDA_CHECK(cudaFree(c->dev_sums));
    c->dev_sums = NULL;
}

/* device scratch of at least n floats (grown, never shrunk) */
static float* gather_buffer(Comm* c, size_t n) {
    if (n > c->dev_gather_cap) {
        coll_dev_may_grow("the NCCL backend's gather buffer", n * sizeof(float));
        cudaStream_t s = (cudaStream_t)ops_cuda_stream();
        CUDA_CHECK(cudaStreamSynchronize(s)); /* queued work may still use the old buffer */
        if (c->dev_gather) CUDA_CHECK(cudaFree(c->dev_gather));
        c->dev_gather_cap = n + n / 4;
        CUDA_CHECK(cudaMalloc((void**)&c->dev_gather, c->dev_gather_cap * sizeof(float)));
    }
    return c->dev_gather;
}

void comm_nccl_allreduce_small(Comm* c, float* x, size_t n, MPI_Op op) {
    int P = c->tp_size;
    float* all = gather_buffer(c, n * (size_t)P);
    void* s = ops_cuda_stream();
    NCCL_CHECK(ncclAllGather(x, all, n, ncclFloat32, c->nccl_tp, (cudaStream_t)s));
    reduce_rank_order_dev(x, all, n, P, n, op == MPI_MAX ? REDUCE_MAX : REDUCE_SUM, 1.0f, s);
    /* the caller reads the result right after (a loss, a norm): wait here,
     * under the watchdog, rather than in a blocking copy */
    wd_stream_wait((cudaStream_t)s, c->tp_comm, "small all-reduce (NCCL)");
}

void comm_nccl_step_sums(Comm* c, double* sumsq, float* loss) {
    const int tp = c->tp_size, dp = c->dp_size;
    cudaStream_t s = (cudaStream_t)ops_cuda_stream();
    if (!c->dev_sums) { /* made by the first (eager) step, before any capture */
        coll_dev_may_grow("the step sums' buffer", sizeof(double) * (size_t)(tp + dp));
        CUDA_CHECK(cudaMalloc((void**)&c->dev_sums, sizeof(double) * (size_t)(tp + dp)));
    }
    double* tp_all = c->dev_sums;
    double* dp_all = c->dev_sums + tp;
    if (tp > 1) NCCL_CHECK(ncclAllGather(sumsq, tp_all, 1, ncclFloat64, c->nccl_tp, s));
    if (dp > 1) {
        loss_to_double_dev(dp_all + c->dp_rank, loss, s);
        NCCL_CHECK(ncclAllGather(dp_all + c->dp_rank, dp_all, 1, ncclFloat64, c->nccl_dp, s));
    }
    step_sums_dev(sumsq, tp_all, tp, loss, dp_all, dp, s);
}

void comm_nccl_dp_mean(Comm* c, float* x, size_t n) {
    int P = c->dp_size, r = c->dp_rank;
    cudaStream_t s = (cudaStream_t)ops_cuda_stream();
    size_t* b = mallocCheck(2 * sizeof(size_t) * (size_t)P);
    size_t* cnt = b + P, cmax = 0;
    for (int i = 0; i < P; i++) {
        coll_chunk(n, P, i, 1, &b[i], &cnt[i]);
        if (cnt[i] > cmax) cmax = cnt[i];
    }
    float* all = gather_buffer(c, cmax * (size_t)P);
    /* reduce-scatter: every rank's copy of my chunk, in rank order */
    CUDA_CHECK(cudaMemcpyAsync(all + (size_t)r * cmax, x + b[r], cnt[r] * sizeof(float), cudaMemcpyDeviceToDevice, s));
    NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < P; q++) {
        if (q == r) continue;
        if (cnt[q]) NCCL_CHECK(ncclSend(x + b[q], cnt[q], ncclFloat32, q, c->nccl_dp, s));
        if (cnt[r]) NCCL_CHECK(ncclRecv(all + (size_t)q * cmax, cnt[r], ncclFloat32, q, c->nccl_dp, s));
    }
    NCCL_CHECK(ncclGroupEnd());
    reduce_rank_order_dev(x + b[r], all, cmax, P, cnt[r], REDUCE_MEAN, 1.0f / (float)P, s);
    /* all-gather the means */
    NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < P; q++) {
        if (q == r) continue;
        if (cnt[r]) NCCL_CHECK(ncclSend(x + b[r], cnt[r], ncclFloat32, q, c->nccl_dp, s));
        if (cnt[q]) NCCL_CHECK(ncclRecv(x + b[q], cnt[q], ncclFloat32, q, c->nccl_dp, s));
    }
    NCCL_CHECK(ncclGroupEnd());
    free(b);
    /* once per step: the optimizer waits for it anyway; a stopped DP peer is
     * reported here instead of hanging the next host copy */
    wd_stream_wait(s, c->dp_comm, "data-parallel gradient mean (NCCL)");
}
