/*
 * compress/taco.h - the FP8 group pipeline (internal to compress/).
 *
 * TACO's four steps with every step switchable. The two FP8 baselines
 * (fp8_tensor, fp8_group) are the same pipeline with its switches fixed:
 * which switches each method runs with is its row in methods.h.
 *
 * The wire layout is methods.h's too; taco_encode only fills the three
 * parts compress.c hands it. See taco.c for the exact arithmetic.
 */
#ifndef TACO_H
#define TACO_H

#include <stddef.h>
#include <stdint.h>

#include "compress/compress.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TACO_GROUP_MAX 256 /* largest G: the per-group scratch lives on the stack */
#define TACO_EXP_MIN (-126) /* power-of-two exponents stay here so that both 2^e */
#define TACO_EXP_MAX 126    /* and 2^-e are normal floats; wire byte = e + 127 */

typedef struct {
    Fp8Format format;
    int G;              /* group length: unit of the exponent and the Hadamard */
    int hadamard;       /* rotate every full group with the orthonormal Hadamard */
    int adaptive;       /* per-group power-of-two exponent */
    int dual;           /* second power-of-two scale, after the transform */
    size_t tile;        /* elements per second scale: a tile of the chunk, or 0 = one for the whole chunk */
    int stochastic;     /* 1 = stochastic rounding with Philox words */
    uint64_t seed;
    float delayed_amax; /* > 0 and finite: the chunk scale comes from it, else from the current amax */
} TacoCfg;

/* Largest k in [TACO_EXP_MIN, TACO_EXP_MAX] with amax * 2^k <= limit; 0 for
 * amax == 0, TACO_EXP_MIN for amax == inf. Exact (frexpf + one comparison). */
int taco_pow2_fit(float amax, float limit);

/* Encode n values. scales receives the second scale of every tile (ceil(n /
 * tile) floats; one when tile is 0; 1.0f when dual is off), as fp32 bytes
 * (little-endian); exps (ceil(n/G) bytes) the group exponents; exps may be
 * NULL only when adaptive is off (every exponent is then 0). st (not NULL) is
 * overwritten; st->amax is the amax of the values the second scale applies to. */
void taco_encode(const TacoCfg* c, const float* x, size_t n, uint64_t stream, uint8_t* scales, uint8_t* exps,
                 uint8_t* codes, CompressStats* st);

/* One compressed copy of a chunk as taco_decode_sum reads it: its scales
 * (taco_encode's bytes; NULL: 1.0f), its group exponent bytes (NULL: all 0)
 * and its codes. */
typedef struct {
    const uint8_t* scales;
    const uint8_t* exps;
    const uint8_t* codes;
} TacoWireIn;

/* out[0..n) = the sum of the P copies' decoded values, formed as taco.c's
 * header says (rotated copies summed before one inverse transform, the
 * others added after, each in order). P = 1 is a plain decode. */
void taco_decode_sum(const TacoCfg* c, const TacoWireIn* in, int P, size_t n, float* out);
/* The same sum, left in the rotated domain where it can stay: a group whose
 * P copies all came rotated gets out = R, their rotated-domain sum (no
 * inverse transform), or all NaN where R is not finite (what the inverse
 * transform of an overflowed R would be, as far as the encoder can tell);
 * every other group gets taco_decode_sum's values. Encoding out with the Hadamard switched off is the fused
 * recompress (compress.c's decompress_sum_recompress; taco.c's header). */
void taco_decode_sum_rotated(const TacoCfg* c, const TacoWireIn* in, int P, size_t n, float* out);

#ifdef __cplusplus
}
#endif
#endif /* TACO_H */
