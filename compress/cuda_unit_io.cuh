/*
 * compress/cuda_unit_io.cuh - one unit (UNIT = 64 consecutive elements of a
 * chunk, a thread's share per step) between memory and registers.
 *
 * A unit is one "row" of 64 elements: 64 code bytes, 128 bf16 bytes or 256
 * fp32 bytes, held by its thread as 4, 8 or 16 words of 16 bytes (Row). The
 * thread then owns whole groups (G <= 64), or a 64-element part of one
 * (G = 128, 256), so the Hadamard runs in its registers.
 *
 * Rows of consecutive lanes are consecutive in memory, so a thread reading
 * its own row with 16-byte loads would touch 32 different 128-byte lines per
 * warp instruction. Instead a warp moves its 32 rows through shared memory:
 * lane l copies the l-th 16 bytes of each 512-byte stretch (coalesced) into
 * the warp's staging area, and reads its own row from there. The area is
 * padded so that neither side has a bank conflict: a row of C 16-byte columns
 * takes C + 1 slots (C = 8, 16), or a pair of 4-column rows takes 9 (C = 4);
 * the 8 lanes of a quarter-warp then hit 8 different 16-byte bank groups on
 * both sides. Padding (rather than a swizzle) keeps every address a lane
 * computes a per-lane base plus a compile-time offset (slot()).
 *
 * Loads go through S areas in turn (cuda_pipeline.cuh's InRows), as
 * asynchronous copies (cp.async): the rows of the next steps are on their
 * way while this step's are computed on (rows_issue, then rows_take S - 1
 * steps later), so a warp keeps memory busy without holding a second unit
 * in registers. Stores go through one more area (stage_out), then leave as
 * coalesced 16-byte stores.
 *
 * That fast path needs the warp's 32 units full and inside the job, and the
 * memory 16-byte aligned. Every other unit (a chunk's tail, a range edge, a
 * wire placed at any byte) is moved element by element by its own thread:
 * slower, and the same bytes.
 */
#ifndef COMPRESS_CUDA_UNIT_IO_CUH
#define COMPRESS_CUDA_UNIT_IO_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "common/cuda_async.cuh"
#include "compress/cuda_device.cuh"

namespace {

/* The units [u0, u1) of a chunk of n = UNIT nfull + tail elements (unit
 * indices are 32-bit: the host checks n < 2^37). */
struct Span {
    unsigned u0, u1, nfull, tail;
};

/* valid elements of unit u (0 outside the range) */
__device__ __forceinline__ int unit_valid(unsigned u, const Span& sp) {
    return u >= sp.u1 ? 0 : (u < sp.nfull ? UNIT : (int)sp.tail);
}

/* a row of EB-byte elements: 64 EB / 16 words of 16 bytes */
template <int EB>
struct Row {
    uint4 q[EB * UNIT / 16];
};

/* the word / byte views of a row, with compile-time indices only */
template <int EB>
__device__ __forceinline__ unsigned row_word(const Row<EB>& r, int i) {
    const uint4& q = r.q[i >> 2];
    return (i & 3) == 0 ? q.x : (i & 3) == 1 ? q.y : (i & 3) == 2 ? q.z : q.w;
}
template <int EB>
__device__ __forceinline__ void row_set_word(Row<EB>& r, int i, unsigned v) {
    uint4& q = r.q[i >> 2];
    if ((i & 3) == 0) q.x = v;
    else if ((i & 3) == 1) q.y = v;
    else if ((i & 3) == 2) q.z = v;
    else q.w = v;
}

/* the 16-byte columns of a row, the slot of column c of row t in a warp's
 * staging area (see the header), and the area's bytes */
template <int EB>
__host__ __device__ constexpr int row_cols() { return EB * UNIT / 16; }
template <int C>
__host__ __device__ constexpr int slot(int t, int c) { return C == 4 ? 4 * t + (t >> 1) + c : (C + 1) * t + c; }
template <int EB>
__host__ __device__ constexpr int area_bytes() { return 16 * slot<row_cols<EB>()>(32, 0); }

/* The slots of the warp-wide pass (16-byte chunk q = 32 k + lane of the 32
 * rows, row q / C, column q % C): slot(q / C, q % C) = slot(lane / C, lane %
 * C) + k * slot(32 / C, 0), a lane base plus a constant (C divides 32). */
template <int C>
__device__ __forceinline__ int pass_base(int lane) { return slot<C>(lane / C, lane % C); }
template <int C>
__host__ __device__ constexpr int pass_step() { return slot<C>(32 / C, 0); }

/* Start copying the warp's 32 rows at src (16-byte aligned, all valid) into
 * area, asynchronously; src == nullptr: nothing to copy (that step's rows are
 * loaded lane by lane). Commits one group either way, so that rows_take's
 * "all but the newest group" is always this step's. Every lane calls. */
template <int EB>
__device__ __forceinline__ void rows_issue(uint4* area, const uint8_t* src, int lane) {
    constexpr int C = row_cols<EB>();
    if (src) {
        const uint4* g = reinterpret_cast<const uint4*>(src) + lane;
        uint4* a = area + pass_base<C>(lane);
#pragma unroll
        for (int k = 0; k < C; k++) cp_async16(a + k * pass_step<C>(), g + 32 * k, true);
    }
    cp_async_commit();
}

/* each lane's row -> the warp's 32 rows at g (16-byte aligned), through area */
template <int EB>
__device__ __forceinline__ void stage_out(uint4* g, uint4* area, int lane, const Row<EB>& r) {
    constexpr int C = row_cols<EB>();
    uint4* own = area + slot<C>(lane, 0);
#pragma unroll
    for (int k = 0; k < C; k++) own[k] = r.q[k];
    __syncwarp();
    const uint4* a = area + pass_base<C>(lane);
    g += lane;
#pragma unroll
    for (int k = 0; k < C; k++) g[32 * k] = a[k * pass_step<C>()];
    __syncwarp();
}

/* The row at p (EB-byte elements), the first nv of them (p may have any
 * alignment: a wire's element bytes can start at any byte); the rest of the
 * row reads as 0. The path of a warp whose units are not all full or not
 * aligned. A full row at a 16-byte address comes in vector loads, one at a
 * 4-byte address in word loads, all in flight at once (compile-time indices:
 * registers), and only the other cases byte by byte through a local buffer.
 * (Byte by byte alone, one load waited for at a time, the one tail warp of a
 * chunk took ~38k cycles: at 64 MB its SM ran 75% longer than the others,
 * the kernel with it; H200, ncu sm__cycles_active max / avg, 2026-12-03.) */
template <int EB>
__device__ __forceinline__ void load_row_slow(const uint8_t* p, int nv, Row<EB>& r) {
    constexpr int W = EB * UNIT / 4;
    const int nb = EB * nv;
    if (nb == EB * UNIT && ((uintptr_t)p & 15u) == 0) {
        const uint4* q = reinterpret_cast<const uint4*>(p);
#pragma unroll
        for (int k = 0; k < W / 4; k++) r.q[k] = q[k];
        return;
    }
    if (((uintptr_t)p & 3u) == 0 && (nb & 3) == 0) {
        const unsigned* q = reinterpret_cast<const unsigned*>(p);
#pragma unroll
        for (int i = 0; i < W; i++) row_set_word(r, i, 4 * i < nb ? q[i] : 0u);
        return;
    }
    unsigned t[W];
#pragma unroll
    for (int i = 0; i < W; i++) t[i] = 0u;
#pragma unroll 1
    for (int j = 0; j < nb; j++) t[j >> 2] |= (unsigned)p[j] << (8 * (j & 3));
#pragma unroll
    for (int i = 0; i < W; i++) row_set_word(r, i, t[i]);
}
/* The first nv elements of r to p, any alignment: the mirror of load_row_slow
 * (vector stores for a full aligned row, word stores at a 4-byte address,
 * bytes only otherwise), so a tail warp's full units store as fast as a fast
 * warp's and only a partial or odd-aligned row goes byte by byte. */
template <int EB>
__device__ __forceinline__ void store_row_slow(uint8_t* p, int nv, const Row<EB>& r) {
    constexpr int W = EB * UNIT / 4;
    const int nb = EB * nv;
    if (nb == EB * UNIT && ((uintptr_t)p & 15u) == 0) {
        uint4* q = reinterpret_cast<uint4*>(p);
#pragma unroll
        for (int k = 0; k < W / 4; k++) q[k] = r.q[k];
        return;
    }
    if (((uintptr_t)p & 3u) == 0 && (nb & 3) == 0) {
        unsigned* q = reinterpret_cast<unsigned*>(p);
#pragma unroll
        for (int i = 0; i < W; i++)
            if (4 * i < nb) q[i] = row_word(r, i);
        return;
    }
    unsigned t[W];
#pragma unroll
    for (int i = 0; i < W; i++) t[i] = row_word(r, i);
#pragma unroll 1
    for (int j = 0; j < nb; j++) p[j] = (uint8_t)(t[j >> 2] >> (8 * (j & 3)));
}

/* Where a warp's units are and whether they take the fast path: all 32 full
 * and inside the job (a warp-uniform test), the rows 16-byte aligned. */
struct WarpUnits {
    unsigned u;    /* this lane's unit (chunk index) */
    unsigned lu0;  /* the warp's first unit, counted from the job's u0 */
    int nv;        /* valid elements of this lane's unit */
    bool full;     /* the warp's 32 units are all full */
};
__device__ __forceinline__ WarpUnits warp_units(const Span& sp, unsigned lu0, int lane) {
    WarpUnits w;
    w.lu0 = lu0;
    w.u = sp.u0 + lu0 + (unsigned)lane;
    w.nv = unit_valid(w.u, sp);
    const unsigned last = sp.u0 + lu0 + 31u;
    w.full = last < sp.u1 && last < sp.nfull;
    return w;
}

/* This lane's row of the step issued INFLIGHT rows_issues earlier: from area when
 * it was copied there (fast), else from memory: this lane's row is at bytes[i] +
 * off, nv valid elements (its address worked out only on that rare path). Every
 * lane of the warp calls; the caller ends the take with a __syncwarp() once it
 * has read what else the area holds (the next issue may refill it).
 * slot_only (a pipeline with loads into registers in flight across the take,
 * LOADS_REGS): the row reaches r from shared memory on both paths, the rare one
 * putting it in the lane's own slot first. Had r been joined from the
 * shared-memory loads and from the rare path's global ones, ptxas would make
 * its first use wait for the dependency barrier of those global loads, which it
 * shares with the group-byte and scale loads just sent for a later step: one
 * whole memory latency per copy and step (the TACO recompress: 23% of its stall
 * samples; H100, 2026-12-06). Without such loads (a compress, LOADS_SIDE) the
 * join costs nothing. */
template <int EB, int INFLIGHT>
__device__ __forceinline__ void rows_take(uint4* area, bool fast, bool slot_only, const uint8_t* const* bytes, int i,
                                          size_t off, int nv, int lane, Row<EB>& r) {
    constexpr int C = row_cols<EB>();
    cp_async_wait<INFLIGHT>();
    __syncwarp(); /* every lane's copies have landed */
    if (slot_only) {
        uint4* own = area + slot<C>(lane, 0);
        if (!fast) {
            Row<EB> m;
            load_row_slow<EB>(bytes[i] + off, nv, m);
#pragma unroll
            for (int k = 0; k < C; k++) own[k] = m.q[k];
        }
#pragma unroll
        for (int k = 0; k < C; k++) r.q[k] = own[k];
    } else if (fast) {
        const uint4* own = area + slot<C>(lane, 0);
#pragma unroll
        for (int k = 0; k < C; k++) r.q[k] = own[k];
    } else {
        load_row_slow<EB>(bytes[i] + off, nv, r);
    }
}

/* This lane's row of the job's output `base` (the bytes of unit u0, EB per
 * element). Every lane of the warp calls. */
template <int EB>
__device__ __forceinline__ void store_row(uint8_t* base, const WarpUnits& w, bool aligned, uint4* area, int lane,
                                          const Row<EB>& r) {
    if (w.full && aligned) {
        stage_out<EB>(reinterpret_cast<uint4*>(base + (size_t)EB * UNIT * w.lu0), area, lane, r);
    } else {
        store_row_slow<EB>(base + (size_t)EB * UNIT * (w.lu0 + (unsigned)lane), w.nv, r);
    }
}

__device__ __forceinline__ bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

/* ---- rows <-> fp32 values -------------------------------------------------- */

/* bf16 -> fp32 is exact: the bits shifted up by 16 (element 2i in the low half of word i) */
__device__ __forceinline__ void bf16_row_to_f32(const Row<2>& r, float (&v)[UNIT]) {
#pragma unroll
    for (int i = 0; i < UNIT / 2; i++) {
        const unsigned w = row_word(r, i);
        v[2 * i] = __uint_as_float(w << 16);
        v[2 * i + 1] = __uint_as_float(w & 0xFFFF0000u);
    }
}
__device__ __forceinline__ void f32_row_to_f32(const Row<4>& r, float (&v)[UNIT]) {
#pragma unroll
    for (int i = 0; i < UNIT; i++) v[i] = __uint_as_float(row_word(r, i));
}

__device__ __forceinline__ unsigned bf16x2_bits(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); /* round to nearest even, each */
    unsigned r;
    memcpy(&r, &h, sizeof(r));
    return r;
}
__device__ __forceinline__ void f32_to_bf16_row(const float (&v)[UNIT], Row<2>& r) {
#pragma unroll
    for (int i = 0; i < UNIT / 2; i++) row_set_word(r, i, bf16x2_bits(v[2 * i], v[2 * i + 1]));
}
__device__ __forceinline__ void f32_to_f32_row(const float (&v)[UNIT], Row<4>& r) {
#pragma unroll
    for (int i = 0; i < UNIT; i++) row_set_word(r, i, __float_as_uint(v[i]));
}

} /* namespace */

#endif /* COMPRESS_CUDA_UNIT_IO_CUH */
