/*
 * compress/cuda_unit_io.cuh - one unit (16 consecutive elements of a chunk,
 * a thread's share per step) between memory and registers: the units a job
 * covers, element bytes at any alignment (16-byte loads and stores where
 * possible, funnel shifts and neighbour shuffles where not), fp32 / bf16
 * words, and the fp32 / bf16 tensors on either side of a compression.
 */
#ifndef COMPRESS_CUDA_UNIT_IO_CUH
#define COMPRESS_CUDA_UNIT_IO_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "compress/cuda_device.cuh"

namespace {

/* The units [u0, u1) of a chunk of n = 16 nfull + tail elements. Unit
 * indices are 32-bit (the host checks n < 2^35): fewer registers in the
 * loops. u0 is a multiple of the lanes per group, so the range's first group
 * is u0 >> ltpg, and group gi is full iff gi < nfull >> ltpg. */
struct Span {
    unsigned u0, u1, nfull, tail;
};

/* valid elements of unit u (0 outside the range) */
__device__ __forceinline__ int unit_valid(unsigned u, const Span& sp) {
    return u >= sp.u1 ? 0 : (u < sp.nfull ? UNIT : (int)sp.tail);
}

/* out = bytes [off, off + 16) of the 32 bytes a ++ b, off in 1..15
 * (little-endian words; a run-time register index would go to local memory,
 * so the four word offsets are spelled out) */
__device__ __forceinline__ void bytes_window(const unsigned (&a)[4], const unsigned (&b)[4], unsigned off,
                                             unsigned (&out)[4]) {
    const unsigned s = 8u * (off & 3u);
    switch (off >> 2) {
    case 0:
        out[0] = __funnelshift_r(a[0], a[1], s); out[1] = __funnelshift_r(a[1], a[2], s);
        out[2] = __funnelshift_r(a[2], a[3], s); out[3] = __funnelshift_r(a[3], b[0], s);
        break;
    case 1:
        out[0] = __funnelshift_r(a[1], a[2], s); out[1] = __funnelshift_r(a[2], a[3], s);
        out[2] = __funnelshift_r(a[3], b[0], s); out[3] = __funnelshift_r(b[0], b[1], s);
        break;
    case 2:
        out[0] = __funnelshift_r(a[2], a[3], s); out[1] = __funnelshift_r(a[3], b[0], s);
        out[2] = __funnelshift_r(b[0], b[1], s); out[3] = __funnelshift_r(b[1], b[2], s);
        break;
    default:
        out[0] = __funnelshift_r(a[3], b[0], s); out[1] = __funnelshift_r(b[0], b[1], s);
        out[2] = __funnelshift_r(b[1], b[2], s); out[3] = __funnelshift_r(b[2], b[3], s);
        break;
    }
}

/* ========================================================================== */
/* loads and stores of one unit                                                */

/* The 16 element bytes at p (first nv valid, the rest read as 0). Aligned:
 * one 16-byte load. Unaligned but followed by a full unit (next_ok): the two
 * aligned 16-byte words around it and a funnel shift (the second load mostly
 * hits L1: it is the neighbour's first). Otherwise byte loads (range ends). */
__device__ __forceinline__ void load_bytes16(const uint8_t* p, int nv, bool next_ok, unsigned (&w)[4]) {
    const unsigned d = (unsigned)((uintptr_t)p & 15u);
    if (nv == UNIT && d == 0) {
        const uint4 t = __ldg(reinterpret_cast<const uint4*>(p));
        w[0] = t.x; w[1] = t.y; w[2] = t.z; w[3] = t.w;
    } else if (nv == UNIT && next_ok) {
        const uint4* a = reinterpret_cast<const uint4*>(p - d);
        const uint4 t0 = __ldg(a), t1 = __ldg(a + 1);
        const unsigned x0[4] = {t0.x, t0.y, t0.z, t0.w}, x1[4] = {t1.x, t1.y, t1.z, t1.w};
        bytes_window(x0, x1, d, w);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = 0u;
#pragma unroll
        for (int j = 0; j < UNIT; j++)
            if (j < nv) w[j >> 2] |= (unsigned)p[j] << (8 * (j & 3));
    }
}

/* Store this thread's 16 element bytes (first nv valid) for unit u at
 * base + 16 (u - u0). Consecutive lanes hold consecutive units; ALL 32 lanes
 * of the warp must call (shuffles). When base is 16-byte aligned: one 16-byte
 * store. Otherwise (the wire puts the codes at 4 + ng, anywhere) each full
 * unit whose left neighbour is in the same warp writes the aligned 16-byte
 * word holding its first 16 - d bytes and the neighbour's last d bytes (taken
 * by shuffle); the units at warp and range edges write their leftover bytes
 * one by one. Every byte is written by exactly one thread. */
__device__ __forceinline__ void store_bytes16(uint8_t* base, unsigned u, const Span& sp, int nv,
                                              const unsigned (&w)[4], int lane) {
    uint8_t* p = base + (size_t)UNIT * (u - sp.u0);
    const unsigned d = (unsigned)((uintptr_t)base & 15u); /* the same for every unit */
    if (d == 0) {
        if (nv == UNIT) {
            *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
#pragma unroll
            for (int j = 0; j < UNIT; j++)
                if (j < nv) p[j] = (uint8_t)byte_of(w, j);
        }
        return;
    }
    unsigned prev[4];
#pragma unroll
    for (int k = 0; k < 4; k++) prev[k] = __shfl_up_sync(FULL, w[k], 1);
    const int head = UNIT - (int)d;   /* my bytes [0, head) go to my aligned word, [head, 16) to the next */
    const bool me_full = lane > 0 && u > sp.u0 && nv == UNIT;
    const bool next_full = lane < 31 && unit_valid(u + 1, sp) == UNIT;
    if (me_full) {
        unsigned x[4];
        bytes_window(prev, w, (unsigned)head, x);
        *reinterpret_cast<uint4*>(p - d) = make_uint4(x[0], x[1], x[2], x[3]);
    } else {
#pragma unroll
        for (int j = 0; j < UNIT; j++)
            if (j < head && j < nv) p[j] = (uint8_t)byte_of(w, j);
    }
    if (!next_full) {
#pragma unroll
        for (int j = 0; j < UNIT; j++)
            if (j >= head && j < nv) p[j] = (uint8_t)byte_of(w, j);
    }
}

/* 16 fp32 words (64 bytes) at p, first nv valid */
__device__ __forceinline__ void load_words16(const uint8_t* p, int nv, unsigned (&w)[UNIT]) {
    if (nv == UNIT && ((uintptr_t)p & 15u) == 0) {
        const uint4* a = reinterpret_cast<const uint4*>(p);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint4 t = __ldg(a + k);
            w[4 * k] = t.x; w[4 * k + 1] = t.y; w[4 * k + 2] = t.z; w[4 * k + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < UNIT; j++) w[j] = j < nv ? load_u32_any(p + 4 * j) : 0u;
    }
}
__device__ __forceinline__ void store_words16(uint8_t* p, int nv, const unsigned (&w)[UNIT]) {
    if (nv == UNIT && ((uintptr_t)p & 15u) == 0) {
        uint4* a = reinterpret_cast<uint4*>(p);
#pragma unroll
        for (int k = 0; k < 4; k++) a[k] = make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
    } else {
#pragma unroll
        for (int j = 0; j < UNIT; j++)
            if (j < nv) store_u32_any(p + 4 * j, w[j]);
    }
}

/* 16 bf16 halves (32 bytes) at p as 8 words (element 2k in the low half of
 * word k), first nv valid; the bytes of any alignment */
__device__ __forceinline__ void load_halves16(const uint8_t* p, int nv, unsigned (&w)[UNIT / 2]) {
    if (nv == UNIT && ((uintptr_t)p & 15u) == 0) {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(p)), b = __ldg(reinterpret_cast<const uint4*>(p) + 1);
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    } else {
#pragma unroll
        for (int k = 0; k < UNIT / 2; k++) {
            const unsigned lo = 2 * k < nv ? (unsigned)p[4 * k] | ((unsigned)p[4 * k + 1] << 8) : 0u;
            const unsigned hi = 2 * k + 1 < nv ? (unsigned)p[4 * k + 2] | ((unsigned)p[4 * k + 3] << 8) : 0u;
            w[k] = lo | (hi << 16);
        }
    }
}
__device__ __forceinline__ void store_halves16(uint8_t* p, int nv, const unsigned (&w)[UNIT / 2]) {
    if (nv == UNIT && ((uintptr_t)p & 15u) == 0) {
        uint4* a = reinterpret_cast<uint4*>(p);
        a[0] = make_uint4(w[0], w[1], w[2], w[3]);
        a[1] = make_uint4(w[4], w[5], w[6], w[7]);
    } else {
#pragma unroll
        for (int j = 0; j < UNIT; j++) {
            if (j < nv) {
                const unsigned h = (w[j >> 1] >> (16 * (j & 1))) & 0xFFFFu;
                p[2 * j] = (uint8_t)h;
                p[2 * j + 1] = (uint8_t)(h >> 8);
            }
        }
    }
}

/* Unit u's input as raw words, loaded now and converted later (raw_to_x16),
 * so a loop can keep the next unit's loads in flight while it computes on
 * this one: 8 words for bf16, 16 for fp32. load_x16 is both at once. */
template <bool BF16>
struct Raw16 {
    unsigned w[BF16 ? UNIT / 2 : UNIT];
};
template <bool BF16>
__device__ __forceinline__ void load_raw16(const void* x, unsigned u, int nv, Raw16<BF16>& r) {
    if (BF16) {
        const uint16_t* p = static_cast<const uint16_t*>(x) + (size_t)UNIT * u;
        if (nv == UNIT && ((uintptr_t)p & 15u) == 0) {
            const uint4 a = __ldg(reinterpret_cast<const uint4*>(p)), b = __ldg(reinterpret_cast<const uint4*>(p) + 1);
            r.w[0] = a.x; r.w[1] = a.y; r.w[2] = a.z; r.w[3] = a.w;
            r.w[4] = b.x; r.w[5] = b.y; r.w[6] = b.z; r.w[7] = b.w;
        } else {
#pragma unroll
            for (int k = 0; k < UNIT / 2; k++)
                r.w[k] = (2 * k < nv ? (unsigned)p[2 * k] : 0u) | ((2 * k + 1 < nv ? (unsigned)p[2 * k + 1] : 0u) << 16);
        }
    } else {
        const float* p = static_cast<const float*>(x) + (size_t)UNIT * u;
        if (nv == UNIT && ((uintptr_t)p & 15u) == 0) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float4 t = __ldg(reinterpret_cast<const float4*>(p) + k);
                r.w[4 * k] = __float_as_uint(t.x); r.w[4 * k + 1] = __float_as_uint(t.y);
                r.w[4 * k + 2] = __float_as_uint(t.z); r.w[4 * k + 3] = __float_as_uint(t.w);
            }
        } else {
#pragma unroll
            for (int j = 0; j < UNIT; j++) r.w[j] = j < nv ? __float_as_uint(p[j]) : 0u;
        }
    }
}
template <bool BF16>
__device__ __forceinline__ void raw_to_x16(const Raw16<BF16>& r, float (&v)[UNIT]) {
    if (BF16) {
#pragma unroll
        for (int k = 0; k < UNIT / 2; k++) {
            v[2 * k] = __uint_as_float(r.w[k] << 16);
            v[2 * k + 1] = __uint_as_float(r.w[k] & 0xFFFF0000u);
        }
    } else {
#pragma unroll
        for (int j = 0; j < UNIT; j++) v[j] = __uint_as_float(r.w[j]);
    }
}

/* unit u of an fp32 or bf16 tensor as fp32 (bf16 -> fp32 is exact: the bits
 * shifted up by 16); elements past nv read as 0 */
template <bool BF16>
__device__ __forceinline__ void load_x16(const void* x, unsigned u, int nv, float (&v)[UNIT]) {
    Raw16<BF16> r;
    load_raw16<BF16>(x, u, nv, r);
    raw_to_x16<BF16>(r, v);
}

__device__ __forceinline__ unsigned bf16x2_bits(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); /* round to nearest even, each */
    unsigned r;
    memcpy(&r, &h, sizeof(r));
    return r;
}

/* unit u of an fp32 or bf16 (round to nearest even) tensor; elements past nv untouched */
template <bool BF16>
__device__ __forceinline__ void store_y16(void* y, unsigned u, int nv, const float (&a)[UNIT]) {
    if (BF16) {
        uint16_t* p = static_cast<uint16_t*>(y) + (size_t)UNIT * u;
        if (nv == UNIT && ((uintptr_t)p & 15u) == 0) {
            unsigned h[8];
#pragma unroll
            for (int k = 0; k < 8; k++) h[k] = bf16x2_bits(a[2 * k], a[2 * k + 1]);
            reinterpret_cast<uint4*>(p)[0] = make_uint4(h[0], h[1], h[2], h[3]);
            reinterpret_cast<uint4*>(p)[1] = make_uint4(h[4], h[5], h[6], h[7]);
        } else {
#pragma unroll
            for (int j = 0; j < UNIT; j++)
                if (j < nv) p[j] = (uint16_t)(bf16x2_bits(a[j], 0.0f) & 0xFFFFu);
        }
    } else {
        float* p = static_cast<float*>(y) + (size_t)UNIT * u;
        if (nv == UNIT && ((uintptr_t)p & 15u) == 0) {
#pragma unroll
            for (int k = 0; k < 4; k++)
                reinterpret_cast<float4*>(p)[k] = make_float4(a[4 * k], a[4 * k + 1], a[4 * k + 2], a[4 * k + 3]);
        } else {
#pragma unroll
            for (int j = 0; j < UNIT; j++)
                if (j < nv) p[j] = a[j];
        }
    }
}

} /* namespace */

#endif /* COMPRESS_CUDA_UNIT_IO_CUH */
