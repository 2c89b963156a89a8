/*
 * ops/attention_kernels.cuh - the device code of the fused causal attention
 * (see ops/attention_cuda.cu for the design and the host launchers): the
 * primitives, the shared tiles, and the forward kernel; the backward's kernels
 * are in ops/attention_bwd_kernels.cuh.
 *
 * Every kernel comes in two forms. WG = false multiplies with mma.sync
 * (any GPU from sm_80; tiles padded by 16 bytes per row for ldmatrix);
 * WG = true, for hs = 64 on Hopper, with the warpgroup MMA of
 * ops/wgmma.cuh (tiles in its 128-byte swizzle, operands straight from
 * shared memory, the tiles brought by TMA: common/cuda_tma.cuh; the
 * mma.sync form loads them by cp.async). Both keep one layout of the accumulators: warp w owns rows
 * 16w..16w+15 of the block's 64-row tile, in mma.sync's C fragments, so
 * the softmax and masking code between the products is shared.
 *
 * Everything below the PTX wrappers is plain CUDA C++ on those few
 * primitives, so the CPU emulation of tests/emu can supply them instead
 * (ATT_EMULATE; the async copies: common/cuda_async.cuh, common/cuda_tma.cuh) and run these same
 * kernels lane by lane.
 *
 * Needs before inclusion: bf16 (= __nv_bfloat16), load8(), fast_exp2() and LOG2E,
 * from cuda_common.cuh.
 */
#ifndef ATTENTION_KERNELS_CUH
#define ATTENTION_KERNELS_CUH

#include <stdint.h>
#include <string.h>

#include "common/cuda_async.cuh"
#include "common/cuda_tma.cuh"
#include "ops/wgmma.cuh"

#define ATT_THREADS 128 /* 4 warps */
/* Blocks per SM that __launch_bounds__ asks the register allocator for, at
 * hs <= 64 (tuning knobs: -DATT_FWD_MINB=4 caps registers at 128, 3 at 168).
 * The defaults are the highest values that compile without spills. */
#ifndef ATT_FWD_MINB
#define ATT_FWD_MINB 3
#endif
#ifndef ATT_BWD_MINB
#define ATT_BWD_MINB 2
#endif
/* The same for the warpgroup-MMA (WG) backward kernels, whose accumulators do not
 * hold fragments of their fixed operands: 3 (168 registers) fits them without spills
 * and was 7% faster than 2 on the H200 (2026-12-02). */
#ifndef ATT_WG_BWD_MINB
#define ATT_WG_BWD_MINB 3
#endif
/* Shared-memory stages of the backward's streamed tiles at hs <= 64: with 3, a
 * step's tiles are loaded two steps ahead (dK/dV), or the stage the prefetch
 * refills may still be read by a running product (dQ). The forward has 2. */
#ifndef ATT_STAGES
#define ATT_STAGES 3
#endif

/* The (head, batch row) pairs that run side by side (att_block): with this many,
 * their streamed tiles (K and V, or Q and dO: 256 KB per pair at T = 1024, hs = 64)
 * stay in the L2 while their blocks read them; the launchers shrink the group for
 * longer rows (att_raster). */
#ifndef ATT_RASTER_BYTES
#define ATT_RASTER_BYTES (8u << 20)
#endif
#define LN2 0.6931471805599453f

#ifndef ATT_EMULATE
/* ---- PTX wrappers ------------------------------------------------------------ */

/* Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i,
 * register i receives matrix i (lane gets row lane/4, elements 2*(lane%4), +1;
 * with .trans, the transposed matrix). */
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* d += a @ b, m16n8k16, bf16 inputs, fp32 accumulators */
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif /* ATT_EMULATE */

/* ---- bf16 packing (plain C++) ---------------------------------------------------- */

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x = lo = the lower 16 bits */
    uint32_t u;
    memcpy(&u, &v, 4); /* a bit cast; compiles to nothing */
    return u;
}

/* ---- fragment addressing ---------------------------------------------------------
 * Shared tiles are row-major [rows][HS + 8] bf16: the 16-byte pad shifts each
 * row by 4 banks, so the 8 row addresses of one ldmatrix phase hit distinct
 * banks (no conflicts). */

/* A fragment of the 16x16 block at (r0, c0) of a row-major tile (rows = M, cols = K) */
template <int STR>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int r0, int c0, int lane) {
    ldsm_x4(a, tile + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * STR + c0 + (lane >> 4) * 8);
}
/* B fragments for two n-tiles (n0..n0+7, n0+8..n0+15) and k = c0..c0+15 from a
 * tile stored n-major (row = n, col = k; e.g. K[key][d] for S = Q K^T):
 * b[0],b[1] -> n-tile 0, b[2],b[3] -> n-tile 1. */
template <int STR>
__device__ __forceinline__ void load_b_nmajor(uint32_t (&b)[4], const bf16* tile, int n0, int c0, int lane) {
    ldsm_x4(b, tile + (n0 + (lane & 7) + (lane >> 4) * 8) * STR + c0 + ((lane >> 3) & 1) * 8);
}
/* B fragments for two n-tiles (cols n0..n0+15) and k = rows k0..k0+15 from a
 * tile stored k-major (row = k, col = n; e.g. V[key][d] for O = P V), through
 * ldmatrix.trans: b[0],b[1] -> n-tile 0, b[2],b[3] -> n-tile 1. */
template <int STR>
__device__ __forceinline__ void load_b_kmajor(uint32_t (&b)[4], const bf16* tile, int k0, int n0, int lane) {
    ldsm_x4_t(b, tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * STR + n0 + (lane >> 4) * 8);
}

/* Async load of rows [r0, r0+ROWS) x HS columns of a [T, stride] bf16 matrix
 * into a shared tile, [ROWS][HS+8] (WG = false) or [ROWS][64] swizzled
 * (WG = true, ops/wgmma.cuh); rows >= T become zeros. */
template <int ROWS, int HS, bool WG = false>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, size_t stride, int r0, int T) {
    static_assert(!WG || HS == 64, "the warpgroup tiles are 64 columns wide");
    constexpr int CPR = HS / 8; /* 16-byte chunks per row */
    constexpr int STR = HS + 8;
    constexpr int ITERS = (ROWS * CPR + ATT_THREADS - 1) / ATT_THREADS;
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
        const int i = it * ATT_THREADS + threadIdx.x;
        if (ROWS * CPR % ATT_THREADS != 0 && i >= ROWS * CPR) break;
        const int r = i / CPR, c = (i % CPR) * 8;
        const int t = r0 + r;
        const bool ok = t < T;
        cp_async16(dst + (WG ? wg_swz(r, c) : r * STR + c), src + (size_t)(ok ? t : 0) * stride + c, ok);
    }
}

/* the row stride of a shared tile, and the start of the tiles in the block's
 * dynamic shared memory (WG: rounded up to the swizzle pattern; the launch
 * asks for WG_TILE_ALIGN bytes more) */
template <int HS, bool WG>
constexpr int att_stride() {
    return WG ? 64 : HS + 8;
}
template <bool WG>
__device__ __forceinline__ bf16* att_tiles(unsigned char* raw) {
    if (!WG) return reinterpret_cast<bf16*>(raw);
    const uint32_t pad = (WG_TILE_ALIGN - (smem_u32(raw) & (WG_TILE_ALIGN - 1))) & (WG_TILE_ALIGN - 1);
    return reinterpret_cast<bf16*>(raw + pad);
}
/* Which block this is, from a one-dimensional grid of npairs x ntiles blocks (pairs:
 * head x batch row, the head fastest). Blocks start roughly in index order, so the
 * index decides what shares the L2. The pairs go in groups of `raster`; inside a group,
 * every pair's rank-0 tile (the most steps: the kernel maps rank to its tile) comes
 * first, then every rank 1, and so on. That keeps the longest-first order that leaves
 * a short last wave, while the pairs running at once are one group's, so a pair's
 * tiles are read by its other blocks while still in the L2. With the 3-D grid of
 * (head, row, tile) used before, all 192 pairs of GPT-2 124M at B = 16 ran side by
 * side and the L2 hit rate of the backward kernels was 41-50% (ncu, H100). */
struct AttBlock {
    int head, row, rank;
};
__device__ __forceinline__ AttBlock att_block(int heads, int npairs, int ntiles, int raster) {
    const int id = blockIdx.x, per = raster * ntiles;
    const int grp = id / per, p0 = grp * raster, gsz = min(raster, npairs - p0);
    const int r = id - grp * per, rank = r / gsz, pair = p0 + r - rank * gsz;
    return AttBlock{pair % heads, pair / heads, rank};
}

/* One thread's part of the async load of a ROWS x HS tile (load_tile's), worked out
 * once per kernel: where its 16-byte chunks go in the shared tile, and where they come
 * from relative to the tile's first row. A step's load is then a pointer add and a row
 * test per chunk. Worked out inside the step loop, as load_tile does, the index
 * arithmetic was about a third of the backward kernels' executed instructions (Nsight
 * Compute, H100, 2026-12-06; ops/ATTENTION.md). Head sizes whose chunks per row do not divide
 * the block's threads (48, 80, 96, 112) keep load_tile. Rows >= T become zeros. */
template <int ROWS, int HS, bool WG>
struct TileLoader {
    static constexpr int CPR = HS / 8, STR = att_stride<HS, WG>();
    static constexpr bool EVEN = ATT_THREADS % CPR == 0 && ROWS % (ATT_THREADS / CPR) == 0;
    static constexpr int RSTEP = EVEN ? ATT_THREADS / CPR : 1; /* rows from one of a thread's chunks to the next */
    static constexpr int ITERS = ROWS / RSTEP;
    static_assert(!WG || RSTEP % 8 == 0, "a thread's chunks must share one swizzle phase");
    size_t stride; /* the matrix's row stride, elements */
    size_t goff;   /* this thread's first chunk in the matrix, from the tile's first row */
    int row, soff; /* its first chunk's row in the tile, and offset in the shared tile */
    __device__ __forceinline__ explicit TileLoader(size_t stride_) : stride(stride_) {
        row = threadIdx.x / CPR;
        const int c = (threadIdx.x % CPR) * 8;
        soff = WG ? wg_swz(row, c) : row * STR + c;
        goff = (size_t)row * stride + c;
    }
    /* rows [r0, r0 + ROWS) of src, a [T][stride] matrix, into the shared tile dst */
    __device__ __forceinline__ void operator()(bf16* dst, const bf16* src, int r0, int T) const {
        if constexpr (!EVEN) {
            load_tile<ROWS, HS, WG>(dst, src, stride, r0, T);
        } else {
            const bf16* g = src + (size_t)r0 * stride + goff;
#pragma unroll
            for (int it = 0; it < ITERS; it++) {
                const bool ok = r0 + row + it * RSTEP < T;
                cp_async16(dst + soff + it * RSTEP * STR, ok ? g + (size_t)(it * RSTEP) * stride : src, ok);
            }
        }
    }
};

/* the cp.async copies of this step have landed (at most N groups in flight), and
 * (WG) are visible to the warpgroup MMA's reads once the barrier that follows is passed */
template <int N, bool WG>
__device__ __forceinline__ void att_tiles_landed() {
    cp_async_wait<N>();
    if (WG) fence_async_smem();
}

/* The tensors the WG backward kernels load by TMA (common/cuda_tma.cuh), described on the
 * host for each call (attention_cuda.cu, att_maps): qkv, dout and out as [B][T][columns]
 * bf16 in 64 x 64 boxes with the 128-byte swizzle (rows past T read as zeros); lse and D
 * as [B * NH][T] fp32 in boxes of 64 rows, only when T % 4 == 0 (a TMA row stride is a
 * whole number of 16 bytes; the launch's rows16 says so): else the kernel's threads load
 * those rows. (The two as flat 1-D maps, any T, stopped the GPU with an illegal
 * instruction at T = 1: H100, 2026-12-07.) */
struct AttMaps {
    CUtensorMap qkv, dout, out, lse, dsum, dqkv; /* dqkv: the results, stored as qkv is loaded */
};
/* the forward's: qkv loaded, out and lse (when rows: T % 4 == 0) stored the same ways */
struct AttFwdMaps {
    CUtensorMap qkv, out, lse;
    int rows;
};
#define ATT_TILE_BYTES (64 * 64 * 2) /* one TMA box of a bf16 tensor: a 64 x 64 tile */
#define ATT_ROW_BYTES (64 * 4)       /* one of lse or D: 64 rows */

/* One key tile's K and V by TMA (64 rows from row r0 of batch row bt of the qkv map,
 * columns kcol and vcol) into sK and sV, both counted on the mbarrier bar: one thread */
__device__ __forceinline__ void att_load_kv(bf16* sK, bf16* sV, uint64_t* bar, const CUtensorMap* qkv, int kcol,
                                            int vcol, int r0, int bt) {
    mbar_expect_tx(bar, 2 * ATT_TILE_BYTES);
    tma_load_3d(sK, qkv, kcol, r0, bt, bar);
    tma_load_3d(sV, qkv, vcol, r0, bt, bar);
}

/* The WG kernels' results leave through shared memory: each thread has written its
 * part of the tiles in the loads' swizzled layout (and the forward its lse strip);
 * after the barrier one thread issues the stores (`issue`: tma_store_* calls) and
 * waits until the copy engine has read them, while the other threads are free to
 * exit. On the H100 the per-thread stores had the blocks' warps 4-5% of their time
 * waiting at exit for the writes to drain (ncu, 2026-12-07). */
template <class Issue>
__device__ __forceinline__ void att_store(Issue&& issue) {
    fence_async_smem(); /* this thread's writes -> the copy engine's reads */
    __syncthreads();
    if (threadIdx.x == 0) {
        issue();
        tma_store_commit();
        tma_store_wait_read();
    }
}

/* The two products of the WG kernels, each issued as one commit group (the caller
 * waits for it). acc is this warp's 16 rows x 64 columns of the 64 x 64 result.
 * wg_abt: acc = A B^T over the head dimension, A = the block's 64-row tile sA, B =
 * the 64-row tile sB (S = Q K^T and its kin); the first k-step starts from zero
 * (wg_mma_ss's ZERO), so acc needs no zeroing before. */
__device__ __forceinline__ void wg_abt(float (&acc)[8][4], const bf16* sA, const bf16* sB) {
    const uint64_t da = wg_desc(sA), db = wg_desc(sB);
    wg_fence();
    wg_mma_ss<0, true>(acc, da, db);
#pragma unroll
    for (int ks = 1; ks < 4; ks++) wg_mma_ss<0>(acc, wg_desc_at(da, ks * 32), wg_desc_at(db, ks * 32));
    wg_commit();
}
/* wg_pb: acc += P B over the tile's 64 rows, P as this warp's A fragments of 16
 * columns each (pa[kk]: columns 16kk..16kk+15), B = the 64-row tile sB (O = P V and
 * its kin); wg_fence first, since pa was just written. ZERO: acc = P B (the first
 * k-step from zero, as wg_abt's) */
template <bool ZERO = false>
__device__ __forceinline__ void wg_pb(float (&acc)[8][4], const uint32_t (&pa)[4][4], const bf16* sB) {
    const uint64_t db = wg_desc(sB);
    wg_fence();
    wg_mma_rs<1, ZERO>(acc, pa[0], db);
#pragma unroll
    for (int kk = 1; kk < 4; kk++) wg_mma_rs<1>(acc, pa[kk], wg_desc_at(db, kk * 16 * WG_ROW_BYTES));
    wg_commit();
}
/* C fragments of 8 columns each -> bf16 A fragments of 16 columns each (P for O = P V) */
template <int KT>
__device__ __forceinline__ void pack_a(uint32_t (&pa)[KT][4], const float (&c)[2 * KT][4]) {
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        pa[kk][0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
        pa[kk][1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
        pa[kk][2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        pa[kk][3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

/* mma_abt: wg_abt's product with mma.sync: acc (NT n-tiles of 8 columns) += A B^T over
 * the head dimension, A as this warp's bf16 A fragments a[ks] (columns 16ks..16ks+15),
 * B = the tile sB stored n-major (row = n) */
template <int STR, int KS, int NT>
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const uint32_t (&a)[KS][4], const bf16* sB, int lane) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            load_b_nmajor<STR>(b, sB, np * 16, ks * 16, lane);
            mma16816(acc[2 * np], a[ks], b[0], b[1]);
            mma16816(acc[2 * np + 1], a[ks], b[2], b[3]);
        }
    }
}
/* mma_pb: wg_pb's product with mma.sync: acc (NT n-tiles of 8 columns) += P B,
 * P as this warp's bf16 A fragments of 16 columns each (pa[kk]: k = 16kk..16kk+15),
 * B = the tile sB stored k-major (row = k) */
template <int STR, int KT, int NT>
__device__ __forceinline__ void mma_pb(float (&acc)[NT][4], const uint32_t (&pa)[KT][4], const bf16* sB, int lane) {
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            load_b_kmajor<STR>(b, sB, kk * 16, np * 16, lane);
            mma16816(acc[2 * np], pa[kk], b[0], b[1]);
            mma16816(acc[2 * np + 1], pa[kk], b[2], b[3]);
        }
    }
}

/* ------------------------------------------------------------------------------ */
/* forward */

template <int HS, bool WG>
struct FwdCfg {
    /* two K/V stages: the tile is refilled after the barrier that follows its last read
     * (DIST below), so a third buys nothing but shared memory; at hs = 64 a block takes
     * 41 KB, and four fit an SM where three did with 57 KB (forward 1.33-1.36 -> 1.26-1.29
     * ms on the H100, 2026-12-06) */
    static constexpr int BM = 64, BN = 64, STR = att_stride<HS, WG>(), NS = 2;
    static constexpr size_t SMEM = (size_t)(BM + 2 * NS * BN) * STR * sizeof(bf16) /* Q + NS stages of K, V */
                                   + (WG ? WG_TILE_ALIGN + BM * sizeof(float) + (NS + 1) * sizeof(uint64_t) : 0);
                                   /* WG: the rows' lse, and the mbarriers */
    static constexpr int MINB = HS <= 64 ? ATT_FWD_MINB : 2; /* blocks per SM the register cap aims at */
};

template <int HS, bool WG>
__global__ void __launch_bounds__(ATT_THREADS, FwdCfg<HS, WG>::MINB)
attn_fwd_kernel(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV, float scale_log2, int raster,
                const __grid_constant__ AttFwdMaps maps) {
    using Cfg = FwdCfg<HS, WG>;
    constexpr int BM = Cfg::BM, BN = Cfg::BN, STR = Cfg::STR, NS = Cfg::NS;
    constexpr int KS = HS / 16; /* k-steps over the head dim */
    constexpr int NT = BN / 8;  /* 8-key n-tiles of S */
    constexpr int OT = HS / 8;  /* 8-column n-tiles of O */
    DYNAMIC_SMEM(smem_raw);
    bf16* sQ = att_tiles<WG>(smem_raw);
    bf16* sK = sQ + BM * STR; /* [NS][BN][STR] */
    bf16* sV = sK + NS * BN * STR;
    /* WG: the block's lse, for its store; the mbarriers (common/cuda_tma.cuh) of the K/V
     * stages' fills, full[NS], and of Q */
    [[maybe_unused]] float* sL = reinterpret_cast<float*>(sV + NS * BN * STR);
    [[maybe_unused]] uint64_t* full = reinterpret_cast<uint64_t*>(sL + BM);
    [[maybe_unused]] uint64_t* qbar = full + NS;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nqt = (T + BM - 1) / BM;
    const AttBlock blk = att_block(NH, NH * B, nqt, raster);
    const int h = blk.head, b = blk.row;
    const int qt = nqt - 1 - blk.rank; /* longest rows first */
    const int q0 = qt * BM;
    const size_t rs = (size_t)(NH + 2 * NKV) * HS; /* qkv row stride */
    const bf16* qg = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const bf16* kg = qkv + (size_t)b * T * rs + (size_t)(NH + h / (NH / NKV)) * HS;   /* the group's kv head */
    const bf16* vg = kg + (size_t)NKV * HS;
    /* key tiles with any key <= the tile's last query */
    const int nkt = min((T + BN - 1) / BN, (q0 + BM - 1) / BN + 1);

    static_assert(BM == BN, "Q comes through the K/V loader");
    const TileLoader<BN, HS, WG> load_kv(rs); /* also Q's: the same shape and stride */
    /* K/V tiles are loaded DIST = NS - 1 ahead; tile j + DIST goes into tile j - 1's
     * stage after the barrier that every warp passes once done with tile j - 1.
     * mma.sync: one cp.async commit group per tile (empty past the last tile).
     * WG: by TMA from one thread, each stage's fill counted on its mbarrier. */
    constexpr int DIST = NS - 1;
    const int kvcol = (NH + h / (NH / NKV)) * HS; /* the group's kv head: k's columns in qkv, v's NKV * HS on */
    auto tma_kv = [&](int stage, int j) {
        att_load_kv(sK + stage * BN * STR, sV + stage * BN * STR, full + stage, &maps.qkv, kvcol, kvcol + NKV * HS,
                    j * BN, b);
    };
    if constexpr (WG) {
        static_assert(!WG || HS == 64, "the TMA boxes are 64 x 64 tiles");
        mbar_init_block(full, NS + 1); /* full[NS] is qbar */
        if (threadIdx.x == 0) {
            mbar_expect_tx(qbar, ATT_TILE_BYTES);
            tma_load_3d(sQ, &maps.qkv, h * HS, q0, b, qbar);
            for (int d = 0; d < DIST && d < nkt; d++) tma_kv(d, d);
        }
        mbar_wait(qbar, 0);
    } else {
        load_kv(sQ, qg, q0, T);
        for (int d = 0; d < DIST; d++) { /* Q joins the first tile's group */
            if (d < nkt) {
                load_kv(sK + d * BN * STR, kg, d * BN, T);
                load_kv(sV + d * BN * STR, vg, d * BN, T);
            }
            cp_async_commit();
        }
    }

    const int g = lane >> 2, t4 = lane & 3;
    const int qrow0 = q0 + warp * 16 + g; /* this thread's rows: qrow0, qrow0 + 8 */
    [[maybe_unused]] uint32_t qf[KS][4];  /* Q's A fragments (mma.sync) */
    float o[OT][4];
#pragma unroll
    for (int i = 0; i < OT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}; /* running max of s * scale * log2(e) */
    float l_run[2] = {0.0f, 0.0f};            /* this thread's part of the running sum */

    unsigned par = 0; /* WG: the parity of stage st's fill that tile j waits for */
    for (int j = 0, st = 0; j < nkt; j++) {
        const int pv = st == 0 ? NS - 1 : st - 1; /* tile j - 1's stage */
        if constexpr (WG) {
            __syncthreads(); /* every warp is done with tile j - 1 */
            if (j + DIST < nkt && threadIdx.x == 0) tma_kv(pv, j + DIST);
            mbar_wait(full + st, par);
        } else {
            att_tiles_landed<DIST - 1, WG>();
            __syncthreads();
            if (j + DIST < nkt) {
                load_kv(sK + pv * BN * STR, kg, (j + DIST) * BN, T);
                load_kv(sV + pv * BN * STR, vg, (j + DIST) * BN, T);
            }
            cp_async_commit();
        }
        if (!WG && j == 0) {
#pragma unroll
            for (int ks = 0; ks < KS; ks++) load_a<STR>(qf[ks], sQ, warp * 16, ks * 16, lane);
        }
        const bf16* cK = sK + st * BN * STR;
        const bf16* cV = sV + st * BN * STR;

        /* S = Q K^T (16 x BN per warp) */
        float s[NT][4];
        if constexpr (!WG) /* wg_abt starts from zero itself */
#pragma unroll
            for (int i = 0; i < NT; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
        if constexpr (WG) {
            wg_abt(s, sQ, cK);
            wg_wait<0>();
            wg_hold(s);
        } else {
            mma_abt<STR>(s, qf, cK, lane);
        }
        /* causal + length mask, only on tiles that can need it */
        const int k0 = j * BN;
        if (k0 + BN > q0 || k0 + BN > T) {
#pragma unroll
            for (int i = 0; i < NT; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = k0 + i * 8 + 2 * t4 + (e & 1);
                    const int q = qrow0 + (e >> 1) * 8;
                    if (key > q || key >= T) s[i][e] = -INFINITY;
                }
        }
        /* online softmax; each row's 4 owners (lanes 4g..4g+3) agree on the max */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < NT; i++) mx = fmaxf(mx, fmaxf(s[i][2 * r], s[i][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_run[r], mx * scale_log2);
            /* Every processed tile has key k0 <= every query of the block, so
             * m_new is finite; the guard keeps -inf - -inf (NaN) out regardless. */
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = fast_exp2(m_run[r] - m_use);
            m_run[r] = m_new;
            l_run[r] *= alpha;
#pragma unroll
            for (int i = 0; i < OT; i++) {
                o[i][2 * r] *= alpha;
                o[i][2 * r + 1] *= alpha;
            }
            float rsum = 0.0f;
#pragma unroll
            for (int i = 0; i < NT; i++) {
                const float p0 = fast_exp2(fmaf(s[i][2 * r], scale_log2, -m_use));
                const float p1 = fast_exp2(fmaf(s[i][2 * r + 1], scale_log2, -m_use));
                s[i][2 * r] = p0;
                s[i][2 * r + 1] = p1;
                rsum += p0 + p1;
            }
            l_run[r] += rsum;
        }
        /* O += P V: P's C fragments re-packed as A fragments, 16 keys at a time */
        uint32_t pa[BN / 16][4];
        pack_a(pa, s);
        if constexpr (WG) {
            wg_pb(o, pa, cV);
            wg_wait<0>();
            wg_hold(o);
        } else {
            mma_pb<STR>(o, pa, cV, lane);
        }
        st = st + 1 == NS ? 0 : st + 1;
        if (st == 0) par ^= 1u;
    }

    /* finish: full row sums across the 4 owners, normalise, write (WG: through Q's tile
     * and sL, stored by TMA, as the backward's results; ops/ATTENTION.md) */
    const size_t os = (size_t)NH * HS;
    if constexpr (WG) __syncthreads(); /* every warp's products have retired: Q's tile is free */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int q = qrow0 + r * 8;
        if (WG) {
            const int row = warp * 16 + g + 8 * r; /* rows past T: not stored */
            const float inv = 1.0f / l;
#pragma unroll
            for (int i = 0; i < OT; i++)
                *reinterpret_cast<__nv_bfloat162*>(sQ + wg_swz(row, i * 8 + 2 * t4)) =
                    __floats2bfloat162_rn(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
            if (t4 == 0) {
                const float v = (m_run[r] + __log2f(l)) * LN2;
                if (maps.rows) sL[row] = v;
                else if (q < T) lse[((size_t)b * NH + h) * T + q] = v;
            }
        } else if (q < T) {
            const float inv = 1.0f / l;
            bf16* orow = out + ((size_t)b * T + q) * os + (size_t)h * HS;
#pragma unroll
            for (int i = 0; i < OT; i++) {
                __nv_bfloat162 v = __floats2bfloat162_rn(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
                *reinterpret_cast<__nv_bfloat162*>(orow + i * 8 + 2 * t4) = v;
            }
            if (t4 == 0) lse[((size_t)b * NH + h) * T + q] = (m_run[r] + __log2f(l)) * LN2;
        }
    }
    if constexpr (WG)
        att_store([&] {
            tma_store_3d(&maps.out, h * HS, q0, b, sQ);
            if (maps.rows) tma_store_2d(&maps.lse, q0, b * NH + h, sL);
        });
}


#endif /* ATTENTION_KERNELS_CUH */
