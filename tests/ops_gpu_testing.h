/*
 * tests/ops_gpu_testing.h - what the CUDA op tests share (tests/test_ops_gpu.cu,
 * the GPT-2 ops and the main; tests/test_ops_gpu_qwen2.cu, the ops Qwen2
 * adds): the results table, the random bf16-representable inputs, device
 * buffers to and from the host, NaN poisoning and the comparisons, and the
 * named tolerances. C++17 (inline variables: one table and one random
 * stream for the whole program).
 */
#ifndef OPS_GPU_TESTING_H
#define OPS_GPU_TESTING_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <initializer_list>
#include <vector>

#include "common/bf16.h"
#include "common/check.h"
#include "ops/ops.h"
#include "tests/ops_ref.h"

/*
 * Tolerances. bf16 keeps 8 significant bits: rounding a value costs a
 * relative error of at most 2^-9 = 1.95e-3, about 1.1e-3 rms over many
 * values. So:
 *   TOL_EW   4e-3  element-wise ops with a bf16 output (one rounding of an
 *                  fp32 result that both sides compute alike);
 *   TOL_RED  1e-2  bf16 outputs of long fp32 reductions (matmul, layernorm,
 *                  attention output): the rounding plus summation-order
 *                  differences, with margin;
 *   TOL_ATTB 2e-2  attention input gradients: P and dS are rounded to bf16
 *                  before their tensor-core products (as in FlashAttention),
 *                  a few such roundings compound;
 *   TOL_F32  1e-4  fp32 outputs computed from identical bf16 inputs in fp32
 *                  (gradients of weights, statistics): only summation order
 *                  differs (~1e-6 relative), generous margin;
 *   TOL_EXACT 0    pure data movement or sums in the reference's exact order.
 */
#define TOL_EXACT 0.0
#define TOL_EW 4e-3
#define TOL_RED 1e-2
#define TOL_ATTB 2e-2
#define TOL_F32 1e-4

typedef std::vector<float> vecf;

/* ---- results table -------------------------------------------------------------- */
inline int g_fail = 0, g_checks = 0; /* C++17 inline: one per program */

static inline void report(const char* op, const char* what, double err, double tol, const char* note) {
    bool ok = !(err != err) && err <= tol; /* NaN fails */
    g_checks++;
    if (!ok) g_fail++;
    printf("%-22s %-40s %11.3e %9.1e  %-4s %s\n", op, what, err, tol, ok ? "PASS" : "FAIL", note ? note : "");
    fflush(stdout);
}

/* ---- random numbers, bf16 on the host ------------------------------------------ */
inline uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static inline uint64_t rng_u64() {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float rng_unif() { return (float)((rng_u64() >> 40) * (1.0 / 16777216.0)); } /* [0,1) */
static inline float rng_normal() {
    float u1 = rng_unif(), u2 = rng_unif();
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}
static inline int rng_int(int n) { return (int)(rng_u64() % (uint64_t)n); }

/* host bf16 conversions: common/bf16.h (round to nearest even, every NaN -> 0x7FC0; no input of these tests is NaN) */
static inline float round_bf(float f) { return bf16_to_f32(bf16_from_f32(f)); }

/* random values of scale s, already bf16-representable */
static inline vecf randn_bf(size_t n, float s = 1.0f) {
    vecf v(n);
    for (size_t i = 0; i < n; i++) v[i] = round_bf(s * rng_normal());
    return v;
}
static inline vecf randn_f32(size_t n, float s = 1.0f) {
    vecf v(n);
    for (size_t i = 0; i < n; i++) v[i] = s * rng_normal();
    return v;
}

/* ---- device buffers ---------------------------------------------------------------- */
static inline floatX* dev_bf(const vecf& h) {
    std::vector<uint16_t> b(h.size());
    for (size_t i = 0; i < h.size(); i++) b[i] = bf16_from_f32(h[i]);
    floatX* d = (floatX*)ops_malloc(b.size() * 2);
    ops_from_host(d, b.data(), b.size() * 2);
    return d;
}
static inline float* dev_f32(const vecf& h) {
    float* d = (float*)ops_malloc(h.size() * 4);
    ops_from_host(d, h.data(), h.size() * 4);
    return d;
}
static inline int* dev_int(const std::vector<int>& h) {
    int* d = (int*)ops_malloc(h.size() * 4);
    ops_from_host(d, h.data(), h.size() * 4);
    return d;
}
static inline vecf get_bf(const floatX* d, size_t n) {
    std::vector<uint16_t> b(n);
    ops_to_host(b.data(), d, n * 2);
    vecf h(n);
    for (size_t i = 0; i < n; i++) h[i] = bf16_to_f32(b[i]);
    return h;
}
static inline vecf get_f32(const float* d, size_t n) {
    vecf h(n);
    ops_to_host(h.data(), d, n * 4);
    return h;
}
static inline std::vector<uint8_t> get_bytes(const void* d, size_t bytes) {
    std::vector<uint8_t> h(bytes);
    ops_to_host(h.data(), d, bytes);
    return h;
}
static inline void poison_bf(floatX* d, size_t n) {
    std::vector<uint16_t> b(n, 0x7FC0); /* bf16 quiet NaN */
    ops_from_host(d, b.data(), n * 2);
}
static inline void poison_f32(float* d, size_t n) {
    vecf b(n, nanf(""));
    ops_from_host(d, b.data(), n * 4);
}

/* ops_free of every buffer of a test */
static inline void free_all(std::initializer_list<void*> bufs) {
    for (void* p : bufs) ops_free(p);
}

/* ---- comparisons -------------------------------------------------------------------- */
static inline size_t count_nan(const vecf& g) {
    size_t k = 0;
    for (float x : g) k += (x != x);
    return k;
}

/* ||g - c|| / ||c|| (or the plain norm of g - c if c is zero) */
static inline double rel_err(const vecf& g, const vecf& c) {
    double num = 0, den = 0;
    for (size_t i = 0; i < c.size(); i++) {
        double d = (double)g[i] - c[i];
        num += d * d;
        den += (double)c[i] * c[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline void check(const char* op, const char* what, const vecf& gpu, const vecf& cpu, double tol) {
    size_t nn = count_nan(gpu);
    if (nn) {
        char note[96];
        snprintf(note, sizeof note, "%zu of %zu elements unwritten/NaN", nn, gpu.size());
        report(op, what, NAN, tol, note);
        return;
    }
    report(op, what, rel_err(gpu, cpu), tol, nullptr);
}

/* increment check for accumulating outputs: (gpu - init) vs (cpu - init) */
static inline void check_inc(const char* op, const char* what, const vecf& gpu, const vecf& cpu, const vecf& init, double tol) {
    vecf dg(gpu.size()), dc(cpu.size());
    for (size_t i = 0; i < gpu.size(); i++) {
        dg[i] = gpu[i] - init[i];
        dc[i] = cpu[i] - init[i];
    }
    check(op, what, dg, dc, tol);
}

static inline void check_bits(const char* op, const char* what, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    size_t diff = 0;
    for (size_t i = 0; i < a.size(); i++) diff += a[i] != b[i];
    char note[64];
    snprintf(note, sizeof note, "%zu of %zu bytes differ", diff, a.size());
    report(op, what, diff ? 1.0 : 0.0, TOL_EXACT, diff ? note : "bit-identical");
}

/* tests/test_ops_gpu_qwen2.cu: the Qwen2 groups (rmsnorm rope swiglu; gqa
 * attention is test_attention's NKV < NH case), run when `only` is NULL or
 * a substring of the group's name */
void test_ops_gpu_qwen2(const char* only);
/* tests/test_ops_gpu_step.cu: the groups adamw, step (the step's scalars) and graph (ops_graph_*) */
void test_ops_gpu_step(const char* only);
/* tests/test_ops_gpu_tma.cu: the group tma (common/cuda_tma.cuh's copies, byte for byte) */
void test_ops_gpu_tma(const char* only);

#endif /* OPS_GPU_TESTING_H */
