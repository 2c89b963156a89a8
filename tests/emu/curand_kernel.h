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
#endif
