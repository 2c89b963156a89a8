/*
 * tests/test_ops.c - unit tests of the CPU backend (ops/ops_cpu.c) against
 * independent double-precision references: the memory ops, the embeddings,
 * the vocab-parallel cross-entropy, AdamW, the norms, determinism across
 * OpenMP thread counts, and the fused ops against their compositions. The ops whose backward is checked by finite
 * differences (layernorm, matmul, bias / residual / GELU, attention) are
 * tests/test_ops_grad.c's; tests/ops_testing.h has the shared checks and
 * tolerances.
 *
 * Each op is compared with a naive double reference written here from the
 * textbook formula (the backwards from their closed forms: scatter-add,
 * softmax - onehot). The test also pins the contract's semantics (overwrite
 * vs accumulate, NULL arguments, vocab-parallel slicing), and that results
 * are bit-identical for 1, 2 and 3 OpenMP threads. No MPI is needed: the
 * vocab-parallel all-reduces are simulated by combining slice outputs in the
 * test.
 *
 * Build and run: make build/test_ops && build/test_ops
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "ops/encoder_plan.h"
#include "ops/ops.h"
#include "tests/ops_testing.h"

/* ======================================================================== */
/* memory ops */

static void test_memory(void) {
    printf("memory ops (backend %s)\n", ops_backend_name());
    ops_init(0);
    size_t n = 1000;
    float* a = (float*)ops_malloc(n * sizeof(float));
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= a[i] == 0.0f;
    expect_true("ops_malloc returns zero-filled memory", zero);
    float* src = rand_floats(n, 1.0f);
    float* b = (float*)ops_malloc(n * sizeof(float));
    float* back = falloc(n);
    ops_from_host(a, src, n * sizeof(float));
    ops_copy(b, a, n * sizeof(float));
    ops_to_host(back, b, n * sizeof(float));
    expect_true("from_host -> copy -> to_host round-trips bit-exactly", memcmp(back, src, n * sizeof(float)) == 0);
    floatX* x = (floatX*)ops_malloc(n * sizeof(floatX));
    ops_f32_to_X(x, src, n);
    ops_X_to_f32(back, x, n);
    expect_true("f32_to_X -> X_to_f32 round-trips bit-exactly (fp32 build)", memcmp(back, src, n * sizeof(float)) == 0);
    ops_f32_to_X(back, back, n); /* aliasing is legal on the CPU build */
    expect_true("f32_to_X with dst == src leaves the data", memcmp(back, src, n * sizeof(float)) == 0);
    ops_zero(b, n * sizeof(float));
    zero = 1;
    for (size_t i = 0; i < n; i++) zero &= b[i] == 0.0f;
    expect_true("ops_zero clears", zero);
    ops_sync();
    ops_free(a);
    ops_free(b);
    ops_free(x);
    free(src);
    free(back);
}

/* ======================================================================== */
/* embedding */

/* encoder_backward as the model runs it: the host's plan of tok, then the op */
static void enc_bwd(float* dwte, const float* dout, const int* tok, int N, int C, int v0, int Vr) {
    int* plan = (int*)callocCheck(ENCODER_PLAN_INTS(N, Vr), sizeof(int));
    encoder_plan(plan, tok, N, v0, Vr);
    encoder_backward(dwte, dout, plan, N, C, Vr);
    free(plan);
}

/* the plan's layout (ops/encoder_plan.h), and the plan-driven backward against
 * the plain loop over n (the order it must reproduce), bit for bit */
static void test_encoder_plan(void) {
    const int tok[9] = {7, 3, 7, 12, 3, 7, 5, 30, 2}; /* slice [3, 13): 2 and 30 are another rank's */
    const int N = 9, v0 = 3, Vr = 10, U = encoder_plan_rows(N, Vr);
    int plan[ENCODER_PLAN_INTS(9, 10)];
    memset(plan, 0xff, sizeof(plan));
    encoder_plan(plan, tok, N, v0, Vr);
    const int *rows = plan + 1, *start = plan + 1 + U, *pos = plan + 2 + 2 * U;
    /* rows 0 (id 3: n 1, 4), 2 (id 5: n 6), 4 (id 7: n 0, 2, 5), 9 (id 12: n 3) */
    const int want_rows[4] = {0, 2, 4, 9}, want_start[5] = {0, 2, 3, 6, 7}, want_pos[7] = {1, 4, 6, 0, 2, 5, 3};
    int ok = plan[0] == 4 && memcmp(rows, want_rows, sizeof(want_rows)) == 0 &&
             memcmp(start, want_start, sizeof(want_start)) == 0 && memcmp(pos, want_pos, sizeof(want_pos)) == 0;
    expect_true("encoder_plan: rows ascending, positions ascending in a row, other slices left out", ok);
    const int C = 70;
    float* dout = rand_floats((size_t)N * C, 1.0f);
    float* got = rand_floats((size_t)Vr * C, 1.0f);
    float* want = falloc((size_t)Vr * C);
    memcpy(want, got, (size_t)Vr * C * sizeof(float));
    for (int n = 0; n < N; n++) {
        const int r = tok[n] - v0;
        if (r < 0 || r >= Vr) continue;
        for (int c = 0; c < C; c++) want[(size_t)r * C + c] += dout[(size_t)n * C + c];
    }
    encoder_backward(got, dout, plan, N, C, Vr);
    expect_true("encoder_backward by the plan == the loop over n, bit for bit",
                memcmp(got, want, (size_t)Vr * C * sizeof(float)) == 0);
    free(dout);
    free(got);
    free(want);
}

static void test_encoder(void) {
    printf("encoder (vocab-parallel) and position\n");
    const int N = 12, C = 10, Vp = 40;
    float* wte = rand_floats((size_t)Vp * C, 1.0f);
    int tok[12];
    for (int n = 0; n < N; n++) tok[n] = rng_int(Vp);
    tok[3] = tok[7] = tok[10] = 13; /* repeats: backward must add both */
    tok[0] = 0;
    tok[1] = Vp - 1;
    float* dout = rand_floats((size_t)N * C, 1.0f);

    /* full-table references */
    double* want_out = dalloc((size_t)N * C);
    double* want_dwte = dalloc((size_t)Vp * C);
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            want_out[(size_t)n * C + c] = wte[(size_t)tok[n] * C + c];
            want_dwte[(size_t)tok[n] * C + c] += dout[(size_t)n * C + c];
        }
    }

    for (int P = 1; P <= 4; P *= 2) {
        int Vr = Vp / P;
        float* sum = falloc((size_t)N * C);
        float* out = falloc((size_t)N * C);
        double* got_dwte = dalloc((size_t)Vp * C);
        int untouched = 1;
        for (int r = 0; r < P; r++) {
            int v0 = r * Vr;
            encoder_forward(out, tok, wte + (size_t)v0 * C, N, C, v0, Vr);
            for (size_t i = 0; i < (size_t)N * C; i++) sum[i] += out[i]; /* the all-reduce */
            /* the slice's dwte sits between guard rows that must stay untouched */
            size_t G = (size_t)C;
            float* buf = ffill((size_t)Vr * C + 2 * G, 7.0f);
            float* dwte = buf + G;
            memset(dwte, 0, (size_t)Vr * C * sizeof(float));
            enc_bwd(dwte, dout, tok, N, C, v0, Vr);
            for (size_t i = 0; i < G; i++) untouched &= buf[i] == 7.0f && buf[G + (size_t)Vr * C + i] == 7.0f;
            for (size_t i = 0; i < (size_t)Vr * C; i++) got_dwte[(size_t)v0 * C + i] = dwte[i];
            free(buf);
        }
        char what[96];
        float* got = falloc((size_t)Vp * C);
        for (size_t i = 0; i < (size_t)Vp * C; i++) got[i] = (float)got_dwte[i];
        snprintf(what, sizeof what, "encoder fwd, P=%d slices summed == full lookup", P);
        expect(what, rel_err(sum, want_out, (size_t)N * C), 0.0); /* one non-zero term: exact */
        snprintf(what, sizeof what, "encoder bwd, P=%d slices == full scatter-add", P);
        expect(what, rel_err(got, want_dwte, (size_t)Vp * C), TOL_FWD);
        snprintf(what, sizeof what, "encoder bwd, P=%d writes only inside its slice", P);
        expect_true(what, untouched);
        free(sum);
        free(out);
        free(got);
        free(got_dwte);
    }
    /* accumulate: a second call doubles dwte */
    float* dwte = falloc((size_t)Vp * C);
    enc_bwd(dwte, dout, tok, N, C, 0, Vp);
    enc_bwd(dwte, dout, tok, N, C, 0, Vp);
    double* want2 = dalloc((size_t)Vp * C);
    for (size_t i = 0; i < (size_t)Vp * C; i++) want2[i] = 2.0 * want_dwte[i];
    expect("encoder bwd accumulates (called twice == 2x)", rel_err(dwte, want2, (size_t)Vp * C), TOL_FWD);

    /* position embedding */
    const int B = 3, T = 4;
    float* x = rand_floats((size_t)B * T * C, 1.0f);
    float* wpe = rand_floats((size_t)T * C, 1.0f);
    double* want = dcopy(x, (size_t)B * T * C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) want[((size_t)b * T + t) * C + c] += wpe[(size_t)t * C + c];
    position_forward(x, wpe, B, T, C);
    expect("position fwd: x += wpe[t]", rel_err(x, want, (size_t)B * T * C), TOL_FWD);
    float* dx = rand_floats((size_t)B * T * C, 1.0f);
    float* dwpe = ffill((size_t)T * C, 0.5f); /* non-zero start: must accumulate */
    double* wdwpe = dalloc((size_t)T * C);
    for (size_t i = 0; i < (size_t)T * C; i++) wdwpe[i] = 0.5;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) wdwpe[(size_t)t * C + c] += dx[((size_t)b * T + t) * C + c];
    position_backward(dwpe, dx, B, T, C);
    expect("position bwd: dwpe += sum_b dx (accumulates)", rel_err(dwpe, wdwpe, (size_t)T * C), TOL_FWD);

    free(wte); free(dout); free(want_out); free(want_dwte); free(dwte); free(want2);
    free(x); free(wpe); free(want); free(dx); free(dwpe); free(wdwpe);
}

/* ======================================================================== */
/* vocab-parallel cross-entropy */

static void test_crossentropy_case(int N, int V, int Vp, int P, const int* targets) {
    char what[112];
    int Vr = Vp / P;
    float dloss = 1.0f / N;
    float* logits = rand_floats((size_t)N * Vp, 4.0f);
    /* padding logits larger than every real one: any leak into the max, the
     * sum or the gradient shows */
    /* rows shifted far up and down: exp overflows or underflows to 0 unless
     * the max over the real columns is subtracted first */
    for (int v = 0; v < Vp; v++) {
        logits[(size_t)1 * Vp + v] += 120.0f;
        logits[(size_t)2 * Vp + v] -= 120.0f;
    }
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) logits[(size_t)n * Vp + v] = 50.0f;

    /* reference: full-vocab log-softmax in double */
    double* wloss = dalloc((size_t)N);
    double* wgrad = dalloc((size_t)N * Vp);
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        double mx = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        for (int v = 0; v < V; v++) sum += exp(l[v] - mx);
        wloss[n] = -(l[targets[n]] - mx - log(sum));
        for (int v = 0; v < V; v++)
            wgrad[(size_t)n * Vp + v] = (exp(l[v] - mx) / sum - (v == targets[n])) * dloss;
    }

    /* each slice runs the three calls; the test plays the all-reduces */
    float** slice = (float**)mallocCheck((size_t)P * sizeof(float*));
    float* mx = ffill((size_t)N, -INFINITY);
    float* stats = falloc((size_t)2 * N);
    float* part_mx = falloc((size_t)N);
    float* part_stats = falloc((size_t)2 * N);
    for (int r = 0; r < P; r++) {
        slice[r] = falloc((size_t)N * Vr);
        for (int n = 0; n < N; n++)
            memcpy(slice[r] + (size_t)n * Vr, logits + (size_t)n * Vp + (size_t)r * Vr, (size_t)Vr * sizeof(float));
        crossentropy_max(part_mx, slice[r], N, Vr, r * Vr, V);
        for (int n = 0; n < N; n++) mx[n] = part_mx[n] > mx[n] ? part_mx[n] : mx[n]; /* MAX */
    }
    for (int r = 0; r < P; r++) {
        crossentropy_stats(part_stats, slice[r], mx, targets, N, Vr, r * Vr, V);
        for (int i = 0; i < 2 * N; i++) stats[i] += part_stats[i]; /* SUM */
    }
    double loss_err = 0.0, grad_err = 0.0;
    int pad_zero = 1;
    float* losses = falloc((size_t)N);
    float* got = falloc((size_t)N * Vp);
    for (int r = 0; r < P; r++) {
        crossentropy_backward(slice[r], losses, mx, stats, targets, N, Vr, r * Vr, V, dloss);
        loss_err = fmax(loss_err, rel_err(losses, wloss, (size_t)N)); /* every slice gets the loss */
        for (int n = 0; n < N; n++)
            for (int j = 0; j < Vr; j++) {
                int v = r * Vr + j;
                got[(size_t)n * Vp + v] = slice[r][(size_t)n * Vr + j];
                if (v >= V) pad_zero &= slice[r][(size_t)n * Vr + j] == 0.0f;
            }
    }
    grad_err = rel_err(got, wgrad, (size_t)N * Vp);
    snprintf(what, sizeof what, "crossentropy V=%d Vp=%d P=%d: losses vs double log-softmax", V, Vp, P);
    expect(what, loss_err, TOL_LOSS);
    snprintf(what, sizeof what, "crossentropy V=%d Vp=%d P=%d: dlogits vs (softmax - onehot)*dloss", V, Vp, P);
    expect(what, grad_err, TOL_GRAD);
    snprintf(what, sizeof what, "crossentropy V=%d Vp=%d P=%d: padding columns get exactly 0", V, Vp, P);
    expect_true(what, pad_zero);

    for (int r = 0; r < P; r++) free(slice[r]);
    free(slice); free(mx); free(stats); free(part_mx); free(part_stats); free(losses); free(got);
    free(logits); free(wloss); free(wgrad);
}

static void test_crossentropy(void) {
    printf("vocab-parallel cross-entropy\n");
    /* targets in every slice of P = 4 (slices of 10: [0,10) [10,20) [20,30)
     * [30,40)), on slice edges, and the last real id 36 */
    int targets[8] = {0, 9, 10, 19, 25, 30, 36, 5};
    for (int P = 1; P <= 4; P *= 2) test_crossentropy_case(8, 37, 40, P, targets);
    /* V = 25 leaves slice 3 of P = 4 all padding: its max is -inf and it must
     * add nothing (and no NaN) */
    int targets2[8] = {0, 24, 10, 19, 20, 3, 24, 12};
    test_crossentropy_case(8, 25, 40, 4, targets2);
}

/* ======================================================================== */
/* AdamW */

static void test_adamw(void) {
    printf("adamw\n");
    const size_t n = 6;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float* master = rand_floats(n, 1.0f);
    float* param = falloc(n);
    float* m = falloc(n);
    float* v = falloc(n);
    float* g1 = rand_floats(n, 1.0f);
    float* g2 = rand_floats(n, 1.0f);
    double* wm = dalloc(n);
    double* wv = dalloc(n);
    double* ww = dcopy(master, n);
    StepScalars st = {.lr = lr, .scale = gs};
    for (int t = 1; t <= 2; t++) {
        const float* g = t == 1 ? g1 : g2;
        st.bc1 = 1.0f - powf(b1, (float)t);
        st.bc2 = 1.0f - powf(b2, (float)t);
        adamw_update(master, param, g, m, v, n, &st, b1, b2, eps, wd);
        /* hand-written reference: Loshchilov & Hutter's AdamW */
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            wm[i] = b1 * wm[i] + (1.0 - b1) * gi;
            wv[i] = b2 * wv[i] + (1.0 - b2) * gi * gi;
            double mhat = wm[i] / (1.0 - pow(b1, t)), vhat = wv[i] / (1.0 - pow(b2, t));
            ww[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * ww[i]);
        }
        char what[96];
        snprintf(what, sizeof what, "adamw step %d: master", t);
        expect(what, rel_err(master, ww, n), TOL_FWD);
        snprintf(what, sizeof what, "adamw step %d: m, v", t);
        expect(what, fmax(rel_err(m, wm, n), rel_err(v, wv, n)), TOL_FWD);
        snprintf(what, sizeof what, "adamw step %d: param == master", t);
        expect_true(what, memcmp(param, master, n * sizeof(float)) == 0);
    }
    /* decoupled decay: with a zero gradient the adaptive term is 0 and the
     * step is exactly w *= (1 - lr*wd). (L2-in-the-gradient Adam would instead
     * move each weight by ~lr, normalised by sqrt(vhat).) Param aliases master. */
    float* w = rand_floats(n, 1.0f);
    float* zero = falloc(n);
    float* m0 = falloc(n);
    float* v0 = falloc(n);
    double* want = dalloc(n);
    for (size_t i = 0; i < n; i++) want[i] = w[i] * (1.0 - (double)lr * wd);
    StepScalars st1 = {.lr = lr, .bc1 = 1.0f - b1, .bc2 = 1.0f - b2, .scale = 1.0f};
    adamw_update(w, w, zero, m0, v0, n, &st1, b1, b2, eps, wd);
    expect("adamw zero grad: w *= 1 - lr*wd (decoupled), param aliases master", rel_err(w, want, n), TOL_FWD);
    /* skip (a non-finite loss or norm): nothing moves, the moments neither */
    float* before = falloc(n);
    memcpy(before, master, n * sizeof(float));
    float m_before = m[0];
    st.skip = 1;
    adamw_update(master, param, g1, m, v, n, &st, b1, b2, eps, wd);
    expect_true("adamw with skip leaves weights and moments", memcmp(before, master, n * sizeof(float)) == 0 &&
                m[0] == m_before);
    free(before);

    free(master); free(param); free(m); free(v); free(g1); free(g2); free(wm); free(wv); free(ww);
    free(w); free(zero); free(m0); free(v0); free(want);

    /* adamw_update_tensors: each tensor as adamw_update alone with its own
     * decay (bit for bit), the gaps between them untouched */
    const size_t L = 40, toff[3] = {1, 12, 30}, tn[3] = {9, 15, 6};
    const float twd[3] = {0.1f, 0.0f, 0.3f};
    float* bufs[2][5];
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 5; j++) bufs[b][j] = falloc(L);
    float* init = rand_floats(4 * L, 1.0f);
    for (int b = 0; b < 2; b++) {
        memcpy(bufs[b][0], init, L * sizeof(float));          /* master */
        memcpy(bufs[b][1], init, L * sizeof(float));          /* param */
        memcpy(bufs[b][2], init + L, L * sizeof(float));      /* grad */
        memcpy(bufs[b][3], init + 2 * L, L * sizeof(float));  /* m */
        for (size_t i = 0; i < L; i++) bufs[b][4][i] = fabsf(init[3 * L + i]); /* v */
    }
    st.skip = 0;
    for (int k = 0; k < 3; k++) {
        float** B = bufs[0];
        adamw_update(B[0] + toff[k], B[1] + toff[k], B[2] + toff[k], B[3] + toff[k], B[4] + toff[k], tn[k], &st, b1,
                     b2, eps, twd[k]);
    }
    adamw_update_tensors(bufs[1][0], bufs[1][1], bufs[1][2], bufs[1][3], bufs[1][4], 3, toff, tn, twd, &st, b1, b2,
                         eps);
    int same = 1, moved = 0;
    for (int j = 0; j < 5; j++) same &= memcmp(bufs[0][j], bufs[1][j], L * sizeof(float)) == 0;
    for (size_t i = 0; i < L; i++) moved += bufs[1][0][i] != init[i];
    expect_true("adamw_update_tensors == adamw_update per tensor, bit for bit", same);
    expect_true("adamw_update_tensors moves the 30 elements inside, not the 10 outside", moved == 30);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 5; j++) free(bufs[b][j]);
    free(init);
}

/* ======================================================================== */
/* norms */

static void test_norms(void) {
    printf("sumsq, sum, all_finite\n");
    size_t n = 200003; /* several 65536-chunks and a ragged tail */
    float* x = rand_floats(n, 1.0f);
    long double s = 0.0L, s2 = 0.0L;
    for (size_t i = 0; i < n; i++) { s += x[i]; s2 += (long double)x[i] * x[i]; }
    /* double accumulation of 2e5 terms: ~1e-12 relative; 1e-10 is loose */
    expect("ops_sumsq vs long double", fabs(ops_sumsq(x, n) - (double)s2) / (double)s2, 1e-10);
    expect("ops_sum vs long double", fabs(ops_sum(x, n) - (double)s) / fabs((double)s), 1e-10);
    expect_true("ops_sumsq of n = 0 is 0", ops_sumsq(x, 0) == 0.0);
    expect_true("ops_all_finite on finite data", ops_all_finite(x, n) == 1);
    x[n - 1] = NAN;
    expect_true("ops_all_finite sees a NaN in the last element", ops_all_finite(x, n) == 0);
    x[n - 1] = 0.0f;
    x[70000] = -INFINITY;
    expect_true("ops_all_finite sees -inf", ops_all_finite(x, n) == 0);
    x[70000] = 0.5f;
    /* the queued forms: the same sums into backend memory */
    double acc = 1.5;
    ops_sumsq_acc(&acc, x, n);
    expect_true("ops_sumsq_acc adds ops_sumsq to what is there", acc == 1.5 + ops_sumsq(x, n));
    float mean = 0.0f;
    ops_mean(&mean, x, n);
    expect_true("ops_mean == (float)(ops_sum / n)", mean == (float)(ops_sum(x, n) / (double)n));
    free(x);
    /* the step's norm, clip scale and skip (train/main.c's arithmetic) */
    StepScalars st = {.loss = 2.0f, .sumsq = 16.0};
    ops_grad_clip(&st, 1.0f);
    expect_true("ops_grad_clip: norm 4 clipped to 1: scale 0.25", st.norm == 4.0f && st.scale == 0.25f && !st.skip);
    ops_grad_clip(&st, 8.0f);
    expect_true("ops_grad_clip: norm 4 under 8: scale 1", st.scale == 1.0f && !st.skip);
    ops_grad_clip(&st, 0.0f);
    expect_true("ops_grad_clip: grad_clip 0 is off", st.scale == 1.0f && !st.skip);
    st.loss = NAN;
    ops_grad_clip(&st, 1.0f);
    expect_true("ops_grad_clip: a NaN loss sets skip", st.skip == 1);
    st.loss = 2.0f;
    st.sumsq = INFINITY;
    ops_grad_clip(&st, 1.0f);
    expect_true("ops_grad_clip: an infinite norm sets skip", st.skip == 1 && isinf(st.norm));
}

/* ======================================================================== */
/* determinism across thread counts */

static void test_determinism(void) {
    printf("determinism across OpenMP thread counts\n");
    int saved = omp_get_max_threads();
    const int N = 67, IC = 96, OC = 80;
    const int B = 2, T = 33, NH = 3, hs = 16;
    size_t C3 = (size_t)3 * NH * hs, Co = (size_t)NH * hs;
    float* x = rand_floats((size_t)N * IC, 1.0f);
    float* w = rand_floats((size_t)OC * IC, 1.0f);
    float* dout = rand_floats((size_t)N * OC, 1.0f);
    float* qkv = rand_floats((size_t)B * T * C3, 2.0f);
    float* datt = rand_floats((size_t)B * T * Co, 1.0f);
    float* lnw = rand_floats((size_t)IC, 1.0f);
    int tok[67];
    for (int i = 0; i < N; i++) tok[i] = rng_int(5); /* many repeats */

    /* outputs per thread count: [0] with 1 thread, [1] with 2, [2] with 3 */
    float *mm_out[3], *mm_dinp[3], *mm_dw[3], *mm_db[3], *att_out[3], *att_lse[3], *att_d[3];
    float *ln_dinp[3], *ln_dw[3], *enc_dw[3];
    double sumsq[3];
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(k + 1);
        mm_out[k] = falloc((size_t)N * OC);
        mm_dinp[k] = falloc((size_t)N * IC);
        mm_dw[k] = ffill((size_t)OC * IC, 0.25f);
        mm_db[k] = falloc((size_t)OC);
        matmul_forward(mm_out[k], x, w, NULL, N, IC, OC);
        matmul_backward(mm_dinp[k], mm_dw[k], mm_db[k], dout, x, w, N, IC, OC);
        att_out[k] = falloc((size_t)B * T * Co);
        att_lse[k] = falloc((size_t)B * NH * T);
        att_d[k] = falloc((size_t)B * T * C3);
        attention_forward(att_out[k], att_lse[k], qkv, B, T, NH, hs);
        attention_backward(att_d[k], datt, qkv, att_out[k], att_lse[k], B, T, NH, hs);
        float* lnout = falloc((size_t)N * IC);
        float* mean = falloc((size_t)N);
        float* rstd = falloc((size_t)N);
        ln_dinp[k] = falloc((size_t)N * IC);
        ln_dw[k] = falloc((size_t)IC);
        float* lndb = falloc((size_t)IC);
        layernorm_forward(lnout, mean, rstd, x, lnw, lnw, N, IC);
        layernorm_backward(ln_dinp[k], ln_dw[k], lndb, NULL, x, x, lnw, mean, rstd, N, IC);
        enc_dw[k] = falloc((size_t)5 * IC);
        enc_bwd(enc_dw[k], x, tok, N, IC, 0, 5);
        sumsq[k] = ops_sumsq(x, (size_t)N * IC);
        free(lnout); free(mean); free(rstd); free(lndb);
    }
    omp_set_num_threads(saved);
#define SAME(arr, n) (memcmp(arr[0], arr[1], (n) * sizeof(float)) == 0 && memcmp(arr[0], arr[2], (n) * sizeof(float)) == 0)
    expect_true("matmul_forward bit-identical with 1, 2, 3 threads", SAME(mm_out, (size_t)N * OC));
    expect_true("matmul_backward dinp, dw, dbias bit-identical with 1, 2, 3 threads",
                SAME(mm_dinp, (size_t)N * IC) && SAME(mm_dw, (size_t)OC * IC) && SAME(mm_db, (size_t)OC));
    expect_true("attention_forward out, lse bit-identical with 1, 2, 3 threads",
                SAME(att_out, (size_t)B * T * Co) && SAME(att_lse, (size_t)B * NH * T));
    expect_true("attention_backward dqkv bit-identical with 1, 2, 3 threads", SAME(att_d, (size_t)B * T * C3));
    expect_true("layernorm_backward dinp, dw bit-identical with 1, 2, 3 threads",
                SAME(ln_dinp, (size_t)N * IC) && SAME(ln_dw, (size_t)IC));
    expect_true("encoder_backward bit-identical with 1, 2, 3 threads", SAME(enc_dw, (size_t)5 * IC));
    expect_true("ops_sumsq bit-identical with 1, 2, 3 threads", sumsq[0] == sumsq[1] && sumsq[0] == sumsq[2]);
#undef SAME
    for (int k = 0; k < 3; k++) {
        free(mm_out[k]); free(mm_dinp[k]); free(mm_dw[k]); free(mm_db[k]);
        free(att_out[k]); free(att_lse[k]); free(att_d[k]); free(ln_dinp[k]); free(ln_dw[k]); free(enc_dw[k]);
    }
    free(x); free(w); free(dout); free(qkv); free(datt); free(lnw);
}

/* The fused ops of ops.h are, on this backend, the compositions ops.h
 * writes beside them: the same bits, which the trainer's CPU results (and
 * the checkpoints and parity runs compared bit for bit) rely on. */
static void test_fused(void) {
    printf("fused ops == their compositions, bit for bit\n");
    const int N = 37, C = 40, F = 4 * C;
    float* x = rand_floats((size_t)N * C, 1.0f);
    float* y = rand_floats((size_t)N * C, 0.5f);
    float* bias = rand_floats((size_t)C, 0.1f);
    float* w = rand_floats((size_t)C, 1.0f);
    float* b = rand_floats((size_t)C, 0.5f);
    /* bias + residual + layernorm */
    float *res = falloc((size_t)N * C), *out = falloc((size_t)N * C), *mean = falloc(N), *rstd = falloc(N);
    float *res2 = falloc((size_t)N * C), *out2 = falloc((size_t)N * C), *mean2 = falloc(N), *rstd2 = falloc(N);
    float* ycopy = falloc((size_t)N * C);
    memcpy(ycopy, y, (size_t)N * C * sizeof(float));
    residual_layernorm_forward(res, out, mean, rstd, x, y, bias, w, b, N, C);
    expect_true("residual_layernorm_forward leaves y as it is", memcmp(y, ycopy, (size_t)N * C * sizeof(float)) == 0);
    bias_forward(ycopy, bias, N, C);
    residual_forward(res2, x, ycopy, (size_t)N * C);
    layernorm_forward(out2, mean2, rstd2, res2, w, b, N, C);
    expect_true("residual_layernorm_forward == bias_forward + residual_forward + layernorm_forward",
                memcmp(res, res2, (size_t)N * C * 4) == 0 && memcmp(out, out2, (size_t)N * C * 4) == 0 &&
                    memcmp(mean, mean2, (size_t)N * 4) == 0 && memcmp(rstd, rstd2, (size_t)N * 4) == 0);
    /* fc + GELU, and fcproj's backward through GELU */
    float* fcw = rand_floats((size_t)F * C, 0.2f);
    float* fcb = rand_floats((size_t)F, 0.1f);
    float *h = falloc((size_t)N * F), *pre = falloc((size_t)N * F), *h2 = falloc((size_t)N * F), *pre2 = falloc((size_t)N * F);
    matmul_gelu_forward(h, pre, x, fcw, fcb, N, C, F);
    matmul_forward(pre2, x, fcw, fcb, N, C, F);
    gelu_forward(h2, pre2, (size_t)N * F);
    expect_true("matmul_gelu_forward == matmul_forward + gelu_forward",
                memcmp(h, h2, (size_t)N * F * 4) == 0 && memcmp(pre, pre2, (size_t)N * F * 4) == 0);
    float* pw = rand_floats((size_t)C * F, 0.1f); /* fcproj: [C, F] */
    float *din = falloc((size_t)N * F), *din2 = falloc((size_t)N * F), *dtmp = falloc((size_t)N * F);
    float *dw = ffill((size_t)C * F, 0.25f), *dw2 = ffill((size_t)C * F, 0.25f);
    float *db = ffill((size_t)C, 0.5f), *db2 = ffill((size_t)C, 0.5f);
    gelu_matmul_backward(din, dw, db, y, h, pw, pre, N, F, C);
    matmul_backward(dtmp, dw2, db2, y, h, pw, N, F, C);
    gelu_backward(din2, pre, dtmp, (size_t)N * F);
    expect_true("gelu_matmul_backward == matmul_backward + gelu_backward",
                memcmp(din, din2, (size_t)N * F * 4) == 0 && memcmp(dw, dw2, (size_t)C * F * 4) == 0 &&
                    memcmp(db, db2, (size_t)C * 4) == 0);
    float* ptrs[] = {x, y, bias, w, b, res, out, mean, rstd, res2, out2, mean2, rstd2, ycopy, fcw, fcb, h, pre, h2, pre2,
                     pw, din, din2, dtmp, dw, dw2, db, db2};
    for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) free(ptrs[i]);
}

int main(void) {
    printf("test_ops: CPU backend vs double references (%d OpenMP threads)\n", omp_get_max_threads());
    test_memory();
    test_encoder();
    test_encoder_plan();
    test_crossentropy();
    test_adamw();
    test_norms();
    test_determinism();
    test_fused();
    return checks_verdict();
}
