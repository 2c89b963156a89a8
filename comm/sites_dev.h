/*
 * comm/sites_dev.h - the device half of the exchange sites (GPU build only,
 * comm/sites_dev.c): where each site's delayed-scale history and this
 * step's statistics live on the device, and how the sites of comm/sites.c
 * (the all-reduces, and sequence parallelism's row reduce-scatters and
 * all-gathers, whole or by piece) run without the host waiting for them.
 *
 * Per exchange the host only queues: the collective (its kernels read the
 * site's predicted amax from device memory and add their statistics to a
 * device record), then one small kernel that moves those statistics into the
 * site's step totals and pushes the amaxes into the history
 * (comm/stats_cuda.h). The host reads the totals when it logs them
 * (comm_sites_read), the step's exchange time from CUDA events
 * (comm_step_end), and the history only for a checkpoint.
 */
#ifndef COMM_SITES_DEV_H
#define COMM_SITES_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "comm/stats_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The device scratch of c's TP exchanges (made on first use, from the policy). */
struct CollScratchDev* sites_dev_scratch(Comm* c);

/* One all-reduce of site `site` on the compute stream: one-shot or two-shot,
 * its scale from the site's device history, its statistics added to the
 * site's current call. Returns the bytes sent. */
uint64_t sites_dev_allreduce(Comm* c, int site, int one_shot, const CompressParams* p_rs, const CompressParams* p_ag,
                             void* x, size_t n, uint64_t stream);
/* Segments [k0, k1) of a reduce-scatter (rs) or all-gather of rows of site
 * `site` (sequence parallelism, comm/sp_cuda.h: K = policy.sp_chunks), on
 * stream cs (NULL: the compute stream; comm.overlap passes its side stream),
 * with the all-reduce's device scale and statistics: every segment reads the
 * same prediction and adds to the site's current call, which
 * sites_dev_after ends (on the compute stream, once it follows cs). Any
 * transport, IPC included. Returns the bytes sent. */
uint64_t sites_dev_rows(Comm* c, int site, int rs, const CompressParams* p, const void* in, void* out, int rows,
                        int cols, int k0, int k1, uint64_t stream, void* cs);
/* After a site's exchange (or its "auto" trial): its current call's
 * statistics into the step totals (keep), the amaxes into the history (push). */
void sites_dev_after(Comm* c, int site, int keep, int push);

/* The step begins: the step totals cleared, the exchange clock reset. */
void sites_dev_step_begin(Comm* c);
/* Marks the start or the end of an exchange on stream cs (NULL: the compute
 * stream; one event each, a pair on one stream); comm_step_end sums the
 * pairs. */
void sites_dev_mark(Comm* c, void* cs);
/* how many marks the step has made so far; set it (a replayed CUDA graph
 * makes the marks its captured step made, with no host call) */
int sites_dev_marks(const Comm* c);
void sites_dev_marks_set(Comm* c, int n);
/* The step's exchange time in ms: sums the marked pairs (the step's work
 * must be done: the caller has synchronised). */
double sites_dev_step_ms(Comm* c);
/* The step totals to the host sites (one copy; waits for the compute stream). */
void sites_dev_read(Comm* c);

/* The delayed-scale state of every site to or from the host, for checkpoints
 * (one copy; the get waits for the compute stream). */
void sites_dev_scale_get(Comm* c, SiteScaleDev* all);
void sites_dev_scale_put(Comm* c, const SiteScaleDev* all);

void sites_dev_free(Comm* c);

#ifdef __cplusplus
}
#endif
#endif /* COMM_SITES_DEV_H */
