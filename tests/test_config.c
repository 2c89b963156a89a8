/*
 * tests/test_config.c - loading, overriding and validating the run config.
 *
 * Checks that the defaults validate, that a JSON file and --set overrides of
 * every type land in the right fields, that the effective config written as
 * JSON loads back to the same config, and that each class of bad input is
 * rejected with -1 and one line naming the key (or the file). Temporary
 * files go to a fresh /tmp directory. Exit status 0 = all passed.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "train/config.h"

#include "tests/testing.h"

/* Write text to tmpdir/name and return the path (a static buffer per call slot). */
static const char* write_tmp(const char* name, const char* text) {
    static char buf[8][512];
    static int next = 0;
    char* p = buf[next++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    FILE* f = fopen(p, "w");
    if (!f) {
        fprintf(stderr, "cannot create %s\n", p);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    return p;
}

/* Load must fail, and err must be one line containing every given piece. */
static void expect_error(const char* what, const char* path, int nsets, const char** sets, const char* must1,
                         const char* must2) {
    Config c;
    char err[1024] = "";
    int rc = config_load(&c, path, nsets, (char**)sets, err, sizeof(err));
    CHECK(rc == -1, "%s: expected an error, got rc %d", what, rc);
    CHECK(strstr(err, must1) != NULL, "%s: error lacks '%s': %s", what, must1, err);
    if (must2) CHECK(strstr(err, must2) != NULL, "%s: error lacks '%s': %s", what, must2, err);
    CHECK(strchr(err, '\n') == NULL, "%s: error is not one line: %s", what, err);
    printf("  ok (%s): %s\n", what, err);
}

static void expect_set_error(const char* set, const char* must1, const char* must2) {
    const char* sets[1] = {set};
    expect_error(set, NULL, 1, sets, must1, must2);
}

static void test_defaults(void) {
    Config c;
    char err[512] = "";
    int rc = config_load(&c, NULL, 0, NULL, err, sizeof(err));
    CHECK(rc == 0, "defaults do not validate: %s", err);
    CHECK(c.model.n_layer == 4 && c.model.n_head == 4 && c.model.d_model == 128, "model defaults");
    CHECK(c.model.max_seq_len == 128 && c.model.vocab_size == 256 && c.model.init_from[0] == '\0', "model defaults");
    CHECK(strcmp(c.model.init, "auto") == 0, "model.init '%s'", c.model.init);
    CHECK(strcmp(c.data.train, "datasets/bible/bible_train.bin") == 0, "data.train '%s'", c.data.train);
    CHECK(strcmp(c.data.val, "datasets/bible/bible_val.bin") == 0, "data.val '%s'", c.data.val);
    CHECK(c.train.batch_size == 8 && c.train.seq_len == 64 && c.train.steps == 200, "train defaults");
    CHECK(c.train.lr == 1e-3f && c.train.warmup_steps == 20 && c.train.lr_min_frac == 0.1f, "lr defaults");
    CHECK(c.train.weight_decay == 0.1f && c.train.beta1 == 0.9f && c.train.beta2 == 0.95f, "adam defaults");
    CHECK(c.train.eps == 1e-8f && c.train.grad_clip == 1.0f && c.train.seed == 1337, "adam defaults");
    CHECK(c.train.eval_every == 50 && c.train.eval_batches == 8 && c.train.sample_every == 50, "eval defaults");
    CHECK(c.train.sample_len == 64 && c.parallel.tp == 1 && c.parallel.dp == 1, "defaults");
    CHECK(strcmp(c.compress.method, "none") == 0 && strcmp(c.compress.format_fwd, "e4m3") == 0, "compress defaults");
    CHECK(strcmp(c.compress.format_bwd, "e4m3") == 0 && c.compress.group_size == 64, "compress defaults");
    CHECK(c.compress.calib_steps == 10 && c.compress.hadamard && c.compress.adaptive_scale && c.compress.dual_scale,
          "compress defaults");
    CHECK(strcmp(c.compress.scale, "current") == 0 && strcmp(c.compress.rounding, "nearest") == 0, "compress");
    CHECK(c.compress.fwd && c.compress.bwd && c.compress.embed && c.compress.lm_head, "compress switches");
    CHECK(!c.compress.skip_first_layer && !c.compress.skip_last_layer, "compress skips");
    CHECK(c.compress.stats_every == 10 && c.compress.dump_step == -1 && c.compress.dump_sites[0] == '\0', "dump");
    CHECK(strcmp(c.comm.backend, "mpi") == 0 && strcmp(c.log.dir, "runs/default") == 0 && c.log.every == 1, "log");
    CHECK(strcmp(c.checkpoint.dir, "runs/default/ckpt") == 0, "checkpoint.dir '%s'", c.checkpoint.dir);
    CHECK(c.checkpoint.every == 0 && !c.checkpoint.resume, "checkpoint defaults");

    Config d;
    config_defaults(&d);
    CHECK(d.checkpoint.dir[0] == '\0', "config_defaults leaves checkpoint.dir empty (derived at load)");
}

static const char* good_json =
    "{\n"
    "  \"model\": { \"n_layer\": 6, \"n_head\": 8, \"d_model\": 256, \"max_seq_len\": 256, \"vocab_size\": 50257 },\n"
    "  \"data\": { \"train\": \"data/x_train_*.bin\", \"val\": \"data/x_val.bin\" },\n"
    "  \"train\": { \"batch_size\": 4, \"seq_len\": 256, \"lr\": 6e-4, \"eval_every\": 20, \"beta2\": 0.99,\n"
    "             \"grad_clip\": 0 },\n"
    "  \"parallel\": { \"tp\": 2, \"dp\": 2 },\n"
    "  \"compress\": { \"method\": \"taco\", \"group_size\": \"auto\", \"hadamard\": false,\n"
    "                \"rounding\": \"stochastic\", \"format_fwd\": \"e5m2\", \"dump_step\": 5,\n"
    "                \"dump_sites\": \"attn_out_fwd\" },\n"
    "  \"comm\": { \"backend\": \"mpi\", \"pipeline_depth\": 2, \"fuse\": false },\n"
    "  \"log\": { \"dir\": \"runs/taco\", \"every\": 10 },\n"
    "  \"checkpoint\": { \"every\": 100, \"resume\": true }\n"
    "}\n";

static void test_good_file(void) {
    const char* p = write_tmp("good.json", good_json);
    Config c;
    char err[512] = "";
    int rc = config_load(&c, p, 0, NULL, err, sizeof(err));
    CHECK(rc == 0, "good file: %s", err);
    CHECK(c.model.n_layer == 6 && c.model.n_head == 8 && c.model.d_model == 256 && c.model.vocab_size == 50257,
          "model from file");
    CHECK(strcmp(c.data.train, "data/x_train_*.bin") == 0 && strcmp(c.data.val, "data/x_val.bin") == 0, "data");
    CHECK(c.train.batch_size == 4 && c.train.seq_len == 256 && c.train.lr == 6e-4f, "train from file");
    CHECK(c.train.beta2 == 0.99f && c.train.grad_clip == 0.0f, "beta2/grad_clip from file");
    CHECK(c.train.steps == 200 && c.train.beta1 == 0.9f, "omitted keys keep defaults");
    CHECK(c.train.eval_every == 20 && c.train.sample_every == 20, "sample_every follows eval_every: %d",
          c.train.sample_every);
    CHECK(c.parallel.tp == 2 && c.parallel.dp == 2, "parallel");
    CHECK(strcmp(c.compress.method, "taco") == 0 && c.compress.group_size == 0 && !c.compress.hadamard,
          "compress from file");
    CHECK(strcmp(c.compress.rounding, "stochastic") == 0 && strcmp(c.compress.format_fwd, "e5m2") == 0, "enums");
    CHECK(c.compress.dump_step == 5 && strcmp(c.compress.dump_sites, "attn_out_fwd") == 0, "dump");
    CHECK(strcmp(c.comm.backend, "mpi") == 0 && c.comm.pipeline_depth == 2 && !c.comm.fuse && c.log.every == 10,
          "comm/log");
    CHECK(strcmp(c.checkpoint.dir, "runs/taco/ckpt") == 0, "checkpoint.dir derived from log.dir: '%s'",
          c.checkpoint.dir);
    CHECK(c.checkpoint.every == 100 && c.checkpoint.resume == 1, "checkpoint");

    /* An empty object is a valid config: all defaults. */
    rc = config_load(&c, write_tmp("empty.json", "{ }"), 0, NULL, err, sizeof(err));
    CHECK(rc == 0 && c.model.n_layer == 4, "empty object: %s", err);
}

static void test_sets(void) {
    const char* p = write_tmp("good2.json", good_json);
    const char* sets[] = {
        "train.lr=3e-4",           /* float */
        "model.n_layer=12",        /* int, overrides the file's 6 */
        "compress.hadamard=true",  /* bool, overrides the file's false */
        "checkpoint.resume=0",     /* bool as 0/1 */
        "compress.dual_scale=0",
        "data.train=shards/a b.bin", /* string, no quotes needed */
        "data.tokenizer=\"tok.bin\"", /* quotes are stripped */
        "compress.group_size=128", /* group size as a number... */
        "compress.method=fp8_group",
        "train.sample_every=7",    /* explicit: does not follow eval_every */
        "train.grad_clip=0.5",
    };
    int nsets = (int)(sizeof(sets) / sizeof(sets[0]));
    Config c;
    char err[512] = "";
    int rc = config_load(&c, p, nsets, (char**)sets, err, sizeof(err));
    CHECK(rc == 0, "sets: %s", err);
    CHECK(c.train.lr == 3e-4f, "train.lr %g", c.train.lr);
    CHECK(c.model.n_layer == 12, "model.n_layer %d", c.model.n_layer);
    CHECK(c.compress.hadamard == 1 && c.checkpoint.resume == 0 && c.compress.dual_scale == 0, "bools");
    CHECK(strcmp(c.data.train, "shards/a b.bin") == 0, "data.train '%s'", c.data.train);
    CHECK(strcmp(c.data.tokenizer, "tok.bin") == 0, "data.tokenizer '%s'", c.data.tokenizer);
    CHECK(c.compress.group_size == 128, "group_size %d", c.compress.group_size);
    CHECK(strcmp(c.compress.method, "fp8_group") == 0, "method '%s'", c.compress.method);
    CHECK(c.train.sample_every == 7 && c.train.eval_every == 20, "sample_every %d", c.train.sample_every);
    CHECK(c.train.grad_clip == 0.5f, "grad_clip %g", c.train.grad_clip);

    /* ...and "auto"; later --set wins over earlier ones */
    const char* sets2[] = {"compress.group_size=32", "compress.group_size=auto", "train.eval_every=0"};
    rc = config_load(&c, NULL, 3, (char**)sets2, err, sizeof(err));
    CHECK(rc == 0 && c.compress.group_size == 0, "group_size auto: rc %d %d %s", rc, c.compress.group_size, err);
    CHECK(c.train.sample_every == 0, "sample_every follows eval_every = 0: %d", c.train.sample_every);
    /* no validation: data.val may be empty when eval_every is 0 */
    const char* sets3[] = {"train.eval_every=0", "data.val="};
    rc = config_load(&c, NULL, 2, (char**)sets3, err, sizeof(err));
    CHECK(rc == 0 && c.data.val[0] == '\0', "empty data.val with eval_every 0: %s", err);
    /* a --set may repair a file value that alone would be out of range */
    const char* bad = write_tmp("bad_lr.json", "{\"train\": {\"lr\": -1}}");
    const char* fix[] = {"train.lr=0.01"};
    rc = config_load(&c, bad, 1, (char**)fix, err, sizeof(err));
    CHECK(rc == 0 && c.train.lr == 0.01f, "--set over a bad file value: %s", err);
    /* model.init: host and auto in every build; a file's "device" (GPU build only) replaced by --set */
    const char* dev = write_tmp("init_device.json", "{\"model\": {\"init\": \"device\"}}");
    const char* host[] = {"model.init=host"};
    rc = config_load(&c, dev, 1, (char**)host, err, sizeof(err));
    CHECK(rc == 0 && strcmp(c.model.init, "host") == 0, "--set model.init=host over a file's device: %s", err);
}

/* compress.method accepts every method of compress/'s table, and the policy
 * comm/ gets from the config names the same method and the sections' values */
static void test_methods_and_policy(void) {
    for (int m = 0; m < CM_NUM_METHODS; m++) {
        char set[64];
        snprintf(set, sizeof(set), "compress.method=%s", compress_method_name((CompressMethod)m));
        const char* sets[] = {set, "compress.format_bwd=e5m2", "compress.scale=delayed", "compress.group_size=auto",
                              "compress.dump_sites=all", "comm.fuse=false", "train.seed=7"};
        Config c;
        char err[512] = "";
        int rc = config_load(&c, NULL, 7, (char**)sets, err, sizeof(err));
        CHECK(rc == 0, "%s: %s", set, err);
        if (rc != 0) continue;
        CommPolicy p;
        config_comm_policy(&c, &p);
        CHECK((int)p.method == m, "%s: policy method %d", set, (int)p.method);
        CHECK(p.format_fwd == FP8_E4M3 && p.format_bwd == FP8_E5M2 && p.delayed && !p.stochastic, "%s: formats/scale", set);
        CHECK(p.group_size == 0 && p.calib_steps == 10 && p.seed == 7 && !p.fuse && p.pipeline_depth == 4, "%s: numbers", set);
        CHECK(strcmp(p.dump_sites, "all") == 0 && strcmp(p.dump_dir, c.log.dir) == 0, "%s: dumps into log.dir", set);
    }
}

static void test_roundtrip(void) {
    const char* p = write_tmp("good3.json", good_json);
    const char* sets[] = {"train.lr=3e-4", "train.eps=1e-6", "compress.dump_dir=/tmp/d"};
    Config a, b;
    char err[512] = "";
    CHECK(config_load(&a, p, 3, (char**)sets, err, sizeof(err)) == 0, "%s", err);
    char* ja = config_to_json(&a);
    CHECK(strstr(ja, "\"group_size\":\t\"auto\"") != NULL, "group_size 0 prints as \"auto\":\n%s", ja);
    CHECK(strstr(ja, "0.0003") != NULL && strstr(ja, "0.000300000") == NULL, "floats print short:\n%s", ja);
    const char* q = write_tmp("effective.json", ja);
    CHECK(config_load(&b, q, 0, NULL, err, sizeof(err)) == 0, "effective config does not load back: %s", err);
    char* jb = config_to_json(&b);
    CHECK(strcmp(ja, jb) == 0, "round trip differs:\n%s\n---\n%s", ja, jb);
    CHECK(a.train.lr == b.train.lr && a.train.eps == b.train.eps, "floats survive the round trip exactly");
    /* config_print writes the same text plus a newline */
    const char* pp = write_tmp("printed.json", "");
    FILE* f = fopen(pp, "w");
    config_print(&a, f);
    fclose(f);
    f = fopen(pp, "r");
    char* printed = (char*)calloc(strlen(ja) + 16, 1);
    size_t got = fread(printed, 1, strlen(ja) + 8, f);
    fclose(f);
    CHECK(got == strlen(ja) + 1 && strncmp(printed, ja, strlen(ja)) == 0 && printed[got - 1] == '\n',
          "config_print differs from config_to_json");
    free(printed);
    free(ja);
    free(jb);
}

static void test_errors(void) {
    const char* p;
    /* unknown keys and sections, with suggestions */
    p = write_tmp("unknown_key.json", "{\"train\": {\"lrr\": 0.1}}");
    expect_error("unknown key", p, 0, NULL, "train.lrr", "did you mean train.lr?");
    p = write_tmp("wrong_section.json", "{\"train\": {\"n_layer\": 2}}");
    expect_error("key in the wrong section", p, 0, NULL, "train.n_layer", "model.n_layer");
    expect_set_error("train.lrr=0.1", "train.lrr", "did you mean train.lr?");
    expect_set_error("nonsense=1", "nonsense", NULL);
    p = write_tmp("unknown_section.json", "{\"trian\": {\"lr\": 0.1}}");
    expect_error("unknown section", p, 0, NULL, "trian", "did you mean train?");
    p = write_tmp("section_not_object.json", "{\"train\": 5}");
    expect_error("section not an object", p, 0, NULL, "train", "object");
    p = write_tmp("dup.json", "{\"train\": {\"lr\": 0.1, \"lr\": 0.2}}");
    expect_error("duplicate key", p, 0, NULL, "train.lr", "twice");

    /* wrong types */
    p = write_tmp("type_float.json", "{\"train\": {\"lr\": \"abc\"}}");
    expect_error("float as string", p, 0, NULL, "train.lr: expected a number, got \"abc\"", "type_float.json");
    expect_set_error("train.lr=abc", "train.lr: expected a number, got \"abc\"", NULL);
    expect_set_error("train.lr=", "train.lr: expected a number", NULL);
    expect_set_error("train.lr=nan", "train.lr", "finite");
    p = write_tmp("type_int.json", "{\"model\": {\"n_layer\": 2.5}}");
    expect_error("int as fraction", p, 0, NULL, "model.n_layer: expected an integer, got 2.5", NULL);
    expect_set_error("train.steps=1e12", "train.steps", "int");
    expect_set_error("model.n_head=four", "model.n_head: expected an integer", NULL);
    p = write_tmp("type_bool.json", "{\"compress\": {\"hadamard\": 1}}");
    expect_error("bool as number in a file", p, 0, NULL, "compress.hadamard: expected true or false", NULL);
    expect_set_error("compress.hadamard=yes", "compress.hadamard: expected true or false", NULL);
    p = write_tmp("type_str.json", "{\"data\": {\"train\": 5}}");
    expect_error("string as number", p, 0, NULL, "data.train: expected a string, got 5", NULL);
    expect_set_error("compress.group_size=big", "compress.group_size", "auto");

    /* out of range */
    expect_set_error("train.lr=0", "train.lr", "> 0");
    expect_set_error("train.beta1=1", "train.beta1", "[0, 1)");
    expect_set_error("train.lr_min_frac=1.5", "train.lr_min_frac", "[0, 1]");
    expect_set_error("model.n_layer=0", "model.n_layer", ">= 1");
    expect_set_error("model.vocab_size=70000", "model.vocab_size", "2..65536");
    expect_set_error("compress.group_size=48", "compress.group_size", "power of two");
    expect_set_error("compress.group_size=512", "compress.group_size", "16..256");
    expect_set_error("compress.dump_step=-2", "compress.dump_step", ">= -1");
    expect_set_error("train.eval_batches=0", "train.eval_batches", NULL);
    expect_set_error("log.every=0", "log.every", NULL);
    expect_set_error("train.eps=1e60", "train.eps", "float");
    p = write_tmp("range.json", "{\"train\": {\"steps\": -5}}");
    expect_error("range from a file", p, 0, NULL, "train.steps", "range.json");

    /* bad enum values */
    expect_set_error("compress.method=fp4", "compress.method", "taco");
    expect_set_error("compress.format_fwd=e3m4", "compress.format_fwd", "e4m3");
    expect_set_error("comm.backend=gloo", "comm.backend", NULL);
    expect_set_error("compress.scale=later", "compress.scale", NULL);
    expect_set_error("compress.rounding=up", "compress.rounding", NULL);
    expect_set_error("model.init=gpu", "model.init", "host/device/auto");
    /* this test is built for the CPU build, where "device" has no device to run on */
    expect_set_error("model.init=device", "model.init: \"device\" needs the GPU build", "build/train_gpu");
    expect_set_error("comm.backend=nccl", "comm.backend: \"nccl\" needs the GPU build", "build/train_gpu");
    expect_set_error("comm.pipeline_depth=0", "comm.pipeline_depth", "1");
    p = write_tmp("init_device2.json", "{\"model\": {\"init\": \"device\"}}");
    expect_error("model.init device from a file", p, 0, NULL, "model.init", "init_device2.json");

    /* checks across keys */
    expect_set_error("model.d_model=130", "model.d_model", "model.n_head");
    expect_set_error("train.seq_len=256", "train.seq_len", "model.max_seq_len");
    const char* tp5[] = {"model.n_head=12", "model.d_model=120", "parallel.tp=5"};
    expect_error("n_head % tp", NULL, 3, tp5, "model.n_head: 12 is not divisible by parallel.tp = 5", NULL);
    expect_set_error("data.val=", "data.val", "eval_every");
    expect_set_error("data.train=", "data.train", NULL);

    /* bad --set syntax */
    expect_set_error("train.lr", "--set", "train.lr");
    expect_set_error("=3", "--set", "key=value");

    /* files */
    p = write_tmp("malformed.json", "{\n  \"train\": {\n    \"lr\": 1e-3,\n  }\n}\n");
    expect_error("malformed JSON", p, 0, NULL, "malformed.json", "line 4");
    p = write_tmp("truncated.json", "{\"train\": {\"lr\": 1e-3");
    expect_error("truncated JSON", p, 0, NULL, "truncated.json", "malformed");
    p = write_tmp("trailing.json", "{} x");
    expect_error("trailing garbage", p, 0, NULL, "trailing.json", "malformed");
    p = write_tmp("empty_file.json", "");
    expect_error("empty file", p, 0, NULL, "empty_file.json", "empty");
    p = write_tmp("array.json", "[1, 2]");
    expect_error("top level not an object", p, 0, NULL, "array.json", "object");
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/does_not_exist.json", tmpdir);
    expect_error("missing file", missing, 0, NULL, "does_not_exist.json", "No such file");
}

static void test_world(void) {
    const char* shard = write_tmp("train.bin", "x"); /* existence is all config_check_world looks at */
    char set_train[600], set_val[600], set_glob[600], set_tok[600];
    snprintf(set_train, sizeof(set_train), "data.train=%s", shard);
    snprintf(set_val, sizeof(set_val), "data.val=%s", shard);
    snprintf(set_glob, sizeof(set_glob), "data.train=%s/tr*.bin", tmpdir);
    snprintf(set_tok, sizeof(set_tok), "data.tokenizer=%s/no_tokenizer.bin", tmpdir);
    Config c;
    char err[1024] = "";
    const char* sets[] = {set_train, set_val, "parallel.tp=2", "parallel.dp=2"};
    int rc = config_load(&c, NULL, 4, (char**)sets, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    rc = config_check_world(&c, 4, err, sizeof(err));
    CHECK(rc == 0, "world 4 with tp 2 dp 2: %s", err);
    rc = config_check_world(&c, 2, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "parallel.tp") && strstr(err, "parallel.dp") && strstr(err, "2 ranks"),
          "tp*dp != world: rc %d '%s'", rc, err);
    printf("  ok (tp*dp): %s\n", err);

    /* n_head % tp (a Config built by hand, as a caller could) */
    Config h = c;
    h.parallel.tp = 3;
    h.parallel.dp = 1;
    rc = config_check_world(&h, 3, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "model.n_head") && strstr(err, "parallel.tp = 3"), "n_head %% tp: '%s'", err);
    printf("  ok (n_head %% tp): %s\n", err);

    /* data files */
    const char* gsets[] = {set_glob, set_val};
    rc = config_load(&c, NULL, 2, (char**)gsets, err, sizeof(err));
    CHECK(rc == 0 && config_check_world(&c, 1, err, sizeof(err)) == 0, "a glob that matches: %s", err);
    const char* msets[] = {"data.train=/nonexistent/shard_*.bin", set_val};
    rc = config_load(&c, NULL, 2, (char**)msets, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    rc = config_check_world(&c, 1, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, "data.train") && strstr(err, "/nonexistent/shard_*.bin"), "missing train: '%s'",
          err);
    printf("  ok (missing data.train): %s\n", err);
    const char* vsets[] = {set_train, "data.val=/nonexistent/val.bin"};
    rc = config_load(&c, NULL, 2, (char**)vsets, err, sizeof(err));
    rc = rc || config_check_world(&c, 1, err, sizeof(err)) != -1;
    CHECK(rc == 0 && strstr(err, "data.val") && strstr(err, "/nonexistent/val.bin"), "missing val: '%s'", err);
    const char* tsets[] = {set_train, set_val, set_tok};
    rc = config_load(&c, NULL, 3, (char**)tsets, err, sizeof(err));
    rc = rc || config_check_world(&c, 1, err, sizeof(err)) != -1;
    CHECK(rc == 0 && strstr(err, "data.tokenizer") && strstr(err, "no_tokenizer.bin"), "missing tokenizer: '%s'", err);
    const char* isets[] = {set_train, set_val, "model.init_from=/nonexistent/gpt2_124M.bin"};
    rc = config_load(&c, NULL, 3, (char**)isets, err, sizeof(err));
    rc = rc || config_check_world(&c, 1, err, sizeof(err)) != -1;
    CHECK(rc == 0 && strstr(err, "model.init_from") && strstr(err, "gpt2_124M.bin"), "missing init_from: '%s'", err);
    printf("  ok (missing init_from): %s\n", err);
}

int main(void) {
    if (testing_begin("test_config") != 0) return 1;
    test_defaults();
    test_good_file();
    test_sets();
    test_methods_and_policy();
    test_roundtrip();
    test_errors();
    test_world();
    return testing_end("test_config");
}
