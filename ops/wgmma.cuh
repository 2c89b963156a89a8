/*
 * ops/wgmma.cuh - Hopper's warpgroup matrix multiply-accumulate (wgmma.mma_async,
 * sm_90a) as the attention kernels use it: the shared-memory tile layout it reads,
 * its operand descriptors, and the one shape they need, m64n64k16 (bf16 in, fp32
 * accumulators).
 *
 * A warpgroup (4 consecutive warps, 128 threads) computes D[64][64] += A[64][16] B[16][64].
 * Its threads hold D exactly as four warps would hold mma.sync's C tiles: warp w of the
 * group holds rows 16w..16w+15, and element e of n-tile j (columns 8j..8j+7) of lane
 * 4g + t is D[16w + g + 8(e/2)][8j + 2t + e%2]; that is d[j][e] below. A comes from shared
 * memory (a descriptor) or from registers, then exactly mma.sync's m16n8k16 A fragment of
 * the warp's 16 rows (P and dS go from one product's accumulators into the next that way).
 * B always comes from shared memory.
 *
 * Tiles in shared memory: rows of 64 bf16 (128 bytes), the tile 1024-byte aligned, with
 * the 128-byte swizzle: 16-byte chunk c of row r is stored at chunk c ^ (r % 8)
 * (wg_swz). That is the layout the descriptors' "128B swizzle" mode reads (the hardware
 * XORs address bits 4-6 with bits 7-9), and it serves a tile in both of its roles:
 *  - K-major (rows = M or N, the 64 columns = K, the head dimension): S = Q K^T reads Q as
 *    A and K as B this way. k-step ks (columns 16ks..16ks+15) starts 32 ks bytes in.
 *  - MN-major (rows = K, columns = N; B with the transpose bit set): O = P V reads V this
 *    way. k-step kk (rows 16kk..16kk+15) starts 2048 kk bytes in.
 * The descriptor (wg_desc): start address >> 4 in bits 0-13, leading byte offset >> 4 in
 * 16-29, stride byte offset >> 4 in 32-45, swizzle mode in 62-63 (1 = 128 bytes). The
 * stride byte offset is the step from one group of 8 rows to the next, 1024 bytes here;
 * the leading byte offset only matters for operands wider than one 128-byte row, which
 * these products never are.
 *
 * The products are asynchronous: wg_fence() before issuing (whenever registers they read
 * or accumulate into were written since the last one), the wg_mma_* calls, wg_commit(),
 * then wg_wait<N>() (at most N committed groups still running) before the accumulators
 * are read, and wg_hold(d) right after it, so the compiler cannot move a read of d above
 * the wait. Shared memory written through the generic proxy (cp.async, plain stores) is
 * made visible to the products by fence_async_smem() before the barrier that publishes it.
 *
 * Only an sm_90a build has these instructions: elsewhere (the compute_90 PTX the Makefile
 * also ships for later GPUs) the wrappers trap, and the launchers pick the mma.sync
 * kernels (attention_cuda.cu, attn_wgmma). Under the CPU emulator (ATT_EMULATE) tests/emu
 * supplies the same names, with the products resolved at the wait.
 */
#ifndef OPS_WGMMA_CUH
#define OPS_WGMMA_CUH

#include <stdint.h>

#include "common/cuda_async.cuh"

#define WG_ROW_BYTES 128  /* one tile row: 64 bf16 */
#define WG_TILE_ALIGN 1024 /* one swizzle pattern: 8 rows */

/* element offset of (row r, column c) in a swizzled tile of 64-column rows */
__device__ __forceinline__ int wg_swz(int r, int c) { return r * 64 + ((((c >> 3) ^ r) & 7) << 3) + (c & 7); }

/* the descriptor of a swizzled operand starting at p (a tile, plus the k-step's offset) */
__device__ __forceinline__ uint64_t wg_desc(const void* p) {
    const uint64_t start = (smem_u32(p) & 0x3FFFFu) >> 4;
    const uint64_t lbo = 16 >> 4, sbo = (8 * WG_ROW_BYTES) >> 4;
    return start | (lbo << 16) | (sbo << 32) | (1ull << 62);
}

/* the descriptor of the operand `bytes` past the one of desc (a k-step inside its tile):
 * the start address field plus bytes >> 4, which cannot carry out of its 14 bits, since
 * shared memory ends below 256 KB. The products' k-steps take their descriptors this way,
 * so that the address arithmetic is done once per tile, not once per instruction. */
__device__ __forceinline__ uint64_t wg_desc_at(uint64_t desc, int bytes) { return desc + (uint64_t)(bytes >> 4); }

/* the accumulators as the compiler's values at this point: reads of d stay below it
 * (under the emulator every call is ordered already) */
__device__ __forceinline__ void wg_hold(float (&d)[8][4]) {
#ifndef ATT_EMULATE
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[j][e])::"memory");
#else
    (void)d;
#endif
}

#ifndef ATT_EMULATE
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_HAVE 1
#endif

__device__ __forceinline__ void wg_fence() {
#ifdef WG_HAVE
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void wg_commit() {
#ifdef WG_HAVE
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wg_wait() {
#ifdef WG_HAVE
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* generic-proxy writes to shared memory (this thread's) -> visible to wgmma's reads */
__device__ __forceinline__ void fence_async_smem() {
#ifdef WG_HAVE
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* The accumulators as asm operands: the register list of the instruction, and the 32
 * operands with constraint C ("+f": read and written, "=f": only written) */
#define WG_D_REGS                                                                                      \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                          \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WG_D_OPS(C)                                                                                    \
    C(d[0][0]), C(d[0][1]), C(d[0][2]), C(d[0][3]), C(d[1][0]), C(d[1][1]), C(d[1][2]), C(d[1][3]),    \
    C(d[2][0]), C(d[2][1]), C(d[2][2]), C(d[2][3]), C(d[3][0]), C(d[3][1]), C(d[3][2]), C(d[3][3]),    \
    C(d[4][0]), C(d[4][1]), C(d[4][2]), C(d[4][3]), C(d[5][0]), C(d[5][1]), C(d[5][2]), C(d[5][3]),    \
    C(d[6][0]), C(d[6][1]), C(d[6][2]), C(d[6][3]), C(d[7][0]), C(d[7][1]), C(d[7][2]), C(d[7][3])
#define WG_RW(x) "+f"(x)
#define WG_W(x) "=f"(x)
#define WG_SS_ASM "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                          \
                  "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D_REGS ", %32, %33, p, 1, 1, 0, %35;\n}\n"

/* d += A B, A from shared memory (K-major), B from shared memory (TB = 0: K-major, 1:
 * MN-major). ZERO: d = A B instead, the scale-d predicate false, d only written, so the
 * compiler need not zero it first (zeroing moves between a committed group's products
 * and this one made ptxas wait for the group: C7517) */
template <int TB, bool ZERO = false>
__device__ __forceinline__ void wg_mma_ss(float (&d)[8][4], uint64_t da, uint64_t db) {
#ifdef WG_HAVE
    if constexpr (ZERO) asm volatile(WG_SS_ASM : WG_D_OPS(WG_W) : "l"(da), "l"(db), "n"(0), "n"(TB));
    else asm volatile(WG_SS_ASM : WG_D_OPS(WG_RW) : "l"(da), "l"(db), "n"(1), "n"(TB));
#else
    (void)d, (void)da, (void)db;
    __trap();
#endif
}
/* d += A B, A from registers (the warp's 16 rows as an mma.sync A fragment), B from shared
 * memory; ZERO as wg_mma_ss's */
#define WG_RS_ASM "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                          \
                  "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D_REGS                     \
                  ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
template <int TB, bool ZERO = false>
__device__ __forceinline__ void wg_mma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
#ifdef WG_HAVE
    if constexpr (ZERO)
        asm volatile(WG_RS_ASM : WG_D_OPS(WG_W)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(0), "n"(TB));
    else
        asm volatile(WG_RS_ASM : WG_D_OPS(WG_RW)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1), "n"(TB));
#else
    (void)d, (void)a, (void)db;
    __trap();
#endif
}
#undef WG_RS_ASM
#undef WG_SS_ASM
#undef WG_W
#undef WG_RW
#undef WG_D_OPS
#undef WG_D_REGS
#undef WG_HAVE
#endif /* ATT_EMULATE */

#endif /* OPS_WGMMA_CUH */
