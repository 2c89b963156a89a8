/*
 * tests/emu/curand_kernel.h - stands in for cuRAND's device header under the
 * CPU emulator (tests/emu/emu_cuda.h; this directory is first on the include
 * path of an emulated build): the part of Philox4x32-10 the compression
 * kernels use, on the CPU - the generator of compress/rng.h (checked against
 * Random123's known answers), with cuRAND's interface. The GPU test checks
 * the real curand_init + curand against the kernels' words.
 */
#ifndef EMU_CURAND_KERNEL_H
#define EMU_CURAND_KERNEL_H
#include "tests/emu/emu_cuda.h"
#include "compress/rng.h"

static inline uint4 curand_Philox4x32_10(uint4 c, uint2 k) {
    const uint32_t ctr[4] = {c.x, c.y, c.z, c.w}, key[2] = {k.x, k.y};
    uint32_t o[4];
    rng_philox4x32_10(ctr, key, o);
    return make_uint4(o[0], o[1], o[2], o[3]);
}
typedef struct {
    unsigned long long seed, subsequence, offset;
} curandStatePhilox4_32_10_t;
static inline void curand_init(unsigned long long seed, unsigned long long subsequence, unsigned long long offset,
                               curandStatePhilox4_32_10_t* st) {
    st->seed = seed;
    st->subsequence = subsequence;
    st->offset = offset;
}
static inline unsigned curand(curandStatePhilox4_32_10_t* st) { return rng_u32(st->seed, st->subsequence, st->offset++); }
static inline uint4 curand4(curandStatePhilox4_32_10_t* st) {
    const unsigned a = curand(st), b = curand(st), c = curand(st), d = curand(st);
    return make_uint4(a, b, c, d);
}
/* curand_normal.h's _curand_box_muller, its host branch */
static inline float2 emu_box_muller(unsigned x, unsigned y) {
    const float inv = 2.3283064e-10f, inv_2pi = 2.3283064e-10f * 6.2831855f;
    const float u = x * inv + inv / 2, v = y * inv_2pi + inv_2pi / 2, s = sqrtf(-2.0f * logf(u));
    return make_float2(sinf(v) * s, cosf(v) * s);
}
static inline float4 curand_normal4(curandStatePhilox4_32_10_t* st) {
    const uint4 x = curand4(st);
    const float2 a = emu_box_muller(x.x, x.y), b = emu_box_muller(x.z, x.w);
    return make_float4(a.x, a.y, b.x, b.y);
}
#endif
