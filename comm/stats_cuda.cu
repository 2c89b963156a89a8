/*
 * comm/stats_cuda.cu - the exchanges' statistics and delayed-scale history
 * on the device (comm/stats_cuda.h). Two tiny kernels of one block, queued
 * after each exchange on its stream: they cost a launch each (a few us) and
 * save the host a wait.
 */
#include <cuda_runtime.h>

#include "comm/stats_cuda.h"
#include "common/cuda_check.h"

/* one warp: lane j folds chunk j (P <= 16 < 32), then the warp reduces */
__global__ void k_coll_stats_fold(CollDevStats* acc, const CompressStatsDev* st, int P, int do_rs, int do_ag) {
    const int j = (int)threadIdx.x;
    const bool mine = j <= P && (j < P ? do_rs : do_ag);
    unsigned long long sat = mine ? st[j].saturated : 0ull, nf = mine ? st[j].nonfinite : 0ull;
    const unsigned a_rs = mine && j < P ? st[j].amax_bits : 0u, a_ag = mine && j == P ? st[j].amax_bits : 0u;
    if (mine) {
        atomicAdd(&acc->saturated, sat);
        atomicAdd(&acc->nonfinite, nf);
        if (a_rs) atomicMax(&acc->amax_rs_bits, a_rs);
        if (a_ag) atomicMax(&acc->amax_ag_bits, a_ag);
    }
}

void coll_stats_fold_dev(CollDevStats* acc, const CompressStatsDev* st, int P, int do_rs, int do_ag, void* stream) {
    if (!acc) return;
    if (P < 1 || P > 31) FATAL("coll_stats_fold_dev: %d chunks (1..31 supported)", P);
    k_coll_stats_fold<<<1, 32, 0, (cudaStream_t)stream>>>(acc, st, P, do_rs, do_ag);
    CUDA_CHECK_LAUNCH("k_coll_stats_fold");
}

/* comm/sites.c's hist_push and hist_max, to the bit: the newest amax first,
 * the maximum by `>` from 0 over the entries held */
__global__ void k_site_scale_push(SiteScaleDev* h, CollDevStats* call, CollDevStats* step, int push) {
    if (threadIdx.x != 0) return;
    if (step) {
        step->saturated += call->saturated;
        step->nonfinite += call->nonfinite;
        step->amax_rs_bits = max(step->amax_rs_bits, call->amax_rs_bits);
        step->amax_ag_bits = max(step->amax_ag_bits, call->amax_ag_bits);
    }
    if (push) {
        const float a[2] = {__uint_as_float(call->amax_rs_bits), __uint_as_float(call->amax_ag_bits)};
        for (int ph = 0; ph < 2; ph++) {
            for (int i = SITE_DEV_HISTORY - 1; i > 0; i--) h->amax_hist[ph][i] = h->amax_hist[ph][i - 1];
            h->amax_hist[ph][0] = a[ph];
        }
        if (h->hist_len < SITE_DEV_HISTORY) h->hist_len++;
        for (int ph = 0; ph < 2; ph++) {
            float m = 0.0f;
            for (int i = 0; i < h->hist_len; i++)
                if (h->amax_hist[ph][i] > m) m = h->amax_hist[ph][i];
            h->delayed[ph] = m;
        }
    }
    call->saturated = call->nonfinite = 0ull;
    call->amax_rs_bits = call->amax_ag_bits = 0u;
}

void site_scale_push_dev(SiteScaleDev* h, CollDevStats* call, CollDevStats* step, int push, void* stream) {
    k_site_scale_push<<<1, 32, 0, (cudaStream_t)stream>>>(h, call, step, push);
    CUDA_CHECK_LAUNCH("k_site_scale_push");
}
