/*
 * compress/cuda_bfly.cuh - the Hadamard's butterflies on a thread's 64
 * values (stages h = 1 .. 32, on every sub-block or on those that rotate)
 * and one stage across the lanes of a group (G = 128, 256). Unnormalised, in the CPU's
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
 * no conditions, so the compiler keeps every value in its register) */
__device__ __forceinline__ void bfly_local_all(float (&v)[UNIT], int G) {
    const bool all[SB] = {true, true, true, true};
    bfly_stage16<1>(v, all);
    bfly_stage16<2>(v, all);
    bfly_stage16<4>(v, all);
    bfly_stage16<8>(v, all);
    if (G >= 32) {
        bfly_block<16>(v, 0);
        bfly_block<16>(v, 32);
    }
    if (G >= 64) bfly_block<32>(v, 0);
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
