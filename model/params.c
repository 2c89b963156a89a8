/*
 * model/params.c - layout, sharding, initialisation and model files.
 *
 * The sharding lives in one place, shard_of() (which rows and columns of
 * each tensor rank r holds); params_layout, the block list and hence every
 * slicer (params_copy_shard here, the device init in init_cuda.cu) derive
 * from it.
 */
#include "model/params.h"

#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/crc32c.h"

const char* PARAM_NAMES[NUM_PARAM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
static const char* QWEN2_NAMES[Q_NUM] = {"wte", "ln1w", "qkvw", "qkvb", "oprojw", "ln2w", "gateupw", "downw",
                                         "normw", "lmhead"};

const char* params_tensor_name(const ParamLayout* pl, int t) {
    if (t < 0 || t >= NUM_PARAM_TENSORS) return "?";
    if (pl->s.arch == ARCH_QWEN2) return t < Q_NUM ? QWEN2_NAMES[t] : "";
    return PARAM_NAMES[t];
}

int params_tensor_layered(const ParamLayout* pl, int t) {
    if (pl->s.arch == ARCH_QWEN2) return t != Q_WTE && t != Q_NORMW && t != Q_LMHEAD && t < Q_NUM;
    return t != P_WTE && t != P_WPE && t != P_LNFW && t != P_LNFB;
}

size_t params_full_count(const ParamLayout* pl) {
    size_t n = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) n += pl->full[t];
    return n;
}

int params_padded_vocab(int V, int P) {
    /* in 64 bits: V and P come from the config, and an int m or V + m could
     * overflow for a large P before any check sees them; -1 when it does not fit */
    if (V < 1 || P < 1) return -1;
    long long a = 128, b = P;              /* m = lcm(128, P): the smallest multiple of 128 divisible by P */
    while (b) { long long t = a % b; a = b; b = t; }
    long long m = 128 / a * P;
    long long vp = ((long long)V + m - 1) / m * m;
    return vp > INT_MAX ? -1 : (int)vp;
}

int params_shape_check(GPTShape s, int P, int B, int T, char* err, size_t errlen) {
    /* gpt.c and this file hold 3C, 4C and per-rank widths in int, and every
     * size below in size_t: bound them here, before anything is computed
     * with them, in double (exact far beyond the limits checked) */
    int qwen = s.arch == ARCH_QWEN2, KV = shape_kv(&s), F = shape_ffn(&s);
    if (qwen && ((double)s.NH + 2.0 * KV) * (s.C / s.NH) > INT_MAX / 2) {
        return check_errorf(err, errlen, "config error: model.n_head = %d, model.n_kv_head = %d and model.d_model = %d "
                            "are too large: the q, k and v rows must fit in a 32-bit int", s.NH, KV, s.C);
    }
    if (qwen && F > INT_MAX / 2) {
        return check_errorf(err, errlen, "config error: model.d_ff = %d is too large: 2 * d_ff (the gate and up rows) "
                            "must fit in a 32-bit int, so d_ff can be at most %d", F, INT_MAX / 2);
    }
    if (s.C > INT_MAX / 4) {
        return check_errorf(err, errlen, "config error: model.d_model = %d is too large: 4 * d_model (the MLP width) must "
                            "fit in a 32-bit int, so d_model can be at most %d", s.C, INT_MAX / 4);
    }
    if (s.Vp < 0) {
        return check_errorf(err, errlen, "config error: model.vocab_size = %d padded to a multiple of 128 and of "
                            "parallel.tp = %d does not fit in a 32-bit int", s.V, P);
    }
    double C = s.C, L = s.L, params = (double)s.Vp * C + (double)s.maxT * C + L * (12.0 * C * C + 13.0 * C) + 2.0 * C;
    if (qwen) {
        double qkv = ((double)s.NH + 2.0 * KV) * (C / s.NH);
        params = (double)s.Vp * C * (s.tied ? 1.0 : 2.0) + L * (qkv * (C + 1.0) + C * C + 3.0 * C * F + 2.0 * C) + C;
    }
    double ffw = qwen ? 2.0 * F : 4.0 * C;
    double N = (double)B * T, widest = ffw > (double)s.Vp / P ? ffw : (double)s.Vp / P;
    const double limit = 1e15;   /* bytes: far beyond any machine, far below size_t overflow */
    if (params * 4.0 > limit || N * widest * 4.0 * (L + 2.0) > limit) {
        return check_errorf(err, errlen, "config error: the model is far too large for any machine (%.3g parameters, "
                            "%.3g activation values): check model.n_layer, model.d_model, model.vocab_size, "
                            "train.batch_size and train.seq_len", params, N * widest * (L + 2.0));
    }
    return 0;
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

/* Qwen2's tensors (params.h); slots from Q_NUM on are empty */
static Shard shard_of_qwen2(const ParamLayout* pl, int t) {
    const GPTShape* s = &pl->s;
    int P = pl->P, r = pl->r, C = s->C, L = s->L, hs = s->C / s->NH, F = s->F;
    int H = s->NH * hs, KH = s->KV * hs, Hr = H / P, KHr = KH / P, Fr = F / P, Vr = s->Vp / P;
    Shard h = {.reps = L, .nblk = 1, .R = 1, .Cc = C};
    switch (t) {
    case Q_WTE: case Q_LMHEAD:
        h.reps = t == Q_LMHEAD && s->tied ? 0 : 1;
        h.R = s->Vp; h.r0[0] = r * Vr; h.nr[0] = Vr; h.c0 = 0; h.nc = C; return h;
    case Q_QKVW: case Q_QKVB:
        h.R = H + 2 * KH; h.Cc = t == Q_QKVW ? C : 1; h.nblk = 3;
        h.r0[0] = r * Hr; h.r0[1] = H + r * KHr; h.r0[2] = H + KH + r * KHr;
        h.nr[0] = Hr; h.nr[1] = h.nr[2] = KHr; h.c0 = 0; h.nc = h.Cc;
        return h;
    case Q_OPROJW: h.R = C; h.Cc = H; h.r0[0] = 0; h.nr[0] = C; h.c0 = r * Hr; h.nc = Hr; return h;
    case Q_GATEUPW:
        h.R = 2 * F; h.nblk = 2; h.r0[0] = r * Fr; h.r0[1] = F + r * Fr; h.nr[0] = h.nr[1] = Fr; h.c0 = 0; h.nc = C;
        return h;
    case Q_DOWNW: h.R = C; h.Cc = F; h.r0[0] = 0; h.nr[0] = C; h.c0 = r * Fr; h.nc = Fr; return h;
    case Q_LN1W: case Q_LN2W: break;
    case Q_NORMW: h.reps = 1; break;
    default: h.reps = 0; break;   /* unused slot */
    }
    h.r0[0] = 0; h.nr[0] = h.R; h.c0 = 0; h.nc = h.Cc;   /* replicated: the whole tensor */
    return h;
}

static Shard shard_of(const ParamLayout* pl, int t) {
    const GPTShape* s = &pl->s;
    if (s->arch == ARCH_QWEN2) return shard_of_qwen2(pl, t);
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
    if (s.arch == ARCH_QWEN2) {
        pl->decayed[Q_WTE] = pl->decayed[Q_QKVW] = pl->decayed[Q_OPROJW] = 1;
        pl->decayed[Q_GATEUPW] = pl->decayed[Q_DOWNW] = pl->decayed[Q_LMHEAD] = 1;
        return;
    }
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
        FATAL("params_shard_block: block %d of tensor %s is out of range (%d blocks)", i, params_tensor_name(pl, t),
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
    if (pl->s.arch == ARCH_QWEN2) {   /* transformers' Qwen2 init: N(0, 0.02) weights, zero biases, unit gains */
        *fill = (t == Q_LN1W || t == Q_LN2W || t == Q_NORMW) ? 1.0f : 0.0f;
        return (t == Q_QKVB || *fill == 1.0f || t >= Q_NUM) ? 0.0f : 0.02f;
    }
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
        if (t == P_WTE || (s->arch == ARCH_QWEN2 && t == Q_LMHEAD && n > 0)) memset(p + (size_t)s->V * s->C, 0, (size_t)(s->Vp - s->V) * s->C * sizeof(float));
        off += n;
    }
    return full;
}

#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3

/* Where our checksum lives in llm.c's 256-int header. llm.c's loaders read
 * header ints 0..7 (magic, version, maxT, V, L, NH, C, Vp) and ignore the
 * rest, which its writers leave zero; so a tag in [8] and the CRC-32C in [9]
 * keep the file readable by llm.c, and a zero [8] tells us the file came from
 * a writer without checksums (llm.c itself, or this trainer before it had
 * them). The CRC covers the whole file, header included, with [9] as zero. */
#define MODEL_HDR_CRC_TAG 8
#define MODEL_HDR_CRC 9
#define MODEL_CRC_TAG 0x43524343 /* "CCRC" */

/* the file's size for a model of our shape with the file's padded vocab, or 0
 * when that does not fit in size_t (a corrupt or hostile header) */
static size_t model_file_bytes(const ParamLayout* pl, int fileVp) {
    const GPTShape* s = &pl->s;
    size_t rest = params_full_count(pl) - pl->full[P_WTE], wte, floats, bytes;
    if (__builtin_mul_overflow((size_t)fileVp, (size_t)s->C, &wte) || __builtin_add_overflow(wte, rest, &floats) ||
        __builtin_mul_overflow(floats, sizeof(float), &bytes) || __builtin_add_overflow(bytes, 256 * sizeof(int), &bytes))
        return 0;
    return bytes;
}

int params_file_check(const char* path, const ParamLayout* pl, char* err, size_t errlen) {
    if (pl->s.arch != ARCH_GPT2) {
        return check_errorf(err, errlen, "error: %s: llm.c model files hold GPT-2 only; a model.arch = \"qwen2\" model "
                            "loads from a Hugging Face directory (config.json + *.safetensors)", path);
    }
    FILE* f = fopen(path, "rb");
    if (!f) return check_errorf(err, errlen, "error: model.init_from: cannot open %s", path);
    int hdr[256];
    size_t got = fread(hdr, sizeof(int), 256, f);
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    fclose(f);
    if (got != 256) return check_errorf(err, errlen, "error: %s is too short to be a model file", path);
    if (hdr[0] != MODEL_MAGIC) {
        return check_errorf(err, errlen, "error: %s is not an llm.c model file (magic %d, expected %d)", path, hdr[0],
                            MODEL_MAGIC);
    }
    if (hdr[1] != MODEL_VERSION_FP32) {
        return check_errorf(err, errlen, "error: %s has model-file version %d; only version 3 (fp32) loads. Re-export it "
                            "in fp32", path, hdr[1]);
    }
    const GPTShape* s = &pl->s;
    const char* names[5] = {"model.max_seq_len", "model.vocab_size", "model.n_layer", "model.n_head", "model.d_model"};
    int want[5] = {s->maxT, s->V, s->L, s->NH, s->C};
    for (int k = 0; k < 5; k++) {
        if (hdr[2 + k] != want[k]) {
            return check_errorf(err, errlen, "error: %s does not match the config: %s is %d in the file but %d in the "
                                "config", path, names[k], hdr[2 + k], want[k]);
        }
    }
    /* the padded vocab is the one header field the shape does not fix: any
     * value >= V whose size arithmetic fits, checked before it is used */
    size_t expect = hdr[7] >= s->V ? model_file_bytes(pl, hdr[7]) : 0;
    if (expect == 0) {
        return check_errorf(err, errlen, "error: %s has padded vocab %d in its header, but it must be at least the "
                            "vocab size %d (and its size must fit in memory): corrupt header", path, hdr[7], s->V);
    }
    if (size < 0 || (size_t)size != expect) {
        return check_errorf(err, errlen, "error: %s is %ld bytes but a model of this shape (padded vocab %d) has %zu: "
                            "truncated or corrupt", path, size, hdr[7], expect);
    }
    return 0;
}

/* The first non-finite value of a full model, as "tensor (layer l) index i":
 * a NaN in a loaded file is a corrupt or diverged model, and it must be named
 * at load, not found later as a non-finite loss. Returns 0 when all finite. */
int params_first_nonfinite(const ParamLayout* pl, const float* full, char* where, size_t cap) {
    const float* p = full;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        size_t n = pl->full[t];
        for (size_t i = 0; i < n; i++) {
            if (isfinite(p[i])) continue;
            int layered = params_tensor_layered(pl, t);
            size_t per = layered ? n / (size_t)pl->s.L : n;
            const char* name = params_tensor_name(pl, t);
            if (layered) snprintf(where, cap, "tensor %s, layer %zu, element %zu (%g)", name, i / per, i % per, p[i]);
            else snprintf(where, cap, "tensor %s, element %zu (%g)", name, i, p[i]);
            return 1;
        }
        p += n;
    }
    return 0;
}

int params_read_full(const char* path, const ParamLayout* pl, float** out, int* checked, char* err, size_t errlen) {
    *out = NULL;
    *checked = 0;
    if (params_file_check(path, pl, err, errlen) != 0) {
        memmove(err, err + 7, strlen(err + 7) + 1);   /* drop the "error: " prefix: callers add their own */
        return -1;
    }
    const GPTShape* s = &pl->s;
    FILE* f = fopen(path, "rb");
    if (!f) return check_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    int hdr[256];
    size_t total = params_full_count(pl);
    float* full = callocCheck(total, sizeof(float));
    int ok = fread(hdr, sizeof(int), 256, f) == 256;
    uint32_t stored = (uint32_t)hdr[MODEL_HDR_CRC];
    int has_crc = hdr[MODEL_HDR_CRC_TAG] == MODEL_CRC_TAG;
    hdr[MODEL_HDR_CRC] = 0;
    uint32_t crc = crc32c_update(0, hdr, sizeof(hdr));
    /* wte: the real V rows, then the file's padding rows (read for the
     * checksum, not kept: our padding stays zero), then everything else */
    size_t real = (size_t)s->V * s->C, pad = (size_t)(hdr[7] - s->V) * s->C;
    ok = ok && fread(full, sizeof(float), real, f) == real;
    if (ok) crc = crc32c_update(crc, full, real * sizeof(float));
    float chunk[4096];
    while (ok && pad > 0) {
        size_t k = pad < 4096 ? pad : 4096;
        ok = fread(chunk, sizeof(float), k, f) == k;
        if (ok) crc = crc32c_update(crc, chunk, k * sizeof(float));
        pad -= k;
    }
    size_t rest = total - pl->full[P_WTE];
    ok = ok && fread(full + pl->full[P_WTE], sizeof(float), rest, f) == rest;
    if (ok) crc = crc32c_update(crc, full + pl->full[P_WTE], rest * sizeof(float));
    fclose(f);
    char where[160];
    int rc = 0;
    if (!ok) rc = check_errorf(err, errlen, "reading %s failed (it changed while being read?)", path);
    else if (has_crc && crc != stored)
        rc = check_errorf(err, errlen, "%s fails its checksum (stored CRC-32C %08x, computed %08x): the file is "
                          "corrupt", path, stored, crc);
    else if (params_first_nonfinite(pl, full, where, sizeof(where)))
        rc = check_errorf(err, errlen, "%s holds a non-finite weight at %s: the model is corrupt or had diverged "
                          "when it was saved", path, where);
    if (rc != 0) {
        free(full);
        return rc;
    }
    *checked = has_crc;
    *out = full;
    return 0;
}

int params_save_full(const char* path, const ParamLayout* pl, const float* full, char* err, size_t errlen) {
    if (pl->s.arch != ARCH_GPT2) return check_errorf(err, errlen, "%s: llm.c model files hold GPT-2 only", path);
    const GPTShape* s = &pl->s;
    int hdr[256] = {0};
    hdr[0] = MODEL_MAGIC;
    hdr[1] = MODEL_VERSION_FP32;
    hdr[2] = s->maxT; hdr[3] = s->V; hdr[4] = s->L; hdr[5] = s->NH; hdr[6] = s->C; hdr[7] = s->Vp;
    hdr[MODEL_HDR_CRC_TAG] = MODEL_CRC_TAG;
    size_t total = params_full_count(pl);
    uint32_t crc = crc32c_update(0, hdr, sizeof(hdr));    /* with hdr[MODEL_HDR_CRC] still zero */
    hdr[MODEL_HDR_CRC] = (int)crc32c_update(crc, full, total * sizeof(float));
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopenErr(tmp, "wb", err, errlen);
    if (!f) return -1;
    int rc = fwriteErr(hdr, sizeof(int), 256, f, tmp, err, errlen);
    if (rc == 0) rc = fwriteErr(full, sizeof(float), total, f, tmp, err, errlen);
    if (rc == 0) rc = fcloseErr(f, tmp, err, errlen);   /* flushes and fsyncs: the data is on disk before the rename */
    else fclose(f);
    if (rc == 0 && rename(tmp, path) != 0) rc = check_errorf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc != 0) remove(tmp);   /* never leave a partial file to fill the disk */
    return rc;
}
