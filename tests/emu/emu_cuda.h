/*
 * tests/emu/emu_cuda.h - just enough CUDA to run the backend's own kernels on
 * the CPU, for tests on machines without a GPU.
 *
 * Force-included (g++ -include) into every translation unit of an emulated
 * build; the CUDA sources are first passed through tests/emu/build_emu.sh,
 * which rewrites each `kernel<<<grid, block, smem, stream>>>(args)` into
 * `emu_launch(kernel, grid, block, smem, stream)(args)`. The real CUDA headers
 * supply the types (cudaError_t, __nv_bfloat16, cuBLASLt descriptors, ...);
 * tests/emu/emu_cuda.cpp defines the runtime and cuBLASLt functions the
 * backend calls, and the SIMT machinery below.
 *
 * Execution model: the threads of a block are coroutines (ucontext) resumed
 * by a scheduler in random warp order; blocks run one after another. Warp
 * collectives (shfl.xor, ldmatrix, mma.sync) and __syncthreads complete when
 * all participants have arrived. cp.async copies land at random either at
 * issue or at the wait that retires them. Dynamic shared memory is NaN-filled
 * before each block. So missing barriers and waits, divergent collectives,
 * misaligned or out-of-range ldmatrix/cp.async addresses and reads of unset
 * shared memory all show up - within the limits of one CPU thread: true
 * concurrency, memory-model subtleties and the hardware's own behaviour are
 * not modelled (the fragment layouts follow the PTX ISA as we read it).
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
#define __shared__ static /* one instance per kernel, shared by the block's coroutines */

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <cmath>

using std::isfinite;
using std::max;
using std::min;

#define __log2f log2f

/* cuda_runtime.h has this overload for nvcc only: kernels are passed by pointer */
template <class T>
static inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute((const void*)entry, attr, value);
}

/* ---- thread coordinates (set by the scheduler before a coroutine runs) -------- */
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

/* ---- collectives and barriers -------------------------------------------------- */
void __syncthreads();
float emu_shfl_xor_f(float v, int o);
double emu_shfl_xor_d(double v, int o);
static inline float __shfl_xor_sync(unsigned mask, float v, int o) {
    (void)mask;
    return emu_shfl_xor_f(v, o);
}
static inline double __shfl_xor_sync(unsigned mask, double v, int o) {
    (void)mask;
    return emu_shfl_xor_d(v, o);
}

/* ---- the attention kernels' primitives (model/attention_kernels.cuh) ------------- */
#define ATT_EMULATE 1
unsigned char* emu_dynamic_smem();
#define ATT_DYNAMIC_SMEM(name) unsigned char* name = emu_dynamic_smem()
void cp_async16(void* smem, const void* gmem, bool valid);
void cp_async_commit();
void emu_cp_async_wait(int n);
template <int N>
static inline void cp_async_wait() {
    emu_cp_async_wait(N);
}
void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p);
void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16* p);
void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
static inline float fast_exp2(float x) { return exp2f(x); }

/* ---- launches --------------------------------------------------------------------- */
typedef void (*EmuBody)(void* ctx);
/* runs body(ctx) as every thread of every block; records a launch error (as
 * cudaGetLastError reports it) for a bad configuration instead */
void emu_run_grid(const void* fn, dim3 grid, dim3 block, size_t smem, EmuBody body, void* ctx);

template <typename... P>
struct EmuLauncher {
    void (*fn)(P...);
    dim3 grid, block;
    size_t smem;
    template <typename... A>
    void operator()(A... args) {
        auto call = [&]() { fn(args...); };
        emu_run_grid((const void*)fn, grid, block, smem, [](void* c) { (*static_cast<decltype(call)*>(c))(); },
                     &call);
    }
};
template <typename... P>
static inline EmuLauncher<P...> emu_launch(void (*fn)(P...), dim3 grid, dim3 block, size_t smem = 0,
                                           cudaStream_t stream = nullptr) {
    (void)stream;
    return EmuLauncher<P...>{fn, grid, block, smem};
}

#endif /* EMU_CUDA_H */
