/*
 * tests/test_ops_gpu_qwen2.cu - the CUDA ops that Qwen2 adds (RMSNorm,
 * rotate-half RoPE, SwiGLU) against the fp32 CPU ops of ops/ops_cpu_qwen2.c,
 * by the method of tests/test_ops_gpu.cu (whose main runs these groups, and
 * whose test_attention covers grouped-query attention): bf16-representable
 * inputs seen alike by both sides, relative error over the whole output
 * against the named tolerances of tests/ops_gpu_testing.h, NaN-poisoned
 * outputs where an op overwrites, increments where it accumulates,
 * bit-identical reruns where a reduction crosses rows.
 *
 * Shapes: Qwen2-like widths (C = 896 of Qwen2-0.5B, hs 64 and 128, kv heads
 * fewer than query heads, theta 1e6) and awkward ones (odd N, C and F not
 * multiples of 8 -> scalar paths, hs/2 odd -> RoPE's one-element path).
 */
#include "tests/ops_gpu_testing.h"

static void test_rmsnorm(int N, int C, float eps) {
    char what[96];
    snprintf(what, sizeof what, "N=%d C=%d eps=%g", N, C, (double)eps);
    size_t n = (size_t)N * C;
    /* rows of different scales, as a residual stream has */
    vecf x(n);
    for (int r = 0; r < N; r++) {
        float sd = 0.1f + rng_unif() * 4.0f;
        for (int c = 0; c < C; c++) x[(size_t)r * C + c] = round_bf(sd * rng_normal());
    }
    vecf w = randn_bf(C);
    for (int c = 0; c < C; c++) w[c] = round_bf(1.0f + 0.2f * w[c]);
    vecf cout(n), crstd(N);
    cpu_rmsnorm_forward(cout.data(), crstd.data(), x.data(), w.data(), N, C, eps);
    floatX *dx = dev_bf(x), *dw = dev_bf(w);
    floatX* dout = (floatX*)ops_malloc(n * 2);
    float* drstd = (float*)ops_malloc(N * 4);
    poison_bf(dout, n);
    poison_f32(drstd, N);
    rmsnorm_forward(dout, drstd, dx, dw, N, C, eps);
    check("rmsnorm_forward", what, get_bf(dout, n), cout, TOL_EW);
    check("rmsnorm_forward", "  rstd", get_f32(drstd, N), crstd, TOL_F32);

    /* backward from the reference's rstd; dinp and dw accumulate (run twice) */
    vecf g = randn_bf(n), dinit = randn_bf(n), dwinit = randn_f32(C);
    vecf cdinp = dinit, cdw = dwinit;
    for (int k = 0; k < 2; k++)
        cpu_rmsnorm_backward(cdinp.data(), cdw.data(), g.data(), x.data(), w.data(), crstd.data(), N, C);
    floatX* dg = dev_bf(g);
    ops_from_host(drstd, crstd.data(), N * 4);
    floatX* ddinp = dev_bf(dinit);
    float* ddw = dev_f32(dwinit);
    for (int k = 0; k < 2; k++) rmsnorm_backward(ddinp, ddw, dg, dx, dw, drstd, N, C);
    norm_backward_finish();
    /* dinp: two bf16 roundings of a running sum, measured on the increment */
    check_inc("rmsnorm_backward", "  dinp (accumulated x2)", get_bf(ddinp, n), cdinp, dinit, TOL_RED);
    check_inc("rmsnorm_backward", "  dw (accumulated x2)", get_f32(ddw, C), cdw, dwinit, TOL_F32);
    floatX* ddinp2 = dev_bf(dinit);
    float* ddw2 = dev_f32(dwinit);
    for (int k = 0; k < 2; k++) rmsnorm_backward(ddinp2, ddw2, dg, dx, dw, drstd, N, C);
    norm_backward_finish();
    check_bits("rmsnorm_backward", "determinism: dw", get_bytes(ddw, C * 4), get_bytes(ddw2, C * 4));
    check_bits("rmsnorm_backward", "determinism: dinp", get_bytes(ddinp, n * 2), get_bytes(ddinp2, n * 2));
    free_all({ddinp2, ddw2, ddinp, ddw, dg, drstd, dout, dw, dx});
}

/* RoPE on a qkv-like buffer: rows of ld = (NH + 2 KV) hs, rotated over the
 * first nh = NH + KV heads (q and k), the v columns past them untouched. */
static void test_rope(int B, int T, int NH, int KV, int hs, float theta) {
    char what[96];
    snprintf(what, sizeof what, "B=%d T=%d NH=%d KV=%d hs=%d theta=%g", B, T, NH, KV, hs, (double)theta);
    const int ld = (NH + 2 * KV) * hs, nh = NH + KV;
    const size_t n = (size_t)B * T * ld;
    vecf x = randn_bf(n);
    floatX* dx = dev_bf(x);
    for (int dir = 0; dir < 2; dir++) {
        const char* op = dir ? "rope_backward" : "rope_forward";
        vecf cx = x;
        if (dir) cpu_rope_backward(cx.data(), B, T, ld, nh, hs, theta);
        else cpu_rope_forward(cx.data(), B, T, ld, nh, hs, theta);
        floatX* d = dev_bf(x);
        if (dir) rope_backward(d, B, T, ld, nh, hs, theta);
        else rope_forward(d, B, T, ld, nh, hs, theta);
        vecf gx = get_bf(d, n);
        /* the rotated part: one bf16 rounding of the same fp32 rotation (the angles are the CPU's bits) */
        vecf gr, cr, gv, xv;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int i = 0; i < ld; i++) {
                size_t k = r * ld + i;
                if (i < nh * hs) {
                    gr.push_back(gx[k]);
                    cr.push_back(cx[k]);
                } else {
                    gv.push_back(gx[k]);
                    xv.push_back(x[k]);
                }
            }
        check(op, what, gr, cr, TOL_EW);
        check(op, "  v columns untouched", gv, xv, TOL_EXACT);
        ops_free(d);
    }
    /* the backward is the inverse rotation: backward(forward(x)) = x up to two roundings */
    rope_forward(dx, B, T, ld, nh, hs, theta);
    rope_backward(dx, B, T, ld, nh, hs, theta);
    check("rope_backward", "  inverts rope_forward", get_bf(dx, n), x, 2 * TOL_EW);
    ops_free(dx);
}

static void test_swiglu(int N, int F) {
    char what[96];
    snprintf(what, sizeof what, "N=%d F=%d", N, F);
    const size_t nout = (size_t)N * F, ngu = 2 * nout;
    vecf gu = randn_bf(ngu, 2.0f), g = randn_bf(nout);
    vecf cout(nout), cdgu(ngu);
    cpu_swiglu_forward(cout.data(), gu.data(), N, F);
    cpu_swiglu_backward(cdgu.data(), gu.data(), g.data(), N, F);
    floatX *dgu_in = dev_bf(gu), *dg = dev_bf(g);
    floatX* dout = (floatX*)ops_malloc(nout * 2);
    floatX* ddgu = (floatX*)ops_malloc(ngu * 2);
    poison_bf(dout, nout);
    poison_bf(ddgu, ngu);
    swiglu_forward(dout, dgu_in, N, F);
    swiglu_backward(ddgu, dgu_in, dg, N, F);
    check("swiglu_forward", what, get_bf(dout, nout), cout, TOL_EW);
    vecf gd = get_bf(ddgu, ngu);
    /* the gate and up halves separately: a swapped half shows */
    for (int half = 0; half < 2; half++) {
        vecf gp, cp;
        for (int r = 0; r < N; r++)
            for (int i = 0; i < F; i++) {
                size_t k = (size_t)r * 2 * F + (size_t)half * F + i;
                gp.push_back(gd[k]);
                cp.push_back(cdgu[k]);
            }
        check("swiglu_backward", half ? "  dup (overwritten)" : "  dgate (overwritten)", gp, cp, TOL_EW);
    }
    free_all({ddgu, dout, dg, dgu_in});
}

void test_ops_gpu_qwen2(const char* only) {
#define GROUP(name) if (!only || strstr(name, only))
    GROUP("rmsnorm") {
        test_rmsnorm(37, 896, 1e-6f);  /* Qwen2-0.5B width, odd N: the guarded backward */
        test_rmsnorm(300, 768, 1e-6f); /* whole 256-column chunks: the unguarded backward, 3 groups of colsum_deferred */
        test_rmsnorm(64, 1536, 1e-6f); /* Qwen2-1.5B width, 6 chunks per lane: the wide kernels */
        test_rmsnorm(19, 36, 1e-5f);   /* scalar path */
    }
    GROUP("rope") {
        test_rope(2, 77, 4, 2, 64, 1e6f);    /* T not a multiple of anything, theta of Qwen2 */
        test_rope(1, 33, 2, 1, 128, 10000.0f);
        test_rope(2, 5, 3, 3, 6, 10000.0f);  /* hs/2 = 3: one element per thread */
    }
    GROUP("swiglu") {
        test_swiglu(37, 4864 / 8);   /* a TP=8 slice of Qwen2-0.5B's d_ff */
        test_swiglu(5, 37);          /* F % 8 != 0: scalar path */
    }
#undef GROUP
}
