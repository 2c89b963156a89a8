/*
 * tests/attention_emu.cpp - runs the CUDA attention kernels of
 * model/attention_kernels.cuh on the CPU and checks them against the fp32
 * reference (model/ops_cpu.c). No GPU needed: it runs in `make test` on any
 * machine with the CUDA headers (for cuda_bf16.h).
 *
 * How: every CUDA thread of a block is a ucontext coroutine; a scheduler
 * resumes them in turn. The warp-level primitives the kernels are built on
 * are emulated lane by lane from their PTX ISA definitions:
 *   ldmatrix.x4 (.trans)  - each lane gives a row address, each lane gets its
 *                           fragment of four 8x8 b16 matrices;
 *   mma.m16n8k16 bf16     - the A/B/C fragments of 32 lanes are assembled into
 *                           16x16, 16x8, 16x8 matrices, D = A B + C in fp32;
 *   shfl.xor, bar.sync    - exchanges and barriers among coroutines; the
 *                           scheduler resumes random subsets of warps, so
 *                           warps run ahead of each other between barriers;
 *   cp.async              - each copy lands at random either at issue or only
 *                           when the cp.async.wait_group that retires its
 *                           group runs, so a missing wait or barrier shows up
 *                           as stale or clobbered data.
 * Shared memory starts as NaN bytes each block, so a read of anything not
 * written is loud. Every ldmatrix/cp.async address is checked for alignment
 * and range, and the outputs carry guard zones that must stay untouched.
 *
 * What this proves: the kernels' tiling, fragment indexing, C-to-A repacking,
 * masking, online softmax and loop/pipeline logic compute the reference's
 * function. What it cannot: the hardware's own behaviour (the emulation is
 * written from the same reading of the PTX ISA as the kernels), timing, and
 * races that only true concurrency exposes - tests/test_ops_gpu does that on
 * the device.
 *
 * Build (from the repository root):
 *   g++ -std=c++17 -O2 -Wall -Wextra -Wno-unknown-pragmas -Icommon -Imodel -Itests \
 *       -I/usr/local/cuda/include tests/attention_emu.cpp model/ops_cpu.c common/check.c \
 *       $(mpicc --showme:compile) $(mpicc --showme:link) -fopenmp -o build/attention_emu
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <vector>

#include <cuda_bf16.h>

#include "ops.h" /* the fp32 reference: model/ops_cpu.c, floatX = float */

/* ---- the CUDA surface the kernels use ------------------------------------------ */
typedef __nv_bfloat16 bf16;
#define ATT_EMULATE 1
/* cuda_bf16.h (through host_defines.h) gave these host meanings; the kernels
 * become plain host functions here */
#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n)
#define __log2f log2f
using std::min;

struct U3 {
    unsigned x, y, z;
};
static U3 threadIdx, blockIdx, gridDim, blockDim;

#define SMEM_BYTES (256 * 1024)
alignas(16) unsigned char smem_raw[SMEM_BYTES];

static void emu_fail(const char* what) {
    fprintf(stderr, "attention_emu: %s (block %u,%u,%u thread %u)\n", what, blockIdx.x, blockIdx.y, blockIdx.z,
            threadIdx.x);
    exit(1);
}

/* ---- coroutine scheduler ------------------------------------------------------------- */
#define MAX_THREADS 256
#define MAX_WARPS (MAX_THREADS / 32)
#define STACK_BYTES (256 * 1024)

struct Thread {
    ucontext_t uc;
    char* stack;
    bool done;
};
static Thread g_thr[MAX_THREADS];
static ucontext_t g_sched;
static int g_cur;
static std::function<void()> g_body;

static void thread_entry() {
    g_body();
    g_thr[g_cur].done = true; /* returning resumes uc_link = the scheduler */
}
static void emu_yield() { swapcontext(&g_thr[g_cur].uc, &g_sched); }

/* A collective completes when n participants have arrived; the last one
 * computes the result for all. `kind` catches lanes that disagree. */
struct Coll {
    int arrived = 0;
    unsigned gen = 0;
    int kind = -1;
};
static Coll g_warp_coll[MAX_WARPS], g_block_coll;

template <typename F>
static void collective(Coll& c, int n, int kind, F last) {
    if (c.arrived == 0) c.kind = kind;
    else if (c.kind != kind) emu_fail("lanes reached different collectives (divergence)");
    unsigned gen = c.gen;
    if (++c.arrived == n) {
        last();
        c.arrived = 0;
        c.gen++;
        return;
    }
    while (c.gen == gen) emu_yield();
}

struct Copy {
    void* dst;
    const void* src;
    bool valid;
};
struct AsyncState {
    std::vector<Copy> open;
    std::deque<std::vector<Copy>> groups;
};
static AsyncState g_async[MAX_THREADS];

static uint64_t g_sched_rng = 0x853C49E6748FEA9Bull;
static uint64_t sched_rand() {
    g_sched_rng ^= g_sched_rng << 13;
    g_sched_rng ^= g_sched_rng >> 7;
    g_sched_rng ^= g_sched_rng << 17;
    return g_sched_rng >> 11;
}

static void init_thread(int t) {
    if (!g_thr[t].stack) g_thr[t].stack = (char*)malloc(STACK_BYTES);
    if (!g_thr[t].stack) emu_fail("out of memory for coroutine stacks");
    getcontext(&g_thr[t].uc);
    g_thr[t].uc.uc_stack.ss_sp = g_thr[t].stack;
    g_thr[t].uc.uc_stack.ss_size = STACK_BYTES;
    g_thr[t].uc.uc_link = &g_sched;
    makecontext(&g_thr[t].uc, thread_entry, 0);
    g_thr[t].done = false;
    g_async[t] = AsyncState();
}

static void run_block(int nthreads) {
    for (int t = 0; t < nthreads; t++) init_thread(t);
    for (int w = 0; w < MAX_WARPS; w++) g_warp_coll[w] = Coll();
    g_block_coll = Coll();
    /* Each pass resumes a random subset of the warps (never none), so warps
     * drift many steps apart between barriers: a missing __syncthreads or
     * cp.async wait then reads data that is stale or not there yet. */
    const int nwarps = (nthreads + 31) / 32;
    bool busy = true;
    while (busy) {
        busy = false;
        uint32_t run = 0;
        while (!run) run = (uint32_t)(sched_rand() & ((1u << nwarps) - 1u));
        for (int t = 0; t < nthreads; t++) {
            if (g_thr[t].done) continue;
            busy = true;
            if (!((run >> (t / 32)) & 1u)) continue;
            g_cur = t;
            threadIdx = U3{(unsigned)t, 0, 0};
            swapcontext(&g_sched, &g_thr[t].uc);
        }
    }
}

/* ---- emulated primitives ------------------------------------------------------------------- */
static int lane_id() { return threadIdx.x & 31; }
static int warp_id() { return threadIdx.x >> 5; }

struct WarpBuf {
    const bf16* addr[32];
    uint32_t r[32][4];
    float fin[32], fout[32];
    uint32_t a[32][4], b[32][2];
    float c[32][4], d[32][4];
};
static WarpBuf g_wb[MAX_WARPS];

static void __syncthreads() {
    collective(g_block_coll, (int)blockDim.x, 100, [] {});
}

static float __shfl_xor_sync(unsigned mask, float v, int o) {
    if (mask != 0xffffffffu) emu_fail("partial shuffle masks are not emulated");
    WarpBuf& wb = g_wb[warp_id()];
    wb.fin[lane_id()] = v;
    collective(g_warp_coll[warp_id()], 32, 1, [&] {
        for (int l = 0; l < 32; l++) wb.fout[l] = wb.fin[l ^ o];
    });
    return wb.fout[lane_id()];
}

static bool in_smem(const void* p, size_t bytes) {
    return (const unsigned char*)p >= smem_raw && (const unsigned char*)p + bytes <= smem_raw + SMEM_BYTES;
}

/* global memory the kernels may read (registered by the test) */
static std::vector<std::pair<const unsigned char*, size_t>> g_readable;
static bool in_global(const void* p, size_t bytes) {
    const unsigned char* q = (const unsigned char*)p;
    for (auto& r : g_readable)
        if (q >= r.first && q + bytes <= r.first + r.second) return true;
    return false;
}

static void cp_async16(void* smem, const void* gmem, bool valid) {
    if (((uintptr_t)smem & 15) || ((uintptr_t)gmem & 15)) emu_fail("cp.async address not 16-byte aligned");
    if (!in_smem(smem, 16)) emu_fail("cp.async destination outside shared memory");
    if (valid && !in_global(gmem, 16)) emu_fail("cp.async source outside the input tensors");
    /* the hardware may land the copy any time between issue and wait: here
     * either at once or at the wait that retires it, at random */
    if (sched_rand() & 1) {
        if (valid) memcpy(smem, gmem, 16);
        else memset(smem, 0, 16);
        return;
    }
    g_async[threadIdx.x].open.push_back(Copy{smem, gmem, valid});
}
static void cp_async_commit() {
    AsyncState& s = g_async[threadIdx.x];
    s.groups.push_back(s.open);
    s.open.clear();
}
template <int N>
static void cp_async_wait() {
    AsyncState& s = g_async[threadIdx.x];
    while ((int)s.groups.size() > N) {
        for (const Copy& c : s.groups.front()) {
            if (c.valid) memcpy(c.dst, c.src, 16);
            else memset(c.dst, 0, 16);
        }
        s.groups.pop_front();
    }
}

static uint16_t bits_of(bf16 h) {
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static void ldsm_common(uint32_t (&r)[4], const bf16* p, bool trans) {
    if ((uintptr_t)p & 15) emu_fail("ldmatrix row address not 16-byte aligned");
    if (!in_smem(p, 16)) emu_fail("ldmatrix row outside shared memory");
    WarpBuf& wb = g_wb[warp_id()];
    wb.addr[lane_id()] = p;
    collective(g_warp_coll[warp_id()], 32, trans ? 3 : 2, [&] {
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++) {
                const bf16* const* rows = &wb.addr[8 * i]; /* matrix i: rows from lanes 8i..8i+7 */
                uint16_t e0, e1;
                if (!trans) {
                    e0 = bits_of(rows[l / 4][2 * (l % 4)]);
                    e1 = bits_of(rows[l / 4][2 * (l % 4) + 1]);
                } else {
                    e0 = bits_of(rows[2 * (l % 4)][l / 4]);
                    e1 = bits_of(rows[2 * (l % 4) + 1][l / 4]);
                }
                wb.r[l][i] = (uint32_t)e0 | ((uint32_t)e1 << 16);
            }
    });
    for (int i = 0; i < 4; i++) r[i] = wb.r[lane_id()][i];
}
static void ldsm_x4(uint32_t (&r)[4], const bf16* p) { ldsm_common(r, p, false); }
static void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) { ldsm_common(r, p, true); }

static float lo_f(uint32_t u) {
    uint32_t x = u << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
static float hi_f(uint32_t u) {
    uint32_t x = u & 0xffff0000u;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* m16n8k16, fragments as in the PTX ISA (g = lane/4, t = lane%4):
 * A: reg i, half h -> (row g + 8*(i%2), col 2t + h + 8*(i/2))
 * B: reg i, half h -> (k 2t + h + 8*i, n g)
 * C/D: element e   -> (row g + 8*(e/2), col 2t + e%2) */
static void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    WarpBuf& wb = g_wb[warp_id()];
    const int ln = lane_id();
    for (int i = 0; i < 4; i++) {
        wb.a[ln][i] = a[i];
        wb.c[ln][i] = d[i];
    }
    wb.b[ln][0] = b0;
    wb.b[ln][1] = b1;
    collective(g_warp_coll[warp_id()], 32, 4, [&] {
        float A[16][16], Bm[16][8], Cm[16][8];
        for (int l = 0; l < 32; l++) {
            const int g = l / 4, t = l % 4;
            for (int i = 0; i < 4; i++) {
                A[g + 8 * (i % 2)][2 * t + 8 * (i / 2)] = lo_f(wb.a[l][i]);
                A[g + 8 * (i % 2)][2 * t + 1 + 8 * (i / 2)] = hi_f(wb.a[l][i]);
            }
            for (int i = 0; i < 2; i++) {
                Bm[2 * t + 8 * i][g] = lo_f(wb.b[l][i]);
                Bm[2 * t + 1 + 8 * i][g] = hi_f(wb.b[l][i]);
            }
            for (int e = 0; e < 4; e++) Cm[g + 8 * (e / 2)][2 * t + e % 2] = wb.c[l][e];
        }
        for (int l = 0; l < 32; l++) {
            const int g = l / 4, t = l % 4;
            for (int e = 0; e < 4; e++) {
                const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
                float s = Cm[row][col];
                for (int k = 0; k < 16; k++) s += A[row][k] * Bm[k][col];
                wb.d[l][e] = s;
            }
        }
    });
    for (int e = 0; e < 4; e++) d[e] = wb.d[ln][e];
}

static float fast_exp2(float x) { return exp2f(x); }

static void load8(float (&f)[8], const bf16* p) {
    if ((uintptr_t)p & 15) emu_fail("16-byte load not aligned");
    if (!in_global(p, 16)) emu_fail("load8 outside the input tensors");
    for (int k = 0; k < 8; k++) f[k] = __bfloat162float(p[k]);
}

#include "attention_kernels.cuh"

/* ---- launching ------------------------------------------------------------------------------ */
template <typename F>
static void launch(U3 grid, int threads, F kernel) {
    if (threads > MAX_THREADS) emu_fail("block too large for the emulator");
    gridDim = grid;
    blockDim = U3{(unsigned)threads, 1, 1};
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = U3{x, y, z};
                memset(smem_raw, 0xFF, SMEM_BYTES); /* NaN bf16 / NaN fp32 everywhere */
                g_body = kernel;
                run_block(threads);
            }
}

/* ---- host helpers ------------------------------------------------------------------------------ */
static uint64_t g_rng = 0x243F6A8885A308D3ull;
static float rnd_normal() {
    auto u = [] {
        g_rng ^= g_rng << 13;
        g_rng ^= g_rng >> 7;
        g_rng ^= g_rng << 17;
        return ((g_rng >> 40) + 0.5) / 16777216.0;
    };
    double u1 = u(), u2 = u();
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#define GUARD 64 /* elements of guard zone on each side of every output */

template <typename E>
struct Guarded {
    std::vector<E> buf;
    size_t n;
    explicit Guarded(size_t n_) : buf(n_ + 2 * GUARD), n(n_) {
        memset((void*)buf.data(), 0x5A, buf.size() * sizeof(E));
        memset((void*)(buf.data() + GUARD), 0xFF, n * sizeof(E)); /* NaN poison */
    }
    E* p() { return buf.data() + GUARD; }
    bool guards_ok() const {
        const unsigned char* b = (const unsigned char*)buf.data();
        for (size_t i = 0; i < GUARD * sizeof(E); i++)
            if (b[i] != 0x5A || b[(GUARD + n) * sizeof(E) + i] != 0x5A) return false;
        return true;
    }
};

static double rel_err(const float* g, const float* c, size_t n, size_t* nans) {
    double num = 0, den = 0;
    *nans = 0;
    for (size_t i = 0; i < n; i++) {
        if (g[i] != g[i]) {
            (*nans)++;
            continue;
        }
        double d = (double)g[i] - c[i];
        num += d * d;
        den += (double)c[i] * c[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int g_fail = 0;
static void report(const char* what, const char* cfg, const float* g, const float* c, size_t n, double tol,
                   bool guards) {
    size_t nans;
    double e = rel_err(g, c, n, &nans);
    bool ok = nans == 0 && e <= tol && guards;
    if (!ok) g_fail++;
    printf("%-28s %-26s %10.3e %8.1e  %s%s%s\n", what, cfg, e, tol, ok ? "PASS" : "FAIL",
           nans ? "  (unwritten/NaN elements)" : "", guards ? "" : "  (guard zone overwritten)");
}

template <int HS>
static void run_case(int B, int T, int NH) {
    char cfg[64];
    snprintf(cfg, sizeof cfg, "B=%d T=%d NH=%d hs=%d", B, T, NH, HS);
    const size_t nqkv = (size_t)B * T * 3 * NH * HS, nout = (size_t)B * T * NH * HS, nlse = (size_t)B * NH * T;
    std::vector<bf16> qkv(nqkv), dout(nout);
    std::vector<float> fqkv(nqkv), fdout(nout);
    for (size_t i = 0; i < nqkv; i++) {
        qkv[i] = __float2bfloat16_rn(rnd_normal());
        fqkv[i] = __bfloat162float(qkv[i]);
    }
    for (size_t i = 0; i < nout; i++) {
        dout[i] = __float2bfloat16_rn(rnd_normal());
        fdout[i] = __bfloat162float(dout[i]);
    }
    std::vector<float> cout(nout), clse(nlse), cdqkv(nqkv);
    attention_forward(cout.data(), clse.data(), fqkv.data(), B, T, NH, HS);
    attention_backward(cdqkv.data(), fdout.data(), fqkv.data(), cout.data(), clse.data(), B, T, NH, HS);

    /* forward */
    Guarded<bf16> out(nout);
    Guarded<float> lse(nlse);
    g_readable.clear();
    g_readable.push_back({(const unsigned char*)qkv.data(), nqkv * 2});
    const float scale = 1.0f / sqrtf((float)HS);
    const float scale_log2 = LOG2E * scale;
    launch(U3{(unsigned)NH, (unsigned)B, (unsigned)((T + FwdCfg<HS>::BM - 1) / FwdCfg<HS>::BM)}, ATT_THREADS,
           [&] { attn_fwd_kernel<HS>(out.p(), lse.p(), qkv.data(), T, NH, scale_log2); });
    std::vector<float> gout(nout);
    for (size_t i = 0; i < nout; i++) gout[i] = __bfloat162float(out.p()[i]);
    report("attn_fwd_kernel out", cfg, gout.data(), cout.data(), nout, 1e-2, out.guards_ok());
    report("attn_fwd_kernel lse", cfg, lse.p(), clse.data(), nlse, 1e-4, lse.guards_ok());

    /* backward, from the emulated forward's out and lse */
    Guarded<float> D(nlse);
    g_readable.push_back({(const unsigned char*)dout.data(), nout * 2});
    g_readable.push_back({(const unsigned char*)out.p(), nout * 2});
    constexpr int CPR = HS / 8;
    constexpr int G = CPR <= 2 ? 2 : CPR <= 4 ? 4 : CPR <= 8 ? 8 : 16;
    const size_t threads = (size_t)B * T * NH * G;
    launch(U3{(unsigned)((threads + 255) / 256), 1, 1}, 256,
           [&] { attn_bwd_d_kernel<HS>(D.p(), dout.data(), out.p(), B, T, NH); });
    std::vector<float> cD(nlse, 0.0f); /* D = rowsum(dout * out) in fp32 from the bf16 values */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                double s = 0;
                for (int d = 0; d < HS; d++) {
                    size_t k = ((size_t)b * T + t) * NH * HS + (size_t)h * HS + d;
                    s += (double)fdout[k] * gout[k];
                }
                cD[((size_t)b * NH + h) * T + t] = (float)s;
            }
    report("attn_bwd_d_kernel D", cfg, D.p(), cD.data(), nlse, 1e-5, D.guards_ok());

    Guarded<bf16> dqkv(nqkv);
    launch(U3{(unsigned)NH, (unsigned)B, (unsigned)((T + DkvCfg<HS>::BN - 1) / DkvCfg<HS>::BN)}, ATT_THREADS,
           [&] { attn_bwd_dkdv_kernel<HS>(dqkv.p(), dout.data(), qkv.data(), lse.p(), D.p(), T, NH, scale_log2, scale); });
    launch(U3{(unsigned)NH, (unsigned)B, (unsigned)((T + DqCfg<HS>::BM - 1) / DqCfg<HS>::BM)}, ATT_THREADS,
           [&] { attn_bwd_dq_kernel<HS>(dqkv.p(), dout.data(), qkv.data(), lse.p(), D.p(), T, NH, scale_log2, scale); });
    static const char* names[3] = {"attn_bwd dq", "attn_bwd_dkdv_kernel dk", "attn_bwd_dkdv_kernel dv"};
    for (int part = 0; part < 3; part++) {
        std::vector<float> gp, cp;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int i = 0; i < NH * HS; i++) {
                size_t k = r * 3 * NH * HS + (size_t)part * NH * HS + i;
                gp.push_back(__bfloat162float(dqkv.p()[k]));
                cp.push_back(cdqkv[k]);
            }
        report(names[part], cfg, gp.data(), cp.data(), gp.size(), 2e-2, dqkv.guards_ok());
    }
}

int main(void) {
    printf("%-28s %-26s %10s %8s  %s\n", "kernel / output", "case", "rel err", "tol", "result");
    run_case<64>(1, 1, 1);
    run_case<64>(2, 17, 3);
    run_case<64>(1, 64, 2);
    run_case<64>(1, 150, 2);
    run_case<32>(1, 100, 2);
    run_case<128>(1, 100, 1);
    run_case<48>(1, 77, 1);
    run_case<16>(1, 130, 1);
    printf("\n%s\n", g_fail ? "FAILED" : "all passed");
    return g_fail ? 1 : 0;
}
