/*
 * comm/sites.h - the named TP exchange sites of the model (comm/sites.c).
 *
 * model/gpt.c calls tp_exchange(comm, SITE_ATTN_FWD, layer, x, N, C) after
 * each row-parallel GEMM (and in the backward after each column-parallel
 * one) and never knows whether FP8 is on: the site table, built from a
 * CommPolicy, gives every site its own compressor, statistics, group-size
 * calibration and delayed-scale history.
 *
 * Sites, in table order: embed.fwd, then per layer l: L<l>.attn.fwd,
 * L<l>.mlp.fwd, L<l>.attn.bwd, L<l>.mlp.bwd, and last lm_head.bwd. With
 * sequence parallelism: embed.rs, per layer L<l>.attn.ag, .attn.rs, .mlp.ag,
 * .mlp.rs, .attn.ag.bwd, .attn.rs.bwd, .mlp.ag.bwd, .mlp.rs.bwd, then
 * lm_head.ag, lm_head.ag.bwd, embed.rs.bwd.
 */
#ifndef COMM_SITES_H
#define COMM_SITES_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "comm/policy.h"
#include "compress/compress.h"
#include "ops/ops.h" /* floatX: the backend's activation type */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SITE_EMBED_FWD,   /* vocab-parallel embedding partial sums */
    SITE_ATTN_FWD,    /* attention output projection (row-parallel) */
    SITE_MLP_FWD,     /* MLP output projection (row-parallel) */
    SITE_ATTN_BWD,    /* grad into ln1 output (QKV column-parallel input) */
    SITE_MLP_BWD,     /* grad into ln2 output (FC column-parallel input) */
    SITE_LMHEAD_BWD,  /* grad into lnf output (vocab-parallel LM head input) */
    /* sequence parallelism (policy.sp): a reduce-scatter (rs) where the
     * all-reduce was, an all-gather (ag) before each column-parallel GEMM; the
     * backward of an rs is an ag and vice versa, named after its forward */
    SITE_EMBED_RS,      /* embedding partial sums -> this rank's rows */
    SITE_ATTN_AG,       /* ln1's rows -> the QKV GEMM's input */
    SITE_ATTN_RS,       /* attention projection partial sums -> rows */
    SITE_MLP_AG,        /* ln2's rows -> the FC GEMM's input */
    SITE_MLP_RS,        /* MLP projection partial sums -> rows */
    SITE_ATTN_AG_BWD,   /* grad into ln1 output (partial sums) -> rows */
    SITE_ATTN_RS_BWD,   /* the residual grad's rows -> the attention projection's backward */
    SITE_MLP_AG_BWD,    /* grad into ln2 output (partial sums) -> rows */
    SITE_MLP_RS_BWD,    /* the residual grad's rows -> the MLP projection's backward */
    SITE_LMHEAD_AG,     /* lnf's rows -> the LM head's input */
    SITE_LMHEAD_AG_BWD, /* grad into lnf output (partial sums) -> rows */
    SITE_EMBED_RS_BWD,  /* the residual grad's rows -> the embedding's backward */
    SITE_KINDS
} SiteKind;

#define SITE_HISTORY 16         /* delayed-scale amax history length */
#define SITE_NUM_CANDIDATES 5   /* auto group size candidates: 16..256 */

typedef struct CommSite {
    char name[32];          /* e.g. "L3.attn.fwd" */
    SiteKind kind;
    int layer;              /* -1 for embed / lm_head */
    int compressed;         /* the policy says: compress this site */
    CompressParams p;       /* the compressor (both phases) */
    /* group-size calibration ("auto"): summed score per candidate */
    int calibrating;
    double calib_score[SITE_NUM_CANDIDATES];
    /* delayed scaling: amax history per phase (0 = reduce-scatter, 1 = all-gather) */
    float amax_hist[2][SITE_HISTORY];
    int hist_len;
    /* compress.method "auto" (comm/sites.c, auto_trial): under trial, the
     * best exact and compressed times (s) and the worst relative error over
     * the trial calls so far; the choice once made (0 none yet, 1 exact,
     * 2 compressed: kept in the checkpoint) */
    int auto_pending, auto_calls, auto_choice;
    double auto_t_exact, auto_t_comp, auto_err;
    /* statistics of the current step (reset by comm_step_begin) */
    uint64_t bytes, saturated, nonfinite;
    double rel_err;         /* < 0 when not sampled this step */
    int calls;
} CommSite;

/* Builds the site table of an L-layer model from the policy (kept in
 * c->policy). After comm_init. */
void comm_setup_sites(Comm* c, int L, const CommPolicy* policy);
/* Resets the per-step statistics; step numbers the SR streams and samples. */
void comm_step_begin(Comm* c, int step);
/* 1 if the current step samples the compressed sites' error and reads their
 * statistics (every policy.stats_every steps) */
int comm_step_samples(const Comm* c);

/* The TP exchange of the model: x[rows, cols] (backend memory, partial sums
 * on every TP rank) becomes the full sum on every TP rank. */
void tp_exchange(Comm* c, SiteKind kind, int layer, floatX* x, int rows, int cols);

/* Sequence parallelism (policy.sp): the row exchanges of the model. With
 * N = rows (a multiple of P * K, comm/sp.h), full[N, cols] and this rank's
 * rows local[N/P, cols] in the order of sp_piece:
 *   tp_reduce_scatter: full holds partial sums on every rank; local gets the
 *                      sum of this rank's rows (rank-order fp32 sums);
 *   tp_all_gather:     every rank's local rows -> full, identical on every
 *                      rank (each rank decodes its own rows from its bytes).
 * A site, as tp_exchange: own compressor, statistics, calibration, dumps. */
void tp_reduce_scatter(Comm* c, SiteKind kind, int layer, const floatX* full, floatX* local, int rows, int cols);
void tp_all_gather(Comm* c, SiteKind kind, int layer, const floatX* local, floatX* full, int rows, int cols);

/* The same exchanges in K = tp_segments(c) segments of N/K rows (comm/sp.h),
 * so that they can overlap the GEMMs that produce or consume them:
 *
 *   reduce-scatter after a row-parallel GEMM         all-gather before a column-parallel GEMM
 *     tp_rs_begin(c, &x, kind, l, full, local, N, C)   tp_ag_begin(c, &x, kind, l, local, full, N, C)
 *     for k: GEMM rows of segment k -> full            for k: tp_ag_wait(c, &x, k)
 *            tp_rs_ready(c, &x, k)                            GEMM on full's segment k
 *            tp_rs_post(c, &x, k - 1)  (k >= 1)        tp_ag_end(c, &x)
 *     tp_rs_post(c, &x, K - 1); tp_rs_end(c, &x)
 *
 * With comm.overlap, post k sends segment k (in the GPU build on a side
 * stream, while the compute stream runs the GEMM of segment k + 1) and wait
 * k brings segment k in (while the GEMM of segment k - 1 runs); without it
 * the whole exchange runs in tp_rs_end / tp_ag_wait(0). Every piece is its
 * own compression unit either way (comm/sp.h): the two give the same bits.
 * The GEMMs must be cut the same way whether or not overlap is on. */
typedef struct {
    int si, op, K, overlap;           /* for comm/ only */
    int dump, calibrate, trial, sample;
    const floatX* in;
    floatX* out;
    int rows, cols;
    CompressParams p_rs, p_ag;
    uint64_t stream;
    CollStats st;
    double busy;                      /* seconds spent in the exchange's calls */
} TpSeg;
int tp_segments(const Comm* c);
void tp_rs_begin(Comm* c, TpSeg* x, SiteKind kind, int layer, const floatX* full, floatX* local, int rows, int cols);
void tp_rs_ready(Comm* c, TpSeg* x, int k);
void tp_rs_post(Comm* c, TpSeg* x, int k);
void tp_rs_end(Comm* c, TpSeg* x);
void tp_ag_begin(Comm* c, TpSeg* x, SiteKind kind, int layer, const floatX* local, floatX* full, int rows, int cols);
void tp_ag_wait(Comm* c, TpSeg* x, int k);
void tp_ag_end(Comm* c, TpSeg* x);
/* The step's site statistics (saturated, nonfinite) to the host sites: on
 * the GPU they accumulate on the device and this reads them (one copy, one
 * wait); call it before comm_sites_json or before reading them. */
void comm_sites_read(Comm* c);
/* The step's work is done (the caller synchronised): step_ms from the
 * device's exchange clock (GPU build; the CPU build times on the host). */
void comm_step_end(Comm* c);

/* The site index of (kind, layer). */
int comm_site_index(const Comm* c, SiteKind kind, int layer);
/* Appends the per-site stats of this step as a JSON object member
 * "sites":{...} to buf; returns characters written. */
int comm_sites_json(const Comm* c, char* buf, size_t cap);
/* Site state that a bit-identical resume needs (calibration, amax history). */
size_t comm_state_bytes(const Comm* c);
/* The size of the same state in the other site layout (policy.sp flipped),
 * which comm_state_load also takes. */
size_t comm_state_bytes_other(const Comm* c);
/* (GPU build: copies the device history to the host first, and back on load) */
void comm_state_save(Comm* c, void* dst);
/* bytes: comm_state_bytes (loaded as saved) or comm_state_bytes_other (a
 * checkpoint of the other layout: each site takes the state of the site of
 * the same block and pass - for a reduce-scatter the all-reduce of the same
 * partial sums and back - without the amax histories). Returns 1 when it
 * mapped the other layout, 0 otherwise. */
int comm_state_load(Comm* c, const void* src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* COMM_SITES_H */
