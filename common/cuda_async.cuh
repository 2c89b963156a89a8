/*
 * common/cuda_async.cuh - the asynchronous global -> shared copies the
 * kernels use to keep loads in flight while they compute (cp.async, 16
 * or 4 bytes per thread and call), and the block's dynamic shared memory.
 *
 * Under the CPU emulator (tests/emu, CUDA_EMU) emu_cuda.h supplies the same
 * names, so the kernels that use them run unchanged there.
 */
#ifndef COMMON_CUDA_ASYNC_CUH
#define COMMON_CUDA_ASYNC_CUH

#ifndef CUDA_EMU
#include <stdint.h>

/* the block's dynamic shared memory, 16-byte aligned */
#define DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16-byte async copy global -> shared (both 16-byte aligned); valid = false
 * writes 16 zero bytes without reading global memory. */
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(n)
                 : "memory");
}
/* 4-byte async copy global -> shared (both 4-byte aligned; through the L1,
 * the only cache level cp.async offers below 16 bytes) */
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(smem)), "l"(gmem) : "memory");
}
/* closes the group of this thread's copies issued since the last commit */
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* waits until at most N of this thread's committed groups are still in flight */
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif /* CUDA_EMU */

#endif /* COMMON_CUDA_ASYNC_CUH */
