/*
 * tests/cuda_emu/cuda_emu.h - a CPU emulator of the small CUDA subset the
 * compression kernels use, so that compress/compress_cuda.cu and
 * comm/collectives_cuda.c can be run and checked bit for bit against the CPU
 * reference on a machine without a GPU (CI, or a developer's laptop).
 *
 * It is a test tool, not a CUDA implementation: it compiles the same .cu
 * source with g++ (this directory goes first on the include path, so
 * <cuda_runtime.h> and <curand_kernel.h> resolve here; the real cuda_bf16.h,
 * cuda_fp8.h and cuda_runtime_api.h are used for their host code and types),
 * and runs every block of a launch as 256 cooperative fibers (ucontext).
 * Each warp-collective (__shfl_*_sync, __ballot_sync, __reduce_*_sync) and
 * __syncthreads is a rendezvous: a lane parks until every lane of its warp
 * (block) has arrived, then all get their results. If the lanes of a warp
 * arrive at DIFFERENT collectives, or some have exited, the emulator stops
 * with an error - the divergence bugs that hang or corrupt a real GPU.
 * Device memory is host memory; streams and events run synchronously.
 * Floating point: the host's IEEE arithmetic (build with -ffp-contract=off),
 * fmaf for __fmaf_rn, NVIDIA's own host reference for the fp8 conversion.
 * What it cannot show: timing, races between blocks, real hardware rounding
 * (the GPU test checks the hardware conversion exhaustively).
 */
#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#include <cuda_runtime_api.h> /* the real header: types and the C API we implement */
#include <vector_functions.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <functional>

#define CC_EMU 1

#undef __shared__
#define __shared__ static /* blocks run one after another: static storage is per-block shared memory */
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

/* ---- launches ---------------------------------------------------------- */
void emu_launch(dim3 grid, dim3 block, std::function<void()> body);
#define LAUNCH(kernel, grid, block, stream, ...) \
    ((void)(stream), emu_launch(dim3(grid), dim3(block), [=]() { kernel(__VA_ARGS__); }))

/* ---- rendezvous -------------------------------------------------------- */
enum { EMU_SHFL_XOR = 1, EMU_SHFL_UP, EMU_BALLOT, EMU_RED_ADD, EMU_RED_MAX };
unsigned emu_warp_op(int op, int param, unsigned value, unsigned mask);
void emu_syncthreads(void);

static inline void __syncthreads(void) { emu_syncthreads(); }
static inline unsigned __shfl_xor_sync(unsigned mask, unsigned v, int m) { return emu_warp_op(EMU_SHFL_XOR, m, v, mask); }
static inline float __shfl_xor_sync(unsigned mask, float v, int m) {
    unsigned b;
    memcpy(&b, &v, 4);
    b = emu_warp_op(EMU_SHFL_XOR, m, b, mask);
    float r;
    memcpy(&r, &b, 4);
    return r;
}
static inline unsigned __shfl_up_sync(unsigned mask, unsigned v, unsigned d) { return emu_warp_op(EMU_SHFL_UP, (int)d, v, mask); }
static inline unsigned __ballot_sync(unsigned mask, int pred) { return emu_warp_op(EMU_BALLOT, 0, pred != 0, mask); }
static inline unsigned __reduce_add_sync(unsigned mask, unsigned v) { return emu_warp_op(EMU_RED_ADD, 0, v, mask); }
static inline unsigned __reduce_max_sync(unsigned mask, unsigned v) { return emu_warp_op(EMU_RED_MAX, 0, v, mask); }

/* ---- arithmetic and bit intrinsics (the host's IEEE operations) --------- */
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
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
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
using std::isinf;
using std::isnan;
template <typename T> static inline T __ldg(const T* p) { return *p; }

/* ---- atomics: one host thread runs everything ---------------------------- */
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { unsigned long long o = *p; *p += v; return o; }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { unsigned o = *p; *p += v; return o; }
static inline unsigned atomicMax(unsigned* p, unsigned v) { unsigned o = *p; if (v > o) *p = v; return o; }
static inline unsigned atomicMin(unsigned* p, unsigned v) { unsigned o = *p; if (v < o) *p = v; return o; }

#endif /* CUDA_EMU_H */
