/*
 * comm/policy.h - CommPolicy: which TP exchange sites compress, with which
 * compressor, and what the exchanges record.
 *
 * comm/ takes its settings in this struct of its own, never the trainer's
 * Config: train/ fills it from the "compress" and "comm" sections of the
 * config (config_comm_policy in train/config.c), a test or a tool fills it
 * by hand. comm_setup_sites (comm/sites.h) turns it into one compressor per
 * site.
 */
#ifndef COMM_POLICY_H
#define COMM_POLICY_H

#include <stdint.h>

#include "compress/compress.h"

#define COMM_POLICY_PATH 512

typedef struct {
    /* which sites compress: a site is compressed when method is not CM_NONE,
     * its pass is on (fwd / bwd) and no exclusion below names it */
    CompressMethod method;
    int fwd, bwd;                 /* forward-pass sites, backward-pass sites */
    int embed, lm_head;           /* embed.fwd, lm_head.bwd */
    int skip_first_layer, skip_last_layer;
    /* the compressor of a compressed site */
    Fp8Format format_fwd, format_bwd;
    int group_size;               /* 0: calibrated per site over calib_steps ("auto") */
    int calib_steps;
    int hadamard, adaptive_scale, dual_scale; /* taco's switches */
    int delayed;                  /* chunk scale from the site's amax history */
    int stochastic;               /* stochastic rounding (else nearest even) */
    uint64_t seed;                /* of stochastic rounding */
    /* what the exchanges record */
    int stats_every;              /* sample rel_err every this many steps (0 = never) */
    int dump_step;                /* dump site inputs at this step (-1 = never) */
    char dump_sites[256];         /* "all" or comma-separated site names */
    char dump_dir[COMM_POLICY_PATH];
    /* the GPU exchange */
    int pipeline_depth;           /* sub-chunks per rank chunk in flight */
    int fuse;                     /* fused decode + sum + re-encode in the all-gather */
    /* compress.method "auto": method is the candidate; each candidate site
     * times its exact and its compressed exchange over its first auto_steps
     * training calls and keeps the compressor only where it is at least
     * auto_min_speedup times faster and its relative error is <= auto_max_err */
    int auto_select;
    int auto_steps;
    double auto_min_speedup, auto_max_err;
    /* the all-reduce's shape (both backends) */
    int one_shot;                 /* 1: one phase (gather every rank's tensor, sum); 0: reduce-scatter + all-gather;
                                     COMM_ALLREDUCE_AUTO: one phase where the bytes it moves beyond two-shot's,
                                     (P - 1)(P - 2) / P times the tensor's, are at most one_shot_extra_bytes
                                     (the all-reduce sites only: sequence parallelism's row exchanges are one phase each) */
    long long one_shot_extra_bytes;
    /* how the GPU build's TP exchanges move (comm/sites_dev.c): AUTO is NCCL
     * under comm.backend "nccl", else IPC when the TP group is on one node
     * (comm/ipc_cuda.h), else STAGED (MPI, through pinned host memory or
     * device pointers when MPI is CUDA-aware); the same for the all-reduces
     * and for sequence parallelism's reduce-scatters and all-gathers */
    int transport;                /* CommTransport */
    /* sequence parallelism (comm/sp.h): the sites are reduce-scatters and
     * all-gathers of rows instead of all-reduces */
    int sp;
    int sp_chunks;                /* K: every rank's rows in K pieces, each its own compression unit */
    int overlap;                  /* 1: piece k's exchange runs while the GEMM of piece k+1 computes */
} CommPolicy;

enum { COMM_ALLREDUCE_AUTO = 2 };
/* comm.allreduce "auto"'s switch point, comm.one_shot_extra_kb. One-shot
 * saves a phase, i.e. one cross-rank hand-off (~150 us between processes
 * sharing an H200, ~10 us between GPUs), and moves (P - 1)(P - 2) / P tensors
 * more per rank than two-shot: none at P = 2, so P = 2 always takes it. The
 * default is what a ~370 GB/s link moves in ~10 us; on a shared GPU the
 * hand-off is worth far more. tools/bench_compress_gpu --transports measures
 * both shapes per size, to refit it. */
#define COMM_ONE_SHOT_EXTRA_KB_DEFAULT 4096

typedef enum { COMM_TRANSPORT_AUTO = 0, COMM_TRANSPORT_STAGED, COMM_TRANSPORT_IPC, COMM_TRANSPORT_NCCL } CommTransport;

/* Every site exact, nothing recorded: the policy of tests and tools that
 * only need the exact exchange; fill what differs after the call. */
void comm_policy_default(CommPolicy* p);

#endif /* COMM_POLICY_H */
