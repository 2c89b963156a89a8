/*
 * tests/test_ops_gpu_step.cu - the CUDA ops of the training step's end
 * against the fp32 CPU ops, by the method of tests/test_ops_gpu.cu (whose
 * main runs these groups): AdamW with its scalars in device memory, skip
 * included; the queued reductions of ops.h's StepScalars bit for bit against
 * the host-returning sums they replaced in the trainer (the same kernels, the
 * tensors' sums added in the host's order, so the loss and the norm keep
 * their bits) and within 1e-9 of the CPU's, the clip bit for bit against the
 * CPU's on the same sums; and the CUDA graph calls (ops_graph_*): a captured
 * sequence replayed against the same calls run eagerly.
 */
#include <math.h>
#include <string.h>

#include "tests/ops_gpu_testing.h"

/* the adamw tests' device buffers, freed */
static void adamw_free(StepScalars* st, float* master, floatX* param, float* grad, float* m, float* v) {
    ops_free(st);
    ops_free(master);
    ops_free(param);
    ops_free(grad);
    ops_free(m);
    ops_free(v);
}

static void test_adamw(size_t n) {
    char what[96];
    snprintf(what, sizeof what, "n=%zu, 3 steps", n);
    vecf master = randn_f32(n, 0.05f), grad = randn_f32(n, 0.01f);
    vecf m(n, 0.0f), v(n, 0.0f);
    vecf cmaster = master, cparam(n), cm = m, cv = v;
    float* dmaster = dev_f32(master);
    floatX* dparam = (floatX*)ops_malloc(n * 2);
    float *dgrad = dev_f32(grad), *dm = dev_f32(m), *dv = dev_f32(v);
    StepScalars st = {};
    st.lr = 6e-4f;
    st.scale = 0.5f;
    StepScalars* dst = (StepScalars*)ops_malloc(sizeof(StepScalars));
    for (int t = 1; t <= 3; t++) {
        st.bc1 = 1.0f - powf(0.9f, (float)t);
        st.bc2 = 1.0f - powf(0.95f, (float)t);
        ops_from_host(dst, &st, sizeof(st));
        cpu_adamw_update(cmaster.data(), cparam.data(), grad.data(), cm.data(), cv.data(), n, &st, 0.9f, 0.95f, 1e-8f,
                         0.1f);
        poison_bf(dparam, n);
        adamw_update(dmaster, dparam, dgrad, dm, dv, n, dst, 0.9f, 0.95f, 1e-8f, 0.1f);
    }
    vecf gmaster = get_f32(dmaster, n);
    /* compare the parameter change, which is what the update computed */
    check_inc("adamw_update", what, gmaster, cmaster, master, TOL_F32);
    check("adamw_update", "  m", get_f32(dm, n), cm, TOL_F32);
    check("adamw_update", "  v", get_f32(dv, n), cv, TOL_F32);
    /* param = bf16(master), round to nearest even, bit-exact */
    vecf gp = get_bf(dparam, n);
    size_t bad = count_nan(gp);
    for (size_t i = 0; i < n; i++) bad += gp[i] == gp[i] && gp[i] != round_bf(gmaster[i]);
    report("adamw_update", "  param == RNE(master), all written", (double)bad, TOL_EXACT, nullptr);
    /* skip (a non-finite loss or norm): weights, working copy and moments stay */
    st.skip = 1;
    ops_from_host(dst, &st, sizeof(st));
    std::vector<uint8_t> before = get_bytes(dmaster, n * 4), pbefore = get_bytes(dparam, n * 2),
                         mbefore = get_bytes(dm, n * 4);
    adamw_update(dmaster, dparam, dgrad, dm, dv, n, dst, 0.9f, 0.95f, 1e-8f, 0.1f);
    check_bits("adamw_update", "  skip: master unchanged", get_bytes(dmaster, n * 4), before);
    check_bits("adamw_update", "  skip: param, m unchanged", get_bytes(dparam, n * 2), pbefore);
    check_bits("adamw_update", "  skip: m unchanged", get_bytes(dm, n * 4), mbefore);
    adamw_free(dst, dmaster, dparam, dgrad, dm, dv);
}

/* adamw_update_tensors: several tensors of one buffer in one launch, each
 * against the CPU's adamw_update on it alone with its own weight decay: an
 * aligned one, one at an odd offset (the scalar path), an empty one, a tail
 * of 3; the gaps between them are not written. */
static void test_adamw_tensors(void) {
    const size_t off[5] = {0, 1001, 5100, 5104, 8204}, n[5] = {1000, 4097, 0, 3000, 3};
    const float wd[5] = {0.1f, 0.0f, 0.1f, 0.05f, 0.2f};
    const size_t L = 8300;
    vecf master = randn_f32(L, 0.05f), grad = randn_f32(L, 0.01f), m = randn_f32(L, 0.001f), v(L, 1e-6f);
    vecf cmaster = master, cparam(L), cm = m, cv = v;
    float* dmaster = dev_f32(master);
    floatX* dparam = (floatX*)ops_malloc(L * 2);
    float *dgrad = dev_f32(grad), *dm = dev_f32(m), *dv = dev_f32(v);
    poison_bf(dparam, L);
    std::vector<uint8_t> pbefore = get_bytes(dparam, L * 2);
    StepScalars st = {};
    st.lr = 6e-4f;
    st.scale = 0.5f;
    st.bc1 = 1.0f - 0.9f;
    st.bc2 = 1.0f - 0.95f;
    StepScalars* dst = (StepScalars*)ops_malloc(sizeof(StepScalars));
    ops_from_host(dst, &st, sizeof(st));
    for (int k = 0; k < 5; k++)
        cpu_adamw_update(cmaster.data() + off[k], cparam.data() + off[k], grad.data() + off[k], cm.data() + off[k],
                         cv.data() + off[k], n[k], &st, 0.9f, 0.95f, 1e-8f, wd[k]);
    adamw_update_tensors(dmaster, dparam, dgrad, dm, dv, 5, off, n, wd, dst, 0.9f, 0.95f, 1e-8f);
    const vecf gmaster = get_f32(dmaster, L), gm = get_f32(dm, L), gp = get_bf(dparam, L);
    const std::vector<uint8_t> gpb = get_bytes(dparam, L * 2);
    check_inc("adamw_update_tensors", "5 tensors, gaps, odd offsets", gmaster, cmaster, master, TOL_F32);
    check("adamw_update_tensors", "  m", gm, cm, TOL_F32);
    size_t bad = 0, in = 0;
    for (size_t i = 0; i < L; i++) {
        bool inside = false;
        for (int k = 0; k < 5; k++) inside |= i >= off[k] && i < off[k] + n[k];
        in += inside;
        if (inside) bad += gp[i] != round_bf(gmaster[i]);
        else bad += gmaster[i] != master[i] || gm[i] != m[i] || gpb[2 * i] != pbefore[2 * i] ||
                    gpb[2 * i + 1] != pbefore[2 * i + 1];
    }
    report("adamw_update_tensors", "  param == RNE(master) inside, nothing written outside", (double)bad, TOL_EXACT,
           nullptr);
    report("adamw_update_tensors", "  elements inside the tensors", in == 8100 ? 0.0 : 1.0, TOL_EXACT, nullptr);
    adamw_free(dst, dmaster, dparam, dgrad, dm, dv);
}

/* The step's queued scalars (the loss's mean, the norm's sums, the clip):
 * ops_sumsq_acc is the host's `acc += ops_sumsq(...)` and ops_mean the
 * host's (float)(ops_sum / n), bit for bit (what the trainer computed before
 * they moved to the device); the clip is the CPU's on the same sums. */
static void test_step_scalars(size_t n) {
    vecf x = randn_f32(n);
    float* dx = dev_f32(x);
    StepScalars* dst = (StepScalars*)ops_malloc(sizeof(StepScalars));
    StepScalars cs = {}, gs;
    cs.sumsq = 0.25;
    ops_from_host(dst, &cs, sizeof(cs));
    double host_acc = 0.25, cpu_acc = 0.25;
    for (int k = 0; k < 3; k++) { /* three tensors' sums added in order, as gpt_grad_clip does */
        const size_t off = (size_t)k * (n / 3), len = k < 2 ? n / 3 : n - 2 * (n / 3);
        ops_sumsq_acc(&dst->sumsq, dx + off, len);
        host_acc += ops_sumsq(dx + off, len);
        cpu_ops_sumsq_acc(&cpu_acc, x.data() + off, len);
    }
    ops_mean(&dst->loss, dx, n);
    const float host_mean = (float)(ops_sum(dx, n) / (double)n);
    ops_grad_clip(dst, 1.0f);
    ops_to_host(&gs, dst, sizeof(gs));
    report("ops_sumsq_acc", "3 tensors == host adds of ops_sumsq", gs.sumsq == host_acc ? 0.0 : 1.0, TOL_EXACT, nullptr);
    report("ops_sumsq_acc", "3 tensors vs the CPU's", fabs(gs.sumsq - cpu_acc) / cpu_acc, 1e-9, nullptr);
    report("ops_mean", "n=1M+7 == (float)(ops_sum / n)", gs.loss == host_mean ? 0.0 : 1.0, TOL_EXACT, nullptr);
    cs.sumsq = gs.sumsq;
    cs.loss = gs.loss;
    cpu_ops_grad_clip(&cs, 1.0f);
    report("ops_grad_clip", "norm, scale == CPU's bits",
           (gs.norm == cs.norm && gs.scale == cs.scale && gs.scale < 1.0f && !gs.skip) ? 0.0 : 1.0, TOL_EXACT, nullptr);
    /* no clip under the threshold; grad_clip 0 = off; non-finite loss or norm: skip */
    const float thr[4] = {1e9f, 0.0f, 1.0f, 1.0f};
    const float loss[4] = {1.0f, 1.0f, nanf(""), 1.0f};
    const double ss[4] = {4.0, 4.0, 4.0, (double)INFINITY};
    const int want_skip[4] = {0, 0, 1, 1};
    int bad = 0;
    for (int c = 0; c < 4; c++) {
        cs.loss = loss[c];
        cs.sumsq = ss[c];
        ops_from_host(dst, &cs, sizeof(cs));
        ops_grad_clip(dst, thr[c]);
        ops_to_host(&gs, dst, sizeof(gs));
        bad += gs.skip != want_skip[c] || (!want_skip[c] && gs.scale != 1.0f);
    }
    report("ops_grad_clip", "no clip, clip off, NaN loss, inf norm", (double)bad, TOL_EXACT, nullptr);
    ops_free(dst);
    ops_free(dx);
}

/* ops_graph_*: a captured sequence of queued copies from pinned memory, ops
 * and a copy back, replayed with new host contents each time, against the
 * same calls run eagerly: the replay reads the host buffers when it runs,
 * and its results are the eager ones bit for bit. */
static void test_graph(size_t n) {
    report("ops_graph_supported", "GPU backend", ops_graph_supported() == 1 ? 0.0 : 1.0, TOL_EXACT, nullptr);
    float* hin = (float*)ops_malloc_host(n * sizeof(float));
    StepScalars* hout = (StepScalars*)ops_malloc_host(sizeof(StepScalars));
    float* dx = (float*)ops_malloc(n * sizeof(float));
    StepScalars* dst = (StepScalars*)ops_malloc(sizeof(StepScalars));
    auto body = [&]() {
        ops_from_host_async(dx, hin, n * sizeof(float));
        ops_zero(&dst->sumsq, sizeof(double));
        ops_sumsq_acc(&dst->sumsq, dx, n);
        ops_mean(&dst->loss, dx, n);
        ops_grad_clip(dst, 1.0f);
        ops_to_host_async(hout, dst, sizeof(StepScalars));
    };
    body(); /* the warm-up, as the trainer's: scratch sized before the capture */
    ops_sync();
    memset(hout, 0xff, sizeof(StepScalars));
    ops_graph_begin();
    body();
    const int nodes = ops_graph_end();
    size_t untouched = 0;
    for (size_t i = 0; i < sizeof(StepScalars); i++) untouched += ((const unsigned char*)hout)[i] == 0xff;
    report("ops_graph_end", "nodes recorded, none run",
           nodes >= 6 && untouched == sizeof(StepScalars) ? 0.0 : 1.0, TOL_EXACT, nullptr);
    int bad = 0;
    for (int r = 0; r < 3; r++) {
        vecf x = randn_f32(n, 1.0f + r);
        memcpy(hin, x.data(), n * sizeof(float));
        body();                 /* eager */
        ops_sync();
        const StepScalars eager = *hout;
        memset(hout, 0xff, sizeof(StepScalars));
        ops_graph_launch();     /* the replay reads hin now */
        ops_sync();
        bad += memcmp(&eager, hout, sizeof(StepScalars)) != 0 || eager.sumsq == 0.0;
    }
    report("ops_graph_launch", "3 replays == eager, bit for bit", (double)bad, TOL_EXACT, nullptr);
    ops_graph_free();
    ops_free_host(hin);
    ops_free_host(hout);
    ops_free(dx);
    ops_free(dst);
}

void test_ops_gpu_step(const char* only) {
#define GROUP(name) if (!only || strstr(name, only))
    GROUP("adamw") test_adamw(10001);
    GROUP("adamw") test_adamw_tensors();
    GROUP("step") test_step_scalars((1u << 20) + 7);
    GROUP("graph") test_graph(100003);
#undef GROUP
}
