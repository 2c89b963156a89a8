/*
 * common/cuda_tma.cuh - Hopper's tensor memory accelerator (TMA) as the kernels use
 * it: a whole tile of a 2-D or 3-D tensor copied from global to shared memory by one
 * thread's instruction (cp.async.bulk.tensor), its arrival counted on an mbarrier in
 * shared memory that the readers wait on; the way back, a tile stored from shared memory
 * by one instruction (tma_store_*, below); and the host side that describes the tensor
 * (a CUtensorMap, handed to the kernel by value as a __grid_constant__ parameter).
 *
 * Why: a 64 x 64 bf16 tile by cp.async is 512 16-byte copies, each with an address and
 * a bounds test a thread works out; in the attention backward's dK/dV kernel that work
 * was about a quarter of the executed instructions (Nsight Compute, H100, 2026-12-07).
 * The copy engine takes the tile's coordinates instead, writes zeros for the rows past
 * the tensor's end, and lays the tile out in the 128-byte swizzle the warpgroup MMA
 * reads (ops/wgmma.cuh) by itself. A store likewise lets the block's warps leave at
 * once, where per-thread global stores kept them waiting at exit for the writes to drain.
 *
 * The protocol, one mbarrier per shared-memory stage:
 *  - once: one thread mbar_init(bar, 1), then mbar_init_fence() and a __syncthreads
 *    (mbar_init_block does the three);
 *  - each fill: the thread that loads calls mbar_expect_tx(bar, bytes) (its arrival,
 *    plus the bytes the copies will bring: a box counts whole, zero-filled rows too),
 *    then the tma_load_* calls naming that barrier;
 *  - readers: mbar_wait(bar, parity), parity = the fill's number & 1 (a barrier
 *    completes one phase per fill: 0, 1, 0, ...).
 * Refilling a stage needs the block to agree that its readers are done: the kernels
 * keep a __syncthreads per step for that. (A second, "empty" barrier per stage that each
 * warp arrives on and the loading thread waits on, in its place, was slower in the
 * attention backward: H100, 2026-12-07, ops/ATTENTION.md.) The copies write through the
 * async proxy, which the warpgroup MMA reads too: no proxy fence between them.
 *
 * Only sm_90 and later have these instructions (the callers are the sm_90a kernels).
 * Under the CPU emulator (tests/emu, CUDA_EMU) emu_cuda.h supplies the device names and
 * emu_tma.cpp the driver's encoder: copies land at random at issue or at the first wait,
 * and the destination reads NaN in between.
 */
#ifndef COMMON_CUDA_TMA_CUH
#define COMMON_CUDA_TMA_CUH

#include <cuda.h> /* CUtensorMap and its enums: types only, the encoder is found at run time */
#include <stdint.h>

#include "common/check.h"
#include "common/cuda_async.cuh"

#ifndef CUDA_EMU
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TMA_HAVE 1
#endif

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
#ifdef TMA_HAVE
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
#else
    (void)bar, (void)count;
    __trap();
#endif
}
/* the barriers this thread initialised -> visible to the copy engine (then a __syncthreads) */
__device__ __forceinline__ void mbar_init_fence() {
#ifdef TMA_HAVE
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
/* this thread's arrival, and `bytes` more to come from the copies of this fill */
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
#ifdef TMA_HAVE
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
#else
    (void)bar, (void)bytes;
#endif
}
/* until the phase of this parity has completed (the fill's copies have all landed) */
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
#ifdef TMA_HAVE
    asm volatile("{\n.reg .pred p;\nTMA_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra TMA_WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
#else
    (void)bar, (void)parity;
#endif
}
/* the box of map at coordinates (c0 innermost, ...) -> dst (1024-byte aligned for the
 * 128-byte swizzle), counted on bar */
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
#ifdef TMA_HAVE
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(bar))
                 : "memory");
#else
    (void)dst, (void)map, (void)c0, (void)c1, (void)bar;
    __trap();
#endif
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            uint64_t* bar) {
#ifdef TMA_HAVE
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
                 : "memory");
#else
    (void)dst, (void)map, (void)c0, (void)c1, (void)c2, (void)bar;
    __trap();
#endif
}
/* The other way: the box at coordinates (c0, c1, c2) of map <- src, a tile in shared
 * memory laid out as a load would leave it (elements outside the tensor are not
 * written). The threads that wrote src each fence it to the async proxy
 * (fence.proxy.async.shared::cta) before the barrier that publishes it to the storing thread, which then commits its stores as one bulk group and waits until
 * they have read shared memory, after which the block may reuse or leave it; the
 * global writes complete on their own. */
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, int c0, int c1, int c2, const void* src) {
#ifdef TMA_HAVE
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
                 ::"l"(map), "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
#else
    (void)map, (void)c0, (void)c1, (void)c2, (void)src;
    __trap();
#endif
}
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int c0, int c1, const void* src) {
#ifdef TMA_HAVE
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 ::"l"(map), "r"(smem_u32(src)), "r"(c0), "r"(c1)
                 : "memory");
#else
    (void)map, (void)c0, (void)c1, (void)src;
    __trap();
#endif
}
__device__ __forceinline__ void tma_store_commit() {
#ifdef TMA_HAVE
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
/* until this thread's committed stores have read their shared memory */
__device__ __forceinline__ void tma_store_wait_read() {
#ifdef TMA_HAVE
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
}
#undef TMA_HAVE
#endif /* CUDA_EMU */

/* n mbarriers of one arrival each at bars, initialised by thread 0 and, on return, seen
 * by the whole block and the copy engine (a __syncthreads: every thread calls it) */
__device__ __forceinline__ void mbar_init_block(uint64_t* bars, int n) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < n; i++) mbar_init(bars + i, 1);
        mbar_init_fence();
    }
    __syncthreads();
}

/* ---- host side ------------------------------------------------------------------------- */
typedef CUresult (*TmaEncodeFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* map: the tensor at base of `rank` dimensions (dims[0] innermost, elements), row
 * strides in bytes of dimensions 1.. (strides[0] is dimension 1's), boxes of box[]
 * elements; what names the tensor in errors. Elements outside dims read as zeros. */
static inline void tma_map_encode(CUtensorMap* map, const char* what, CUtensorMapDataType type, int rank,
                                  const void* base, const uint64_t* dims, const uint64_t* strides,
                                  const uint32_t* box, CUtensorMapSwizzle swizzle) {
    static TmaEncodeFn encode = nullptr;
    if (!encode) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                                cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn)
            FATAL("%s: the driver has no cuTensorMapEncodeTiled (%s): the TMA kernels need a CUDA 12 driver; "
                  "ATT_WGMMA=0 runs the attention without them", what, cudaGetErrorString(e));
        encode = (TmaEncodeFn)fn;
    }
    cuuint64_t d[5], s[4];
    cuuint32_t bx[5], es[5];
    for (int i = 0; i < rank; i++) {
        d[i] = dims[i];
        bx[i] = box[i];
        es[i] = 1;
        if (i + 1 < rank) s[i] = strides[i];
    }
    const CUresult r = encode(map, type, (cuuint32_t)rank, const_cast<void*>(base), d, s, bx, es,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        FATAL("%s: cuTensorMapEncodeTiled failed (CUresult %d) for a %d-d tensor at %p, dims %llu x %llu: "
              "the base must be 16-byte aligned and the row strides multiples of 16 bytes", what, (int)r, rank,
              base, (unsigned long long)dims[0], (unsigned long long)(rank > 1 ? dims[1] : 1));
}

#endif /* COMMON_CUDA_TMA_CUH */
