/*
 * tests/emu/emu_sched.cpp - the SIMT side of tests/emu/emu_cuda.h (which says
 * what the emulator is for and what it is not): the thread scheduler, the
 * launches, the warp collectives and barriers, and the PTX wrappers (cp.async,
 * ldmatrix, mma.sync, and the gather under wgmma's register A) of the attention kernels.
 *
 * Scheduler. A block's threads are fibers (a ten-instruction register switch
 * on x86-64, ucontext elsewhere and under AddressSanitizer). Each pass
 * resumes a random non-empty subset of the warps that can run, each from a
 * random lane on; a fiber runs until it parks (warp collective, barrier) or
 * finishes. After each pass every warp whose lanes are all parked at a warp
 * collective is checked (same collective, same offset, full mask, no lane
 * exited) and resolved; when nothing can run, a barrier with the whole block
 * at it is released, and anything else is a deadlock, reported as such.
 * A launch is checked as the runtime would (emu_runtime.cpp keeps the
 * streams, the kernels' shared memory limits and the launch error), and the
 * guard zones of every device block after it. It runs when it is queued, or,
 * on a stream being captured, when a launch of the graph runs its node
 * (emu_enqueue, emu_runtime.cpp).
 */
#include "tests/emu/emu_cuda.h" /* first: it defines the CUDA keywords before the CUDA headers do */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>
#include <unistd.h>

#include <deque>
#include <vector>

#include "tests/emu/emu_internal.h"

using namespace emu;

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

/* Fiber switches: glibc's swapcontext makes a signal-mask system call on
 * every switch, and the emulator switches at every shuffle. On x86-64 a
 * ten-instruction switch of the callee-saved registers (plus the x87 and SSE
 * control words) does the same job; sanitizer builds and other machines
 * keep ucontext, which AddressSanitizer understands. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define EMU_FAST_SWITCH 1
extern "C" void emu_switch(void** save_sp, void* new_sp);
asm(R"(
    .text
    .globl emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw (%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    fldcw (%rsp)
    ldmxcsr 8(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");
#endif

namespace {

enum { STACK = 256 * 1024 };
enum { RUN = 0, WAIT_WARP, WAIT_BAR, WAIT_MBAR, DONE };

struct Copy {
    void* dst;
    const void* src;
    bool valid;
    int n; /* bytes: 16 or 4 */
};

struct Fiber {
    ucontext_t ctx;
    void* sp; /* saved stack pointer (fast switch) */
    char* stack;
    int state;
    /* the collective it is parked at, its operands and result */
    int op, param;
    unsigned mask;
    uint64_t val, res;
    const __nv_bfloat16* addr; /* ldmatrix row */
    uint32_t a[4], b[2], r[4];  /* mma A, B (a: also a gather's words); ldmatrix result */
    uint32_t gathered[32][4];   /* emu_warp_gather4: every lane's a[] */
    float c[4];                 /* mma accumulators in, then out */
    uint32_t mbar;              /* WAIT_MBAR: the mbarrier (shared offset) and phase parity awaited */
    unsigned parity;
    /* cp.async: copies issued but not committed, committed groups not yet waited for */
    std::vector<Copy> open;
    std::deque<std::vector<Copy>> groups;
};

std::vector<Fiber> fibers;
#ifdef EMU_FAST_SWITCH
void* sched_sp;
#else
ucontext_t sched_ctx;
#endif
int cur = -1, nthreads = 0;
EmuBody body_fn;
void* body_ctx;
const char* launch_file = "?";
int launch_line = 0;
alignas(128) unsigned char g_smem[SMEM_BYTES];

uint64_t g_rng = 0x853C49E6748FEA9Bull;
uint64_t emu_rand() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng >> 11;
}
struct SeedFromEnv {
    SeedFromEnv() {
        const char* s = getenv("EMU_SEED");
        if (s && *s) g_rng ^= strtoull(s, nullptr, 0) * 0x9E3779B97F4A7C15ull + 1;
    }
} seed_from_env;

} /* namespace */

[[noreturn]] void emu::emu_fail(const char* fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "emu_cuda: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cur >= 0)
        fprintf(stderr, " (kernel launched at %s:%d, block %u,%u,%u thread %u,%u,%u)\n", launch_file, launch_line,
                blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
    else if (nthreads)
        fprintf(stderr, " (kernel launched at %s:%d, block %u,%u,%u)\n", launch_file, launch_line, blockIdx.x,
                blockIdx.y, blockIdx.z);
    else
        fprintf(stderr, "\n");
    fflush(stderr);
    _exit(2); /* no atexit handlers: under mpirun, the job is taken down */
}

namespace {

void set_thread_coords(int t) {
    threadIdx = make_uint3((unsigned)t % blockDim.x, ((unsigned)t / blockDim.x) % blockDim.y,
                           (unsigned)t / (blockDim.x * blockDim.y));
}

void to_scheduler(Fiber& f) {
#ifdef EMU_FAST_SWITCH
    emu_switch(&f.sp, sched_sp);
#else
    swapcontext(&f.ctx, &sched_ctx);
#endif
}

void fiber_entry(int idx) {
    body_fn(body_ctx);
    fibers[idx].state = DONE;
    to_scheduler(fibers[idx]);
    emu_fail("a finished thread was resumed");
}

#ifdef EMU_FAST_SWITCH
void fiber_trampoline(void) { fiber_entry(cur); }

/* a fresh stack that emu_switch "returns" into fiber_trampoline from */
void* fresh_stack(char* stack) {
    uintptr_t top = ((uintptr_t)(stack + STACK)) & ~(uintptr_t)15;
    void** sp = (void**)top;
    *--sp = nullptr;                             /* the trampoline starts as if called: rsp = 8 mod 16 */
    *--sp = (void*)fiber_trampoline;             /* ret address */
    for (int i = 0; i < 6; i++) *--sp = nullptr; /* rbp rbx r12..r15 */
    sp -= 2;                                     /* x87 control word, MXCSR: copy the current ones */
    unsigned mxcsr;
    unsigned short fcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fcw));
    memcpy((char*)sp, &fcw, sizeof(fcw));
    memcpy((char*)sp + 8, &mxcsr, sizeof(mxcsr));
    return sp;
}
#endif

void park(int state) {
    if (cur < 0) emu_fail("a warp collective or __syncthreads outside a kernel");
    Fiber& f = fibers[cur];
    f.state = state;
    to_scheduler(f);
}

const char* op_name(int op) {
    switch (op) {
        case EMU_SHFL_XOR: case EMU_SHFL_XOR64: return "__shfl_xor_sync";
        case EMU_SHFL_UP: case EMU_SHFL_UP64: return "__shfl_up_sync";
        case EMU_SHFL_DOWN: case EMU_SHFL_DOWN64: return "__shfl_down_sync";
        case EMU_SHFL_IDX: case EMU_SHFL_IDX64: return "__shfl_sync";
        case EMU_BALLOT: return "__ballot_sync";
        case EMU_RED_ADD: return "__reduce_add_sync";
        case EMU_RED_MAX: return "__reduce_max_sync";
        case EMU_SYNCWARP: return "__syncwarp";
        case EMU_LDSM: return "ldmatrix";
        case EMU_LDSM_T: return "ldmatrix.trans";
        case EMU_MMA: return "mma.sync";
        case EMU_GATHER: return "wgmma (the warp's A fragments)";
        default: return "?";
    }
}

uint16_t bits16(__nv_bfloat16 h) {
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
float bf_lo(uint32_t u) {
    uint32_t x = u << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
float bf_hi(uint32_t u) {
    uint32_t x = u & 0xffff0000u;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* ldmatrix.x4: lanes 8i..8i+7 give the rows of matrix i; register i of lane l
 * holds row l/4, elements 2(l%4), 2(l%4)+1 of matrix i (of its transpose
 * with .trans) */
void resolve_ldsm(Fiber* w, bool trans) {
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            const Fiber* rows = &w[8 * i];
            uint16_t e0, e1;
            if (!trans) {
                e0 = bits16(rows[l / 4].addr[2 * (l % 4)]);
                e1 = bits16(rows[l / 4].addr[2 * (l % 4) + 1]);
            } else {
                e0 = bits16(rows[2 * (l % 4)].addr[l / 4]);
                e1 = bits16(rows[2 * (l % 4) + 1].addr[l / 4]);
            }
            w[l].r[i] = (uint32_t)e0 | ((uint32_t)e1 << 16);
        }
}

/* mma.m16n8k16 (g = lane/4, t = lane%4), per the PTX ISA:
 *   A reg i, half h -> (row g + 8(i%2), col 2t + h + 8(i/2))
 *   B reg i, half h -> (k 2t + h + 8i, n g)
 *   C/D element e   -> (row g + 8(e/2), col 2t + e%2) */
void resolve_mma(Fiber* w) {
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) {
            A[g + 8 * (i % 2)][2 * t + 8 * (i / 2)] = bf_lo(w[l].a[i]);
            A[g + 8 * (i % 2)][2 * t + 1 + 8 * (i / 2)] = bf_hi(w[l].a[i]);
        }
        for (int i = 0; i < 2; i++) {
            B[2 * t + 8 * i][g] = bf_lo(w[l].b[i]);
            B[2 * t + 1 + 8 * i][g] = bf_hi(w[l].b[i]);
        }
        for (int e = 0; e < 4; e++) C[g + 8 * (e / 2)][2 * t + e % 2] = w[l].c[e];
    }
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        for (int e = 0; e < 4; e++) {
            const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
            float s = C[row][col];
            for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
            w[l].c[e] = s;
        }
    }
}

/* Warp wi: if every lane is parked at a warp collective, check and resolve it.
 * Returns true when the warp's lanes can run again. */
bool resolve_warp(int wi) {
    const int lo = 32 * wi, hi = std::min(lo + 32, nthreads);
    int waiting = 0, done = 0;
    for (int i = lo; i < hi; i++) {
        const int s = fibers[i].state;
        if (s == WAIT_WARP) waiting++;
        else if (s == DONE) done++;
        else return false; /* running, or at a barrier (a deadlock if nothing else moves: the caller says) */
    }
    if (!waiting) return false;
    Fiber* w = &fibers[lo];
    const int op = w[0].op;
    /* report from the first parked lane */
    for (int i = lo; i < hi; i++)
        if (fibers[i].state == WAIT_WARP) {
            cur = i;
            set_thread_coords(i);
            break;
        }
    if (done) emu_fail("%s while %d lane(s) of the warp have exited", op_name(fibers[cur].op), done);
    if (hi - lo < 32) emu_fail("%s in a partial warp (%d threads): not emulated", op_name(op), hi - lo);
    for (int l = 0; l < 32; l++) {
        if (w[l].op != op) {
            cur = lo + l;
            set_thread_coords(cur);
            emu_fail("divergent warp collective: lane 0 at %s, lane %d at %s", op_name(op), l, op_name(w[l].op));
        }
        const bool per_lane_param = op == EMU_SHFL_IDX || op == EMU_SHFL_IDX64;
        if (!per_lane_param && w[l].param != w[0].param) {
            cur = lo + l;
            set_thread_coords(cur);
            emu_fail("divergent warp collective: lane 0 at %s(%d), lane %d at %s(%d)", op_name(op), w[0].param, l,
                     op_name(op), w[l].param);
        }
        if (w[l].mask != 0xffffffffu) {
            cur = lo + l;
            set_thread_coords(cur);
            emu_fail("%s with mask 0x%08x: only full-warp masks are emulated", op_name(op), w[l].mask);
        }
    }
    cur = -1;
    switch (op) {
        case EMU_LDSM: resolve_ldsm(w, false); break;
        case EMU_LDSM_T: resolve_ldsm(w, true); break;
        case EMU_MMA: resolve_mma(w); break;
        case EMU_GATHER:
            for (int l = 0; l < 32; l++)
                for (int src = 0; src < 32; src++) memcpy(w[l].gathered[src], w[src].a, sizeof w[src].a);
            break;
        case EMU_SYNCWARP: break;
        case EMU_BALLOT: case EMU_RED_ADD: case EMU_RED_MAX: {
            unsigned bal = 0, sum = 0, mx = 0;
            for (int l = 0; l < 32; l++) {
                const unsigned v = (unsigned)w[l].val;
                if (v) bal |= 1u << l;
                sum += v;
                mx = std::max(mx, v);
            }
            for (int l = 0; l < 32; l++) w[l].res = op == EMU_BALLOT ? bal : op == EMU_RED_ADD ? sum : mx;
            break;
        }
        default: /* shuffles: the source lane, or the lane's own value when it is out of range */
            for (int l = 0; l < 32; l++) {
                const int p = w[l].param;
                int src = l;
                switch (op) {
                    case EMU_SHFL_XOR: case EMU_SHFL_XOR64: src = l ^ (p & 31); break;
                    case EMU_SHFL_UP: case EMU_SHFL_UP64: src = l - p >= 0 ? l - p : l; break;
                    case EMU_SHFL_DOWN: case EMU_SHFL_DOWN64: src = l + p < 32 ? l + p : l; break;
                    case EMU_SHFL_IDX: case EMU_SHFL_IDX64: src = p & 31; break;
                    default: emu_fail("unknown warp collective %d", op);
                }
                w[l].res = w[src].val;
            }
    }
    for (int i = lo; i < hi; i++) fibers[i].state = RUN;
    return true;
}

void init_fibers() {
    if ((int)fibers.size() < nthreads) {
        const size_t old = fibers.size();
        fibers.resize(nthreads);
        for (size_t i = old; i < fibers.size(); i++)
            if (!(fibers[i].stack = (char*)malloc(STACK))) emu_fail("out of memory for thread stacks");
    }
    for (int i = 0; i < nthreads; i++) {
        Fiber& f = fibers[i];
#ifdef EMU_FAST_SWITCH
        f.sp = fresh_stack(f.stack);
#else
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, (void (*)())fiber_entry, 1, i);
#endif
        f.state = RUN;
        f.open.clear();
        f.groups.clear();
    }
}

void run_fiber(int i) {
    cur = i;
    set_thread_coords(i);
#ifdef EMU_FAST_SWITCH
    emu_switch(&sched_sp, fibers[i].sp);
#else
    swapcontext(&sched_ctx, &fibers[i].ctx);
#endif
}

void run_block() {
    init_fibers();
    const int nwarps = (nthreads + 31) / 32;
    std::vector<int> runnable;
    runnable.reserve(nwarps);
    for (;;) {
        /* threads waiting on an mbarrier whose phase has completed run again */
        for (int i = 0; i < nthreads; i++)
            if (fibers[i].state == WAIT_MBAR && mbar_phase_done(fibers[i].mbar, fibers[i].parity)) fibers[i].state = RUN;
        /* the warps with a lane that can run; resume a random non-empty subset */
        runnable.clear();
        for (int w = 0; w < nwarps; w++) {
            const int lo = 32 * w, hi = std::min(lo + 32, nthreads);
            for (int i = lo; i < hi; i++)
                if (fibers[i].state == RUN) {
                    runnable.push_back(w);
                    break;
                }
        }
        if (!runnable.empty()) {
            bool any = false;
            for (int w : runnable) {
                if (!(emu_rand() & 1)) continue;
                any = true;
                const int lo = 32 * w, n = std::min(lo + 32, nthreads) - lo, start = (int)(emu_rand() % (unsigned)n);
                for (int k = 0; k < n; k++) {
                    const int i = lo + (start + k) % n;
                    if (fibers[i].state == RUN) run_fiber(i);
                }
            }
            if (!any) {
                const int w = runnable[emu_rand() % runnable.size()];
                for (int i = 32 * w; i < std::min(32 * w + 32, nthreads); i++)
                    if (fibers[i].state == RUN) run_fiber(i);
            }
            cur = -1;
            for (int w = 0; w < nwarps; w++) resolve_warp(w);
            continue;
        }
        /* nothing can run: every live thread is parked at a barrier or a warp collective */
        bool resolved = false;
        for (int w = 0; w < nwarps; w++) resolved |= resolve_warp(w);
        if (resolved) continue;
        int live = 0, at_bar = 0, at_warp = 0, first_bar = -1, first_warp = -1;
        for (int i = 0; i < nthreads; i++) {
            const int s = fibers[i].state;
            if (s != DONE) live++;
            if (s == WAIT_MBAR) {
                cur = i;
                set_thread_coords(i);
                emu_fail("deadlock: a thread waits on an mbarrier (shared offset %u, parity %u) whose phase "
                         "nothing left running can complete", fibers[i].mbar, fibers[i].parity);
            }
            if (s == WAIT_BAR && at_bar++ == 0) first_bar = i;
            if (s == WAIT_WARP && at_warp++ == 0) first_warp = i;
        }
        if (!live) break;
        if (at_bar == live && live == nthreads) {
            for (int i = 0; i < nthreads; i++) fibers[i].state = RUN;
            continue;
        }
        if (at_bar == live) {
            cur = first_bar;
            set_thread_coords(cur);
            emu_fail("__syncthreads reached after %d thread(s) of the block exited", nthreads - live);
        }
        cur = first_warp >= 0 ? first_warp : first_bar;
        set_thread_coords(cur);
        if (at_bar)
            emu_fail("deadlock: %d thread(s) at __syncthreads while %d wait at a warp collective (%s)", at_bar,
                     at_warp, op_name(fibers[first_warp].op));
        emu_fail("deadlock: threads wait at %s for lanes that never arrive", op_name(fibers[first_warp].op));
    }
    cur = -1;
}

} /* namespace */

/* ---- launches ----------------------------------------------------------------------------- */
bool emu_launch_ok(const void* fn, dim3 grid, dim3 block, size_t smem, cudaStream_t stream) {
    if (cur >= 0) emu_fail("a kernel launch from inside a kernel (dynamic parallelism) is not emulated");
    check_stream(stream, "kernel launch");
    const size_t nt = (size_t)block.x * block.y * block.z;
    if (nt == 0 || nt > MAX_THREADS || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        last_error = cudaErrorInvalidConfiguration;
        return false;
    }
    if (smem > (size_t)kernel_smem_limit(fn) || smem > SMEM_BYTES) {
        last_error = cudaErrorInvalidValue; /* what the runtime says for too much dynamic shared memory */
        return false;
    }
    return true;
}

void emu_enqueue_kernel(cudaStream_t stream, std::function<void()> node) {
    const cudaError_t e = emu_enqueue(stream, "kernel launch", std::move(node));
    if (e != cudaSuccess) last_error = e;
}

void emu_run_grid(const void* fn, const char* file, int line, dim3 grid, dim3 block, size_t smem, EmuBody body,
                  void* ctx) {
    (void)fn;
    launch_file = file;
    launch_line = line;
    body_fn = body;
    body_ctx = ctx;
    nthreads = (int)((size_t)block.x * block.y * block.z);
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = make_uint3(x, y, z);
                memset(g_smem, 0xFF, smem ? smem : 16); /* NaN bytes: reads of unset data are loud */
                tma_block_start();
                run_block();
                tma_block_end();
            }
    check_all_guards("after the kernel");
    nthreads = 0;
}

/* ---- warp collectives, barriers, shared and global memory ---------------------------------- */
uint64_t emu_warp_op(int op, int param, uint64_t value, unsigned mask) {
    if (cur < 0) emu_fail("%s outside a kernel", op_name(op));
    Fiber& f = fibers[cur];
    f.op = op;
    f.param = param;
    f.val = value;
    f.mask = mask;
    park(WAIT_WARP);
    return fibers[cur].res;
}

void emu_syncthreads(void) { park(WAIT_BAR); }

bool emu::emu_rand_bit() { return emu_rand() & 1; }

void emu::emu_park_mbar(uint32_t off, unsigned parity) {
    if (cur < 0) emu_fail("mbar_wait outside a kernel");
    fibers[cur].mbar = off;
    fibers[cur].parity = parity;
    park(WAIT_MBAR);
}

unsigned char* emu_dynamic_smem() { return g_smem; }
uint32_t smem_u32(const void* p) {
    const unsigned char* q = (const unsigned char*)p;
    if (q < g_smem || q >= g_smem + SMEM_BYTES) emu_fail("smem_u32 of an address outside dynamic shared memory");
    return (uint32_t)(q - g_smem);
}

static bool in_smem(const void* p, size_t bytes) {
    const unsigned char* q = (const unsigned char*)p;
    return q >= g_smem && q + bytes <= g_smem + SMEM_BYTES;
}

/* a cp.async of n bytes (16 or 4): checked, then landing at once or at its
 * wait, at random, so a kernel that reads before waiting is caught */
static void cp_async_n(void* smem, const void* gmem, bool valid, int n) {
    const uintptr_t mis = (uintptr_t)(n - 1);
    if ((uintptr_t)smem & mis) emu_fail(n == 16 ? "cp.async destination not 16-byte aligned" : "cp.async destination not 4-byte aligned");
    if (!in_smem(smem, (size_t)n)) emu_fail("cp.async destination outside dynamic shared memory");
    if (valid) emu_check_global(gmem, (size_t)n, (size_t)n, "cp.async source");
    else if ((uintptr_t)gmem & mis) emu_fail("cp.async source not 16-byte aligned"); /* only cp_async16 zero-fills */
    if (emu_rand() & 1) { /* lands at once ... */
        if (valid) memcpy(smem, gmem, (size_t)n);
        else memset(smem, 0, (size_t)n);
        return;
    }
    fibers[cur].open.push_back(Copy{smem, gmem, valid, n}); /* ... or at its wait */
}
void cp_async16(void* smem, const void* gmem, bool valid) { cp_async_n(smem, gmem, valid, 16); }
void cp_async4(void* smem, const void* gmem) { cp_async_n(smem, gmem, true, 4); }
void cp_async_commit() {
    Fiber& f = fibers[cur];
    f.groups.push_back(f.open);
    f.open.clear();
}
void emu_cp_async_wait(int n) {
    Fiber& f = fibers[cur];
    while ((int)f.groups.size() > n) {
        for (const Copy& c : f.groups.front()) {
            if (c.valid) memcpy(c.dst, c.src, (size_t)c.n);
            else memset(c.dst, 0, (size_t)c.n);
        }
        f.groups.pop_front();
    }
}

static void ldsm(uint32_t (&r)[4], const __nv_bfloat16* p, bool trans) {
    if ((uintptr_t)p & 15) emu_fail("ldmatrix row address not 16-byte aligned");
    if (!in_smem(p, 16)) emu_fail("ldmatrix row outside dynamic shared memory");
    fibers[cur].addr = p;
    emu_warp_op(trans ? EMU_LDSM_T : EMU_LDSM, 0, 0, 0xffffffffu);
    for (int i = 0; i < 4; i++) r[i] = fibers[cur].r[i];
}
void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p) { ldsm(r, p, false); }
void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16* p) { ldsm(r, p, true); }

const uint32_t (*emu_warp_gather4(const uint32_t (&v)[4]))[4] {
    if (cur < 0) emu_fail("a warp gather outside a kernel");
    memcpy(fibers[cur].a, v, sizeof fibers[cur].a);
    emu_warp_op(EMU_GATHER, 0, 0, 0xffffffffu);
    return fibers[cur].gathered;
}

void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if (cur < 0) emu_fail("mma.sync outside a kernel");
    Fiber& f = fibers[cur];
    for (int i = 0; i < 4; i++) {
        f.a[i] = a[i];
        f.c[i] = d[i];
    }
    f.b[0] = b0;
    f.b[1] = b1;
    emu_warp_op(EMU_MMA, 0, 0, 0xffffffffu);
    for (int e = 0; e < 4; e++) d[e] = fibers[cur].c[e];
}
