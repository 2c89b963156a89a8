/*
 * tests/emu/emu_cuda.h - the CPU emulator of CUDA: just enough of it to run
 * the project's own kernels, unchanged, on a machine without a GPU (CI), so
 * that indexing, barrier, divergence, layout and exactness bugs fail
 * `make test` rather than a GPU run. It runs
 *   - the op backend (every ops/..._cuda.cu: matmul, attention, layernorm, ...)
 *     under tests/test_ops_gpu.cu,
 *   - the compression kernels (the .cu files of compress/) under
 *     tests/test_compress_gpu.cu, bit for bit against the CPU reference,
 *   - the pipelined device collectives (comm/collectives_cuda.c, plain C)
 *     under tests/test_coll_gpu.c, over MPI or over the NCCL of nccl_emu.c,
 *   - the GPU trainer itself (every source of build/train_gpu), its step
 *     captured into a CUDA graph and replayed (train.cuda_graph).
 * tests/emu/emu.mk builds them (build/emu/test_*_emu, build/emu/train_gpu_emu).
 *
 * The files: this header (force-included, g++ -include, into every C++
 * translation unit of an emulated build); emu_sched.cpp (the SIMT scheduler,
 * the launches, the warp primitives), emu_wgmma.cpp (the warpgroup MMA),
 * emu_tma.cpp (TMA tile copies, mbarriers, the driver's tensor-map encoder),
 * emu_runtime.cpp (the CUDA runtime: memory, streams, events, errors) and
 * emu_cublaslt.cpp (cuBLASLt), which share emu_internal.h; curand_kernel.h (stands in for cuRAND's device
 * header: this directory goes first on the include path); nccl_emu.c (NCCL
 * over MPI, linked in place of libnccl). The real
 * CUDA headers supply the types (cudaError_t, __nv_bfloat16, __nv_fp8_*,
 * cuBLASLt descriptors, ...) and their host code (bf16 / fp8 conversions:
 * NVIDIA's host reference); plain C files (collectives_cuda.c, the tests'
 * C side) use the real <cuda_runtime_api.h> and link against emu_runtime.cpp.
 *
 * One way to launch: the `<<<...>>>` syntax, rewritten by emu.mk before
 * compiling (sed): `k<<<grid, block, smem, stream>>>(args)` becomes
 * `emu_launch(k, grid, block, smem, stream)(args)`, with `#line` keeping
 * messages on the original file and line. compress_cuda.cu's launches go
 * through its LAUNCH macro, whose default definition is a `<<<>>>` launch:
 * the emulator does not define LAUNCH, so that definition is rewritten like
 * every other launch. emu_launch records the launch's file:line (it is a
 * macro), which every error message then names.
 *
 * Execution model. The blocks of a launch run one after another; the threads
 * of a block are coroutines on one OS thread, resumed by a scheduler that
 * picks a random subset of the warps at each pass (lanes in a random
 * rotation), so warps drift apart between barriers as on the hardware. A
 * thread runs until it parks at a rendezvous or finishes:
 *   - warp collectives (__shfl_{xor,up,down,}_sync, __ballot_sync,
 *     __reduce_{add,max}_sync, __syncwarp, ldmatrix, mma.sync) complete when
 *     all 32 lanes of the warp are parked there; lanes at DIFFERENT
 *     collectives (or a different shuffle offset), a collective after some
 *     lanes exited, a mask other than 0xffffffff, or a collective in a
 *     partial warp stop the run with an error;
 *   - __syncthreads completes when every thread of the block is there; a
 *     barrier after some threads exited, or threads waiting at a barrier
 *     while others wait at a warp collective (a deadlock on the GPU), stop
 *     the run with an error;
 *   - an mbarrier wait (common/cuda_tma.cuh) parks the thread until the
 *     phase it waits for completes; nothing left that could complete it is
 *     reported as a deadlock (emu_tma.cpp).
 * Memory: device memory is host memory. cudaMalloc'd blocks are filled with
 * 0xA5 (fresh device memory is not zero) and carry guard zones from their
 * exact end, checked after every launch and at cudaFree (an out-of-bounds
 * write names the launch); __ldg and cp.async sources must lie inside an
 * allocation and be aligned (an out-of-bounds read is caught too). Dynamic
 * shared memory is NaN-filled (0xFF bytes) before each block; cp.async
 * copies land at random either at issue or at the wait that retires them,
 * TMA tile copies at issue or at the first wait on their mbarrier (their
 * destination NaN until then), and a copy still in flight at the block's end
 * is an error.
 * Launches fail as the runtime would (bad grid/block, more dynamic shared
 * memory than the kernel's attribute allows). Streams and events are
 * synchronous: queued work runs when it is queued, except on a stream being
 * captured, where it is recorded (kernels with copies of their arguments)
 * and runs at each launch of the graph; the calls a capture forbids fail
 * with the runtime's errors (emu_runtime.cpp). The device: "sm_90", 4 multiprocessors, 2 resident blocks per
 * SM (few, so that grid-stride loops take several turns in small tests).
 * Floating point: the host's IEEE arithmetic (build with -ffp-contract=off),
 * fmaf for __fmaf_rn, exp2f for ex2.approx. The scheduling is pseudo-random
 * with a fixed seed (EMU_SEED=n in the environment picks another).
 *
 * What it cannot show: timing, true concurrency and the memory model (one
 * thread runs at a time; races between blocks, atomics' interleavings),
 * stream ordering, the hardware's own rounding (the GPU tests check the fp8
 * conversion exhaustively) and instruction layouts beyond our reading of the
 * PTX ISA (ldmatrix / mma fragments). Static __shared__ arrays are plain
 * static storage: they keep the previous block's contents (not poisoned).
 */
#ifndef EMU_CUDA_H
#define EMU_CUDA_H

/* keywords first: host_defines.h keeps definitions it finds */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static /* blocks run one after another: one instance, shared by the block's threads */
#define __grid_constant__

#include <cuda.h> /* CUtensorMap (common/cuda_tma.cuh) */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <functional>

#define CUDA_EMU 1
#define CC_EMU 1      /* tests/test_compress_gpu.cu: skips the hardware fp8 conversion check */
#define ATT_EMULATE 1 /* ops/attention_kernels.cuh: the PTX wrappers come from here */

/* ---- thread coordinates (set by the scheduler before a thread runs) ------------------ */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
enum { warpSize = 32 };

/* ---- rendezvous -------------------------------------------------------------------------- */
enum EmuWarpOp {
    EMU_SHFL_XOR = 1, EMU_SHFL_UP, EMU_SHFL_DOWN, EMU_SHFL_IDX, /* 32-bit values */
    EMU_SHFL_XOR64, EMU_SHFL_UP64, EMU_SHFL_DOWN64, EMU_SHFL_IDX64, /* 64-bit values */
    EMU_BALLOT, EMU_RED_ADD, EMU_RED_MAX, EMU_SYNCWARP, EMU_LDSM, EMU_LDSM_T, EMU_MMA, EMU_GATHER
};
/* a warp collective: parks until the whole warp is there; returns this lane's result */
uint64_t emu_warp_op(int op, int param, uint64_t value, unsigned mask);
void emu_syncthreads(void);

static inline void __syncthreads(void) { emu_syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_warp_op(EMU_SYNCWARP, 0, 0, mask); }

template <typename T>
static inline T emu_shfl(int op, unsigned mask, T v, int param) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "shuffles move 32- or 64-bit values");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    b = emu_warp_op(sizeof(T) == 8 ? op + (EMU_SHFL_XOR64 - EMU_SHFL_XOR) : op, param, b, mask);
    T r;
    memcpy(&r, &b, sizeof(T));
    return r;
}
/* the overloads CUDA has (no width argument: full-warp shuffles only) */
#define EMU_SHFL_OVERLOADS(T)                                                                                          \
    static inline T __shfl_xor_sync(unsigned mask, T v, int m) { return emu_shfl(EMU_SHFL_XOR, mask, v, m); }          \
    static inline T __shfl_up_sync(unsigned mask, T v, unsigned d) { return emu_shfl(EMU_SHFL_UP, mask, v, (int)d); }  \
    static inline T __shfl_down_sync(unsigned mask, T v, unsigned d) { return emu_shfl(EMU_SHFL_DOWN, mask, v, (int)d); } \
    static inline T __shfl_sync(unsigned mask, T v, int src) { return emu_shfl(EMU_SHFL_IDX, mask, v, src); }
EMU_SHFL_OVERLOADS(int)
EMU_SHFL_OVERLOADS(unsigned)
EMU_SHFL_OVERLOADS(long long)
EMU_SHFL_OVERLOADS(unsigned long long)
EMU_SHFL_OVERLOADS(float)
EMU_SHFL_OVERLOADS(double)
#undef EMU_SHFL_OVERLOADS
static inline unsigned __ballot_sync(unsigned mask, int pred) { return (unsigned)emu_warp_op(EMU_BALLOT, 0, pred != 0, mask); }
static inline unsigned __reduce_add_sync(unsigned mask, unsigned v) { return (unsigned)emu_warp_op(EMU_RED_ADD, 0, v, mask); }
static inline unsigned __reduce_max_sync(unsigned mask, unsigned v) { return (unsigned)emu_warp_op(EMU_RED_MAX, 0, v, mask); }

/* ---- the attention kernels' PTX wrappers (ops/attention_kernels.cuh, ATT_EMULATE) ---- */
unsigned char* emu_dynamic_smem();
#define DYNAMIC_SMEM(name) unsigned char* name = emu_dynamic_smem() /* common/cuda_async.cuh */
void cp_async16(void* smem, const void* gmem, bool valid);
void cp_async4(void* smem, const void* gmem);
void cp_async_commit();
void emu_cp_async_wait(int n);
template <int N>
static inline void cp_async_wait() {
    emu_cp_async_wait(N);
}
void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p);
void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16* p);
void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
static inline float fast_exp2(float x) { return exp2f(x); } /* ops/cuda_common.cuh's ex2.approx */

/* ---- ops/wgmma.cuh's warpgroup MMA (tests/emu/emu_wgmma.cpp) ----------------------------
 * A product is recorded when issued (with the warp's A fragments, when they come from
 * registers) and computed at the wg_wait that retires its group, from shared memory as it
 * is then: the accumulators read NaN in between, so a read before the wait shows. */
uint32_t smem_u32(const void* p); /* offset in the block's dynamic shared memory */
void wg_fence();
void wg_commit();
void emu_wg_wait(int n);
template <int N>
static inline void wg_wait() {
    emu_wg_wait(N);
}
static inline void fence_async_smem() {}
void emu_wg_mma(float (&d)[8][4], const uint32_t* a, uint64_t da, uint64_t db, int tb, bool zero);
template <int TB, bool ZERO = false>
static inline void wg_mma_ss(float (&d)[8][4], uint64_t da, uint64_t db) {
    emu_wg_mma(d, nullptr, da, db, TB, ZERO); /* ZERO: d = A B, d's values before it not read */
}
template <int TB, bool ZERO = false>
static inline void wg_mma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
    emu_wg_mma(d, a, 0, db, TB, ZERO);
}
/* every lane's four words, for each lane (a warp collective; valid until the next one) */
const uint32_t (*emu_warp_gather4(const uint32_t (&v)[4]))[4];

/* ---- common/cuda_tma.cuh's tile copies and mbarriers (tests/emu/emu_tma.cpp) -------------
 * A copy lands at random at issue or at the first wait on its barrier (NaN until then); a
 * wait for a phase not yet complete parks the thread until it is. */
void mbar_init(uint64_t* bar, unsigned count);
static inline void mbar_init_fence() {}
void mbar_expect_tx(uint64_t* bar, unsigned bytes);
void mbar_wait(uint64_t* bar, unsigned parity);
void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar);
void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar);
void tma_store_2d(const CUtensorMap* map, int c0, int c1, const void* src);
void tma_store_3d(const CUtensorMap* map, int c0, int c1, int c2, const void* src);
void tma_store_commit();
void tma_store_wait_read();

/* ---- arithmetic and bit intrinsics (the host's IEEE operations) -------------------------- */
#define __log2f log2f
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline float __double2float_rn(double a) { return (float)a; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
/* a + b rounded toward zero: the nearest sum, stepped one ulp toward zero
 * where it rounded away (TwoSum's error, exact in round-to-nearest, has the
 * opposite sign then) */
static inline float __fadd_rz(float a, float b) {
    const float r = a + b;
    if (!std::isfinite(r)) return std::isinf(r) && std::isfinite(a) && std::isfinite(b) ? std::copysign(FLT_MAX, r) : r;
    const float bv = r - a, err = (a - (r - bv)) + (b - bv);
    return (err != 0.0f && (err < 0.0f) != (r < 0.0f)) ? std::nextafter(r, 0.0f) : r;
}
static inline unsigned __float2uint_rz(float f) { return (unsigned)f; }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s & 31u));
}
static inline unsigned __vcmpeq4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        if (((a >> (8 * i)) & 0xFFu) == ((b >> (8 * i)) & 0xFFu)) r |= 0xFFu << (8 * i);
    return r;
}
static inline unsigned __vcmpgtu4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        if (((a >> (8 * i)) & 0xFFu) > ((b >> (8 * i)) & 0xFFu)) r |= 0xFFu << (8 * i);
    return r;
}
static inline unsigned __vmaxu2(unsigned a, unsigned b) {
    const unsigned lo = std::max(a & 0xFFFFu, b & 0xFFFFu), hi = std::max(a >> 16, b >> 16);
    return lo | (hi << 16);
}
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
/* CUDA's integer min/max overloads, and std's for everything else (float, size_t, ...) */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
using std::isfinite;
using std::isinf;
using std::isnan;
using std::max;
using std::min;

/* global loads: the address must be aligned and inside a cudaMalloc'd block */
void emu_check_global(const void* p, size_t bytes, size_t align, const char* what);
template <typename T>
static inline T __ldg(const T* p) {
    emu_check_global(p, sizeof(T), alignof(T), "__ldg");
    return *p;
}

/* the cache-hinted loads (ld.global.cs / .cg): plain loads here, checked as __ldg's are */
template <typename T>
static inline T __ldcs(const T* p) {
    emu_check_global(p, sizeof(T), alignof(T), "__ldcs");
    return *p;
}
template <typename T>
static inline T __ldcg(const T* p) {
    emu_check_global(p, sizeof(T), alignof(T), "__ldcg");
    return *p;
}
/* one thread runs at a time and memory is the host's: every store is already visible */
static inline void __threadfence(void) {}

/* ---- atomics: one thread runs at a time, so plain read-modify-writes are atomic ---------- */
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { unsigned long long o = *p; *p += v; return o; }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { unsigned o = *p; *p += v; return o; }
static inline unsigned atomicMax(unsigned* p, unsigned v) { unsigned o = *p; if (v > o) *p = v; return o; }
static inline unsigned atomicMin(unsigned* p, unsigned v) { unsigned o = *p; if (v < o) *p = v; return o; }

/* cuda_runtime.h has this overload for nvcc only: kernels are passed by pointer */
template <class T>
static inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute((const void*)entry, attr, value);
}

/* ---- launches ------------------------------------------------------------------------------ */
typedef void (*EmuBody)(void* ctx);
/* the runtime's checks of a launch of kernel fn: false, with the launch error recorded (as
 * cudaGetLastError reports it), for a bad configuration */
bool emu_launch_ok(const void* fn, dim3 grid, dim3 block, size_t smem, cudaStream_t stream);
/* runs body(ctx) as every thread of every block, the kernel fn launched at file:line */
void emu_run_grid(const void* fn, const char* file, int line, dim3 grid, dim3 block, size_t smem, EmuBody body,
                  void* ctx);
/* Work queued on a stream (emu_runtime.cpp): run now, or, while the stream is being captured
 * into a graph (cudaStreamBeginCapture), recorded as the graph's next node and run by each
 * cudaGraphLaunch; the runtime's error for a queue that a capture forbids, else cudaSuccess. */
cudaError_t emu_enqueue(cudaStream_t stream, const char* what, std::function<void()> node);
/* a kernel's emu_enqueue, its error recorded as the launch error */
void emu_enqueue_kernel(cudaStream_t stream, std::function<void()> node);

template <typename... P>
struct EmuLauncher {
    void (*fn)(P...);
    const char* file;
    int line;
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    template <typename... A>
    void run(A... args) const {
        /* every thread calls fn with its own copy of the arguments, as on the GPU */
        auto call = [&]() { fn(args...); };
        emu_run_grid((const void*)fn, file, line, grid, block, smem,
                     [](void* c) { (*static_cast<decltype(call)*>(c))(); }, &call);
    }
    template <typename... A>
    void operator()(A... args) {
        if (!emu_launch_ok((const void*)fn, grid, block, smem, stream)) return;
        /* the node holds copies of the arguments, as a captured kernel node holds its parameters */
        const EmuLauncher self = *this;
        emu_enqueue_kernel(stream, [self, args...]() { self.run(args...); });
    }
};
template <typename... P>
static inline EmuLauncher<P...> emu_launch_at(const char* file, int line, void (*fn)(P...), dim3 grid, dim3 block,
                                              size_t smem = 0, cudaStream_t stream = nullptr) {
    return EmuLauncher<P...>{fn, file, line, grid, block, smem, stream};
}
#define emu_launch(...) emu_launch_at(__FILE__, __LINE__, __VA_ARGS__)

#endif /* EMU_CUDA_H */
