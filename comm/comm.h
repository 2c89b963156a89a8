/*
 * comm/comm.h - process groups and every collective the trainer uses.
 *
 * The world is split into tensor-parallel (TP) groups of contiguous ranks
 * (ranks 0..tp-1 form group 0, ...) and data-parallel (DP) groups made of
 * the ranks with the same TP rank. This file is the map of all traffic:
 *
 *   tp_exchange()        - the named TP exchange sites of the model (comm/sites.c):
 *                          an all-reduce that goes through compress/ when
 *                          compression is on for that site
 *   tp_allreduce_small() - tiny exact all-reduces (cross-entropy max/sums)
 *   dp_allreduce_mean()  - gradient averaging over DP (exact)
 *   coll_*()             - the compressed collectives on host fp32 buffers
 *                          (comm/collectives.c), usable on any communicator
 *
 * Buffers handed to tp_exchange / tp_allreduce_small / dp_allreduce_mean
 * live in backend memory (host for the CPU build, device for the GPU
 * build); comm stages them to host when needed - or, in the GPU build with
 * comm.backend "nccl", moves them with NCCL (comm/comm_nccl.c).
 */
#ifndef COMM_H
#define COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "compress/compress.h"
#include "train/config.h"
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- compressed collectives on host fp32 buffers (comm/collectives.c) ---- */

typedef struct {
    uint8_t* send;      /* compressed chunks going out */
    uint8_t* recv;      /* compressed chunks coming in */
    float* acc;         /* fp32 sum of this rank's chunk */
    size_t send_cap, recv_cap, acc_cap;
} CollScratch;

typedef struct {
    uint64_t bytes_sent;   /* bytes this rank put on the wire (to other ranks) */
    uint64_t saturated;    /* elements clamped by the FP8 cast */
    uint64_t nonfinite;    /* NaN/inf elements seen by the compressor */
    float amax_rs, amax_ag;/* chunk amax seen by the two phases (delayed-scale history) */
} CollStats;

/* Split n elements into P chunks whose boundaries fall on multiples of
 * align (so no compression group straddles two ranks). */
void coll_chunk(size_t n, int P, int i, size_t align, size_t* begin, size_t* count);
size_t coll_align(const CompressParams* p);

/* x[n] -> out[count of my chunk]: sum over ranks of my chunk. p compresses
 * what is sent. stream seeds stochastic rounding. */
void coll_reduce_scatter(MPI_Comm comm, const CompressParams* p, const float* x, size_t n, float* out,
                         uint64_t stream, CollScratch* s, CollStats* st);
/* mine[count of my chunk] -> out[n]: every rank gets every chunk, decoded
 * from the same bytes (so all ranks hold identical results, their own chunk
 * included). */
void coll_all_gather(MPI_Comm comm, const CompressParams* p, const float* mine, size_t n, float* out,
                     uint64_t stream, CollScratch* s, CollStats* st);
/* In place: x = sum over ranks, by reduce-scatter (p_rs) + all-gather (p_ag).
 * Deterministic, identical on every rank, exact when both methods are none. */
void coll_allreduce(MPI_Comm comm, const CompressParams* p_rs, const CompressParams* p_ag, float* x,
                    size_t n, uint64_t stream, CollScratch* s, CollStats* st);
void coll_scratch_free(CollScratch* s);

/* ---- the exchange sites of the model (comm/sites.c) ----------------------- */

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

typedef struct {
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
    /* statistics of the current step (reset by comm_step_begin) */
    uint64_t bytes, saturated, nonfinite;
    double rel_err;         /* < 0 when not sampled this step */
    int calls;
} CommSite;

typedef struct {
    int world_rank, world_size;
    int tp_rank, tp_size, dp_rank, dp_size;
    MPI_Comm tp_comm, dp_comm;
    /* sites */
    CommSite* sites;
    int nsites, L;
    int step;               /* training step being run (for streams and stats) */
    int stats_every;        /* sample rel_err every this many steps (0 = never) */
    int calib_steps;        /* auto group size: calibrate over the first K steps */
    int train_mode;         /* 1: count stats (train step); 0: eval/sampling */
    int pipeline_depth;     /* comm.pipeline_depth and comm.fuse: the GPU collectives' */
    int fuse;               /* pipeline depth K and fused all-gather encode */
    int dump_step;          /* dump site inputs at this step (-1 = never) */
    char dump_sites[256];
    char dump_dir[512];
    uint64_t seed;
    /* per step totals */
    uint64_t step_bytes;
    double step_ms;
    /* host staging */
    float* host;            /* staging for one exchange */
    float* host_ref;        /* exact result when sampling errors */
    size_t host_cap;
#ifdef OPS_BF16
    float* dev_f32;         /* device fp32 copy of an exchange, for staging */
    size_t dev_cap;
    struct CollScratchDev* dscratch; /* the device collectives' buffers and streams */
    struct ncclComm* nccl_tp;        /* comm.backend "nccl" (comm_nccl_init): the groups' */
    struct ncclComm* nccl_dp;        /* NCCL communicators; NULL with the MPI backend */
    float* dev_gather;               /* device scratch of the NCCL backend's reductions */
    size_t dev_gather_cap;
#endif
    CollScratch scratch;
} Comm;

/* MPI_Init must have run. Splits the world into TP and DP groups; sets
 * MPI_ERRORS_RETURN so failures reach MPI_CHECK. */
void comm_init(Comm* c, int tp, int dp);
/* Builds the site table from the compress section of the config. */
void comm_setup_sites(Comm* c, int L, const Config* cfg);
void comm_free(Comm* c);
void comm_step_begin(Comm* c, int step);

/* The TP exchange of the model: x[rows, cols] (backend memory, partial sums
 * on every TP rank) becomes the full sum on every TP rank. */
void tp_exchange(Comm* c, SiteKind kind, int layer, floatX* x, int rows, int cols);
/* Exact all-reduce of a small fp32 buffer in backend memory over TP. */
void tp_allreduce_small(Comm* c, float* x, size_t n, MPI_Op op);
/* Exact mean over DP of an fp32 buffer in backend memory (gradients). */
void dp_allreduce_mean(Comm* c, float* x, size_t n);
/* Host staging buffer of at least n floats, reused (c->host). */
float* comm_host_buffer(Comm* c, size_t n);
/* Sum of a host double over a communicator (losses, norms). */
double comm_sum_double(MPI_Comm comm, double v);

#ifdef OPS_BF16
/* ---- the NCCL backend (comm/comm_nccl.c, GPU build) ------------------------- */
/* After ops_init (the device is chosen): NCCL communicators for the TP and DP
 * groups, bootstrapped over MPI. Collective; 0 ok, or -1 with one line in err
 * (the same verdict on every rank), e.g. when ranks of a group share a GPU. */
int comm_nccl_init(Comm* c, char* err, size_t errlen);
void comm_nccl_free(Comm* c);
/* the NCCL versions of tp_allreduce_small / dp_allreduce_mean (same bits) */
void comm_nccl_allreduce_small(Comm* c, float* x, size_t n, MPI_Op op);
void comm_nccl_dp_mean(Comm* c, float* x, size_t n);
#endif

/* The site index of (kind, layer), and its name. */
int comm_site_index(const Comm* c, SiteKind kind, int layer);
/* Appends the per-site stats of this step as a JSON object member
 * "sites":{...} to buf; returns characters written. */
int comm_sites_json(const Comm* c, char* buf, size_t cap);
/* Site state that a bit-identical resume needs (calibration, amax history). */
size_t comm_state_bytes(const Comm* c);
void comm_state_save(const Comm* c, void* dst);
void comm_state_load(Comm* c, const void* src);

#ifdef __cplusplus
}
#endif
#endif /* COMM_H */
