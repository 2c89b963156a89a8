/*
 * tests/fuzz/seeds.c - writes the binary seed corpora of the fuzzers with
 * the project's own writers, so the seeds are valid files of today's
 * formats: build/fuzz/seeds seeds/DIR writes DIR/{model,state,shard}/...
 * (the text seeds of the config fuzzer live in tests/fuzz/corpus/config).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/shard.h"
#include "model/params.h"
#include "model/hf.h"
#include "model/safetensors.h"
#include "train/state.h"

static void die(const char* what, const char* err) {
    fprintf(stderr, "seeds: %s: %s\n", what, err);
    exit(1);
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: seeds DIR\n"); return 2; }
    char path[1024], err[1024];
    const char* sub[] = {"model", "state", "shard", "safetensors"};
    mkdir(argv[1], 0755);
    for (int i = 0; i < 4; i++) { snprintf(path, sizeof(path), "%s/%s", argv[1], sub[i]); mkdir(path, 0755); }

    GPTShape s = gpt2_shape(4, 32, 128, 1, 1, 4);   /* the shape fuzz_model.c and fuzz_state.c expect */
    ParamLayout pl;
    params_layout(&pl, s, 1, 0);
    float* full = params_init_full(&pl, 5);
    snprintf(path, sizeof(path), "%s/model/tagged.bin", argv[1]);
    if (params_save_full(path, &pl, full, err, sizeof(err))) die(path, err);

    float* m = calloc(pl.total, sizeof(float));
    float* v = calloc(pl.total, sizeof(float));
    for (size_t i = 0; i < pl.total; i++) { m[i] = 1e-3f * (float)(i % 7); v[i] = 1e-6f * (float)(i % 5); }
    unsigned char sites[24] = {1, 2, 3};
    StateHeader h = {.step = 7, .tp = 1, .dp = 1, .rank = 0, .nparams = (int64_t)pl.total, .comm_bytes = 24,
                     .data_shard = 0, .data_pos = 16};
    snprintf(path, sizeof(path), "%s/state/v2.bin", argv[1]);
    if (state_write(path, &h, m, v, sites, err, sizeof(err))) die(path, err);

    uint16_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = (uint16_t)(i * 37 % 256);
    snprintf(path, sizeof(path), "%s/shard/small.bin", argv[1]);
    if (shard_write(path, tok, 64, err, sizeof(err))) die(path, err);
    /* a small Hugging Face directory's model.safetensors for each dtype */
    GPTShape q = s;
    q.arch = ARCH_QWEN2; q.KV = 1; q.F = 8; q.tied = 0; q.norm_eps = 1e-6f; q.rope_theta = 10000.0f;
    ParamLayout pq;
    params_layout(&pq, q, 1, 0);
    float* fq = params_init_full(&pq, 3);
    const int codes[3] = {ST_F32, ST_BF16, ST_F16};
    for (int c = 0; c < 3; c++) {
        char dir[1100];
        snprintf(dir, sizeof(dir), "%s/safetensors/dir%d", argv[1], c);
        if (hf_save_dir(dir, &pq, fq, codes[c], err, sizeof(err))) die(dir, err);
        snprintf(path, sizeof(path), "%s/safetensors/model%d.safetensors", argv[1], c);
        char src[1200];
        snprintf(src, sizeof(src), "%s/model.safetensors", dir);
        if (rename(src, path) != 0) die(path, "rename failed");
        hf_remove_dir(dir);
    }
    free(fq);
    free(full); free(m); free(v);
    return 0;
}
