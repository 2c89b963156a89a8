/*
 * tests/test_coll_gpu.c - the pipelined device collectives (comm/collectives_cuda.c)
 * against the host collectives (comm/collectives.c), bit for bit, under
 * mpirun -np 2 / -np 4 (several ranks may share one GPU).
 *
 * For every method pair, size and pipeline depth K (and every transport:
 * pinned-host staging; device pointers handed to MPI when it is CUDA-aware -
 * or always under the CPU emulator, whose device memory is host memory; and
 * CUDA IPC (comm/ipc_cuda.h) when the ranks share a node and a GPU or peer
 * access - the emulator maps the ranks' blocks through shared memory; it
 * cuts no sub-chunks, so once per size):
 *   all-reduce      coll_allreduce_dev(bf16 x) == bf16(coll_allreduce(float(x)))
 *                   (also unfused: an fp32 sum, then the encode)
 *                   (round to nearest even; NaN equals NaN), the CollStats
 *                   (bytes, saturated, nonfinite, both amaxes) are equal, and
 *                   every rank holds the same bytes;
 *   reduce-scatter  fp32 output == the host's, bf16 output == its rounding;
 *   all-gather      from fp32 and from bf16 input == the host's, rounded;
 *   one-shot        coll_allreduce_one_shot_dev == bf16(coll_allreduce_one_shot),
 *                   the same statistics, identical on every rank, and with
 *                   the exact wires the two-shot all-reduce's bits;
 *   site scale      a site's delayed-scale history kept on the device
 *                   (comm/stats_cuda.h) against the host's over 21 calls: the
 *                   same bits each call, the same history and statistics, and
 *                   no host waits on the NCCL and IPC transports;
 *   sp rows         the sequence-parallel reduce-scatter and all-gather of
 *                   rows (comm/sp_cuda.h) == bf16 of the host's
 *                   (comm/sp.h), the same statistics, the all-gather
 *                   identical on every rank, one segment per call == all in
 *                   one call (what keeps comm.overlap bit-identical).
 * min_sub is set small so that small tensors are pipelined too. Rank 0
 * prints one row per method pair; exit status 0 iff all pass on all ranks.
 * Options: --quick (fewer sizes, for the emulator); --nccl (the messages go
 * by NCCL send/recv instead of MPI: needs one GPU per rank, or the emulator,
 * whose NCCL is tests/emu/nccl_emu.c; IPC is tested beside it); --ipc (the
 * IPC transport only: its bits against the host's, which the other runs tie
 * to the staged transport's).
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm/collectives_cuda.h"
#include "comm/comm.h"
#include "comm/ipc_cuda.h"
#include "comm/nccl_util.h"
#include "comm/sp.h"
#include "comm/sp_cuda.h"
#include "common/bf16.h"
#include "common/check.h"
#include "compress/compress.h"

static int rank, P;

/* ---- data and comparisons ---------------------------------------------------- */

static void fill(float* x, size_t n, int r, int salt, int nonfinite) {
    unsigned long long s = 0x1234567ull * (unsigned long long)(r + 1) + (unsigned long long)salt * 77ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)((s >> 11) & ((1ull << 53) - 1)) / 9007199254740992.0;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double v = (double)((s >> 11) & ((1ull << 53) - 1)) / 9007199254740992.0;
        double g = sqrt(-2.0 * log(u + 1e-12)) * cos(6.283185307179586 * v);
        x[i] = (float)(i % 97 == 5 ? 20.0 * g : g);
        if (nonfinite && i % 1009 == 17) x[i] = (i % 2) ? NAN : -INFINITY;
    }
}

/* Every copy in stream order on cs, then wait: cudaMemcpy from pageable
 * memory may return before its DMA lands, and it is not ordered with the
 * non-blocking stream the collectives run on (so a kernel could read a half
 * copied input, or a copy back overtake the kernel writing it). */
static void copy_sync(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t cs) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cs));
    CUDA_CHECK(cudaStreamSynchronize(cs));
}

/* NaN equals NaN: the device's bf16 outputs round with the hardware
 * conversion, whose NaN (0x7FFF) is not bf16.h's 0x7FC0 */
static long diff_bf16(const uint16_t* a, const uint16_t* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i] && !(isnan(bf16_to_f32(a[i])) && isnan(bf16_to_f32(b[i])))) return (long)i;
    return -1;
}
static long diff_f32(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!memcmp(&a[i], &b[i], 4) || (isnan(a[i]) && isnan(b[i]))) continue;
        return (long)i;
    }
    return -1;
}

static unsigned long long hash_bytes(const void* p, size_t n) {
    const unsigned char* b = p;
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
static int same_on_all_ranks(const void* x, size_t bytes) {
    unsigned long long h = hash_bytes(x, bytes), lo, hi;
    MPI_CHECK(MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
    return lo == hi;
}
static int stats_equal(const CollStats* a, const CollStats* b) {
    return a->bytes_sent == b->bytes_sent && a->saturated == b->saturated && a->nonfinite == b->nonfinite &&
           a->amax_rs == b->amax_rs && a->amax_ag == b->amax_ag;
}

/* which statistics differ, host vs device, for the failure message */
static void stats_diff(char* msg, size_t cap, int rank, const CollStats* h, const CollStats* d) {
    snprintf(msg, cap, "rank %d stats (bytes/saturated/nonfinite amax_rs amax_ag) host %llu/%llu/%llu %a %a device %llu/%llu/%llu %a %a",
             rank, (unsigned long long)h->bytes_sent, (unsigned long long)h->saturated, (unsigned long long)h->nonfinite,
             h->amax_rs, h->amax_ag, (unsigned long long)d->bytes_sent, (unsigned long long)d->saturated,
             (unsigned long long)d->nonfinite, d->amax_rs, d->amax_ag);
}

/* ---- result rows (rank 0 prints; failures are summed over ranks) ------------- */

#define MAX_ROWS 64
static struct {
    char name[48];
    long total, failed;
    char first[220];
} rows[MAX_ROWS];
static int nrows = 0;

static void record(const char* name, int ok_here, const char* fmt, const char* what) {
    int ok = 0;
    MPI_CHECK(MPI_Allreduce(&ok_here, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    int i = 0;
    while (i < nrows && strcmp(rows[i].name, name)) i++;
    if (i == nrows) {
        if (nrows == MAX_ROWS) FATAL("too many rows");
        memset(&rows[i], 0, sizeof(rows[i]));
        snprintf(rows[i].name, sizeof(rows[i].name), "%s", name);
        nrows++;
    }
    rows[i].total++;
    if (!ok) {
        if (!rows[i].failed) snprintf(rows[i].first, sizeof(rows[i].first), "%s: %s", what, ok_here ? "(another rank)" : fmt);
        rows[i].failed++;
    }
}

/* ---- a site's delayed scale kept on the device ------------------------------------
 * T calls of one exchange site in a row. The host keeps the amax history
 * as comm/sites.c does and passes its maximum by value; the device keeps it
 * in a SiteScaleDev that the kernels read when they run and that
 * site_scale_push_dev updates after each call, with the statistics summed in
 * a CollDevStats (comm/stats_cuda.h). Each call's result, the summed
 * statistics and the final history must be the same bits, and the device
 * calls must not wait for the host (host_syncs unchanged, staged transport
 * excepted: its waits are the transport's). The shapes: the two-shot and the
 * one-shot all-reduce of n elements, and sequence parallelism's row
 * reduce-scatter and all-gather (comm/sp_cuda.h) of [N, C] with K = 2
 * pieces per rank, N C about n, both phases' history kept per site alike. */
typedef struct {
    float *xf, *hout;
    uint16_t *xb, *ref, *got, *d_x, *d_out;
} Bufs;
enum { SHAPE_TWO_SHOT, SHAPE_ONE_SHOT, SHAPE_SP_RS, SHAPE_SP_AG };

static void site_history_case(const char* name, CompressParams p, int shape, size_t n, int T, CollScratchDev* s,
                              CollScratch* hs, const Bufs* b, cudaStream_t cs) {
    const int sp = shape == SHAPE_SP_RS || shape == SHAPE_SP_AG, K = 2, C = 64, N = P * K * (int)(n / (64u * 2u * P) + 1);
    if (sp) n = (size_t)N * C;
    const size_t n_in = shape == SHAPE_SP_AG ? n / (size_t)P : n, n_out = shape == SHAPE_SP_RS ? n / (size_t)P : n;
    enum { H = SITE_DEV_HISTORY };
    float ring[2][H]; /* the host's history: entry t % H is call t's */
    int held = 0;
    SiteScaleDev *d_h = NULL, h_end;
    CollDevStats *d_call = NULL, *d_tot = NULL, tot;
    CUDA_CHECK(cudaMalloc((void**)&d_h, sizeof(*d_h)));
    CUDA_CHECK(cudaMalloc((void**)&d_call, sizeof(*d_call)));
    CUDA_CHECK(cudaMalloc((void**)&d_tot, sizeof(*d_tot)));
    CUDA_CHECK(cudaMemsetAsync(d_h, 0, sizeof(*d_h), cs));
    CUDA_CHECK(cudaMemsetAsync(d_call, 0, sizeof(*d_call), cs));
    CUDA_CHECK(cudaMemsetAsync(d_tot, 0, sizeof(*d_tot), cs));
    CollStats sum = {0};
    long bad_call = -1, bad_elem = -1;
    const unsigned long long syncs0 = s->host_syncs;
    p.delayed = 1;
    for (int t = 0; t < T; t++) {
        fill(b->xf, n_in, rank, 500 + t, 0);
        const float scale = ldexpf(1.0f, t % 5 - 2); /* the amax moves: the prediction lags, and saturates */
        for (size_t i = 0; i < n_in; i++) {
            b->xb[i] = bf16_from_f32(b->xf[i] * scale);
            b->xf[i] = bf16_to_f32(b->xb[i]);
        }
        CompressParams prs = p, pag = p;
        prs.delayed_amax = pag.delayed_amax = 0.0f;
        for (int i = 0; i < held; i++) {
            if (ring[0][i] > prs.delayed_amax) prs.delayed_amax = ring[0][i];
            if (ring[1][i] > pag.delayed_amax) pag.delayed_amax = ring[1][i];
        }
        CollStats st = {0};
        float* hy = sp ? b->hout : b->xf;
        if (shape == SHAPE_ONE_SHOT) coll_allreduce_one_shot(MPI_COMM_WORLD, &prs, b->xf, n, (uint64_t)t, hs, &st);
        else if (shape == SHAPE_TWO_SHOT) coll_allreduce(MPI_COMM_WORLD, &prs, &pag, b->xf, n, (uint64_t)t, hs, &st);
        else if (shape == SHAPE_SP_RS) sp_reduce_scatter_host(MPI_COMM_WORLD, K, &prs, b->xf, hy, N, C, 0, K, (uint64_t)t, hs, &st);
        else sp_all_gather_host(MPI_COMM_WORLD, K, &pag, b->xf, hy, N, C, 0, K, (uint64_t)t, hs, &st);
        ring[0][t % H] = st.amax_rs;
        ring[1][t % H] = st.amax_ag;
        if (held < H) held++;
        sum.saturated += st.saturated;
        sum.nonfinite += st.nonfinite;
        for (size_t i = 0; i < n_out; i++) b->ref[i] = bf16_from_f32(hy[i]);

        CUDA_CHECK(cudaMemcpyAsync(b->d_x, b->xb, n_in * 2, cudaMemcpyHostToDevice, cs));
        const CollDevSite site = {d_h->delayed, d_call};
        uint16_t* dy = sp ? b->d_out : b->d_x;
        if (shape == SHAPE_ONE_SHOT) coll_allreduce_one_shot_site_dev(MPI_COMM_WORLD, &p, b->d_x, n, (uint64_t)t, s, &site, NULL, cs);
        else if (shape == SHAPE_TWO_SHOT) coll_allreduce_site_dev(MPI_COMM_WORLD, &p, &p, b->d_x, n, (uint64_t)t, s, &site, NULL, cs);
        else if (shape == SHAPE_SP_RS) sp_reduce_scatter_dev(MPI_COMM_WORLD, K, &p, b->d_x, dy, N, C, 0, K, (uint64_t)t, s, &site, NULL, cs);
        else sp_all_gather_dev(MPI_COMM_WORLD, K, &p, b->d_x, dy, N, C, 0, K, (uint64_t)t, s, &site, NULL, cs);
        site_scale_push_dev(d_h, d_call, d_tot, 1, cs);
        CUDA_CHECK(cudaMemcpyAsync(b->got, dy, n_out * 2, cudaMemcpyDeviceToHost, cs));
        CUDA_CHECK(cudaStreamSynchronize(cs));
        const long e = diff_bf16(b->ref, b->got, n_out);
        if (e >= 0 && bad_call < 0) {
            bad_call = t;
            bad_elem = e;
        }
    }
    const unsigned long long syncs = s->host_syncs - syncs0;
    CUDA_CHECK(cudaMemcpyAsync(&h_end, d_h, sizeof(h_end), cudaMemcpyDeviceToHost, cs));
    CUDA_CHECK(cudaMemcpyAsync(&tot, d_tot, sizeof(tot), cudaMemcpyDeviceToHost, cs));
    CUDA_CHECK(cudaStreamSynchronize(cs));
    int hist_ok = h_end.hist_len == held;
    for (int i = 0; i < held && hist_ok; i++) /* newest first on the device */
        for (int ph = 0; ph < 2; ph++)
            hist_ok &= !memcmp(&h_end.amax_hist[ph][i], &ring[ph][(T - 1 - i) % H], sizeof(float));
    const int stats_ok = tot.saturated == sum.saturated && tot.nonfinite == sum.nonfinite;
    const int no_wait = s->nccl || s->ipc ? syncs <= 1 : 1; /* (1: the IPC buffers' first growth) */
    char msg[200], what[96];
    static const char* SHAPE[4] = {"two-shot", "one-shot", "sp reduce-scatter", "sp all-gather"};
    snprintf(what, sizeof(what), "%s n=%zu %s", name, n, SHAPE[shape]);
    snprintf(msg, sizeof(msg), "rank %d: call %ld element %ld; history %s; saturated host %llu device %llu; host syncs %llu",
             rank, bad_call, bad_elem, hist_ok ? "equal" : "differs", (unsigned long long)sum.saturated,
             (unsigned long long)tot.saturated, syncs);
    record("site scale on the device", bad_call < 0 && hist_ok && stats_ok && no_wait, msg, what);
    CUDA_CHECK(cudaFree(d_h));
    CUDA_CHECK(cudaFree(d_call));
    CUDA_CHECK(cudaFree(d_tot));
}

/* ---- configurations ------------------------------------------------------------ */

typedef struct {
    const char* name;
    CompressParams rs, ag;
    int nonfinite;
} Pair;

static CompressParams params(CompressMethod m, int G, Fp8Format f, int sr, float delayed) {
    CompressParams p;
    compress_params_default(&p, m);
    p.group_size = G;
    p.format = f;
    p.stochastic = sr;
    p.seed = 42;
    if (delayed > 0.0f) {
        p.delayed = 1;
        p.delayed_amax = delayed;
    }
    return p;
}

int main(int argc, char** argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &P));
    int quick = 0, use_nccl = 0, only_ipc = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--nccl")) use_nccl = 1;
        else if (!strcmp(argv[i], "--ipc")) only_ipc = 1;
        else FATAL("unknown option %s (use --quick, --nccl, --ipc)", argv[i]);
    }
    int ndev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    if (ndev < 1) FATAL("no CUDA device");
    CUDA_CHECK(cudaSetDevice(rank % ndev));
    cudaStream_t cs;
    CUDA_CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
#ifdef CC_EMU_BUILD
    const int aware_ok = !use_nccl; /* emulated device memory is host memory */
#else
    const int aware_ok = !use_nccl && coll_mpi_cuda_aware();
#endif
    ncclComm_t nccl = NULL;
    if (use_nccl) nccl = nccl_comm_over(MPI_COMM_WORLD);
    /* the IPC transport (comm/ipc_cuda.h): ranks sharing a GPU, or GPUs with peer access; the emulator
     * maps the ranks' blocks into each other through shared memory */
    const int ipc_ok = coll_ipc_usable(MPI_COMM_WORLD);
    if (only_ipc && !ipc_ok) FATAL("--ipc: the CUDA IPC transport is not usable for these ranks (one node, one GPU or peer access)");
    if (rank == 0)
        printf("test_coll_gpu: %d ranks, %d device(s), transport %s%s\n", P, ndev,
               use_nccl ? "NCCL send/recv" : coll_mpi_cuda_aware() ? "MPI, CUDA-aware" : "MPI (device-pointer mode tested only under the emulator)",
               ipc_ok ? ", and CUDA IPC" : " (CUDA IPC not usable here: not tested)");

    Pair pairs[24];
    int np = 0;
    pairs[np++] = (Pair){"none", params(CM_NONE, 64, FP8_E4M3, 0, 0), params(CM_NONE, 64, FP8_E4M3, 0, 0), 1};
    pairs[np++] = (Pair){"bf16", params(CM_BF16, 64, FP8_E4M3, 0, 0), params(CM_BF16, 64, FP8_E4M3, 0, 0), 1};
    pairs[np++] = (Pair){"taco", params(CM_TACO, 64, FP8_E4M3, 0, 0), params(CM_TACO, 64, FP8_E4M3, 0, 0), 0};
    pairs[np++] = (Pair){"taco G=16 nonfinite", params(CM_TACO, 16, FP8_E4M3, 0, 0), params(CM_TACO, 16, FP8_E4M3, 0, 0), 1};
    pairs[np++] = (Pair){"taco G=256 e5m2", params(CM_TACO, 256, FP8_E5M2, 0, 0), params(CM_TACO, 256, FP8_E5M2, 0, 0), 0};
    pairs[np++] = (Pair){"taco delayed", params(CM_TACO, 64, FP8_E4M3, 0, 4.0f), params(CM_TACO, 64, FP8_E4M3, 0, 8.0f), 0};
    pairs[np++] = (Pair){"taco delayed low (sat)", params(CM_TACO, 64, FP8_E4M3, 0, 0.2f), params(CM_TACO, 64, FP8_E4M3, 0, 0.2f), 0};
    pairs[np++] = (Pair){"taco sr", params(CM_TACO, 128, FP8_E4M3, 1, 0), params(CM_TACO, 128, FP8_E4M3, 1, 0), 0};
    pairs[np++] = (Pair){"taco sr delayed", params(CM_TACO, 32, FP8_E5M2, 1, 4.0f), params(CM_TACO, 32, FP8_E5M2, 1, 8.0f), 0};
    pairs[np++] = (Pair){"fp8_tensor", params(CM_FP8_TENSOR, 64, FP8_E4M3, 0, 0), params(CM_FP8_TENSOR, 64, FP8_E4M3, 0, 0), 0};
    pairs[np++] = (Pair){"fp8_group", params(CM_FP8_GROUP, 64, FP8_E4M3, 0, 0), params(CM_FP8_GROUP, 64, FP8_E4M3, 0, 0), 0};
    pairs[np++] = (Pair){"int8_group (unfused)", params(CM_INT8_GROUP, 64, FP8_E4M3, 0, 0), params(CM_INT8_GROUP, 64, FP8_E4M3, 0, 0), 0};
    pairs[np++] = (Pair){"cast", params(CM_CAST, 64, FP8_E4M3, 0, 0), params(CM_CAST, 64, FP8_E4M3, 0, 0), 0};
    pairs[np++] = (Pair){"taco -> fp8_group", params(CM_TACO, 64, FP8_E4M3, 0, 0), params(CM_FP8_GROUP, 64, FP8_E4M3, 0, 0), 0};
    pairs[np++] = (Pair){"fp8_tensor -> bf16", params(CM_FP8_TENSOR, 64, FP8_E4M3, 0, 0), params(CM_BF16, 64, FP8_E4M3, 0, 0), 0};
    pairs[np++] = (Pair){"fp8_tensor -> none", params(CM_FP8_TENSOR, 64, FP8_E4M3, 0, 0), params(CM_NONE, 64, FP8_E4M3, 0, 0), 0};
    pairs[np++] = (Pair){"taco-had -> taco-dual", params(CM_TACO, 64, FP8_E4M3, 0, 0), params(CM_TACO, 64, FP8_E4M3, 0, 0), 0};
    pairs[np - 1].rs.hadamard = 0;
    pairs[np - 1].ag.dual_scale = 0;

    const size_t sizes_full[] = {1, 7, 1000, 12345, (1u << 18) + 3, (1u << 21) + 5};
    const size_t sizes_quick[] = {1, 7, 1000, 12345};
    const size_t* sizes = quick ? sizes_quick : sizes_full;
    const int nsizes = quick ? 4 : 6;
    const int Ks[] = {1, 2, 4, 7};
    const size_t nmax = (1u << 21) + 5;

    float* xf = mallocCheck(nmax * sizeof(float));
    float* xh = mallocCheck(nmax * sizeof(float));
    float* hout = mallocCheck(nmax * sizeof(float));
    float* dout = mallocCheck(nmax * sizeof(float));
    uint16_t* xb = mallocCheck(nmax * sizeof(uint16_t));
    uint16_t* ref = mallocCheck(nmax * sizeof(uint16_t));
    uint16_t* got = mallocCheck(nmax * sizeof(uint16_t));
    uint16_t* two = mallocCheck(nmax * sizeof(uint16_t));
    uint16_t* d_x = NULL;
    void* d_out = NULL;
    void* d_mine = NULL;
    CUDA_CHECK(cudaMalloc((void**)&d_x, nmax * sizeof(uint16_t)));
    CUDA_CHECK(cudaMalloc(&d_out, nmax * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_mine, nmax * sizeof(float)));
    CollScratch hs;
    memset(&hs, 0, sizeof(hs));
    CollScratchDev ds[3][4]; /* [staged, device pointers to MPI, IPC][K], reused across cases */
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < 4; k++) {
            coll_scratch_dev_init(&ds[a][k]);
            ds[a][k].K = Ks[k];
            ds[a][k].min_sub = 256;
            ds[a][k].cuda_aware = a == 1;
            ds[a][k].nccl = a == 2 ? NULL : nccl;
            ds[a][k].ipc = a == 2;
        }
    static const char* TRANSPORT[3] = {"staged", "device-ptr", "ipc"};
    CollScratchDev du; /* the unfused all-reduce (comm.fuse: false): an fp32 sum, then the encode */
    coll_scratch_dev_init(&du);
    du.K = 2;
    du.min_sub = 256;
    du.nccl = nccl;
    du.unfused = 1;

    int salt = 0;
    for (int pi = 0; pi < np; pi++) {
        const Pair* pr = &pairs[pi];
        for (int si = 0; si < nsizes; si++) {
            size_t n = sizes[si];
            for (int a = 0; a < 3; a++) {
                if ((a == 1 && !aware_ok) || (a == 2 && !ipc_ok) || (only_ipc && a != 2)) continue;
                for (int ki = 0; ki < 4; ki++) {
                    if (n > 100000 && ki != 2 && ki != 0) continue; /* big sizes: K = 1 and 4 */
                    if (a == 2 && ki != 0) continue; /* IPC does not cut sub-chunks: K plays no part */
                    CollScratchDev* s = &ds[a][ki];
                    char what[160];
                    snprintf(what, sizeof(what), "%s n=%zu K=%d %s", pr->name, n, Ks[ki], TRANSPORT[a]);
                    uint64_t stream = (uint64_t)(salt * 31 + 5);
                    fill(xf, n, rank, salt++, pr->nonfinite);
                    for (size_t i = 0; i < n; i++) {
                        xb[i] = bf16_from_f32(xf[i]);
                        xf[i] = bf16_to_f32(xb[i]);
                    }
                    char msg[200] = "";

                    /* all-reduce */
                    memcpy(xh, xf, n * sizeof(float));
                    CollStats sh = {0}, sd = {0};
                    coll_allreduce(MPI_COMM_WORLD, &pr->rs, &pr->ag, xh, n, stream, &hs, &sh);
                    for (size_t i = 0; i < n; i++) ref[i] = bf16_from_f32(xh[i]);
                    copy_sync(d_x, xb, n * 2, cudaMemcpyHostToDevice, cs);
                    coll_allreduce_dev(MPI_COMM_WORLD, &pr->rs, &pr->ag, d_x, n, stream, s, &sd, cs);
                    CUDA_CHECK(cudaStreamSynchronize(cs));
                    copy_sync(got, d_x, n * 2, cudaMemcpyDeviceToHost, cs);
                    long e = diff_bf16(ref, got, n);
                    int st_ok = stats_equal(&sh, &sd);
                    if (e >= 0) snprintf(msg, sizeof(msg), "rank %d element %ld: host 0x%04x device 0x%04x", rank, e, ref[e], got[e]);
                    else if (!st_ok) stats_diff(msg, sizeof(msg), rank, &sh, &sd);
                    record(pr->name, e < 0 && st_ok, msg, what);
                    record("(all ranks identical)", same_on_all_ranks(got, n * 2), "outputs differ across ranks", what);
                    if (a == 2) record("ipc == host (== staged)", e < 0 && st_ok, msg, what);
                    if (a == 0 && ki == 0) { /* unfused: the fused step's bits, through memory */
                        CollStats su = {0};
                        copy_sync(d_x, xb, n * 2, cudaMemcpyHostToDevice, cs);
                        coll_allreduce_dev(MPI_COMM_WORLD, &pr->rs, &pr->ag, d_x, n, stream, &du, &su, cs);
                        CUDA_CHECK(cudaStreamSynchronize(cs));
                        copy_sync(two, d_x, n * 2, cudaMemcpyDeviceToHost, cs);
                        const long eu = diff_bf16(ref, two, n);
                        char mu[160] = "";
                        if (eu >= 0) snprintf(mu, sizeof(mu), "rank %d element %ld: host 0x%04x device 0x%04x", rank, eu, ref[eu], two[eu]);
                        record("unfused == host", eu < 0 && stats_equal(&sh, &su), mu, what);
                    }

                    /* the one-shot all-reduce (over MPI pipelined in K sub-chunks, as the
                     * two-shot); the exact wires give the two-shot bits */
                    {
                        memcpy(two, got, n * 2);
                        memcpy(xh, xf, n * sizeof(float));
                        CollStats oh = {0}, od = {0};
                        coll_allreduce_one_shot(MPI_COMM_WORLD, &pr->rs, xh, n, stream, &hs, &oh);
                        for (size_t i = 0; i < n; i++) ref[i] = bf16_from_f32(xh[i]);
                        copy_sync(d_x, xb, n * 2, cudaMemcpyHostToDevice, cs);
                        coll_allreduce_one_shot_dev(MPI_COMM_WORLD, &pr->rs, d_x, n, stream, s, &od, cs);
                        CUDA_CHECK(cudaStreamSynchronize(cs));
                        copy_sync(got, d_x, n * 2, cudaMemcpyDeviceToHost, cs);
                        e = diff_bf16(ref, got, n);
                        st_ok = stats_equal(&oh, &od);
                        msg[0] = '\0';
                        if (e >= 0) snprintf(msg, sizeof(msg), "rank %d element %ld: host 0x%04x device 0x%04x", rank, e, ref[e], got[e]);
                        else if (!st_ok) stats_diff(msg, sizeof(msg), rank, &oh, &od);
                        record("one-shot", e < 0 && st_ok, msg, what);
                        record("one-shot (ranks identical)", same_on_all_ranks(got, n * 2), "outputs differ across ranks", what);
                        if (!strcmp(pr->name, "none") || !strcmp(pr->name, "bf16")) {
                            e = diff_bf16(two, got, n);
                            snprintf(msg, sizeof(msg), "rank %d element %ld: two-shot 0x%04x one-shot 0x%04x", rank, e,
                                     e >= 0 ? two[e] : 0, e >= 0 ? got[e] : 0);
                            record("one-shot exact == two-shot", e < 0, msg, what);
                        }
                    }

                    /* reduce-scatter, fp32 and bf16 out, with the all-reduce's first method */
                    size_t mb, mcnt;
                    coll_chunk(n, P, rank, coll_align(&pr->rs), &mb, &mcnt);
                    CollStats rh = {0}, rd = {0}, rd2 = {0};
                    coll_reduce_scatter(MPI_COMM_WORLD, &pr->rs, xf, n, hout, stream + 1, &hs, &rh);
                    copy_sync(d_x, xb, n * 2, cudaMemcpyHostToDevice, cs);
                    coll_reduce_scatter_dev(MPI_COMM_WORLD, &pr->rs, d_x, n, d_out, 0, stream + 1, s, &rd, cs);
                    CUDA_CHECK(cudaStreamSynchronize(cs));
                    copy_sync(dout, d_out, mcnt * 4, cudaMemcpyDeviceToHost, cs);
                    e = diff_f32(hout, dout, mcnt);
                    if (e >= 0 || stats_equal(&rh, &rd)) snprintf(msg, sizeof(msg), "rank %d element %ld", rank, e);
                    else stats_diff(msg, sizeof(msg), rank, &rh, &rd);
                    record("reduce-scatter fp32", e < 0 && stats_equal(&rh, &rd), msg, what);
                    coll_reduce_scatter_dev(MPI_COMM_WORLD, &pr->rs, d_x, n, d_out, 1, stream + 1, s, &rd2, cs);
                    CUDA_CHECK(cudaStreamSynchronize(cs));
                    copy_sync(got, d_out, mcnt * 2, cudaMemcpyDeviceToHost, cs);
                    for (size_t i = 0; i < mcnt; i++) ref[i] = bf16_from_f32(hout[i]);
                    e = diff_bf16(ref, got, mcnt);
                    snprintf(msg, sizeof(msg), "rank %d element %ld", rank, e);
                    record("reduce-scatter bf16", e < 0, msg, what);

                    /* all-gather of my chunk (the reduce-scatter result), from fp32 and from bf16 */
                    CollStats gh = {0}, gd = {0};
                    coll_all_gather(MPI_COMM_WORLD, &pr->ag, hout, n, xh, stream + 2, &hs, &gh);
                    for (size_t i = 0; i < n; i++) ref[i] = bf16_from_f32(xh[i]);
                    copy_sync(d_mine, hout, (mcnt ? mcnt : 1) * 4, cudaMemcpyHostToDevice, cs);
                    coll_all_gather_dev(MPI_COMM_WORLD, &pr->ag, d_mine, 0, n, d_x, stream + 2, s, &gd, cs);
                    CUDA_CHECK(cudaStreamSynchronize(cs));
                    copy_sync(got, d_x, n * 2, cudaMemcpyDeviceToHost, cs);
                    e = diff_bf16(ref, got, n);
                    snprintf(msg, sizeof(msg), "rank %d element %ld", rank, e);
                    record("all-gather from fp32", e < 0 && stats_equal(&gh, &gd), msg, what);
                    uint16_t* mine_b = mallocCheck((mcnt ? mcnt : 1) * 2);
                    float* mine_f = mallocCheck((mcnt ? mcnt : 1) * 4);
                    for (size_t i = 0; i < mcnt; i++) {
                        mine_b[i] = bf16_from_f32(hout[i]);
                        mine_f[i] = bf16_to_f32(mine_b[i]);
                    }
                    coll_all_gather(MPI_COMM_WORLD, &pr->ag, mine_f, n, xh, stream + 3, &hs, NULL);
                    for (size_t i = 0; i < n; i++) ref[i] = bf16_from_f32(xh[i]);
                    copy_sync(d_mine, mine_b, (mcnt ? mcnt : 1) * 2, cudaMemcpyHostToDevice, cs);
                    coll_all_gather_dev(MPI_COMM_WORLD, &pr->ag, d_mine, 1, n, d_x, stream + 3, s, NULL, cs);
                    CUDA_CHECK(cudaStreamSynchronize(cs));
                    copy_sync(got, d_x, n * 2, cudaMemcpyDeviceToHost, cs);
                    e = diff_bf16(ref, got, n);
                    snprintf(msg, sizeof(msg), "rank %d element %ld", rank, e);
                    record("all-gather from bf16", e < 0, msg, what);
                    free(mine_b);
                    free(mine_f);
                }
            }
        }
    }

    /* sp rows: [N, C] = [P K rs, C] with K pieces per rank, every pair */
    const int sp_shapes[][3] = {{3, 37, 2}, {2, 64, 4}, {5, 100, 1}};   /* rows per piece, C, K */
    for (int pi = 0; pi < np; pi++) {
        const Pair* pr = &pairs[pi];
        for (size_t si = 0; si < sizeof(sp_shapes) / sizeof(sp_shapes[0]); si++) {
            const int rs = sp_shapes[si][0], C = sp_shapes[si][1], K = sp_shapes[si][2], N = P * K * rs;
            const size_t n = (size_t)N * C, nl = n / (size_t)P;
            for (int a = 0; a < 3; a += 2) { /* staged (or NCCL), and IPC */
                if ((a == 0 && only_ipc) || (a == 2 && !ipc_ok)) continue;
                CollScratchDev* s = a == 2 ? &ds[2][0] : &ds[0][1];
                char what[160], msg[200] = "";
                snprintf(what, sizeof(what), "%s N=%d C=%d K=%d %s", pr->name, N, C, K, TRANSPORT[a]);
                fill(xf, n, rank, salt++, pr->nonfinite);
                for (size_t i = 0; i < n; i++) {
                    xb[i] = bf16_from_f32(xf[i]);
                    xf[i] = bf16_to_f32(xb[i]);
                }
                CollStats sh = {0}, sd = {0};
                sp_reduce_scatter_host(MPI_COMM_WORLD, K, &pr->rs, xf, hout, N, C, 0, K, 41, &hs, &sh);
                for (size_t i = 0; i < nl; i++) ref[i] = bf16_from_f32(hout[i]);
                copy_sync(d_x, xb, n * 2, cudaMemcpyHostToDevice, cs);
                sp_reduce_scatter_dev(MPI_COMM_WORLD, K, &pr->rs, d_x, (uint16_t*)d_out, N, C, 0, K, 41, s, NULL, &sd, cs);
                copy_sync(got, d_out, nl * 2, cudaMemcpyDeviceToHost, cs);
                long e = diff_bf16(ref, got, nl);
                if (e >= 0) snprintf(msg, sizeof(msg), "rank %d element %ld: host 0x%04x device 0x%04x", rank, e, ref[e], got[e]);
                else if (!stats_equal(&sh, &sd)) stats_diff(msg, sizeof(msg), rank, &sh, &sd);
                record("sp reduce-scatter", e < 0 && stats_equal(&sh, &sd), msg, what);
                for (int k = 0; k < K; k++)
                    sp_reduce_scatter_dev(MPI_COMM_WORLD, K, &pr->rs, d_x, (uint16_t*)d_mine, N, C, k, k + 1, 41, s, NULL, NULL, cs);
                copy_sync(two, d_mine, nl * 2, cudaMemcpyDeviceToHost, cs);
                record("sp rs by segment", memcmp(two, got, nl * 2) == 0, "one segment per call differs", what);

                /* the all-gather of the bf16 rows the reduce-scatter left */
                for (size_t i = 0; i < nl; i++) xh[i] = bf16_to_f32(got[i]);
                CollStats gh = {0}, gd = {0};
                sp_all_gather_host(MPI_COMM_WORLD, K, &pr->ag, xh, hout, N, C, 0, K, 42, &hs, &gh);
                for (size_t i = 0; i < n; i++) ref[i] = bf16_from_f32(hout[i]);
                sp_all_gather_dev(MPI_COMM_WORLD, K, &pr->ag, (const uint16_t*)d_out, d_x, N, C, 0, K, 42, s, NULL, &gd, cs);
                copy_sync(got, d_x, n * 2, cudaMemcpyDeviceToHost, cs);
                e = diff_bf16(ref, got, n);
                msg[0] = '\0';
                if (e >= 0) snprintf(msg, sizeof(msg), "rank %d element %ld: host 0x%04x device 0x%04x", rank, e, ref[e], got[e]);
                else if (!stats_equal(&gh, &gd)) stats_diff(msg, sizeof(msg), rank, &gh, &gd);
                record("sp all-gather", e < 0 && stats_equal(&gh, &gd), msg, what);
                record("sp ag (ranks identical)", same_on_all_ranks(got, n * 2), "outputs differ across ranks", what);
                for (int k = 0; k < K; k++)
                    sp_all_gather_dev(MPI_COMM_WORLD, K, &pr->ag, (const uint16_t*)d_out, d_x, N, C, k, k + 1, 42, s, NULL, NULL, cs);
                copy_sync(two, d_x, n * 2, cudaMemcpyDeviceToHost, cs);
                record("sp ag by segment", memcmp(two, got, n * 2) == 0, "one segment per call differs", what);
            }
        }
    }

    /* The exact path of the GPU trainer sends bf16 instead of fp32: its
     * inputs are bf16 (exact in bf16) and the all-gather's rounding of the
     * fp32 sum to bf16 is the rounding of the output, so the two wires must
     * give the same bits (NaN equals NaN), at half the bytes. */
    for (int si = 0; si < nsizes; si++) {
        size_t n = sizes[si];
        CompressParams none = params(CM_NONE, 64, FP8_E4M3, 0, 0), bf = params(CM_BF16, 64, FP8_E4M3, 0, 0);
        fill(xf, n, rank, 900 + si, 1);
        for (size_t i = 0; i < n; i++) xb[i] = bf16_from_f32(xf[i]);
        CollStats s32 = {0}, s16 = {0};
        copy_sync(d_x, xb, n * 2, cudaMemcpyHostToDevice, cs);
        coll_allreduce_dev(MPI_COMM_WORLD, &none, &none, d_x, n, 7, &ds[0][2], &s32, cs);
        copy_sync(ref, d_x, n * 2, cudaMemcpyDeviceToHost, cs);
        copy_sync(d_x, xb, n * 2, cudaMemcpyHostToDevice, cs);
        coll_allreduce_dev(MPI_COMM_WORLD, &bf, &bf, d_x, n, 7, &ds[0][2], &s16, cs);
        copy_sync(got, d_x, n * 2, cudaMemcpyDeviceToHost, cs);
        long e = diff_bf16(ref, got, n);
        char what[64], msg[160];
        snprintf(what, sizeof(what), "n=%zu", n);
        snprintf(msg, sizeof(msg), "rank %d element %ld; bytes fp32 %llu bf16 %llu", rank, e, (unsigned long long)s32.bytes_sent,
                 (unsigned long long)s16.bytes_sent);
        record("bf16 wire == fp32 wire", e < 0 && 2 * s16.bytes_sent == s32.bytes_sent, msg, what);
    }

    /* delayed scaling over more calls than the history holds */
    {
        const Bufs b = {xf, hout, xb, ref, got, d_x, (uint16_t*)d_out};
        const CompressParams taco = params(CM_TACO, 64, FP8_E4M3, 0, 0), tens = params(CM_FP8_TENSOR, 64, FP8_E4M3, 0, 0);
        const CompressParams sr = params(CM_TACO, 32, FP8_E5M2, 1, 0);
        const size_t n = quick ? 12345 : (1u << 18) + 3;
        const int T = SITE_DEV_HISTORY + 5;
        if (!only_ipc) {
            site_history_case("taco delayed", taco, 0, n, T, &ds[0][2], &hs, &b, cs);
            site_history_case("fp8_tensor delayed", tens, 0, n, T, &ds[0][1], &hs, &b, cs);
            site_history_case("taco sr delayed", sr, 0, n, T, &ds[0][0], &hs, &b, cs);
            site_history_case("taco delayed", taco, 1, n, T, &ds[0][0], &hs, &b, cs);
            site_history_case("taco delayed", taco, SHAPE_SP_RS, n, T, &ds[0][1], &hs, &b, cs);
            site_history_case("fp8_tensor delayed", tens, SHAPE_SP_AG, n, T, &ds[0][2], &hs, &b, cs);
            site_history_case("taco sr delayed", sr, SHAPE_SP_AG, n, T, &ds[0][0], &hs, &b, cs);
        }
        if (ipc_ok) {
            site_history_case("taco delayed ipc", taco, 0, n, T, &ds[2][0], &hs, &b, cs);
            site_history_case("fp8_tensor delayed ipc", tens, 0, n, T, &ds[2][0], &hs, &b, cs);
            site_history_case("taco delayed ipc", taco, 1, n, T, &ds[2][0], &hs, &b, cs);
            site_history_case("taco delayed ipc", taco, SHAPE_SP_RS, n, T, &ds[2][0], &hs, &b, cs);
            site_history_case("fp8_tensor delayed ipc", tens, SHAPE_SP_AG, n, T, &ds[2][0], &hs, &b, cs);
        }
    }

    int failed = 0;
    if (rank == 0) printf("\n%-26s %8s  %s\n", "case", "subcases", "result");
    for (int i = 0; i < nrows; i++) {
        if (rows[i].failed) failed++;
        if (rank == 0) {
            printf("%-26s %8ld  %s", rows[i].name, rows[i].total, rows[i].failed ? "FAIL" : "PASS");
            if (rows[i].failed) printf(" (%ld failed; first: %s)", rows[i].failed, rows[i].first);
            printf("\n");
        }
    }
    if (rank == 0) printf("\n%s: %d of %d rows failed (P = %d)\n", failed ? "FAILED" : "ALL PASS", failed, nrows, P);
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < 4; k++) coll_scratch_dev_free(&ds[a][k]);
    coll_scratch_dev_free(&du);
    coll_scratch_free(&hs);
    if (nccl) NCCL_CHECK(ncclCommDestroy(nccl));
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_mine));
    CUDA_CHECK(cudaStreamDestroy(cs));
    free(xf); free(xh); free(hout); free(dout); free(xb); free(ref); free(got); free(two);
    MPI_CHECK(MPI_Finalize());
    return failed ? 1 : 0;
}
