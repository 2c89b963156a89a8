/*
 * tests/test_params.c - TP sharding of the parameters, init and model files.
 *
 * Checks that (1) slicing a full model and assembling the shards of every
 * rank gives back the full model exactly, for P = 1..4 and shapes where
 * padding matters; (2) the shards hold the right rows/columns (spot checks
 * against the formulas of model/params.h); (3) init is a pure function
 * of the seed; (4) a saved model file loads back bit for bit, with a
 * different padded vocab re-padded; (5) the shard-block list that every
 * slicer walks (host and device) tiles each shard in storage order and,
 * over the ranks, covers each full tensor exactly once.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/crc32c.h"
#include "model/params.h"

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static size_t full_total(const ParamLayout* pl) {
    size_t t = 0;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) t += pl->full[k];
    return t;
}

static size_t full_offset(const ParamLayout* pl, int t) {
    size_t o = 0;
    for (int k = 0; k < t; k++) o += pl->full[k];
    return o;
}

/* s at TP degree P: its padded vocab and rank 0's layout; 0 if P does not divide the heads */
static int layout_at(GPTShape s, int P, GPTShape* sp, ParamLayout* pl0) {
    if (s.NH % P) return 0;
    *sp = s;
    sp->Vp = params_padded_vocab(s.V, P);
    params_layout(pl0, *sp, P, 0);
    return 1;
}

static void test_roundtrip(GPTShape s) {
    for (int P = 1; P <= 4; P++) {
        GPTShape sp;
        ParamLayout pl0;
        if (!layout_at(s, P, &sp, &pl0)) continue;
        size_t n = full_total(&pl0);
        float* full = params_init_full(&pl0, 42);
        float* back = calloc(n, sizeof(float));
        size_t sum_local = 0;
        for (int r = 0; r < P; r++) {
            ParamLayout pl;
            params_layout(&pl, sp, P, r);
            float* shard = calloc(pl.total, sizeof(float));
            params_copy_shard(&pl, full, shard, 1);
            params_copy_shard(&pl, back, shard, 0);
            /* spot checks of the Megatron layout */
            int C = sp.C, Cr = C / P, L = sp.L, Vr = sp.Vp / P;
            float* fq = full + full_offset(&pl, P_QKVW);
            float* lq = shard + pl.offset[P_QKVW];
            int l = L - 1, row = Cr - 1, col = C / 2;
            /* local k row `row` of layer l is full row C + r*Cr + row */
            CHECK(lq[(size_t)l * 3 * Cr * C + (size_t)(Cr + row) * C + col] ==
                  fq[(size_t)l * 3 * C * C + (size_t)(C + r * Cr + row) * C + col], "qkvw k-row P=%d r=%d", P, r);
            float* fa = full + full_offset(&pl, P_ATTPROJW);
            float* la = shard + pl.offset[P_ATTPROJW];
            CHECK(la[(size_t)l * C * Cr + (size_t)3 * Cr + (Cr - 1)] == fa[(size_t)l * C * C + (size_t)3 * C + r * Cr + Cr - 1],
                  "attprojw column slice P=%d r=%d", P, r);
            CHECK(shard[pl.offset[P_WTE] + (size_t)(Vr - 1) * C] == full[(size_t)(r * Vr + Vr - 1) * C], "wte rows P=%d r=%d", P, r);
            for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
                if (pl.sharded[t]) CHECK(pl.local[t] * (size_t)P == pl.full[t], "tensor %s splits evenly", PARAM_NAMES[t]);
                else CHECK(pl.local[t] == pl.full[t], "tensor %s replicated", PARAM_NAMES[t]);
                if (pl.sharded[t] || r == 0) sum_local += pl.local[t];
            }
            free(shard);
        }
        CHECK(sum_local == n, "shards cover the model once (P=%d)", P);
        CHECK(memcmp(full, back, n * sizeof(float)) == 0, "gather(slice(full)) == full for P=%d", P);
        /* padding rows are zero, and Vp is a multiple of 128 and P */
        CHECK(sp.Vp % 128 == 0 && sp.Vp % P == 0 && sp.Vp >= sp.V, "padded vocab %d for V=%d P=%d", sp.Vp, sp.V, P);
        int zero = 1;
        for (size_t i = (size_t)sp.V * sp.C; i < (size_t)sp.Vp * sp.C; i++) zero &= full[i] == 0.0f;
        CHECK(zero, "padding rows of wte are zero");
        free(full);
        free(back);
    }
}

static void test_shard_blocks(GPTShape s) {
    for (int P = 1; P <= 4; P++) {
        GPTShape sp;
        ParamLayout pl0;
        if (!layout_at(s, P, &sp, &pl0)) continue;
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            unsigned char* hits = calloc(pl0.full[t], 1);   /* how many ranks hold each element */
            for (int r = 0; r < P; r++) {
                ParamLayout pl;
                params_layout(&pl, sp, P, r);
                int nb = params_shard_nblocks(&pl, t);
                CHECK(pl.sharded[t] || nb == 1, "replicated %s is one block, got %d", PARAM_NAMES[t], nb);
                size_t next = 0;   /* blocks follow each other in the shard */
                for (int i = 0; i < nb; i++) {
                    ShardBlock b = params_shard_block(&pl, t, i);
                    CHECK(b.dst == next, "%s P=%d r=%d block %d at %zu, expected %zu", PARAM_NAMES[t], P, r, i, b.dst, next);
                    CHECK(b.rows > 0 && b.cols > 0 && (size_t)b.cols <= b.ld &&
                          b.src + (size_t)(b.rows - 1) * b.ld + (size_t)b.cols <= pl.full[t],
                          "%s P=%d r=%d block %d lies outside the tensor", PARAM_NAMES[t], P, r, i);
                    for (int row = 0; row < b.rows; row++) {
                        for (int col = 0; col < b.cols; col++) hits[b.src + (size_t)row * b.ld + (size_t)col]++;
                    }
                    next += (size_t)b.rows * (size_t)b.cols;
                }
                CHECK(next == pl.local[t], "%s P=%d r=%d: blocks hold %zu values, shard %zu", PARAM_NAMES[t], P, r, next,
                      pl.local[t]);
            }
            size_t wrong = 0;
            unsigned char want = pl0.sharded[t] ? 1 : (unsigned char)P;
            for (size_t i = 0; i < pl0.full[t]; i++) wrong += hits[i] != want;
            CHECK(wrong == 0, "%s P=%d: %zu elements not held by exactly %s", PARAM_NAMES[t], P, wrong,
                  pl0.sharded[t] ? "one rank" : "every rank");
            free(hits);
        }
    }
}

static void test_init_stats(void) {
    GPTShape s = gpt2_shape(64, 300, 384, 2, 4, 64);
    ParamLayout pl;
    params_layout(&pl, s, 1, 0);
    float* a = params_init_full(&pl, 7);
    float* b = params_init_full(&pl, 7);
    float* c = params_init_full(&pl, 8);
    size_t n = full_total(&pl);
    CHECK(memcmp(a, b, n * sizeof(float)) == 0, "init is a function of the seed");
    CHECK(memcmp(a, c, n * sizeof(float)) != 0, "another seed gives other weights");
    /* the std of qkvw is 0.02 and of the residual projections 0.02/sqrt(2L) */
    double ss = 0.0, sr = 0.0;
    size_t nq = pl.full[P_QKVW], nr = pl.full[P_FCPROJW];
    float* q = a + full_offset(&pl, P_QKVW);
    float* r = a + full_offset(&pl, P_FCPROJW);
    for (size_t i = 0; i < nq; i++) ss += (double)q[i] * q[i];
    for (size_t i = 0; i < nr; i++) sr += (double)r[i] * r[i];
    double std_q = sqrt(ss / nq), std_r = sqrt(sr / nr), want_r = 0.02 / sqrt(2.0 * s.L);
    CHECK(fabs(std_q - 0.02) < 0.02 * 0.03, "qkvw std %.5f ~ 0.02", std_q);   /* 24k samples: ~1% sampling error */
    CHECK(fabs(std_r - want_r) < want_r * 0.03, "fcprojw std %.5f ~ %.5f", std_r, want_r);
    float* g = a + full_offset(&pl, P_LN1W);
    CHECK(g[0] == 1.0f && g[pl.full[P_LN1W] - 1] == 1.0f, "layernorm gains start at 1");
    free(a);
    free(b);
    free(c);
}

static float* load_ok(const char* path, const ParamLayout* pl, int* checked) {
    char err[1024];
    float* out = NULL;
    int rc = params_read_full(path, pl, &out, checked, err, sizeof(err));
    CHECK(rc == 0, "model file loads");
    if (rc != 0) printf("    %s\n", err);
    return out;
}

/* overwrite 4 bytes of a file at byte offset off */
static void poke(const char* path, long off, const void* bytes) {
    FILE* f = fopen(path, "r+b");
    CHECK(f != NULL, "reopen model file");
    fseek(f, off, SEEK_SET);
    fwrite(bytes, 1, 4, f);
    fclose(f);
}

/* loading must fail with a message containing want */
static void load_fails(const char* path, const ParamLayout* pl, const char* want, const char* what) {
    char err[1024] = "";
    float* out = NULL;
    int checked = 0;
    int rc = params_read_full(path, pl, &out, &checked, err, sizeof(err));
    CHECK(rc != 0 && out == NULL && strstr(err, want) && strstr(err, path), what);
    if (rc == 0 || !strstr(err, want)) printf("    got: %s\n", err);
    free(out);
}

static void test_model_file(void) {
    GPTShape s = gpt2_shape(32, 200, 256, 2, 4, 32);
    ParamLayout pl;
    params_layout(&pl, s, 1, 0);
    float* full = params_init_full(&pl, 3);
    char path[] = "/tmp/test_params_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    char err[1024];
    int checked = 0;
    CHECK(params_save_full(path, &pl, full, err, sizeof(err)) == 0, "model file saves");
    float* back = load_ok(path, &pl, &checked);
    CHECK(back && memcmp(full, back, full_total(&pl) * sizeof(float)) == 0, "model file round trip is bit-exact");
    CHECK(checked == 1, "our model files carry a checksum that is verified");
    free(back);

    /* corruption anywhere in the payload is found by the checksum */
    long wpe_at = 1024 + (long)(pl.full[P_WTE] * sizeof(float)) + 40;
    float x = 0.0123f;
    poke(path, wpe_at, &x);
    load_fails(path, &pl, "fails its checksum", "a changed weight fails the checksum, naming the file");
    /* a file without our tag (as llm.c writes it) loads unverified, and a NaN in it is named */
    int zero = 0;
    poke(path, 8 * 4, &zero);
    back = load_ok(path, &pl, &checked);
    CHECK(checked == 0, "a model file without a checksum loads with checked = 0");
    free(back);
    float nan = NAN;
    long fcw_at = 1024;
    for (int t = 0; t < P_FCW; t++) fcw_at += (long)(pl.full[t] * sizeof(float));
    fcw_at += (long)(pl.full[P_FCW] / 2 * sizeof(float)) + 4;   /* layer 1 of fcw */
    poke(path, fcw_at, &nan);
    load_fails(path, &pl, "non-finite weight at tensor fcw, layer 1", "a NaN is named by tensor and layer");
    /* a hostile padded vocab: INT_MIN and INT_MAX are header errors, not overflows */
    int bad_vp = INT_MIN;
    poke(path, 7 * 4, &bad_vp);
    load_fails(path, &pl, "padded vocab", "padded vocab INT_MIN is refused");
    bad_vp = INT_MAX;
    poke(path, 7 * 4, &bad_vp);
    load_fails(path, &pl, "bytes but a model of this shape", "padded vocab INT_MAX is refused by size");
    CHECK(params_padded_vocab(65536, (1 << 30) + 1) == -1, "a padded vocab over INT_MAX is -1, not an overflow");
    CHECK(params_padded_vocab(200, 2) == 256 && params_padded_vocab(200, 3) == 384 && params_padded_vocab(50257, 1) == 50304,
          "padded vocab: a multiple of 128 and of P");

    /* a file with a larger padded vocab (as if written for another TP degree) */
    GPTShape s2 = s;
    s2.Vp = 384;
    ParamLayout pl2;
    params_layout(&pl2, s2, 1, 0);
    float* full2 = params_init_full(&pl2, 3);
    CHECK(params_save_full(path, &pl2, full2, err, sizeof(err)) == 0, "model file saves");
    float* back2 = load_ok(path, &pl, &checked);
    CHECK(back2 && memcmp(back2, full2, (size_t)s.V * s.C * sizeof(float)) == 0, "real vocab rows survive re-padding");
    CHECK(back2 && memcmp(back2 + pl.full[P_WTE], full2 + pl2.full[P_WTE], (full_total(&pl) - pl.full[P_WTE]) * sizeof(float)) == 0,
          "tensors after wte survive re-padding");
    CHECK(checked == 1, "a re-padded file's checksum covers its padding rows");
    /* a failed save leaves no file behind */
    CHECK(params_save_full("/nonexistent-dir/m.bin", &pl, full, err, sizeof(err)) != 0 && strstr(err, "/nonexistent-dir/m.bin.tmp"),
          "an unwritable path is an error naming the file");
    remove(path);
    free(full); free(full2); free(back2);
}

/* CRC-32C: the published check value, both code paths, and incremental use */
static void test_crc32c(void) {
    CHECK(crc32c_update(0, "123456789", 9) == 0xE3069283u, "CRC-32C of \"123456789\" is the check value e3069283");
    CHECK(crc32c_update_portable(0, "123456789", 9) == 0xE3069283u, "the portable path gives the check value");
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 131 + 7);
    int same = 1;
    for (size_t n = 0; n <= 1000; n += 37) {
        uint32_t a = crc32c_update(0, buf, n), b = crc32c_update_portable(0, buf, n);
        uint32_t c = crc32c_update(crc32c_update(0, buf, n / 3), buf + n / 3, n - n / 3);
        same &= a == b && a == c;
    }
    CHECK(same, "hardware and portable paths agree at every length, and incremental updates compose");
}

int main(void) {
    test_crc32c();
    test_roundtrip(gpt2_shape(16, 256, 256, 2, 4, 32));
    test_roundtrip(gpt2_shape(8, 1000, 1024, 3, 12, 48));     /* V not a multiple of 128, NH divisible by 1..4 */
    test_shard_blocks(gpt2_shape(16, 256, 256, 2, 4, 32));
    test_shard_blocks(gpt2_shape(8, 1000, 1024, 3, 12, 48));
    test_init_stats();
    test_model_file();
    if (failures) { printf("test_params: %d FAILED\n", failures); return 1; }
    printf("test_params: all passed\n");
    return 0;
}
