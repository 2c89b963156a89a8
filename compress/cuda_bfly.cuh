/*
 * compress/cuda_bfly.cuh - the Hadamard's butterflies on a thread's 64
 * values (stages h = 1 .. 32, on every sub-block or on those that rotate),
 * one stage across the lanes of a group (G = 128, 256), and G = 64's last
 * stage fused with the multiply that follows it. Unnormalised, in the CPU's
 * stage order (compress/hadamard.c); cuda_codec.cuh's butterflies() puts
 * them together for a Codec.
 */
#ifndef COMPRESS_CUDA_BFLY_CUH
#define COMPRESS_CUDA_BFLY_CUH

#include <cuda_runtime.h>

#include "compress/cuda_device.cuh"

namespace {

/* stage h on the pairs of elements [j0, j0 + 2h) */
template <int H>
__device__ __forceinline__ void bfly_block(float (&v)[UNIT], int j0) {
#pragma unroll
    for (int j = 0; j < 2 * H; j++) {
        if (j & H) continue;
        const float a = v[j0 + j], b = v[j0 + j + H];
        v[j0 + j] = __fadd_rn(a, b);
        v[j0 + j + H] = __fsub_rn(a, b);
    }
}
template <int H>
__device__ __forceinline__ void bfly_stage16(float (&v)[UNIT], const bool (&rot)[SB]) {
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        if (!rot[sb]) continue;
#pragma unroll
        for (int j0 = 16 * sb; j0 < 16 * sb + 16; j0 += 2 * H) bfly_block<H>(v, j0);
    }
}

/* the stages inside the thread's 64 elements on every group (the common case:
 * no conditions, so the compiler keeps every value in its register), up to
 * stage h = 16 (G = 64's last stage left to the caller) or all of them */
__device__ __forceinline__ void bfly_local_to16(float (&v)[UNIT], int G) {
    const bool all[SB] = {true, true, true, true};
    bfly_stage16<1>(v, all);
    bfly_stage16<2>(v, all);
    bfly_stage16<4>(v, all);
    bfly_stage16<8>(v, all);
    if (G >= 32) {
        bfly_block<16>(v, 0);
        bfly_block<16>(v, 32);
    }
}
__device__ __forceinline__ void bfly_local_all(float (&v)[UNIT], int G) {
    bfly_local_to16(v, G);
    if (G >= 64) bfly_block<32>(v, 0);
}
/* G = 64's last stage and the multiply by C after it, in one: (a + b) C and
 * (a - b) C as fma(a, C, b C) and fma(a, C, -(b C)), three instructions a
 * pair where the stage and the multiply took four. The same bits when C is
 * a normal power of two and every value is a multiple of 2^g with g + log2 C
 * >= -149: then b C is exact, and each fma rounds the exact (a +- b) C once;
 * in the normal range that is the rounding of a +- b scaled by C (scaling
 * by a power of two commutes with rounding there), and below it the sum
 * needs fewer than 24 bits, so both are exact. */
__device__ __forceinline__ void bfly_last_scaled(float (&v)[UNIT], float C) {
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const float a = v[j], bc = __fmul_rn(v[j + 32], C);
        v[j] = __fmaf_rn(a, C, bc);
        v[j + 32] = __fmaf_rn(a, C, -bc);
    }
}
/* the same on the groups with rot[sb] set (a group with a NaN / inf, or a
 * chunk's short tail group, is sent unrotated) */
__device__ __forceinline__ void bfly_local_some(float (&v)[UNIT], int G, const bool (&rot)[SB]) {
    bfly_stage16<1>(v, rot);
    bfly_stage16<2>(v, rot);
    bfly_stage16<4>(v, rot);
    bfly_stage16<8>(v, rot);
    if (G >= 32) {
        if (rot[0]) bfly_block<16>(v, 0);
        if (rot[2]) bfly_block<16>(v, 32);
    }
    if (G >= 64 && rot[0]) bfly_block<32>(v, 0);
}

/* one stage across the lanes of a group (lane mask m), see butterflies */
__device__ __forceinline__ void bfly_lanes(float (&v)[UNIT], int m, bool rot, int lane) {
    const float sgn = (lane & m) ? -1.0f : 1.0f;
#pragma unroll
    for (int j = 0; j < UNIT; j++) {
        const float q = __shfl_xor_sync(FULL, v[j], m);
        if (rot) v[j] = __fmaf_rn(v[j], sgn, q);
    }
}

} /* namespace */

#endif /* COMPRESS_CUDA_BFLY_CUH */
