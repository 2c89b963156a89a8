/*
 * train/config_model.c - what the trainer derives from a loaded config
 * (config.h): the model's shape, the checks of model.arch and its keys,
 * comm's CommPolicy, and whether the step runs as a CUDA graph. The key
 * table and the loader are in config.c.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "compress/methods.h"
#include "train/config.h"

GPTShape config_model_shape(const Config* c, int tp) {
    GPTShape s = gpt2_shape(c->model.max_seq_len, c->model.vocab_size, params_padded_vocab(c->model.vocab_size, tp),
                            c->model.n_layer, c->model.n_head, c->model.d_model);
    if (strcmp(c->model.arch, "qwen2") == 0) {
        s.arch = ARCH_QWEN2;
        s.KV = c->model.n_kv_head ? c->model.n_kv_head : c->model.n_head;
        s.F = c->model.d_ff ? c->model.d_ff : 4 * c->model.d_model;
        s.tied = c->model.tie_embeddings;
        s.norm_eps = c->model.norm_eps;
        s.rope_theta = c->model.rope_theta;
    }
    return s;
}

int config_check_arch(const Config* c, char* err, size_t errlen) {
    int tp = c->parallel.tp, nh = c->model.n_head, C = c->model.d_model;
    if (strcmp(c->model.arch, "qwen2") != 0) {   /* GPT-2's shape is fixed by n_head and d_model */
        if (c->model.n_kv_head != 0 && c->model.n_kv_head != nh) {
            return check_errorf(err, errlen, "config error: model.n_kv_head: %d, but model.arch \"gpt2\" has one kv head "
                            "per head (n_head = %d); grouped-query attention needs model.arch \"qwen2\"",
                            c->model.n_kv_head, nh);
        }
        if (c->model.d_ff != 0 && (long long)c->model.d_ff != 4LL * C) {
            return check_errorf(err, errlen, "config error: model.d_ff: %d, but model.arch \"gpt2\" has d_ff = 4 * "
                            "d_model = %lld", c->model.d_ff, 4LL * C);
        }
        if (!c->model.tie_embeddings) {
            return check_errorf(err, errlen, "config error: model.tie_embeddings: false, but model.arch \"gpt2\" always "
                            "ties its LM head to wte");
        }
        return 0;
    }
    int kv = c->model.n_kv_head ? c->model.n_kv_head : nh;
    long long ff = c->model.d_ff ? c->model.d_ff : 4LL * C;
    if (nh % kv != 0) {
        return check_errorf(err, errlen, "config error: model.n_kv_head: %d does not divide model.n_head = %d (each kv "
                        "head serves a whole group of query heads)", kv, nh);
    }
    if (kv % tp != 0) {
        return check_errorf(err, errlen, "config error: model.n_kv_head: %d is not divisible by parallel.tp = %d (each "
                        "TP rank holds whole kv heads with their query heads, as Megatron's query groups)", kv, tp);
    }
    if ((C / nh) % 2 != 0) {
        return check_errorf(err, errlen, "config error: model.d_model / model.n_head = %d is odd: rotate-half RoPE needs "
                        "an even head size", C / nh);
    }
    if (ff > INT_MAX / 2 || ff % tp != 0) {
        return check_errorf(err, errlen, "config error: model.d_ff: %lld is not divisible by parallel.tp = %d%s", ff, tp,
                        ff > INT_MAX / 2 ? " (or too large: 2 * d_ff must fit in a 32-bit int)" : "");
    }
    return 0;
}

/* comm.sp_chunks, 0 resolved: with comm.overlap 4 pieces, so that three of a
 * GEMM's four run beside an exchange; without it 1, since every piece is an
 * exchange of its own and each costs a fixed latency (on a shared H200 over
 * CUDA IPC, GPT-2 124M TP=2 with sp: 133 ms a step at 4 pieces, docs/RESULTS.md
 * section 5) */
int config_sp_chunks(const Config* c) { return c->comm.sp_chunks ? c->comm.sp_chunks : c->comm.overlap ? 4 : 1; }

int config_check_sp(const Config* c, char* err, size_t errlen) {
    const int K = config_sp_chunks(c);
    if (c->comm.overlap && !c->parallel.sp) {
        return check_errorf(err, errlen, "config error: comm.overlap: true needs parallel.sp: true (it overlaps the "
                        "sequence-parallel exchanges with the GEMMs)");
    }
    if (c->comm.overlap && K < 2) {
        return check_errorf(err, errlen, "config error: comm.overlap: true needs comm.sp_chunks >= 2 (the pieces "
                        "that overlap), not %d", K);
    }
    long long N = (long long)c->train.batch_size * c->train.seq_len, d = (long long)c->parallel.tp * K;
    if (c->parallel.sp && N % d != 0) {
        return check_errorf(err, errlen, "config error: parallel.sp: the %lld rows of a batch (train.batch_size %d x "
                        "train.seq_len %d) do not divide by parallel.tp x comm.sp_chunks = %d x %d; change the batch, "
                        "or comm.sp_chunks", N, c->train.batch_size, c->train.seq_len, c->parallel.tp, K);
    }
    return 0;
}

void config_comm_policy(const Config* c, CommPolicy* p) {
    comm_policy_default(p);
    p->auto_select = strcmp(c->compress.method, "auto") == 0;
    const char* m = p->auto_select ? c->compress.auto_method : c->compress.method;
    if (compress_method_parse(m, &p->method) != 0) /* validated by config_load */
        FATAL("compress.method: unknown method '%s'", m);
    p->auto_steps = c->compress.auto_steps;
    p->auto_min_speedup = c->compress.auto_min_speedup;
    p->auto_max_err = c->compress.auto_max_err;
    p->fwd = c->compress.fwd;
    p->bwd = c->compress.bwd;
    p->embed = c->compress.embed;
    p->lm_head = c->compress.lm_head;
    p->skip_first_layer = c->compress.skip_first_layer;
    p->skip_last_layer = c->compress.skip_last_layer;
    p->format_fwd = strcmp(c->compress.format_fwd, "e5m2") == 0 ? FP8_E5M2 : FP8_E4M3;
    p->format_bwd = strcmp(c->compress.format_bwd, "e5m2") == 0 ? FP8_E5M2 : FP8_E4M3;
    p->group_size = c->compress.group_size;
    p->calib_steps = c->compress.calib_steps;
    p->hadamard = c->compress.hadamard;
    p->adaptive_scale = c->compress.adaptive_scale;
    p->dual_scale = c->compress.dual_scale;
    p->delayed = strcmp(c->compress.scale, "delayed") == 0;
    p->stochastic = strcmp(c->compress.rounding, "stochastic") == 0;
    p->seed = (uint64_t)c->train.seed;
    p->stats_every = c->compress.stats_every;
    p->dump_step = c->compress.dump_step;
    snprintf(p->dump_sites, sizeof(p->dump_sites), "%s", c->compress.dump_sites);
    snprintf(p->dump_dir, sizeof(p->dump_dir), "%s", c->compress.dump_dir[0] ? c->compress.dump_dir : c->log.dir);
    p->pipeline_depth = c->comm.pipeline_depth;
    p->fuse = c->comm.fuse;
    p->one_shot = !strcmp(c->comm.allreduce, "one_shot") ? 1 : !strcmp(c->comm.allreduce, "auto") ? COMM_ALLREDUCE_AUTO : 0;
    p->one_shot_extra_bytes = (long long)c->comm.one_shot_extra_kb * 1024;
    p->transport = !strcmp(c->comm.transport, "staged") ? COMM_TRANSPORT_STAGED
                 : !strcmp(c->comm.transport, "ipc")    ? COMM_TRANSPORT_IPC
                 : !strcmp(c->comm.transport, "nccl")   ? COMM_TRANSPORT_NCCL
                                                        : COMM_TRANSPORT_AUTO;
    p->sp = c->parallel.sp;
    p->sp_chunks = config_sp_chunks(c);
    p->overlap = c->comm.overlap;
}


int config_cuda_graph(const Config* c, int world_size, int graphs, const char* blocker, char* note, size_t len) {
    const int asked = c->train.cuda_graph;   /* -1 = not set, which means on where it can be */
    note[0] = '\0';
    if (asked == 0) return 0;
    if (!graphs || blocker) {
        if (asked == 1 && !graphs)
            snprintf(note, len, "note: train.cuda_graph: the CPU build has no CUDA graphs; the steps run as usual");
        else if (asked == 1)
            snprintf(note, len, "note: train.cuda_graph: not for this run of %d ranks: %s; the steps run without one",
                     world_size, blocker);
        return 0;
    }
    snprintf(note, len, "note: train.cuda_graph: on: the first step runs eagerly, then the whole step is captured as "
             "one CUDA graph and replayed%s (train.cuda_graph=false turns it off)",
             world_size > 1 ? "; steps whose exchanges do host work (group-size calibration, \"auto\" trials, error "
                              "samples, dumps) run eagerly" : "");
    return 1;
}
