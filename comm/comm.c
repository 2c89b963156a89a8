/*
 * comm/comm.c - TP/DP process groups and the exact collectives.
 *
 * TP ranks are contiguous in the world (rank = dp_rank * tp + tp_rank), so a
 * TP group sits on one node when ranks are packed by node: TP traffic is the
 * heavy, latency-bound kind. DP groups join the ranks that hold the same shard.
 *
 * Every reduction here is deterministic and gives identical bits on every
 * rank: small ones gather all contributions and sum them in rank order; big
 * ones use the "none" (exact) compressed all-reduce of collectives.c.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/step_graph.h"
#include "comm/watchdog.h"
#include "common/check.h"
#include "ops/ops.h"
#ifdef OPS_BF16
#include "comm/collectives_cuda.h"
#include "comm/comm_nccl.h"
#include "comm/sites_dev.h"
#include "comm/sp_cuda.h"
#endif

void comm_init(Comm* c, int tp, int dp) {
    memset(c, 0, sizeof(*c));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->world_size));
    if (tp * dp != c->world_size) {
        FATAL("parallel.tp * parallel.dp = %d * %d but mpirun started %d ranks", tp, dp, c->world_size);
    }
    c->tp_size = tp;
    c->dp_size = dp;
    c->tp_rank = c->world_rank % tp;
    c->dp_rank = c->world_rank / tp;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c->dp_rank, c->tp_rank, &c->tp_comm));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c->tp_rank, c->dp_rank, &c->dp_comm));
    MPI_CHECK(MPI_Comm_set_errhandler(c->tp_comm, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(c->dp_comm, MPI_ERRORS_RETURN));
    comm_policy_default(&c->policy);
    c->train_mode = 1;
}

void comm_free(Comm* c) {
    free(c->sites);
    free(c->host);
    free(c->host_ref);
#ifdef OPS_BF16
    ops_free(c->dev_f32);
    sites_dev_free(c);
    if (c->dscratch) coll_scratch_dev_free(c->dscratch);
    sp_side_free(c->sp_side);
    free(c->dscratch);
    comm_nccl_free(c);
#endif
    coll_scratch_free(&c->scratch);
    comm_graph_tally_free(c);
    ops_free(c->auto_x);
    MPI_Comm_free(&c->tp_comm);
    MPI_Comm_free(&c->dp_comm);
}

/* Gather n values from every rank and reduce them in rank order, so every
 * rank computes the same bits. For the small buffers only (P*n held). */
static void allgather_reduce(MPI_Comm comm, void* x, size_t n, MPI_Datatype type, MPI_Op op) {
    int P;
    MPI_CHECK(MPI_Comm_size(comm, &P));
    if (P == 1) return;
    size_t esz = type == MPI_DOUBLE ? sizeof(double) : sizeof(float);
    if (n > (size_t)INT32_MAX / (size_t)P) FATAL("small all-reduce of %zu elements is too large", n);
    void* all = mallocCheck(esz * n * (size_t)P);
    wd_allgather(x, (int)n, type, all, comm, "small all-reduce (all-gather)");
    for (size_t i = 0; i < n; i++) {
        if (type == MPI_DOUBLE) {
            const double* a = all;
            double v = a[i];
            for (int r = 1; r < P; r++) v = op == MPI_MAX ? (a[r * n + i] > v ? a[r * n + i] : v) : v + a[r * n + i];
            ((double*)x)[i] = v;
        } else {
            const float* a = all;
            float v = a[i];
            for (int r = 1; r < P; r++) v = op == MPI_MAX ? (a[r * n + i] > v ? a[r * n + i] : v) : v + a[r * n + i];
            ((float*)x)[i] = v;
        }
    }
    free(all);
}

/* host staging buffer of n floats (reused) */
float* comm_host_buffer(Comm* c, size_t n) {
    if (n > c->host_cap) {
        free(c->host);
        free(c->host_ref);
        c->host_cap = n + n / 4;
        c->host = mallocCheck(c->host_cap * sizeof(float));
        c->host_ref = mallocCheck(c->host_cap * sizeof(float));
    }
    return c->host;
}

void tp_allreduce_small(Comm* c, float* x, size_t n, MPI_Op op) {
    if (c->tp_size == 1) return;
    if (op != MPI_MAX && op != MPI_SUM) FATAL("tp_allreduce_small supports MPI_MAX and MPI_SUM only");
#ifdef OPS_BF16
    if (c->nccl_tp) {
        comm_nccl_allreduce_small(c, x, n, op);
        return;
    }
    float* h = comm_host_buffer(c, n);
    ops_to_host(h, x, n * sizeof(float));
    allgather_reduce(c->tp_comm, h, n, MPI_FLOAT, op);
    ops_from_host(x, h, n * sizeof(float));
#else
    allgather_reduce(c->tp_comm, x, n, MPI_FLOAT, op);
#endif
}

double comm_sum_double(MPI_Comm comm, double v) {
    allgather_reduce(comm, &v, 1, MPI_DOUBLE, MPI_SUM);
    return v;
}

int comm_sum_step_dev(Comm* c, double* sumsq, float* loss) {
#ifdef OPS_BF16
    if (c->nccl_tp && c->nccl_dp) {
        comm_nccl_step_sums(c, sumsq, loss);
        return 1;
    }
#else
    (void)c;
    (void)sumsq;
    (void)loss;
#endif
    return 0;
}

/* x (fp32, backend memory) = its exact sum over comm, times scale: the
 * "none" all-reduce of collectives.c on host memory (rank-order sums,
 * identical on every rank) */
static void exact_sum(Comm* c, MPI_Comm comm, float* x, size_t n, float scale) {
    CompressParams exact;
    compress_params_default(&exact, CM_NONE);
#ifdef OPS_BF16
    float* h = comm_host_buffer(c, n);
    ops_to_host(h, x, n * sizeof(float));
#else
    float* h = x;
#endif
    coll_allreduce(comm, &exact, &exact, h, n, 0, &c->scratch, NULL);
    if (scale != 1.0f)
        for (size_t i = 0; i < n; i++) h[i] *= scale;
#ifdef OPS_BF16
    ops_from_host(x, h, n * sizeof(float));
#endif
}

void dp_allreduce_mean(Comm* c, float* x, size_t n) {
    if (c->dp_size == 1) return;
#ifdef OPS_BF16
    if (c->nccl_dp) {
        comm_nccl_dp_mean(c, x, n);
        return;
    }
#endif
    exact_sum(c, c->dp_comm, x, n, 1.0f / (float)c->dp_size);
}

void tp_allreduce_sum(Comm* c, float* x, size_t n) {
    if (c->tp_size == 1) return;
    exact_sum(c, c->tp_comm, x, n, 1.0f);
}
