/*
 * compress/rng.h - counter-based random numbers (Philox4x32-10) for
 * stochastic rounding.
 *
 * A counter-based generator is a keyed hash of a counter: the random word for
 * element i depends only on (seed, stream, i), never on how many words were
 * drawn before. So stochastic rounding is reproducible from the seed and any
 * number of threads (or GPU lanes) can compute their own words independently.
 *
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11) is the generator behind cuRAND's curand_init/curand for
 * curandStatePhilox4_32_10_t, so the GPU kernels can use cuRAND and get the
 * same words. The mapping, identical to cuRAND's
 * curand_init(seed, subsequence = stream, offset = i, &st); curand(&st):
 *
 *   key     = { lo32(seed), hi32(seed) }
 *   counter = { lo32(i / 4), hi32(i / 4), lo32(stream), hi32(stream) }
 *   word(seed, stream, i) = Philox4x32_10(counter, key)[i % 4]
 *
 * One Philox call yields four words, so callers walking i in order should
 * use rng_philox_block once per four elements (see rng_u32 for the index).
 * Verified against Random123's known-answer vectors in tests/test_compress.c.
 *
 * Stochastic rounding draws 8 random bits per element, not a whole word:
 * element i takes byte i % 4 of word i / 4 (rng_sr_word), so one Philox call
 * serves 16 elements. 8 bits set P(round up) to the nearest 1/256, far
 * finer than the rounding noise itself, and keep SR close to the cost of
 * round-to-nearest on the GPU (compress/README.md, "SR").
 */
#ifndef RNG_H
#define RNG_H

#include <stdint.h>

#define RNG_PHILOX_M0 0xD2511F53u /* round multipliers */
#define RNG_PHILOX_M1 0xCD9E8D57u
#define RNG_PHILOX_W0 0x9E3779B9u /* key increments (golden ratio, sqrt(3)-1) */
#define RNG_PHILOX_W1 0xBB67AE85u

/* The bare bijection: 10 rounds of Philox4x32 on ctr under key. */
static inline void rng_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) { /* the key is bumped between rounds */
            k0 += RNG_PHILOX_W0;
            k1 += RNG_PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)RNG_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)RNG_PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The four words of block b = i / 4 of (seed, stream). */
static inline void rng_philox_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    rng_philox4x32_10(ctr, key, out);
}

/* The random word of element i of (seed, stream). */
static inline uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t i) {
    uint32_t w[4];
    rng_philox_block(seed, stream, i >> 2, w);
    return w[i & 3];
}

/* Walks i = 0, 1, 2, ... (or any increasing order) calling Philox once per
 * block of four. Same words as rng_u32, a quarter of the work. */
typedef struct {
    uint64_t seed, stream, block;
    int valid;
    uint32_t w[4];
} RngCursor;

static inline void rng_cursor_init(RngCursor* c, uint64_t seed, uint64_t stream) {
    c->seed = seed;
    c->stream = stream;
    c->block = 0;
    c->valid = 0;
}

static inline uint32_t rng_cursor_u32(RngCursor* c, uint64_t i) {
    if (!c->valid || c->block != (i >> 2)) {
        c->block = i >> 2;
        rng_philox_block(c->seed, c->stream, c->block, c->w);
        c->valid = 1;
    }
    return c->w[i & 3];
}

/* The stochastic-rounding word of element i: r * 2^24 + 2^23, with r the
 * random byte i % 4 of word i / 4. With fp8_encode_sr's rule (up iff
 * F + rnd >= 2^32, F the first 32 dropped bits) it rounds up iff
 * floor(R * 512) + 2r + 1 >= 512 for the dropped fraction R: P(up) is R
 * rounded to the nearest multiple of 1/256 (a tie, R = (2j+1)/512, to the
 * larger), so |P(up) - R| <= 1/512, and an exact value
 * (F = 0) never moves, as rnd < 2^32 - 2^23. Only the first 9 dropped bits
 * matter, which is what lets a GPU round with one integer add. */
static inline uint32_t rng_sr_word(RngCursor* c, uint64_t i) {
    const uint32_t w = rng_cursor_u32(c, i >> 2);
    return (((w >> (8u * (unsigned)(i & 3u))) & 0xFFu) << 24) | 0x800000u;
}

#endif /* RNG_H */
