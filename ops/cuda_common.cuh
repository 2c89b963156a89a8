/*
 * ops/cuda_common.cuh - shared pieces of the CUDA backend (the ops/..._cuda.cu
 * files; also included by comm/ and model/ kernels that want the checked
 * calls and the stream).
 *
 * The backend, one file per op family (ops/CUDA.md has the table):
 *   device_cuda.cu        ops_init, the stream, scratch, memory, fp32 <-> bf16
 *   elementwise_cuda.cu   residual, GELU
 *   encoder_cuda.cu       token and position embeddings
 *   bias_cuda.cu          bias, and the deterministic column sums
 *   layernorm_cuda.cu     layernorm and RMSNorm (kernels in layernorm_kernels.cuh,
 *                         the deferred finish of their dw / db in colsum_deferred.cuh)
 *   rope_cuda.cu          rotate-half RoPE
 *   swiglu_cuda.cu        SwiGLU
 *   crossentropy_cuda.cu  vocab-parallel cross-entropy
 *   adamw_cuda.cu         AdamW
 *   reduce_cuda.cu        ops_sumsq / ops_sum / ops_all_finite
 *   matmul_cuda.cu        matmuls on cuBLASLt
 *   attention_cuda.cu     flash-style attention, grouped-query too (kernels in
 *                         attention_kernels.cuh)
 *
 * What lives here: the checked-call macros for CUDA (every runtime call and
 * every kernel launch goes through them and ends in check_fatal with what
 * failed and where), bf16 helpers (16-byte vector loads/stores of 8 bf16, as
 * floats or packed in 4 words; round-to-nearest conversion), block/warp
 * reductions with a FIXED order (so every reduction in the backend is
 * bit-reproducible run to run), the launch helpers of the element-wise and
 * row-chunk kernels, and the backend-internal API the .cu files share: the
 * one stream, scratch buffers, the matmul init hook and the second stage of
 * the column sums.
 *
 * Numerics: activations and working weights are bf16; all arithmetic is
 * fp32; parameter gradients, master weights and optimizer moments are fp32.
 * Conventions of ops.h hold: activation gradients are overwritten except
 * layernorm_backward's dinp (accumulates); parameter gradients accumulate.
 * Determinism: no float atomics anywhere; every reduction that crosses rows
 * runs in an order that depends only on the shapes, never on timing or on
 * the device's SM count, so two identical runs are bit-identical.
 *
 * floatX in ops.h is uint16_t (bf16 bit pattern) under -DOPS_BF16; inside the
 * .cu files we reinterpret those pointers as __nv_bfloat16, which has the same
 * size and bit layout.
 */
#ifndef CUDA_COMMON_CUH
#define CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "common/check.h"
#include "common/cuda_check.h"
#include "ops/ops.h"

#ifndef OPS_BF16
#error "the CUDA backend is built with -DOPS_BF16 (floatX = bf16 bit patterns)"
#endif

typedef __nv_bfloat16 bf16;

/* ---- backend-internal API (defined in device_cuda.cu) ------------------------ */
cudaStream_t cuda_stream(void);            /* the one stream; fatal if ops_init was not called */
int cuda_num_sms(void);
/* Scratch device memory owned by the backend, one buffer per slot, grown on
 * demand (never shrunk). Each op uses its own slot so that a buffer is never
 * shared between two ops of one step. Contents are undefined on return. */
enum ScratchSlot {
    SCRATCH_LN_PARTIAL = 0,  /* layernorm_backward: per-block dw/db partial sums (and the next slot: */
    SCRATCH_LN_PARTIAL2,     /*   the C <= 1024 launches alternate, colsum_deferred.cuh) */
    SCRATCH_COLSUM,          /* bias_backward: per-row-chunk partial column sums */
    SCRATCH_ATTN_D,          /* attention_backward: D = rowsum(dout * out) */
    SCRATCH_REDUCE,          /* the reductions of reduce_cuda.cu */
    SCRATCH_ROPE,            /* rope_forward / rope_backward: the cos / sin table */
    SCRATCH_NSLOTS
};
void* cuda_scratch(int slot, size_t bytes);
/* host-pinned staging, also per slot (the reductions' results for the host) */
void* cuda_pinned(int slot, size_t bytes);

void matmul_cuda_init(void);   /* matmul_cuda.cu: cuBLASLt handle + workspace */
void attention_cuda_init(void); /* attention_cuda.cu: whether the hs = 64 kernels use wgmma */

/* bias_cuda.cu: dst[c] += sum_{p < nparts} partial[p*pstride + c], p ascending,
 * for c < C: the second stage of the deterministic column sums of
 * bias_backward and of layernorm_backward's rows wider than 1024. */
void colsum_finish(float* dst, const float* partial, int nparts, int C, size_t pstride);

/* ---- launch helpers ------------------------------------------------------------ */
static inline unsigned int ceil_div_u(size_t a, size_t b) { return (unsigned int)((a + b - 1) / b); }
static inline int is_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

/* Flat element-wise kernels: thread i owns elements [8i, 8i+8) of n. VEC: all
 * pointers 16-byte aligned, so full chunks are single 16-byte accesses; the
 * last partial chunk (n % 8) always goes element by element. EW_THREADS is
 * also the block size of the row-chunk kernels and of AdamW. */
#define EW_THREADS 256

static inline unsigned int ew_blocks(size_t n) { return ceil_div_u(ceil_div_u(n, 8), EW_THREADS); }

/* Row-chunk kernels: rows of C bf16, one thread per 8-column chunk (ld8/st8
 * below). VEC needs C % 8 == 0 and aligned base pointers (then every row
 * start is aligned). */
static inline bool rows_vec_ok(int C) { return C % 8 == 0; }

/* ---- bf16 vector helpers ------------------------------------------------------- */
/* 8 bf16 = 16 bytes: the unit of every vectorised load/store in the backend. */
struct alignas(16) bf16x8 {
    __nv_bfloat162 h[4];
};

__device__ __forceinline__ void unpack8(const bf16x8& v, float (&f)[8]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(v.h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}
__device__ __forceinline__ bf16x8 pack8(const float (&f)[8]) {
    bf16x8 v;
#pragma unroll
    for (int i = 0; i < 4; i++) v.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return v;
}
/* exp(x) = 2^(x LOG2E): the kernels take their exponentials as fast_exp2 of a scaled argument */
#define LOG2E 1.4426950408889634f
#ifndef CUDA_EMU /* the emulator's exp2f stands in (tests/emu/emu_cuda.h) */
/* 2^x on the SFU (ex2.approx, ~2 ulp; 2^-inf = 0; inputs below -126 flush to 0) */
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
#endif
/* 16-byte load of 8 bf16 converted to fp32; p must be 16-byte aligned. */
__device__ __forceinline__ void load8(float (&f)[8], const bf16* p) {
    bf16x8 v = *reinterpret_cast<const bf16x8*>(p);
    unpack8(v, f);
}
__device__ __forceinline__ void store8(bf16* p, const float (&f)[8]) {
    *reinterpret_cast<bf16x8*>(p) = pack8(f);
}
/* 8 bf16 of a row from column c, kept packed (4 registers instead of 8):
 * for kernels that hold a row between two passes. Columns past C read 0. */
template <bool VEC>
__device__ __forceinline__ bf16x8 ldpack8(const bf16* row, int c, int C) {
    if constexpr (VEC) {
        return *reinterpret_cast<const bf16x8*>(row + c);
    } else {
        float f[8];
#pragma unroll
        for (int i = 0; i < 8; i++) f[i] = (c + i < C) ? __bfloat162float(row[c + i]) : 0.0f;
        return pack8(f);
    }
}

/* ---- deterministic reductions -------------------------------------------------- */
/* Butterfly (xor) shuffles: every lane ends with the same value, and the
 * order of additions is fixed by the lane pattern, so results never vary. */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide sum/max for blockDim.x a multiple of 32 (<= 1024): warp
 * butterflies, then warp 0 combines the per-warp values in warp order. All
 * threads get the result. `buf` is __shared__ float[32]. */
__device__ __forceinline__ float block_sum(float v, float* buf) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* buf may still be read from a previous call */
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    float t = lane < nw ? buf[lane] : 0.0f;
    return warp_sum(t);
}
__device__ __forceinline__ float block_max(float v, float* buf) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    float t = lane < nw ? buf[lane] : -INFINITY;
    return warp_max(t);
}
__device__ __forceinline__ double block_sum_d(double v, double* buf) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    double t = lane < nw ? buf[lane] : 0.0;
    return warp_sum_d(t);
}

/* Row helpers used by kernels that walk a row of C bf16 in chunks of 8:
 * VEC = true when C % 8 == 0 and every row pointer is 16-byte aligned (the
 * caller checks on the host), so a chunk is one 16-byte access; otherwise the
 * same code runs with scalar, bounds-checked accesses (tiny test configs).
 * Elements past C read as 0 and are not written. */
template <bool VEC>
__device__ __forceinline__ void ld8(float (&f)[8], const bf16* row, int c, int C) {
    if (VEC) {
        load8(f, row + c);
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) f[i] = (c + i < C) ? __bfloat162float(row[c + i]) : 0.0f;
    }
}
template <bool VEC>
__device__ __forceinline__ void st8(bf16* row, int c, int C, const float (&f)[8]) {
    if (VEC) {
        store8(row + c, f);
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (c + i < C) row[c + i] = __float2bfloat16_rn(f[i]);
    }
}

/* The same 8 bf16 as 4 raw 32-bit words (element 2i is the low half of word
 * i), for the norm kernels that keep rows, w and b packed in registers across
 * a loop over rows and unpack them only where they are used. */
__device__ __forceinline__ void unpack_u4(const uint4& u, float (&f)[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) { /* a bf16 is the top half of its fp32 */
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
/* fp32 -> 8 bf16 in 4 words, round to nearest even */
__device__ __forceinline__ uint4 pack_u4(const float (&f)[8]) {
    const bf16x8 v = pack8(f);
    uint4 u;
    memcpy(&u, &v, sizeof u);
    return u;
}
/* Left to itself the compiler hoists the loop-invariant unpacking of w and b
 * out of a row loop (8 floats per 4 registers) and keeps a row's unpacked
 * floats live between two passes: it took a norm kernel from the 80
 * registers planned to 147. opaque_u4 tells it the words may have changed (an
 * empty asm, no instruction), so the unpacking stays at the use. */
__device__ __forceinline__ void opaque_u4(uint4& u) {
#ifndef CUDA_EMU
    asm volatile("" : "+r"(u.x), "+r"(u.y), "+r"(u.z), "+r"(u.w));
#else
    (void)u;
#endif
}
/* 8 bf16 of a row from column c as 4 words; columns past C read 0 */
template <bool VEC>
__device__ __forceinline__ uint4 ldu4(const bf16* row, int c, int C) {
    if constexpr (VEC) {
        return *reinterpret_cast<const uint4*>(row + c);
    } else {
        const bf16x8 v = ldpack8<false>(row, c, C);
        uint4 u;
        memcpy(&u, &v, sizeof u);
        return u;
    }
}
/* the same through the streaming cache hint (ld.global.cs: evict first), for
 * rows that no later kernel reads soon */
template <bool VEC>
__device__ __forceinline__ uint4 ldu4_cs(const bf16* row, int c, int C) {
    if constexpr (VEC) {
        return __ldcs(reinterpret_cast<const uint4*>(row + c));
    } else {
        return ldu4<false>(row, c, C);
    }
}
/* 4 words of 8 bf16 stored at column c of a row; columns past C not written */
template <bool VEC>
__device__ __forceinline__ void stu4(bf16* row, int c, int C, const uint4& u) {
    if constexpr (VEC) {
        *reinterpret_cast<uint4*>(row + c) = u;
    } else {
        float f[8];
        unpack_u4(u, f);
        st8<false>(row, c, C, f);
    }
}

#endif /* CUDA_COMMON_CUH */
