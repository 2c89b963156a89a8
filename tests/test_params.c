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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
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
    GPTShape s = {64, 300, 384, 2, 4, 64};
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

static void test_model_file(void) {
    GPTShape s = {32, 200, 256, 2, 4, 32};
    ParamLayout pl;
    params_layout(&pl, s, 1, 0);
    float* full = params_init_full(&pl, 3);
    char path[] = "/tmp/test_params_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    params_save_full(path, &pl, full);
    float* back = params_load_full(path, &pl);
    CHECK(memcmp(full, back, full_total(&pl) * sizeof(float)) == 0, "model file round trip is bit-exact");
    /* a file with a larger padded vocab (as if written for another TP degree) */
    GPTShape s2 = s;
    s2.Vp = 384;
    ParamLayout pl2;
    params_layout(&pl2, s2, 1, 0);
    float* full2 = params_init_full(&pl2, 3);
    params_save_full(path, &pl2, full2);
    float* back2 = params_load_full(path, &pl);
    CHECK(memcmp(back2, full2, (size_t)s.V * s.C * sizeof(float)) == 0, "real vocab rows survive re-padding");
    CHECK(memcmp(back2 + pl.full[P_WTE], full2 + pl2.full[P_WTE], (full_total(&pl) - pl.full[P_WTE]) * sizeof(float)) == 0,
          "tensors after wte survive re-padding");
    remove(path);
    free(full); free(back); free(full2); free(back2);
}

int main(void) {
    test_roundtrip((GPTShape){16, 256, 256, 2, 4, 32});
    test_roundtrip((GPTShape){8, 1000, 1024, 3, 12, 48});     /* V not a multiple of 128, NH divisible by 1..4 */
    test_shard_blocks((GPTShape){16, 256, 256, 2, 4, 32});
    test_shard_blocks((GPTShape){8, 1000, 1024, 3, 12, 48});
    test_init_stats();
    test_model_file();
    if (failures) { printf("test_params: %d FAILED\n", failures); return 1; }
    printf("test_params: all passed\n");
    return 0;
}
