/*
 * model/hf.c - Hugging Face model directories (hf.h).
 *
 * One table, pieces(), maps every transformers tensor to a block of our full
 * model (tensor, element offset, rows x cols in our [out, in] layout, and
 * whether the file holds it transposed); reading scatters the file's tensors
 * through it and writing gathers them, so the two cannot disagree.
 */
#define _POSIX_C_SOURCE 200809L

#include "model/hf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "model/safetensors.h"

typedef struct {
    char name[96];
    int t;            /* our tensor */
    size_t off;       /* first element of the block in tensor t */
    int rows, cols;   /* the block in our layout (a 1-D tensor: rows x 1) */
    int ndim, transposed;
} Piece;

static int add(Piece* p, int n, const char* name, int t, size_t off, int rows, int cols, int ndim, int tr) {
    Piece* q = &p[n];
    snprintf(q->name, sizeof(q->name), "%s", name);
    q->t = t; q->off = off; q->rows = rows; q->cols = cols; q->ndim = ndim; q->transposed = tr;
    return n + 1;
}

/* every tensor of the directory for pl's shape, in file order; p holds 4 + 12 L */
static int pieces(const ParamLayout* pl, Piece* p) {
    const GPTShape* s = &pl->s;
    int C = s->C, L = s->L, n = 0;
    char nm[96];
    if (s->arch == ARCH_QWEN2) {
        int hs = C / s->NH, H = s->NH * hs, KH = s->KV * hs, F = s->F, R = H + 2 * KH;
        n = add(p, n, "model.embed_tokens.weight", Q_WTE, 0, s->V, C, 2, 0);
        for (int l = 0; l < L; l++) {
            size_t lq = (size_t)l * R;
            const char* qkv[3] = {"q", "k", "v"};
            size_t r0[3] = {0, (size_t)H, (size_t)(H + KH)};
            int nr[3] = {H, KH, KH};
            for (int k = 0; k < 3; k++) {
                snprintf(nm, sizeof(nm), "model.layers.%d.self_attn.%s_proj.weight", l, qkv[k]);
                n = add(p, n, nm, Q_QKVW, (lq + r0[k]) * C, nr[k], C, 2, 0);
                snprintf(nm, sizeof(nm), "model.layers.%d.self_attn.%s_proj.bias", l, qkv[k]);
                n = add(p, n, nm, Q_QKVB, lq + r0[k], nr[k], 1, 1, 0);
            }
            snprintf(nm, sizeof(nm), "model.layers.%d.self_attn.o_proj.weight", l);
            n = add(p, n, nm, Q_OPROJW, (size_t)l * C * H, C, H, 2, 0);
            snprintf(nm, sizeof(nm), "model.layers.%d.mlp.gate_proj.weight", l);
            n = add(p, n, nm, Q_GATEUPW, (size_t)l * 2 * F * C, F, C, 2, 0);
            snprintf(nm, sizeof(nm), "model.layers.%d.mlp.up_proj.weight", l);
            n = add(p, n, nm, Q_GATEUPW, ((size_t)l * 2 * F + F) * C, F, C, 2, 0);
            snprintf(nm, sizeof(nm), "model.layers.%d.mlp.down_proj.weight", l);
            n = add(p, n, nm, Q_DOWNW, (size_t)l * C * F, C, F, 2, 0);
            snprintf(nm, sizeof(nm), "model.layers.%d.input_layernorm.weight", l);
            n = add(p, n, nm, Q_LN1W, (size_t)l * C, C, 1, 1, 0);
            snprintf(nm, sizeof(nm), "model.layers.%d.post_attention_layernorm.weight", l);
            n = add(p, n, nm, Q_LN2W, (size_t)l * C, C, 1, 1, 0);
        }
        n = add(p, n, "model.norm.weight", Q_NORMW, 0, C, 1, 1, 0);
        if (!s->tied) n = add(p, n, "lm_head.weight", Q_LMHEAD, 0, s->V, C, 2, 0);
        return n;
    }
    /* GPT-2: transformers' Conv1D weights are [in, out] */
    n = add(p, n, "transformer.wte.weight", P_WTE, 0, s->V, C, 2, 0);
    n = add(p, n, "transformer.wpe.weight", P_WPE, 0, s->maxT, C, 2, 0);
    for (int l = 0; l < L; l++) {
        static const struct { const char* name; int t, rows_x, cols_x, tr; } G[] = {   /* rows/cols in units of C */
            {"ln_1.weight", P_LN1W, 1, 0, 0}, {"ln_1.bias", P_LN1B, 1, 0, 0},
            {"attn.c_attn.weight", P_QKVW, 3, 1, 1}, {"attn.c_attn.bias", P_QKVB, 3, 0, 0},
            {"attn.c_proj.weight", P_ATTPROJW, 1, 1, 1}, {"attn.c_proj.bias", P_ATTPROJB, 1, 0, 0},
            {"ln_2.weight", P_LN2W, 1, 0, 0}, {"ln_2.bias", P_LN2B, 1, 0, 0},
            {"mlp.c_fc.weight", P_FCW, 4, 1, 1}, {"mlp.c_fc.bias", P_FCB, 4, 0, 0},
            {"mlp.c_proj.weight", P_FCPROJW, 1, 4, 1}, {"mlp.c_proj.bias", P_FCPROJB, 1, 0, 0}};
        for (size_t k = 0; k < sizeof(G) / sizeof(G[0]); k++) {
            int rows = G[k].rows_x * C, cols = G[k].cols_x ? G[k].cols_x * C : 1;
            snprintf(nm, sizeof(nm), "transformer.h.%d.%s", l, G[k].name);
            n = add(p, n, nm, G[k].t, (size_t)l * rows * cols, rows, cols, G[k].cols_x ? 2 : 1, G[k].tr);
        }
    }
    n = add(p, n, "transformer.ln_f.weight", P_LNFW, 0, C, 1, 1, 0);
    n = add(p, n, "transformer.ln_f.bias", P_LNFB, 0, C, 1, 1, 0);
    return n;
}

static void base_offsets(const ParamLayout* pl, size_t* base) {
    size_t off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) { base[t] = off; off += pl->full[t]; }
}

/* the file's shape of a piece */
static int piece_shape(const Piece* q, int64_t* shape) {
    if (q->ndim == 1) { shape[0] = (int64_t)q->rows * q->cols; return 1; }
    shape[0] = q->transposed ? q->cols : q->rows;
    shape[1] = q->transposed ? q->rows : q->cols;
    return 2;
}

/* ---- config.json ------------------------------------------------------------ */

typedef struct { const char* ours; const char* hf; double value, dflt; int is_float, has_default; } Field;

static int fields(const GPTShape* s, Field* f) {
    int n = 0;
#define F_(o, h, v, d, fl, hd) (f[n++] = (Field){o, h, (double)(v), d, fl, hd})
    if (s->arch == ARCH_QWEN2) {
        F_("model.d_model", "hidden_size", s->C, 0, 0, 0);
        F_("model.n_layer", "num_hidden_layers", s->L, 0, 0, 0);
        F_("model.n_head", "num_attention_heads", s->NH, 0, 0, 0);
        F_("model.n_kv_head", "num_key_value_heads", s->KV, s->NH, 0, 1);   /* transformers: absent = n_head */
        F_("model.d_ff", "intermediate_size", s->F, 0, 0, 0);
        F_("model.vocab_size", "vocab_size", s->V, 0, 0, 0);
        F_("model.max_seq_len", "max_position_embeddings", s->maxT, 0, 0, 0);
        F_("model.norm_eps", "rms_norm_eps", s->norm_eps, 1e-6, 1, 1);
        F_("model.rope_theta", "rope_theta", s->rope_theta, 10000.0, 1, 1);
        F_("model.tie_embeddings", "tie_word_embeddings", s->tied, 0, 0, 1);   /* Qwen2Config's default: false */
        F_("model.d_model / model.n_head", "head_dim", s->C / s->NH, s->C / s->NH, 0, 1);
    } else {
        F_("model.d_model", "n_embd", s->C, 0, 0, 0);
        F_("model.n_layer", "n_layer", s->L, 0, 0, 0);
        F_("model.n_head", "n_head", s->NH, 0, 0, 0);
        F_("model.vocab_size", "vocab_size", s->V, 0, 0, 0);
        F_("model.max_seq_len", "n_positions", s->maxT, 0, 0, 0);
        F_("gpt2's LayerNorm eps", "layer_norm_epsilon", 1e-5, 1e-5, 1, 1);
        F_("4 * model.d_model", "n_inner", 4.0 * s->C, 4.0 * s->C, 0, 1);   /* null = 4 n_embd */
    }
#undef F_
    return n;
}

static char* read_text(const char* path, char* err, size_t errlen) {
    FILE* f = fopen(path, "rb");
    if (!f) { check_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno)); return NULL; }
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char* buf = NULL;
    if (size >= 0 && size < (64L << 20) && fseek(f, 0, SEEK_SET) == 0) {
        buf = mallocCheck((size_t)size + 1);
        if (fread(buf, 1, (size_t)size, f) != (size_t)size) { free(buf); buf = NULL; }
        else buf[size] = '\0';
    }
    fclose(f);
    if (!buf) check_errorf(err, errlen, "reading %s failed (not a regular file, or over 64 MB?)", path);
    return buf;
}

static int check_config(const char* dir, const GPTShape* s, char* err, size_t errlen) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    char* text = read_text(path, err, errlen);
    if (!text) return -1;
    cJSON* root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return check_errorf(err, errlen, "%s is not a JSON object", path);
    }
    const char* arch = s->arch == ARCH_QWEN2 ? "qwen2" : "gpt2";
    const cJSON* mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    int rc = 0;
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, arch) != 0)
        rc = check_errorf(err, errlen, "%s does not match the config: model.arch is \"%s\" in our config but model_type "
                          "is %s%s%s in config.json", path, arch, cJSON_IsString(mt) ? "\"" : "",
                          cJSON_IsString(mt) ? mt->valuestring : "missing", cJSON_IsString(mt) ? "\"" : "");
    Field f[16];
    int n = fields(s, f);
    for (int i = 0; i < n && rc == 0; i++) {
        const cJSON* v = cJSON_GetObjectItemCaseSensitive(root, f[i].hf);
        double got;
        if (!v || cJSON_IsNull(v)) {
            if (!f[i].has_default) { rc = check_errorf(err, errlen, "%s has no %s (our %s is %g)", path, f[i].hf, f[i].ours, f[i].value); break; }
            got = f[i].dflt;
        } else if (cJSON_IsBool(v)) got = cJSON_IsTrue(v);
        else if (cJSON_IsNumber(v)) got = v->valuedouble;
        else { rc = check_errorf(err, errlen, "%s: %s is not a number", path, f[i].hf); break; }
        int same = f[i].is_float ? (float)got == (float)f[i].value : got == f[i].value;
        if (!same)
            rc = check_errorf(err, errlen, "%s does not match the config: %s is %.9g in our config but %s is %.9g in "
                              "config.json", path, f[i].ours, f[i].value, f[i].hf, got);
    }
    /* what our model does not implement must be off */
    const char* off_keys[] = {"rope_scaling", "use_sliding_window"};
    for (int i = 0; i < 2 && rc == 0 && s->arch == ARCH_QWEN2; i++) {
        const cJSON* v = cJSON_GetObjectItemCaseSensitive(root, off_keys[i]);
        if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
            rc = check_errorf(err, errlen, "%s sets %s, which model.arch \"qwen2\" does not implement", path, off_keys[i]);
    }
    cJSON_Delete(root);
    return rc;
}

static void json_float(cJSON* o, const char* key, float v) {   /* the shortest decimal that reads back as v */
    char buf[40];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, (double)v);
        if ((float)strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".e")) strcat(buf, ".0");
    cJSON_AddRawToObject(o, key, buf);
}

static int write_config(const char* path, const GPTShape* s, int code, char* err, size_t errlen) {
    cJSON* o = cJSON_CreateObject();
    cJSON* archs = cJSON_AddArrayToObject(o, "architectures");
    int q = s->arch == ARCH_QWEN2;
    cJSON_AddItemToArray(archs, cJSON_CreateString(q ? "Qwen2ForCausalLM" : "GPT2LMHeadModel"));
    cJSON_AddStringToObject(o, "model_type", q ? "qwen2" : "gpt2");
    Field f[16];
    int n = fields(s, f);
    for (int i = 0; i < n; i++) {
        if (f[i].is_float) json_float(o, f[i].hf, (float)f[i].value);
        else if (strcmp(f[i].hf, "tie_word_embeddings") == 0) cJSON_AddBoolToObject(o, f[i].hf, f[i].value != 0);
        else cJSON_AddNumberToObject(o, f[i].hf, f[i].value);
    }
    if (q) {
        cJSON_AddStringToObject(o, "hidden_act", "silu");
        cJSON_AddBoolToObject(o, "use_sliding_window", 0);
        cJSON_AddNumberToObject(o, "max_window_layers", s->L);
        cJSON_AddNumberToObject(o, "attention_dropout", 0);
    } else {
        cJSON_AddStringToObject(o, "activation_function", "gelu_new");
        cJSON_AddNumberToObject(o, "n_ctx", s->maxT);
        const char* drops[] = {"resid_pdrop", "embd_pdrop", "attn_pdrop"};
        for (int i = 0; i < 3; i++) cJSON_AddNumberToObject(o, drops[i], 0);
    }
    json_float(o, "initializer_range", 0.02f);
    cJSON_AddStringToObject(o, "torch_dtype", code == ST_F32 ? "float32" : code == ST_BF16 ? "bfloat16" : "float16");
    char* text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) FATAL("out of host memory writing %s", path);
    FILE* fp = fopenErr(path, "wb", err, errlen);
    int rc = fp ? fputsErr(text, fp, path, err, errlen) : -1;
    if (fp && rc == 0) rc = fcloseErr(fp, path, err, errlen);
    else if (fp) fclose(fp);
    free(text);
    return rc;
}

/* ---- reading ---------------------------------------------------------------- */

#define HF_MAX_FILES 256

typedef struct {
    const char* dir;
    cJSON* index;                  /* weight_map of a sharded model, or NULL */
    int nfiles;
    char* fname[HF_MAX_FILES];
    StFile sf[HF_MAX_FILES];
} Reader;

static StFile* open_file(Reader* r, const char* fname, char* err, size_t errlen) {
    for (int i = 0; i < r->nfiles; i++) if (strcmp(r->fname[i], fname) == 0) return &r->sf[i];
    if (r->nfiles == HF_MAX_FILES) { check_errorf(err, errlen, "%s: more than %d safetensors files", r->dir, HF_MAX_FILES); return NULL; }
    char path[1400];
    snprintf(path, sizeof(path), "%s/%s", r->dir, fname);
    if (st_open(&r->sf[r->nfiles], path, err, errlen) != 0) return NULL;
    r->fname[r->nfiles] = strdup(fname);
    if (!r->fname[r->nfiles]) FATAL("out of host memory");
    return &r->sf[r->nfiles++];
}

/* the file and tensor of `name` (GPT-2: also without "transformer."), or NULL with err */
static const StTensor* lookup(Reader* r, const char* name, StFile** sfp, char* err, size_t errlen) {
    const char* names[2] = {name, strncmp(name, "transformer.", 12) == 0 ? name + 12 : NULL};
    for (int k = 0; k < 2 && names[k]; k++) {
        const char* fname = "model.safetensors";
        if (r->index) {
            const cJSON* v = cJSON_GetObjectItemCaseSensitive(r->index, names[k]);
            if (!cJSON_IsString(v)) continue;
            fname = v->valuestring;
        }
        StFile* sf = open_file(r, fname, err, errlen);
        if (!sf) return NULL;
        const StTensor* t = st_find(sf, names[k]);
        if (t) { *sfp = sf; return t; }
    }
    check_errorf(err, errlen, "%s/%s: tensor %s is missing", r->dir, r->index ? "model.safetensors.index.json" : "model.safetensors", name);
    return NULL;
}

static int read_pieces(Reader* r, const ParamLayout* pl, float* full, int* checked, char* err, size_t errlen) {
    Piece* p = mallocCheck((size_t)(4 + 12 * pl->s.L) * sizeof(Piece));
    int n = pieces(pl, p), rc = 0;
    size_t base[NUM_PARAM_TENSORS];
    base_offsets(pl, base);
    for (int i = 0; i < n && rc == 0; i++) {
        StFile* sf = NULL;
        const StTensor* t = lookup(r, p[i].name, &sf, err, errlen);
        if (!t) { rc = -1; break; }
        int64_t want[2];
        int nd = piece_shape(&p[i], want);
        if (t->ndim != nd || t->shape[0] != want[0] || (nd == 2 && t->shape[1] != want[1])) {
            char got[96] = "";
            for (int k = 0; k < t->ndim && strlen(got) < 70; k++)
                snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", k ? ", " : "", (long long)t->shape[k]);
            rc = check_errorf(err, errlen, "%s: tensor %s has shape [%s] but the config needs [%lld%s%.0lld]", sf->path,
                              t->name, got, (long long)want[0], nd == 2 ? ", " : "", nd == 2 ? (long long)want[1] : 0LL);
            break;
        }
        float* dst = full + base[p[i].t] + p[i].off;
        size_t cnt = (size_t)p[i].rows * p[i].cols;
        float* tmp = p[i].transposed ? mallocCheck(cnt * sizeof(float)) : dst;
        rc = st_read_f32(sf, t, tmp, err, errlen);
        if (rc == 0 && p[i].transposed)   /* file [cols][rows] -> ours [rows][cols] */
            for (int o = 0; o < p[i].rows; o++)
                for (int k = 0; k < p[i].cols; k++) dst[(size_t)o * p[i].cols + k] = tmp[(size_t)k * p[i].rows + o];
        if (tmp != dst) free(tmp);
    }
    free(p);
    int all = r->nfiles > 0;
    for (int i = 0; i < r->nfiles && rc == 0; i++) {
        int ok = 0;
        rc = st_verify(&r->sf[i], &ok, err, errlen);
        all &= ok;
    }
    *checked = rc == 0 && all;
    return rc;
}

int hf_is_dir(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int hf_read_dir(const char* dir, const ParamLayout* pl, float** out, int* checked, char* err, size_t errlen) {
    *out = NULL;
    *checked = 0;
    if (check_config(dir, &pl->s, err, errlen) != 0) return -1;
    Reader r;
    memset(&r, 0, sizeof(r));
    r.dir = dir;
    cJSON* idx = NULL;
    char path[1200];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    if (access(path, F_OK) != 0) {   /* sharded: the index names each tensor's file */
        snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
        if (access(path, F_OK) != 0)
            return check_errorf(err, errlen, "%s has neither model.safetensors nor model.safetensors.index.json", dir);
        char* text = read_text(path, err, errlen);
        if (!text) return -1;
        idx = cJSON_Parse(text);
        free(text);
        r.index = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
        if (!cJSON_IsObject(r.index)) {
            cJSON_Delete(idx);
            return check_errorf(err, errlen, "%s has no \"weight_map\" object: malformed index", path);
        }
    }
    float* full = callocCheck(params_full_count(pl), sizeof(float));   /* padding rows stay zero */
    int rc = read_pieces(&r, pl, full, checked, err, errlen);
    char where[160];
    if (rc == 0 && params_first_nonfinite(pl, full, where, sizeof(where)))
        rc = check_errorf(err, errlen, "%s holds a non-finite weight at %s: the model is corrupt or had diverged when it "
                          "was saved", dir, where);
    for (int i = 0; i < r.nfiles; i++) { st_close(&r.sf[i]); free(r.fname[i]); }
    cJSON_Delete(idx);
    if (rc != 0) { free(full); *checked = 0; return -1; }
    *out = full;
    return 0;
}

/* ---- writing ---------------------------------------------------------------- */

typedef struct { const Piece* p; const float* full; const size_t* base; } Gather;

static void gather(void* ctx, int i, float* dst) {
    const Gather* g = ctx;
    const Piece* q = &g->p[i];
    const float* src = g->full + g->base[q->t] + q->off;
    size_t cnt = (size_t)q->rows * q->cols;
    if (!q->transposed) { memcpy(dst, src, cnt * sizeof(float)); return; }
    for (int o = 0; o < q->rows; o++)
        for (int k = 0; k < q->cols; k++) dst[(size_t)k * q->rows + o] = src[(size_t)o * q->cols + k];
}

void hf_remove_dir(const char* dir) {
    const char* files[] = {"config.json", "config.json.tmp", "model.safetensors", "model.safetensors.tmp"};
    char path[1300];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        remove(path);
    }
    rmdir(dir);
}

int hf_save_dir(const char* dir, const ParamLayout* pl, const float* full, int code, char* err, size_t errlen) {
    char tmp[1100], path[1200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", dir);
    hf_remove_dir(tmp);   /* what a crash left */
    if (mkdir(tmp, 0755) != 0) return check_errorf(err, errlen, "cannot create directory %s: %s", tmp, strerror(errno));
    snprintf(path, sizeof(path), "%s/config.json", tmp);
    int rc = write_config(path, &pl->s, code, err, errlen);
    Piece* p = mallocCheck((size_t)(4 + 12 * pl->s.L) * sizeof(Piece));
    int n = pieces(pl, p);
    StOut* o = mallocCheck((size_t)n * sizeof(StOut));
    for (int i = 0; i < n; i++) {
        snprintf(o[i].name, sizeof(o[i].name), "%s", p[i].name);
        o[i].ndim = piece_shape(&p[i], o[i].shape);
    }
    size_t base[NUM_PARAM_TENSORS];
    base_offsets(pl, base);
    Gather g = {p, full, base};
    snprintf(path, sizeof(path), "%s/model.safetensors", tmp);
    if (rc == 0) rc = st_write(path, o, n, code, gather, &g, err, errlen);
    free(o);
    free(p);
    if (rc == 0) {
        hf_remove_dir(dir);   /* an older directory of the same name (a rewritten step) */
        if (rename(tmp, dir) != 0) rc = check_errorf(err, errlen, "cannot rename %s to %s: %s", tmp, dir, strerror(errno));
    }
    if (rc != 0) hf_remove_dir(tmp);
    return rc;
}
