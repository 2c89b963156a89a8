/*
 * tests/test_gpt.c - the whole tensor-parallel model against finite
 * differences, and TP=P against TP=1, in one process per rank.
 *
 * Run as `mpirun -np P build/test_gpt` for P = 1, 2, 4:
 *   1. TP equivalence: the loss and the global gradient norm of the model
 *      sharded over P ranks equal those of the unsharded model (TP=1 on each
 *      rank) within fp32 summation-order noise (rel 1e-5).
 *   2. Gradient check: for each of the 16 parameter tensors, the directional
 *      derivative g.d along a unit direction d equals the central difference
 *      (L(w + h d) - L(w - h d)) / 2h. d is drawn in the full model, then
 *      sliced, so every rank perturbs consistently: half the unit vector of
 *      the TP=1 gradient (so g.d is as large as it gets and the loss change
 *      stands far above fp32 noise), half a random unit vector (so an error
 *      orthogonal to the gradient shows too). The fp32 loss (~4) is
 *      quantised at ~2.4e-7, i.e. ~5e-6 of noise on the quotient at h = 0.05,
 *      and the O(h^2) truncation error is well under 1% here, so the check is
 *      |fd - g.d| <= 1e-2 |g.d| + 2e-5: a wrong or missing gradient term (an
 *      O(1) relative error) fails.
 * Both run with and without sequence parallelism (parallel.sp, 2 pieces
 * per rank, so a rank's rows are not contiguous), and for GPT-2 and Qwen2 (model/qwen2.c): with grouped-query
 * attention (n_kv_head < n_head) and an untied LM head at P = 1, 2 (the kv
 * heads must divide by P), and tied with 8 heads over 4 kv heads at P = 4.
 * Qwen2 uses h = 0.01: its residual stream starts as the 0.02-scale
 * embedding alone (no positions added), so RMSNorm's rescaling makes the
 * loss strongly curved along qkvw and oprojw; the truncation error there
 * was 4% at h = 0.05, 0.6% at 0.02, 0.2% at 0.01 (shrinking as h^2: the
 * gradient is right). At h = 0.01 the fp32 loss quantisation adds ~1.2e-5
 * to the quotient, inside the 2e-5 absolute term.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/sites.h"
#include "common/check.h"
#include "model/gpt.h"

static int failures = 0, rank = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; printf("[rank %d] FAIL %s:%d: ", rank, __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static unsigned long long rng = 88172645463325252ull;
static double uniform(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (rng >> 11) / 9007199254740992.0; }
static double gauss(void) { return sqrt(-2.0 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform()); }

static size_t full_size(const ParamLayout* pl) {
    size_t n = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) n += pl->full[t];
    return n;
}

static double loss_at(GPT* m, Comm* c, const float* full, const int* in, const int* tg) {
    float* copy = mallocCheck(full_size(&m->pl) * sizeof(float));
    memcpy(copy, full, full_size(&m->pl) * sizeof(float));
    gpt_set_params(m, copy);
    free(copy);
    return gpt_forward(m, c, in, tg);
}

/* rows of tensor t that matter: the padding rows of a vocab tensor never do */
static size_t real_elems(const ParamLayout* pl, int t) {
    int vocab = t == P_WTE || (pl->s.arch == ARCH_QWEN2 && t == Q_LMHEAD);
    return vocab && pl->full[t] ? (size_t)pl->s.V * pl->s.C : pl->full[t];
}

static void run_case(const char* label, GPTShape s, int P, double h, int sp) {
    CommPolicy pol; /* every site exact */
    comm_policy_default(&pol);
    const int B = 2, T = 8;
    pol.sp = sp;
    pol.sp_chunks = 2;   /* B T = 16 rows: 2 pieces per rank at P = 4, rows 3 pieces apart */
    pol.overlap = sp;    /* the exchanges piece by piece between the GEMMs */
    if (rank == 0) printf("%s%s\n", label, sp ? " (sequence parallel)" : "");
    Comm ctp, c1;
    comm_init(&ctp, P, 1);                      /* all ranks: one TP group */
    comm_setup_sites(&ctp, s.L, &pol);
    comm_init(&c1, 1, P);                       /* each rank alone: TP=1 */
    pol.sp = 0;
    comm_setup_sites(&c1, s.L, &pol);

    GPT m, m1;
    gpt_init(&m, s, P, rank, B, T, sp);
    gpt_init(&m1, s, 1, 0, B, T, 0);
    float* full = params_init_full(&m.pl, 5);
    /* make biases and LayerNorm parameters non-trivial so their paths are tested */
    size_t off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        int w2d = m.pl.decayed[t];
        for (size_t i = 0; i < m.pl.full[t]; i++) {
            if (!w2d) full[off + i] += 0.1f * (float)gauss();
            if (i >= real_elems(&m.pl, t)) full[off + i] = 0.0f;
        }
        off += m.pl.full[t];
    }
    int in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) { in[i] = (int)(uniform() * s.V); tg[i] = (int)(uniform() * s.V); }

    /* 1. TP equivalence of loss and gradient norm */
    double L = loss_at(&m, &ctp, full, in, tg);
    gpt_zero_grad(&m);
    gpt_backward(&m, &ctp);
    double gn = sqrt(comm_sum_double(ctp.tp_comm, gpt_grad_sumsq(&m, rank == 0)));
    double L1 = loss_at(&m1, &c1, full, in, tg);
    gpt_zero_grad(&m1);
    gpt_backward(&m1, &c1);
    double gn1 = sqrt(gpt_grad_sumsq(&m1, 1));
    CHECK(fabs(L - L1) <= 1e-5 * fabs(L1), "loss TP=%d %.9g vs TP=1 %.9g", P, L, L1);
    CHECK(fabs(gn - gn1) <= 1e-5 * gn1, "grad norm TP=%d %.9g vs TP=1 %.9g", P, gn, gn1);
    CHECK(fabs(L - log((double)s.V)) < 0.5, "initial loss %.4f near ln V = %.4f", L, log((double)s.V));

    /* 2. directional finite differences per tensor */
    float* g = mallocCheck(m.pl.total * sizeof(float));
    memcpy(g, m.grads, m.pl.total * sizeof(float));
    float* d = calloc(full_size(&m.pl), sizeof(float));
    float* dl = mallocCheck(m.pl.total * sizeof(float));
    float* w = mallocCheck(full_size(&m.pl) * sizeof(float));
    off = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        memset(d, 0, full_size(&m.pl) * sizeof(float));
        double nd = 0.0, ng = 0.0, nt = 0.0;
        size_t nrows = real_elems(&m.pl, t);                               /* padding rows never matter */
        if (nrows == 0) continue;                                          /* an unused slot */
        const float* g1 = m1.grads + off;                                  /* TP=1 layout == full layout */
        for (size_t i = 0; i < nrows; i++) { d[off + i] = (float)gauss(); nd += (double)d[off + i] * d[off + i]; ng += (double)g1[i] * g1[i]; }
        for (size_t i = 0; i < nrows; i++) {
            d[off + i] = (float)(d[off + i] / sqrt(nd) + (ng > 0 ? g1[i] / sqrt(ng) : 0.0));
            nt += (double)d[off + i] * d[off + i];
        }
        for (size_t i = 0; i < nrows; i++) d[off + i] = (float)(d[off + i] / sqrt(nt));
        params_copy_shard(&m.pl, d, dl, 1);
        double gd = 0.0;
        if (m.pl.sharded[t] || rank == 0) {
            for (size_t i = 0; i < m.pl.local[t]; i++) gd += (double)g[m.pl.offset[t] + i] * dl[m.pl.offset[t] + i];
        }
        gd = comm_sum_double(ctp.tp_comm, gd);
        for (size_t i = 0; i < full_size(&m.pl); i++) w[i] = full[i] + (float)h * d[i];
        double lp = loss_at(&m, &ctp, w, in, tg);
        for (size_t i = 0; i < full_size(&m.pl); i++) w[i] = full[i] - (float)h * d[i];
        double lm = loss_at(&m, &ctp, w, in, tg);
        double fd = (lp - lm) / (2 * h);
        CHECK(fabs(fd - gd) <= 1e-2 * fabs(gd) + 2e-5, "tensor %-8s g.d %.6g vs finite difference %.6g", params_tensor_name(&m.pl, t), gd, fd);
        if (rank == 0) printf("  %-8s g.d % .6e  fd % .6e\n", params_tensor_name(&m.pl, t), gd, fd);
        off += m.pl.full[t];
    }

    free(full); free(g); free(d); free(dl); free(w);
    gpt_free(&m);
    gpt_free(&m1);
    comm_free(&ctp);
    comm_free(&c1);
}

static GPTShape qwen2_shape(int P, int NH, int KV, int tied) {
    GPTShape s = gpt2_shape(16, 70, params_padded_vocab(70, P), 2, NH, 32);
    s.arch = ARCH_QWEN2;
    s.KV = KV;
    s.F = 48;           /* not a multiple of d_model: the widths come from d_ff */
    s.tied = tied;
    s.norm_eps = 1e-6f;
    s.rope_theta = 100.0f;   /* a small base: every rotation angle is large, so RoPE matters at T = 8 */
    return s;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    for (int sp = 0; sp <= (P > 1); sp++) {   /* parallel.sp: the same loss, norm and gradients */
        run_case("gpt2", gpt2_shape(16, 70, params_padded_vocab(70, P), 2, 4, 32), P, 0.05, sp);
        if (2 % P == 0) run_case("qwen2: n_head 4, n_kv_head 2, untied LM head", qwen2_shape(P, 4, 2, 0), P, 0.01, sp);
        run_case("qwen2: n_head 8, n_kv_head 4, tied LM head", qwen2_shape(P, 8, 4, 1), P, 0.01, sp);
    }
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("test_gpt (TP=%d): %s\n", P, total ? "FAILED" : "all passed");
    MPI_Finalize();
    return total ? 1 : 0;
}
