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
 * L<l>.mlp.fwd, L<l>.attn.bwd, L<l>.mlp.bwd, and last lm_head.bwd.
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

/* The TP exchange of the model: x[rows, cols] (backend memory, partial sums
 * on every TP rank) becomes the full sum on every TP rank. */
void tp_exchange(Comm* c, SiteKind kind, int layer, floatX* x, int rows, int cols);

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
/* (GPU build: copies the device history to the host first, and back on load) */
void comm_state_save(Comm* c, void* dst);
void comm_state_load(Comm* c, const void* src);

#ifdef __cplusplus
}
#endif
#endif /* COMM_SITES_H */
