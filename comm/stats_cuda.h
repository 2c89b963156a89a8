/*
 * comm/stats_cuda.h - the statistics and the delayed-scale history of the
 * device exchanges, kept in device memory (comm/stats_cuda.cu).
 *
 * Why on the device: when they lived on the host, every exchange ended with
 * the host waiting for its statistics (to learn the amax for the next
 * call's delayed scale), so no two exchanges of a step could be queued back
 * to back. Now the kernels read the predicted amax from device memory when
 * they run (CompressJobDev.delayed_amax), a one-thread kernel after each
 * exchange pushes the amax it saw into the site's history and predicts the
 * next one, and the host reads the counters once, when it logs them.
 *
 * The arithmetic is the host's (comm/sites.c hist_push / hist_max, and
 * coll_run's folding of the per-chunk statistics into CollStats), so the
 * scales, and therefore the bytes on the wire, are the same bits.
 */
#ifndef COMM_STATS_CUDA_H
#define COMM_STATS_CUDA_H

#include <stdint.h>

#include "compress/compress_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SITE_DEV_HISTORY 16 /* = SITE_HISTORY (comm/sites.h; checked there) */

/* What CollStats holds, less the bytes (the host knows those), on the
 * device: sums and float-bit maxes that accumulate until cleared. */
typedef struct {
    unsigned long long saturated, nonfinite;
    unsigned int amax_rs_bits, amax_ag_bits; /* float bits (>= 0 floats order as unsigned ints) */
} CollDevStats;

/* A site's delayed-scale state. delayed[] is what the next exchange's
 * kernels read: the largest amax of the history (0 when it is empty, which
 * the kernels take as "no prediction: use the current amax"). */
typedef struct {
    float delayed[2];                     /* [0] reduce-scatter, [1] all-gather */
    float amax_hist[2][SITE_DEV_HISTORY]; /* newest first */
    int hist_len, pad;
} SiteScaleDev;

/* Adds the statistics of one collective call, P reduce-scatter chunks
 * (st[0..P), when do_rs) and the all-gather chunk (st[P], when do_ag), to
 * *acc: saturated and nonfinite summed, the amaxes maxed. Queued on stream. */
void coll_stats_fold_dev(CollDevStats* acc, const CompressStatsDev* st, int P, int do_rs, int do_ag, void* stream);

/* After a site's exchange: adds *call to *step (when step is not NULL);
 * when push, puts call's two amaxes at the front of h's history and sets
 * h->delayed to the history's maxima; then clears *call for the next one.
 * One thread, queued on stream. */
void site_scale_push_dev(SiteScaleDev* h, CollDevStats* call, CollDevStats* step, int push, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* COMM_STATS_CUDA_H */
