/*
 * train/checkpoint.c - see checkpoint.h for the files and the protocol.
 */
#define _POSIX_C_SOURCE 200809L

#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/watchdog.h"
#include "common/check.h"
#include "model/hf.h"
#include "model/safetensors.h"
#include "train/agree.h"
#include "train/state.h"

#define MAX_KEEP_LIST 4096 /* steps deleted by one rotation at most (the rest go at the next save) */

int checkpoint_mkdirs(const char* dir, char* err, size_t errlen) {
    char buf[1024];
    if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf)) return check_errorf(err, errlen, "directory name %s is too long", dir);
    for (char* p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);   /* the final mkdir below reports a failure of any level */
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return check_errorf(err, errlen, "cannot create directory %s: %s", dir, strerror(errno));
    return 0;
}

/* GPT-2: llm.c's file; qwen2: a Hugging Face directory (model/hf.h) */
static void model_path(char* out, size_t cap, const char* dir, int step, int arch) {
    snprintf(out, cap, arch == ARCH_QWEN2 ? "%s/model_%08d" : "%s/model_%08d.bin", dir, step);
}
static void state_path(char* out, size_t cap, const char* dir, int step, int rank) {
    snprintf(out, cap, "%s/state_%08d_r%d.bin", dir, step, rank);
}
static void done_path(char* out, size_t cap, const char* dir, int step) { snprintf(out, cap, "%s/done_%08d", dir, step); }

float* checkpoint_gather_model(GPT* m, Comm* c) {
    size_t n = m->pl.total;
    float* shard = mallocCheck(n * sizeof(float));
    gpt_get_shard(m, shard);
    int root = c->world_rank == 0;
    float* all = NULL;
    if (root) all = mallocCheck(n * (size_t)c->tp_size * sizeof(float));
    if (c->dp_rank == 0) {
        if (n > (size_t)INT32_MAX) FATAL("a shard of %zu floats is too large to gather with MPI int counts", n);
        wd_gather(shard, (int)n, MPI_FLOAT, all, 0, c->tp_comm, "gathering the model for a checkpoint");
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

/* every rank removes what it wrote of `step` (final names and .tmp) */
static void remove_step(const char* dir, int step, const Comm* c) {
    char path[1200], tmp[1300];
    state_path(path, sizeof(path), dir, step, c->world_rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    remove(tmp);
    remove(path);
    if (c->world_rank != 0) return;
    done_path(path, sizeof(path), dir, step);    /* the marker first: a crash here leaves an incomplete, unmarked step */
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    remove(tmp);
    remove(path);
    model_path(path, sizeof(path), dir, step, ARCH_GPT2);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    remove(tmp);
    remove(path);
    model_path(path, sizeof(path), dir, step, ARCH_QWEN2);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    hf_remove_dir(tmp);
    hf_remove_dir(path);
}

static int write_marker(const char* dir, int step, const Comm* c, char* err, size_t errlen) {
    char path[1200], tmp[1300], line[64];
    done_path(path, sizeof(path), dir, step);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    snprintf(line, sizeof(line), "tp %d dp %d\n", c->tp_size, c->dp_size);
    FILE* f = fopenErr(tmp, "wb", err, errlen);
    if (!f) return -1;
    int rc = fputsErr(line, f, tmp, err, errlen);
    if (rc == 0) rc = fcloseErr(f, tmp, err, errlen);
    else fclose(f);
    if (rc == 0 && rename(tmp, path) != 0) rc = check_errorf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    return rc;
}

/* steps with a marker in dir, ascending; returns the count (at most cap) */
static int list_steps(const char* dir, int* steps, int cap) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL && n < cap) {
        int step;
        char tail;
        /* "done_%08d" exactly; a "done_x.tmp" left by a crash does not count */
        if (sscanf(e->d_name, "done_%d%c", &step, &tail) == 1 && step >= 0) steps[n++] = step;
    }
    closedir(d);
    for (int i = 1; i < n; i++)          /* insertion sort: a handful of entries */
        for (int j = i; j > 0 && steps[j - 1] > steps[j]; j--) { int t = steps[j]; steps[j] = steps[j - 1]; steps[j - 1] = t; }
    return n;
}

/* keep the newest `keep` complete checkpoints; rank 0 decides from its
 * listing (other ranks may not see the markers on node-local disks), and
 * every rank removes its own files of the steps that go */
static void rotate(const char* dir, int keep, const Comm* c) {
    int* steps = callocCheck(MAX_KEEP_LIST, sizeof(int));
    int n = 0;
    if (c->world_rank == 0) {
        n = list_steps(dir, steps, MAX_KEEP_LIST);
        n = n > keep ? n - keep : 0;     /* the oldest n go: steps[0..n) */
    }
    wd_bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD, "checkpoint rotation");
    if (n > 0) wd_bcast(steps, n, MPI_INT, 0, MPI_COMM_WORLD, "checkpoint rotation");
    for (int i = 0; i < n; i++) remove_step(dir, steps[i], c);
    free(steps);
}

int checkpoint_save(const char* dir, int step, int keep, GPT* m, Comm* c, DataLoader* dl, char* err, size_t errlen) {
    char path[1200];
    int failed = c->world_rank == 0 && checkpoint_mkdirs(dir, err, errlen) != 0;
    if (agree_error(failed, err, errlen)) return -1;

    float* full = checkpoint_gather_model(m, c);
    failed = 0;
    if (full) {
        model_path(path, sizeof(path), dir, step, m->pl.s.arch);
        failed = (m->pl.s.arch == ARCH_QWEN2 ? hf_save_dir(path, &m->pl, full, ST_F32, err, errlen)
                                             : params_save_full(path, &m->pl, full, err, errlen)) != 0;
        free(full);
    }

    size_t n = m->pl.total, cb = comm_state_bytes(c);
    DataPos pos = dataloader_tell(dl);
    StateHeader h = {.step = step, .tp = c->tp_size, .dp = c->dp_size, .rank = c->world_rank, .nparams = (int64_t)n,
                     .comm_bytes = (int64_t)cb, .data_shard = pos.shard, .data_pos = pos.pos};
    if (!failed) {
        float* mm = mallocCheck(n * sizeof(float));
        float* vv = mallocCheck(n * sizeof(float));
        void* cs = mallocCheck(cb);
        ops_to_host(mm, m->adam_m, n * sizeof(float));
        ops_to_host(vv, m->adam_v, n * sizeof(float));
        comm_state_save(c, cs);
        state_path(path, sizeof(path), dir, step, c->world_rank);
        failed = state_write(path, &h, mm, vv, cs, err, errlen) != 0;
        free(mm);
        free(vv);
        free(cs);
    }
    /* the marker goes last: only when every rank's files are in place */
    if (!agree_error(failed, err, errlen)) {
        failed = c->world_rank == 0 && write_marker(dir, step, c, err, errlen) != 0;
        if (!agree_error(failed, err, errlen)) {
            if (keep > 0) rotate(dir, keep, c);
            return 0;
        }
    }
    remove_step(dir, step, c);
    size_t k = strlen(err);
    snprintf(err + k, errlen - k, "; checkpoint %d was not written and its partial files were removed", step);
    return -1;
}

int checkpoint_latest(const char* dir, int below) {
    int* steps = callocCheck(MAX_KEEP_LIST, sizeof(int));
    int n = list_steps(dir, steps, MAX_KEEP_LIST), best = -1;
    for (int i = 0; i < n; i++) if (steps[i] < below && steps[i] > best) best = steps[i];
    free(steps);
    return best;
}

void checkpoint_clean_tmp(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* e;
    char path[1200];
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 4, ".tmp") != 0) continue;
        if (strncmp(e->d_name, "model_", 6) && strncmp(e->d_name, "state_", 6) && strncmp(e->d_name, "done_", 5)) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (hf_is_dir(path)) hf_remove_dir(path);   /* a qwen2 model directory being written */
        else remove(path);
    }
    closedir(d);
}

static int exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* this rank's verdict on checkpoint `step`: every file read and verified */
static int read_step(const char* dir, int step, GPT* m, Comm* c, DataLoader* dl, float** full, StateData* sd,
                     int* unchecked, char* err, size_t errlen) {
    char mpath[1200], spath[1200];
    model_path(mpath, sizeof(mpath), dir, step, m->pl.s.arch);
    state_path(spath, sizeof(spath), dir, step, c->world_rank);
    if (!exists(mpath)) return check_errorf(err, errlen, "checkpoint %d is incomplete: missing %s", step, mpath);
    if (!exists(spath)) return check_errorf(err, errlen, "checkpoint %d is incomplete: missing %s", step, spath);
    int checked = 0;
    if ((m->pl.s.arch == ARCH_QWEN2 ? hf_read_dir(mpath, &m->pl, full, &checked, err, errlen)
                                    : params_read_full(mpath, &m->pl, full, &checked, err, errlen)) != 0) return -1;
    if (!checked) *unchecked |= 1;
    StateExpect want = {step, c->tp_size, c->dp_size, c->world_rank, m->pl.total, comm_state_bytes(c), &m->pl,
                        comm_state_bytes_other(c)};
    if (state_read(spath, &want, sd, err, errlen) != 0) return -1;
    if (!sd->checked) *unchecked |= 2;
    DataPos pos = {sd->h.data_shard, sd->h.data_pos};
    if (dataloader_pos_check(dl, pos, err, errlen) != 0) {
        size_t k = strlen(err);
        snprintf(err + k, errlen - k, " (from %s)", spath);
        return -1;
    }
    return 0;
}

int checkpoint_load(const char* dir, int step, GPT* m, Comm* c, DataLoader* dl, char* err, size_t errlen) {
    float* full = NULL;
    StateData sd;
    memset(&sd, 0, sizeof(sd));
    int unchecked = 0;
    int failed = read_step(dir, step, m, c, dl, &full, &sd, &unchecked, err, errlen) != 0;
    if (agree_error(failed, err, errlen)) {
        free(full);
        state_free(&sd);
        int older = checkpoint_latest(dir, step), k = (int)strlen(err);
        if (older >= 0)
            snprintf(err + k, errlen - (size_t)k, ". An older complete checkpoint exists: step %d in %s; to resume from it, "
                     "move the files of step %d (*_%08d*) out of the directory", older, dir, step, step);
        else snprintf(err + k, errlen - (size_t)k, ". There is no older checkpoint in %s", dir);
        return -1;
    }
    int any = 0;
    wd_allreduce(&unchecked, &any, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD, "checkpoint load");
    if (c->world_rank == 0 && any) {
        printf("note: checkpoint %d in %s has %s without checksums (written by llm.c or an older tpfp8): loaded "
               "without verifying %s\n", step, dir, any == 3 ? "a model and state files" : any == 1 ? "a model file" : "state files",
               any == 3 ? "them" : "it");
        fflush(stdout);
    }
    gpt_set_params(m, full);
    free(full);
    size_t n = m->pl.total;
    ops_from_host(m->adam_m, sd.m, n * sizeof(float));
    ops_from_host(m->adam_v, sd.v, n * sizeof(float));
    if (comm_state_load(c, sd.sites, (size_t)sd.h.comm_bytes) && c->world_rank == 0) {
        printf("note: checkpoint %d was written with parallel.sp %s: its compression sites' group sizes and "
               "calibration carry over to this run's sites of the same block; the delayed-scale histories start "
               "anew\n", step, c->policy.sp ? "off" : "on");
        fflush(stdout);
    }
    DataPos pos = {sd.h.data_shard, sd.h.data_pos};
    dataloader_seek(dl, pos);
    state_free(&sd);
    return 0;
}
