/*
 * compress/compress_cuda.cu - the fused CUDA kernels behind compress_cuda.h.
 *
 * Every kernel repeats the CPU reference (compress.c, taco.c, fp8.c,
 * hadamard.c) operation for operation, so that for round-to-nearest the bytes
 * on the wire and the decoded fp32 bits are IDENTICAL to the CPU's. The rules
 * that make that possible (compress/README.md):
 *   - every scale is a power of two: multiplying by it is exact unless the
 *     result under/overflows, and then it rounds once, like the CPU;
 *   - every float operation that rounds is written as an explicit _rn
 *     intrinsic (__fadd_rn, __fmul_rn, ...), which nvcc never contracts into
 *     an FMA, whatever --fmad says: the CPU reference is built with
 *     -ffp-contract=off and an FMA would round differently;
 *   - the Hadamard butterflies run in the CPU's stage order h = 1, 2, 4, ...
 *     (float addition is not associative), then one multiply by the same
 *     norm(G) constant (computed by hadamard_norm on the host);
 *   - decompress-reduce sums the P copies in rank order, acc = 0.0f first.
 *
 * Work mapping. One thread owns a UNIT of 16 consecutive elements of a chunk
 * (two 16-byte loads of bf16, one 16-byte store of fp8 codes). A group of G
 * elements is held by tpg = G/16 consecutive lanes of a warp (G = 16: one
 * thread; G = 256: 16 lanes), so group reductions and the cross-thread
 * Hadamard stages are xor-shuffles inside the group. The Hadamard's first four
 * stages (h = 1, 2, 4, 8) are in registers, the remaining log2(tpg) stages use
 * __shfl_xor_sync with lane mask h/16. Methods without groups (none, cast,
 * fp8_tensor) run with G = 16 and need no shuffles at all.
 *
 * Kernels (grid-stride over units; gridDim.y = job, several chunks per launch):
 *   k_amax        pass 1 of current dual scaling: the chunk amax of the
 *                 transformed values, atomicMax into the job's slot;
 *   k_compress    encode (pass 2, or the only pass): group exponent, Hadamard,
 *                 chunk scale, FP8 cast (hardware cvt with satfinite, or the
 *                 integer encoder for stochastic rounding), codes + exponent
 *                 bytes + statistics;
 *   k_decompress  decode 1..16 compressed copies of a chunk range, inverse
 *                 Hadamard each, sum in fp32 in order, then store fp32/bf16,
 *                 or reduce the sum's transformed amax, or re-compress the sum
 *                 directly (the fused all-gather step).
 * The FP8 conversion: cvt.rn.satfinite.{e4m3,e5m2}x2.f32 is round-to-nearest-
 * even with saturation of finite overflow and of +-inf to +-max, the CPU's
 * rule. NaN gets no say: a NaN (or, in the group pipeline, inf) input's code
 * is overwritten with 0x7F, and a NaN produced by overflow inside the
 * transform is turned into +inf before the cast, as in taco.c. The test
 * checks it against the integer encoder for every one of the 2^32 floats;
 * -DCOMPRESS_CUDA_SOFT_FP8 uses the integer encoder for RNE too.
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <curand_kernel.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "compress/compress_cuda.h"
#include "compress/hadamard.h"
#include "compress/methods.h"
#include "compress/taco.h" /* TACO_EXP_MIN / TACO_EXP_MAX; its functions are not used here */

/* Every launch goes through LAUNCH; under the CPU emulator (tests/emu) its <<<>>>
 * is rewritten into emu_launch like every other launch (compress/CUDA.md,
 * "Running the kernels without a GPU"). */
#ifndef LAUNCH
#define LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

namespace {

constexpr int THREADS = 256;            /* threads per block */
constexpr int WARPS = THREADS / 32;
constexpr int UNIT = 16;                /* consecutive elements per thread and step */
static_assert(UNIT == COMPRESS_WIRE_UNIT, "methods.h: ranges of methods without groups are cut on units");
constexpr unsigned FULL = 0xffffffffu;
constexpr int MAX_IN = COMPRESS_DEV_MAX_IN;
constexpr int MAX_JOBS = COMPRESS_DEV_MAX_JOBS;
typedef unsigned long long u64;

enum Family { FAM_FP8 = 0, FAM_INT8 = 1, FAM_NONE = 2 }; /* FAM_NONE: raw fp32 or bf16 words (Codec.eb 4 or 2) */

/* Everything a kernel needs to know about a method: its row in methods.h,
 * resolved for the CompressParams on the host (codec_of). */
struct Codec {
    int fam;          /* Family */
    int fmt;          /* Fp8Format */
    int G, tpg, ltpg; /* group length (16 for methods without groups), lanes per group, log2(tpg) */
    int cast;         /* the bare codec: no scaling, NaN stays NaN, inf saturates */
    int hadamard, adaptive, dual;
    int delayed;      /* dual scale from delayed_amax (valid: > 0 and finite) */
    int stochastic;
    int hdr, gb, eb;  /* wire: header bytes, bytes per group, bytes per element */
    int stats_amax_r; /* stats amax = amax of the transformed values (methods with a chunk scale), else raw input amax */
    float L;          /* fp8 max */
    float norm;       /* hadamard_norm(G) */
    float delayed_amax;
    u64 seed;
};

/* The units [u0, u1) of a chunk of n = 16 nfull + tail elements. Unit
 * indices are 32-bit (the host checks n < 2^35): fewer registers in the
 * loops. u0 is a multiple of the lanes per group, so the range's first group
 * is u0 >> ltpg, and group gi is full iff gi < nfull >> ltpg. */
struct Span {
    unsigned u0, u1, nfull, tail;
};

/* one chunk range a compress launch works on */
struct CJob {
    const void* x;     /* element 0 of the chunk's input */
    uint8_t* scale;    /* chunk scale bytes (written by the range that starts the chunk) */
    uint8_t* exps;     /* group bytes of the range's first group */
    uint8_t* codes;    /* element bytes of unit u0 */
    Span sp;
    u64 stream;
    CompressStatsDev* st;
};
struct CLaunch {
    int njobs;
    CJob job[MAX_JOBS];
};

struct DIn {
    const uint8_t* scale;
    const uint8_t* exps;
    const uint8_t* codes;
};
struct DJob {
    void* y;                                    /* element 0 of the chunk's output (fp32 / bf16) */
    uint8_t* oscale; uint8_t* oexps; uint8_t* ocodes; /* recompressed output of the range */
    Span sp;
    u64 stream;
    CompressStatsDev* st;
    int in_first, nin;                          /* inputs in[in_first .. in_first + nin) in sum order */
};
struct DLaunch {
    int njobs;
    DJob job[MAX_JOBS];
    DIn in[MAX_IN];
};

/* Minimum resident blocks per SM asked of the register allocator
 * (__launch_bounds__): 4 x 256 threads caps a kernel at 64 registers, 3 at 80,
 * 2 at 128. Memory-bound kernels want many loads in flight, so the RNE paths
 * get the tight cap (they fit without spilling); the variants that need more
 * registers get fewer blocks: int8 compress one less, stochastic rounding
 * (Philox words) two less in compress and one less in the recompress. The
 * register report (compress/CUDA.md) flags any spill. */
#ifndef COMPRESS_MIN_BLOCKS
#define COMPRESS_MIN_BLOCKS 4
#endif
#ifndef DECOMPRESS_MIN_BLOCKS
#define DECOMPRESS_MIN_BLOCKS 3
#endif
/* compressed inputs whose 16-byte loads a decompress thread issues before
 * decoding the first of them */
#ifndef PREFETCH
#define PREFETCH 2
#endif

enum OutKind { OUT_F32 = 0, OUT_BF16 = 1, OUT_AMAX = 2, OUT_RECOMP = 3 };
enum AccInit { INIT_FIRST = 0, INIT_ZERO = 1, INIT_LOAD = 2 };

template <int FMT> struct Fp8T;
template <> struct Fp8T<FP8_E4M3> {
    static constexpr int MB = 3, BIAS = 7;
    static constexpr int SHIFT = 20; /* (code & 0x7F) << SHIFT: the fp8 value times 2^-BA, as float bits */
    static constexpr int BA = 120;   /* 127 - BIAS */
    static constexpr unsigned MAXC = 0x7Eu;
};
template <> struct Fp8T<FP8_E5M2> {
    static constexpr int MB = 2, BIAS = 15, SHIFT = 21, BA = 112;
    static constexpr unsigned MAXC = 0x7Bu;
};

/* ========================================================================== */
/* scalar helpers                                                              */

/* 2^k, exact (normal for k in [-126, 127], ldexpf's exact result otherwise) */
__device__ __forceinline__ float pow2f_dev(int k) {
    return (k >= -126 && k <= 127) ? __uint_as_float((unsigned)(k + 127) << 23) : ldexpf(1.0f, k);
}

/* frexpf for a positive finite float: v = m * 2^e, m in [0.5, 1); *frac gets
 * m's 23 fraction bits (normalised also for float subnormals), so comparing
 * two m's is comparing their fracs. */
__device__ __forceinline__ int frexp_dev(float v, unsigned* frac) {
    const unsigned b = __float_as_uint(v);
    int e = (int)(b >> 23);
    unsigned m = b & 0x7FFFFFu;
    if (e == 0) { /* subnormal: bring the leading one to bit 23 */
        const int sh = __clz(m) - 8;
        m = (m << sh) & 0x7FFFFFu;
        e = 1 - sh;
    }
    *frac = m;
    return e - 126;
}

/* taco_pow2_fit: the largest k in [EXP_MIN, EXP_MAX] with amax * 2^k <= limit;
 * 0 for amax == 0 (or NaN), EXP_MIN for inf. The same comparison as the CPU. */
__device__ __forceinline__ int pow2_fit_dev(float amax, float limit) {
    if (!(amax > 0.0f)) return 0;
    if (isinf(amax)) return TACO_EXP_MIN;
    unsigned fa, fl;
    const int ea = frexp_dev(amax, &fa), el = frexp_dev(limit, &fl);
    const int k = el - ea - (fa > fl ? 1 : 0);
    return min(max(k, TACO_EXP_MIN), TACO_EXP_MAX);
}

__device__ __forceinline__ unsigned byte_of(const unsigned (&w)[4], int j) { return (w[j >> 2] >> (8 * (j & 3))) & 0xFFu; }

__device__ __forceinline__ unsigned load_u32_any(const uint8_t* p) {
    if (((uintptr_t)p & 3u) == 0) return *reinterpret_cast<const unsigned*>(p);
    return (unsigned)p[0] | ((unsigned)p[1] << 8) | ((unsigned)p[2] << 16) | ((unsigned)p[3] << 24);
}
__device__ __forceinline__ void store_u32_any(uint8_t* p, unsigned v) {
    if (((uintptr_t)p & 3u) == 0) {
        *reinterpret_cast<unsigned*>(p) = v;
    } else {
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
    }
}

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

template <int OUT>
__device__ __forceinline__ void store_y16(void* y, unsigned u, int nv, const float (&a)[UNIT]) {
    if (OUT == OUT_BF16) {
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

/* ========================================================================== */
/* group reductions and the Hadamard                                           */

/* Reductions over the tpg lanes of a group (xor masks < tpg stay inside the
 * aligned lane block of the group). Every lane of the warp must call. */
__device__ __forceinline__ unsigned group_max_u32(unsigned v, int tpg) {
    for (int m = 1; m < tpg; m <<= 1) v = max(v, __shfl_xor_sync(FULL, v, m));
    return v;
}
/* NaN-ignoring, like the CPU's "if (v > a) a = v" */
__device__ __forceinline__ float group_max_f32(float v, int tpg) {
    for (int m = 1; m < tpg; m <<= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, m));
    return v;
}
__device__ __forceinline__ bool group_any(bool pred, int tpg, int lane) {
    const unsigned b = __ballot_sync(FULL, pred);
    const unsigned gm = (tpg >= 32) ? FULL : (((1u << tpg) - 1u) << (lane & ~(tpg - 1)));
    return (b & gm) != 0u;
}

/* The orthonormal Walsh-Hadamard transform of the group, in place, bit-exact
 * with hadamard_transform(): stages h = 1, 2, 4, 8 on the thread's 16
 * registers, then h = 16 m for lane masks m = 1, 2, .., tpg/2, then one
 * multiply by norm. In a cross-lane stage the lane without bit m holds x[j]
 * (a) and computes a + b; its partner holds x[j + h] (b) and must compute
 * a - b = partner - mine. Both are fma(mine, +-1, partner): mine * +-1 is
 * exact, so the fma rounds exactly once, like the CPU's add/subtract, also
 * for signed zeros. The shuffles run in every lane (groups in one warp may
 * differ in `rot`); only lanes of rotating groups update. */
__device__ __forceinline__ void hadamard_unit(float (&v)[UNIT], int tpg, int lane, bool rot, float norm) {
    if (rot) {
#pragma unroll
        for (int h = 1; h < UNIT; h <<= 1) {
#pragma unroll
            for (int j = 0; j < UNIT; j++) {
                if (j & h) continue;
                const float a = v[j], b = v[j + h];
                v[j] = __fadd_rn(a, b);
                v[j + h] = __fsub_rn(a, b);
            }
        }
    }
    for (int m = 1; m < tpg; m <<= 1) {
        const float sgn = (lane & m) ? -1.0f : 1.0f;
#pragma unroll
        for (int j = 0; j < UNIT; j++) {
            const float q = __shfl_xor_sync(FULL, v[j], m);
            if (rot) v[j] = __fmaf_rn(v[j], sgn, q);
        }
    }
    if (rot) {
#pragma unroll
        for (int j = 0; j < UNIT; j++) v[j] = __fmul_rn(v[j], norm);
    }
}

/* ========================================================================== */
/* FP8 codes                                                                   */

/* fp8.c's fp8_encode_core, integer operation for integer operation: RNE or
 * stochastic rounding (up iff F + rnd >= 2^32), saturating, NaN -> 0x7F. */
template <int FMT>
__device__ __forceinline__ unsigned fp8_encode_sw(float x, bool stochastic, unsigned rnd) {
    typedef Fp8T<FMT> T;
    const unsigned bits = __float_as_uint(x);
    const unsigned sign = (bits >> 24) & 0x80u;
    const unsigned a = bits & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7Fu;
    if (a == 0x7F800000u) return sign | T::MAXC;
    const unsigned fexp = a >> 23;
    unsigned sig = a & 0x7FFFFFu;
    int e;
    if (fexp == 0) {
        e = -126;
    } else {
        sig |= 0x800000u;
        e = (int)fexp - 127;
    }
    int eb = e + T::BIAS, shift = 23 - T::MB;
    if (eb < 1) {
        shift += 1 - eb;
        eb = 1;
    }
    const u64 t = shift < 64 ? (((u64)sig << 32) >> shift) : 0ull;
    const unsigned kept = (unsigned)(t >> 32), F = (unsigned)t;
    unsigned up;
    if (stochastic) up = ((u64)F + rnd) >= 0x100000000ull;
    else up = (F > 0x80000000u || (F == 0x80000000u && (kept & 1u))) ? 1u : 0u;
    unsigned code = ((unsigned)(eb - 1) << T::MB) + kept + up;
    if (code > T::MAXC) code = T::MAXC;
    return sign | code;
}

/* two codes, round to nearest even, saturating (+-inf -> +-max); lo in the
 * low byte. A NaN input's code is overwritten by the caller (quantize16). */
template <int FMT>
__device__ __forceinline__ unsigned fp8x2_rne(float lo, float hi) {
#ifdef COMPRESS_CUDA_SOFT_FP8
    return fp8_encode_sw<FMT>(lo, false, 0u) | (fp8_encode_sw<FMT>(hi, false, 0u) << 8);
#else
    return (unsigned)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE,
                                              FMT == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
#endif
}

/* The Philox4x32-10 words of elements 4 blk .. 4 blk + 3 of (seed, stream):
 * rng.h's mapping, which is curand_init(seed, stream, i) + curand(). */
__device__ __forceinline__ uint4 philox_block(u64 seed, u64 stream, u64 blk) {
    return curand_Philox4x32_10(make_uint4((unsigned)blk, (unsigned)(blk >> 32), (unsigned)stream, (unsigned)(stream >> 32)),
                                make_uint2((unsigned)seed, (unsigned)(seed >> 32)));
}

/* 16 codes of v (element i0 + j of the chunk), RNE or SR; then the NaN code
 * 0x7F in the slots of nanmask */
template <int FMT, bool SR>
__device__ __forceinline__ void quantize16(const Codec& c, const float (&v)[UNIT], unsigned nanmask, u64 i0, u64 stream,
                                           unsigned (&w)[4]) {
    if constexpr (!SR) {
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = fp8x2_rne<FMT>(v[4 * k], v[4 * k + 1]) | (fp8x2_rne<FMT>(v[4 * k + 2], v[4 * k + 3]) << 16);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint4 r = philox_block(c.seed, stream, (i0 >> 2) + (u64)k);
            w[k] = fp8_encode_sw<FMT>(v[4 * k], true, r.x) | (fp8_encode_sw<FMT>(v[4 * k + 1], true, r.y) << 8) |
                   (fp8_encode_sw<FMT>(v[4 * k + 2], true, r.z) << 16) | (fp8_encode_sw<FMT>(v[4 * k + 3], true, r.w) << 24);
        }
    }
    if (nanmask) {
#pragma unroll
        for (int j = 0; j < UNIT; j++)
            if ((nanmask >> j) & 1u) w[j >> 2] = (w[j >> 2] & ~(0xFFu << (8 * (j & 3)))) | (0x7Fu << (8 * (j & 3)));
    }
}

/* fp8_decode: exact; NaN codes -> NaN, E5M2 inf -> inf */
template <int FMT>
__device__ __forceinline__ float fp8_decode_exact(unsigned c) {
    typedef Fp8T<FMT> T;
    const unsigned mag = c & 0x7Fu;
    float v;
    if (FMT == FP8_E4M3 && mag == 0x7Fu) v = __uint_as_float(0x7FC00000u);
    else if (FMT == FP8_E5M2 && mag >= 0x7Cu) v = __uint_as_float(mag == 0x7Cu ? 0x7F800000u : 0x7FC00000u);
    else v = __fmul_rn(__uint_as_float(mag << T::SHIFT), pow2f_dev(T::BA)); /* exact, see DecConst */
    return (c & 0x80u) ? -v : v;
}

/* How one compressed input turns a code into d = fp8_decode(code) / scale.
 * raw = the float whose bits are (sign << 31) | (code & 0x7F) << SHIFT is
 * EXACTLY fp8_value * 2^-BA, also for fp8 subnormals (it is then a float
 * subnormal). With scale s = 2^k (every scale our encoders write):
 *   mode 0: d = raw * 2^(BA - k)             when BA - k <= 127
 *   mode 1: d = (raw * 2^BA) * 2^-k          (the first product is exact)
 * Each rounds the exact real fp8_value * 2^-k once, as the CPU's IEEE
 * division fp8_value / s does, so the bits are the same. Any other scale
 * (foreign bytes): mode 2, an IEEE division __fdiv_rn, like the CPU. */
struct DecConst {
    float c1, c2, s;
    int mode;
};

template <int FMT>
__device__ DecConst dec_const(const uint8_t* scale) {
    const int BA = Fp8T<FMT>::BA;
    DecConst d;
    d.s = scale ? __uint_as_float(load_u32_any(scale)) : 1.0f;
    d.c2 = 1.0f;
    const unsigned b = __float_as_uint(d.s);
    if ((b & 0x807FFFFFu) == 0u && b >= 0x00800000u && b < 0x7F800000u) {
        const int k = (int)(b >> 23) - 127;
        if (BA - k <= 127) {
            d.mode = 0;
            d.c1 = pow2f_dev(BA - k);
        } else {
            d.mode = 1;
            d.c1 = pow2f_dev(BA);
            d.c2 = pow2f_dev(-k);
        }
    } else {
        d.mode = 2;
        d.c1 = pow2f_dev(BA);
    }
    return d;
}

/* 16 codes -> d[j] = fp8_decode(code_j) / s; returns the mask of NaN codes.
 * Fast path when no code is NaN/inf; the rare special codes take the exact
 * per-element path (which is also the division path for foreign scales). */
template <int FMT>
__device__ __forceinline__ unsigned fp8_decode16(const unsigned (&w)[4], const DecConst& dc, float (&d)[UNIT]) {
    typedef Fp8T<FMT> T;
    unsigned special = 0;
#pragma unroll
    for (int k = 0; k < 4; k++)
        special |= (FMT == FP8_E4M3) ? __vcmpeq4(w[k] & 0x7F7F7F7Fu, 0x7F7F7F7Fu) : __vcmpeq4(w[k] & 0x7C7C7C7Cu, 0x7C7C7C7Cu);
    unsigned nanmask = 0;
    if (special == 0u && dc.mode != 2) {
#pragma unroll
        for (int j = 0; j < UNIT; j++) {
            const unsigned c = byte_of(w, j);
            d[j] = __fmul_rn(__uint_as_float(((c & 0x80u) << 24) | ((c & 0x7Fu) << T::SHIFT)), dc.c1);
        }
        if (dc.mode == 1) {
#pragma unroll
            for (int j = 0; j < UNIT; j++) d[j] = __fmul_rn(d[j], dc.c2);
        }
    } else {
#pragma unroll
        for (int j = 0; j < UNIT; j++) {
            const float v = fp8_decode_exact<FMT>(byte_of(w, j));
            if (isnan(v)) nanmask |= 1u << j;
            d[j] = __fdiv_rn(v, dc.s);
        }
    }
    return nanmask;
}

/* ========================================================================== */
/* statistics                                                                  */

struct TStats {
    unsigned sat, nf;
    float amax; /* >= 0, NaN-free */
};

/* block-reduce and add to st (all threads of the block call; st uniform) */
__device__ void flush_stats(const TStats& t, CompressStatsDev* st) {
    __shared__ unsigned s_sat[WARPS], s_nf[WARPS], s_am[WARPS];
    if (!st) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned sat = __reduce_add_sync(FULL, t.sat), nf = __reduce_add_sync(FULL, t.nf);
    const unsigned am = __reduce_max_sync(FULL, __float_as_uint(t.amax));
    if (lane == 0) {
        s_sat[warp] = sat;
        s_nf[warp] = nf;
        s_am[warp] = am;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 bs = 0, bn = 0;
        unsigned ba = 0;
        for (int i = 0; i < WARPS; i++) {
            bs += s_sat[i];
            bn += s_nf[i];
            ba = max(ba, s_am[i]);
        }
        if (bs) atomicAdd(&st->saturated, bs);
        if (bn) atomicAdd(&st->nonfinite, bn);
        if (ba) atomicMax(&st->amax_bits, ba);
    }
}

/* block max of amax (>= 0) into the chunk's scale slot */
__device__ void flush_scale_amax(float amax, CompressStatsDev* st) {
    __shared__ unsigned s_am[WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned am = __reduce_max_sync(FULL, __float_as_uint(amax));
    if (lane == 0) s_am[warp] = am;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned ba = 0;
        for (int i = 0; i < WARPS; i++) ba = max(ba, s_am[i]);
        if (ba) atomicMax(&st->scale_amax_bits, ba);
    }
}

/* ========================================================================== */
/* one unit through a method                                                   */

/* where an encoded range goes */
struct ORange {
    uint8_t* exps;
    uint8_t* codes;
    Span sp;
    u64 stream;
};

/* the finite amax of the unit (as float bits) and which elements are inf/NaN */
struct Scan {
    unsigned amax_u, nfmask, nanmask;
};
__device__ __forceinline__ Scan scan_finite(const float (&v)[UNIT]) {
    Scan s = {0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < UNIT; j++) s.amax_u = max(s.amax_u, __float_as_uint(v[j]) & 0x7FFFFFFFu);
    if (s.amax_u >= 0x7F800000u) { /* rare: some element is inf or NaN */
        s.amax_u = 0u;
#pragma unroll
        for (int j = 0; j < UNIT; j++) {
            const unsigned ab = __float_as_uint(v[j]) & 0x7FFFFFFFu;
            if (ab >= 0x7F800000u) {
                s.nfmask |= 1u << j;
                if (ab > 0x7F800000u) s.nanmask |= 1u << j;
            } else {
                s.amax_u = max(s.amax_u, ab);
            }
        }
    }
    return s;
}

/* taco.c's taco_group_prepare for the thread's share of a group: v becomes r
 * (scaled by 2^-e_u, nonfinite slots zeroed, rotated if the group is full and
 * finite). Returns the thread's max |r| (NaN-ignoring). */
struct Prep {
    Scan sc;
    int e_u;
    float tr;
};
__device__ __forceinline__ Prep fp8_prepare(const Codec& c, float (&v)[UNIT], unsigned u, const Span& sp, int lane) {
    Prep p;
    p.sc = scan_finite(v);
    p.e_u = 0;
    if (c.adaptive) {
        const unsigned ga = group_max_u32(p.sc.amax_u, c.tpg);
        p.e_u = -pow2_fit_dev(__uint_as_float(ga), 1.0f);
        const float down = pow2f_dev(-p.e_u);
#pragma unroll
        for (int j = 0; j < UNIT; j++) v[j] = __fmul_rn(v[j], down);
    }
    if (p.sc.nfmask) {
#pragma unroll
        for (int j = 0; j < UNIT; j++)
            if ((p.sc.nfmask >> j) & 1u) v[j] = 0.0f;
    }
    if (c.hadamard) {
        const bool full = (u >> c.ltpg) < (sp.nfull >> c.ltpg);
        const bool gnf = group_any(p.sc.nfmask != 0u, c.tpg, lane);
        hadamard_unit(v, c.tpg, lane, full && !gnf, c.norm);
    }
    float tr = 0.0f;
#pragma unroll
    for (int j = 0; j < UNIT; j++) tr = fmaxf(tr, fabsf(v[j]));
    p.tr = tr;
    return p;
}

/* The FP8 pipeline's encode of one unit (taco.c pass 2, or cast_encode). */
template <int FMT, bool SR>
__device__ __forceinline__ void fp8_encode_unit(const Codec& c, float (&v)[UNIT], int nv, unsigned u, const ORange& o,
                                                int kc, int lane, TStats& ts) {
    const u64 i0 = (u64)UNIT * u; /* the element's index in the chunk: the Philox counter */
    unsigned w[4];
    if (c.cast) {
        /* the bare codec: NaN -> 0x7F, +-inf -> +-max, |finite| > L counted */
        const Scan sc = scan_finite(v);
        ts.nf += __popc(sc.nfmask);
        const float a = __uint_as_float(sc.amax_u);
        ts.amax = fmaxf(ts.amax, a);
        if (a > c.L) {
#pragma unroll
            for (int j = 0; j < UNIT; j++)
                if (!((sc.nfmask >> j) & 1u) && fabsf(v[j]) > c.L) ts.sat++;
        }
        quantize16<FMT, SR>(c, v, sc.nanmask, i0, o.stream, w);
    } else {
        const Prep p = fp8_prepare(c, v, u, o.sp, lane);
        ts.nf += __popc(p.sc.nfmask);
        ts.amax = fmaxf(ts.amax, c.stats_amax_r ? p.tr : __uint_as_float(p.sc.amax_u));
        int b = 0, km = 0;
        if (c.dual) {
            b = p.e_u;
            km = kc;
        } else if (c.adaptive) {
            /* the group's own exponent maps it onto the fp8 range */
            const int kg = pow2_fit_dev(group_max_f32(p.tr, c.tpg), c.L);
            b = min(max(p.e_u - kg, TACO_EXP_MIN), TACO_EXP_MAX);
            km = p.e_u - b;
        }
        if (o.exps && nv > 0 && (lane & (c.tpg - 1)) == 0) o.exps[(u >> c.ltpg) - (o.sp.u0 >> c.ltpg)] = (uint8_t)(b + 127);
        const float m = pow2f_dev(km);
#pragma unroll
        for (int j = 0; j < UNIT; j++) v[j] = __fmul_rn(v[j], m);
        /* saturation: max |v| = round(max |r| * m) (rounding is monotonic), so
         * one compare decides for the whole unit; a NaN r (overflow inside
         * the transform) is only possible with adaptive off and Hadamard on */
        if ((c.hadamard && !c.adaptive) || !(__fmul_rn(p.tr, m) <= c.L)) {
#pragma unroll
            for (int j = 0; j < UNIT; j++) {
                if (j < nv && !((p.sc.nfmask >> j) & 1u) && !(fabsf(v[j]) <= c.L)) {
                    ts.sat++;
                    if (isnan(v[j])) v[j] = __uint_as_float(0x7F800000u); /* never a NaN code for finite input */
                }
            }
        }
        quantize16<FMT, SR>(c, v, p.sc.nfmask, i0, o.stream, w);
    }
    store_bytes16(o.codes, u, o.sp, nv, w, lane);
}

/* int8_group (compress.c int8_encode): step d = amax / 127 per group, q =
 * round(x / d), -128 for NaN/inf; RNE by rintf, SR with F = frac * 2^32. */
__device__ __forceinline__ void int8_encode_unit(const Codec& c, const float (&v)[UNIT], int nv, unsigned u,
                                                 const ORange& o, int lane, TStats& ts) {
    const Scan sc = scan_finite(v);
    ts.nf += __popc(sc.nfmask);
    ts.amax = fmaxf(ts.amax, __uint_as_float(sc.amax_u));
    const float d = __fdiv_rn(__uint_as_float(group_max_u32(sc.amax_u, c.tpg)), 127.0f);
    const u64 i0 = (u64)UNIT * u;
    if (o.exps && nv > 0 && (lane & (c.tpg - 1)) == 0)
        store_u32_any(o.exps + 4 * (size_t)((u >> c.ltpg) - (o.sp.u0 >> c.ltpg)), __float_as_uint(d));
    unsigned rw[UNIT];
    if (c.stochastic) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint4 r = philox_block(c.seed, o.stream, (i0 >> 2) + (u64)k);
            rw[4 * k] = r.x; rw[4 * k + 1] = r.y; rw[4 * k + 2] = r.z; rw[4 * k + 3] = r.w;
        }
    }
    unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < UNIT; j++) {
        int q = 0;
        if ((sc.nfmask >> j) & 1u) {
            q = -128;
        } else if (d != 0.0f && j < nv) {
            const float t = __fdiv_rn(v[j], d);
            const float a = fabsf(t);
            float r;
            if (c.stochastic) {
                const float fl = floorf(a);
                const unsigned F = __float2uint_rz(__fmul_rn(__fsub_rn(a, fl), 4294967296.0f));
                r = __fadd_rn(fl, ((u64)F + rw[j] >= 0x100000000ull) ? 1.0f : 0.0f);
            } else {
                r = rintf(a);
            }
            if (r > 127.0f) {
                r = 127.0f;
                ts.sat++;
            }
            q = (t < 0.0f) ? -(int)r : (int)r;
        }
        w[j >> 2] |= ((unsigned)q & 0xFFu) << (8 * (j & 3));
    }
    store_bytes16(o.codes, u, o.sp, nv, w, lane);
}

/* none: the fp32 bits as they are (eb = 4); bf16: rounded to nearest even
 * by bf16.h's integer rule, the CPU's bytes exactly (eb = 2) */
__device__ __forceinline__ void raw_encode_unit(const Codec& c, const float (&v)[UNIT], int nv, unsigned u, const ORange& o,
                                                TStats& ts) {
    const Scan sc = scan_finite(v);
    ts.nf += __popc(sc.nfmask);
    ts.amax = fmaxf(ts.amax, __uint_as_float(sc.amax_u));
    if (c.eb == 4) {
        unsigned w[UNIT];
#pragma unroll
        for (int j = 0; j < UNIT; j++) w[j] = __float_as_uint(v[j]);
        store_words16(o.codes + (size_t)UNIT * 4 * (u - o.sp.u0), nv, w);
    } else {
        unsigned w[UNIT / 2];
#pragma unroll
        for (int k = 0; k < UNIT / 2; k++) {
            const unsigned b0 = __float_as_uint(v[2 * k]), b1 = __float_as_uint(v[2 * k + 1]);
            w[k] = (unsigned)bf16_from_bits(b0) | ((unsigned)bf16_from_bits(b1) << 16);
            ts.sat += (unsigned)bf16_overflows(b0) + (unsigned)bf16_overflows(b1); /* slots past nv hold 0 */
        }
        store_halves16(o.codes + (size_t)UNIT * 2 * (u - o.sp.u0), nv, w);
    }
}

/* unit lu of a raw (none / bf16) input as fp32 */
__device__ __forceinline__ void raw_decode_unit(const Codec& c, const uint8_t* codes, unsigned lu, int nv, float (&d)[UNIT]) {
    if (c.eb == 4) {
        unsigned w[UNIT];
        load_words16(codes + (size_t)UNIT * 4 * lu, nv, w);
#pragma unroll
        for (int j = 0; j < UNIT; j++) d[j] = __uint_as_float(w[j]);
    } else {
        unsigned w[UNIT / 2];
        load_halves16(codes + (size_t)UNIT * 2 * lu, nv, w);
#pragma unroll
        for (int k = 0; k < UNIT / 2; k++) {
            d[2 * k] = __uint_as_float(w[k] << 16);
            d[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
        }
    }
}

template <int FAM, int FMT, bool SR>
__device__ __forceinline__ void encode_unit(const Codec& c, float (&v)[UNIT], int nv, unsigned u, const ORange& o, int kc,
                                            int lane, TStats& ts) {
    if constexpr (FAM == FAM_FP8) fp8_encode_unit<FMT, SR>(c, v, nv, u, o, kc, lane, ts);
    else if constexpr (FAM == FAM_INT8) int8_encode_unit(c, v, nv, u, o, lane, ts);
    else raw_encode_unit(c, v, nv, u, o, ts);
}

/* the chunk scale exponent k_c of taco.c step 4 (0 without dual scale) */
__device__ __forceinline__ int chunk_kc(const Codec& c, const CompressStatsDev* st) {
    if (c.fam != FAM_FP8 || c.cast || !c.dual) return 0;
    if (c.delayed) return pow2_fit_dev(c.delayed_amax, __fdiv_rn(c.L, COMPRESS_HEADROOM_DELAYED));
    return pow2_fit_dev(__uint_as_float(st->scale_amax_bits), __fdiv_rn(c.L, COMPRESS_HEADROOM_CURRENT));
}

/* ========================================================================== */
/* kernels                                                                     */

/* Pass 1 of current dual scaling: max |r| over the job's range -> its slot. */
template <bool BF16>
__global__ void __launch_bounds__(THREADS, COMPRESS_MIN_BLOCKS) k_amax(const Codec c, const __grid_constant__ CLaunch L) {
    const CJob& J = L.job[blockIdx.y];
    const int lane = threadIdx.x & 31;
    const Span sp = J.sp;
    const unsigned nunits = sp.u1 - sp.u0, stride = gridDim.x * THREADS;
    float tam = 0.0f;
    /* t0 is the warp's first unit: the loop condition is warp-uniform, so
     * every lane reaches the shuffles of every iteration */
    for (unsigned t0 = blockIdx.x * THREADS + (threadIdx.x & ~31u); t0 < nunits; t0 += stride) {
        const unsigned u = sp.u0 + t0 + lane;
        const int nv = unit_valid(u, sp);
        float v[UNIT];
        load_x16<BF16>(J.x, u, nv, v);
        tam = fmaxf(tam, fp8_prepare(c, v, u, sp, lane).tr);
    }
    flush_scale_amax(tam, J.st);
}

/* The loads of the warp's next unit are issued before this unit is encoded
 * (one unit of raw words in registers), so part of the memory latency hides
 * behind the encode. Measured on the H200 (compress/CUDA.md): 0-9% faster
 * depending on the method, never slower; the kernel is issue-bound. */
template <int FAM, int FMT, bool SR, bool BF16>
__global__ void __launch_bounds__(THREADS, SR ? COMPRESS_MIN_BLOCKS - 2 : FAM == FAM_INT8 ? COMPRESS_MIN_BLOCKS - 1 : COMPRESS_MIN_BLOCKS)
    k_compress(const Codec c, const __grid_constant__ CLaunch L) {
    const CJob& J = L.job[blockIdx.y];
    const int lane = threadIdx.x & 31;
    const Span sp = J.sp;
    const int kc = chunk_kc(c, J.st);
    if (blockIdx.x == 0 && threadIdx.x == 0 && sp.u0 == 0 && J.scale) store_u32_any(J.scale, __float_as_uint(pow2f_dev(kc)));
    const ORange o = {J.exps, J.codes, sp, J.stream};
    TStats ts = {0u, 0u, 0.0f};
    const unsigned nunits = sp.u1 - sp.u0, stride = gridDim.x * THREADS;
    unsigned t0 = blockIdx.x * THREADS + (threadIdx.x & ~31u); /* the warp's first unit: uniform loop tests */
    Raw16<BF16> next;
    unsigned u = sp.u0 + t0 + lane;
    int nv = 0;
    if (t0 < nunits) {
        nv = unit_valid(u, sp);
        load_raw16<BF16>(J.x, u, nv, next);
    }
    for (; t0 < nunits; t0 += stride) {
        float v[UNIT];
        raw_to_x16<BF16>(next, v);
        const unsigned uc = u;
        const int nvc = nv;
        if (t0 + stride < nunits) {
            u = sp.u0 + t0 + stride + lane;
            nv = unit_valid(u, sp);
            load_raw16<BF16>(J.x, u, nv, next);
        }
        encode_unit<FAM, FMT, SR>(c, v, nvc, uc, o, kc, lane, ts);
    }
    flush_stats(ts, J.st);
}

/* one compressed FP8 input's unit, decoded and inverse-transformed, times 2^b */
template <int FMT>
__device__ __forceinline__ void fp8_decode_unit(const Codec& ci, const unsigned (&w)[4], unsigned ebyte, const DecConst& dc,
                                                bool full, int lane, float (&d)[UNIT]) {
    const unsigned nanmask = fp8_decode16<FMT>(w, dc, d);
    if (ci.hadamard) {
        const bool gnan = group_any(nanmask != 0u, ci.tpg, lane);
        hadamard_unit(d, ci.tpg, lane, full && !gnan, ci.norm);
    }
    if (ci.gb) {
        const float up = pow2f_dev((int)ebyte - 127);
#pragma unroll
        for (int j = 0; j < UNIT; j++) d[j] = __fmul_rn(d[j], up);
    }
}

__device__ __forceinline__ void accumulate(float (&acc)[UNIT], const float (&d)[UNIT], bool assign) {
    if (assign) {
#pragma unroll
        for (int j = 0; j < UNIT; j++) acc[j] = d[j];
    } else {
#pragma unroll
        for (int j = 0; j < UNIT; j++) acc[j] = __fadd_rn(acc[j], d[j]);
    }
}

/* Decode (and sum) the job's inputs over its range, then OUT. */
template <int OUT, int FMT_OUT, bool SR>
__global__ void __launch_bounds__(THREADS, SR ? DECOMPRESS_MIN_BLOCKS - 1 : DECOMPRESS_MIN_BLOCKS) k_decompress(const Codec ci, const Codec co, const int init,
                                                        const __grid_constant__ DLaunch L) {
    const DJob& J = L.job[blockIdx.y];
    const int lane = threadIdx.x & 31;
    const Span sp = J.sp;
    __shared__ DecConst s_dc[MAX_IN];
    if ((int)threadIdx.x < J.nin) {
        const uint8_t* sp = L.in[J.in_first + (int)threadIdx.x].scale;
        if (ci.fam == FAM_FP8) s_dc[threadIdx.x] = ci.fmt == FP8_E4M3 ? dec_const<FP8_E4M3>(sp) : dec_const<FP8_E5M2>(sp);
        else s_dc[threadIdx.x] = DecConst{1.0f, 1.0f, 1.0f, 0};
    }
    __syncthreads();
    int kc = 0;
    if (OUT == OUT_RECOMP) {
        kc = chunk_kc(co, J.st);
        if (blockIdx.x == 0 && threadIdx.x == 0 && sp.u0 == 0 && J.oscale) store_u32_any(J.oscale, __float_as_uint(pow2f_dev(kc)));
    }
    const ORange o = {J.oexps, J.ocodes, sp, J.stream};
    TStats ts = {0u, 0u, 0.0f};
    float tam = 0.0f;
    const unsigned nunits = sp.u1 - sp.u0, stride = gridDim.x * THREADS;
    for (unsigned t0 = blockIdx.x * THREADS + (threadIdx.x & ~31u); t0 < nunits; t0 += stride) {
        const unsigned u = sp.u0 + t0 + lane;
        const int nv = unit_valid(u, sp);
        const bool next_ok = unit_valid(u + 1, sp) == UNIT;
        const unsigned lu = u - sp.u0;                                  /* unit inside the range */
        const bool full = (u >> ci.ltpg) < (sp.nfull >> ci.ltpg);
        const unsigned lg = (u >> ci.ltpg) - (sp.u0 >> ci.ltpg);        /* group inside the range */
        float acc[UNIT];
        if (init == INIT_LOAD) {
            load_x16<false>(J.y, u, nv, acc);
        } else {
#pragma unroll
            for (int j = 0; j < UNIT; j++) acc[j] = 0.0f;
        }
        if (ci.fam == FAM_NONE) {
            for (int i = 0; i < J.nin; i++) {
                float d[UNIT];
                raw_decode_unit(ci, L.in[J.in_first + i].codes, lu, nv, d);
                accumulate(acc, d, i == 0 && init == INIT_FIRST);
            }
        } else {
            /* PREFETCH inputs' loads in flight before the first is decoded */
            for (int i0 = 0; i0 < J.nin; i0 += PREFETCH) {
                unsigned cw[PREFETCH][4], eb[PREFETCH];
#pragma unroll
                for (int q = 0; q < PREFETCH; q++) {
                    eb[q] = 0u;
                    if (i0 + q < J.nin) {
                        const DIn in = L.in[J.in_first + i0 + q];
                        load_bytes16(in.codes + (size_t)UNIT * lu, nv, next_ok, cw[q]);
                        if (ci.gb == 1 && nv > 0) eb[q] = in.exps[lg];
                        else if (ci.gb == 4 && nv > 0) eb[q] = load_u32_any(in.exps + 4 * (size_t)lg);
                    }
                }
#pragma unroll
                for (int q = 0; q < PREFETCH; q++) {
                    if (i0 + q < J.nin) {
                        float d[UNIT];
                        if (ci.fam == FAM_INT8) {
                            const float step = __uint_as_float(eb[q]);
#pragma unroll
                            for (int j = 0; j < UNIT; j++) {
                                const int qv = (int)(signed char)byte_of(cw[q], j);
                                d[j] = qv == -128 ? __uint_as_float(0x7FC00000u) : __fmul_rn((float)qv, step);
                            }
                        } else if (ci.fmt == FP8_E4M3) {
                            fp8_decode_unit<FP8_E4M3>(ci, cw[q], eb[q], s_dc[i0 + q], full, lane, d);
                        } else {
                            fp8_decode_unit<FP8_E5M2>(ci, cw[q], eb[q], s_dc[i0 + q], full, lane, d);
                        }
                        accumulate(acc, d, i0 + q == 0 && init == INIT_FIRST);
                    }
                }
            }
        }
        if constexpr (OUT == OUT_F32 || OUT == OUT_BF16) {
            store_y16<OUT>(J.y, u, nv, acc);
        } else if constexpr (OUT == OUT_AMAX) {
            tam = fmaxf(tam, fp8_prepare(co, acc, u, sp, lane).tr);
        } else {
            if (co.fam == FAM_NONE) encode_unit<FAM_NONE, FMT_OUT, false>(co, acc, nv, u, o, kc, lane, ts);
            else encode_unit<FAM_FP8, FMT_OUT, SR>(co, acc, nv, u, o, kc, lane, ts);
        }
    }
    if constexpr (OUT == OUT_AMAX) flush_scale_amax(tam, J.st);
    if constexpr (OUT == OUT_RECOMP) flush_stats(ts, J.st);
}

/* ---- self-checks used by tests/test_compress_gpu.cu ---------------------- */

/* every float bit pattern but NaN: hardware RNE conversion == integer encoder */
template <int FMT>
__global__ void k_check_fp8_hw(u64 base, unsigned long long* bad, unsigned* first) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    unsigned local = 0;
    for (u64 i = base + (u64)blockIdx.x * blockDim.x + threadIdx.x; i < base + (1ull << 30); i += stride) {
        const unsigned b = (unsigned)i;
        if ((b & 0x7FFFFFFFu) > 0x7F800000u) continue;
        const float x = __uint_as_float(b);
        const unsigned hw = (unsigned)__nv_cvt_float2_to_fp8x2(make_float2(x, 0.0f), __NV_SATFINITE,
                                                                FMT == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2) & 0xFFu;
        const unsigned sw = fp8_encode_sw<FMT>(x, false, 0u);
        if (hw != sw) {
            local++;
            atomicMin(first, b);
        }
    }
    if (local) atomicAdd(bad, (unsigned long long)local);
}

/* the kernels' Philox words, and whether curand_init + curand agree */
__global__ void k_check_philox(u64 seed, u64 stream, u64 n, unsigned* words, unsigned long long* bad) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const uint4 r = philox_block(seed, stream, i >> 2);
        const unsigned w = (i & 3) == 0 ? r.x : (i & 3) == 1 ? r.y : (i & 3) == 2 ? r.z : r.w;
        words[i] = w;
        curandStatePhilox4_32_10_t st;
        curand_init(seed, stream, i, &st);
        if (curand(&st) != w) atomicAdd(bad, 1ull);
    }
}

} /* namespace */

/* ========================================================================== */
/* host side                                                                   */

/* Everything a kernel needs to know about p's method: its row in methods.h,
 * resolved for p as compress.c's taco_cfg_of resolves it for the CPU. */
static Codec codec_of(const CompressParams* p, const char* who) {
    compress_params_check(p, who);
    const CompressMethodInfo* m = compress_method_info(p->method);
    const CompressWireLayout l = compress_wire_layout(p);
    const CompressSwitches sw = compress_method_switches(p);
    Codec c;
    memset(&c, 0, sizeof(c));
    c.fam = m->family == CM_FAM_RAW ? FAM_NONE : m->family == CM_FAM_INT8 ? FAM_INT8 : FAM_FP8;
    c.cast = m->family == CM_FAM_CAST;
    c.fmt = (int)p->format;
    c.L = fp8_max(p->format);
    c.stochastic = p->stochastic != 0;
    c.seed = p->seed;
    c.G = l.G; /* UNIT for methods without groups */
    c.hdr = l.hdr;
    c.gb = l.gbytes;
    c.eb = l.ebytes;
    c.hadamard = sw.hadamard;
    c.adaptive = sw.adaptive;
    c.dual = sw.dual;
    /* a chunk scale is computed from the transformed values: the amax its history needs */
    c.stats_amax_r = m->hdr > 0;
    /* taco_encode's rule: a delayed amax is used when > 0 and finite, else the current one */
    const float delayed_amax = compress_method_delayed_amax(p);
    if (c.dual && delayed_amax > 0.0f && isfinite(delayed_amax)) {
        c.delayed = 1;
        c.delayed_amax = delayed_amax;
    }
    c.tpg = c.G / UNIT;
    c.ltpg = 0;
    while ((1 << c.ltpg) < c.tpg) c.ltpg++;
    c.norm = hadamard_norm(c.G);
    return c;
}

/* 1 if the chunk scale needs the current chunk amax: an amax pass first */
static bool needs_amax_pass(const Codec& c) { return c.fam == FAM_FP8 && !c.cast && c.dual && !c.delayed; }

static int num_sms(void) {
    static int cached[64];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) FATAL("compress_cuda: device index %d out of range", dev);
    if (!cached[dev]) CUDA_CHECK(cudaDeviceGetAttribute(&cached[dev], cudaDevAttrMultiProcessorCount, dev));
    return cached[dev];
}

/* resident blocks per SM of a kernel, cached per kernel (one device per process) */
static int blocks_per_sm(const void* kernel) {
    static const void* keys[64];
    static int vals[64];
    static int used = 0;
    for (int i = 0; i < used; i++)
        if (keys[i] == kernel) return vals[i];
    int nb = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel, THREADS, 0));
    if (nb < 1) nb = 1;
    if (used < 64) {
        keys[used] = kernel;
        vals[used] = nb;
        used++;
    }
    return nb;
}

/* grid: enough blocks to fill the chip once (grid-stride beyond), split over the jobs */
static dim3 grid_for(const void* kernel, u64 max_units, int njobs) {
    const u64 want = (max_units + THREADS - 1) / THREADS;
    u64 cap = (u64)num_sms() * (u64)blocks_per_sm(kernel) / (u64)njobs;
    if (cap < 1) cap = 1;
    u64 gx = want < cap ? want : cap;
    if (gx < 1) gx = 1;
    return dim3((unsigned)gx, (unsigned)njobs, 1);
}

static u64 ceil_div_u64(u64 a, u64 b) { return (a + b - 1) / b; }

static void check_range(const Codec& c, const CompressJobDev* j, const char* who) {
    const u64 gran = (u64)c.G;
    if (j->e0 > j->e1 || j->e1 > j->n) FATAL("%s: job range [%zu, %zu) is outside its chunk of %zu elements", who, j->e0, j->e1, j->n);
    if (j->e0 % gran != 0 || (j->e1 % gran != 0 && j->e1 != j->n))
        FATAL("%s: job range [%zu, %zu) must start (and end, unless at the chunk end %zu) on a multiple of %llu elements",
              who, j->e0, j->e1, j->n, (unsigned long long)gran);
}

static Span span_of(const CompressJobDev* j, const char* who) {
    if (j->n >= ((size_t)1 << 35)) FATAL("%s: a chunk of %zu elements is too large (at most 2^35 - 1)", who, j->n);
    Span s;
    s.u0 = (unsigned)(j->e0 / UNIT);
    s.u1 = (unsigned)ceil_div_u64(j->e1, UNIT);
    s.nfull = (unsigned)(j->n / UNIT);
    s.tail = (unsigned)(j->n % UNIT);
    return s;
}

static CJob cjob_of(const Codec& c, const CompressJobDev* j, int encode, const char* who) {
    check_range(c, j, who);
    CJob r;
    r.x = j->x;
    r.scale = (c.hdr && j->e0 == 0) ? j->out.scale : nullptr;
    r.exps = c.gb ? j->out.exps : nullptr;
    r.codes = j->out.codes;
    r.sp = span_of(j, who);
    r.stream = j->stream;
    r.st = j->st;
    if (!r.x && r.sp.u1 > r.sp.u0) FATAL("%s: job without an input pointer", who);
    if (encode) { /* the amax pass writes nothing but the slot */
        if (!r.codes && r.sp.u1 > r.sp.u0) FATAL("%s: job without an element-byte pointer", who);
        if (c.gb && !r.exps && r.sp.u1 > r.sp.u0) FATAL("%s: job without a group-byte pointer", who);
        if (c.hdr && j->e0 == 0 && !r.scale) FATAL("%s: the range at element 0 needs the scale pointer", who);
    }
    return r;
}

int compress_dev_two_pass(const CompressParams* p) {
    return needs_amax_pass(codec_of(p, "compress_dev_two_pass"));
}

int compress_dev_can_fuse(const CompressParams* p_in, const CompressParams* p_out) {
    (void)codec_of(p_in, "compress_dev_can_fuse");
    const Codec co = codec_of(p_out, "compress_dev_can_fuse");
    return co.fam != FAM_INT8;
}

typedef void (*CKernel)(Codec, CLaunch);

template <int FAM, int FMT, bool SR>
static const void* compress_kernel_in(int bf16) {
    return bf16 ? (const void*)k_compress<FAM, FMT, SR, true> : (const void*)k_compress<FAM, FMT, SR, false>;
}
static const void* compress_kernel(const Codec& c, int bf16) {
    if (c.fam == FAM_NONE) return compress_kernel_in<FAM_NONE, 0, false>(bf16);
    if (c.fam == FAM_INT8) return compress_kernel_in<FAM_INT8, 0, false>(bf16); /* SR is a run-time branch there */
    if (c.fmt == FP8_E4M3) return c.stochastic ? compress_kernel_in<FAM_FP8, FP8_E4M3, true>(bf16) : compress_kernel_in<FAM_FP8, FP8_E4M3, false>(bf16);
    return c.stochastic ? compress_kernel_in<FAM_FP8, FP8_E5M2, true>(bf16) : compress_kernel_in<FAM_FP8, FP8_E5M2, false>(bf16);
}

/* jobs -> launches of at most MAX_JOBS */
static void launch_compress(const Codec& c, int bf16, const CompressJobDev* jobs, int njobs, int amax_pass,
                            cudaStream_t s, const char* who) {
    for (int first = 0; first < njobs; first += MAX_JOBS) {
        CLaunch L;
        memset(&L, 0, sizeof(L));
        L.njobs = njobs - first < MAX_JOBS ? njobs - first : MAX_JOBS;
        u64 max_units = 0;
        for (int i = 0; i < L.njobs; i++) {
            L.job[i] = cjob_of(c, &jobs[first + i], !amax_pass, who);
            if (L.job[i].sp.u1 - L.job[i].sp.u0 > max_units) max_units = L.job[i].sp.u1 - L.job[i].sp.u0;
            if (amax_pass && !L.job[i].st) FATAL("%s: current chunk scaling needs a CompressStatsDev per job (its amax slot)", who);
        }
        if (amax_pass) {
            const void* k = bf16 ? (const void*)k_amax<true> : (const void*)k_amax<false>;
            const dim3 grid = grid_for(k, max_units, L.njobs);
            if (bf16) LAUNCH(k_amax<true>, grid, THREADS, s, c, L);
            else LAUNCH(k_amax<false>, grid, THREADS, s, c, L);
            CUDA_CHECK_LAUNCH("k_amax");
        } else {
            const void* k = compress_kernel(c, bf16);
            const dim3 grid = grid_for(k, max_units, L.njobs);
            LAUNCH(((CKernel)k), grid, THREADS, s, c, L);
            CUDA_CHECK_LAUNCH("k_compress");
        }
    }
}

void compress_jobs_amax_dev(const CompressParams* p, int x_is_bf16, const CompressJobDev* jobs, int njobs, cudaStream_t s) {
    if (!compress_dev_two_pass(p) || njobs <= 0) return;
    launch_compress(codec_of(p, "compress_jobs_amax_dev"), x_is_bf16, jobs, njobs, 1, s, "compress_jobs_amax_dev");
}

void compress_jobs_encode_dev(const CompressParams* p, int x_is_bf16, const CompressJobDev* jobs, int njobs, cudaStream_t s) {
    if (njobs <= 0) return;
    const Codec c = codec_of(p, "compress_jobs_encode_dev");
    if (needs_amax_pass(c))
        for (int i = 0; i < njobs; i++)
            if (!jobs[i].st) FATAL("compress_jobs_encode_dev: current chunk scaling needs job.st (the amax slot of pass 1)");
    launch_compress(c, x_is_bf16, jobs, njobs, 0, s, "compress_jobs_encode_dev");
}

typedef void (*DKernel)(Codec, Codec, int, DLaunch);

static const void* decompress_kernel(int out, const Codec& co) {
    switch (out) {
    case OUT_F32: return (const void*)k_decompress<OUT_F32, 0, false>;
    case OUT_BF16: return (const void*)k_decompress<OUT_BF16, 0, false>;
    case OUT_AMAX: return (const void*)k_decompress<OUT_AMAX, 0, false>;
    default: break;
    }
    const bool e5 = co.fam == FAM_FP8 && co.fmt == FP8_E5M2, sr = co.fam == FAM_FP8 && co.stochastic;
    if (e5) return sr ? (const void*)k_decompress<OUT_RECOMP, FP8_E5M2, true> : (const void*)k_decompress<OUT_RECOMP, FP8_E5M2, false>;
    return sr ? (const void*)k_decompress<OUT_RECOMP, FP8_E4M3, true> : (const void*)k_decompress<OUT_RECOMP, FP8_E4M3, false>;
}

void decompress_jobs_dev(const CompressParams* p_in, const CompressJobDev* jobs, int njobs, CompressDevMode mode,
                         const CompressParams* p_out, cudaStream_t s) {
    static const char* who = "decompress_jobs_dev";
    if (njobs <= 0) return;
    const Codec ci = codec_of(p_in, who);
    const int needs_out = mode == CDEV_REDUCE_AMAX || mode == CDEV_REDUCE_RECOMPRESS;
    if (needs_out && !p_out) FATAL("%s: mode %d needs p_out", who, (int)mode);
    const Codec co = needs_out ? codec_of(p_out, who) : ci;
    int out = OUT_F32, init = INIT_FIRST;
    switch (mode) {
    case CDEV_DECODE_F32: out = OUT_F32; init = INIT_FIRST; break;
    case CDEV_DECODE_BF16: out = OUT_BF16; init = INIT_FIRST; break;
    case CDEV_REDUCE_F32: out = OUT_F32; init = INIT_ZERO; break;
    case CDEV_REDUCE_F32_ADD: out = OUT_F32; init = INIT_LOAD; break;
    case CDEV_REDUCE_BF16: out = OUT_BF16; init = INIT_ZERO; break;
    case CDEV_REDUCE_AMAX: out = OUT_AMAX; init = INIT_ZERO; break;
    case CDEV_REDUCE_RECOMPRESS: out = OUT_RECOMP; init = INIT_ZERO; break;
    default: FATAL("%s: unknown mode %d", who, (int)mode);
    }
    if (needs_out && co.fam == FAM_INT8) FATAL("%s: int8_group cannot be re-compressed in the fused kernel (use an fp32 sum)", who);
    if (mode == CDEV_REDUCE_AMAX && !needs_amax_pass(co))
        FATAL("%s: the amax pass is only for current dual scaling", who);

    int first = 0;
    while (first < njobs) {
        DLaunch L;
        memset(&L, 0, sizeof(L));
        int nin_used = 0;
        u64 max_units = 0;
        while (first < njobs && L.njobs < MAX_JOBS) {
            const CompressJobDev* j = &jobs[first];
            if (j->nin < 1 || j->nin > MAX_IN) FATAL("%s: a job sums 1..%d inputs, not %d", who, MAX_IN, j->nin);
            if (nin_used + j->nin > MAX_IN) break;
            check_range(ci, j, who);
            if (needs_out) check_range(co, j, who);
            DJob& d = L.job[L.njobs];
            d.y = j->y;
            d.sp = span_of(j, who);
            d.stream = j->stream;
            d.st = j->st;
            d.in_first = nin_used;
            d.nin = j->nin;
            if (out == OUT_RECOMP) {
                d.oscale = (co.hdr && j->e0 == 0) ? j->out.scale : nullptr;
                d.oexps = co.gb ? j->out.exps : nullptr;
                d.ocodes = j->out.codes;
                if (co.hdr && j->e0 == 0 && !d.oscale) FATAL("%s: the range at element 0 needs out.scale", who);
                if (d.sp.u1 > d.sp.u0 && (!d.ocodes || (co.gb && !d.oexps))) FATAL("%s: recompress job without output pointers", who);
            }
            if ((out == OUT_AMAX || out == OUT_RECOMP) && !d.st && needs_amax_pass(co))
                FATAL("%s: current chunk scaling needs job.st (the amax slot)", who);
            if ((out == OUT_F32 || out == OUT_BF16) && !d.y && d.sp.u1 > d.sp.u0) FATAL("%s: job without an output pointer", who);
            for (int i = 0; i < j->nin; i++) {
                L.in[nin_used + i].scale = ci.hdr ? j->in[i].scale : nullptr;
                L.in[nin_used + i].exps = ci.gb ? j->in[i].exps : nullptr;
                L.in[nin_used + i].codes = j->in[i].codes;
                if (d.sp.u1 > d.sp.u0 && (!j->in[i].codes || (ci.gb && !j->in[i].exps) || (ci.hdr && !j->in[i].scale)))
                    FATAL("%s: input %d of a job lacks a wire pointer", who, i);
            }
            nin_used += j->nin;
            if (d.sp.u1 - d.sp.u0 > max_units) max_units = d.sp.u1 - d.sp.u0;
            L.njobs++;
            first++;
        }
        const void* k = decompress_kernel(out, co);
        const dim3 grid = grid_for(k, max_units, L.njobs);
        LAUNCH(((DKernel)k), grid, THREADS, s, ci, co, init, L);
        CUDA_CHECK_LAUNCH("k_decompress");
    }
}

/* the three parts of a whole chunk in the standard wire (methods.h) */
static CompressWireOut wire_out(const CompressWireLayout& l, uint8_t* out, size_t n) {
    CompressWireOut w;
    w.scale = l.hdr ? out : nullptr;
    w.exps = l.gbytes ? out + l.hdr : nullptr;
    w.codes = out + compress_wire_codes_offset(&l, n);
    return w;
}
static CompressWireIn wire_in(const CompressWireLayout& l, const uint8_t* in, size_t n) {
    CompressWireIn w;
    w.scale = l.hdr ? in : nullptr;
    w.exps = l.gbytes ? in + l.hdr : nullptr;
    w.codes = in + compress_wire_codes_offset(&l, n);
    return w;
}

/* ---- statistics ----------------------------------------------------------- */

CompressStatsDev* compress_stats_dev_alloc(int count) {
    if (count < 1) count = 1;
    CompressStatsDev* st = nullptr;
    CUDA_CHECK(cudaMalloc((void**)&st, sizeof(CompressStatsDev) * (size_t)count));
    CUDA_CHECK(cudaMemset(st, 0, sizeof(CompressStatsDev) * (size_t)count));
    return st;
}

void compress_stats_dev_free(CompressStatsDev* st) {
    if (st) CUDA_CHECK(cudaFree(st));
}

void compress_stats_dev_reset(CompressStatsDev* st, int count, cudaStream_t s) {
    if (st && count > 0) CUDA_CHECK(cudaMemsetAsync(st, 0, sizeof(CompressStatsDev) * (size_t)count, s));
}

CompressStats compress_stats_dev_read(const CompressStatsDev* st, int count, CompressStats* host, cudaStream_t s) {
    CompressStats r = {0, 0, 0.0f};
    if (st && count > 0) {
        CompressStatsDev* h = (CompressStatsDev*)mallocCheck(sizeof(CompressStatsDev) * (size_t)count);
        CUDA_CHECK(cudaMemcpyAsync(h, st, sizeof(CompressStatsDev) * (size_t)count, cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < count; i++) {
            r.saturated += h[i].saturated;
            r.nonfinite += h[i].nonfinite;
            float a;
            memcpy(&a, &h[i].amax_bits, sizeof(a));
            if (a > r.amax) r.amax = a;
        }
        free(h);
    }
    if (host) *host = r;
    return r;
}

/* one scratch stats struct (the amax slot when the caller passes st == NULL)
 * and one fp32 buffer for unfused sums; see the header on threads */
static CompressStatsDev* scratch_stats(void) {
    static CompressStatsDev* st = nullptr;
    if (!st) st = compress_stats_dev_alloc(1);
    return st;
}
static float* scratch_f32(size_t n) {
    static float* buf = nullptr;
    static size_t cap = 0;
    if (n > cap) {
        /* no queued kernel may still use the old buffer */
        CUDA_CHECK(cudaDeviceSynchronize());
        if (buf) CUDA_CHECK(cudaFree(buf));
        cap = n + n / 4 + 1024;
        CUDA_CHECK(cudaMalloc((void**)&buf, cap * sizeof(float)));
    }
    return buf;
}

/* ---- whole chunks ---------------------------------------------------------- */

size_t compress_dev(const CompressParams* p, const void* x, int x_is_bf16, size_t n, uint64_t stream, uint8_t* out,
                    CompressStatsDev* st, cudaStream_t s) {
    const CompressWireLayout l = compress_wire_layout(p);
    const int two = compress_dev_two_pass(p);
    CompressJobDev j;
    memset(&j, 0, sizeof(j));
    j.n = n;
    j.e0 = 0;
    j.e1 = n;
    j.x = x;
    j.out = wire_out(l, out, n);
    j.stream = stream;
    j.st = st ? st : (two ? scratch_stats() : nullptr);
    if (two) {
        CUDA_CHECK(cudaMemsetAsync(&j.st->scale_amax_bits, 0, sizeof(unsigned), s));
        compress_jobs_amax_dev(p, x_is_bf16, &j, 1, s);
    }
    compress_jobs_encode_dev(p, x_is_bf16, &j, 1, s);
    return compress_bound(p, n);
}

void decompress_dev(const CompressParams* p, const uint8_t* in, size_t n, void* out, int out_is_bf16, cudaStream_t s) {
    const CompressWireLayout l = compress_wire_layout(p);
    CompressJobDev j;
    memset(&j, 0, sizeof(j));
    j.n = n;
    j.e0 = 0;
    j.e1 = n;
    j.y = out;
    j.nin = 1;
    j.in[0] = wire_in(l, in, n);
    decompress_jobs_dev(p, &j, 1, out_is_bf16 ? CDEV_DECODE_BF16 : CDEV_DECODE_F32, nullptr, s);
}

static void reduce_job(const CompressParams* p, const uint8_t* const* chunks, int P, size_t n, CompressJobDev* j,
                       const char* who) {
    if (P < 1 || P > COMPRESS_DEV_MAX_IN) FATAL("%s: P = %d copies; 1..%d are supported", who, P, COMPRESS_DEV_MAX_IN);
    const CompressWireLayout l = compress_wire_layout(p);
    memset(j, 0, sizeof(*j));
    j->n = n;
    j->e0 = 0;
    j->e1 = n;
    j->nin = P;
    for (int i = 0; i < P; i++) j->in[i] = wire_in(l, chunks[i], n);
}

void decompress_reduce_dev(const CompressParams* p, const uint8_t* const* chunks, int P, size_t n, void* out,
                           CompressDevSum kind, cudaStream_t s) {
    CompressJobDev j;
    reduce_job(p, chunks, P, n, &j, "decompress_reduce_dev");
    j.y = out;
    const CompressDevMode m = kind == CDEV_SUM_BF16 ? CDEV_REDUCE_BF16 : kind == CDEV_SUM_F32_ADD ? CDEV_REDUCE_F32_ADD : CDEV_REDUCE_F32;
    decompress_jobs_dev(p, &j, 1, m, nullptr, s);
}

size_t decompress_reduce_recompress_dev(const CompressParams* p_in, const uint8_t* const* chunks, int P, size_t n,
                                        const CompressParams* p_out, uint64_t stream, uint8_t* out,
                                        CompressStatsDev* st, cudaStream_t s) {
    if (!compress_dev_can_fuse(p_in, p_out)) {
        float* sum = scratch_f32(n ? n : 1);
        decompress_reduce_dev(p_in, chunks, P, n, sum, CDEV_SUM_F32, s);
        return compress_dev(p_out, sum, 0, n, stream, out, st, s);
    }
    const int two = compress_dev_two_pass(p_out);
    CompressJobDev j;
    reduce_job(p_in, chunks, P, n, &j, "decompress_reduce_recompress_dev");
    j.out = wire_out(compress_wire_layout(p_out), out, n);
    j.stream = stream;
    j.st = st ? st : (two ? scratch_stats() : nullptr);
    if (two) {
        CUDA_CHECK(cudaMemsetAsync(&j.st->scale_amax_bits, 0, sizeof(unsigned), s));
        decompress_jobs_dev(p_in, &j, 1, CDEV_REDUCE_AMAX, p_out, s);
    }
    decompress_jobs_dev(p_in, &j, 1, CDEV_REDUCE_RECOMPRESS, p_out, s);
    return compress_bound(p_out, n);
}

/* ---- self-checks ------------------------------------------------------------ */

unsigned long long compress_dev_selftest_fp8(Fp8Format f, uint32_t* first_bad) {
    unsigned long long* d_bad = nullptr;
    unsigned* d_first = nullptr;
    CUDA_CHECK(cudaMalloc((void**)&d_bad, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMalloc((void**)&d_first, sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(d_bad, 0, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(d_first, 0xFF, sizeof(unsigned)));
    const unsigned blocks = (unsigned)num_sms() * 8u;
    for (u64 base = 0; base < (1ull << 32); base += (1ull << 30)) {
        if (f == FP8_E4M3) LAUNCH(k_check_fp8_hw<FP8_E4M3>, blocks, 256, 0, base, d_bad, d_first);
        else LAUNCH(k_check_fp8_hw<FP8_E5M2>, blocks, 256, 0, base, d_bad, d_first);
        CUDA_CHECK_LAUNCH("k_check_fp8_hw");
    }
    unsigned long long bad = 0;
    unsigned first = 0;
    CUDA_CHECK(cudaMemcpy(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&first, d_first, sizeof(first), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d_bad));
    CUDA_CHECK(cudaFree(d_first));
    if (first_bad) *first_bad = first;
    return bad;
}

unsigned long long compress_dev_selftest_philox(uint64_t seed, uint64_t stream, size_t n, uint32_t* words_host) {
    unsigned* d_words = nullptr;
    unsigned long long* d_bad = nullptr;
    CUDA_CHECK(cudaMalloc((void**)&d_words, sizeof(unsigned) * (n ? n : 1)));
    CUDA_CHECK(cudaMalloc((void**)&d_bad, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(d_bad, 0, sizeof(unsigned long long)));
    LAUNCH(k_check_philox, 64, 256, 0, seed, stream, n, d_words, d_bad);
    CUDA_CHECK_LAUNCH("k_check_philox");
    unsigned long long bad = 0;
    CUDA_CHECK(cudaMemcpy(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost));
    if (words_host && n) CUDA_CHECK(cudaMemcpy(words_host, d_words, sizeof(unsigned) * n, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d_words));
    CUDA_CHECK(cudaFree(d_bad));
    return bad;
}
