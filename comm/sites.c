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
 * (comm/sites_dev.h): an exchange is queued and never waited for; the host
 * reads the statistics when it logs them (comm_sites_read).
 *
 * Sites: embed.fwd, L<l>.attn.fwd, L<l>.mlp.fwd, L<l>.attn.bwd, L<l>.mlp.bwd,
 * lm_head.bwd.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm/sites.h"
#include "comm/watchdog.h"
#include "common/check.h"
#include "compress/methods.h"
#ifdef OPS_BF16
#include "comm/sites_dev.h"
#endif

static const int CANDIDATE_G[SITE_NUM_CANDIDATES] = {16, 32, 64, 128, 256};
static const char* KIND_NAME[SITE_KINDS] = {"embed.fwd", "attn.fwd", "mlp.fwd", "attn.bwd", "mlp.bwd", "lm_head.bwd"};

int comm_site_index(const Comm* c, SiteKind kind, int layer) {
    switch (kind) {
    case SITE_EMBED_FWD: return 0;
    case SITE_LMHEAD_BWD: return 1 + 4 * c->L;
    default: return 1 + 4 * layer + ((int)kind - (int)SITE_ATTN_FWD);
    }
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
    c->nsites = 4 * L + 2;
    c->sites = callocCheck((size_t)c->nsites, sizeof(CommSite));

    const CompressMethod m = pol->method;
    for (int i = 0; i < c->nsites; i++) {
        CommSite* s = &c->sites[i];
        if (i == 0) { s->kind = SITE_EMBED_FWD; s->layer = -1; }
        else if (i == c->nsites - 1) { s->kind = SITE_LMHEAD_BWD; s->layer = -1; }
        else { s->kind = (SiteKind)(SITE_ATTN_FWD + (i - 1) % 4); s->layer = (i - 1) / 4; }
        if (s->layer >= 0) snprintf(s->name, sizeof(s->name), "L%d.%s", s->layer, KIND_NAME[s->kind]);
        else snprintf(s->name, sizeof(s->name), "%s", KIND_NAME[s->kind]);

        /* the per-site policy */
        int bwd = s->kind == SITE_ATTN_BWD || s->kind == SITE_MLP_BWD || s->kind == SITE_LMHEAD_BWD;
        int on = m != CM_NONE && (bwd ? pol->bwd : pol->fwd);
        if (s->kind == SITE_EMBED_FWD && !pol->embed) on = 0;
        if (s->kind == SITE_LMHEAD_BWD && !pol->lm_head) on = 0;
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

static double timed_allreduce(Comm* c, int site, const CompressParams* p, floatX* x, size_t n, uint64_t stream,
                              CollStats* st) {
    ops_sync();
    wd_barrier(c->tp_comm, "auto trial (barrier)");
    double t0 = MPI_Wtime();
    allreduce(c, site, p, p, x, n, stream, st);
    ops_sync();
    return MPI_Wtime() - t0;
}

static void auto_trial(Comm* c, CommSite* s, int site, floatX* x, size_t n, uint64_t stream, CollStats* st) {
    if (n > c->auto_cap) {
        ops_free(c->auto_x);
        c->auto_cap = n + n / 4;
        c->auto_x = ops_malloc(c->auto_cap * sizeof(floatX));
    }
    ops_copy(c->auto_x, x, n * sizeof(floatX));
    CompressParams exact;
    compress_params_default(&exact, EXACT_WIRE);
    const double te = timed_allreduce(c, site, &exact, x, n, stream, st);
#ifdef OPS_BF16
    sites_dev_after(c, site, 1, 0); /* the exact run's statistics are the step's; the trial's are dropped */
#endif
    const double tc = timed_allreduce(c, site, &s->p, c->auto_x, n, stream, NULL);
#ifdef OPS_BF16
    sites_dev_after(c, site, 0, 0);
#endif
    memcpy(c->host_ref, stage_to_host(c, x, n), n * sizeof(float));
    const double err = rel_error(stage_to_host(c, c->auto_x, n), c->host_ref, n);
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

void tp_exchange(Comm* c, SiteKind kind, int layer, floatX* x, int rows, int cols) {
    if (c->tp_size == 1) return;
#ifndef OPS_BF16
    double t0 = MPI_Wtime();
#endif
    const int si = comm_site_index(c, kind, layer);
    CommSite* s = &c->sites[si];
#ifdef OPS_BF16
    if (c->train_mode) sites_dev_mark(c); /* the exchange's time is measured on the device */
#endif
    size_t n = (size_t)rows * cols;
    wd_set_site(s->name);   /* what a watchdog report names; cleared below */

    int dump = c->train_mode && c->step == c->policy.dump_step && c->policy.dump_sites[0] && site_selected(c->policy.dump_sites, s->name);
    int calibrate = s->calibrating && c->train_mode;
    int trial = c->train_mode && s->auto_pending; /* compress.method "auto": timed on both paths */
    int sample = c->train_mode && s->compressed && !trial && c->policy.stats_every > 0 && c->step % c->policy.stats_every == 0;
    float* h = (dump || calibrate || sample) ? stage_to_host(c, x, n) : NULL;

    if (dump) {
        mkdir(c->policy.dump_dir, 0755);
        char path[700];
        snprintf(path, sizeof(path), "%s/%s.step%d.rank%d.npy", c->policy.dump_dir, s->name, c->step, c->world_rank);
        dump_npy(path, h, rows, cols);
    }
    if (calibrate) {
        if (c->step < c->policy.calib_steps) calibrate_score(c, s, h, n);
        else calibrate_decide(c, s);
    }
    if (sample) {   /* the exact result, to measure this exchange's error against */
        CompressParams exact;
        compress_params_default(&exact, CM_NONE);
        memcpy(c->host_ref, h, n * sizeof(float));
        coll_allreduce(c->tp_comm, &exact, &exact, c->host_ref, n, 0, &c->scratch, NULL);
    }

    CompressParams p_rs = s->p, p_ag = s->p;
    p_rs.delayed_amax = hist_max(s, 0); /* the GPU build's kernels read the device history instead */
    p_ag.delayed_amax = hist_max(s, 1);
    CollStats st = {0};
    uint64_t stream = ((uint64_t)c->step << 20) ^ ((uint64_t)si << 4) ^ (uint64_t)s->calls;
    const int push = s->compressed && c->train_mode && !trial;
    if (trial) auto_trial(c, s, si, x, n, stream, &st);
    else allreduce(c, si, &p_rs, &p_ag, x, n, stream, &st);
#ifdef OPS_BF16
    if (!trial) sites_dev_after(c, si, c->train_mode, push);
#else
    if (push) hist_push(s, st.amax_rs, st.amax_ag);
#endif
    if (sample) s->rel_err = rel_error(stage_to_host(c, x, n), c->host_ref, n);

    if (c->train_mode) {
        s->bytes += st.bytes_sent;
        s->saturated += st.saturated; /* (GPU: 0 here; comm_sites_read brings the device's) */
        s->nonfinite += st.nonfinite;
        s->calls++;
        c->step_bytes += st.bytes_sent;
#ifdef OPS_BF16
        sites_dev_mark(c);
#else
        c->step_ms += (MPI_Wtime() - t0) * 1e3;
#endif
    }
    wd_set_site(NULL);
}

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

void comm_state_save(Comm* c, void* dst) {
    SiteState* out = dst;
#ifdef OPS_BF16
    SiteScaleDev* dev = c->tp_size > 1 ? mallocCheck(sizeof(SiteScaleDev) * (size_t)(c->nsites ? c->nsites : 1)) : NULL;
    if (dev) sites_dev_scale_get(c, dev);
    for (int i = 0; dev && i < c->nsites; i++) { /* the device holds the history of record */
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

void comm_state_load(Comm* c, const void* src) {
    const SiteState* in = src;
    for (int i = 0; i < c->nsites; i++) {
        CommSite* s = &c->sites[i];
        s->p.group_size = in[i].group_size;
        s->calibrating = in[i].calibrating;
        s->hist_len = in[i].hist_len;
        memcpy(s->calib_score, in[i].calib_score, sizeof(s->calib_score));
        if (s->auto_pending && in[i].auto_choice) { /* the choice of the run that wrote it */
            s->auto_pending = 0;
            s->auto_choice = in[i].auto_choice;
            if (s->auto_choice == 1) {
                s->compressed = 0;
                s->calibrating = 0;
                compress_params_default(&s->p, EXACT_WIRE);
            }
        }
        memcpy(s->amax_hist, in[i].amax_hist, sizeof(s->amax_hist));
    }
#ifdef OPS_BF16
    if (c->tp_size == 1) return;
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
}
