/*
 * train/checkpoint.c - see checkpoint.h for the files and the protocol.
 */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/check.h"

#define STATE_MAGIC 20261129
#define STATE_VERSION 1

typedef struct {
    int32_t magic, version, step, tp, dp, rank;
    int64_t nparams, comm_bytes, data_shard, data_pos;
} StateHeader;

static void mkdirs(const char* dir) {
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", dir);
    for (char* p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) FATAL("cannot create checkpoint directory %s: %s", dir, strerror(errno));
}

static void commit(const char* tmp, const char* path) {
    if (rename(tmp, path) != 0) FATAL("cannot rename %s to %s: %s", tmp, path, strerror(errno));
}

float* checkpoint_gather_model(GPT* m, Comm* c) {
    size_t n = m->pl.total;
    float* shard = mallocCheck(n * sizeof(float));
    gpt_get_shard(m, shard);
    int root = c->world_rank == 0;
    float* all = NULL;
    if (root) all = mallocCheck(n * (size_t)c->tp_size * sizeof(float));
    if (c->dp_rank == 0) {
        if (n > (size_t)INT32_MAX) FATAL("a shard of %zu floats is too large to gather with MPI int counts", n);
        MPI_CHECK(MPI_Gather(shard, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, 0, c->tp_comm));
    }
    free(shard);
    if (!root) return NULL;
    size_t total = params_full_count(&m->pl);
    float* full = callocCheck(total, sizeof(float));
    for (int r = 0; r < c->tp_size; r++) {
        ParamLayout pr;
        params_layout(&pr, m->pl.s, c->tp_size, r);      /* rank r's shard description */
        params_copy_shard(&pr, full, all + (size_t)r * n, 0);
    }
    free(all);
    return full;
}

void checkpoint_save(const char* dir, int step, GPT* m, Comm* c, DataLoader* dl) {
    char path[1200], tmp[1300];
    if (c->world_rank == 0) mkdirs(dir);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    float* full = checkpoint_gather_model(m, c);
    if (full) {
        snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
        params_save_full(path, &m->pl, full);
        free(full);
    }

    size_t n = m->pl.total;
    StateHeader h = {STATE_MAGIC, STATE_VERSION, step, c->tp_size, c->dp_size, c->world_rank,
                     (int64_t)n, (int64_t)comm_state_bytes(c), 0, 0};
    DataPos pos = dataloader_tell(dl);
    h.data_shard = pos.shard;
    h.data_pos = pos.pos;
    float* buf = mallocCheck(n * sizeof(float));
    void* cs = mallocCheck(comm_state_bytes(c));
    comm_state_save(c, cs);
    snprintf(path, sizeof(path), "%s/state_%08d_r%d.bin", dir, step, c->world_rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopenCheck(tmp, "wb");
    fwriteCheck(&h, sizeof(h), 1, f, tmp);
    ops_to_host(buf, m->adam_m, n * sizeof(float));
    fwriteCheck(buf, sizeof(float), n, f, tmp);
    ops_to_host(buf, m->adam_v, n * sizeof(float));
    fwriteCheck(buf, sizeof(float), n, f, tmp);
    fwriteCheck(cs, 1, comm_state_bytes(c), f, tmp);
    fcloseCheck(f, tmp);
    commit(tmp, path);
    free(buf);
    free(cs);

    /* the marker goes last: only when every rank's files are in place */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (c->world_rank == 0) {
        snprintf(path, sizeof(path), "%s/done_%08d", dir, step);
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        f = fopenCheck(tmp, "wb");
        fprintf(f, "tp %d dp %d\n", c->tp_size, c->dp_size);
        fcloseCheck(f, tmp);
        commit(tmp, path);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

int checkpoint_latest(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return -1;                      /* no directory yet: nothing to resume */
    int best = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step;
        char tail;
        /* "done_%08d" exactly; a "done_x.tmp" left by a crash does not count */
        if (sscanf(e->d_name, "done_%d%c", &step, &tail) == 1 && step > best) best = step;
    }
    closedir(d);
    return best;
}

int checkpoint_load(const char* dir, int step, GPT* m, Comm* c, DataLoader* dl) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
    float* full = params_load_full(path, &m->pl);
    gpt_set_params(m, full);
    free(full);

    snprintf(path, sizeof(path), "%s/state_%08d_r%d.bin", dir, step, c->world_rank);
    FILE* f = fopenCheck(path, "rb");
    StateHeader h;
    freadCheck(&h, sizeof(h), 1, f, path);
    if (h.magic != STATE_MAGIC || h.version != STATE_VERSION) FATAL("%s is not a training-state file of this version", path);
    if (h.tp != c->tp_size || h.dp != c->dp_size) {
        FATAL("%s was written with parallel.tp=%d dp=%d but this run has tp=%d dp=%d; resume with the same layout",
              path, h.tp, h.dp, c->tp_size, c->dp_size);
    }
    size_t n = m->pl.total;
    if (h.nparams != (int64_t)n || h.comm_bytes != (int64_t)comm_state_bytes(c)) {
        FATAL("%s does not match this model/config (shard of %lld floats, expected %zu)", path, (long long)h.nparams, n);
    }
    float* buf = mallocCheck(n * sizeof(float));
    freadCheck(buf, sizeof(float), n, f, path);
    ops_from_host(m->adam_m, buf, n * sizeof(float));
    freadCheck(buf, sizeof(float), n, f, path);
    ops_from_host(m->adam_v, buf, n * sizeof(float));
    free(buf);
    void* cs = mallocCheck(comm_state_bytes(c));
    freadCheck(cs, 1, comm_state_bytes(c), f, path);
    comm_state_load(c, cs);
    free(cs);
    fcloseCheck(f, path);
    DataPos pos = {h.data_shard, h.data_pos};
    dataloader_seek(dl, pos);
    return h.step;
}
