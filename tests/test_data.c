/*
 * tests/test_data.c - token shards, the data loader and tokenizer decode.
 *
 * Writes shards under a fresh /tmp directory and checks: the on-disk format
 * (llm.c's header), the exact batch stream (values, order, shard switching,
 * wrap-around), the DP split, tell/seek/reset, every init error (each must
 * return -1 and name the file), and that byte tokens decode back to text.
 * Exit status is the number of failed checks (0 = all passed).
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, open_memstream */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"
#include "data/tokenizer.h"

#include "tests/testing.h"

static const char* path_in_tmp(const char* name) {
    static char buf[4][512];
    static int next = 0;
    char* p = buf[next++ % 4];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

/* Token value of shard s at index i: distinct across shards, < 256. */
static uint16_t token_at(int s, int64_t i) {
    return (uint16_t)((s * 100 + i) % 256);
}

static void write_shard(const char* path, int s, int n) {
    uint16_t* t = (uint16_t*)malloc(sizeof(uint16_t) * (size_t)n);
    for (int i = 0; i < n; i++) t[i] = token_at(s, i);
    char err[512];
    int rc = shard_write(path, t, (size_t)n, err, sizeof(err));
    CHECK(rc == 0, "shard_write %s: %s", path, err);
    free(t);
}

/* A raw file with any header fields and `body` tokens, to fake bad shards. */
static void write_raw(const char* path, int32_t magic, int32_t version, int32_t count, int body) {
    FILE* f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot create %s\n", path);
        exit(1);
    }
    int32_t hdr[256] = {0};
    hdr[0] = magic;
    hdr[1] = version;
    hdr[2] = count;
    fwrite(hdr, sizeof(int32_t), 256, f);
    for (int i = 0; i < body; i++) {
        uint16_t t = (uint16_t)(i % 256);
        fwrite(&t, 2, 1, f);
    }
    fclose(f);
}

/* Expect the batch that starts at (shard s, pos) for this rank. */
static void check_batch(const int* in, const int* tg, int s, int64_t pos, int rank, int B, int T, int step) {
    int64_t start = pos + (int64_t)rank * B * T;
    for (int i = 0; i < B * T; i++) {
        if (in[i] != token_at(s, start + i) || tg[i] != token_at(s, start + i + 1)) {
            CHECK(0, "step %d rank %d: token %d is in=%d tg=%d, expected shard %d pos %lld: in=%d tg=%d", step,
                  rank, i, in[i], tg[i], s, (long long)start, token_at(s, start + i), token_at(s, start + i + 1));
            return;
        }
    }
}

static void test_format(void) {
    const char* p = path_in_tmp("fmt.bin");
    uint16_t t[3] = {1, 258, 65535};
    char err[512];
    CHECK(shard_write(p, t, 3, err, sizeof(err)) == 0, "%s", err);
    FILE* f = fopen(p, "rb");
    unsigned char b[1024 + 6];
    size_t got = f ? fread(b, 1, sizeof(b), f) : 0;
    CHECK(got == sizeof(b), "file size %zu", got);
    if (f) {
        CHECK(fgetc(f) == EOF, "trailing bytes after the tokens");
        fclose(f);
    }
    /* 20240520 = 0x0134D888, little-endian; version 1; count 3; then LE uint16 */
    const unsigned char expect_head[12] = {0x88, 0xD8, 0x34, 0x01, 1, 0, 0, 0, 3, 0, 0, 0};
    CHECK(memcmp(b, expect_head, 12) == 0, "header bytes differ from llm.c's format");
    int zeros = 1;
    for (int i = 12; i < 1024; i++) zeros &= b[i] == 0;
    CHECK(zeros, "header padding is not zero");
    const unsigned char expect_body[6] = {1, 0, 2, 1, 0xFF, 0xFF};
    CHECK(memcmp(b + 1024, expect_body, 6) == 0, "token bytes differ");
    CHECK(fopen(path_in_tmp("fmt.bin.tmp"), "rb") == NULL, "the .tmp file was left behind");

    int rc = shard_write(path_in_tmp("no/such/dir/x.bin"), t, 3, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "no/such/dir/x.bin"), "unwritable path: rc %d err '%s'", rc, err);
}

/* Three shards via a glob: order, shard switching, wrap-around. */
static void test_stream(void) {
    write_shard(path_in_tmp("s_002.bin"), 2, 9); /* written out of order: the glob sorts */
    write_shard(path_in_tmp("s_000.bin"), 0, 30);
    write_shard(path_in_tmp("s_001.bin"), 1, 25);
    DataLoader dl;
    char err[512];
    const int B = 2, T = 4;
    int rc = dataloader_init(&dl, path_in_tmp("s_*.bin"), B, T, 0, 1, 256, err, sizeof(err));
    CHECK(rc == 0, "init: %s", err);
    if (rc != 0) return;
    CHECK(dl.nshards == 3, "nshards %d", dl.nshards);
    CHECK(dataloader_num_tokens(&dl) == 64, "num_tokens %lld", (long long)dataloader_num_tokens(&dl));
    /* window = 9 tokens, stride 8: shard 0 (30 tokens) gives 0, 8, 16 (24+9 > 30);
     * shard 1 (25) gives 0, 8, 16 (an exact fit: 16+9 = 25); shard 2 (9) gives 0;
     * then back to shard 0. */
    const int expect[][2] = {{0, 0}, {0, 8}, {0, 16}, {1, 0}, {1, 8}, {1, 16}, {2, 0}, {0, 0}, {0, 8}, {0, 16}};
    int in[8], tg[8];
    for (int step = 0; step < 10; step++) {
        DataPos p = dataloader_tell(&dl);
        CHECK(p.shard == expect[step][0] && p.pos == expect[step][1], "step %d: tell (%lld, %lld), expected (%d, %d)",
              step, (long long)p.shard, (long long)p.pos, expect[step][0], expect[step][1]);
        dataloader_next(&dl, in, tg);
        check_batch(in, tg, expect[step][0], expect[step][1], 0, B, T, step);
    }
    CHECK(in[0] == 16 && tg[0] == 17, "explicit values: in[0]=%d tg[0]=%d", in[0], tg[0]);

    /* tell/seek: remember the stream after a position, jump away, come back. */
    DataPos saved = dataloader_tell(&dl);
    int ref_in[6][8], ref_tg[6][8];
    for (int i = 0; i < 6; i++) dataloader_next(&dl, ref_in[i], ref_tg[i]);
    dataloader_reset(&dl);
    DataPos zero = dataloader_tell(&dl);
    CHECK(zero.shard == 0 && zero.pos == 0, "reset: (%lld, %lld)", (long long)zero.shard, (long long)zero.pos);
    dataloader_next(&dl, in, tg);
    check_batch(in, tg, 0, 0, 0, B, T, -1);
    dataloader_seek(&dl, saved);
    for (int i = 0; i < 6; i++) {
        dataloader_next(&dl, in, tg);
        CHECK(memcmp(in, ref_in[i], sizeof(in)) == 0 && memcmp(tg, ref_tg[i], sizeof(tg)) == 0,
              "after seek, batch %d differs", i);
    }
    /* A fresh loader (a resumed run) seeks to the same stream. */
    DataLoader dl2;
    rc = dataloader_init(&dl2, path_in_tmp("s_*.bin"), B, T, 0, 1, 256, err, sizeof(err));
    CHECK(rc == 0, "init 2: %s", err);
    if (rc == 0) {
        dataloader_seek(&dl2, saved);
        for (int i = 0; i < 6; i++) {
            dataloader_next(&dl2, in, tg);
            CHECK(memcmp(in, ref_in[i], sizeof(in)) == 0 && memcmp(tg, ref_tg[i], sizeof(tg)) == 0,
                  "fresh loader after seek, batch %d differs", i);
        }
        dataloader_free(&dl2);
    }
    dataloader_free(&dl);
    dataloader_free(&dl); /* freeing twice is harmless */
}

/* DP: ranks 0 and 1 of dp_size 2 read disjoint, consecutive B*T windows. */
static void test_dp_split(void) {
    write_shard(path_in_tmp("dp_0.bin"), 0, 40);
    write_shard(path_in_tmp("dp_1.bin"), 1, 17);
    const int B = 2, T = 4;
    DataLoader r0, r1;
    char err[512];
    int rc0 = dataloader_init(&r0, path_in_tmp("dp_*.bin"), B, T, 0, 2, 256, err, sizeof(err));
    CHECK(rc0 == 0, "rank 0 init: %s", err);
    int rc1 = dataloader_init(&r1, path_in_tmp("dp_*.bin"), B, T, 1, 2, 256, err, sizeof(err));
    CHECK(rc1 == 0, "rank 1 init: %s", err);
    if (rc0 || rc1) return;
    /* window 17, stride 16: shard 0 (40) gives 0, 16 (32+17 > 40); shard 1 (17) gives 0; wrap. */
    const int expect[][2] = {{0, 0}, {0, 16}, {1, 0}, {0, 0}};
    int in0[8], tg0[8], in1[8], tg1[8];
    for (int step = 0; step < 4; step++) {
        dataloader_next(&r0, in0, tg0);
        dataloader_next(&r1, in1, tg1);
        check_batch(in0, tg0, expect[step][0], expect[step][1], 0, B, T, step);
        check_batch(in1, tg1, expect[step][0], expect[step][1], 1, B, T, step);
        /* consecutive: rank 1 starts where rank 0's inputs end */
        CHECK(tg0[B * T - 1] == in1[0], "step %d: rank 0's last target %d != rank 1's first input %d", step,
              tg0[B * T - 1], in1[0]);
        DataPos p0 = dataloader_tell(&r0), p1 = dataloader_tell(&r1);
        CHECK(p0.shard == p1.shard && p0.pos == p1.pos, "step %d: ranks disagree on the position", step);
    }
    CHECK(in0[0] == 0 && in1[0] == 8, "explicit DP values: %d %d", in0[0], in1[0]);
    dataloader_free(&r0);
    dataloader_free(&r1);
}

/* Every init error returns -1 with a message naming the file. */
static void expect_init_error(const char* pattern, const char* must_name, const char* must_say, int B, int T,
                              int dp_size, int vocab) {
    DataLoader dl;
    char err[512] = "";
    int rc = dataloader_init(&dl, pattern, B, T, 0, dp_size, vocab, err, sizeof(err));
    CHECK(rc == -1, "'%s' should fail, got rc %d", pattern, rc);
    CHECK(strstr(err, must_name) != NULL, "error does not name '%s': %s", must_name, err);
    CHECK(strstr(err, must_say) != NULL, "error does not say '%s': %s", must_say, err);
    CHECK(strchr(err, '\n') == NULL, "error is not one line: %s", err);
    CHECK(dl.paths == NULL && dl.buf == NULL && dl.nshards == 0, "state left allocated after an error");
    if (rc == 0) dataloader_free(&dl);
    printf("  ok: %s\n", err);
}

static void test_errors(void) {
    write_raw(path_in_tmp("bad_magic.bin"), 12345, 1, 20, 20);
    expect_init_error(path_in_tmp("bad_magic.bin"), "bad_magic.bin", "magic", 2, 4, 1, 256);
    write_raw(path_in_tmp("bad_version.bin"), SHARD_MAGIC, 2, 20, 20);
    expect_init_error(path_in_tmp("bad_version.bin"), "bad_version.bin", "version", 2, 4, 1, 256);
    write_raw(path_in_tmp("truncated.bin"), SHARD_MAGIC, 1, 30, 20);
    expect_init_error(path_in_tmp("truncated.bin"), "truncated.bin", "truncated", 2, 4, 1, 256);
    write_raw(path_in_tmp("header_only.bin"), SHARD_MAGIC, 1, 30, 0);
    expect_init_error(path_in_tmp("header_only.bin"), "header_only.bin", "truncated", 2, 4, 1, 256);
    FILE* f = fopen(path_in_tmp("tiny.bin"), "wb");
    if (f) {
        fputs("not a shard", f);
        fclose(f);
    }
    expect_init_error(path_in_tmp("tiny.bin"), "tiny.bin", "header", 2, 4, 1, 256);

    uint16_t t[40];
    for (int i = 0; i < 40; i++) t[i] = (uint16_t)i;
    t[37] = 300;
    char err[512];
    CHECK(shard_write(path_in_tmp("big_token.bin"), t, 40, err, sizeof(err)) == 0, "%s", err);
    expect_init_error(path_in_tmp("big_token.bin"), "big_token.bin", "index 37", 2, 4, 1, 256);
    expect_init_error(path_in_tmp("big_token.bin"), "big_token.bin", "token 300", 2, 4, 1, 256);
    /* ... but the same shard is fine for a bigger vocabulary. */
    DataLoader dl;
    int rc = dataloader_init(&dl, path_in_tmp("big_token.bin"), 2, 4, 0, 1, 50257, err, sizeof(err));
    CHECK(rc == 0, "vocab 50257: %s", err);
    if (rc == 0) dataloader_free(&dl);

    /* one global batch needs dp_size*B*T+1 = 2*2*8+1 = 33 tokens; the shard has 32 */
    write_shard(path_in_tmp("small.bin"), 0, 32);
    expect_init_error(path_in_tmp("small.bin"), "small.bin", "33", 2, 8, 2, 256);
    write_shard(path_in_tmp("exact.bin"), 0, 33);
    rc = dataloader_init(&dl, path_in_tmp("exact.bin"), 2, 8, 1, 2, 256, err, sizeof(err));
    CHECK(rc == 0, "a shard of exactly one window must load: %s", err);
    if (rc == 0) {
        int in[16], tg[16];
        dataloader_next(&dl, in, tg);
        dataloader_next(&dl, in, tg); /* wraps onto itself */
        check_batch(in, tg, 0, 0, 1, 2, 8, 0);
        dataloader_free(&dl);
    }

    /* a bad shard in the middle of a glob is named, not the pattern */
    write_shard(path_in_tmp("mix_a.bin"), 0, 40);
    write_raw(path_in_tmp("mix_b.bin"), SHARD_MAGIC, 1, 40, 39);
    write_shard(path_in_tmp("mix_c.bin"), 0, 40);
    expect_init_error(path_in_tmp("mix_*.bin"), "mix_b.bin", "truncated", 2, 4, 1, 256);

    expect_init_error(path_in_tmp("nothing_*.bin"), "nothing_*.bin", "no file matches", 2, 4, 1, 256);
    expect_init_error(path_in_tmp("missing.bin"), "missing.bin", "no file matches", 2, 4, 1, 256);
}

/* Bytes -> shard -> loader -> tokenizer gives the text back. */
static void test_tokenizer(void) {
    const char* text = "In the beginning God created the heaven and the earth.\nÄÖ ünïcödé: ✓\n";
    int n = (int)strlen(text);
    uint16_t* t = (uint16_t*)malloc(sizeof(uint16_t) * (size_t)n);
    for (int i = 0; i < n; i++) t[i] = (unsigned char)text[i];
    char err[512];
    CHECK(shard_write(path_in_tmp("text.bin"), t, (size_t)n, err, sizeof(err)) == 0, "%s", err);
    free(t);
    DataLoader dl;
    int rc = dataloader_init(&dl, path_in_tmp("text.bin"), 1, n - 1, 0, 1, 256, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    if (rc != 0) return;
    int* in = (int*)malloc(sizeof(int) * (size_t)n);
    int* tg = (int*)malloc(sizeof(int) * (size_t)n);
    dataloader_next(&dl, in, tg);
    in[n - 1] = tg[n - 2]; /* the whole text: inputs plus the last target */
    dataloader_free(&dl);

    Tokenizer tok;
    CHECK(tokenizer_init(&tok, 256, NULL, err, sizeof(err)) == 0, "%s", err);
    char* out = NULL;
    size_t outlen = 0;
    FILE* m = open_memstream(&out, &outlen);
    tokenizer_print(&tok, in, n, m);
    fclose(m);
    CHECK(outlen == (size_t)n && memcmp(out, text, (size_t)n) == 0, "decoded '%s'", out);
    free(out);

    /* control bytes print as '.', newlines stay, out-of-range ids as <id> */
    int ctl[] = {'a', '\t', '\r', 27, '\n', 127, 'b', 300, -1};
    m = open_memstream(&out, &outlen);
    tokenizer_print(&tok, ctl, 9, m);
    fclose(m);
    CHECK(strcmp(out, "a...\n.b<300><-1>") == 0, "control bytes printed as '%s'", out);
    free(out);
    tokenizer_free(&tok);
    free(in);
    free(tg);

    /* no tokenizer file and a non-byte vocabulary: ids */
    CHECK(tokenizer_init(&tok, 50257, NULL, err, sizeof(err)) == 0, "%s", err);
    int ids[] = {5, 50256};
    m = open_memstream(&out, &outlen);
    tokenizer_print(&tok, ids, 2, m);
    fclose(m);
    CHECK(strcmp(out, "<5><50256>") == 0, "ids printed as '%s'", out);
    free(out);
    tokenizer_free(&tok);

    /* llm.c's tokenizer file, version 2: 258 tokens: 256 bytes, "<|eot|>", "Hello" */
    const char* tp = path_in_tmp("tok.bin");
    FILE* f = fopen(tp, "wb");
    uint32_t hdr[256] = {0};
    hdr[0] = TOKENIZER_MAGIC;
    hdr[1] = 2;
    hdr[2] = 258;
    hdr[3] = 256;
    fwrite(hdr, 4, 256, f);
    for (int i = 0; i < 256; i++) {
        unsigned char len = 1, b = (unsigned char)i;
        fwrite(&len, 1, 1, f);
        fwrite(&b, 1, 1, f);
    }
    const char* extra[2] = {"<|eot|>", " Hello"};
    for (int i = 0; i < 2; i++) {
        unsigned char len = (unsigned char)strlen(extra[i]);
        fwrite(&len, 1, 1, f);
        fwrite(extra[i], 1, len, f);
    }
    fclose(f);
    rc = tokenizer_init(&tok, 258, tp, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    if (rc == 0) {
        CHECK(tok.eot_token == 256, "eot %d", tok.eot_token);
        int seq[] = {'H', 'i', 257, 256, 1000};
        m = open_memstream(&out, &outlen);
        tokenizer_print(&tok, seq, 5, m);
        fclose(m);
        CHECK(strcmp(out, "Hi Hello<|eot|><1000>") == 0, "table decode '%s'", out);
        free(out);
        tokenizer_free(&tok);
    }
    rc = tokenizer_init(&tok, 50257, tp, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "tok.bin") && strstr(err, "258"), "vocab mismatch: rc %d '%s'", rc, err);
    rc = tokenizer_init(&tok, 258, path_in_tmp("bad_magic.bin"), err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "bad_magic.bin") && strstr(err, "magic"), "bad magic: rc %d '%s'", rc, err);
    rc = tokenizer_init(&tok, 258, path_in_tmp("no_tokenizer.bin"), err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "no_tokenizer.bin"), "missing: rc %d '%s'", rc, err);
}

int main(void) {
    if (testing_begin("test_data") != 0) return 1;
    test_format();
    test_stream();
    test_dp_split();
    test_errors();
    test_tokenizer();
    return testing_end("test_data");
}
