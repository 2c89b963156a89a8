/*
 * train/state.c - the training-state file, see state.h.
 */
#include "train/state.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/crc32c.h"

/* bytes of the version-1 header: the version-2 one without crc and reserved */
#define STATE_V1_HEADER offsetof(StateHeader, crc)

static uint32_t header_crc(const StateHeader* h) {
    StateHeader z = *h;
    z.crc = 0;
    return crc32c_update(0, &z, sizeof(z));
}

/* the tensor of this rank's shard that element i of the moments belongs to */
static const char* tensor_of(const ParamLayout* pl, size_t i) {
    if (!pl) return "?";
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        if (i >= pl->offset[t] && i < pl->offset[t] + pl->local[t]) return params_tensor_name(pl, t);
    return "?";
}

static int check_moments(const char* path, const char* name, const float* x, size_t n, const ParamLayout* pl,
                         char* err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        /* the second moment is a running mean of squares: negative is as corrupt as NaN */
        if (isfinite(x[i]) && (name[5] != 'v' || x[i] >= 0.0f)) continue;
        return check_errorf(err, errlen, "%s holds an invalid %s value %g at element %zu (tensor %s of this rank's "
                            "shard): the training state is corrupt", path, name, x[i], i, tensor_of(pl, i));
    }
    return 0;
}

void state_free(StateData* d) {
    free(d->m);
    free(d->v);
    free(d->sites);
    memset(d, 0, sizeof(*d));
}

int state_read(const char* path, const StateExpect* want, StateData* out, char* err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    FILE* f = fopen(path, "rb");
    if (!f) return check_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    StateHeader* h = &out->h;
    int rc = 0;
    if (fread(h, STATE_V1_HEADER, 1, f) != 1) {
        rc = check_errorf(err, errlen, "%s is too short to be a training-state file", path);
        goto done;
    }
    if (h->magic != STATE_MAGIC || (h->version != 1 && h->version != STATE_VERSION)) {
        rc = check_errorf(err, errlen, "%s is not a training-state file of this version (magic %d, version %d)", path,
                          (int)h->magic, (int)h->version);
        goto done;
    }
    if (h->version >= 2 && fread(&h->crc, sizeof(StateHeader) - STATE_V1_HEADER, 1, f) != 1) {
        rc = check_errorf(err, errlen, "%s is truncated inside its header", path);
        goto done;
    }
    if (h->tp != want->tp || h->dp != want->dp) {
        rc = check_errorf(err, errlen, "%s was written with parallel.tp=%d dp=%d but this run has tp=%d dp=%d; resume "
                          "with the same layout", path, (int)h->tp, (int)h->dp, want->tp, want->dp);
        goto done;
    }
    if (h->step != want->step || h->rank != want->rank) {
        rc = check_errorf(err, errlen, "%s holds step %d of rank %d, but its name says step %d of rank %d: the file "
                          "was renamed or is corrupt", path, (int)h->step, (int)h->rank, want->step, want->rank);
        goto done;
    }
    int sites_ok = h->comm_bytes == (int64_t)want->comm_bytes || (want->comm_bytes_alt && h->comm_bytes == (int64_t)want->comm_bytes_alt);
    if (h->nparams != (int64_t)want->nparams || !sites_ok) {
        rc = check_errorf(err, errlen, "%s does not match this model/config (shard of %lld floats and %lld bytes of "
                          "site state, expected %zu and %zu)", path, (long long)h->nparams, (long long)h->comm_bytes,
                          want->nparams, want->comm_bytes);
        goto done;
    }
    /* sizes are the expected ones now, so the allocations below are bounded by the run's own model */
    size_t n = want->nparams, cb = (size_t)h->comm_bytes;
    out->m = mallocCheck(n * sizeof(float));
    out->v = mallocCheck(n * sizeof(float));
    out->sites = mallocCheck(cb);
    if (fread(out->m, sizeof(float), n, f) != n || fread(out->v, sizeof(float), n, f) != n ||
        fread(out->sites, 1, cb, f) != cb) {
        rc = check_errorf(err, errlen, "%s is truncated (a complete file holds %zu bytes of payload)", path,
                          2 * n * sizeof(float) + cb);
        goto done;
    }
    if (fgetc(f) != EOF) {
        rc = check_errorf(err, errlen, "%s has trailing bytes after its payload: corrupt", path);
        goto done;
    }
    if (h->version >= 2) {
        uint32_t crc = header_crc(h);
        crc = crc32c_update(crc, out->m, n * sizeof(float));
        crc = crc32c_update(crc, out->v, n * sizeof(float));
        crc = crc32c_update(crc, out->sites, cb);
        if (crc != h->crc) {
            rc = check_errorf(err, errlen, "%s fails its checksum (stored CRC-32C %08x, computed %08x): the file is "
                              "corrupt", path, (unsigned)h->crc, (unsigned)crc);
            goto done;
        }
        out->checked = 1;
    }
    rc = check_moments(path, "adam_m", out->m, n, want->pl, err, errlen);
    if (rc == 0) rc = check_moments(path, "adam_v", out->v, n, want->pl, err, errlen);
done:
    fclose(f);
    if (rc != 0) state_free(out);
    return rc;
}

int state_write(const char* path, StateHeader* h, const float* m, const float* v, const void* sites, char* err,
                size_t errlen) {
    size_t n = (size_t)h->nparams, cb = (size_t)h->comm_bytes;
    h->magic = STATE_MAGIC;
    h->version = STATE_VERSION;
    h->reserved = 0;
    uint32_t crc = header_crc(h);
    crc = crc32c_update(crc, m, n * sizeof(float));
    crc = crc32c_update(crc, v, n * sizeof(float));
    h->crc = crc32c_update(crc, sites, cb);
    char tmp[1300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopenErr(tmp, "wb", err, errlen);
    if (!f) return -1;
    int rc = fwriteErr(h, sizeof(*h), 1, f, tmp, err, errlen);
    if (rc == 0) rc = fwriteErr(m, sizeof(float), n, f, tmp, err, errlen);
    if (rc == 0) rc = fwriteErr(v, sizeof(float), n, f, tmp, err, errlen);
    if (rc == 0) rc = fwriteErr(sites, 1, cb, f, tmp, err, errlen);
    if (rc == 0) rc = fcloseErr(f, tmp, err, errlen);
    else fclose(f);
    if (rc == 0 && rename(tmp, path) != 0) rc = check_errorf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc != 0) remove(tmp);
    return rc;
}
