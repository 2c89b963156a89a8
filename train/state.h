/*
 * train/state.h - the per-rank training-state file of a checkpoint,
 * state_<step>_r<rank>.bin (version 2):
 *
 *   header   StateHeader below (little-endian host layout, 64 bytes)
 *   adam_m   nparams fp32: AdamW first moments of this rank's shard
 *   adam_v   nparams fp32: second moments
 *   sites    comm_bytes: the compression sites' state (comm_state_save)
 *
 * `crc` is the CRC-32C of the header (with crc = 0) and the whole payload.
 * Version 1 files (before checksums: the same header without the last 8
 * bytes) still load, with checked = 0 so the caller can say so.
 *
 * Reading is separate from the trainer's objects (no MPI, no GPT) so the
 * fuzzer (tests/fuzz/) drives exactly the code a resume runs.
 */
#ifndef TRAIN_STATE_H
#define TRAIN_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "model/params.h"

#define STATE_MAGIC 20261129
#define STATE_VERSION 2

typedef struct {
    int32_t magic, version, step, tp, dp, rank;
    int64_t nparams, comm_bytes, data_shard, data_pos;
    uint32_t crc, reserved;     /* version 2 on */
} StateHeader;

/* what the run expects of the file: a mismatch is an error naming the field */
typedef struct {
    int step, tp, dp, rank;
    size_t nparams, comm_bytes;
    const ParamLayout* pl;      /* this rank's shard layout, to name a tensor with a NaN moment */
    size_t comm_bytes_alt;      /* a second accepted size of the site state (0: none): the other site
                                   layout (parallel.sp on / off), which comm_state_load maps */
} StateExpect;

typedef struct {
    StateHeader h;
    float *m, *v;               /* nparams each, malloc'd */
    unsigned char* sites;       /* comm_bytes, malloc'd */
    int checked;                /* 1: the checksum was verified; 0: a version-1 file */
} StateData;

/* Reads and verifies path completely. 0 with *out filled (free with
 * state_free), or -1 with one line in err naming the file. */
int state_read(const char* path, const StateExpect* want, StateData* out, char* err, size_t errlen);
void state_free(StateData* d);
/* Writes path.tmp, fsyncs, renames to path; h->crc is filled in. On failure
 * returns -1 with one line in err and leaves neither file behind. */
int state_write(const char* path, StateHeader* h, const float* m, const float* v, const void* sites, char* err,
                size_t errlen);

#endif /* TRAIN_STATE_H */
