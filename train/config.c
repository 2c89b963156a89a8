/*
 * train/config.c - loading and validating the run configuration (config.h).
 *
 * The whole file hangs off ONE table, cfg_keys: each key is declared once,
 * with its dotted path (the stringified struct member, so the path and the
 * field cannot drift apart), its type, its default and its valid range or
 * choices. Defaults, the JSON walk, --set overrides, range checks and the
 * JSON output are loops over that table; adding a setting is adding a line.
 *
 * Order of a load: defaults -> JSON file -> --set overrides (in order) ->
 * derived defaults -> per-key range checks -> checks across keys. Types are
 * checked when a value is applied (that is where we know its JSON type and
 * where it came from); ranges (and enum choices that only the GPU build
 * has, e.g. model.init = "device") are checked once at the end, so a file
 * value that a --set replaces never causes an error, and the defaults are
 * checked by the same code.
 */
#define _POSIX_C_SOURCE 200809L /* glob, stat */

#include "train/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/check.h"
#include "compress/methods.h"

/* ----------------------------------------------------------------------------
 * the table */

typedef enum { CFG_INT, CFG_FLOAT, CFG_BOOL, CFG_STR, CFG_ENUM, CFG_GROUP } CfgType;
enum { CFG_LO_OPEN = 1, CFG_HI_OPEN = 2 }; /* exclusive ends of a float range */

typedef struct {
    const char* path;    /* dotted key, e.g. "train.lr" */
    size_t offset, size; /* where the field lives in Config and its bytes */
    CfgType type;
    double def;          /* default of numbers and booleans */
    const char* sdef;    /* default of strings and enums */
    double lo, hi;       /* valid range of numbers */
    int open;            /* CFG_LO_OPEN | CFG_HI_OPEN */
    const char* choices; /* enums: "a|b|c" */
    const char* gpu_only; /* enums: the choices only the GPU build has, "a|b"; refused in the CPU build */
    const char* note;    /* why the range is what it is, shown in the error */
} CfgKey;

/* The GPU build (build/train_gpu) compiles this file with -DOPS_BF16. */
#ifdef OPS_BF16
#define CFG_GPU_BUILD 1
#else
#define CFG_GPU_BUILD 0
#endif

#define CFG_AT(m) .path = #m, .offset = offsetof(Config, m), .size = sizeof(((Config*)0)->m)
#define K_INT(m, d, l, h) { CFG_AT(m), .type = CFG_INT, .def = d, .lo = l, .hi = h }
#define K_FLOAT(m, d, l, h, o) { CFG_AT(m), .type = CFG_FLOAT, .def = d, .lo = l, .hi = h, .open = o }
#define K_BOOL(m, d) { CFG_AT(m), .type = CFG_BOOL, .def = d }
#define K_STR(m, d) { CFG_AT(m), .type = CFG_STR, .sdef = d }
#define K_ENUM(m, d, ch) { CFG_AT(m), .type = CFG_ENUM, .sdef = d, .choices = ch }
#define K_GROUP(m, d) { CFG_AT(m), .type = CFG_GROUP, .def = d, .lo = 16, .hi = 256 }
#define NOMAX INT_MAX

static const CfgKey cfg_keys[] = {
    K_INT(model.n_layer, 4, 1, NOMAX),
    K_INT(model.n_head, 4, 1, NOMAX),
    K_INT(model.d_model, 128, 1, NOMAX),
    K_INT(model.max_seq_len, 128, 1, NOMAX),
    { CFG_AT(model.vocab_size), .type = CFG_INT, .def = 256, .lo = 2, .hi = 65536,
      .note = "shards store token ids as uint16" },
    K_STR(model.init_from, ""),
    K_ENUM(model.arch, "gpt2", "gpt2|qwen2"),
    K_INT(model.n_kv_head, 0, 0, NOMAX), /* 0 = model.n_head */
    K_INT(model.d_ff, 0, 0, NOMAX),      /* 0 = 4 * model.d_model */
    K_FLOAT(model.norm_eps, 1e-6, 0, 1, CFG_LO_OPEN),
    K_FLOAT(model.rope_theta, 10000, 0, FLT_MAX, CFG_LO_OPEN),
    K_BOOL(model.tie_embeddings, 1),
    { CFG_AT(model.init), .type = CFG_ENUM, .sdef = "auto", .choices = "host|device|auto", .gpu_only = "device" },
    K_STR(data.train, "datasets/bible/bible_train.bin"),
    K_STR(data.val, "datasets/bible/bible_val.bin"),
    K_STR(data.tokenizer, ""),
    K_INT(train.batch_size, 8, 1, NOMAX),
    K_INT(train.seq_len, 64, 1, NOMAX), /* <= model.max_seq_len, checked across keys */
    K_INT(train.steps, 200, 0, NOMAX),
    K_FLOAT(train.lr, 1e-3, 0, FLT_MAX, CFG_LO_OPEN),
    K_INT(train.warmup_steps, 20, 0, NOMAX),
    K_FLOAT(train.lr_min_frac, 0.1, 0, 1, 0),
    K_FLOAT(train.weight_decay, 0.1, 0, FLT_MAX, 0),
    K_FLOAT(train.beta1, 0.9, 0, 1, CFG_HI_OPEN),
    K_FLOAT(train.beta2, 0.95, 0, 1, CFG_HI_OPEN),
    K_FLOAT(train.eps, 1e-8, 0, FLT_MAX, CFG_LO_OPEN),
    K_FLOAT(train.grad_clip, 1.0, 0, FLT_MAX, 0),
    K_INT(train.seed, 1337, INT_MIN, NOMAX),
    K_INT(train.eval_every, 50, 0, NOMAX),
    K_INT(train.eval_batches, 8, 1, NOMAX),
    K_INT(train.sample_every, 50, 0, NOMAX), /* follows eval_every unless set */
    K_INT(train.sample_len, 64, 1, NOMAX),
    K_BOOL(train.cuda_graph, -1), /* -1: not set (config_cuda_graph) */
    K_INT(parallel.tp, 1, 1, NOMAX),
    K_INT(parallel.dp, 1, 1, NOMAX),
    K_BOOL(parallel.sp, 0),
    K_ENUM(compress.method, "none", (&(COMPRESS_METHOD_BAR_NAMES "|auto")[1])), /* every row of compress/methods.h, or auto */
    K_ENUM(compress.auto_method, "taco", COMPRESS_METHOD_CHOICES), /* the candidate of "auto" */
    K_INT(compress.auto_steps, 3, 1, 1000),
    K_FLOAT(compress.auto_min_speedup, 1.0, 0, FLT_MAX, 0),
    K_FLOAT(compress.auto_max_err, 0.1, 0, FLT_MAX, 0),
    K_ENUM(compress.format_fwd, "e4m3", "e4m3|e5m2"),
    K_ENUM(compress.format_bwd, "e4m3", "e4m3|e5m2"),
    K_GROUP(compress.group_size, 64),
    K_INT(compress.calib_steps, 10, 0, NOMAX),
    K_BOOL(compress.hadamard, 1),
    K_BOOL(compress.adaptive_scale, 1),
    K_BOOL(compress.dual_scale, 1),
    K_ENUM(compress.scale, "current", "current|delayed"),
    K_ENUM(compress.rounding, "nearest", "nearest|stochastic"),
    K_BOOL(compress.fwd, 1),
    K_BOOL(compress.bwd, 1),
    K_BOOL(compress.embed, 1),
    K_BOOL(compress.lm_head, 1),
    K_BOOL(compress.skip_first_layer, 0),
    K_BOOL(compress.skip_last_layer, 0),
    K_INT(compress.stats_every, 10, 0, NOMAX),
    K_INT(compress.dump_step, -1, -1, NOMAX),
    K_STR(compress.dump_sites, ""),
    K_STR(compress.dump_dir, ""),
    { CFG_AT(comm.backend), .type = CFG_ENUM, .sdef = "mpi", .choices = "mpi|nccl", .gpu_only = "nccl" },
    K_INT(comm.pipeline_depth, 4, 1, 64),
    K_BOOL(comm.fuse, 1),
    K_ENUM(comm.allreduce, "auto", "two_shot|one_shot|auto"),
    K_INT(comm.one_shot_extra_kb, COMM_ONE_SHOT_EXTRA_KB_DEFAULT, 0, NOMAX),
    { CFG_AT(comm.transport), .type = CFG_ENUM, .sdef = "auto", .choices = "auto|staged|ipc|nccl", .gpu_only = "ipc|nccl" },
    K_INT(comm.sp_chunks, 0, 0, 64), /* 0: 4 with comm.overlap, else 1 (config_sp_chunks) */
    K_BOOL(comm.overlap, 0),
    K_FLOAT(comm.timeout_s, 600, 0, FLT_MAX, 0), /* 0 = no watchdog */
    K_STR(log.dir, "runs/default"),
    K_INT(log.every, 1, 1, NOMAX),
    K_STR(checkpoint.dir, ""), /* "" = log.dir + "/ckpt" */
    K_INT(checkpoint.every, 0, 0, NOMAX),
    K_BOOL(checkpoint.resume, 0),
    K_INT(checkpoint.keep, 0, 0, NOMAX), /* 0 = keep every checkpoint */
};
#define CFG_NKEYS ((int)(sizeof(cfg_keys) / sizeof(cfg_keys[0])))

/* Where a key's value came from, for error messages: NULL/NULL = default. */
typedef struct {
    const char* file;
    const char* set;
} CfgSrc;

/* ----------------------------------------------------------------------------
 * small helpers */

static void* cfg_field(Config* c, const CfgKey* k) {
    return (char*)c + k->offset;
}

static const void* cfg_cfield(const Config* c, const CfgKey* k) {
    return (const char*)c + k->offset;
}

static const CfgKey* cfg_find(const char* path) {
    for (int i = 0; i < CFG_NKEYS; i++) {
        if (strcmp(cfg_keys[i].path, path) == 0) return &cfg_keys[i];
    }
    return NULL;
}

/* Length of the section part of a key ("train" in "train.lr"). */
static size_t cfg_section_len(const char* path) {
    const char* dot = strchr(path, '.');
    return dot ? (size_t)(dot - path) : strlen(path);
}

static int cfg_is_section(const char* name) {
    size_t n = strlen(name);
    for (int i = 0; i < CFG_NKEYS; i++) {
        if (cfg_section_len(cfg_keys[i].path) == n && strncmp(cfg_keys[i].path, name, n) == 0) return 1;
    }
    return 0;
}

/* Edit distance of two short strings (capped inputs: keys are short). */
static int cfg_distance(const char* a, size_t na, const char* b, size_t nb) {
    enum { MAXLEN = 64 };
    if (na >= MAXLEN || nb >= MAXLEN) return INT_MAX;
    int prev[MAXLEN + 1], cur[MAXLEN + 1];
    for (size_t j = 0; j <= nb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (nb + 1));
    }
    return prev[nb];
}

/* A likely intended key for an unknown one: the same name in another
 * section ("train.n_layer" -> "model.n_layer"), else the nearest key within
 * 3 edits ("train.lrr" -> "train.lr"). NULL if nothing is close. */
static const char* cfg_suggest_key(const char* path) {
    const char* leaf = strrchr(path, '.');
    if (leaf) {
        for (int i = 0; i < CFG_NKEYS; i++) {
            if (strcmp(strrchr(cfg_keys[i].path, '.'), leaf) == 0) return cfg_keys[i].path;
        }
    }
    const char* best = NULL;
    int bestd = 4;
    for (int i = 0; i < CFG_NKEYS; i++) {
        int d = cfg_distance(path, strlen(path), cfg_keys[i].path, strlen(cfg_keys[i].path));
        if (d < bestd) {
            bestd = d;
            best = cfg_keys[i].path;
        }
    }
    return best;
}

/* The nearest section name within 2 edits, copied into out; 0 if none. */
static int cfg_suggest_section(const char* name, char* out, size_t outlen) {
    int bestd = 3, found = 0;
    for (int i = 0; i < CFG_NKEYS; i++) {
        size_t n = cfg_section_len(cfg_keys[i].path);
        int d = cfg_distance(name, strlen(name), cfg_keys[i].path, n);
        if (d < bestd && n < outlen) {
            bestd = d;
            memcpy(out, cfg_keys[i].path, n);
            out[n] = '\0';
            found = 1;
        }
    }
    return found;
}

/* A JSON value as a user would write it, short, for "got ..." in errors. */
static void cfg_describe(const cJSON* v, char* out, size_t len) {
    if (cJSON_IsString(v)) {
        const char* s = v->valuestring;
        size_t n = strlen(s), show = n > 40 ? 40 : n, o = 0;
        out[o++] = '"';
        for (size_t i = 0; i < show && o + 6 < len; i++) {
            out[o++] = ((unsigned char)s[i] < 0x20) ? '?' : s[i];
        }
        if (show < n && o + 6 < len) {
            memcpy(out + o, "...", 3);
            o += 3;
        }
        out[o++] = '"';
        out[o] = '\0';
    } else if (cJSON_IsNumber(v)) {
        snprintf(out, len, "%.10g", v->valuedouble);
    } else if (cJSON_IsTrue(v)) {
        snprintf(out, len, "true");
    } else if (cJSON_IsFalse(v)) {
        snprintf(out, len, "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(out, len, "null");
    } else if (cJSON_IsArray(v)) {
        snprintf(out, len, "an array");
    } else {
        snprintf(out, len, "an object");
    }
}

/* " (in FILE)" or " (in --set k=v)" or "" for a default. */
static void cfg_where(CfgSrc src, char* out, size_t len) {
    if (src.set) snprintf(out, len, " (in --set %s)", src.set);
    else if (src.file) snprintf(out, len, " (in %s)", src.file);
    else out[0] = '\0';
}

static int cfg_choice_ok(const char* choices, const char* s) {
    size_t n = strlen(s);
    for (const char* p = choices; *p;) {
        const char* bar = strchr(p, '|');
        size_t m = bar ? (size_t)(bar - p) : strlen(p);
        if (m == n && strncmp(p, s, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

/* ----------------------------------------------------------------------------
 * applying one value */

/* Integers arrive as JSON numbers (doubles): accept only whole values that
 * fit an int, so 3.5 or 1e12 are errors rather than silently truncated. */
static int cfg_apply_int(const CfgKey* k, const cJSON* v, int* p, const char* got, const char* where,
                         char* err, size_t errlen) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble)) {
        return check_errorf(err, errlen, "config error: %s: expected an integer, got %s%s", k->path, got, where);
    }
    double d = v->valuedouble;
    if (d < (double)INT_MIN || d > (double)INT_MAX) {
        return check_errorf(err, errlen, "config error: %s: %s does not fit in an int%s", k->path, got, where);
    }
    *p = (int)d;
    return 0;
}

/* Type-check v against key k and store it. Ranges come later. */
static int cfg_apply(Config* c, const CfgKey* k, const cJSON* v, CfgSrc src, char* err, size_t errlen) {
    char got[80], where[CFG_PATH + 64];
    cfg_describe(v, got, sizeof(got));
    cfg_where(src, where, sizeof(where));
    void* p = cfg_field(c, k);
    switch (k->type) {
    case CFG_GROUP:
        if (cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0) {
            *(int*)p = 0;
            return 0;
        }
        if (!cJSON_IsNumber(v)) {
            return check_errorf(err, errlen, "config error: %s: expected \"auto\" or a power of two in 16..256, got %s%s",
                            k->path, got, where);
        }
        return cfg_apply_int(k, v, (int*)p, got, where, err, errlen);
    case CFG_INT:
        return cfg_apply_int(k, v, (int*)p, got, where, err, errlen);
    case CFG_FLOAT:
        if (!cJSON_IsNumber(v)) {
            return check_errorf(err, errlen, "config error: %s: expected a number, got %s%s", k->path, got, where);
        }
        if (!isfinite(v->valuedouble) || fabs(v->valuedouble) > FLT_MAX) {
            return check_errorf(err, errlen, "config error: %s: expected a finite 32-bit float, got %s%s",
                            k->path, got, where);
        }
        *(float*)p = (float)v->valuedouble;
        return 0;
    case CFG_BOOL:
        if (!cJSON_IsBool(v)) {
            return check_errorf(err, errlen, "config error: %s: expected true or false, got %s%s", k->path, got, where);
        }
        *(int*)p = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    case CFG_STR:
    case CFG_ENUM: {
        if (!cJSON_IsString(v)) {
            return check_errorf(err, errlen, "config error: %s: expected a string, got %s%s", k->path, got, where);
        }
        const char* s = v->valuestring;
        if (k->type == CFG_ENUM && !cfg_choice_ok(k->choices, s)) {
            char list[128];
            snprintf(list, sizeof(list), "%s", k->choices);
            for (char* q = list; *q; q++) {
                if (*q == '|') *q = '/';
            }
            return check_errorf(err, errlen, "config error: %s: unknown value %s (expected one of %s)%s",
                            k->path, got, list, where);
        }
        if (strlen(s) >= k->size) {
            return check_errorf(err, errlen, "config error: %s: too long (%zu bytes, at most %zu)%s",
                            k->path, strlen(s), k->size - 1, where);
        }
        memcpy(p, s, strlen(s) + 1);
        return 0;
    }
    }
    return check_errorf(err, errlen, "config error: %s: internal error (unknown key type)", k->path);
}

/* A --set value as the JSON value it stands for, given the key's type:
 * numbers parse as numbers, true/false/1/0 as booleans, strings need no
 * quotes. Whatever does not parse stays a string, so cfg_apply reports
 * `expected a number, got "abc"` exactly as it would for a JSON file. */
static cJSON* cfg_set_value(const CfgKey* k, const char* s) {
    if (k->type == CFG_INT || k->type == CFG_FLOAT || k->type == CFG_GROUP) {
        char* end = NULL;
        double d = strtod(s, &end);
        if (end != s && *end == '\0' && s[0] != ' ' && s[0] != '\t') return cJSON_CreateNumber(d);
    } else if (k->type == CFG_BOOL) {
        if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0) return cJSON_CreateTrue();
        if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0) return cJSON_CreateFalse();
    } else {
        size_t n = strlen(s);
        if (n >= 2 && s[0] == '"' && s[n - 1] == '"') { /* --set 'data.train="a b.bin"' */
            char* copy = (char*)mallocCheck(n);
            memcpy(copy, s + 1, n - 2);
            copy[n - 2] = '\0';
            cJSON* v = cJSON_CreateString(copy);
            free(copy);
            return v;
        }
    }
    return cJSON_CreateString(s);
}

/* ----------------------------------------------------------------------------
 * the JSON file */

static char* cfg_read_file(const char* path, char* err, size_t errlen) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        check_errorf(err, errlen, "config error: cannot open config file '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char* buf = (char*)mallocCheck(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            char* grown = (char*)realloc(buf, cap);
            if (!grown) FATAL("out of host memory reading config file '%s'", path);
            buf = grown;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    int e = errno;
    fclose(f);
    if (bad) {
        free(buf);
        check_errorf(err, errlen, "config error: reading config file '%s' failed: %s", path, strerror(e));
        return NULL;
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        free(buf);
        check_errorf(err, errlen, "config error: %s: contains a NUL byte; is it a JSON text file?", path);
        return NULL;
    }
    return buf;
}

/* "line L, column C" of a position in text, for parse errors. */
static void cfg_line_col(const char* text, const char* at, int* line, int* col) {
    *line = 1;
    *col = 1;
    for (const char* p = text; *p && p < at; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Walk a parsed file: every section must be known and an object, every key
 * known and well typed; duplicate names are errors (JSON allows them, but a
 * silent "last one wins" hides mistakes). */
static int cfg_apply_json(Config* c, const cJSON* root, const char* path, CfgSrc* srcs, char* err, size_t errlen) {
    if (!cJSON_IsObject(root)) {
        char got[80];
        cfg_describe(root, got, sizeof(got));
        return check_errorf(err, errlen, "config error: %s: the top level must be a JSON object {...}, got %s", path, got);
    }
    for (const cJSON* sec = root->child; sec; sec = sec->next) {
        for (const cJSON* prev = root->child; prev != sec; prev = prev->next) {
            if (strcmp(prev->string, sec->string) == 0) {
                return check_errorf(err, errlen, "config error: section '%s' appears twice (in %s)", sec->string, path);
            }
        }
        if (!cfg_is_section(sec->string)) {
            char hint[64];
            if (cfg_suggest_section(sec->string, hint, sizeof(hint))) {
                return check_errorf(err, errlen, "config error: unknown section '%s' (did you mean %s?) (in %s)",
                                sec->string, hint, path);
            }
            return check_errorf(err, errlen, "config error: unknown section '%s' (in %s); sections are model, data, "
                            "train, parallel, compress, comm, log, checkpoint", sec->string, path);
        }
        if (!cJSON_IsObject(sec)) {
            char got[80];
            cfg_describe(sec, got, sizeof(got));
            return check_errorf(err, errlen, "config error: %s: expected an object of %s.* keys, got %s (in %s)",
                            sec->string, sec->string, got, path);
        }
        for (const cJSON* kv = sec->child; kv; kv = kv->next) {
            char key[256];
            snprintf(key, sizeof(key), "%s.%s", sec->string, kv->string);
            for (const cJSON* prev = sec->child; prev != kv; prev = prev->next) {
                if (strcmp(prev->string, kv->string) == 0) {
                    return check_errorf(err, errlen, "config error: key '%s' appears twice (in %s)", key, path);
                }
            }
            const CfgKey* k = cfg_find(key);
            if (!k) {
                const char* hint = cfg_suggest_key(key);
                if (hint) {
                    return check_errorf(err, errlen, "config error: unknown key '%s' (did you mean %s?) (in %s)",
                                    key, hint, path);
                }
                return check_errorf(err, errlen, "config error: unknown key '%s' (in %s)", key, path);
            }
            CfgSrc src = {path, NULL};
            if (cfg_apply(c, k, kv, src, err, errlen) != 0) return -1;
            srcs[k - cfg_keys] = src;
        }
    }
    return 0;
}

static int cfg_load_file(Config* c, const char* path, CfgSrc* srcs, char* err, size_t errlen) {
    char* text = cfg_read_file(path, err, errlen);
    if (!text) return -1;
    const char* end = NULL;
    cJSON* root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        /* cJSON hands back the position where parsing stopped. */
        const char* at = end ? end : cJSON_GetErrorPtr();
        if (!at) at = text;
        int line, col;
        cfg_line_col(text, at, &line, &col);
        char near[32];
        size_t i = 0;
        for (; i < 20 && at[i]; i++) near[i] = ((unsigned char)at[i] < 0x20) ? ' ' : at[i];
        near[i] = '\0';
        if (text[0] == '\0') {
            check_errorf(err, errlen, "config error: %s: malformed JSON: the file is empty", path);
        } else if (!at[0]) {
            check_errorf(err, errlen, "config error: %s: malformed JSON at line %d, column %d: unexpected end of file "
                     "(missing '}' or ']'?)", path, line, col);
        } else {
            check_errorf(err, errlen, "config error: %s: malformed JSON at line %d, column %d, near '%s'",
                     path, line, col, near);
        }
        free(text);
        return -1;
    }
    int rc = cfg_apply_json(c, root, path, srcs, err, errlen);
    cJSON_Delete(root);
    free(text);
    return rc;
}

/* ----------------------------------------------------------------------------
 * validation */

static int cfg_check_range(const Config* c, const CfgKey* k, CfgSrc src, char* err, size_t errlen) {
    char where[CFG_PATH + 64], note[128];
    cfg_where(src, where, sizeof(where));
    snprintf(note, sizeof(note), "%s%s%s", k->note ? " (" : "", k->note ? k->note : "", k->note ? ")" : "");
    const void* p = cfg_cfield(c, k);
    if (k->type == CFG_INT) {
        int v = *(const int*)p;
        if (v >= k->lo && v <= k->hi) return 0;
        if (k->hi >= INT_MAX) {
            return check_errorf(err, errlen, "config error: %s: %d is out of range, must be >= %d%s%s",
                            k->path, v, (int)k->lo, note, where);
        }
        return check_errorf(err, errlen, "config error: %s: %d is out of range, must be in %d..%d%s%s",
                        k->path, v, (int)k->lo, (int)k->hi, note, where);
    }
    if (k->type == CFG_GROUP) {
        int v = *(const int*)p;
        if (v == 0 || (v >= k->lo && v <= k->hi && (v & (v - 1)) == 0)) return 0;
        return check_errorf(err, errlen, "config error: %s: %d is not \"auto\" or a power of two in %d..%d%s",
                        k->path, v, (int)k->lo, (int)k->hi, where);
    }
    if (k->type == CFG_FLOAT) {
        double v = *(const float*)p;
        int lo_ok = (k->open & CFG_LO_OPEN) ? v > k->lo : v >= k->lo;
        int hi_ok = (k->open & CFG_HI_OPEN) ? v < k->hi : v <= k->hi;
        if (lo_ok && hi_ok) return 0;
        if (k->hi >= FLT_MAX) {
            return check_errorf(err, errlen, "config error: %s: %g is out of range, must be %s %g%s%s", k->path, v,
                            (k->open & CFG_LO_OPEN) ? ">" : ">=", k->lo, note, where);
        }
        return check_errorf(err, errlen, "config error: %s: %g is out of range, must be in %c%g, %g%c%s%s", k->path, v,
                        (k->open & CFG_LO_OPEN) ? '(' : '[', k->lo, k->hi, (k->open & CFG_HI_OPEN) ? ')' : ']',
                        note, where);
    }
    if (k->type == CFG_ENUM && !CFG_GPU_BUILD && k->gpu_only && cfg_choice_ok(k->gpu_only, (const char*)p)) {
        return check_errorf(err, errlen, "config error: %s: \"%s\" needs the GPU build (build/train_gpu, from make "
                        "gpu); this is the CPU build%s", k->path, (const char*)p, where);
    }
    return 0; /* booleans, strings and other enums were fully checked when applied */
}

/* Checks that involve more than one key. */
static int cfg_check_across(const Config* c, char* err, size_t errlen) {
    if (c->model.d_model % c->model.n_head != 0) {
        return check_errorf(err, errlen, "config error: model.d_model: %d is not divisible by model.n_head = %d",
                        c->model.d_model, c->model.n_head);
    }
    if (c->train.seq_len > c->model.max_seq_len) {
        return check_errorf(err, errlen, "config error: train.seq_len: %d is larger than model.max_seq_len = %d",
                        c->train.seq_len, c->model.max_seq_len);
    }
    if (c->model.n_head % c->parallel.tp != 0) {
        return check_errorf(err, errlen, "config error: model.n_head: %d is not divisible by parallel.tp = %d",
                        c->model.n_head, c->parallel.tp);
    }
    if (config_check_arch(c, err, errlen) != 0 || config_check_sp(c, err, errlen) != 0) return -1;
    if (!c->data.train[0]) {
        return check_errorf(err, errlen, "config error: data.train: empty; name a shard file or a glob of shards");
    }
    if (!c->data.val[0] && c->train.eval_every > 0) {
        return check_errorf(err, errlen, "config error: data.val: empty but train.eval_every = %d; name the val "
                        "shards or set train.eval_every to 0", c->train.eval_every);
    }
    return 0;
}

/* ----------------------------------------------------------------------------
 * public API */

void config_defaults(Config* c) {
    memset(c, 0, sizeof(*c));
    size_t covered = 0;
    for (int i = 0; i < CFG_NKEYS; i++) {
        const CfgKey* k = &cfg_keys[i];
        void* p = cfg_field(c, k);
        covered += k->size;
        switch (k->type) {
        case CFG_INT:
        case CFG_BOOL:
        case CFG_GROUP: *(int*)p = (int)k->def; break;
        case CFG_FLOAT: *(float*)p = (float)k->def; break;
        case CFG_STR:
        case CFG_ENUM: snprintf((char*)p, k->size, "%s", k->sdef); break;
        }
    }
    /* Every byte of Config must belong to a key; a field added to the
     * struct without a table line would otherwise never be settable. */
    if (covered != sizeof(Config)) {
        FATAL("train/config.c: the key table covers %zu of %zu bytes of Config; add the new field to cfg_keys",
              covered, sizeof(Config));
    }
}

int config_load(Config* c, const char* path, int nsets, char** sets, char* err, size_t errlen) {
    config_defaults(c);
    CfgSrc srcs[CFG_NKEYS];
    memset(srcs, 0, sizeof(srcs));
    if (path && cfg_load_file(c, path, srcs, err, errlen) != 0) return -1;

    for (int i = 0; i < nsets; i++) {
        const char* s = sets[i];
        const char* eq = strchr(s, '=');
        if (!eq || eq == s) {
            return check_errorf(err, errlen, "config error: --set '%s': expected key=value, e.g. --set train.lr=3e-4", s);
        }
        char key[256];
        size_t n = (size_t)(eq - s);
        if (n >= sizeof(key)) return check_errorf(err, errlen, "config error: --set '%s': key too long", s);
        memcpy(key, s, n);
        key[n] = '\0';
        const CfgKey* k = cfg_find(key);
        if (!k) {
            const char* hint = cfg_suggest_key(key);
            if (hint) {
                return check_errorf(err, errlen, "config error: unknown key '%s' (did you mean %s?) (in --set %s)",
                                key, hint, s);
            }
            return check_errorf(err, errlen, "config error: unknown key '%s' (in --set %s)", key, s);
        }
        cJSON* v = cfg_set_value(k, eq + 1);
        if (!v) FATAL("out of host memory parsing --set %s", s);
        CfgSrc src = {NULL, s};
        int rc = cfg_apply(c, k, v, src, err, errlen);
        cJSON_Delete(v);
        if (rc != 0) return -1;
        srcs[k - cfg_keys] = src;
    }

    /* Derived defaults. */
    const CfgKey* ks = cfg_find("train.sample_every");
    CfgSrc s_src = srcs[ks - cfg_keys];
    if (!s_src.file && !s_src.set) c->train.sample_every = c->train.eval_every;

    for (int i = 0; i < CFG_NKEYS; i++) {
        if (cfg_check_range(c, &cfg_keys[i], srcs[i], err, errlen) != 0) return -1;
    }
    if (cfg_check_across(c, err, errlen) != 0) return -1;

    if (!c->checkpoint.dir[0]) {
        int n = snprintf(c->checkpoint.dir, sizeof(c->checkpoint.dir), "%s/ckpt", c->log.dir);
        if (n < 0 || (size_t)n >= sizeof(c->checkpoint.dir)) {
            return check_errorf(err, errlen, "config error: checkpoint.dir: log.dir + \"/ckpt\" is longer than %zu bytes; "
                            "set checkpoint.dir", sizeof(c->checkpoint.dir) - 1);
        }
    }
    return 0;
}

/* path must match at least one regular file (it may be a glob). */
static int cfg_check_glob(const char* key, const char* pattern, char* err, size_t errlen) {
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        if (rc == 0) globfree(&g);
        return check_errorf(err, errlen, "config error: %s: no file matches '%s' (make shards with build/prepro, "
                        "or fix the path)", key, pattern);
    }
    if (rc != 0) return check_errorf(err, errlen, "config error: %s: cannot expand '%s'", key, pattern);
    globfree(&g);
    return 0;
}

static int cfg_check_readable(const char* key, const char* path, char* err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        return check_errorf(err, errlen, "config error: %s: cannot read '%s': %s", key, path, strerror(errno));
    }
    char cj[CFG_PATH + 16];
    if (S_ISDIR(st.st_mode) && strcmp(key, "model.init_from") == 0) {   /* a Hugging Face model directory */
        snprintf(cj, sizeof(cj), "%s/config.json", path);
        if (stat(cj, &st) != 0) {
            return check_errorf(err, errlen, "config error: %s: '%s' is a directory without config.json: a Hugging Face "
                            "model directory needs config.json and model.safetensors", key, path);
        }
        path = cj;
    }
    if (!S_ISREG(st.st_mode)) return check_errorf(err, errlen, "config error: %s: '%s' is not a regular file", key, path);
    FILE* f = fopen(path, "rb");
    if (!f) return check_errorf(err, errlen, "config error: %s: cannot read '%s': %s", key, path, strerror(errno));
    fclose(f);
    return 0;
}

int config_check_world(const Config* c, int world_size, char* err, size_t errlen) {
    long long need = (long long)c->parallel.tp * c->parallel.dp;
    if (need != world_size) {
        return check_errorf(err, errlen, "config error: parallel.tp * parallel.dp = %d * %d = %lld, but the job has %d "
                        "rank%s; run with mpirun -np %lld or change parallel.tp / parallel.dp", c->parallel.tp,
                        c->parallel.dp, need, world_size, world_size == 1 ? "" : "s", need);
    }
    if (c->model.n_head % c->parallel.tp != 0) {
        return check_errorf(err, errlen, "config error: model.n_head: %d is not divisible by parallel.tp = %d",
                        c->model.n_head, c->parallel.tp);
    }
    if (cfg_check_glob("data.train", c->data.train, err, errlen) != 0) return -1;
    if (c->data.val[0] && cfg_check_glob("data.val", c->data.val, err, errlen) != 0) return -1;
    if (c->data.tokenizer[0] && cfg_check_readable("data.tokenizer", c->data.tokenizer, err, errlen) != 0) return -1;
    if (c->model.init_from[0] && cfg_check_readable("model.init_from", c->model.init_from, err, errlen) != 0) return -1;
    return 0;
}

/* The shortest decimal that reads back as the same float, so 3e-4 prints
 * as 0.0003 rather than 0.000300000014249. */
static double cfg_float_value(float f) {
    char buf[40];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f) break;
    }
    return strtod(buf, NULL);
}

char* config_to_json(const Config* c) {
    cJSON* root = cJSON_CreateObject();
    if (!root) FATAL("out of host memory writing the config as JSON");
    for (int i = 0; i < CFG_NKEYS; i++) {
        const CfgKey* k = &cfg_keys[i];
        char section[64];
        size_t n = cfg_section_len(k->path);
        memcpy(section, k->path, n);
        section[n] = '\0';
        cJSON* obj = cJSON_GetObjectItemCaseSensitive(root, section);
        if (!obj) obj = cJSON_AddObjectToObject(root, section);
        const char* leaf = k->path + n + 1;
        const void* p = cfg_cfield(c, k);
        cJSON* added = NULL;
        switch (k->type) {
        case CFG_INT: added = cJSON_AddNumberToObject(obj, leaf, *(const int*)p); break;
        case CFG_GROUP:
            added = *(const int*)p == 0 ? cJSON_AddStringToObject(obj, leaf, "auto")
                                        : cJSON_AddNumberToObject(obj, leaf, *(const int*)p);
            break;
        case CFG_FLOAT: added = cJSON_AddNumberToObject(obj, leaf, cfg_float_value(*(const float*)p)); break;
        case CFG_BOOL: added = cJSON_AddBoolToObject(obj, leaf, *(const int*)p != 0); break;
        case CFG_STR:
        case CFG_ENUM: added = cJSON_AddStringToObject(obj, leaf, (const char*)p); break;
        }
        if (!added) FATAL("out of host memory writing the config as JSON");
    }
    char* s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) FATAL("out of host memory writing the config as JSON");
    return s;
}

void config_print(const Config* c, FILE* out) {
    char* s = config_to_json(c);
    fprintf(out, "%s\n", s);
    free(s);
}
