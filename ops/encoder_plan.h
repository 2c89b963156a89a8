/*
 * ops/encoder_plan.h - the plan of encoder_backward (ops/ops.h): one batch's
 * positions grouped by this rank's vocab row, made on the host from the
 * host's token ids, the same code for both backends.
 *
 * Positions holding the same token add into the same row of dwte, so the
 * backward needs them grouped to run one row per thread block without
 * atomics. The GPU used to copy the ids back from the device and sort them
 * on the host inside the backward, which made every step wait for the
 * device; the trainer has the ids on the host already (it uploads them), so
 * the plan is made there when the batch is staged and copied in with it.
 *
 * A stable counting sort by row: rows in increasing order, each row's
 * positions in increasing n, the CPU reference's order of additions, so both
 * backends add exactly as the plain loop over n would (bit-identical).
 * Layout (ints), with U = min(N, Vr), the most rows a batch can touch, so the
 * size depends on the shape only (a CUDA graph copies a fixed size):
 *   plan[0]                     nu, the rows touched
 *   plan[1 .. 1 + U)            rows[u]: the local row of group u (u < nu)
 *   plan[1 + U .. 2 + 2U)       start[u]: group u's first entry of pos, u <= nu
 *   plan[2 + 2U .. 2 + 2U + N)  pos: the positions, group after group
 */
#ifndef ENCODER_PLAN_H
#define ENCODER_PLAN_H

#include <stdlib.h>
#include <string.h>

#include "common/check.h"

static inline int encoder_plan_rows(int N, int Vr) { return N < Vr ? N : Vr; }
#define ENCODER_PLAN_INTS(N, Vr) ((size_t)2 + 2 * (size_t)encoder_plan_rows(N, Vr) + (size_t)(N))

/* the plan of tok[N] (host) for the vocab slice [v0, v0 + Vr), into plan (host) */
static inline void encoder_plan(int* plan, const int* tok, int N, int v0, int Vr) {
    const int U = encoder_plan_rows(N, Vr);
    int* rows = plan + 1;
    int* start = plan + 1 + U;
    int* pos = plan + 2 + 2 * U;
    int* count = (int*)callocCheck((size_t)(Vr > 0 ? Vr : 1), sizeof(int));
    for (int n = 0; n < N; n++) {
        const int r = tok[n] - v0;
        if (r >= 0 && r < Vr) count[r]++;
    }
    /* count[r] becomes the write cursor of row r inside pos */
    int nu = 0, off = 0;
    for (int r = 0; r < Vr; r++) {
        if (!count[r]) continue;
        rows[nu] = r;
        start[nu] = off;
        const int c = count[r];
        count[r] = off;
        off += c;
        nu++;
    }
    start[nu] = off;
    for (int n = 0; n < N; n++) {
        const int r = tok[n] - v0;
        if (r >= 0 && r < Vr) pos[count[r]++] = n;
    }
    plan[0] = nu;
    free(count);
}

#endif /* ENCODER_PLAN_H */
