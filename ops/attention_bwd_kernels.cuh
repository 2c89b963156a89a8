/*
 * ops/attention_bwd_kernels.cuh - the device code of the attention backward: the dQ
 * kernel, which also forms D = rowsum(dO * O) of its rows, then the dK/dV kernel
 * (ops/attention_cuda.cu has the design).
 * Built on ops/attention_kernels.cuh's primitives, tile loads and products: WG = true is
 * the Hopper form (warpgroup MMA, ops/wgmma.cuh; hs = 64), WG = false the mma.sync one.
 */
#ifndef ATTENTION_BWD_KERNELS_CUH
#define ATTENTION_BWD_KERNELS_CUH

#include "ops/attention_kernels.cuh"

/* ------------------------------------------------------------------------------ */
/* D[b,h,t] = sum_d dout[b,t,h,d] * out[b,t,h,d] for the dQ block's rows, from
 * its dO and out tiles in shared memory (rows STR elements apart, WG:
 * swizzled; rows past T are zeros): the warp's 16 rows, G lanes (HS/8
 * rounded up to a power of two) to a row, one 16-byte chunk of 8 elements
 * each, summed across the G lanes by butterflies. Sets Dr to D of the
 * thread's two rows (qrow0, qrow0 + 8) and
 * writes every row's D to Dbuf for the dK/dV kernel, launched after this
 * one. (A kernel of its own did this before, in the same order of
 * operations, so the same bits: it read dout and out once more and took 6%
 * of the backward's time; the same from global memory at the dQ kernel's
 * start was nearly as slow, each block waiting for its loads; H100,
 * 2026-12-06.) */
template <int HS, bool WG, int STR>
__device__ __forceinline__ void attn_bwd_rows_d(float (&Dr)[2], float* Dbuf, float* sDw, const bf16* sO,
                                                const bf16* sOut, int r0w, int q0, int T, int lane, int g) {
    constexpr int CPR = HS / 8;
    constexpr int G = CPR <= 2 ? 2 : CPR <= 4 ? 4 : CPR <= 8 ? 8 : 16;
    constexpr int RPI = 32 / G; /* rows per pass of the warp */
    const int sub = lane % G;
#pragma unroll
    for (int it = 0; it < 16 / RPI; it++) {
        const int rl = r0w + it * RPI + lane / G; /* the row in the block's tiles */
        float acc = 0.0f;
        if (sub < CPR) {
            const int at = WG ? wg_swz(rl, sub * 8) : rl * STR + sub * 8;
            float x[8], y[8];
            load8(x, sO + at);
            load8(y, sOut + at);
#pragma unroll
            for (int k = 0; k < 8; k++) acc += x[k] * y[k];
        }
#pragma unroll
        for (int o = G / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (sub == 0) {
            sDw[rl - r0w] = acc;
            if (q0 + rl < T) Dbuf[q0 + rl] = acc;
        }
    }
    __syncwarp();
    Dr[0] = q0 + r0w + g < T ? sDw[g] : 0.0f;
    Dr[1] = q0 + r0w + g + 8 < T ? sDw[g + 8] : 0.0f;
}

/* ------------------------------------------------------------------------------ */
/* backward, step 2: dK, dV (D from the dQ kernel, step 1). Block = (b, kv head, 64 keys), 16 keys per warp;
 * loops over the query heads of the kv head's group (NH/NKV of them, one
 * for NKV = NH) and, for each, over query tiles of BQ from the diagonal to
 * the end, as one flat sequence of (head, tile) steps so that the next
 * step's tiles always load during this one. dK and dV sum over the whole
 * group in registers, in that fixed order: deterministic, no atomics. */
template <int HS, bool WG>
struct DkvCfg {
    static constexpr int BN = 64, BQ = HS <= 64 ? 64 : 32, STR = att_stride<HS, WG>(), NS = HS <= 64 ? ATT_STAGES : 2;
    /* WG: the alignment, and NS + 1 mbarriers (the stages', K and V's) */
    static constexpr size_t SMEM = (size_t)(2 * BN + 2 * NS * BQ) * STR * sizeof(bf16) + 2 * NS * BQ * sizeof(float) +
                                   (WG ? WG_TILE_ALIGN + (NS + 1) * sizeof(uint64_t) : 0);
    static constexpr int MINB = WG ? ATT_WG_BWD_MINB : HS <= 64 ? ATT_BWD_MINB : 2;
};

template <int HS, bool WG>
__global__ void __launch_bounds__(ATT_THREADS, DkvCfg<HS, WG>::MINB)
attn_bwd_dkdv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* Dbuf,
                     int B, int T, int NH, int NKV, float scale_log2, float scale, int rows16, int raster,
                     const __grid_constant__ AttMaps maps) {
    using Cfg = DkvCfg<HS, WG>;
    constexpr int BN = Cfg::BN, BQ = Cfg::BQ, STR = Cfg::STR, NS = Cfg::NS;
    constexpr int KS = HS / 16;
    constexpr int QT = BQ / 8; /* 8-query n-tiles of S^T */
    constexpr int OT = HS / 8;
    DYNAMIC_SMEM(smem_raw);
    bf16* sK = att_tiles<WG>(smem_raw);           /* [BN][STR] */
    bf16* sV = sK + BN * STR;                     /* [BN][STR] */
    bf16* sQ = sV + BN * STR;                     /* [NS][BQ][STR] */
    bf16* sO = sQ + NS * BQ * STR;                /* dO, [NS][BQ][STR] */
    float* sL = reinterpret_cast<float*>(sO + NS * BQ * STR); /* lse, [NS][BQ] */
    float* sD = sL + NS * BQ;                                 /* D, [NS][BQ] */
    /* WG: the mbarriers (common/cuda_tma.cuh) of the stages' fills, full[NS], and of K and V */
    [[maybe_unused]] uint64_t* full = reinterpret_cast<uint64_t*>(sD + NS * BQ);
    [[maybe_unused]] uint64_t* kvbar = full + NS;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const AttBlock blk = att_block(NKV, NKV * B, (T + BN - 1) / BN, raster);
    const int kvh = blk.head, b = blk.row;
    const int kt = blk.rank; /* key tile 0 has the most queries: first */
    const int k0 = kt * BN;
    const int group = NH / NKV;
    const size_t rs = (size_t)(NH + 2 * NKV) * HS;
    const size_t os = (size_t)NH * HS;
    const bf16* qb = qkv + (size_t)b * T * rs; /* this batch row's q of head h: qb + h * HS */
    const bf16* kg = qb + os + (size_t)kvh * HS;
    const bf16* vg = kg + (size_t)NKV * HS;
    const bf16* ob = dout + (size_t)b * T * os;

    const int qt0 = k0 / BQ; /* first query tile with a query >= k0 */
    const int nqt = (T + BQ - 1) / BQ;
    const int nq = nqt - qt0;   /* query tiles per head; step it = head (it / nq) of the group, tile qt0 + it % nq */
    const int nsteps = group * nq;
    const TileLoader<BQ, HS, WG> load_q(rs), load_o(os);

    /* a step's Q and dO tiles (async) and per-row scalars into a stage: head kvh *
     * group + gh, query tile qt0 + qi */
    auto load_step = [&](int stage, int gh, int qi) {
        const int h = kvh * group + gh, q0 = (qt0 + qi) * BQ;
        if constexpr (WG) { /* one thread's copies, counted on the stage's mbarrier */
            if (threadIdx.x == 0) {
                uint64_t* bar = full + stage;
                mbar_expect_tx(bar, 2 * ATT_TILE_BYTES + (rows16 ? 2 * ATT_ROW_BYTES : 0));
                tma_load_3d(sQ + stage * BQ * STR, &maps.qkv, h * HS, q0, b, bar);
                tma_load_3d(sO + stage * BQ * STR, &maps.dout, h * HS, q0, b, bar);
                if (rows16) {
                    tma_load_2d(sL + stage * BQ, &maps.lse, q0, b * NH + h, bar);
                    tma_load_2d(sD + stage * BQ, &maps.dsum, q0, b * NH + h, bar);
                }
            }
            if (rows16) return; /* else the rows as below, published by the steps' barriers */
        } else {
            load_q(sQ + stage * BQ * STR, qb + (size_t)h * HS, q0, T);
            load_o(sO + stage * BQ * STR, ob + (size_t)h * HS, q0, T);
        }
        const float* lg = lse + ((size_t)b * NH + h) * T;
        const float* dg = Dbuf + ((size_t)b * NH + h) * T;
        if (!WG && rows16) { /* lse and D rows 16-byte aligned (T % 4 == 0): copied with the tiles, no wait here */
            for (int c = threadIdx.x; c < BQ / 4; c += ATT_THREADS) {
                const int q = q0 + 4 * c;
                const bool ok = q < T; /* the 4 rows of a chunk are all inside T or all past it */
                cp_async16(sL + stage * BQ + 4 * c, lg + (ok ? q : 0), ok);
                cp_async16(sD + stage * BQ + 4 * c, dg + (ok ? q : 0), ok);
            }
        } else {
            for (int i = threadIdx.x; i < BQ; i += ATT_THREADS) {
                const int q = q0 + i;
                sL[stage * BQ + i] = q < T ? lg[q] : 0.0f;
                sD[stage * BQ + i] = q < T ? dg[q] : 0.0f;
            }
        }
    };

    /* Steps are loaded DIST = NS - 1 ahead. Step it + DIST goes into step it - 1's
     * stage, after the barrier that every warp passes once done with step it - 1.
     * mma.sync: one cp.async commit group per step (empty past the last step, so that
     * "at most DIST - 1 groups in flight" always means this step's tiles have landed).
     * WG: by TMA from one thread, each stage's fill counted on its mbarrier, which the
     * step waits on. (Each warp telling an "empty" mbarrier when done with a stage, and
     * the loading thread waiting on that instead of the block's barrier, was slower: H100,
     * 2026-12-07, ops/ATTENTION.md.) */
    constexpr int DIST = NS - 1;
    int lh = 0, lq = 0; /* the head in the group and query tile of the next step to load */
    auto advance = [&](int& h_, int& q_) {
        if (++q_ == nq) q_ = 0, h_++;
    };
    if constexpr (WG) {
        mbar_init_block(full, NS + 1); /* full[NS] is kvbar */
        if (threadIdx.x == 0) att_load_kv(sK, sV, kvbar, &maps.qkv, (NH + kvh) * HS, (NH + NKV + kvh) * HS, k0, b);
        for (int d = 0; d < DIST; d++) {
            if (d < nsteps) load_step(d, lh, lq);
            advance(lh, lq);
        }
    } else {
        load_tile<BN, HS, WG>(sK, kg, rs, k0, T);
        load_tile<BN, HS, WG>(sV, vg, rs, k0, T);
        for (int d = 0; d < DIST; d++) { /* K and V join the first step's group */
            if (d < nsteps) load_step(d, lh, lq);
            advance(lh, lq);
            cp_async_commit();
        }
    }

    const int g = lane >> 2, t4 = lane & 3;
    const int kr = warp * 16;        /* this warp's key rows in the tile */
    const int key0 = k0 + kr + g;    /* this thread's keys: key0, key0 + 8 */
    float dk[OT][4], dv[OT][4];
#pragma unroll
    for (int i = 0; i < OT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[i][e] = dv[i][e] = 0.0f;

    /* the step's stage (it % NS), head in the group (it / nq) and query tile (it % nq),
     * counted rather than divided for */
    unsigned par = 0; /* WG: the parity of stage st's fill this step waits for */
    for (int it = 0, st = 0, gh = 0, qi = 0; it < nsteps; it++) {
        const int prev = st == 0 ? NS - 1 : st - 1; /* step it - 1's stage, refilled with step it + DIST */
        if constexpr (WG) {
            __syncthreads(); /* every warp is done with step it - 1 (its products retired) */
            if (it + DIST < nsteps) load_step(prev, lh, lq);
            advance(lh, lq);
            if (it == 0) mbar_wait(kvbar, 0);
            mbar_wait(full + st, par);
        } else {
            att_tiles_landed<DIST - 1, WG>();
            __syncthreads();
            if (it + DIST < nsteps) load_step(prev, lh, lq);
            advance(lh, lq);
            cp_async_commit();
        }
        const bf16* cQ = sQ + st * BQ * STR;
        const bf16* cO = sO + st * BQ * STR;
        const float* cL = sL + st * BQ;
        const float* cD = sD + st * BQ;
        const int q0 = (qt0 + qi) * BQ;
        /* this thread's queries' lse and D (pairs of neighbours), read before the
         * products are issued and waited for, so their latency hides there */
        float2 lse2[QT], d2[QT];
#pragma unroll
        for (int i = 0; i < QT; i++) lse2[i] = *reinterpret_cast<const float2*>(cL + i * 8 + 2 * t4);

        /* S^T = K Q^T (16 keys x BQ queries per warp); WG: dP^T = V dO^T is issued
         * with it and runs while P^T is computed */
        float s[QT][4], dpt[QT][4];
        if constexpr (!WG) /* wg_abt starts from zero itself */
#pragma unroll
            for (int i = 0; i < QT; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[i][e] = dpt[i][e] = 0.0f;
        if constexpr (WG) {
            wg_abt(s, sK, cQ);
            wg_abt(dpt, sV, cO);
            wg_wait<1>();
            wg_hold(s);
        } else {
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                uint32_t ka[4];
                load_a<STR>(ka, sK, kr, ks * 16, lane);
#pragma unroll
                for (int np = 0; np < QT / 2; np++) {
                    uint32_t qb[4];
                    load_b_nmajor<STR>(qb, cQ, np * 16, ks * 16, lane);
                    mma16816(s[2 * np], ka, qb[0], qb[1]);
                    mma16816(s[2 * np + 1], ka, qb[2], qb[3]);
                }
            }
        }
        /* P^T = exp(s*scale - lse), 0 where the query precedes the key or is past T */
        const bool need_mask = (q0 < k0 + BN) || (q0 + BQ > T);
        float nl[QT][2]; /* -lse * log2(e) of this thread's queries */
#pragma unroll
        for (int i = 0; i < QT; i++) {
            nl[i][0] = -(lse2[i].x * LOG2E);
            nl[i][1] = -(lse2[i].y * LOG2E);
        }
#pragma unroll
        for (int i = 0; i < QT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int ql = i * 8 + 2 * t4 + (e & 1);
                float p = fast_exp2(fmaf(s[i][e], scale_log2, nl[i][e & 1]));
                if (need_mask) {
                    const int q = q0 + ql, key = key0 + (e >> 1) * 8;
                    if (q < key || q >= T) p = 0.0f;
                }
                s[i][e] = p;
            }
        /* P^T as bf16 A fragments for dV; dS takes P^T in fp32 from s (the rounding to
         * bf16 belongs to the product's operand only, and reading P back out of the
         * packed words cost two instructions per element; with the dQ kernel's the same
         * change, 4% of the backward on an H100) */
        uint32_t pp[BQ / 16][4];
        pack_a(pp, s);
#pragma unroll
        for (int i = 0; i < QT; i++) d2[i] = *reinterpret_cast<const float2*>(cD + i * 8 + 2 * t4);
        /* dV += P^T dO; then dP^T = V dO^T (WG: its wait) */
        if constexpr (WG) {
            wg_pb(dv, pp, cO);
            wg_wait<1>();
            wg_hold(dpt);
        } else {
            mma_pb<STR>(dv, pp, cO, lane);
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                uint32_t va[4];
                load_a<STR>(va, sV, kr, ks * 16, lane);
#pragma unroll
                for (int np = 0; np < QT / 2; np++) {
                    uint32_t ob[4];
                    load_b_nmajor<STR>(ob, cO, np * 16, ks * 16, lane);
                    mma16816(dpt[2 * np], va, ob[0], ob[1]);
                    mma16816(dpt[2 * np + 1], va, ob[2], ob[3]);
                }
            }
        }
        /* dS^T = P^T (dP^T - D) (the softmax scale is applied to dK at the end) */
#pragma unroll
        for (int i = 0; i < QT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                dpt[i][e] = s[i][e] * (dpt[i][e] - ((e & 1) ? d2[i].y : d2[i].x));
            }
        /* dK += dS^T Q */
        uint32_t da[BQ / 16][4];
        pack_a(da, dpt);
        if constexpr (WG) {
            wg_pb(dk, da, cQ);
            wg_wait<0>(); /* dV's and dK's products: the stages they read are reloaded two steps on */
            wg_hold(dk);
            wg_hold(dv);
        } else {
            mma_pb<STR>(dk, da, cQ, lane);
        }
        st = st + 1 == NS ? 0 : st + 1;
        if (st == 0) par ^= 1u;
        advance(gh, qi);
    }

    if constexpr (WG) { /* dK * scale and dV through K's and V's tiles, stored by TMA */
        __syncthreads(); /* every warp's products have retired: the tiles are free */
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int i = 0; i < OT; i++) {
                const int at = wg_swz(kr + g + 8 * r, i * 8 + 2 * t4);
                *reinterpret_cast<__nv_bfloat162*>(sK + at) =
                    __floats2bfloat162_rn(dk[i][2 * r] * scale, dk[i][2 * r + 1] * scale);
                *reinterpret_cast<__nv_bfloat162*>(sV + at) = __floats2bfloat162_rn(dv[i][2 * r], dv[i][2 * r + 1]);
            }
        att_store([&] {
            tma_store_3d(&maps.dqkv, (NH + kvh) * HS, k0, b, sK);
            tma_store_3d(&maps.dqkv, (NH + NKV + kvh) * HS, k0, b, sV);
        });
    } else { /* dK * scale and dV for this thread's two keys */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int key = key0 + r * 8;
            if (key >= T) continue;
            bf16* row = dqkv + ((size_t)b * T + key) * rs + os + (size_t)kvh * HS; /* this kv head's k */
#pragma unroll
            for (int i = 0; i < OT; i++) {
                const int c = i * 8 + 2 * t4;
                *reinterpret_cast<__nv_bfloat162*>(row + c) =
                    __floats2bfloat162_rn(dk[i][2 * r] * scale, dk[i][2 * r + 1] * scale);
                *reinterpret_cast<__nv_bfloat162*>(row + (size_t)NKV * HS + c) =
                    __floats2bfloat162_rn(dv[i][2 * r], dv[i][2 * r + 1]);
            }
        }
    }
}

/* ------------------------------------------------------------------------------ */
/* backward, step 1: dQ, and D of its rows. Block = 64 queries (16 per warp),
 * loops over key tiles of BN from 0 to the diagonal. */
template <int HS, bool WG>
struct DqCfg {
    static constexpr int BM = 64, BN = HS <= 64 ? 64 : 32, STR = att_stride<HS, WG>(), NS = HS <= 64 ? ATT_STAGES : 2;
    /* WG: the alignment, and NS + 1 mbarriers (the K/V stages', Q, dO and out's) */
    static constexpr size_t SMEM = (size_t)(3 * BM + 2 * NS * BN) * STR * sizeof(bf16) +
                                   (WG ? WG_TILE_ALIGN + (NS + 1) * sizeof(uint64_t) : 0);
    static constexpr int MINB = WG ? ATT_WG_BWD_MINB : HS <= 64 ? ATT_BWD_MINB : 2;
};

template <int HS, bool WG>
__global__ void __launch_bounds__(ATT_THREADS, DqCfg<HS, WG>::MINB)
attn_bwd_dq_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse, float* Dbuf,
                   int B, int T, int NH, int NKV, float scale_log2, float scale, int raster,
                   const __grid_constant__ AttMaps maps) {
    using Cfg = DqCfg<HS, WG>;
    constexpr int BM = Cfg::BM, BN = Cfg::BN, STR = Cfg::STR, NS = Cfg::NS;
    constexpr int KS = HS / 16;
    constexpr int NT = BN / 8;
    constexpr int OT = HS / 8;
    DYNAMIC_SMEM(smem_raw);
    bf16* sQ = att_tiles<WG>(smem_raw);           /* [BM][STR] */
    bf16* sO = sQ + BM * STR;                     /* dO [BM][STR] */
    bf16* sK = sO + BM * STR;                     /* [NS][BN][STR] */
    bf16* sV = sK + NS * BN * STR;                /* [NS][BN][STR] */
    bf16* sOut = sV + NS * BN * STR;              /* out [BM][STR]: D of the rows */
    /* WG: the mbarriers (common/cuda_tma.cuh) of the K/V stages' fills, full[NS], and of Q, dO and out */
    [[maybe_unused]] uint64_t* full = reinterpret_cast<uint64_t*>(sOut + BM * STR);
    [[maybe_unused]] uint64_t* qbar = full + NS;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nqt = (T + BM - 1) / BM;
    const AttBlock blk = att_block(NH, NH * B, nqt, raster);
    const int h = blk.head, b = blk.row;
    const int qt = nqt - 1 - blk.rank; /* longest rows first */
    const int q0 = qt * BM;
    const size_t rs = (size_t)(NH + 2 * NKV) * HS;
    const size_t os = (size_t)NH * HS;
    const bf16* qg = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const bf16* kg = qkv + (size_t)b * T * rs + os + (size_t)(h / (NH / NKV)) * HS;
    const bf16* vg = kg + (size_t)NKV * HS;
    const bf16* og = dout + (size_t)b * T * os + (size_t)h * HS;
    const int nkt = min((T + BN - 1) / BN, (q0 + BM - 1) / BN + 1);

    const TileLoader<BN, HS, WG> load_kv(rs);
    /* WG: key tile j's K and V by TMA into stage j % NS, counted on that stage's barrier */
    const int kvcol = (NH + h / (NH / NKV)) * HS; /* this head's k columns in qkv; v's NKV * HS on */
    auto tma_kv = [&](int stage, int j) {
        att_load_kv(sK + stage * BN * STR, sV + stage * BN * STR, full + stage, &maps.qkv, kvcol, kvcol + NKV * HS,
                    j * BN, b);
    };
    if constexpr (WG) {
        mbar_init_block(full, NS + 1); /* full[NS] is qbar */
        if (threadIdx.x == 0) {
            mbar_expect_tx(qbar, 3 * ATT_TILE_BYTES);
            tma_load_3d(sQ, &maps.qkv, h * HS, q0, b, qbar);
            tma_load_3d(sO, &maps.dout, h * HS, q0, b, qbar);
            tma_load_3d(sOut, &maps.out, h * HS, q0, b, qbar);
            tma_kv(0, 0);
            if (nkt > 1) tma_kv(1, 1);
        }
    } else {
        load_tile<BM, HS, WG>(sQ, qg, rs, q0, T);
        load_tile<BM, HS, WG>(sO, og, os, q0, T);
        load_tile<BM, HS, WG>(sOut, out + (size_t)b * T * os + (size_t)h * HS, os, q0, T);
        load_kv(sK, kg, 0, T);
        load_kv(sV, vg, 0, T);
        cp_async_commit();
    }

    const int g = lane >> 2, t4 = lane & 3;
    const int qrow0 = q0 + warp * 16 + g;
    float lse2[2], Dr[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int q = qrow0 + r * 8;
        lse2[r] = q < T ? lse[((size_t)b * NH + h) * T + q] * LOG2E : 0.0f;
    }
    __shared__ float sD[ATT_THREADS / 32][16]; /* D of the warps' 16 rows each */
    [[maybe_unused]] uint32_t qf[KS][4], of[KS][4]; /* Q's and dO's A fragments (mma.sync) */
    /* WG: the first dQ product starts from zero itself. Zeroing moves here were moves
     * into the accumulators of a product in flight across the loop's back edge, and
     * ptxas serialised every product of the kernel for them (C7515). */
    float dq[OT][4];
    if constexpr (!WG)
#pragma unroll
        for (int i = 0; i < OT; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;

    /* The steps overlap (WG): a step's dQ product is still running when the next
     * step's S and dP products are issued behind it, so the tensor cores go from one to
     * the next without the warpgroup waiting for dQ in between. The order that keeps that
     * safe: a step's K/V stage is refilled only after the barrier every warp passes once
     * its own wait has retired the dQ product that read the stage (one warp's wait says
     * nothing of the others' parts of a product), so the prefetch of tile j + 2 follows
     * the barrier that publishes tile j + 1. */
    static_assert(!WG || NS >= 3, "the overlapped steps refill a stage two tiles on");
    float s[NT][4], dp[NT][4];
    if constexpr (WG) {
        mbar_wait(qbar, 0); /* Q, dO and out */
    } else {
        att_tiles_landed<0, WG>(); /* Q, dO, out and the first K, V tile */
        __syncthreads();
    }
    attn_bwd_rows_d<HS, WG, STR>(Dr, Dbuf + ((size_t)b * NH + h) * T, sD[warp], sO, sOut, warp * 16, q0, T, lane, g);
    if constexpr (!WG) {
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            load_a<STR>(qf[ks], sQ, warp * 16, ks * 16, lane);
            load_a<STR>(of[ks], sO, warp * 16, ks * 16, lane);
        }
    }
    if (!WG && nkt > 1) {
        load_kv(sK + BN * STR, kg, BN, T);
        load_kv(sV + BN * STR, vg, BN, T);
        cp_async_commit();
    }

    unsigned par = 0; /* WG: the parity of stage st's fill that step j waits for */
    for (int j = 0, st = 0; j < nkt; j++) {
        const bf16* cK = sK + st * BN * STR;
        const bf16* cV = sV + st * BN * STR;
        const int k0 = j * BN;
        if constexpr (WG) mbar_wait(full + st, par);

        /* S = Q K^T (16 queries x BN keys per warp); WG: dP = dO V^T is issued with it,
         * and the wait for S also retires the step before's dQ product */
        if constexpr (WG) {
            wg_abt(s, sQ, cK);
            wg_abt(dp, sO, cV);
            wg_wait<1>();
            wg_hold(s);
        } else {
#pragma unroll
            for (int i = 0; i < NT; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[i][e] = dp[i][e] = 0.0f;
            mma_abt<STR>(s, qf, cK, lane);
        }
        /* P = exp(s*scale - lse), masked, in place */
        const bool need_mask = (k0 + BN > q0) || (k0 + BN > T);
#pragma unroll
        for (int i = 0; i < NT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                float p = fast_exp2(fmaf(s[i][e], scale_log2, -lse2[r]));
                if (need_mask) {
                    const int key = k0 + i * 8 + 2 * t4 + (e & 1), q = qrow0 + r * 8;
                    if (key > q || key >= T) p = 0.0f;
                }
                s[i][e] = p;
            }
        /* dP = dO V^T, then dS = P (dP - D) in place, P in fp32 (no product reads P
         * here, so it need not be rounded to bf16) */
        if constexpr (WG) {
            wg_wait<0>();
            wg_hold(dp);
        } else {
            mma_abt<STR>(dp, of, cV, lane);
        }
#pragma unroll
        for (int i = 0; i < NT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) dp[i][e] = s[i][e] * (dp[i][e] - Dr[e >> 1]);
        /* dQ += dS K (WG: left running) */
        uint32_t da[BN / 16][4];
        pack_a(da, dp);
        if constexpr (WG) {
            if (j == 0) wg_pb<true>(dq, da, cK);
            else wg_pb(dq, da, cK);
        } else {
            mma_pb<STR>(dq, da, cK, lane);
        }
        if (j + 1 < nkt) {
            const int nx = st + 1 == NS ? 0 : st + 1;   /* tile j + 1's stage */
            const int n2 = nx + 1 == NS ? 0 : nx + 1;   /* tile j + 2's: tile j - 1's */
            if constexpr (!WG) att_tiles_landed<0, WG>(); /* tile j + 1 (WG: waited for by the next step) */
            __syncthreads();
            if (j + 2 < nkt) {
                if constexpr (WG) {
                    if (threadIdx.x == 0) tma_kv(n2, j + 2);
                } else {
                    load_kv(sK + n2 * BN * STR, kg, (j + 2) * BN, T);
                    load_kv(sV + n2 * BN * STR, vg, (j + 2) * BN, T);
                    cp_async_commit();
                }
            }
            st = nx;
            if (st == 0) par ^= 1u;
        }
    }
    if constexpr (WG) { /* dQ * scale through Q's tile, stored by TMA */
        wg_wait<0>();
        wg_hold(dq);
        __syncthreads(); /* every warp's products have retired: the tile is free */
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int i = 0; i < OT; i++)
                *reinterpret_cast<__nv_bfloat162*>(sQ + wg_swz(warp * 16 + g + 8 * r, i * 8 + 2 * t4)) =
                    __floats2bfloat162_rn(dq[i][2 * r] * scale, dq[i][2 * r + 1] * scale);
        att_store([&] { tma_store_3d(&maps.dqkv, h * HS, q0, b, sQ); });
    } else {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int q = qrow0 + r * 8;
            if (q >= T) continue;
            bf16* row = dqkv + ((size_t)b * T + q) * rs + (size_t)h * HS;
#pragma unroll
            for (int i = 0; i < OT; i++)
                *reinterpret_cast<__nv_bfloat162*>(row + i * 8 + 2 * t4) =
                    __floats2bfloat162_rn(dq[i][2 * r] * scale, dq[i][2 * r + 1] * scale);
        }
    }
}

#endif /* ATTENTION_BWD_KERNELS_CUH */
