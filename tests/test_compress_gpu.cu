/*
 * tests/test_compress_gpu.cu - the CUDA compressors (compress/compress_cuda.h)
 * against the CPU reference (compress.c, taco.c, fp8.c, hadamard.c), BIT FOR BIT.
 *
 * Sections (one table row per section and configuration, PASS/FAIL with the
 * number of sub-cases and the first failure):
 *   selfcheck   the hardware fp8 conversion == fp8.c's integer encoder for
 *               every non-NaN float (both formats); the kernels' Philox words
 *               == rng.h's and == curand_init(seed, stream, i) + curand()
 *   compress    compress_dev bytes == compress() bytes, and the statistics,
 *               for every method, every TACO switch combination, E4M3/E5M2,
 *               RNE and SR, G = 16..256, on Gaussian, outlier, near-zero,
 *               tiny (1e-30), subnormal, huge (overflowing the transform),
 *               all-zero, negative-zero, constant, NaN/inf and wide-range data, sizes
 *               0, 1, 7, 1000, 2560, 12345, 2^20 + 3, bf16 and fp32 inputs, output
 *               and input buffers at every alignment
 *   decompress  decompress_dev (fp32 and bf16 out) == decompress() (NaN
 *               compares equal to NaN; bf16 = round-to-nearest-even of it)
 *   reduce      decompress_reduce_dev of P = 1..8 copies == the CPU's
 *               decompress_sum (fp32 and bf16 out), copies at every alignment
 *   recompress  decompress_reduce_recompress_dev == decompress_sum_recompress
 *               (the CPU's; taco into taco stays in the rotated domain), and
 *               the unfused form's sum (CDEV_REDUCE_ROTATED_F32) ==
 *               decompress_sum_rotated
 *   ranges      the range interface: a chunk cut in K ranges written to
 *               separate buffers, reassembled == the wire; decoded by ranges
 *               == decompress()
 *   sr          stochastic rounding: reproducible per (seed, stream),
 *               different across streams, and unbiased
 * Exit status 0 iff every row passes. Options: --quick (smaller sweep, for
 * the CPU emulator), --no-hw (skip the 2^32-value conversion check),
 * --only SUBSTR (only the configurations whose name contains SUBSTR),
 * --exact (exact-size buffers per compress case, for sanitizers).
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "common/bf16.h"
#include "compress/compress.h"
#include "compress/compress_cuda.h"
#include "compress/methods.h"
#include "compress/rng.h"

/* ---- result table ------------------------------------------------------------ */

struct Row {
    char section[16];
    char name[48];
    long total, failed;
    char first[240];
};
static std::vector<Row> g_rows;

static Row* row(const char* section, const char* name) {
    for (auto& r : g_rows)
        if (!strcmp(r.section, section) && !strcmp(r.name, name)) return &r;
    Row r;
    memset(&r, 0, sizeof(r));
    snprintf(r.section, sizeof(r.section), "%s", section);
    snprintf(r.name, sizeof(r.name), "%s", name);
    g_rows.push_back(r);
    return &g_rows.back();
}

static void record(const char* section, const char* name, int ok, const char* fmt, ...) {
    Row* r = row(section, name);
    r->total++;
    if (!ok) {
        if (!r->failed) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->first, sizeof(r->first), fmt, ap);
            va_end(ap);
        }
        r->failed++;
    }
}

/* ---- data -------------------------------------------------------------------- */

enum Dist { D_GAUSS, D_OUTLIERS, D_NEAR_ZERO, D_TINY, D_SUBNORMAL, D_HUGE, D_ZERO, D_NEG_ZERO, D_CONSTANT, D_NONFINITE, D_ROWS, D_WIDE, NUM_DISTS };
static const char* DIST_NAMES[NUM_DISTS] = {"gaussian", "outliers", "near_zero", "tiny", "subnormal", "huge",
                                            "zero", "neg_zero", "constant", "nonfinite", "row_scales", "wide"};

static double unif(uint64_t s, uint64_t i) { return (rng_u32(77, s, i) + 0.5) / 4294967296.0; }
static double gauss(uint64_t s, uint64_t i) {
    return sqrt(-2.0 * log(unif(s, 2 * i))) * cos(6.283185307179586 * unif(s, 2 * i + 1));
}

static void fill(float* x, size_t n, int d, uint64_t seed) {
    uint64_t s = seed * 32 + (uint64_t)d;
    for (size_t i = 0; i < n; i++) {
        double g = gauss(s, i);
        float v = (float)g;
        switch (d) {
        case D_OUTLIERS:
            if (unif(s + 1, i) < 0.002) v = (float)((g < 0 ? -100.0 : 100.0) * (1.0 + unif(s + 2, i)));
            break;
        case D_NEAR_ZERO: v = (float)(unif(s + 1, i) < 0.01 ? g : 1e-3 * g); break;
        case D_TINY: v = (float)(1e-30 * g); break;
        case D_SUBNORMAL: v = (float)(1e-40 * g); break;        /* float subnormals: the exponent clamps */
        case D_HUGE: v = (float)(3e38 * (g < 0 ? -1.0 : 1.0) * (0.5 + 0.5 * unif(s + 1, i))); break;
        case D_ZERO: v = 0.0f; break;
        case D_NEG_ZERO: v = (i % 3 == 0) ? -0.0f : (float)(-1e-30 * fabs(g)); break;
        case D_CONSTANT: v = 0.7f; break;
        case D_NONFINITE: {
            double u = unif(s + 1, i);
            if (u < 0.004) v = NAN;
            else if (u < 0.008) v = INFINITY;
            else if (u < 0.012) v = -INFINITY;
            if (i >= 256 && i < 512) v = NAN; /* whole groups of NaN */
            break;
        }
        case D_ROWS: v = (float)ldexp(g, -(int)((i / 768) % 25)); break; /* rows of 768 at scales 1 .. 2^-24 */
        case D_WIDE: /* each element at its own scale, from float subnormals up to ~2^(m + 2), m = -6 .. 17
                      * by 64-element group: around the kernels' bounds for skipping the adaptive prescale */
            v = (float)ldexp(g, (int)(unif(s + 1, i) * (150.0 + (double)((i / 64) % 24 - 6))) - 150);
            break;
        default: break;
        }
        x[i] = v;
    }
}

/* first index where two fp32 arrays differ (NaN equals NaN), or -1 */
static long diff_f32(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, &a[i], 4);
        memcpy(&y, &b[i], 4);
        if (x == y) continue;
        if (isnan(a[i]) && isnan(b[i])) continue;
        return (long)i;
    }
    return -1;
}
/* NaN equals NaN here too: the decoders' bf16 stores round with the
 * hardware conversion, whose NaN (0x7FFF) is not bf16.h's 0x7FC0 */
static long diff_bf16(const uint16_t* a, const uint16_t* b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        if (isnan(bf16_to_f32(a[i])) && isnan(bf16_to_f32(b[i]))) continue;
        return (long)i;
    }
    return -1;
}
static long diff_bytes(const uint8_t* a, const uint8_t* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return (long)i;
    return -1;
}

/* The "none" wire is raw fp32: a sum that is NaN carries the payload the
 * hardware's arithmetic gives it (x86 keeps the operand's quiet NaN, the GPU
 * returns its canonical 0x7fffffff), so NaN words compare equal whatever
 * their payload; every other word must match bit for bit. */
static long diff_fp32_words(const uint8_t* a, const uint8_t* b, size_t n) {
    for (size_t i = 0; i + 4 <= n; i += 4) {
        float x, y;
        memcpy(&x, a + i, 4);
        memcpy(&y, b + i, 4);
        if (memcmp(a + i, b + i, 4) != 0 && !(isnan(x) && isnan(y))) return (long)i;
    }
    return -1;
}

/* ---- configurations -------------------------------------------------------- */

struct Cfg {
    char name[48];
    CompressParams p;
    int groups; /* 1: G matters */
};
static std::vector<Cfg> g_cfgs;

static void add_cfg(const char* name, CompressMethod m, Fp8Format f, int sr, int h, int a, int d, float delayed) {
    Cfg c;
    memset(&c, 0, sizeof(c));
    snprintf(c.name, sizeof(c.name), "%s", name);
    compress_params_default(&c.p, m);
    c.p.format = f;
    c.p.stochastic = sr;
    c.p.seed = 0x1234567890ABCDEFull;
    c.p.hadamard = h;
    c.p.adaptive_scale = a;
    c.p.dual_scale = d;
    if (delayed > 0.0f) {
        c.p.delayed = 1;
        c.p.delayed_amax = delayed;
    }
    c.groups = compress_method_uses_groups(m);
    g_cfgs.push_back(c);
}

static void build_cfgs(void) {
    add_cfg("none", CM_NONE, FP8_E4M3, 0, 1, 1, 1, 0);
    add_cfg("bf16", CM_BF16, FP8_E4M3, 0, 1, 1, 1, 0);
    add_cfg("cast", CM_CAST, FP8_E4M3, 0, 1, 1, 1, 0);
    add_cfg("cast_e5m2", CM_CAST, FP8_E5M2, 0, 1, 1, 1, 0);
    add_cfg("cast_sr", CM_CAST, FP8_E4M3, 1, 1, 1, 1, 0);
    add_cfg("fp8_tensor", CM_FP8_TENSOR, FP8_E4M3, 0, 1, 1, 1, 0);
    add_cfg("fp8_tensor_e5m2", CM_FP8_TENSOR, FP8_E5M2, 0, 1, 1, 1, 0);
    add_cfg("fp8_tensor_sr", CM_FP8_TENSOR, FP8_E4M3, 1, 1, 1, 1, 0);
    add_cfg("fp8_tensor_delayed", CM_FP8_TENSOR, FP8_E4M3, 0, 1, 1, 1, 2.5f);
    add_cfg("fp8_tensor_delayed_low", CM_FP8_TENSOR, FP8_E4M3, 0, 1, 1, 1, 0.01f);
    add_cfg("fp8_group", CM_FP8_GROUP, FP8_E4M3, 0, 1, 1, 1, 0);
    add_cfg("fp8_group_e5m2", CM_FP8_GROUP, FP8_E5M2, 0, 1, 1, 1, 0);
    add_cfg("fp8_group_sr", CM_FP8_GROUP, FP8_E4M3, 1, 1, 1, 1, 0);
    add_cfg("int8_group", CM_INT8_GROUP, FP8_E4M3, 0, 1, 1, 1, 0);
    add_cfg("int8_group_sr", CM_INT8_GROUP, FP8_E4M3, 1, 1, 1, 1, 0);
    for (int f = 0; f < 2; f++)
        for (int sr = 0; sr < 2; sr++)
            for (int h = 1; h >= 0; h--)
                for (int a = 1; a >= 0; a--)
                    for (int d = 1; d >= 0; d--) {
                        char name[48];
                        snprintf(name, sizeof(name), "taco%s%s%s%s%s", h ? "" : "-had", a ? "" : "-ada", d ? "" : "-dual",
                                 f ? "_e5m2" : "", sr ? "_sr" : "");
                        add_cfg(name, CM_TACO, (Fp8Format)f, sr, h, a, d, 0);
                    }
    add_cfg("taco_delayed", CM_TACO, FP8_E4M3, 0, 1, 1, 1, 3.0f);
    add_cfg("taco_delayed_low", CM_TACO, FP8_E4M3, 0, 1, 1, 1, 0.05f); /* saturates, counted */
    add_cfg("taco_delayed_e5m2_sr", CM_TACO, FP8_E5M2, 1, 1, 1, 1, 3.0f);
    add_cfg("taco-ada_delayed", CM_TACO, FP8_E4M3, 0, 1, 0, 1, 1.0f);
}

static const Cfg* find_cfg(const char* name) {
    for (auto& c : g_cfgs)
        if (!strcmp(c.name, name)) return &c;
    fprintf(stderr, "test: no configuration %s\n", name);
    exit(2);
}

/* ---- device buffers ------------------------------------------------------------ */

#define TCHECK(call) CUDA_CHECK(call)

struct Bufs {
    size_t cap;
    void* x;          /* input (bf16 or fp32), room for +16 bytes of misalignment */
    uint8_t* wire;    /* compressed, +16 */
    uint8_t* wire2;   /* a second wire */
    float* y;         /* decoded fp32 */
    uint16_t* yb;     /* decoded bf16 */
    CompressStatsDev* st;
};
static Bufs B;

static void bufs_init(size_t nmax) {
    B.cap = nmax;
    TCHECK(cudaMalloc((void**)&B.x, 4 * nmax + 64));
    TCHECK(cudaMalloc((void**)&B.wire, 4 * nmax + 4 * (nmax / 16 + 2) + 64));
    TCHECK(cudaMalloc((void**)&B.wire2, 4 * nmax + 4 * (nmax / 16 + 2) + 64));
    TCHECK(cudaMalloc((void**)&B.y, 4 * nmax + 64));
    TCHECK(cudaMalloc((void**)&B.yb, 2 * nmax + 64));
    B.st = compress_stats_dev_alloc(1);
}

static int g_quick = 0, g_no_hw = 0, g_exact = 0;
static const char* g_only = NULL; /* --only SUBSTR: configurations whose name contains it */
static int selected(const char* name) { return !g_only || strstr(name, g_only) != NULL; }

/* ---- sections ------------------------------------------------------------------ */

static void test_selfcheck(void) {
    /* SR's rounding against the integer encoder: every float on the card, a
     * sample of them (every 65521st pattern) under the emulator */
    for (int f = 0; f < 2; f++) {
#ifdef CC_EMU
        const uint64_t step = 65521;
#else
        const uint64_t step = g_quick ? 257 : 1;
#endif
        uint32_t first = 0;
        unsigned long long bad = compress_dev_selftest_sr((Fp8Format)f, step, &first);
        record("selfcheck", f ? "sr_cut_e5m2" : "sr_cut_e4m3", bad == 0,
               "%llu (float, byte) pairs round differently from the integer encoder, first bits 0x%08x", bad, first);
    }
#ifdef CC_EMU
    record("selfcheck", "fp8_hw_e4m3", 1, "");
    record("selfcheck", "fp8_hw_e5m2", 1, "");
    printf("selfcheck: hardware fp8 conversion skipped (emulator: checked against NVIDIA's host reference instead)\n");
#else
    if (!g_no_hw) {
        for (int f = 0; f < 2; f++) {
            uint32_t first = 0;
            unsigned long long bad = compress_dev_selftest_fp8((Fp8Format)f, &first);
            record("selfcheck", f ? "fp8_hw_e5m2" : "fp8_hw_e4m3", bad == 0,
                   "%llu of 2^32 floats convert differently, first bits 0x%08x", bad, first);
        }
    }
#endif
    const uint64_t seeds[3] = {0, 1234, 0xDEADBEEFCAFEF00Dull}, streams[3] = {0, 5, 0x9E3779B97F4A7C15ull};
    const size_t n = 4099;
    std::vector<uint32_t> w(n);
    for (int t = 0; t < 3; t++) {
        unsigned long long bad = compress_dev_selftest_philox(seeds[t], streams[t], n, w.data());
        long first = -1;
        for (size_t i = 0; i < n && first < 0; i++)
            if (w[i] != rng_u32(seeds[t], streams[t], i)) first = (long)i;
        record("selfcheck", "philox_vs_rng.h", first < 0, "seed %llu stream %llu: word %ld differs", (unsigned long long)seeds[t],
               (unsigned long long)streams[t], first);
        record("selfcheck", "philox_vs_curand_init", bad == 0, "%llu words differ from curand_init+curand", bad);
    }
}

/* one compress + decompress case against the CPU. With --exact every device
 * buffer of the case is allocated to its exact size (so that a sanitizer
 * build of the emulator, or compute-sanitizer on the GPU, sees any access
 * past its end) instead of using the shared buffers. */
static void check_case(const Cfg& c, int G, int dist, size_t n, int bf16, int align, uint64_t seed) {
    CompressParams p = c.p;
    p.group_size = G;
    const Bufs shared = B;
    if (g_exact) {
        const size_t bound = compress_bound(&p, n);
        TCHECK(cudaMalloc((void**)&B.x, (bf16 ? 2 : 4) * (n + (size_t)(align % 8))));
        TCHECK(cudaMalloc((void**)&B.wire, bound + (size_t)align));
        TCHECK(cudaMalloc((void**)&B.y, 4 * (n + (size_t)(align % 4))));
        TCHECK(cudaMalloc((void**)&B.yb, 2 * (n + (size_t)(align % 8))));
    }
    char what[200];
    snprintf(what, sizeof(what), "%s G=%d %s n=%zu %s align=%d", c.name, G, DIST_NAMES[dist], n, bf16 ? "bf16" : "f32", align);
    std::vector<float> xf(n ? n : 1);
    std::vector<uint16_t> xb(n ? n : 1);
    fill(xf.data(), n, dist, seed);
    if (bf16)
        for (size_t i = 0; i < n; i++) {
            xb[i] = bf16_from_f32(xf[i]);
            xf[i] = bf16_to_f32(xb[i]); /* the CPU compresses exactly what the GPU reads */
        }
    const size_t bound = compress_bound(&p, n);
    std::vector<uint8_t> ref(bound + 1), got(bound + 16);
    CompressStats cst;
    compress(&p, xf.data(), n, 7 + seed, ref.data(), &cst);

    /* x at an offset that keeps the element alignment but may break the 16-byte one */
    uint8_t* xdev = (uint8_t*)B.x + (bf16 ? 2 : 4) * (size_t)(align % 8);
    TCHECK(cudaMemcpy(xdev, bf16 ? (const void*)xb.data() : (const void*)xf.data(), n * (bf16 ? 2 : 4), cudaMemcpyHostToDevice));
    uint8_t* wdev = B.wire + align;
    const uint8_t guard = 0xA5;
    const size_t wspan = g_exact ? bound + (size_t)align : bound + 16; /* bytes of B.wire this case looks at */
    TCHECK(cudaMemset(B.wire, guard, wspan));
    compress_stats_dev_reset(B.st, 1, 0);
    size_t w = compress_dev(&p, xdev, bf16, n, 7 + seed, wdev, B.st, 0);
    CompressStats gst = compress_stats_dev_read(B.st, 1, NULL, 0);
    TCHECK(cudaMemcpy(got.data(), B.wire, wspan, cudaMemcpyDeviceToHost));
    long d = diff_bytes(ref.data(), got.data() + align, bound);
    int guard_ok = 1;
    for (int i = 0; i < align; i++) guard_ok &= got[i] == guard;
    if (align + bound < wspan) guard_ok &= got[align + bound] == guard;
    uint32_t ra, ga;
    memcpy(&ra, &cst.amax, 4);
    memcpy(&ga, &gst.amax, 4);
    int stats_ok = cst.saturated == gst.saturated && cst.nonfinite == gst.nonfinite && ra == ga;
    char detail[160] = "";
    if (d >= 0) snprintf(detail, sizeof(detail), "byte %ld of %zu: cpu 0x%02x gpu 0x%02x", d, bound, ref[d], got[align + d]);
    else if (!guard_ok) snprintf(detail, sizeof(detail), "wrote outside its %zu bytes", bound);
    else if (w != bound) snprintf(detail, sizeof(detail), "returned %zu, bound %zu", w, bound);
    else if (!stats_ok)
        snprintf(detail, sizeof(detail), "stats cpu sat %llu nf %llu amax %a, gpu sat %llu nf %llu amax %a",
                 (unsigned long long)cst.saturated, (unsigned long long)cst.nonfinite, cst.amax,
                 (unsigned long long)gst.saturated, (unsigned long long)gst.nonfinite, gst.amax);
    record("compress", c.name, d < 0 && guard_ok && w == bound && stats_ok, "%s: %s", what, detail);

    /* decode the CPU's bytes (uploaded at the same misalignment) */
    std::vector<float> yref(n ? n : 1), yf(n ? n : 1);
    std::vector<uint16_t> yb(n ? n : 1), ybref(n ? n : 1);
    decompress(&p, ref.data(), n, yref.data());
    TCHECK(cudaMemcpy(wdev, ref.data(), bound, cudaMemcpyHostToDevice));
    float* ydev = B.y + (align % 4);
    decompress_dev(&p, wdev, n, ydev, 0, 0);
    TCHECK(cudaMemcpy(yf.data(), ydev, n * 4, cudaMemcpyDeviceToHost));
    long e = diff_f32(yref.data(), yf.data(), n);
    record("decompress", c.name, e < 0, "%s: element %ld: cpu %a gpu %a", what, e, e >= 0 ? yref[e] : 0.0f, e >= 0 ? yf[e] : 0.0f);
    uint16_t* ybdev = B.yb + (align % 8);
    decompress_dev(&p, wdev, n, ybdev, 1, 0);
    TCHECK(cudaMemcpy(yb.data(), ybdev, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) ybref[i] = bf16_from_f32(yref[i]);
    e = diff_bf16(ybref.data(), yb.data(), n);
    record("decompress", "bf16 output", e < 0, "%s: element %ld: cpu 0x%04x gpu 0x%04x", what, e, e >= 0 ? ybref[e] : 0,
           e >= 0 ? yb[e] : 0);
    if (g_exact) {
        TCHECK(cudaFree(B.x));
        TCHECK(cudaFree(B.wire));
        TCHECK(cudaFree(B.y));
        TCHECK(cudaFree(B.yb));
        B = shared;
    }
}

static void test_compress_sweep(void) {
    /* 2560 = 40 full units: a last warp of full units and units past the end */
    const size_t small[] = {0, 1, 7, 1000, 2560, 12345};
    const size_t quick[] = {1, 7, 1000, 2560, 4099};
    const int Gs[] = {16, 32, 64, 128, 256}, Gq[] = {16, 64, 128, 256}; /* 128: two lanes per group */
    const int dq[] = {D_GAUSS, D_OUTLIERS, D_NONFINITE, D_TINY, D_HUGE, D_NEG_ZERO, D_WIDE};
    long cases = 0;
    for (const Cfg& c : g_cfgs) {
        if (!selected(c.name)) continue;
        const int nG = c.groups ? (g_quick ? 4 : 5) : 1;
        for (int gi = 0; gi < nG; gi++) {
            int G = c.groups ? (g_quick ? Gq[gi] : Gs[gi]) : 64;
            const int nd = g_quick ? (int)(sizeof(dq) / sizeof(dq[0])) : NUM_DISTS;
            for (int di = 0; di < nd; di++) {
                int dist = g_quick ? dq[di] : di;
                const int ns = g_quick ? 5 : 6;
                for (int si = 0; si < ns; si++) {
                    size_t n = g_quick ? quick[si] : small[si];
                    int align = (int)(cases % 16);
                    check_case(c, G, dist, n, 1, align, (uint64_t)cases);
                    if (!g_quick && (n == 7 || n == 12345)) check_case(c, G, dist, n, 0, (align * 7) % 16, (uint64_t)cases + 1);
                    cases++;
                }
            }
        }
        if (!g_quick) { /* the big size: several blocks per job, grid-stride loops */
            const int bigG[] = {16, 64, 256};
            const int bigd[] = {D_GAUSS, D_OUTLIERS, D_NONFINITE};
            for (int gi = 0; gi < (c.groups ? 3 : 1); gi++)
                for (int di = 0; di < 3; di++) check_case(c, bigG[gi], bigd[di], (1u << 20) + 3, 1, (int)(cases++ % 16), 99);
        }
    }
}

/* P copies summed: F32, BF16, and the fused recompress */
/* K != 0: every copy's second scales (chunk header and tile words) replaced
 * by 2^-K after encoding (by 2^-K1 after the first copy, if K1 != 0). K
 * near 127 makes the copies decode to values near and past FLT_MAX: a
 * copy's scaled code overflows, or nearly, and the sums of copies of both
 * signs show whether a copy is added with the general path's two roundings
 * (cuda_fast.cuh's fast_copy); K = -25, K1 = 92 puts the later copies
 * 2^117 above the first, where a sum relative to the first copy's scale
 * overflows though the sum itself does not, and K = 50, K1 = 115 makes the sum itself overflow where the
 * relative one does not (fold_many_ok); K = -118 puts the values near the
 * subnormal range. */
static void check_reduce(const Cfg& c, int G, int dist, size_t n, int P, uint64_t seed, int K = 0, int K1 = 0) {
    CompressParams p = c.p;
    p.group_size = G;
    char what[200];
    snprintf(what, sizeof(what), "%s G=%d %s n=%zu P=%d K=%d/%d", c.name, G, DIST_NAMES[dist], n, P, K, K1);
    const CompressWireLayout lw = compress_wire_layout(&p);
    const size_t bound = compress_bound(&p, n);
    std::vector<std::vector<uint8_t>> wires(P, std::vector<uint8_t>(bound + 1));
    std::vector<float> x(n ? n : 1), sum(n ? n : 1, 0.0f);
    std::vector<uint8_t*> dptr(P);
    std::vector<const uint8_t*> hptr(P);
    uint8_t* base = B.wire2;
    size_t off = 0;
    for (int i = 0; i < P; i++) {
        fill(x.data(), n, dist, seed * 16 + (uint64_t)i);
        compress(&p, x.data(), n, 100 + (uint64_t)i, wires[i].data(), NULL);
        if (K != 0) {
            const int Ki = i > 0 && K1 != 0 ? K1 : K;
            const uint32_t sbits = (uint32_t)(127 - Ki) << 23; /* 2^-Ki */
            const size_t words = (lw.hdr ? 1 : 0) + (lw.tbytes ? compress_wire_tiles(&lw, 0, n) : 0);
            for (size_t wi = 0; wi < words; wi++) memcpy(wires[i].data() + 4 * wi, &sbits, 4);
        }
        hptr[i] = wires[i].data();
        off += (size_t)(3 * i + 1); /* every copy at another alignment */
        dptr[i] = base + off;
        TCHECK(cudaMemcpy(dptr[i], wires[i].data(), bound, cudaMemcpyHostToDevice));
        off += bound;
    }
    if (off + 64 > 4 * B.cap) { fprintf(stderr, "test: reduce buffers too small\n"); exit(2); }
    if (n) decompress_sum(&p, hptr.data(), P, n, sum.data());
    std::vector<float> got(n ? n : 1);
    decompress_reduce_dev(&p, dptr.data(), P, n, B.y, CDEV_SUM_F32, 0);
    TCHECK(cudaMemcpy(got.data(), B.y, n * 4, cudaMemcpyDeviceToHost));
    long e = diff_f32(sum.data(), got.data(), n);
    record("reduce", c.name, e < 0, "%s f32: element %ld: cpu %a gpu %a", what, e, e >= 0 ? sum[e] : 0.f, e >= 0 ? got[e] : 0.f);

    std::vector<uint16_t> gb(n ? n : 1), rb(n ? n : 1);
    decompress_reduce_dev(&p, dptr.data(), P, n, B.yb + 1, CDEV_SUM_BF16, 0);
    TCHECK(cudaMemcpy(gb.data(), B.yb + 1, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) rb[i] = bf16_from_f32(sum[i]);
    e = diff_bf16(rb.data(), gb.data(), n);
    record("reduce", "bf16 output", e < 0, "%s: element %ld", what, e);

    /* fused recompress of the sum, into several output methods */
    CompressParams outs[7];
    const char* out_names[7] = {"same", "delayed", "fp8_group", "none", "cast_e5m2", "int8_group(unfused)", "bf16"};
    outs[0] = p;
    outs[1] = p;
    outs[1].delayed = 1;
    outs[1].delayed_amax = 2.0f;
    compress_params_default(&outs[2], CM_FP8_GROUP);
    outs[2].group_size = G;
    compress_params_default(&outs[3], CM_NONE);
    compress_params_default(&outs[4], CM_CAST);
    outs[4].format = FP8_E5M2;
    compress_params_default(&outs[5], CM_INT8_GROUP);
    outs[5].group_size = G;
    compress_params_default(&outs[6], CM_BF16);
    for (int o = 0; o < 7; o++) {
        const CompressParams* po = &outs[o];
        size_t ob = compress_bound(po, n);
        std::vector<uint8_t> ref(ob + 1), gw(ob + 1);
        CompressStats cst;
        decompress_sum_recompress(&p, hptr.data(), P, n, po, 555, ref.data(), &cst);
        compress_stats_dev_reset(B.st, 1, 0);
        uint8_t* out = B.wire + (o * 5) % 16;
        size_t w = decompress_reduce_recompress_dev(&p, dptr.data(), P, n, po, 555, out, B.st, 0);
        CompressStats gst = compress_stats_dev_read(B.st, 1, NULL, 0);
        TCHECK(cudaMemcpy(gw.data(), out, ob, cudaMemcpyDeviceToHost));
        long d = po->method == CM_NONE ? diff_fp32_words(ref.data(), gw.data(), ob) : diff_bytes(ref.data(), gw.data(), ob);
        int stats_ok = cst.saturated == gst.saturated && cst.nonfinite == gst.nonfinite && cst.amax == gst.amax;
        char name[64];
        snprintf(name, sizeof(name), "-> %s", out_names[o]);
        record("recompress", name, d < 0 && w == ob && stats_ok, "%s: byte %ld of %zu (cpu 0x%02x gpu 0x%02x) stats %d", what, d,
               ob, d >= 0 ? ref[d] : 0, d >= 0 ? gw[d] : 0, stats_ok);
    }
    /* the sum the recompress encodes, written out (the unfused all-reduce's first pass) */
    if (n) decompress_sum_rotated(&p, &p, hptr.data(), P, n, sum.data());
    const CompressWireLayout l = compress_wire_layout(&p);
    CompressJobDev j;
    memset(&j, 0, sizeof(j));
    j.n = n;
    j.e1 = n;
    j.y = B.y;
    j.nin = P;
    for (int i = 0; i < P; i++) {
        j.in[i].scale = (l.hdr || l.tbytes) ? dptr[i] : NULL;
        j.in[i].exps = l.gbytes ? dptr[i] + compress_wire_groups_offset(&l, n) : NULL;
        j.in[i].codes = dptr[i] + compress_wire_codes_offset(&l, n);
    }
    decompress_jobs_dev(&p, &j, 1, CDEV_REDUCE_ROTATED_F32, &p, 0);
    TCHECK(cudaMemcpy(got.data(), B.y, n * 4, cudaMemcpyDeviceToHost));
    e = diff_f32(sum.data(), got.data(), n);
    record("reduce", "rotated f32", e < 0, "%s: element %ld: cpu %a gpu %a", what, e, e >= 0 ? sum[e] : 0.f, e >= 0 ? got[e] : 0.f);
}

static void test_reduce(void) {
    const char* names[] = {"none", "cast", "fp8_tensor", "fp8_group", "int8_group", "taco", "taco_e5m2", "taco_sr",
                           "taco-had", "taco-dual", "taco-ada-dual", "taco_delayed_low"};
    /* 2560: a last warp of full units and units past the end (cuda_fast.cuh's fast_sum) */
    const size_t sizes[] = {1, 1000, 2560, 12345, (1u << 18) + 5};
    const int Ps[] = {1, 2, 3, 4, 8};
    long k = 0;
    for (const char* nm : names) {
        if (!selected(nm)) continue;
        const Cfg* c = find_cfg(nm);
        const int Gs[] = {16, 64, 256};
        for (int gi = 0; gi < (c->groups ? 3 : 1); gi++)
            for (int si = 0; si < (g_quick ? 4 : 5); si++)
                for (int pi = 0; pi < (g_quick ? 4 : 5); pi++) {
                    /* negative zeros: 0.0f + (-0.0f) is +0, so they show whether the sum starts at 0.0f */
                    /* huge: the rotated-domain sum overflows (stays rotated no longer); wide: the
                     * prescale's fold bounds */
                    const int dists[6] = {D_GAUSS, D_OUTLIERS, D_NONFINITE, D_NEG_ZERO, D_HUGE, D_WIDE};
                    int dist = dists[k % 6];
                    if (si == 4 && pi != 2) continue; /* the big size once */
                    check_reduce(*c, Gs[gi], dist, g_quick && si == 3 ? 4099 : sizes[si], Ps[pi], (uint64_t)k);
                    k++;
                }
    }
    /* copies decoding to values near FLT_MAX (check_reduce's K): past 2^(127 - 9)
     * (E4M3) or 2^(127 - 16) (E5M2) a copy's scaled code may overflow */
    const char* fp8_names[] = {"fp8_tensor", "fp8_group", "taco", "taco_e5m2", "taco-had"};
    for (const char* nm : fp8_names) {
        if (!selected(nm)) continue;
        const Cfg* c = find_cfg(nm);
        const int e5 = c->p.format == FP8_E5M2;
        const int K = e5 ? 114 : 121;
        for (int G : {64, 128}) {
            if (G == 128 && !c->groups) continue;
            for (int P = 2; P <= 3; P++)
                for (size_t n : {(size_t)2560, (size_t)12345}) {
                    check_reduce(*c, G, D_GAUSS, n, P, (uint64_t)(k++), K);
                    /* the sum relative to the first copy's scale overflows, or the sum itself does */
                    check_reduce(*c, G, D_GAUSS, n, P, (uint64_t)(k++), e5 ? -20 : -25, e5 ? 90 : 92);
                    check_reduce(*c, G, D_GAUSS, n, P, (uint64_t)(k++), 50, e5 ? 108 : 115);
                    check_reduce(*c, G, D_OUTLIERS, n, P, (uint64_t)(k++), -118);
                }
        }
    }
}

/* the range interface: a chunk compressed in K ranges into separate buffers */
static void check_ranges(const Cfg& c, int G, size_t n, int K, uint64_t seed) {
    CompressParams p = c.p;
    p.group_size = G;
    char what[160];
    snprintf(what, sizeof(what), "%s G=%d n=%zu K=%d", c.name, G, n, K);
    const CompressWireLayout l = compress_wire_layout(&p);
    std::vector<float> x(n);
    fill(x.data(), n, D_OUTLIERS, seed);
    const size_t bound = compress_bound(&p, n), ng = (n + l.G - 1) / l.G;
    std::vector<uint8_t> ref(bound);
    compress(&p, x.data(), n, 9, ref.data(), NULL);
    TCHECK(cudaMemcpy(B.x, x.data(), n * 4, cudaMemcpyHostToDevice));
    /* ranges on multiples of gran; each range's group and element bytes at odd offsets of their own */
    const size_t nb = (n + l.gran - 1) / l.gran;
    std::vector<CompressJobDev> jobs(K);
    std::vector<size_t> eoff(K), goff(K), soff(K);
    size_t cursor = 32;
    uint8_t* dev = B.wire2;
    for (int k = 0; k < K; k++) {
        CompressJobDev& j = jobs[k];
        memset(&j, 0, sizeof(j));
        j.n = n;
        j.e0 = nb * k / K * l.gran;
        j.e1 = nb * (k + 1) / K * l.gran;
        if (j.e0 > n) j.e0 = n;
        if (j.e1 > n) j.e1 = n;
        j.x = B.x;
        soff[k] = cursor + 2; /* the range's tile scales (tiled methods) */
        cursor = soff[k] + 4 * compress_wire_tiles(&l, j.e0, j.e1);
        goff[k] = cursor + 3;
        cursor = goff[k] + 4 * ((j.e1 - j.e0) / l.G + 2);
        eoff[k] = cursor + 5;
        cursor = eoff[k] + 4 * (j.e1 - j.e0) + 16;
        j.out.scale = l.tbytes ? dev + soff[k] : dev + 1; /* the chunk scale at byte 1 */
        j.out.exps = dev + goff[k];
        j.out.codes = dev + eoff[k];
        j.stream = 9;
        j.st = B.st;
    }
    compress_stats_dev_reset(B.st, 1, 0);
    compress_jobs_amax_dev(&p, 0, jobs.data(), K, 0);
    compress_jobs_encode_dev(&p, 0, jobs.data(), K, 0);
    std::vector<uint8_t> all(cursor), wire(bound);
    TCHECK(cudaMemcpy(all.data(), dev, cursor, cudaMemcpyDeviceToHost));
    size_t at = 0;
    if (l.hdr) { memcpy(wire.data(), all.data() + 1, 4); at = 4; }
    for (int k = 0; k < K; k++) { /* the tile scales of all ranges, their group bytes, then the element bytes */
        const size_t nt = l.tbytes * compress_wire_tiles(&l, jobs[k].e0, jobs[k].e1);
        memcpy(wire.data() + at, all.data() + soff[k], nt);
        at += nt;
    }
    for (int k = 0; k < K; k++) {
        size_t g0 = jobs[k].e0 / l.G, g1 = (jobs[k].e1 + l.G - 1) / l.G;
        memcpy(wire.data() + at, all.data() + goff[k], l.gbytes * (g1 - g0));
        at += l.gbytes * (g1 - g0);
    }
    (void)ng;
    for (int k = 0; k < K; k++) {
        memcpy(wire.data() + at, all.data() + eoff[k], l.ebytes * (jobs[k].e1 - jobs[k].e0));
        at += l.ebytes * (jobs[k].e1 - jobs[k].e0);
    }
    long d = at == bound ? diff_bytes(ref.data(), wire.data(), bound) : 0;
    record("ranges", c.name, d < 0 && at == bound, "%s: encode: byte %ld (assembled %zu of %zu)", what, d, at, bound);
    /* decode by ranges from the same scattered parts */
    for (int k = 0; k < K; k++) {
        CompressJobDev& j = jobs[k];
        j.y = B.y;
        j.nin = 1;
        j.in[0].scale = l.tbytes ? dev + soff[k] : dev + 1;
        j.in[0].exps = dev + goff[k];
        j.in[0].codes = dev + eoff[k];
    }
    decompress_jobs_dev(&p, jobs.data(), K, CDEV_DECODE_F32, NULL, 0);
    std::vector<float> yref(n), y(n);
    decompress(&p, ref.data(), n, yref.data());
    TCHECK(cudaMemcpy(y.data(), B.y, n * 4, cudaMemcpyDeviceToHost));
    long e = diff_f32(yref.data(), y.data(), n);
    record("ranges", "decode by ranges", e < 0, "%s: element %ld", what, e);
}

static void test_ranges(void) {
    const char* names[] = {"taco", "taco_delayed", "taco_sr", "fp8_tensor", "fp8_group", "none", "int8_group", "cast"};
    const int Ks[] = {1, 2, 3, 7};
    long k = 0;
    for (const char* nm : names) {
        if (!selected(nm)) continue;
        const Cfg* c = find_cfg(nm);
        const int Gs[] = {16, 256};
        for (int gi = 0; gi < (c->groups ? 2 : 1); gi++)
            for (int ki = 0; ki < 4; ki++) {
                check_ranges(*c, Gs[gi], 12345, Ks[ki], (uint64_t)k++);
                check_ranges(*c, Gs[gi], 1000, Ks[ki], (uint64_t)k++);
            }
    }
}

/* stochastic rounding: reproducible, stream-dependent, unbiased */
static void test_sr(void) {
    const size_t n = g_quick ? 2048 : 16384;
    const int S = g_quick ? 64 : 256;
    const char* names[] = {"cast_sr", "taco_sr", "fp8_group_sr"};
    for (const char* nm : names) {
        if (!selected(nm)) continue;
        CompressParams p = find_cfg(nm)->p;
        p.group_size = 64;
        std::vector<float> x(n), y(n);
        std::vector<double> mean(n, 0.0);
        for (size_t i = 0; i < n; i++) x[i] = (float)(1.0 + unif(5, i)); /* [1, 2): between the E4M3 grid points */
        TCHECK(cudaMemcpy(B.x, x.data(), n * 4, cudaMemcpyHostToDevice));
        const size_t bound = compress_bound(&p, n);
        std::vector<uint8_t> a(bound), b(bound), cbytes(bound);
        compress_dev(&p, B.x, 0, n, 3, B.wire, NULL, 0);
        TCHECK(cudaMemcpy(a.data(), B.wire, bound, cudaMemcpyDeviceToHost));
        compress_dev(&p, B.x, 0, n, 3, B.wire, NULL, 0);
        TCHECK(cudaMemcpy(b.data(), B.wire, bound, cudaMemcpyDeviceToHost));
        compress_dev(&p, B.x, 0, n, 4, B.wire, NULL, 0);
        TCHECK(cudaMemcpy(cbytes.data(), B.wire, bound, cudaMemcpyDeviceToHost));
        record("sr", "reproducible", diff_bytes(a.data(), b.data(), bound) < 0, "%s: same stream, different bytes", nm);
        record("sr", "differs across streams", diff_bytes(a.data(), cbytes.data(), bound) >= 0, "%s: streams 3 and 4 gave the same bytes", nm);
        /* unbiased: E[decoded] = x. The mean error of one draw, m_s, is
         * averaged over S draws; its standard error comes from the spread of
         * the m_s themselves (the Hadamard correlates the errors inside a
         * group, so 1/sqrt(n) of the per-element error would understate it) */
        double err1 = 0.0, nx = 0.0, msum = 0.0, msq = 0.0;
        for (int s = 0; s < S; s++) {
            compress_dev(&p, B.x, 0, n, 1000 + (uint64_t)s, B.wire, NULL, 0);
            decompress_dev(&p, B.wire, n, B.y, 0, 0);
            TCHECK(cudaMemcpy(y.data(), B.y, n * 4, cudaMemcpyDeviceToHost));
            double ms = 0.0;
            for (size_t i = 0; i < n; i++) {
                mean[i] += y[i];
                ms += (double)y[i] - x[i];
                if (s == 0) {
                    err1 += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
                    nx += (double)x[i] * x[i];
                }
            }
            ms /= (double)n;
            msum += ms;
            msq += ms * ms;
        }
        double errm = 0.0;
        for (size_t i = 0; i < n; i++) {
            double m = mean[i] / S - x[i];
            errm += m * m;
        }
        err1 = sqrt(err1 / nx);
        errm = sqrt(errm / nx);
        const double bias = msum / S, se = sqrt(fmax(msq / S - bias * bias, 0.0) / (S - 1));
        /* a biased rounding would stall errm at its bias instead of falling like 1/sqrt(S) */
        int ok = errm < 2.0 * err1 / sqrt((double)S) && fabs(bias) <= 5.0 * se + 1e-7;
        record("sr", "unbiased", ok, "%s: rel err one draw %.3g, mean of %d draws %.3g (ideal %.3g), mean bias %.3g (s.e. %.3g)", nm,
               err1, S, errm, err1 / sqrt((double)S), bias, se);
        printf("sr %-14s rel err: one draw %.4f, mean of %d draws %.5f (1/sqrt(S) ideal %.5f), mean bias %+.2e (s.e. %.1e)\n", nm,
               err1, S, errm, err1 / sqrt((double)S), bias, se);
    }
}

int main(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) g_quick = 1;
        else if (!strcmp(argv[i], "--no-hw")) g_no_hw = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) g_only = argv[++i];
        else if (!strcmp(argv[i], "--exact")) g_exact = 1;
        else {
            fprintf(stderr, "usage: %s [--quick] [--no-hw] [--exact] [--only NAME-SUBSTRING]\n", argv[0]);
            return 2;
        }
    }
#ifndef CC_EMU
    cudaDeviceProp prop;
    TCHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
#else
    printf("device: CPU emulator (tests/emu)\n");
#endif
    build_cfgs();
    bufs_init((1u << 20) + 64);
    test_selfcheck();
    test_compress_sweep();
    test_reduce();
    test_ranges();
    test_sr();
    TCHECK(cudaDeviceSynchronize());

    int failed_rows = 0;
    long cases = 0;
    printf("\n%-11s %-26s %8s  %s\n", "section", "case", "subcases", "result");
    for (const Row& r : g_rows) {
        cases += r.total;
        if (r.failed) failed_rows++;
        printf("%-11s %-26s %8ld  %s", r.section, r.name, r.total, r.failed ? "FAIL" : "PASS");
        if (r.failed) printf(" (%ld failed; first: %s)", r.failed, r.first);
        printf("\n");
    }
    printf("\n%s: %d of %zu rows failed, %ld sub-cases\n", failed_rows ? "FAILED" : "ALL PASS", failed_rows, g_rows.size(), cases);
    return failed_rows ? 1 : 0;
}
