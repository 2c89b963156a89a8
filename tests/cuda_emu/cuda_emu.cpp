/*
 * tests/cuda_emu/cuda_emu.cpp - the fiber scheduler and the CUDA runtime
 * calls of the emulator (cuda_emu.h says what it is for and what it is not).
 *
 * A launch runs its blocks one after another; a block's 256 threads are
 * fibers that run until they park at a rendezvous (warp collective or
 * __syncthreads) or finish. When every live lane of a warp is parked at the
 * same warp collective, the results are computed and the lanes resume; when
 * every live thread of the block is at __syncthreads, all resume. Lanes of a
 * warp parked at different collectives (or some parked, some finished) is
 * divergence: a bug, reported with the block and warp. Runtime calls act at
 * once (streams and events are synchronous); "device" memory is host memory.
 * The emulated device has EMU_SMS multiprocessors and EMU_OCC blocks per SM,
 * few enough that grid-stride loops take several turns in small tests.
 */
#include "cuda_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

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

#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

enum { EMU_SMS = 4, EMU_OCC = 2, STACK = 256 * 1024 };
enum { RUN = 0, WAIT_WARP, WAIT_BAR, DONE };

struct Fiber {
    ucontext_t ctx;
    void* sp; /* saved stack pointer (fast switch) */
    int state;
    int op, param;
    unsigned val, mask, res;
    char* stack;
};

std::vector<Fiber> fibers;
#ifdef EMU_FAST_SWITCH
void* sched_sp;
#else
ucontext_t sched_ctx;
#endif
int cur = -1;
const std::function<void()>* body_fn = nullptr;
cudaError_t last_error = cudaSuccess;

[[noreturn]] void emu_die(const char* what) {
    fprintf(stderr, "cuda_emu: %s (block %u,%u, thread %d)\n", what, blockIdx.x, blockIdx.y, cur);
    fflush(stderr);
    abort();
}

void to_scheduler(Fiber& f) {
#ifdef EMU_FAST_SWITCH
    emu_switch(&f.sp, sched_sp);
#else
    swapcontext(&f.ctx, &sched_ctx);
#endif
}

void fiber_entry(int idx) {
    (*body_fn)();
    fibers[idx].state = DONE;
    to_scheduler(fibers[idx]);
    emu_die("a finished fiber was resumed");
}

#ifdef EMU_FAST_SWITCH
void fiber_trampoline(void) { fiber_entry(cur); }

/* a fresh stack that emu_switch "returns" into fiber_trampoline from */
void* fresh_stack(char* stack) {
    uintptr_t top = ((uintptr_t)(stack + STACK)) & ~(uintptr_t)15;
    void** sp = (void**)top;
    *--sp = nullptr;                        /* the trampoline starts as if called: rsp = 8 mod 16 */
    *--sp = (void*)fiber_trampoline;        /* ret address */
    for (int i = 0; i < 6; i++) *--sp = nullptr; /* rbp rbx r12..r15 */
    sp -= 2;                                /* x87 control word, MXCSR: copy the current ones */
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
    if (cur < 0) emu_die("a warp collective or __syncthreads outside a kernel");
    Fiber& f = fibers[cur];
    f.state = state;
    to_scheduler(f);
}

/* every live lane of warp w is at a warp collective: check and resolve */
bool resolve_warp(int w, int nthreads) {
    int lo = 32 * w, hi = lo + 32 < nthreads ? lo + 32 : nthreads;
    int waiting = 0, done = 0, other = 0;
    for (int i = lo; i < hi; i++) {
        if (fibers[i].state == WAIT_WARP) waiting++;
        else if (fibers[i].state == DONE) done++;
        else other++;
    }
    if (!waiting || other) return false; /* not all there yet (or parked at a barrier: checked by the caller) */
    if (done) emu_die("warp collective while some lanes of the warp have exited");
    const Fiber& f0 = fibers[lo];
    for (int i = lo; i < hi; i++) {
        const Fiber& f = fibers[i];
        if (f.op != f0.op || f.param != f0.param) {
            fprintf(stderr, "cuda_emu: lane %d at op %d/%d, lane %d at op %d/%d\n", lo, f0.op, f0.param, i, f.op, f.param);
            emu_die("divergent warp collective (lanes of one warp at different shuffles/ballots)");
        }
        if (f.mask != 0xffffffffu) emu_die("the kernels use full-warp masks only");
    }
    unsigned all = 0, sum = 0, mx = 0;
    for (int i = lo; i < hi; i++) {
        const Fiber& f = fibers[i];
        if (f.val) all |= 1u << (i - lo);
        sum += f.val;
        if (f.val > mx) mx = f.val;
    }
    for (int i = lo; i < hi; i++) {
        Fiber& f = fibers[i];
        int lane = i - lo;
        switch (f.op) {
        case EMU_SHFL_XOR: {
            int src = lane ^ f.param;
            f.res = (lo + src < hi) ? fibers[lo + src].val : f.val;
            break;
        }
        case EMU_SHFL_UP: f.res = lane >= f.param ? fibers[i - f.param].val : f.val; break;
        case EMU_BALLOT: f.res = all; break;
        case EMU_RED_ADD: f.res = sum; break;
        case EMU_RED_MAX: f.res = mx; break;
        default: emu_die("unknown warp op");
        }
        f.state = RUN;
    }
    return true;
}

void run_block(int nthreads) {
    if ((int)fibers.size() < nthreads) {
        size_t old = fibers.size();
        fibers.resize(nthreads);
        for (size_t i = old; i < fibers.size(); i++) fibers[i].stack = (char*)malloc(STACK);
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
    }
    for (;;) {
        bool progress = false;
        for (int i = 0; i < nthreads; i++) {
            if (fibers[i].state != RUN) continue;
            cur = i;
            threadIdx = make_uint3((unsigned)i, 0, 0);
#ifdef EMU_FAST_SWITCH
            emu_switch(&sched_sp, fibers[i].sp);
#else
            swapcontext(&sched_ctx, &fibers[i].ctx);
#endif
            progress = true;
        }
        cur = -1;
        for (int w = 0; w * 32 < nthreads; w++) progress |= resolve_warp(w, nthreads);
        if (progress) continue;
        int live = 0, at_bar = 0, at_warp = 0;
        for (int i = 0; i < nthreads; i++) {
            if (fibers[i].state != DONE) live++;
            if (fibers[i].state == WAIT_BAR) at_bar++;
            if (fibers[i].state == WAIT_WARP) at_warp++;
        }
        if (!live) break;
        if (at_bar == live) {
            for (int i = 0; i < nthreads; i++)
                if (fibers[i].state == WAIT_BAR) fibers[i].state = RUN;
            continue;
        }
        if (at_warp && at_bar) emu_die("deadlock: some threads at __syncthreads, others at a warp collective");
        emu_die("deadlock: threads wait for lanes that never arrive");
    }
}

/* 256-byte aligned like cudaMalloc, but EXACTLY the size asked for, so that
 * an AddressSanitizer build catches a kernel reading past a buffer's end */
void* emu_alloc(size_t bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return nullptr;
    return p;
}

} /* namespace */

unsigned emu_warp_op(int op, int param, unsigned value, unsigned mask) {
    if (cur < 0) emu_die("warp collective outside a kernel");
    Fiber& f = fibers[cur];
    f.op = op;
    f.param = param;
    f.val = value;
    f.mask = mask;
    park(WAIT_WARP);
    return fibers[cur].res;
}

void emu_syncthreads(void) { park(WAIT_BAR); }

void emu_launch(dim3 grid, dim3 block, std::function<void()> body) {
    if (block.y != 1 || block.z != 1 || block.x < 1 || block.x > 1024) {
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.y > 65535) {
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    const std::function<void()>* saved = body_fn;
    body_fn = &body;
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = make_uint3(x, y, z);
                run_block((int)block.x);
            }
    body_fn = saved;
}

/* ---- the runtime calls ------------------------------------------------------ */
extern "C" {

cudaError_t CUDARTAPI cudaGetDevice(int* device) { *device = 0; return cudaSuccess; }
cudaError_t CUDARTAPI cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) { *count = 1; return cudaSuccess; }
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
    (void)device;
    *value = attr == cudaDevAttrMultiProcessorCount ? EMU_SMS : 0;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func, int blockSize,
                                                                    size_t dynamicSMemSize) {
    (void)func; (void)blockSize; (void)dynamicSMemSize;
    *numBlocks = EMU_OCC;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetLastError(void) { cudaError_t e = last_error; last_error = cudaSuccess; return e; }
cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return last_error; }
const char* CUDARTAPI cudaGetErrorString(cudaError_t error) { return error == cudaSuccess ? "no error" : "emulated CUDA error"; }
const char* CUDARTAPI cudaGetErrorName(cudaError_t error) { return error == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated"; }
cudaError_t CUDARTAPI cudaMalloc(void** p, size_t size) { *p = emu_alloc(size); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t CUDARTAPI cudaFree(void* p) { free(p); return cudaSuccess; }
cudaError_t CUDARTAPI cudaMallocHost(void** p, size_t size) { *p = emu_alloc(size); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t CUDARTAPI cudaFreeHost(void* p) { free(p); return cudaSuccess; }
cudaError_t CUDARTAPI cudaMemset(void* p, int v, size_t n) { memset(p, v, n); return cudaSuccess; }
cudaError_t CUDARTAPI cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) { (void)s; memset(p, v, n); return cudaSuccess; }
cudaError_t CUDARTAPI cudaMemcpy(void* d, const void* s, size_t n, enum cudaMemcpyKind k) { (void)k; memmove(d, s, n); return cudaSuccess; }
cudaError_t CUDARTAPI cudaMemcpyAsync(void* d, const void* s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) {
    (void)k; (void)st;
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
    (void)flags;
    *s = (cudaStream_t)emu_alloc(16);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t s) { free((void*)s); return cudaSuccess; }
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
    (void)flags;
    *e = (cudaEvent_t)emu_alloc(16);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t e) { free((void*)e); return cudaSuccess; }
cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e; (void)s; return cudaSuccess; }
cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    (void)s; (void)e; (void)flags;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { (void)a; (void)b; *ms = 0.0f; return cudaSuccess; }

} /* extern "C" */
