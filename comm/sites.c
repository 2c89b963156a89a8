/*
 * comm/sites.c - the named TP exchange sites of the model.
 *
 * model/gpt.c calls tp_exchange(comm, SITE_ATTN_FWD, layer, x, N, C) and never
 * knows whether FP8 is on: the site table built here from a CommPolicy (comm/policy.h) decides,
 * per site, which compressor runs (the per-site policy), and records what each
 * exchange cost and how much error it made:
 *
 *   bytes      bytes this rank put on the wire
 *   saturated  elements clamped by the FP8 cast
 *   rel_err    ||x_hat - x|| / ||x|| against the exact all-reduce, sampled
 *              every policy.stats_every steps (it costs an exact collective)
 *
 * Two pieces of per-site state make TACO data-driven:
 *   - group size calibration ("group_size": "auto"): over the first
 *     calib_steps steps every site scores each candidate G in 16..256 on its
 *     real tensors by (relative error x wire bytes per element), summed over
 *     steps and TP ranks; the smallest product wins. All TP ranks decide
 *     together, since sender and receiver must agree on G.
 *   - delayed scaling: the amax of the transformed values seen by each phase
 *     over the last SITE_HISTORY exchanges predicts the next chunk scale.
 *
 * In the GPU build the history and the statistics live on the device
 * (comm/sites_dev.h), for the all-reduces and the row exchanges alike: an
 * exchange is queued and never waited for; the host reads the statistics
 * when it logs them (comm_sites_read).
 *
 * Sites: embed.fwd, L<l>.attn.fwd, L<l>.mlp.fwd, L<l>.attn.bwd, L<l>.mlp.bwd,
 * lm_head.bwd; with sequence parallelism (policy.sp) the reduce-scatters and
 * all-gathers of rows of comm/sp.h instead (sites.h lists them), each a
 * site with all of the above, whole (tp_reduce_scatter, tp_all_gather) or
 * piece by piece between the GEMMs (tp_rs_*, tp_ag_*: comm.overlap).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm/sites.h"
#include "comm/sp.h"
#include "comm/watchdog.h"
#include "common/check.h"
#include "compress/methods.h"
#ifdef OPS_BF16
#include "comm/sites_dev.h"
#include "comm/sp_cuda.h"
#include "ops/ops_cuda.h"
#endif

static const int CANDIDATE_G[SITE_NUM_CANDIDATES] = {16, 32, 64, 128, 256};
static const char* KIND_NAME[SITE_KINDS] = {
    "embed.fwd", "attn.fwd", "mlp.fwd", "attn.bwd", "mlp.bwd", "lm_head.bwd",
    "embed.rs", "attn.ag", "attn.rs", "mlp.ag", "mlp.rs", "attn.ag.bwd", "attn.rs.bwd", "mlp.ag.bwd", "mlp.rs.bwd",
    "lm_head.ag", "lm_head.ag.bwd", "embed.rs.bwd"};
/* what a kind's exchange is, and whether it belongs to the backward pass */
typedef enum { OP_AR, OP_RS, OP_AG } SiteOp;
static const SiteOp KIND_OP[SITE_KINDS] = {OP_AR, OP_AR, OP_AR, OP_AR, OP_AR, OP_AR, OP_RS, OP_AG, OP_RS,
                                           OP_AG, OP_RS, OP_RS, OP_AG, OP_RS, OP_AG, OP_AG, OP_RS, OP_AG};
static const char KIND_BWD[SITE_KINDS] = {0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1};
/* the layer sites of one layer, in table order, from this kind on */
#define LAYER_KINDS(sp) ((sp) ? 8 : 4)
#define FIRST_LAYER_KIND(sp) ((sp) ? SITE_ATTN_AG : SITE_ATTN_FWD)

/* the table index of (kind, layer) in the layout sp of an L-layer model */
static int site_index_in(int sp, int L, SiteKind kind, int layer) {
    const int per = LAYER_KINDS(sp);
    switch (kind) {
    case SITE_EMBED_FWD:
    case SITE_EMBED_RS: return 0;
    case SITE_LMHEAD_BWD:
    case SITE_LMHEAD_AG: return 1 + per * L;
    case SITE_LMHEAD_AG_BWD: return 2 + per * L;
    case SITE_EMBED_RS_BWD: return 3 + per * L;
    default: return 1 + per * layer + ((int)kind - (int)FIRST_LAYER_KIND(sp));
    }
}

int comm_site_index(const Comm* c, SiteKind kind, int layer) {
    const int sp = c->policy.sp;
    if ((KIND_OP[kind] != OP_AR) != (sp != 0))
        FATAL("site %s called in a run with parallel.sp %s (a model/comm mismatch)", KIND_NAME[kind], sp ? "on" : "off");
    return site_index_in(sp, c->L, kind, layer);
}

/* The same block and pass in the other layout (a checkpoint of the other
 * layout, comm_state_load): an all-reduce site <-> the sp reduce-scatter of
 * the same partial sums; an sp all-gather <-> the all-reduce of its block. */
static SiteKind kind_in_other_layout(SiteKind k) {
    static const SiteKind RS_OF[6] = {SITE_EMBED_RS, SITE_ATTN_RS, SITE_MLP_RS, SITE_ATTN_AG_BWD, SITE_MLP_AG_BWD,
                                      SITE_LMHEAD_AG_BWD};
    static const SiteKind AR_OF[SITE_KINDS - 6] = {SITE_EMBED_FWD, SITE_ATTN_FWD, SITE_ATTN_FWD, SITE_MLP_FWD,
                                                   SITE_MLP_FWD, SITE_ATTN_BWD, SITE_ATTN_BWD, SITE_MLP_BWD,
                                                   SITE_MLP_BWD, SITE_LMHEAD_BWD, SITE_LMHEAD_BWD, SITE_EMBED_FWD};
    return k < 6 ? RS_OF[k] : AR_OF[k - 6];
}

void comm_policy_default(CommPolicy* p) {
    memset(p, 0, sizeof(*p));
    p->method = CM_NONE;
    p->fwd = p->bwd = p->embed = p->lm_head = 1;
    p->format_fwd = p->format_bwd = FP8_E4M3;
    p->group_size = 64;
    p->calib_steps = 10;
    p->hadamard = p->adaptive_scale = p->dual_scale = 1;
    p->dump_step = -1;
    p->fuse = 1;
    p->sp_chunks = 1;
    p->one_shot = COMM_ALLREDUCE_AUTO; /* comm.allreduce's default */
    p->one_shot_extra_bytes = (long long)COMM_ONE_SHOT_EXTRA_KB_DEFAULT * 1024;
}

/* The wire of the sites that are not compressed: fp32 on the CPU build.
 * The GPU build's activations are bf16, so a bf16 wire carries them
 * exactly, and the all-gather's rounding of the fp32 sum to bf16 is the
 * rounding the bf16 output needs anyway: the same bits as an fp32 wire
 * at half the bytes (tests/test_coll_gpu.c, "bf16 wire == fp32 wire"). */
#ifdef OPS_BF16
static const CompressMethod EXACT_WIRE = CM_BF16;
#else
static const CompressMethod EXACT_WIRE = CM_NONE;
#endif

void comm_setup_sites(Comm* c, int L, const CommPolicy* pol) {
    c->policy = *pol;
    c->L = L;
    const int per = LAYER_KINDS(pol->sp);
    c->nsites = per * L + (pol->sp ? 4 : 2);
    c->sites = callocCheck((size_t)c->nsites, sizeof(CommSite));
    const SiteKind tail[3] = {pol->sp ? SITE_LMHEAD_AG : SITE_LMHEAD_BWD, SITE_LMHEAD_AG_BWD, SITE_EMBED_RS_BWD};

    const CompressMethod m = pol->method;
    for (int i = 0; i < c->nsites; i++) {
        CommSite* s = &c->sites[i];
        s->layer = -1;
        if (i == 0) s->kind = pol->sp ? SITE_EMBED_RS : SITE_EMBED_FWD;
        else if (i > per * L) s->kind = tail[i - 1 - per * L];
        else { s->kind = (SiteKind)(FIRST_LAYER_KIND(pol->sp) + (i - 1) % per); s->layer = (i - 1) / per; }
        if (s->layer >= 0) snprintf(s->name, sizeof(s->name), "L%d.%s", s->layer, KIND_NAME[s->kind]);
        else snprintf(s->name, sizeof(s->name), "%s", KIND_NAME[s->kind]);

        /* the per-site policy; compress.embed and compress.lm_head name both
         * exchanges of the embedding and of the LM head under SP */
        int bwd = KIND_BWD[s->kind];
        int on = m != CM_NONE && (bwd ? pol->bwd : pol->fwd);
        int embed = s->kind == SITE_EMBED_FWD || s->kind == SITE_EMBED_RS || s->kind == SITE_EMBED_RS_BWD;
        int head = s->kind == SITE_LMHEAD_BWD || s->kind == SITE_LMHEAD_AG || s->kind == SITE_LMHEAD_AG_BWD;
        if (embed && !pol->embed) on = 0;
        if (head && !pol->lm_head) on = 0;
        if (s->layer == 0 && pol->skip_first_layer) on = 0;
        if (s->layer == L - 1 && pol->skip_last_layer) on = 0;
        s->compressed = on;

        compress_params_default(&s->p, on ? m : EXACT_WIRE);
        if (on) {
            s->p.format = bwd ? pol->format_bwd : pol->format_fwd;
            if (pol->group_size > 0) s->p.group_size = pol->group_size;
            s->calibrating = pol->group_size == 0 && pol->calib_steps > 0 && compress_method_uses_groups(m);
            s->p.hadamard = pol->hadamard;
            s->p.adaptive_scale = pol->adaptive_scale;
            s->p.dual_scale = pol->dual_scale;
            s->p.delayed = pol->delayed;
            s->p.stochastic = pol->stochastic;
            s->p.seed = pol->seed;
            s->auto_pending = pol->auto_select;
        }
        s->rel_err = -1.0;
    }
}

static void auto_decide(Comm* c);

int comm_step_samples(const Comm* c) { return c->policy.stats_every > 0 && c->step % c->policy.stats_every == 0; }

void comm_step_begin(Comm* c, int step) {
    if (c->policy.auto_select) auto_decide(c);
    c->step = step;
    c->step_bytes = 0;
    c->step_ms = 0.0;
#ifdef OPS_BF16
    if (c->tp_size > 1) sites_dev_step_begin(c);
#endif
    for (int i = 0; i < c->nsites; i++) {
        CommSite* s = &c->sites[i];
        s->bytes = s->saturated = s->nonfinite = 0;
        s->rel_err = -1.0;
        s->calls = 0;
    }
}

/* ---- dumps: the raw local input of a site, as .npy (float32, rows x cols) --- */

static int site_selected(const char* list, const char* name) {
    if (strcmp(list, "all") == 0) return 1;
    size_t len = strlen(name);
    for (const char* p = list; (p = strstr(p, name)) != NULL; p += len) {
        int starts = p == list || p[-1] == ',';
        int ends = p[len] == '\0' || p[len] == ',';
        if (starts && ends) return 1;
    }
    return 0;
}

static void dump_npy(const char* path, const float* x, int rows, int cols) {
    char header[192];
    int hl = snprintf(header, sizeof(header), "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
    int total = 10 + hl + 1;                 /* magic(6) version(2) len(2) dict '\n' */
    int pad = (64 - total % 64) % 64;        /* the format wants 64-byte alignment */
    memset(header + hl, ' ', (size_t)pad);   /* the padding and the newline, written with the dict */
    header[hl + pad] = '\n';
    char tmp[800];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopenCheck(tmp, "wb");
    const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    unsigned short hlen = (unsigned short)(hl + pad + 1);
    fwriteCheck(magic, 1, 8, f, path);
    fwriteCheck(&hlen, 2, 1, f, path);
    fwriteCheck(header, 1, (size_t)(hl + pad + 1), f, path);
    fwriteCheck(x, sizeof(float), (size_t)rows * cols, f, path);
    fcloseCheck(f, path);
    if (rename(tmp, path) != 0) FATAL("cannot rename %s to %s", tmp, path);
}

/* ---- group-size calibration --------------------------------------------- */

static void calibrate_score(Comm* c, CommSite* s, const float* x, size_t n) {
    CompressParams p = s->p;
    uint8_t* wire = NULL;
    float* y = mallocCheck(n * sizeof(float));
    double nx = 0.0;
    for (size_t i = 0; i < n; i++) nx += (double)x[i] * x[i];
    for (int k = 0; k < SITE_NUM_CANDIDATES; k++) {
        p.group_size = CANDIDATE_G[k];
        p.stochastic = 0;
        wire = realloc(wire, compress_bound(&p, n));
        if (!wire) FATAL("out of memory in group-size calibration");
        size_t bytes = compress(&p, x, n, 0, wire, NULL);
        decompress(&p, wire, n, y);
        double ne = 0.0;
        for (size_t i = 0; i < n; i++) ne += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        double rel = nx > 0 ? sqrt(ne / nx) : 0.0;
        s->calib_score[k] += rel * (double)bytes / (double)n;
    }
    free(wire);
    free(y);
    (void)c;
}

static void calibrate_decide(Comm* c, CommSite* s) {
    double score[SITE_NUM_CANDIDATES];
    for (int k = 0; k < SITE_NUM_CANDIDATES; k++) score[k] = comm_sum_double(c->tp_comm, s->calib_score[k]);
    int best = 0;
    for (int k = 1; k < SITE_NUM_CANDIDATES; k++) if (score[k] < score[best]) best = k;
    s->p.group_size = CANDIDATE_G[best];
    s->calibrating = 0;
}

/* ---- the exchange ----------------------------------------------------------- */

static float hist_max(const CommSite* s, int phase) {
    float m = 0.0f;
    for (int i = 0; i < s->hist_len; i++) if (s->amax_hist[phase][i] > m) m = s->amax_hist[phase][i];
    return m;
}

#ifndef OPS_BF16 /* the GPU build pushes on the device (comm/stats_cuda.cu) */
static void hist_push(CommSite* s, float a_rs, float a_ag) {
    memmove(&s->amax_hist[0][1], &s->amax_hist[0][0], (SITE_HISTORY - 1) * sizeof(float));
    memmove(&s->amax_hist[1][1], &s->amax_hist[1][0], (SITE_HISTORY - 1) * sizeof(float));
    s->amax_hist[0][0] = a_rs;
    s->amax_hist[1][0] = a_ag;
    if (s->hist_len < SITE_HISTORY) s->hist_len++;
}
#endif

static double rel_error(const float* y, const float* ref, size_t n) {
    double ne = 0.0, nr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)y[i] - ref[i];
        ne += d * d;
        nr += (double)ref[i] * ref[i];
    }
    return nr > 0 ? sqrt(ne / nr) : sqrt(ne);
}

/* The fp32 host copy of an exchange's input, needed only for dumps,
 * calibration and error sampling (the GPU build exchanges on the device). */
static float* stage_to_host(Comm* c, const floatX* x, size_t n) {
    float* h = comm_host_buffer(c, n);
#ifdef OPS_BF16
    if (n > c->dev_cap) {
        ops_free(c->dev_f32);
        c->dev_cap = n;
        c->dev_f32 = ops_malloc(n * sizeof(float));
    }
    ops_X_to_f32(c->dev_f32, x, n);
    ops_to_host(h, c->dev_f32, n * sizeof(float));
#else
    memcpy(h, x, n * sizeof(float));
#endif
    return h;
}

/* The all-reduce itself: on host fp32 in place (CPU build), or on the device
 * bf16 tensor with the pipelined kernels of comm/collectives_cuda.c; two
 * phases (reduce-scatter with p_rs, all-gather with p_ag) or, with
 * comm.allreduce = one_shot, one (every rank's tensor compressed with p_rs,
 * gathered and summed). On the GPU the scale and the statistics are site
 * `site`'s on the device, and st gets the bytes only. */
static void allreduce(Comm* c, int site, const CompressParams* p_rs, const CompressParams* p_ag, floatX* x, size_t n,
                      uint64_t stream, CollStats* st) {
    /* comm.allreduce "auto" (policy.h): one phase while its extra bytes are few; the same choice on every rank */
    const double extra = (double)n * sizeof(floatX) * (c->tp_size - 1) * (c->tp_size - 2) / c->tp_size;
    const int one_shot = c->policy.one_shot == COMM_ALLREDUCE_AUTO ? extra <= (double)c->policy.one_shot_extra_bytes
                                                                   : c->policy.one_shot;
#ifdef OPS_BF16
    const uint64_t bytes = sites_dev_allreduce(c, site, one_shot, p_rs, p_ag, x, n, stream);
    if (st) st->bytes_sent += bytes;
#else
    (void)site;
    if (one_shot) coll_allreduce_one_shot(c->tp_comm, p_rs, x, n, stream, &c->scratch, st);
    else coll_allreduce(c->tp_comm, p_rs, p_ag, x, n, stream, &c->scratch, st);
#endif
}

/* One exchange of op of site `site` on backend memory: AR in place on out
 * (= in, n elements), RS of in[n] into out[n/P], AG of in[n/P] into out[n];
 * n = rows * cols of the full tensor. On the GPU the row exchanges keep
 * their scale and statistics on the device as the all-reduce does, and st
 * gets the bytes only. */
static void collective(Comm* c, int site, SiteOp op, const CompressParams* p_rs, const CompressParams* p_ag,
                       const floatX* in, floatX* out, int rows, int cols, uint64_t stream, CollStats* st) {
    const int K = c->policy.sp_chunks;
    if (op == OP_AR) {
        allreduce(c, site, p_rs, p_ag, out, (size_t)rows * cols, stream, st);
        return;
    }
#ifdef OPS_BF16
    const uint64_t bytes = sites_dev_rows(c, site, op == OP_RS, op == OP_RS ? p_rs : p_ag, in, out, rows, cols, 0, K,
                                          stream, NULL);
    if (st) st->bytes_sent += bytes;
#else
    if (op == OP_RS) sp_reduce_scatter_host(c->tp_comm, K, p_rs, in, out, rows, cols, 0, K, stream, &c->scratch, st);
    else sp_all_gather_host(c->tp_comm, K, p_ag, in, out, rows, cols, 0, K, stream, &c->scratch, st);
    (void)site;
#endif
}

/* the exact result of op on host fp32 copies: ref = op(h) */
static void collective_exact_host(Comm* c, SiteOp op, float* h, float* ref, int rows, int cols) {
    CompressParams exact;
    compress_params_default(&exact, CM_NONE);
    const size_t n = (size_t)rows * cols;
    if (op == OP_AR) {
        memcpy(ref, h, n * sizeof(float));
        coll_allreduce(c->tp_comm, &exact, &exact, ref, n, 0, &c->scratch, NULL);
    } else if (op == OP_RS) {
        sp_reduce_scatter_host(c->tp_comm, c->policy.sp_chunks, &exact, h, ref, rows, cols, 0, c->policy.sp_chunks, 0,
                               &c->scratch, NULL);
    } else {
        sp_all_gather_host(c->tp_comm, c->policy.sp_chunks, &exact, h, ref, rows, cols, 0, c->policy.sp_chunks, 0,
                           &c->scratch, NULL);
    }
}

/* ---- compress.method "auto" ------------------------------------------------
 * A candidate site's first auto_steps training calls are trials: the exact
 * exchange gives the result (so a trial step trains as the exact path
 * does), and the compressed one runs on a copy of the input, each timed
 * between a barrier and the end of its device work. The times are the
 * slowest rank's (what the step waits for), the best over the trials (the
 * first includes one-time setup); the error is the compressed result's
 * relative L2 distance to the exact one, the worst over the trials.
 * auto_decide then keeps the compressor where it is both fast enough and
 * faithful enough, on every rank alike. */

static double timed_collective(Comm* c, int site, SiteOp op, const CompressParams* p, const floatX* in, floatX* out,
                               int rows, int cols, uint64_t stream, CollStats* st) {
    ops_sync();
    wd_barrier(c->tp_comm, "auto trial (barrier)");
    double t0 = MPI_Wtime();
    collective(c, site, op, p, p, in, out, rows, cols, stream, st);
    ops_sync();
    return MPI_Wtime() - t0;
}

/* n_out: the output's elements; an all-reduce works in place, so its
 * compressed twin runs on a copy of the input taken first */
static void auto_trial(Comm* c, CommSite* s, int site, SiteOp op, const floatX* in, floatX* out, size_t n_out, int rows,
                       int cols, uint64_t stream, CollStats* st) {
    if (n_out > c->auto_cap) {
        ops_free(c->auto_x);
        c->auto_cap = n_out + n_out / 4;
        c->auto_x = ops_malloc(c->auto_cap * sizeof(floatX));
    }
    if (op == OP_AR) ops_copy(c->auto_x, in, n_out * sizeof(floatX));
    const floatX* in_c = op == OP_AR ? c->auto_x : in;
    CompressParams exact;
    compress_params_default(&exact, EXACT_WIRE);
    const double te = timed_collective(c, site, op, &exact, in, out, rows, cols, stream, st);
#ifdef OPS_BF16
    sites_dev_after(c, site, 1, 0); /* the exact run's statistics are the step's; the trial's are dropped */
#endif
    const double tc = timed_collective(c, site, op, &s->p, in_c, c->auto_x, rows, cols, stream, NULL);
#ifdef OPS_BF16
    sites_dev_after(c, site, 0, 0);
#endif
    memcpy(c->host_ref, stage_to_host(c, out, n_out), n_out * sizeof(float));
    const double err = rel_error(stage_to_host(c, c->auto_x, n_out), c->host_ref, n_out);
    if (s->auto_calls == 0 || te < s->auto_t_exact) s->auto_t_exact = te;
    if (s->auto_calls == 0 || tc < s->auto_t_comp) s->auto_t_comp = tc;
    if (s->auto_calls == 0 || !(err <= s->auto_err)) s->auto_err = err; /* a NaN error stays the worst */
    s->auto_calls++;
}

/* The sites whose trials are over get their choice, from the times and
 * errors maxed over the world: every rank, every DP group takes the same
 * decisions. Which sites are ready is the same on every rank (each trains
 * the same steps), so the collective runs on all of them or none. */
static void auto_decide(Comm* c) {
    int ready = 0;
    for (int i = 0; i < c->nsites; i++) ready |= c->sites[i].auto_pending && c->sites[i].auto_calls >= c->policy.auto_steps;
    if (!ready) return;
    double* v = mallocCheck(3 * sizeof(double) * (size_t)c->nsites);
    for (int i = 0; i < c->nsites; i++) {
        const CommSite* s = &c->sites[i];
        v[3 * i] = s->auto_t_exact;
        v[3 * i + 1] = s->auto_t_comp;
        v[3 * i + 2] = s->auto_err == s->auto_err ? s->auto_err : 1e300; /* NaN: the worst */
    }
    wd_allreduce(MPI_IN_PLACE, v, 3 * c->nsites, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "auto decision");
    int kept = 0, decided = 0;
    for (int i = 0; i < c->nsites; i++) {
        CommSite* s = &c->sites[i];
        if (!s->auto_pending || s->auto_calls < c->policy.auto_steps) continue;
        const double te = v[3 * i], tc = v[3 * i + 1], err = v[3 * i + 2];
        const int keep = tc > 0.0 && te >= c->policy.auto_min_speedup * tc && err <= c->policy.auto_max_err;
        if (c->world_rank == 0)
            printf("auto: %-12s %s %.3f ms, exact %.3f ms (%.2fx), rel_err %.3g -> %s\n", s->name,
                   compress_method_name(s->p.method), tc * 1e3, te * 1e3, tc > 0.0 ? te / tc : 0.0, err,
                   keep ? compress_method_name(s->p.method) : "exact");
        s->auto_pending = 0;
        s->auto_choice = keep ? 2 : 1;
        if (!keep) {
            s->compressed = 0;
            s->calibrating = 0;
            compress_params_default(&s->p, EXACT_WIRE);
        }
        kept += keep;
        decided++;
    }
    if (c->world_rank == 0)
        printf("auto: %d of %d sites compress (min speedup %.2f, max rel_err %.3g)\n", kept, decided,
               c->policy.auto_min_speedup, c->policy.auto_max_err);
    free(v);
}

/* ---- one exchange at a site, whole or in segments ----------------------------
 * site_begin takes the site's decisions (calibrated group size, delayed
 * scales, stream, what to record), site_run does the exchange at once,
 * site_end records it. An all-reduce works in place, so what is recorded of
 * its input is taken in site_begin; a reduce-scatter or all-gather leaves its
 * input alone, so that waits for site_end, when a segmented exchange has its
 * whole input (the reduce-scatter's comes one GEMM piece at a time). */

static size_t seg_n_in(const Comm* c, const TpSeg* x) {
    const size_t n = (size_t)x->rows * x->cols;
    return x->op == OP_AG ? n / (size_t)c->tp_size : n;
}
static size_t seg_n_out(const Comm* c, const TpSeg* x) {
    const size_t n = (size_t)x->rows * x->cols;
    return x->op == OP_RS ? n / (size_t)c->tp_size : n;
}

/* the dump, the calibration score and the exact reference of the error, from the input */
static void site_record_input(Comm* c, TpSeg* x) {
    if (!(x->dump || x->calibrate || x->sample)) return;
    CommSite* s = &c->sites[x->si];
    const size_t n_in = seg_n_in(c, x);
    float* h = stage_to_host(c, x->in, n_in);
    if (x->dump) {
        mkdir(c->policy.dump_dir, 0755);
        char path[700];
        snprintf(path, sizeof(path), "%s/%s.step%d.rank%d.npy", c->policy.dump_dir, s->name, c->step, c->world_rank);
        dump_npy(path, h, (int)(n_in / (size_t)x->cols), x->cols);
    }
    if (x->calibrate) calibrate_score(c, s, h, n_in);
    if (x->sample) collective_exact_host(c, (SiteOp)x->op, h, c->host_ref, x->rows, x->cols);
}

static void site_begin(Comm* c, TpSeg* x, SiteKind kind, int layer, const floatX* in, floatX* out, int rows, int cols) {
    memset(x, 0, sizeof(*x));
    const double t0 = MPI_Wtime();
    x->si = comm_site_index(c, kind, layer);
    x->op = (int)KIND_OP[kind];
    x->in = in;
    x->out = out;
    x->rows = rows;
    x->cols = cols;
    CommSite* s = &c->sites[x->si];
    wd_set_site(s->name);   /* what a watchdog report names; cleared in site_end */
    x->dump = c->train_mode && c->step == c->policy.dump_step && c->policy.dump_sites[0] && site_selected(c->policy.dump_sites, s->name);
    x->trial = c->train_mode && s->auto_pending; /* compress.method "auto": timed on both paths */
    x->sample = c->train_mode && s->compressed && !x->trial && comm_step_samples(c);
    if (s->calibrating && c->train_mode) {
        if (c->step < c->policy.calib_steps) x->calibrate = 1;
        else calibrate_decide(c, s);   /* before anything is compressed with the group size */
    }
    comm_host_buffer(c, (size_t)rows * cols);   /* room for input and output, before stage_to_host points into it */
    if (x->op == OP_AR) site_record_input(c, x);
    x->p_rs = s->p;
    x->p_ag = s->p;
    x->p_rs.delayed_amax = hist_max(s, 0); /* the GPU build's kernels read the device history instead */
    x->p_ag.delayed_amax = hist_max(s, 1);
    x->stream = ((uint64_t)c->step << 20) ^ ((uint64_t)x->si << 4) ^ (uint64_t)s->calls;
    x->K = x->op == OP_AR ? 1 : c->policy.sp_chunks;
    x->overlap = c->policy.overlap && x->op != OP_AR && !x->trial && x->K > 1;
    x->busy = MPI_Wtime() - t0;
}

/* GPU build: the start or the end of an exchange's work on stream cs (NULL:
 * the compute stream), for the device's exchange clock (comm_step_end) */
static void exchange_mark(Comm* c, void* cs) {
#ifdef OPS_BF16
    if (c->train_mode) sites_dev_mark(c, cs);
#else
    (void)c;
    (void)cs;
#endif
}

static void site_run(Comm* c, TpSeg* x) {
    exchange_mark(c, NULL);
    if (x->trial) auto_trial(c, &c->sites[x->si], x->si, (SiteOp)x->op, x->in, x->out, seg_n_out(c, x), x->rows,
                             x->cols, x->stream, &x->st);
    else collective(c, x->si, (SiteOp)x->op, &x->p_rs, &x->p_ag, x->in, x->out, x->rows, x->cols, x->stream, &x->st);
    exchange_mark(c, NULL);
}

static void site_end(Comm* c, TpSeg* x) {
    const double t0 = MPI_Wtime(); /* the CPU build's exchange clock (the GPU build's: exchange_mark) */
    (void)t0;
    CommSite* s = &c->sites[x->si];
    if (x->op != OP_AR) site_record_input(c, x);
    const int push = s->compressed && c->train_mode && !x->trial;
#ifdef OPS_BF16
    if (!x->trial) sites_dev_after(c, x->si, c->train_mode, push); /* (the compute stream follows the side's here) */
#else
    if (push) hist_push(s, x->st.amax_rs, x->st.amax_ag);
#endif
    if (x->sample) s->rel_err = rel_error(stage_to_host(c, x->out, seg_n_out(c, x)), c->host_ref, seg_n_out(c, x));
    if (c->train_mode) {
        s->bytes += x->st.bytes_sent;
        s->saturated += x->st.saturated; /* (GPU: 0 here; comm_sites_read brings the device's) */
        s->nonfinite += x->st.nonfinite;
        s->calls++;
        c->step_bytes += x->st.bytes_sent;
#ifndef OPS_BF16 /* the GPU build's exchange clock is on the device (exchange_mark) */
        c->step_ms += (x->busy + MPI_Wtime() - t0) * 1e3;   /* the time in the exchange's calls, not the GEMMs' between */
#endif
    }
    wd_set_site(NULL);
}

/* segment k of a segmented exchange, now (comm.overlap): on the host in the
 * CPU build; on the side stream in the GPU build, after the compute stream's
 * mark k (a reduce-scatter: its GEMM piece is written) or mark 0 (an
 * all-gather: its rows are) */
static void site_segment(Comm* c, TpSeg* x, int k) {
#ifdef OPS_BF16
    SpSide* sd = sp_side_get(&c->sp_side);
    sp_side_follow(sd, x->op == OP_RS ? k : 0, sd->side);
    exchange_mark(c, sd->side);
    x->st.bytes_sent += sites_dev_rows(c, x->si, x->op == OP_RS, x->op == OP_RS ? &x->p_rs : &x->p_ag, x->in, x->out,
                                       x->rows, x->cols, k, k + 1, x->stream, sd->side);
    exchange_mark(c, sd->side);
#else
    if (x->op == OP_RS)
        sp_reduce_scatter_host(c->tp_comm, x->K, &x->p_rs, x->in, x->out, x->rows, x->cols, k, k + 1, x->stream,
                               &c->scratch, &x->st);
    else
        sp_all_gather_host(c->tp_comm, x->K, &x->p_ag, x->in, x->out, x->rows, x->cols, k, k + 1, x->stream,
                           &c->scratch, &x->st);
#endif
}

/* GPU build, comm.overlap: mark i of the compute stream, for the side stream to follow */
static void compute_mark(Comm* c, int i) {
#ifdef OPS_BF16
    sp_side_mark(sp_side_get(&c->sp_side), i, (cudaStream_t)ops_cuda_stream());
#else
    (void)c;
    (void)i;
#endif
}

/* GPU build, comm.overlap: the compute stream waits for what the side stream has queued */
static void compute_follow_side(Comm* c) {
#ifdef OPS_BF16
    SpSide* sd = sp_side_get(&c->sp_side);
    sp_side_mark(sd, SP_SIDE_DONE, sd->side);
    sp_side_follow(sd, SP_SIDE_DONE, (cudaStream_t)ops_cuda_stream());
#else
    (void)c;
#endif
}

static void site_exchange(Comm* c, SiteKind kind, int layer, const floatX* in, floatX* out, int rows, int cols) {
    if (c->tp_size == 1) {
        if (in != out) ops_copy(out, in, (size_t)rows * cols * sizeof(floatX)); /* P = 1: local = full */
        return;
    }
    TpSeg x;
    site_begin(c, &x, kind, layer, in, out, rows, cols);
    const double t0 = MPI_Wtime();
    site_run(c, &x);
    x.busy += MPI_Wtime() - t0;
    site_end(c, &x);
}

void tp_exchange(Comm* c, SiteKind kind, int layer, floatX* x, int rows, int cols) {
    if (c->tp_size == 1) return;
    site_exchange(c, kind, layer, x, x, rows, cols);
}

void tp_reduce_scatter(Comm* c, SiteKind kind, int layer, const floatX* full, floatX* local, int rows, int cols) {
    site_exchange(c, kind, layer, full, local, rows, cols);
}

void tp_all_gather(Comm* c, SiteKind kind, int layer, const floatX* local, floatX* full, int rows, int cols) {
    site_exchange(c, kind, layer, local, full, rows, cols);
}

int tp_segments(const Comm* c) { return c->tp_size > 1 && c->policy.sp ? c->policy.sp_chunks : 1; }

void tp_rs_begin(Comm* c, TpSeg* x, SiteKind kind, int layer, const floatX* full, floatX* local, int rows, int cols) {
    site_begin(c, x, kind, layer, full, local, rows, cols);
}

void tp_rs_ready(Comm* c, TpSeg* x, int k) {
    if (x->overlap) compute_mark(c, k);
}

void tp_rs_post(Comm* c, TpSeg* x, int k) {
    const double t0 = MPI_Wtime();
    if (x->overlap) site_segment(c, x, k);
    x->busy += MPI_Wtime() - t0;
}

void tp_rs_end(Comm* c, TpSeg* x) {
    const double t0 = MPI_Wtime();
    if (x->overlap) compute_follow_side(c);
    else site_run(c, x);
    x->busy += MPI_Wtime() - t0;
    site_end(c, x);
}

void tp_ag_begin(Comm* c, TpSeg* x, SiteKind kind, int layer, const floatX* local, floatX* full, int rows, int cols) {
    site_begin(c, x, kind, layer, local, full, rows, cols);
    if (x->overlap) compute_mark(c, 0);
}

void tp_ag_wait(Comm* c, TpSeg* x, int k) {
    const double t0 = MPI_Wtime();
    if (x->overlap) {
        site_segment(c, x, k);
        compute_follow_side(c);
    } else if (k == 0) {
        site_run(c, x);
    }
    x->busy += MPI_Wtime() - t0;
}

void tp_ag_end(Comm* c, TpSeg* x) { site_end(c, x); }

void comm_sites_read(Comm* c) {
#ifdef OPS_BF16
    if (c->tp_size > 1 && c->nsites > 0) sites_dev_read(c);
#else
    (void)c;
#endif
}

void comm_step_end(Comm* c) {
#ifdef OPS_BF16
    if (c->tp_size > 1) c->step_ms = sites_dev_step_ms(c);
#else
    (void)c;
#endif
}

/* ---- logging and state ------------------------------------------------------ */

int comm_sites_json(const Comm* c, char* buf, size_t cap) {
    size_t w = 0;
#define PUT(...) do { int k_ = snprintf(buf + w, w < cap ? cap - w : 0, __VA_ARGS__); if (k_ > 0) w += (size_t)k_; } while (0)
    PUT("\"sites\":{");
    for (int i = 0; i < c->nsites; i++) {
        const CommSite* s = &c->sites[i];
        PUT("%s\"%s\":{\"method\":\"%s\",\"bytes\":%llu,\"saturated\":%llu", i ? "," : "", s->name,
            compress_method_name(s->p.method), (unsigned long long)s->bytes, (unsigned long long)s->saturated);
        if (s->compressed) PUT(",\"group_size\":%d", s->p.group_size);
        if (s->nonfinite) PUT(",\"nonfinite\":%llu", (unsigned long long)s->nonfinite);
        if (s->rel_err >= 0) PUT(",\"rel_err\":%.6g", s->rel_err);
        PUT("}");
    }
    PUT("}");
#undef PUT
    if (w >= cap) FATAL("site statistics do not fit the log line buffer (%zu bytes)", cap);
    return (int)w;
}

/* what a resume must restore: group size + calibration + amax history, and
 * the "auto" choice (0 in files of runs without it; a run resumed inside its
 * trials starts them again) */
typedef struct {
    int group_size, calibrating, hist_len, auto_choice;
    double calib_score[SITE_NUM_CANDIDATES];
    float amax_hist[2][SITE_HISTORY];
} SiteState;

size_t comm_state_bytes(const Comm* c) { return (size_t)c->nsites * sizeof(SiteState); }

size_t comm_state_bytes_other(const Comm* c) {
    return (size_t)(c->policy.sp ? 4 * c->L + 2 : 8 * c->L + 4) * sizeof(SiteState);
}

void comm_state_save(Comm* c, void* dst) {
    SiteState* out = dst;
#ifdef OPS_BF16
    SiteScaleDev* dev = c->tp_size > 1 ? mallocCheck(sizeof(SiteScaleDev) * (size_t)(c->nsites ? c->nsites : 1)) : NULL;
    if (dev) sites_dev_scale_get(c, dev);
    for (int i = 0; dev && i < c->nsites; i++) { /* the device holds the history of record, for every site */
        c->sites[i].hist_len = dev[i].hist_len;
        memcpy(c->sites[i].amax_hist, dev[i].amax_hist, sizeof(c->sites[i].amax_hist));
    }
    free(dev);
#endif
    for (int i = 0; i < c->nsites; i++) {
        const CommSite* s = &c->sites[i];
        memset(&out[i], 0, sizeof(SiteState));
        out[i].group_size = s->p.group_size;
        out[i].calibrating = s->calibrating;
        out[i].hist_len = s->hist_len;
        out[i].auto_choice = s->auto_choice;
        memcpy(out[i].calib_score, s->calib_score, sizeof(s->calib_score));
        memcpy(out[i].amax_hist, s->amax_hist, sizeof(s->amax_hist));
    }
}

static void site_state_load(CommSite* s, const SiteState* in, int with_history) {
    s->p.group_size = in->group_size;
    s->calibrating = in->calibrating;
    memcpy(s->calib_score, in->calib_score, sizeof(s->calib_score));
    if (s->auto_pending && in->auto_choice) { /* the choice of the run that wrote it */
        s->auto_pending = 0;
        s->auto_choice = in->auto_choice;
        if (s->auto_choice == 1) {
            s->compressed = 0;
            s->calibrating = 0;
            compress_params_default(&s->p, EXACT_WIRE);
        }
    }
    if (!with_history) return;
    s->hist_len = in->hist_len;
    memcpy(s->amax_hist, in->amax_hist, sizeof(s->amax_hist));
}

int comm_state_load(Comm* c, const void* src, size_t bytes) {
    const SiteState* in = src;
    const int other = bytes != comm_state_bytes(c);
    if (other && bytes != comm_state_bytes_other(c)) FATAL("site state of %zu bytes fits neither site layout", bytes);
    for (int i = 0; i < c->nsites; i++) {
        CommSite* s = &c->sites[i];
        if (!other) {
            site_state_load(s, &in[i], 1);
            continue;
        }
        /* a site that the other run did not compress sends its exact wire: keep this run's compressor */
        const SiteState* from = &in[site_index_in(!c->policy.sp, c->L, kind_in_other_layout(s->kind), s->layer)];
        if (s->compressed) site_state_load(s, from, 0);
    }
#ifdef OPS_BF16
    if (c->tp_size == 1) return other;
    /* every site's history to the device (the other layout's: none, so empty) */
    SiteScaleDev* dev = callocCheck((size_t)(c->nsites ? c->nsites : 1), sizeof(SiteScaleDev));
    for (int i = 0; i < c->nsites; i++) {
        const CommSite* s = &c->sites[i];
        dev[i].hist_len = s->hist_len;
        memcpy(dev[i].amax_hist, s->amax_hist, sizeof(s->amax_hist));
        dev[i].delayed[0] = hist_max(s, 0); /* what the next exchange predicts, as the host would */
        dev[i].delayed[1] = hist_max(s, 1);
    }
    sites_dev_scale_put(c, dev);
    free(dev);
#endif
    return other;
}
