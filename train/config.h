/*
 * train/config.h - the run configuration: one JSON file plus --set overrides.
 *
 * Every setting of a run lives in Config, addressed by its dotted path
 * ("train.lr", "compress.group_size"). A JSON file sets any subset of them
 * (the rest keep their defaults), e.g.
 *     { "model": { "n_layer": 6 }, "train": { "lr": 3e-4 }, "parallel": { "tp": 2 } }
 * and "--set key=value" overrides any key after the file, so a parameter
 * sweep needs no copies of a config. Loading is strict: unknown keys or
 * sections, wrong types, out-of-range values and inconsistent combinations
 * are errors with one line that names the key (or the file), so a typo never
 * silently trains the wrong model.
 *
 * Types: integers, numbers (float), booleans (JSON true/false; in --set also
 * 1/0), strings and enums (in --set without quotes), and
 * compress.group_size, which is "auto" (stored as 0) or a power of two in
 * 16..256.
 *
 * Derived defaults, filled in by config_load when the key was not set:
 *   train.sample_every = train.eval_every
 *   checkpoint.dir     = log.dir + "/ckpt" (also when set to "")
 * data.val may be "" only when train.eval_every is 0 (no validation).
 */
#ifndef CONFIG_H
#define CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "comm/policy.h"
#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CFG_PATH 512

typedef struct {
    struct {
        int n_layer, n_head, d_model, max_seq_len, vocab_size;
        char init_from[CFG_PATH]; /* llm.c model file to start from; "" = random init from train.seed */
        char init[8]; /* random init on "host" | "device" (GPU build only) | "auto" (GPU build: device from 300M params) */
        char arch[8]; /* "gpt2" | "qwen2" (README: model.arch) */
        int n_kv_head, d_ff;          /* qwen2: 0 = n_head, 0 = 4 * d_model */
        float norm_eps, rope_theta;   /* qwen2: RMSNorm eps, RoPE base */
        int tie_embeddings;           /* qwen2: LM head = wte (GPT-2 always ties) */
    } model;
    struct {
        char train[CFG_PATH], val[CFG_PATH]; /* shard path or glob */
        char tokenizer[CFG_PATH];            /* llm.c tokenizer file for samples; "" = bytes or "<id>" */
    } data;
    struct {
        int batch_size, seq_len, steps;
        float lr;
        int warmup_steps;
        float lr_min_frac, weight_decay, beta1, beta2, eps, grad_clip; /* grad_clip 0 = off */
        int seed, eval_every, eval_batches, sample_every, sample_len;  /* *_every 0 = never */
        int cuda_graph; /* boolean, -1 = not set: the step as one CUDA graph where it can be (config_cuda_graph) */
    } train;
    struct {
        int tp, dp;
        int sp; /* boolean: sequence parallelism (README: parallel.sp) */
    } parallel;
    struct {
        char method[32]; /* a name of compress/'s method table (COMPRESS_METHOD_CHOICES), or "auto" */
        char auto_method[32]; /* "auto": the compressor a site may take */
        int auto_steps;       /* "auto": training calls each site is timed over */
        float auto_min_speedup, auto_max_err; /* "auto": compress where exact/compressed time >= this, rel err <= this */
        char format_fwd[8], format_bwd[8]; /* e4m3 | e5m2 */
        int group_size; /* 0 = "auto" (calibrated per site) */
        int calib_steps;
        int hadamard, adaptive_scale, dual_scale; /* booleans */
        char scale[16];    /* "current" | "delayed" */
        char rounding[16]; /* "nearest" | "stochastic" */
        int fwd, bwd, embed, lm_head, skip_first_layer, skip_last_layer; /* booleans */
        int stats_every;
        int dump_step; /* -1 = never */
        char dump_sites[256];
        char dump_dir[CFG_PATH];
    } compress;
    struct {
        char backend[16]; /* "mpi" | "nccl" */
        int pipeline_depth; /* GPU exchanges: sub-chunks per rank chunk in flight (1 = no overlap) */
        int fuse;           /* GPU all-reduce: decode + sum + re-encode in one kernel (0: via an fp32 sum) */
        char allreduce[16]; /* "two_shot" (reduce-scatter + all-gather) | "one_shot" | "auto" (by size) */
        int one_shot_extra_kb; /* "auto": one-shot while it moves at most this many KB more than two-shot */
        char transport[16]; /* GPU TP exchanges: "auto" | "staged" (MPI) | "ipc" (CUDA IPC, one node) | "nccl" */
        int sp_chunks;      /* parallel.sp: pieces per rank, the compression units and GEMM chunks */
        int overlap;        /* boolean, parallel.sp: piece k's exchange beside the GEMM of piece k+1 */
        float timeout_s;    /* watchdog: a collective not done in this many seconds ends the job; 0 = off */
    } comm;
    struct {
        char dir[CFG_PATH];
        int every;
    } log;
    struct {
        char dir[CFG_PATH];
        int every; /* 0 = never */
        int resume; /* boolean */
        int keep;   /* keep the newest `keep` checkpoints; 0 = all */
    } checkpoint;
} Config;

/* Fill every field with its default (a small byte-level model on the bible
 * shards). */
void config_defaults(Config* c);

/* Defaults, then the JSON file at path (NULL = none), then the nsets
 * overrides "key=value" in order, then validation. Returns 0, or -1 with ONE
 * line in err that names the key (dotted path) or the file. Needs no MPI:
 * every rank can call it and they all reach the same verdict. */
int config_load(Config* c, const char* path, int nsets, char** sets, char* err, size_t errlen);

/* Checks that need the world or the file system: parallel.tp * parallel.dp ==
 * world_size, model.n_head % parallel.tp == 0, data.train (and data.val when
 * used) match at least one file, data.tokenizer and model.init_from readable
 * when set. Returns 0, or -1 with one line in err. */
int config_check_world(const Config* c, int world_size, char* err, size_t errlen);

/* What comm/ needs of a loaded config: the "compress" and "comm" sections
 * (and train.seed, log.dir) as comm's own policy struct. */
void config_comm_policy(const Config* c, CommPolicy* p);
/* The checks of model.arch and its keys against the other model keys and
 * parallel.tp (train/config_model.c; config_load runs them): 0, or -1 with
 * one line naming the key. */
int config_check_arch(const Config* c, char* err, size_t errlen);
/* The checks of parallel.sp and comm.sp_chunks / comm.overlap against the
 * batch (train/config_model.c; config_load runs them). */
int config_check_sp(const Config* c, char* err, size_t errlen);
/* comm.sp_chunks with 0 resolved (4 with comm.overlap, else 1). */
int config_sp_chunks(const Config* c);
/* Whether the training step runs as one CUDA graph (train.cuda_graph): where
 * the backend has graphs (graphs = ops_graph_supported()) and the exchanges
 * allow it (blocker = comm_graph_blocker(): NULL, or why not), unless the key
 * is false. note gets the line rank 0 prints at the start ("" for none): that
 * it is on, or, when the key was set true, why it cannot be. */
int config_cuda_graph(const Config* c, int world_size, int graphs, const char* blocker, char* note, size_t len);
/* The model's shape at TP degree tp, derived defaults resolved (n_kv_head
 * 0 = n_head, d_ff 0 = 4 d_model). */
GPTShape config_model_shape(const Config* c, int tp);

/* The effective config as pretty JSON (loadable again with config_load).
 * config_to_json returns a malloc'd string; free() it. */
void config_print(const Config* c, FILE* out);
char* config_to_json(const Config* c);

#ifdef __cplusplus
}
#endif
#endif /* CONFIG_H */
