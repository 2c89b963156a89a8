/*
 * train/memcheck.c - see memcheck.h.
 */
#include "train/memcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/watchdog.h"
#include "common/check.h"
#include "model/gpt.h"
#include "ops/ops.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

void memcheck_estimate(MemEstimate* e, GPTShape s, const Comm* c, int B, int T, int on_device) {
    memset(e, 0, sizeof(*e));
    ParamLayout pl;
    params_layout(&pl, s, c->tp_size, c->tp_rank);
    size_t np = pl.total, full = params_full_count(&pl), N = (size_t)B * T, C = (size_t)s.C;
    size_t backend = gpt_backend_bytes(s, c->tp_size, c->tp_rank, B, T, c->policy.sp);
    e->weights = np * (on_device ? sizeof(uint16_t) + 4 * sizeof(float) : 4 * sizeof(float));
    e->acts = backend - e->weights;
    /* exchanges (comm/collectives.c, comm/sites.c): the host staging pair
     * and the send/receive buffers, grown by 1/4 over the largest exchange
     * of N x C values (or of the gradients, all-reduced over DP) */
    size_t x = c->dp_size > 1 && np > N * C ? np : N * C;
    e->scratch = c->tp_size > 1 || c->dp_size > 1 ? (size_t)(1.25 * (double)(4 * x * sizeof(float))) : 0;
    /* host transients: a load holds the full model and the shard (and the
     * moments at a resume); rank 0's checkpoint holds the gathered shards and
     * the full model; every checkpoint the two moment buffers */
    size_t load = (full + 3 * np) * sizeof(float);
    size_t save = (c->world_rank == 0 ? (full + np * (size_t)c->tp_size) : 0) * sizeof(float) + 2 * np * sizeof(float);
    e->transient = load > save ? load : save;
    if (on_device) {
        e->device = backend + e->scratch;
        e->host = e->scratch + e->transient;
    } else {
        e->host = backend + e->scratch + e->transient;
    }
}

/* the first number after `key` in a file, or 0 */
static unsigned long long read_number(const char* path, const char* key) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    unsigned long long v = 0;
    size_t k = strlen(key);
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, k) != 0) continue;
        if (sscanf(line + k, " %llu", &v) != 1) v = 0;   /* "max" (no limit) reads as 0 */
        break;
    }
    fclose(f);
    return v;
}

size_t memcheck_host_available(void) {
    unsigned long long avail = read_number("/proc/meminfo", "MemAvailable:") * 1024ULL;
    /* cgroup v2 at the root of the process's cgroup namespace, else v1 */
    unsigned long long lim = read_number("/sys/fs/cgroup/memory.max", ""), used = read_number("/sys/fs/cgroup/memory.current", "");
    if (!lim) {
        lim = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", "");
        used = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes", "");
        if (lim > (1ULL << 60)) lim = 0;   /* v1 says "no limit" with a huge number */
    }
    if (lim) {
        unsigned long long room = lim > used ? lim - used : 0;
        if (!avail || room < avail) avail = room;
    }
    return (size_t)avail;
}

/* Collective: the ranks of this node, and those of them on GPU dev (all of
 * the node's when dev < 0: the CPU build) */
static void node_and_gpu(int dev, MPI_Comm* node, MPI_Comm* gpu) {
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, node));
    MPI_CHECK(MPI_Comm_split(*node, dev < 0 ? 0 : dev, 0, gpu));
}

int memcheck_run(GPTShape s, const Comm* c, int B, int T, char* err, size_t errlen) {
    size_t dfree = 0, dtotal = 0;
    int dev = -1, on_device = ops_mem_info(&dfree, &dtotal, &dev);
    MemEstimate e;
    memcheck_estimate(&e, s, c, B, T, on_device);
    if (c->world_rank == 0) {
        printf("memory (estimate, rank 0): host %.2f GiB", (double)e.host / GIB);
        if (on_device) printf(", device %.2f GiB", (double)e.device / GIB);
        printf(" (weights+grads+moments %.2f, activations %.2f, exchange scratch %.2f, load/checkpoint %.2f GiB)\n",
               (double)e.weights / GIB, (double)e.acts / GIB, (double)e.scratch / GIB, (double)e.transient / GIB);
        fflush(stdout);
    }
    /* the ranks of a node share its memory; those of a GPU share the GPU */
    MPI_Comm node, gpu;
    node_and_gpu(dev, &node, &gpu);
    unsigned long long mine[2] = {e.host, e.device}, sum[2];
    int nranks;
    MPI_CHECK(MPI_Comm_size(node, &nranks));
    wd_allreduce(mine, sum, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, node, "the memory check");
    unsigned long long on_gpu = 0;
    int ngpu;
    MPI_CHECK(MPI_Comm_size(gpu, &ngpu));
    wd_allreduce(&mine[1], &on_gpu, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, gpu, "the memory check");
    MPI_CHECK(MPI_Comm_free(&gpu));
    MPI_CHECK(MPI_Comm_free(&node));
    size_t avail = memcheck_host_available();
    if (avail && sum[0] > avail) {
        return check_errorf(err, errlen, "error: out of memory before the start: the %d rank%s on this node need an "
                            "estimated %.2f GiB of host memory (%.2f GiB per rank: weights+grads+moments %.2f, "
                            "activations %.2f, exchange scratch %.2f, load/checkpoint %.2f) but %.2f GiB is available "
                            "(MemAvailable / cgroup limit). Use a smaller model or train.batch_size, a larger "
                            "parallel.tp, or fewer ranks per node", nranks, nranks > 1 ? "s" : "", (double)sum[0] / GIB,
                            (double)e.host / GIB, (double)e.weights / GIB, (double)e.acts / GIB, (double)e.scratch / GIB,
                            (double)e.transient / GIB, (double)avail / GIB);
    }
    if (on_device && on_gpu > dfree) {
        return check_errorf(err, errlen, "error: out of GPU memory before the start: the %d rank%s on GPU %d need an "
                            "estimated %.2f GiB (%.2f per rank: weights+grads+moments %.2f, activations %.2f, exchange "
                            "scratch %.2f) but %.2f GiB of its %.2f GiB is free. Use a smaller model or "
                            "train.batch_size, a larger parallel.tp, or one rank per GPU", ngpu, ngpu > 1 ? "s" : "",
                            dev, (double)on_gpu / GIB, (double)e.device / GIB, (double)e.weights / GIB,
                            (double)e.acts / GIB, (double)e.scratch / GIB, (double)dfree / GIB, (double)dtotal / GIB);
    }
    return 0;
}

void memcheck_sample(size_t* peak) {
    size_t dfree = 0, dtotal = 0;
    int dev = -1;
    if (ops_mem_info(&dfree, &dtotal, &dev) && dtotal - dfree > *peak) *peak = dtotal - dfree;
}

void memcheck_report(GPTShape s, const Comm* c, int B, int T, size_t peak) {
    MemEstimate e;
    memcheck_estimate(&e, s, c, B, T, peak > 0);
    /* cudaMemGetInfo sees the whole GPU: with ranks sharing one, its high-water is theirs together */
    size_t dfree = 0, dtotal = 0;
    int dev = -1, share = 1;
    ops_mem_info(&dfree, &dtotal, &dev);
    MPI_Comm node, gpu;
    node_and_gpu(dev, &node, &gpu);
    MPI_CHECK(MPI_Comm_size(gpu, &share));
    MPI_CHECK(MPI_Comm_free(&gpu));
    MPI_CHECK(MPI_Comm_free(&node));
    unsigned long long mine[3] = {peak, e.acts, (unsigned long long)share}, most[3];
    wd_allreduce(mine, most, 3, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, "the memory report");
    if (c->world_rank != 0) return;
    const double MIB = 1024.0 * 1024.0;
    if (most[0] && most[2] > 1)
        printf("memory (measured): device high-water %.1f MiB per GPU, up to %llu ranks sharing one (max over GPUs); ",
               (double)most[0] / MIB, most[2]);
    else if (most[0]) printf("memory (measured): device high-water %.1f MiB per rank (max over ranks); ", (double)most[0] / MIB);
    else printf("memory (measured): ");
    printf("activations %.1f MiB per rank (exact: the buffers the model allocated)\n", (double)most[1] / MIB);
    fflush(stdout);
}
