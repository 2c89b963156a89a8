/*
 * tests/test_ops_gpu.cu - every op of the CUDA backend against the fp32 CPU
 * reference (ops/ops_cpu.c and ops/ops_cpu_qwen2.c linked in as cpu_F, see
 * tests/ops_ref.h), on the same random inputs. The ops Qwen2 adds are in
 * tests/test_ops_gpu_qwen2.cu, AdamW, the step's scalars and the CUDA graph
 * calls in tests/test_ops_gpu_step.cu (same binary), the helpers in
 * tests/ops_gpu_testing.h.
 *
 * Method (the library's device/METHOD.md):
 *   - inputs are random fp32 rounded to bf16 first, so both backends see
 *     exactly the same values; the CPU then computes in fp32 throughout;
 *   - error = ||gpu - cpu|| / ||cpu|| over the whole output, against a
 *     tolerance justified by bf16 below; NaN never passes;
 *   - outputs that an op overwrites are poisoned with NaN before the GPU run,
 *     so an element the kernel failed to write shows up as NaN (reported as
 *     "unwritten");
 *   - outputs that an op accumulates into start from random values and the
 *     op runs twice; the error is measured on the increment (after - before),
 *     which is what the op computed;
 *   - determinism: ops with cross-row reductions run twice from identical
 *     state and must give bit-identical results;
 *   - shapes: GPT-2-like (C = 768) and awkward ones (N not a multiple of any
 *     tile, C not a multiple of 8 -> scalar paths, vocab slices with padding;
 *     for the norms, every kind of kernel of ops/layernorm_kernels.cuh and
 *     grids that cut colsum_deferred's groups unevenly).
 *
 * Tolerances: tests/ops_gpu_testing.h (TOL_*), with their reasons.
 *
 * Prints one table row per check; exits 1 if any check fails.
 *   test_ops_gpu [group]    only the groups whose name contains `group`
 *                           (memory encoder position layernorm matmul
 *                           elementwise fused attention crossentropy adamw
 *                           norms step graph rmsnorm rope swiglu)
 * The same source also runs on the CPU against the emulated backend
 * (tests/emu/emu.mk), which is how it was checked before any GPU run.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/encoder_plan.h"
#include "tests/ops_gpu_testing.h"

/* ======================================================================================= */

static void test_memory() {
    const size_t n = (1 << 20) + 3;
    float* d = (float*)ops_malloc(n * 4);
    vecf h = get_f32(d, n);
    size_t nz = 0;
    for (float x : h) nz += (x != 0.0f);
    report("ops_malloc", "zero-filled (1M+3 floats)", (double)nz, TOL_EXACT, nz ? "non-zero bytes" : nullptr);

    vecf src = randn_f32(n);
    float* a = dev_f32(src);
    ops_copy(d, a, n * 4);
    check("ops_copy", "device to device, 1M+3 floats", get_f32(d, n), src, TOL_EXACT);
    ops_zero(d, n * 4);
    h = get_f32(d, n);
    nz = 0;
    for (float x : h) nz += (x != 0.0f);
    report("ops_zero", "1M+3 floats", (double)nz, TOL_EXACT, nullptr);

    /* f32 -> bf16: round to nearest even, bit-exact with the host rounding,
     * including ties, subnormals, infinities; aligned and unaligned */
    vecf v = randn_f32(10007, 3.0f);
    v[0] = 1.0f + 1.0f / 256.0f;             /* a tie: rounds to even (1.0) */
    v[1] = 1.0f + 3.0f / 256.0f;             /* a tie: rounds up */
    v[2] = 1e-40f;                           /* subnormal */
    v[3] = INFINITY;
    v[4] = -INFINITY;
    v[5] = 3.3895314e38f;                    /* near max: rounds to inf */
    float* dv = dev_f32(v);
    for (int off = 0; off < 2; off++) {
        size_t m = v.size() - off;
        floatX* x = (floatX*)ops_malloc(v.size() * 2);
        poison_bf(x, v.size());
        ops_f32_to_X(x + off, dv + off, m);
        std::vector<uint8_t> got = get_bytes(x + off, m * 2);
        std::vector<uint16_t> want(m);
        for (size_t i = 0; i < m; i++) want[i] = bf16_from_f32(v[i + off]);
        std::vector<uint8_t> wb(m * 2);
        memcpy(wb.data(), want.data(), m * 2);
        check_bits("ops_f32_to_X", off ? "RNE, unaligned (scalar path)" : "RNE vs host, ties/subnormal/inf", got, wb);
        /* and back: bf16 -> f32 is exact */
        float* back = (float*)ops_malloc(v.size() * 4);
        poison_f32(back, v.size());
        ops_X_to_f32(back + off, x + off, m);
        vecf b = get_f32(back + off, m);
        vecf w(m);
        for (size_t i = 0; i < m; i++) w[i] = bf16_to_f32(want[i]);
        size_t bad = 0;
        for (size_t i = 0; i < m; i++) bad += memcmp(&b[i], &w[i], 4) != 0;
        report("ops_X_to_f32", off ? "exact, unaligned" : "exact", (double)bad, TOL_EXACT, bad ? "mismatching values" : nullptr);
        ops_free(x);
        ops_free(back);
    }
    ops_free(dv);
    ops_free(a);
    ops_free(d);
}

static void test_encoder(int N, int C, int Vr, int v0, int idrange) {
    char what[96];
    std::vector<int> tok(N);
    for (int n = 0; n < N; n++) tok[n] = rng_int(idrange); /* some outside [v0, v0+Vr) */
    vecf wte = randn_bf((size_t)Vr * C);
    int* dtok = dev_int(tok);
    floatX* dwte = dev_bf(wte);
    /* forward: a copy, so exact */
    vecf cout((size_t)N * C);
    cpu_encoder_forward(cout.data(), tok.data(), wte.data(), N, C, v0, Vr);
    floatX* dout = (floatX*)ops_malloc((size_t)N * C * 2);
    poison_bf(dout, (size_t)N * C);
    encoder_forward(dout, dtok, dwte, N, C, v0, Vr);
    snprintf(what, sizeof what, "N=%d C=%d Vr=%d v0=%d", N, C, Vr, v0);
    check("encoder_forward", what, get_bf(dout, (size_t)N * C), cout, TOL_EXACT);

    /* backward: accumulate twice; the GPU adds in the reference's order, so
     * even the fp32 sums are exact. Both walk the host's plan of the ids
     * (ops/encoder_plan.h), as the model stages it with the batch. */
    std::vector<int> plan(ENCODER_PLAN_INTS(N, Vr));
    encoder_plan(plan.data(), tok.data(), N, v0, Vr);
    int* dplan = dev_int(plan);
    vecf g = randn_bf((size_t)N * C);
    floatX* dg = dev_bf(g);
    vecf init = randn_f32((size_t)Vr * C);
    vecf cdw = init;
    cpu_encoder_backward(cdw.data(), g.data(), plan.data(), N, C, Vr);
    cpu_encoder_backward(cdw.data(), g.data(), plan.data(), N, C, Vr);
    float* ddw = dev_f32(init);
    encoder_backward(ddw, dg, dplan, N, C, Vr);
    encoder_backward(ddw, dg, dplan, N, C, Vr);
    check_inc("encoder_backward", what, get_f32(ddw, (size_t)Vr * C), cdw, init, TOL_EXACT);
    /* determinism from the same state */
    float* ddw2 = dev_f32(init);
    encoder_backward(ddw2, dg, dplan, N, C, Vr);
    encoder_backward(ddw2, dg, dplan, N, C, Vr);
    check_bits("encoder_backward", "determinism: two runs", get_bytes(ddw, (size_t)Vr * C * 4),
               get_bytes(ddw2, (size_t)Vr * C * 4));
    ops_free(ddw2);
    ops_free(ddw);
    ops_free(dg);
    ops_free(dplan);
    ops_free(dout);
    ops_free(dwte);
    ops_free(dtok);
}

static void test_position(int B, int T, int C) {
    char what[96];
    snprintf(what, sizeof what, "B=%d T=%d C=%d", B, T, C);
    size_t n = (size_t)B * T * C;
    vecf x = randn_bf(n), wpe = randn_bf((size_t)T * C);
    vecf cx = x;
    cpu_position_forward(cx.data(), wpe.data(), B, T, C);
    floatX* dx = dev_bf(x);
    floatX* dw = dev_bf(wpe);
    position_forward(dx, dw, B, T, C);
    check("position_forward", what, get_bf(dx, n), cx, TOL_EW);

    vecf g = randn_bf(n);
    floatX* dg = dev_bf(g);
    vecf init = randn_f32((size_t)T * C);
    vecf cdw = init;
    cpu_position_backward(cdw.data(), g.data(), B, T, C);
    cpu_position_backward(cdw.data(), g.data(), B, T, C);
    float* ddw = dev_f32(init);
    position_backward(ddw, dg, B, T, C);
    position_backward(ddw, dg, B, T, C);
    check_inc("position_backward", what, get_f32(ddw, (size_t)T * C), cdw, init, TOL_EXACT);
    ops_free(ddw);
    ops_free(dg);
    ops_free(dw);
    ops_free(dx);
}

static void test_layernorm(int N, int C) {
    char what[96];
    snprintf(what, sizeof what, "N=%d C=%d", N, C);
    size_t n = (size_t)N * C;
    /* rows with an offset and a spread, as residual streams have */
    vecf x(n);
    for (int r = 0; r < N; r++) {
        float mu = 2.0f * rng_normal(), sd = 0.5f + rng_unif() * 3.0f;
        for (int c = 0; c < C; c++) x[(size_t)r * C + c] = round_bf(mu + sd * rng_normal());
    }
    vecf w = randn_bf(C), b = randn_bf(C, 0.5f);
    for (int c = 0; c < C; c++) w[c] = round_bf(1.0f + 0.2f * w[c]);
    vecf cout(n), cmean(N), crstd(N);
    cpu_layernorm_forward(cout.data(), cmean.data(), crstd.data(), x.data(), w.data(), b.data(), N, C);
    floatX *dx = dev_bf(x), *dw = dev_bf(w), *db = dev_bf(b);
    floatX* dout = (floatX*)ops_malloc(n * 2);
    float* dmean = (float*)ops_malloc(N * 4);
    float* drstd = (float*)ops_malloc(N * 4);
    poison_bf(dout, n);
    poison_f32(dmean, N);
    poison_f32(drstd, N);
    layernorm_forward(dout, dmean, drstd, dx, dw, db, N, C);
    check("layernorm_forward", what, get_bf(dout, n), cout, TOL_EW);
    check("layernorm_forward", "  mean", get_f32(dmean, N), cmean, TOL_F32);
    check("layernorm_forward", "  rstd", get_f32(drstd, N), crstd, TOL_F32);

    /* backward: both sides from the reference's mean/rstd; dinp accumulates */
    vecf g = randn_bf(n);
    vecf dinit = randn_bf(n);
    vecf dwinit = randn_f32(C), dbinit = randn_f32(C);
    vecf cdinp = dinit, cdw = dwinit, cdb = dbinit;
    cpu_layernorm_backward(cdinp.data(), cdw.data(), cdb.data(), nullptr, g.data(), x.data(), w.data(), cmean.data(),
                           crstd.data(), N, C);
    cpu_layernorm_backward(cdinp.data(), cdw.data(), cdb.data(), nullptr, g.data(), x.data(), w.data(), cmean.data(),
                           crstd.data(), N, C);
    floatX* dg = dev_bf(g);
    ops_from_host(dmean, cmean.data(), N * 4);
    ops_from_host(drstd, crstd.data(), N * 4);
    floatX* ddinp = dev_bf(dinit);
    float *ddw = dev_f32(dwinit), *ddb = dev_f32(dbinit);
    /* dsum: the column sums of dinp as each call leaves it (bf16), added up in double */
    vecf dsinit = randn_f32(C);
    float* dds = dev_f32(dsinit);
    std::vector<double> ref_ds(dsinit.begin(), dsinit.end());
    for (int call = 0; call < 2; call++) {
        layernorm_backward(ddinp, ddw, ddb, dds, dg, dx, dw, dmean, drstd, N, C);
        const vecf now = get_bf(ddinp, n);
        for (size_t i = 0; i < n; i++) ref_ds[i % C] += now[i];
    }
    norm_backward_finish();
    /* dinp: two bf16 roundings of a running sum, measured on the increment */
    check_inc("layernorm_backward", "  dinp (accumulated x2)", get_bf(ddinp, n), cdinp, dinit, TOL_RED);
    check_inc("layernorm_backward", "  dw (accumulated x2)", get_f32(ddw, C), cdw, dwinit, TOL_F32);
    check_inc("layernorm_backward", "  db (accumulated x2)", get_f32(ddb, C), cdb, dbinit, TOL_F32);
    check_inc("layernorm_backward", "  dsum: colsum of dinp (x2)", get_f32(dds, C), vecf(ref_ds.begin(), ref_ds.end()),
              dsinit, TOL_F32);
    /* determinism */
    floatX* ddinp2 = dev_bf(dinit);
    float *ddw2 = dev_f32(dwinit), *ddb2 = dev_f32(dbinit), *dds2 = dev_f32(dsinit);
    layernorm_backward(ddinp2, ddw2, ddb2, dds2, dg, dx, dw, dmean, drstd, N, C);
    layernorm_backward(ddinp2, ddw2, ddb2, dds2, dg, dx, dw, dmean, drstd, N, C);
    norm_backward_finish();
    check_bits("layernorm_backward", "determinism: dw", get_bytes(ddw, C * 4), get_bytes(ddw2, C * 4));
    check_bits("layernorm_backward", "determinism: dsum", get_bytes(dds, C * 4), get_bytes(dds2, C * 4));
    check_bits("layernorm_backward", "determinism: dinp", get_bytes(ddinp, n * 2), get_bytes(ddinp2, n * 2));
    ops_free(ddinp2);
    ops_free(ddw2);
    ops_free(ddb2);
    ops_free(dds2);
    ops_free(dds);
    ops_free(ddinp);
    ops_free(ddw);
    ops_free(ddb);
    ops_free(dg);
    ops_free(dmean);
    ops_free(drstd);
    ops_free(dout);
    ops_free(dx);
    ops_free(dw);
    ops_free(db);
}

static void test_matmul(int N, int IC, int OC, bool with_bias) {
    char what[96];
    snprintf(what, sizeof what, "N=%d IC=%d OC=%d%s", N, IC, OC, with_bias ? " +bias" : "");
    /* weights ~ 1/sqrt(IC) so outputs are O(1), like a trained layer */
    vecf inp = randn_bf((size_t)N * IC), w = randn_bf((size_t)OC * IC, 1.0f / sqrtf((float)IC));
    vecf bias = randn_bf(OC);
    vecf cout((size_t)N * OC);
    cpu_matmul_forward(cout.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, IC, OC);
    floatX *di = dev_bf(inp), *dw = dev_bf(w), *db = dev_bf(bias);
    floatX* dout = (floatX*)ops_malloc((size_t)N * OC * 2);
    poison_bf(dout, (size_t)N * OC);
    matmul_forward(dout, di, dw, with_bias ? db : nullptr, N, IC, OC);
    check("matmul_forward", what, get_bf(dout, (size_t)N * OC), cout, TOL_RED);

    /* backward: dinp overwritten; dw, dbias accumulate (run twice) */
    vecf g = randn_bf((size_t)N * OC);
    vecf dwinit = randn_f32((size_t)OC * IC, 0.1f), dbinit = randn_f32(OC, 0.1f);
    vecf cdinp((size_t)N * IC), cdw = dwinit, cdb = dbinit;
    cpu_matmul_backward(cdinp.data(), cdw.data(), cdb.data(), g.data(), inp.data(), w.data(), N, IC, OC);
    cpu_matmul_backward(cdinp.data(), cdw.data(), cdb.data(), g.data(), inp.data(), w.data(), N, IC, OC);
    floatX* dg = dev_bf(g);
    floatX* ddinp = (floatX*)ops_malloc((size_t)N * IC * 2);
    float *ddw = dev_f32(dwinit), *ddb = dev_f32(dbinit);
    matmul_backward(ddinp, ddw, ddb, dg, di, dw, N, IC, OC);
    poison_bf(ddinp, (size_t)N * IC); /* the second call must overwrite all of it */
    matmul_backward(ddinp, ddw, ddb, dg, di, dw, N, IC, OC);
    check("matmul_backward", "  dinp (overwritten)", get_bf(ddinp, (size_t)N * IC), cdinp, TOL_RED);
    check_inc("matmul_backward", "  dw (fp32, accumulated x2)", get_f32(ddw, (size_t)OC * IC), cdw, dwinit, TOL_F32);
    check_inc("matmul_backward", "  dbias (accumulated x2)", get_f32(ddb, OC), cdb, dbinit, TOL_F32);
    /* NULL dinp and dbias are skipped; dw still accumulates */
    float* ddw2 = dev_f32(dwinit);
    matmul_backward(nullptr, ddw2, nullptr, dg, di, dw, N, IC, OC);
    matmul_backward(nullptr, ddw2, nullptr, dg, di, dw, N, IC, OC);
    check_bits("matmul_backward", "determinism: dw, and NULL dinp/dbias", get_bytes(ddw, (size_t)OC * IC * 4),
               get_bytes(ddw2, (size_t)OC * IC * 4));
    ops_free(ddw2);
    ops_free(ddinp);
    ops_free(ddw);
    ops_free(ddb);
    ops_free(dg);
    ops_free(dout);
    ops_free(di);
    ops_free(dw);
    ops_free(db);
}

static void test_bias_residual_gelu(int N, int C, size_t n) {
    char what[96];
    snprintf(what, sizeof what, "N=%d C=%d", N, C);
    vecf x = randn_bf((size_t)N * C), bias = randn_bf(C);
    vecf cx = x;
    cpu_bias_forward(cx.data(), bias.data(), N, C);
    floatX *dx = dev_bf(x), *db = dev_bf(bias);
    bias_forward(dx, db, N, C);
    check("bias_forward", what, get_bf(dx, (size_t)N * C), cx, TOL_EW);

    vecf init = randn_f32(C);
    vecf cdb = init;
    cpu_bias_backward(cdb.data(), x.data(), N, C);
    cpu_bias_backward(cdb.data(), x.data(), N, C);
    floatX* dxx = dev_bf(x);
    float* ddb = dev_f32(init);
    bias_backward(ddb, dxx, N, C);
    bias_backward(ddb, dxx, N, C);
    check_inc("bias_backward", what, get_f32(ddb, C), cdb, init, TOL_F32);
    ops_free(ddb);
    ops_free(dxx);
    ops_free(dx);
    ops_free(db);

    /* flat element-wise ops, n odd (a tail), aligned and unaligned (scalar path) */
    snprintf(what, sizeof what, "n=%zu", n);
    vecf a = randn_bf(n + 1), b = randn_bf(n + 1, 2.0f), g = randn_bf(n + 1);
    floatX *da = dev_bf(a), *dbb = dev_bf(b), *dg = dev_bf(g);
    floatX* dout = (floatX*)ops_malloc((n + 1) * 2);
    for (int off = 0; off < 2; off++) {
        const char* tag = off ? " (unaligned)" : "";
        char w2[128];
        vecf ca(a.begin() + off, a.begin() + off + n), cb(b.begin() + off, b.begin() + off + n),
            cg(g.begin() + off, g.begin() + off + n), cr(n);
        cpu_residual_forward(cr.data(), ca.data(), cb.data(), n);
        poison_bf(dout, n + 1);
        residual_forward(dout + off, da + off, dbb + off, n);
        snprintf(w2, sizeof w2, "%s%s", what, tag);
        check("residual_forward", w2, get_bf(dout + off, n), cr, TOL_EW);
        cpu_gelu_forward(cr.data(), cb.data(), n);
        poison_bf(dout, n + 1);
        gelu_forward(dout + off, dbb + off, n);
        check("gelu_forward", w2, get_bf(dout + off, n), cr, TOL_EW);
        cpu_gelu_backward(cr.data(), cb.data(), cg.data(), n);
        poison_bf(dout, n + 1);
        gelu_backward(dout + off, dbb + off, dg + off, n);
        check("gelu_backward", w2, get_bf(dout + off, n), cr, TOL_EW);
    }
    /* in place: out aliases a */
    {
        vecf cr(n);
        vecf ca(a.begin(), a.begin() + n), cb(b.begin(), b.begin() + n);
        cpu_residual_forward(cr.data(), ca.data(), cb.data(), n);
        residual_forward(da, da, dbb, n);
        check("residual_forward", "in place (out == a)", get_bf(da, n), cr, TOL_EW);
    }
    ops_free(dout);
    ops_free(da);
    ops_free(dbb);
    ops_free(dg);
}

/* The MLP's GELU in the GEMM epilogues vs the CPU composition. The
 * epilogue needs the aux ld (OC forward, IC backward) divisible by 8; the
 * other shapes run the unfused fallback, which is then what is tested. */
static void test_matmul_gelu(int N, int IC, int OC, bool with_bias) {
    char what[96];
    snprintf(what, sizeof what, "N=%d IC=%d OC=%d%s (%s)", N, IC, OC, with_bias ? " +bias" : "",
             OC % 8 == 0 ? "epilogue" : "fallback");
    const size_t no = (size_t)N * OC;
    vecf inp = randn_bf((size_t)N * IC), w = randn_bf((size_t)OC * IC, 1.0f / sqrtf((float)IC)), bias = randn_bf(OC);
    vecf cout(no), cpre(no);
    cpu_matmul_gelu_forward(cout.data(), cpre.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, IC, OC);
    floatX *di = dev_bf(inp), *dw = dev_bf(w), *db = with_bias ? dev_bf(bias) : nullptr;
    floatX *dout = (floatX*)ops_malloc(no * 2), *dpre = (floatX*)ops_malloc(no * 2);
    floatX *dout2 = (floatX*)ops_malloc(no * 2), *dpre2 = (floatX*)ops_malloc(no * 2);
    poison_bf(dout, no);
    poison_bf(dpre, no);
    matmul_gelu_forward(dout, dpre, di, dw, db, N, IC, OC);
    check("matmul_gelu_forward", what, get_bf(dout, no), cout, TOL_RED);
    check("matmul_gelu_forward", "  pre (the GELU input kept)", get_bf(dpre, no), cpre, TOL_RED);
    matmul_gelu_forward(dout2, dpre2, di, dw, db, N, IC, OC);
    check_bits("matmul_gelu_forward", "determinism: out", get_bytes(dout, no * 2), get_bytes(dout2, no * 2));
    free_all({di, dw, db, dout, dpre, dout2, dpre2});
}

/* Its backward, for the GEMM whose input is gelu(pre): here IC is the GELU
 * side (fcproj: IC = 4C), so the epilogue needs IC % 8 == 0. */
static void test_gelu_matmul_backward(int N, int IC, int OC) {
    char what[96];
    snprintf(what, sizeof what, "N=%d IC=%d OC=%d (%s)", N, IC, OC, IC % 8 == 0 ? "epilogue" : "fallback");
    const size_t ni = (size_t)N * IC;
    vecf pre = randn_bf(ni), inp(ni), w = randn_bf((size_t)OC * IC, 1.0f / sqrtf((float)OC)), g = randn_bf((size_t)N * OC);
    cpu_gelu_forward(inp.data(), pre.data(), ni);
    for (float& v : inp) v = round_bf(v); /* the forward's bf16 output */
    vecf dwinit = randn_f32((size_t)OC * IC, 0.1f), dbinit = randn_f32(OC, 0.1f);
    vecf cdinp(ni), cdw = dwinit, cdb = dbinit;
    for (int rep = 0; rep < 2; rep++)
        cpu_gelu_matmul_backward(cdinp.data(), cdw.data(), cdb.data(), g.data(), inp.data(), w.data(), pre.data(), N, IC, OC);
    floatX *dpre = dev_bf(pre), *dinp_in = dev_bf(inp), *dw = dev_bf(w), *dg = dev_bf(g);
    floatX *ddinp = (floatX*)ops_malloc(ni * 2), *ddinp2 = (floatX*)ops_malloc(ni * 2);
    float *ddw = dev_f32(dwinit), *ddb = dev_f32(dbinit);
    for (int rep = 0; rep < 2; rep++) {
        poison_bf(ddinp, ni); /* each call must overwrite all of it */
        gelu_matmul_backward(ddinp, ddw, ddb, dg, dinp_in, dw, dpre, N, IC, OC);
    }
    check("gelu_matmul_backward", what, get_bf(ddinp, ni), cdinp, TOL_RED);
    check_inc("gelu_matmul_backward", "  dw (fp32, accumulated x2)", get_f32(ddw, (size_t)OC * IC), cdw, dwinit, TOL_F32);
    check_inc("gelu_matmul_backward", "  dbias (accumulated x2)", get_f32(ddb, OC), cdb, dbinit, TOL_F32);
    gelu_matmul_backward(ddinp2, ddw, nullptr, dg, dinp_in, dw, dpre, N, IC, OC);
    check_bits("gelu_matmul_backward", "determinism: dinp", get_bytes(ddinp, ni * 2), get_bytes(ddinp2, ni * 2));
    free_all({dpre, dinp_in, dw, dg, ddinp, ddinp2, ddw, ddb});
}

/* res = x + (y + bias) and its LayerNorm in one kernel. The GPU normalises
 * res as stored in bf16, so out, mean and rstd are checked against the CPU
 * layernorm of the GPU's res (the standard of test_layernorm), and out
 * end to end against the CPU op, whose res is fp32 (bf16's rounding of res,
 * amplified by |res| / std, hence TOL_RED). */
static void test_residual_layernorm(int N, int C) {
    char what[96];
    snprintf(what, sizeof what, "N=%d C=%d", N, C);
    const size_t n = (size_t)N * C;
    vecf x(n); /* a residual stream: rows with an offset and a spread */
    for (int r = 0; r < N; r++) {
        float mu = 0.5f * rng_normal(), sd = 0.5f + rng_unif() * 1.5f;
        for (int c = 0; c < C; c++) x[(size_t)r * C + c] = round_bf(mu + sd * rng_normal());
    }
    vecf y = randn_bf(n, 0.5f), bias = randn_bf(C, 0.1f), w = randn_bf(C), b = randn_bf(C, 0.5f);
    for (int c = 0; c < C; c++) w[c] = round_bf(1.0f + 0.2f * w[c]);
    vecf cres(n), cout(n), cmean(N), crstd(N);
    cpu_residual_layernorm_forward(cres.data(), cout.data(), cmean.data(), crstd.data(), x.data(), y.data(), bias.data(),
                                   w.data(), b.data(), N, C);
    floatX *dx = dev_bf(x), *dy = dev_bf(y), *dbias = dev_bf(bias), *dw = dev_bf(w), *db = dev_bf(b);
    floatX *dres = (floatX*)ops_malloc(n * 2), *dout = (floatX*)ops_malloc(n * 2);
    float *dmean = (float*)ops_malloc(N * 4), *drstd = (float*)ops_malloc(N * 4);
    poison_bf(dres, n);
    poison_bf(dout, n);
    poison_f32(dmean, N);
    poison_f32(drstd, N);
    residual_layernorm_forward(dres, dout, dmean, drstd, dx, dy, dbias, dw, db, N, C);
    vecf gres = get_bf(dres, n), gout = get_bf(dout, n);
    check("residual_layernorm_forward", what, gres, cres, TOL_EW);
    vecf rout(n), rmean(N), rrstd(N);
    cpu_layernorm_forward(rout.data(), rmean.data(), rrstd.data(), gres.data(), w.data(), b.data(), N, C);
    check("residual_layernorm_forward", "  out (LN of res as stored)", gout, rout, TOL_EW);
    check("residual_layernorm_forward", "  mean", get_f32(dmean, N), rmean, TOL_F32);
    check("residual_layernorm_forward", "  rstd", get_f32(drstd, N), rrstd, TOL_F32);
    check("residual_layernorm_forward", "  out (vs the CPU op)", gout, cout, TOL_RED);
    /* in place (res == x), as ops.h allows: the same bits */
    residual_layernorm_forward(dx, dout, dmean, drstd, dx, dy, dbias, dw, db, N, C);
    check_bits("residual_layernorm_forward", "in place (res == x): res", get_bytes(dx, n * 2), get_bytes(dres, n * 2));
    free_all({dx, dy, dbias, dw, db, dres, dout, dmean, drstd});
}

/* the GPU attention under test: GPT-2's entry points for NKV = NH (they are
 * the grouped-query ones with NKV = NH), the grouped-query ones otherwise */
static void gpu_attention_fwd(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int NKV, int hs) {
    if (NKV == NH) attention_forward(out, lse, qkv, B, T, NH, hs);
    else attention_gqa_forward(out, lse, qkv, B, T, NH, NKV, hs);
}
static void gpu_attention_bwd(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out, const float* lse,
                              int B, int T, int NH, int NKV, int hs) {
    if (NKV == NH) attention_backward(dqkv, dout, qkv, out, lse, B, T, NH, hs);
    else attention_gqa_backward(dqkv, dout, qkv, out, lse, B, T, NH, NKV, hs);
}

/* NKV kv heads (NKV = NH: GPT-2's attention): qkv rows of (NH + 2 NKV) hs */
static void test_attention(int B, int T, int NH, int NKV, int hs) {
    char what[96];
    snprintf(what, sizeof what, "B=%d T=%d NH=%d NKV=%d hs=%d", B, T, NH, NKV, hs);
    const int W = (NH + 2 * NKV) * hs; /* qkv row width */
    const size_t nqkv = (size_t)B * T * W, nout = (size_t)B * T * NH * hs, nlse = (size_t)B * NH * T;
    vecf qkv = randn_bf(nqkv);
    vecf cout(nout), clse(nlse);
    cpu_attention_gqa_forward(cout.data(), clse.data(), qkv.data(), B, T, NH, NKV, hs);
    floatX* dqkv_in = dev_bf(qkv);
    floatX* dout = (floatX*)ops_malloc(nout * 2);
    float* dlse = (float*)ops_malloc(nlse * 4);
    poison_bf(dout, nout);
    poison_f32(dlse, nlse);
    gpu_attention_fwd(dout, dlse, dqkv_in, B, T, NH, NKV, hs);
    vecf gout = get_bf(dout, nout), glse = get_f32(dlse, nlse);
    check("attention_forward", what, gout, cout, TOL_RED);
    check("attention_forward", "  lse", glse, clse, TOL_F32 * 10); /* ex2.approx: ~2 ulp per term */

    /* backward: each side from its own forward (out, lse) */
    vecf g = randn_bf(nout);
    vecf cdqkv(nqkv);
    cpu_attention_gqa_backward(cdqkv.data(), g.data(), qkv.data(), cout.data(), clse.data(), B, T, NH, NKV, hs);
    floatX* dg = dev_bf(g);
    floatX* ddqkv = (floatX*)ops_malloc(nqkv * 2);
    poison_bf(ddqkv, nqkv);
    gpu_attention_bwd(ddqkv, dg, dqkv_in, dout, dlse, B, T, NH, NKV, hs);
    vecf gd = get_bf(ddqkv, nqkv);
    check("attention_backward", "  dqkv", gd, cdqkv, TOL_ATTB);
    /* the three parts separately: a wrong dq hides less in a sum (and a
     * kv head's sum over its group shows in dk, dv) */
    const int part_at[4] = {0, NH * hs, (NH + NKV) * hs, W};
    for (int part = 0; part < 3; part++) {
        vecf gp, cp;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int i = part_at[part]; i < part_at[part + 1]; i++) {
                size_t k = r * W + i;
                gp.push_back(gd[k]);
                cp.push_back(cdqkv[k]);
            }
        static const char* names[3] = {"  dq", "  dk", "  dv"};
        check("attention_backward", names[part], gp, cp, TOL_ATTB);
    }
    /* determinism: forward and backward again from the same inputs */
    floatX* dout2 = (floatX*)ops_malloc(nout * 2);
    float* dlse2 = (float*)ops_malloc(nlse * 4);
    floatX* ddqkv2 = (floatX*)ops_malloc(nqkv * 2);
    gpu_attention_fwd(dout2, dlse2, dqkv_in, B, T, NH, NKV, hs);
    gpu_attention_bwd(ddqkv2, dg, dqkv_in, dout2, dlse2, B, T, NH, NKV, hs);
    check_bits("attention_forward", "determinism: out", get_bytes(dout, nout * 2), get_bytes(dout2, nout * 2));
    check_bits("attention_backward", "determinism: dqkv", get_bytes(ddqkv, nqkv * 2), get_bytes(ddqkv2, nqkv * 2));
    ops_free(dout2);
    ops_free(dlse2);
    ops_free(ddqkv2);
    ops_free(ddqkv);
    ops_free(dg);
    ops_free(dout);
    ops_free(dlse);
    ops_free(dqkv_in);
}

/* The vocab-parallel protocol on one GPU: the P slices of the padded vocab
 * run the three calls, and the host does the all-reduces (MAX, then SUM) in
 * between. The reference runs the whole vocab as one slice. */
static void test_crossentropy(int N, int V, int Vp, int P) {
    char what[96];
    snprintf(what, sizeof what, "N=%d V=%d Vp=%d slices=%d", N, V, Vp, P);
    const int Vr = Vp / P;
    vecf logits = randn_bf((size_t)N * Vp, 2.0f);
    std::vector<int> tgt(N);
    for (int n = 0; n < N; n++) tgt[n] = rng_int(V);
    tgt[0] = V - 1; /* the last real id, next to the padding */
    const float dloss = 1.0f / N;
    vecf cmx(N), cstats(2 * N), closs(N), cdl = logits;
    cpu_crossentropy_max(cmx.data(), cdl.data(), N, Vp, 0, V);
    cpu_crossentropy_stats(cstats.data(), cdl.data(), cmx.data(), tgt.data(), N, Vp, 0, V);
    cpu_crossentropy_backward(cdl.data(), closs.data(), cmx.data(), cstats.data(), tgt.data(), N, Vp, 0, V, dloss);

    int* dtgt = dev_int(tgt);
    std::vector<floatX*> dl(P);
    std::vector<float*> dmx(P), dst(P);
    vecf mx(N, -INFINITY), stats(2 * N, 0.0f);
    for (int p = 0; p < P; p++) {
        vecf slice((size_t)N * Vr);
        for (int n = 0; n < N; n++)
            memcpy(&slice[(size_t)n * Vr], &logits[(size_t)n * Vp + (size_t)p * Vr], Vr * 4);
        dl[p] = dev_bf(slice);
        dmx[p] = (float*)ops_malloc(N * 4);
        dst[p] = (float*)ops_malloc(2 * N * 4);
        poison_f32(dmx[p], N);
        crossentropy_max(dmx[p], dl[p], N, Vr, p * Vr, V);
        vecf m = get_f32(dmx[p], N);
        for (int n = 0; n < N; n++) mx[n] = fmaxf(mx[n], m[n]); /* the MAX all-reduce */
    }
    check("crossentropy_max", what, mx, cmx, TOL_EXACT);
    for (int p = 0; p < P; p++) {
        ops_from_host(dmx[p], mx.data(), N * 4);
        poison_f32(dst[p], 2 * N);
        crossentropy_stats(dst[p], dl[p], dmx[p], dtgt, N, Vr, p * Vr, V);
        vecf s = get_f32(dst[p], 2 * N);
        for (int i = 0; i < 2 * N; i++) stats[i] += s[i]; /* the SUM all-reduce */
    }
    vecf sums(N), csums(N), tl(N), ctl(N);
    for (int n = 0; n < N; n++) {
        sums[n] = stats[2 * n];
        csums[n] = cstats[2 * n];
        tl[n] = stats[2 * n + 1];
        ctl[n] = cstats[2 * n + 1];
    }
    check("crossentropy_stats", "  sum of exp", sums, csums, TOL_F32);
    check("crossentropy_stats", "  target logit", tl, ctl, TOL_EXACT);
    vecf gdl((size_t)N * Vp), gloss;
    for (int p = 0; p < P; p++) {
        ops_from_host(dst[p], stats.data(), 2 * N * 4);
        float* dloss_d = (float*)ops_malloc(N * 4);
        poison_f32(dloss_d, N);
        crossentropy_backward(dl[p], dloss_d, dmx[p], dst[p], dtgt, N, Vr, p * Vr, V, dloss);
        vecf s = get_bf(dl[p], (size_t)N * Vr);
        for (int n = 0; n < N; n++)
            memcpy(&gdl[(size_t)n * Vp + (size_t)p * Vr], &s[(size_t)n * Vr], Vr * 4);
        vecf l = get_f32(dloss_d, N);
        if (p == 0) gloss = l;
        else check("crossentropy_backward", "  losses agree across slices", l, gloss, TOL_EXACT);
        ops_free(dloss_d);
    }
    check("crossentropy_backward", "  losses", gloss, closs, TOL_F32);
    check("crossentropy_backward", "  dlogits (padding must be 0)", gdl, cdl, TOL_EW);
    size_t padbad = 0;
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++) padbad += gdl[(size_t)n * Vp + j] != 0.0f;
    report("crossentropy_backward", "  padding columns exactly 0", (double)padbad, TOL_EXACT, nullptr);
    if (P == 1) { /* the three in one call (TP = 1): the same bits as the split calls above */
        floatX* dl1 = dev_bf(logits);
        float* dmx1 = (float*)ops_malloc(N * 4);
        float* dst1 = (float*)ops_malloc(2 * N * 4);
        float* dls1 = (float*)ops_malloc(N * 4);
        poison_f32(dmx1, N);
        poison_f32(dst1, 2 * N);
        poison_f32(dls1, N);
        crossentropy_local(dl1, dls1, dmx1, dst1, dtgt, N, Vp, V, dloss);
        check("crossentropy_local", "  max == split", get_f32(dmx1, N), mx, TOL_EXACT);
        check("crossentropy_local", "  stats == split", get_f32(dst1, 2 * N), stats, TOL_EXACT);
        check("crossentropy_local", "  losses == split", get_f32(dls1, N), gloss, TOL_EXACT);
        check("crossentropy_local", "  dlogits == split", get_bf(dl1, (size_t)N * Vp), gdl, TOL_EXACT);
        ops_free(dl1);
        ops_free(dmx1);
        ops_free(dst1);
        ops_free(dls1);
    }
    for (int p = 0; p < P; p++) {
        ops_free(dl[p]);
        ops_free(dmx[p]);
        ops_free(dst[p]);
    }
    ops_free(dtgt);
}

static void test_norms(size_t n) {
    vecf x = randn_f32(n);
    float* dx = dev_f32(x);
    double g = ops_sumsq(dx, n), c = cpu_ops_sumsq(x.data(), n);
    report("ops_sumsq", "n=1M+7 (double accumulation)", fabs(g - c) / c, 1e-9, nullptr);
    g = ops_sum(dx, n);
    c = cpu_ops_sum(x.data(), n);
    double scale = sqrt(cpu_ops_sumsq(x.data(), n)); /* the sum can be near 0: scale by the norm */
    report("ops_sum", "n=1M+7 (relative to ||x||)", fabs(g - c) / scale, 1e-9, nullptr);
    double g2 = ops_sumsq(dx, n);
    report("ops_sumsq", "determinism: two runs", g2 == ops_sumsq(dx, n) ? 0.0 : 1.0, TOL_EXACT, nullptr);
    int f1 = ops_all_finite(dx, n);
    float bad = INFINITY;
    ops_from_host(dx + n / 2, &bad, 4);
    int f2 = ops_all_finite(dx, n);
    bad = nanf("");
    ops_from_host(dx + n / 2, &bad, 4);
    int f3 = ops_all_finite(dx, n);
    report("ops_all_finite", "finite / one inf / one NaN", (f1 == 1 && f2 == 0 && f3 == 0) ? 0.0 : 1.0, TOL_EXACT,
           nullptr);
    ops_free(dx);
}

/* The sums' two paths (float4 reads of an aligned tensor, with its < 4 tail
 * elements; scalar reads of an unaligned one) and the four-deep loop of a
 * large one, against the CPU's double sums. */
static void test_norm_shapes(void) {
    const size_t ns[] = {1, 3, 6, 1029, 5000003};
    for (size_t n : ns) {
        vecf x = randn_f32(n + 1);
        float* dx = dev_f32(x);
        for (int off = 0; off < 2; off++) {
            const double g = ops_sumsq(dx + off, n), c = cpu_ops_sumsq(x.data() + off, n);
            const double gs = ops_sum(dx + off, n), cs = cpu_ops_sum(x.data() + off, n);
            char cs_name[64];
            snprintf(cs_name, sizeof(cs_name), "n=%zu %s", n, off ? "unaligned" : "aligned");
            report("ops_sumsq", cs_name, fabs(g - c) / c, 1e-9, nullptr);
            report("ops_sum", cs_name, fabs(gs - cs) / sqrt(c), 1e-9, nullptr);
        }
        ops_free(dx);
    }
}

/* --pending-sums: a norm forward while a backward's column sums are pending
 * must end the process with a clear fatal error (tests/run_tests.sh checks
 * the exit status and the message); reaching the end is the failure. */
static int test_pending_sums_fatal() {
    const int N = 8, C = 64;
    const size_t n = (size_t)N * C;
    floatX *x = dev_bf(randn_bf(n)), *dout = dev_bf(randn_bf(n)), *dinp = dev_bf(randn_bf(n));
    floatX *w = dev_bf(randn_bf(C)), *b = dev_bf(randn_bf(C)), *out = dev_bf(randn_bf(n));
    float *dw = dev_f32(randn_f32(C)), *db = dev_f32(randn_f32(C));
    float *mean = (float*)ops_malloc(N * 4), *rstd = (float*)ops_malloc(N * 4);
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    layernorm_backward(dinp, dw, db, nullptr, dout, x, w, mean, rstd, N, C);
    layernorm_forward(out, mean, rstd, x, w, b, N, C); /* no norm_backward_finish: fatal */
    printf("FAIL: a norm forward ran with column sums pending\n");
    return 1;
}

int main(int argc, char** argv) {
    /* optional argument: run only the groups whose name contains it (e.g. "attention") */
    const char* only = argc > 1 ? argv[1] : nullptr;
#define GROUP(name) if (!only || strstr(name, only))
    ops_init(0);
    if (only && strcmp(only, "--pending-sums") == 0) return test_pending_sums_fatal();
    printf("test_ops_gpu: %s vs %s\n\n", ops_backend_name(), cpu_ops_backend_name());
    printf("%-22s %-40s %11s %9s  %s\n", "op", "case", "rel err", "tol", "result");
    printf("%.*s\n", 96, "-----------------------------------------------------------------------------------------------------");

    GROUP("memory") test_memory();

    GROUP("encoder") {
        test_encoder(37, 768, 100, 50, 200); /* GPT-2 width, ids in and out of the slice */
        test_encoder(256, 40, 16, 0, 20);    /* many repeats, C % 8 == 0 small */
        test_encoder(33, 36, 50, 10, 70);    /* C % 8 != 0: scalar path */
    }
    GROUP("position") {
        test_position(3, 17, 768);
        test_position(2, 5, 36);
    }
    GROUP("layernorm") {
        test_layernorm(37, 768);   /* whole 256-column chunks: the unguarded backward */
        test_layernorm(16, 512);   /* 2 blocks, 16 warps: several column-sum units per warp in colsum_deferred */
        test_layernorm(64, 1600);  /* GPT-2 XL width, 7 chunks per lane: the wide kernels */
        test_layernorm(19, 36);    /* scalar path */
        test_layernorm(4100, 200); /* the guarded backward: 171 blocks, 11 groups of colsum_deferred, the last of 11 */
        test_layernorm(3000, 768); /* 188 blocks, 12 groups of colsum_deferred, the last of 12 */
        test_layernorm(70, 1024);  /* the widest row of the register-resident kernels (4 chunks per lane) */
    }
    GROUP("matmul") {
        test_matmul(37, 768, 2304, true); /* qkv-like, N not a multiple of any tile */
        test_matmul(256, 768, 768, false);
        test_matmul(64, 3072, 768, true); /* fc-proj-like */
        test_matmul(40, 200, 72, true);   /* small, awkward multiples of 8 */
    }
    GROUP("elementwise") {
        test_bias_residual_gelu(37, 2304, 37 * 768 + 5);
        test_bias_residual_gelu(5, 36, 101);
        test_bias_residual_gelu(3000, 40, 101); /* bias_backward over 94 row chunks */
        test_bias_residual_gelu(5000, 520, 101); /* 3 column blocks of bias_backward, the last 8 columns wide */
        test_bias_residual_gelu(300, 3072, 101); /* the fc bias width: 12 column blocks */
    }
    GROUP("fused") {
        test_matmul_gelu(37, 768, 3072, true); /* fc-like */
        test_matmul_gelu(40, 200, 72, false);  /* GELU_AUX, no bias */
        test_matmul_gelu(33, 200, 36, true);   /* OC % 8 != 0: the unfused fallback */
        test_gelu_matmul_backward(37, 3072, 768); /* fcproj-like */
        test_gelu_matmul_backward(40, 72, 200);
        test_gelu_matmul_backward(33, 36, 200);   /* IC % 8 != 0: the fallback */
        test_residual_layernorm(37, 768);
        test_residual_layernorm(3000, 768);       /* many rows per persistent warp */
        test_residual_layernorm(70, 1024);        /* the widest row of the register-resident forward */
        test_residual_layernorm(64, 1600);        /* the wide forward */
        test_residual_layernorm(19, 36);          /* scalar path */
    }
    GROUP("attention") {
        test_attention(2, 1, 3, 3, 64);
        test_attention(2, 17, 3, 3, 64);
        test_attention(2, 64, 3, 3, 64);
        test_attention(2, 256, 3, 3, 64);
        test_attention(1, 100, 2, 2, 32);
        test_attention(1, 100, 2, 2, 128);
        test_attention(1, 77, 2, 2, 48);
        test_attention(1, 130, 1, 1, 16);
        /* long dQ chains: 16 key tiles add to the last query tile, in order */
        test_attention(1, 1024, 2, 2, 64);
        /* grouped-query (Qwen2): groups of 2, 3 and 4 query heads, one kv
         * head for all; T past / not a multiple of the tiles; hs 64 and 128 */
        test_attention(2, 100, 4, 2, 64);
        test_attention(1, 130, 6, 2, 64);
        test_attention(1, 77, 4, 1, 128);
        test_attention(2, 33, 8, 2, 32);
        test_attention(1, 520, 4, 2, 128);
    }
    GROUP("crossentropy") {
        test_crossentropy(37, 1000, 1024, 1); /* padding in the one slice */
        test_crossentropy(37, 1000, 1024, 2); /* two slices, padding in the second */
        test_crossentropy(19, 997, 1002, 2);  /* Vr = 501: scalar path */
        test_crossentropy(19, 997, 1002, 1);  /* crossentropy_local's fallback (Vr % 8 != 0) */
        test_crossentropy(8, 50257, 50304, 1); /* GPT-2's row in shared memory */
        test_crossentropy(2, 119993, 120000, 1); /* a row wider than the shared memory: the split kernels */
    }
    GROUP("norms") {
        test_norms((1u << 20) + 7);
        test_norm_shapes();
    }
#undef GROUP
    test_ops_gpu_step(only);
    test_ops_gpu_qwen2(only);
    test_ops_gpu_tma(only);

    printf("\n%d checks, %d failed\n", g_checks, g_fail);
    if (g_checks == 0) {
        printf("no test group matches '%s' (groups: memory encoder position layernorm matmul elementwise "
               "fused attention crossentropy adamw norms step graph rmsnorm rope swiglu tma)\n", only ? only : "");
        return 1;
    }
    return g_fail ? 1 : 0;
}
