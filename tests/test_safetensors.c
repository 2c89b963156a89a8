/*
 * tests/test_safetensors.c - model/safetensors.c and model/hf.c:
 *   1. fp16 conversion against its definition at the edges (subnormals,
 *      rounding ties, overflow);
 *   2. writer -> reader round trips in F32 (bit-exact), BF16 and F16 (each
 *      value within half an ulp of its format: rel 2^-9 and 2^-12);
 *   3. Hugging Face directories for qwen2 and gpt2: save -> read gives the
 *      model back bit for bit; GPT-2's Conv1D weights are stored transposed
 *      (checked on the raw tensor); a sharded copy with its index loads the
 *      same; config.json disagreeing with our shape names the field and
 *      both values;
 *   4. every bad-file class: missing tensor, wrong shape, unsupported dtype,
 *      truncated data, malformed header JSON, header length past the end of
 *      the file, a flipped data byte (checksum): one error naming the file
 *      and the tensor, and no model returned.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "model/hf.h"
#include "model/safetensors.h"

static int checks = 0, failed = 0;
#define CHECK(cond, ...) do { checks++; if (!(cond)) { failed++; printf("  FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static const char* D = "build/test-st";
static char err[2048];

static void run(const char* cmd) { if (system(cmd) != 0) FATAL("command failed: %s", cmd); }

static void test_f16(void) {
    CHECK(st_f16_to_f32(0x3c00) == 1.0f && st_f16_to_f32(0xc000) == -2.0f, "f16 1 and -2");
    CHECK(st_f16_to_f32(0x0001) == 5.9604644775390625e-8f, "f16 smallest subnormal");
    CHECK(st_f16_to_f32(0x7bff) == 65504.0f && isinf(st_f16_to_f32(0x7c00)), "f16 max and inf");
    CHECK(st_f32_to_f16(65519.0f) == 0x7bff && st_f32_to_f16(65520.0f) == 0x7c00, "f16 overflow boundary");
    CHECK(st_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00, "f16 tie rounds to even (down)");
    CHECK(st_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02, "f16 tie rounds to even (up)");
    CHECK(st_f32_to_f16(2.98023223876953125e-8f) == 0x0000 && st_f32_to_f16(8.940696716308594e-8f) == 0x0002,
          "f16 subnormal ties to even");
    int all = 1;
    for (uint32_t h = 0; h < 0x7c00; h++) all &= st_f32_to_f16(st_f16_to_f32((uint16_t)h)) == h;
    CHECK(all, "every finite positive f16 survives f16 -> f32 -> f16");
}

typedef struct { const float* a; const float* b; } Two;
static void fill_two(void* ctx, int i, float* dst) {
    const Two* t = ctx;
    memcpy(dst, i == 0 ? t->a : t->b, (i == 0 ? 6 : 5) * sizeof(float));
}

static void test_roundtrip(void) {
    /* inside f16's normal range, so one rounding bound covers every format */
    float a[6] = {1.0f, -2.5f, 3.14159265f, 1e-3f, -6.1e4f, 0.0f}, b[5] = {1e-4f, 123.456f, -0.333333f, 2.0f, 60000.0f};
    Two ctx = {a, b};
    StOut o[2] = {{"x.weight", 2, {2, 3}}, {"y", 1, {5, 0}}};
    const int codes[3] = {ST_F32, ST_BF16, ST_F16};
    /* rounding to nearest: half an ulp, at most 2^-8 (bf16, 8 significand bits) and 2^-11 (f16, 11) of the value */
    const double tol[3] = {0.0, 1.0 / 256, 1.0 / 2048};
    for (int c = 0; c < 3; c++) {
        char path[256];
        snprintf(path, sizeof(path), "%s/rt%d.safetensors", D, c);
        CHECK(st_write(path, o, 2, codes[c], fill_two, &ctx, err, sizeof(err)) == 0, "write %s: %s", path, err);
        StFile sf;
        CHECK(st_open(&sf, path, err, sizeof(err)) == 0, "open %s: %s", path, err);
        const StTensor* tx = st_find(&sf, "x.weight");
        const StTensor* ty = st_find(&sf, "y");
        CHECK(tx && ty && tx->ndim == 2 && tx->shape[0] == 2 && tx->shape[1] == 3 && ty->ndim == 1 && ty->shape[0] == 5,
              "shapes of %s", path);
        float gx[6], gy[5];
        double worst = 0.0;
        if (tx && ty && st_read_f32(&sf, tx, gx, err, sizeof(err)) == 0 && st_read_f32(&sf, ty, gy, err, sizeof(err)) == 0) {
            for (int i = 0; i < 6; i++) if (a[i] != 0.0f) worst = fmax(worst, fabs(gx[i] - a[i]) / fabs(a[i]));
            for (int i = 0; i < 5; i++) worst = fmax(worst, fabs(gy[i] - b[i]) / fabs(b[i]));
            CHECK(worst <= tol[c] && gx[5] == 0.0f, "%s: values back within rel %g (worst %g)", path, tol[c], worst);
        } else CHECK(0, "read %s: %s", path, err);
        int checked = 0;
        CHECK(st_verify(&sf, &checked, err, sizeof(err)) == 0 && checked, "checksum of %s verifies", path);
        CHECK(sf.data_off % 8 == 0, "data of %s starts 8-byte aligned", path);
        st_close(&sf);
        printf("  round trip %s: worst rel error %.3g (bound %.3g)\n", c == 0 ? "F32" : c == 1 ? "BF16" : "F16", worst, tol[c]);
    }
}

static GPTShape qwen(void) {
    GPTShape s = gpt2_shape(16, 70, params_padded_vocab(70, 1), 2, 4, 16);
    s.arch = ARCH_QWEN2; s.KV = 2; s.F = 24; s.tied = 0; s.norm_eps = 1e-6f; s.rope_theta = 10000.0f;
    return s;
}

static float* random_full(const ParamLayout* pl) {
    float* full = params_init_full(pl, 7);
    size_t n = params_full_count(pl), off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {   /* every value distinct, padding rows zero */
        for (size_t i = 0; i < pl->full[t]; i++) full[off + i] += (float)(i % 97) * 1e-3f;
        off += pl->full[t];
    }
    (void)n;
    memset(full + (size_t)pl->s.V * pl->s.C, 0, (size_t)(pl->s.Vp - pl->s.V) * pl->s.C * sizeof(float));
    if (pl->s.arch == ARCH_QWEN2 && pl->full[Q_LMHEAD]) {
        size_t lo = 0;
        for (int t = 0; t < Q_LMHEAD; t++) lo += pl->full[t];
        memset(full + lo + (size_t)pl->s.V * pl->s.C, 0, (size_t)(pl->s.Vp - pl->s.V) * pl->s.C * sizeof(float));
    }
    return full;
}

/* expects hf_read_dir(dir) to fail with an error containing both needles, and no model */
static void expect_error(const char* what, const char* dir, const ParamLayout* pl, const char* n1, const char* n2) {
    float* out = (float*)1;
    int checked = 0;
    int rc = hf_read_dir(dir, pl, &out, &checked, err, sizeof(err));
    CHECK(rc != 0 && out == NULL, "%s: refused with nothing loaded", what);
    CHECK(strstr(err, n1) && (!n2 || strstr(err, n2)), "%s: the error names '%s'%s%s: %s", what, n1, n2 ? " and " : "",
          n2 ? n2 : "", err);
    printf("  %-28s -> %s\n", what, err);
}

typedef struct { float** v; size_t* n; } Vals;
static void fill_vals(void* ctx, int i, float* dst) {
    const Vals* vv = ctx;
    memcpy(dst, vv->v[i], vv->n[i] * sizeof(float));
}

static void test_dirs(void) {
    char cmd[2048], dir[256], bad[512];
    /* qwen2 and gpt2: save -> read bit for bit */
    GPTShape shapes[2] = {qwen(), gpt2_shape(16, 70, params_padded_vocab(70, 1), 2, 4, 16)};
    for (int k = 0; k < 2; k++) {
        ParamLayout pl;
        params_layout(&pl, shapes[k], 1, 0);
        float* full = random_full(&pl);
        snprintf(dir, sizeof(dir), "%s/%s", D, k == 0 ? "qwen2" : "gpt2");
        CHECK(hf_save_dir(dir, &pl, full, ST_F32, err, sizeof(err)) == 0, "save %s: %s", dir, err);
        float* back = NULL;
        int checked = 0;
        CHECK(hf_read_dir(dir, &pl, &back, &checked, err, sizeof(err)) == 0, "read %s: %s", dir, err);
        CHECK(back && checked && memcmp(back, full, params_full_count(&pl) * sizeof(float)) == 0,
              "%s: the model comes back bit for bit, checksum verified", dir);
        free(back);
        if (k == 1) {   /* Conv1D: c_attn.weight is [C, 3C] = our qkvw [3C, C] transposed */
            StFile sf;
            snprintf(bad, sizeof(bad), "%s/model.safetensors", dir);
            CHECK(st_open(&sf, bad, err, sizeof(err)) == 0, "open %s", bad);
            const StTensor* t = st_find(&sf, "transformer.h.1.attn.c_attn.weight");
            int C = pl.s.C, ok = t && t->shape[0] == C && t->shape[1] == 3 * C;
            float* w = mallocCheck((size_t)3 * C * C * sizeof(float));
            if (ok && st_read_f32(&sf, t, w, err, sizeof(err)) == 0) {
                size_t base = 0;
                for (int q = 0; q < P_QKVW; q++) base += pl.full[q];
                const float* ours = full + base + (size_t)3 * C * C;   /* layer 1 */
                for (int o = 0; o < 3 * C && ok; o++)
                    for (int i = 0; i < C && ok; i++) ok = w[(size_t)i * 3 * C + o] == ours[(size_t)o * C + i];
            } else ok = 0;
            CHECK(ok, "gpt2: transformer.h.1.attn.c_attn.weight holds qkvw transposed ([C, 3C])");
            free(w);
            st_close(&sf);
        }
        /* config.json must agree: a different d_ff / n_head names the field and both values */
        GPTShape other = shapes[k];
        if (k == 0) other.F = 32; else other.NH = 2;
        ParamLayout plo;
        params_layout(&plo, other, 1, 0);
        expect_error(k == 0 ? "qwen2 config d_ff differs" : "gpt2 config n_head differs", dir, &plo,
                     k == 0 ? "model.d_ff is 32 in our config but intermediate_size is 24" : "model.n_head is 2 in our config but n_head is 4",
                     "config.json");
        if (k == 0) {
            /* the same model split over two files with an index (safetensors' own sharding) */
            snprintf(cmd, sizeof(cmd), "mkdir -p %s/sharded && cp %s/config.json %s/sharded/", D, dir, D);
            run(cmd);
            StFile sf;
            snprintf(bad, sizeof(bad), "%s/model.safetensors", dir);
            st_open(&sf, bad, err, sizeof(err));
            FILE* idx = fopenCheck("build/test-st/sharded/model.safetensors.index.json", "w");
            fprintf(idx, "{\"metadata\": {}, \"weight_map\": {");
            for (int part = 0; part < 2; part++) {
                StOut* o = callocCheck((size_t)sf.n, sizeof(StOut));
                float** vals = callocCheck((size_t)sf.n, sizeof(float*));
                size_t* ns = callocCheck((size_t)sf.n, sizeof(size_t));
                int m = 0;
                for (int i = part; i < sf.n; i += 2, m++) {
                    snprintf(o[m].name, sizeof(o[m].name), "%s", sf.t[i].name);
                    o[m].ndim = sf.t[i].ndim;
                    o[m].shape[0] = sf.t[i].shape[0];
                    o[m].shape[1] = sf.t[i].ndim > 1 ? sf.t[i].shape[1] : 0;
                    ns[m] = st_numel(&sf.t[i]);
                    vals[m] = mallocCheck(ns[m] * sizeof(float));
                    st_read_f32(&sf, &sf.t[i], vals[m], err, sizeof(err));
                    fprintf(idx, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", part + i ? ", " : "", sf.t[i].name, part + 1);
                }
                snprintf(bad, sizeof(bad), "%s/sharded/model-0000%d-of-00002.safetensors", D, part + 1);
                Vals vv = {vals, ns};
                CHECK(st_write(bad, o, m, ST_BF16, fill_vals, &vv, err, sizeof(err)) == 0, "write shard %s", bad);
                for (int i = 0; i < m; i++) free(vals[i]);
                free(vals);
                free(ns);
                free(o);
            }
            fprintf(idx, "}}\n");
            fcloseCheck(idx, "index");
            st_close(&sf);
            snprintf(bad, sizeof(bad), "%s/sharded", D);
            float* sh = NULL;
            int checked = 0;
            CHECK(hf_read_dir(bad, &pl, &sh, &checked, err, sizeof(err)) == 0, "read sharded BF16: %s", err);
            double worst = 0.0;
            for (size_t i = 0; sh && i < params_full_count(&pl); i++)
                if (full[i] != 0.0f) worst = fmax(worst, fabs(sh[i] - full[i]) / fabs(full[i]));
            CHECK(sh && worst <= 1.0 / 256, "sharded BF16 copy loads within bf16 rounding (worst rel %g)", worst);
            free(sh);
        }
        free(full);
    }

    /* the bad-file classes, each on a copy of the qwen2 directory */
    ParamLayout pl;
    params_layout(&pl, qwen(), 1, 0);
    snprintf(dir, sizeof(dir), "%s/qwen2", D);
    snprintf(bad, sizeof(bad), "%s/bad", D);
    const char* py = "python3 - %s/model.safetensors <<'PY'\n"
                     "import json, struct, sys\n"
                     "p = sys.argv[1]; b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]\n"
                     "h = json.loads(b[8:8 + n]); data = b[8 + n:]\n"
                     "%s\n"
                     "hj = json.dumps(h).encode(); hj += b' ' * (-len(hj) %% 8)\n"
                     "open(p, 'wb').write(struct.pack('<Q', len(hj)) + hj + data)\n"
                     "PY";
    struct { const char* what; const char* edit; const char* raw; const char* n1; const char* n2; } cases[] = {
        {"missing tensor", "del h['model.layers.1.mlp.up_proj.weight']", NULL, "model.layers.1.mlp.up_proj.weight", "missing"},
        {"wrong shape", "h['model.norm.weight']['shape'] = [4, 4]", NULL, "model.norm.weight", "shape [4, 4]"},
        {"unsupported dtype", "t = h['model.layers.0.self_attn.k_proj.bias']; t['dtype'] = 'I32'", NULL,
         "model.layers.0.self_attn.k_proj.bias", "dtype I32"},
        {"truncated data", NULL, "truncate -s -100 %s/model.safetensors", "lm_head.weight", "truncated"},
        {"malformed header JSON", NULL, "printf '\\020\\0\\0\\0\\0\\0\\0\\0{\"a\": [1, 2' > %s/model.safetensors; head -c 64 /dev/zero >> %s/model.safetensors",
         "model.safetensors", "not a JSON object"},
        {"header length past EOF", NULL, "printf '\\377\\377\\0\\0\\0\\0\\0\\0{}' > %s/model.safetensors", "model.safetensors",
         "header length 65535 runs past the end"},
        {"flipped data byte", NULL, "f=%s/model.safetensors; printf '\\125' | dd of=$f bs=1 seek=$(($(stat -c %%s $f) - 50)) conv=notrunc status=none",
         "model.safetensors", "fails its checksum"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -r %s %s", bad, dir, bad);
        run(cmd);
        if (cases[i].edit) snprintf(cmd, sizeof(cmd), py, bad, cases[i].edit);
        else snprintf(cmd, sizeof(cmd), cases[i].raw, bad, bad);
        run(cmd);
        expect_error(cases[i].what, bad, &pl, cases[i].n1, cases[i].n2);
    }
}

int main(void) {
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", D, D);
    run(cmd);
    printf("test_safetensors\n");
    test_f16();
    test_roundtrip();
    test_dirs();
    printf("%s: %d of %d checks passed\n", failed ? "FAILED" : "PASSED", checks - failed, checks);
    return failed ? 1 : 0;
}
