/*
 * model/params.c - layout, sharding, initialisation and model files.
 *
 * The sharding lives in one place, shard_of() (which rows and columns of
 * each tensor rank r holds); params_layout, the block list and hence every
 * slicer (params_copy_shard here, the device init in init_cuda.cu) derive
 * from it.
 */
#include "model/params.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

const char* PARAM_NAMES[NUM_PARAM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

size_t params_full_count(const ParamLayout* pl) {
    size_t n = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) n += pl->full[t];
    return n;
}

int params_padded_vocab(int V, int P) {
    int m = 128;
    while (m % P != 0) m += 128;         /* smallest multiple of 128 divisible by P */
    return (V + m - 1) / m * m;
}

/* A shard of one tensor = for each of `reps` repetitions (layers), the block
 * rows [r0, r0+nr) x cols [c0, c0+nc) of a (R x Cc) matrix, possibly several
 * row blocks (q, k, v). */
typedef struct {
    int reps, R, Cc;              /* full matrix per repetition */
    int nblk;                     /* row blocks */
    int r0[3], nr[3];
    int c0, nc;
} Shard;

static Shard shard_of(const ParamLayout* pl, int t) {
    const GPTShape* s = &pl->s;
    int P = pl->P, r = pl->r, C = s->C, L = s->L;
    int Cr = C / P, Fr = 4 * C / P, Vr = s->Vp / P;
    Shard h = {.reps = 1, .nblk = 1};
    switch (t) {
    case P_WTE: h.R = s->Vp; h.Cc = C; h.r0[0] = r * Vr; h.nr[0] = Vr; h.c0 = 0; h.nc = C; return h;
    case P_WPE: h.R = s->maxT; h.Cc = C; break;
    case P_QKVW: case P_QKVB:
        h.reps = L; h.R = 3 * C; h.Cc = t == P_QKVW ? C : 1; h.nblk = 3;
        for (int k = 0; k < 3; k++) { h.r0[k] = k * C + r * Cr; h.nr[k] = Cr; }
        h.c0 = 0; h.nc = h.Cc;
        return h;
    case P_ATTPROJW: h.reps = L; h.R = C; h.Cc = C; h.r0[0] = 0; h.nr[0] = C; h.c0 = r * Cr; h.nc = Cr; return h;
    case P_FCW: case P_FCB:
        h.reps = L; h.R = 4 * C; h.Cc = t == P_FCW ? C : 1; h.r0[0] = r * Fr; h.nr[0] = Fr; h.c0 = 0; h.nc = h.Cc;
        return h;
    case P_FCPROJW: h.reps = L; h.R = C; h.Cc = 4 * C; h.r0[0] = 0; h.nr[0] = C; h.c0 = r * Fr; h.nc = Fr; return h;
    case P_LNFW: case P_LNFB: h.R = 1; h.Cc = C; break;
    default: h.reps = L; h.R = 1; h.Cc = C; break;   /* per-layer vectors of C, replicated */
    }
    h.r0[0] = 0; h.nr[0] = h.R; h.c0 = 0; h.nc = h.Cc;   /* replicated: the whole tensor */
    return h;
}

void params_layout(ParamLayout* pl, GPTShape s, int P, int r) {
    memset(pl, 0, sizeof(*pl));
    pl->s = s;
    pl->P = P;
    pl->r = r;
    size_t off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        Shard h = shard_of(pl, t);
        size_t rows = 0;
        for (int k = 0; k < h.nblk; k++) rows += (size_t)h.nr[k];
        pl->full[t] = (size_t)h.reps * h.R * h.Cc;
        pl->local[t] = (size_t)h.reps * rows * h.nc;
        pl->offset[t] = off;
        pl->sharded[t] = pl->local[t] != pl->full[t];
        off += pl->local[t];
    }
    pl->total = off;
    pl->decayed[P_WTE] = pl->decayed[P_WPE] = pl->decayed[P_QKVW] = 1;
    pl->decayed[P_ATTPROJW] = pl->decayed[P_FCW] = pl->decayed[P_FCPROJW] = 1;
}

/* The blocks of a shard: for each repetition, its row blocks in order. A
 * replicated tensor is one block, all of it (its repetitions are contiguous
 * in both the full tensor and the shard), so slicers copy it in one go. */
int params_shard_nblocks(const ParamLayout* pl, int t) {
    if (!pl->sharded[t]) return 1;
    Shard h = shard_of(pl, t);
    return h.reps * h.nblk;
}

ShardBlock params_shard_block(const ParamLayout* pl, int t, int i) {
    Shard h = shard_of(pl, t);
    if (i < 0 || i >= params_shard_nblocks(pl, t)) {
        FATAL("params_shard_block: block %d of tensor %s is out of range (%d blocks)", i, PARAM_NAMES[t],
              params_shard_nblocks(pl, t));
    }
    if (!pl->sharded[t]) {
        ShardBlock whole = {.src = 0, .ld = (size_t)h.Cc, .dst = 0, .rows = h.reps * h.R, .cols = h.Cc};
        return whole;
    }
    int rep = i / h.nblk, k = i % h.nblk;
    size_t rows_per_rep = 0, rows_before = 0;   /* shard rows of one repetition, and of the blocks before k */
    for (int j = 0; j < h.nblk; j++) {
        rows_per_rep += (size_t)h.nr[j];
        if (j < k) rows_before += (size_t)h.nr[j];
    }
    ShardBlock b = {
        .src = (size_t)rep * h.R * h.Cc + (size_t)h.r0[k] * h.Cc + (size_t)h.c0,
        .ld = (size_t)h.Cc,
        .dst = ((size_t)rep * rows_per_rep + rows_before) * (size_t)h.nc,
        .rows = h.nr[k],
        .cols = h.nc,
    };
    return b;
}

void params_copy_shard(const ParamLayout* pl, float* full, float* local, int to_local) {
    float* ft = full;   /* tensor t of the full model */
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        float* lt = local + pl->offset[t];
        int nb = params_shard_nblocks(pl, t);
        for (int i = 0; i < nb; i++) {
            ShardBlock b = params_shard_block(pl, t, i);
            size_t bytes = (size_t)b.cols * sizeof(float);
            for (int row = 0; row < b.rows; row++) {
                float* f = ft + b.src + (size_t)row * b.ld;
                float* l = lt + b.dst + (size_t)row * b.cols;
                if (to_local) memcpy(l, f, bytes);
                else memcpy(f, l, bytes);
            }
        }
        ft += pl->full[t];
    }
}

/* splitmix64: a counter-based hash, so value i of tensor t is a pure function
 * of (seed, t, i): no sequential RNG state, and every TP degree sees the same
 * full model. */
static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float normal_at(uint64_t seed, int t, size_t i) {
    uint64_t a = mix64(seed ^ mix64(((uint64_t)t << 48) ^ (2 * (uint64_t)i)));
    uint64_t b = mix64(seed ^ mix64(((uint64_t)t << 48) ^ (2 * (uint64_t)i + 1)));
    double u1 = ((double)(a >> 11) + 1.0) / 9007199254740993.0;   /* (0, 1] */
    double u2 = (double)(b >> 11) / 9007199254740992.0;           /* [0, 1) */
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));  /* Box-Muller */
}

float params_init_std(const ParamLayout* pl, int t, float* fill) {
    *fill = (t == P_LN1W || t == P_LN2W || t == P_LNFW) ? 1.0f : 0.0f;
    switch (t) {
    case P_WTE: case P_WPE: case P_QKVW: case P_FCW: return 0.02f;
    case P_ATTPROJW: case P_FCPROJW: return 0.02f / sqrtf(2.0f * (float)pl->s.L);  /* GPT-2's residual scaling */
    default: return 0.0f;
    }
}

float* params_init_full(const ParamLayout* pl, unsigned long long seed) {
    size_t total = params_full_count(pl);
    float* full = mallocCheck(total * sizeof(float));
    const GPTShape* s = &pl->s;
    size_t off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        float* p = full + off;
        size_t n = pl->full[t];
        float fill, std = params_init_std(pl, t, &fill);
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            p[i] = std > 0.0f ? std * normal_at(seed, t, i) : fill;
        }
        if (t == P_WTE) memset(p + (size_t)s->V * s->C, 0, (size_t)(s->Vp - s->V) * s->C * sizeof(float));
        off += n;
    }
    return full;
}

#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3

int params_file_check(const char* path, const ParamLayout* pl, char* err, size_t errlen) {
    FILE* f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "error: model.init_from: cannot open %s", path); return -1; }
    int hdr[256];
    size_t got = fread(hdr, sizeof(int), 256, f);
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    fclose(f);
    if (got != 256) { snprintf(err, errlen, "error: %s is too short to be a model file", path); return -1; }
    if (hdr[0] != MODEL_MAGIC) {
        snprintf(err, errlen, "error: %s is not an llm.c model file (magic %d, expected %d)", path, hdr[0], MODEL_MAGIC);
        return -1;
    }
    if (hdr[1] != MODEL_VERSION_FP32) {
        snprintf(err, errlen, "error: %s has model-file version %d; only version 3 (fp32) loads. Re-export it in fp32",
                 path, hdr[1]);
        return -1;
    }
    const GPTShape* s = &pl->s;
    const char* names[5] = {"model.max_seq_len", "model.vocab_size", "model.n_layer", "model.n_head", "model.d_model"};
    int want[5] = {s->maxT, s->V, s->L, s->NH, s->C};
    for (int k = 0; k < 5; k++) {
        if (hdr[2 + k] != want[k]) {
            snprintf(err, errlen, "error: %s does not match the config: %s is %d in the file but %d in the config",
                     path, names[k], hdr[2 + k], want[k]);
            return -1;
        }
    }
    size_t total = params_full_count(pl);
    size_t expect = 256 * sizeof(int) + (total + (size_t)(hdr[7] - s->Vp) * s->C) * sizeof(float);
    if (hdr[7] < s->V || size < 0 || (size_t)size != expect) {
        snprintf(err, errlen, "error: %s is %ld bytes but a model of this shape (padded vocab %d) has %zu: truncated or corrupt",
                 path, size, hdr[7], expect);
        return -1;
    }
    return 0;
}

float* params_load_full(const char* path, const ParamLayout* pl) {
    char err[1024];
    if (params_file_check(path, pl, err, sizeof(err)) != 0) FATAL("%s", err + 7);   /* skip "error: " */
    const GPTShape* s = &pl->s;
    FILE* f = fopenCheck(path, "rb");
    int hdr[256];
    freadCheck(hdr, sizeof(int), 256, f, path);
    int fileVp = hdr[7];
    size_t total = params_full_count(pl);
    float* full = callocCheck(total, sizeof(float));
    /* wte: the real V rows, then skip the file's padding; ours stays zero */
    freadCheck(full, sizeof(float), (size_t)s->V * s->C, f, path);
    if (fseek(f, (long)((size_t)(fileVp - s->V) * s->C * sizeof(float)), SEEK_CUR) != 0) FATAL("seek failed in %s", path);
    freadCheck(full + pl->full[P_WTE], sizeof(float), total - pl->full[P_WTE], f, path);
    fcloseCheck(f, path);
    return full;
}

void params_save_full(const char* path, const ParamLayout* pl, const float* full) {
    const GPTShape* s = &pl->s;
    int hdr[256] = {0};
    hdr[0] = MODEL_MAGIC;
    hdr[1] = MODEL_VERSION_FP32;
    hdr[2] = s->maxT; hdr[3] = s->V; hdr[4] = s->L; hdr[5] = s->NH; hdr[6] = s->C; hdr[7] = s->Vp;
    size_t total = params_full_count(pl);
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopenCheck(tmp, "wb");
    fwriteCheck(hdr, sizeof(int), 256, f, tmp);
    fwriteCheck(full, sizeof(float), total, f, tmp);
    fcloseCheck(f, tmp);
    if (rename(tmp, path) != 0) FATAL("cannot rename %s to %s", tmp, path);
}
