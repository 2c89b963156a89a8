/*
 * compress/compress.h - the compressors behind every tensor-parallel exchange.
 *
 * One interface for the exact path ("none"), the bare FP8 cast, the baselines
 * and TACO (adaptive scale + Hadamard + dual-scale FP8), so comm/ never knows
 * which one runs. A chunk of n fp32 values becomes compress_bound(p, n) bytes
 * on the wire (a function of p and n only, so a receiver knows the size) and
 * decodes back to n floats. This file is a contract with comm/: keep the
 * names and their meanings. What each method is (name, wire layout, code
 * path): the table in compress/methods.h, which also gives the wire layout
 * and the list of names for configs. Wire formats and error bounds:
 * compress/README.md.
 *
 * Everything is defined to the bit so the CUDA kernels can be checked against
 * this CPU reference: power-of-two scales (exact multiplies), one explicit
 * rounding per step, IEEE division, no contraction (build with
 * -ffp-contract=off), no flushing of subnormals.
 */
#ifndef COMPRESS_H
#define COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "compress/fp8.h" /* typedef enum { FP8_E4M3, FP8_E5M2 } Fp8Format; and the codecs */

#ifdef __cplusplus
extern "C" {
#endif

/* One row per method in methods.h, in this order. CM_BF16 is the exact
 * path's wire on the GPU: activations are bf16 there, so a bf16 wire loses
 * nothing and halves the fp32 wire's bytes. */
typedef enum { CM_NONE, CM_CAST, CM_FP8_TENSOR, CM_FP8_GROUP, CM_INT8_GROUP, CM_TACO, CM_BF16, CM_NUM_METHODS } CompressMethod;

typedef struct {
    CompressMethod method;
    Fp8Format format;
    int group_size;      /* power of two 16..256; used by fp8_group, int8_group, taco */
    int hadamard;        /* taco switches, 1 = on (default all on) */
    int adaptive_scale;
    int dual_scale;
    int stochastic;      /* 0 = round-to-nearest-even, 1 = stochastic rounding */
    uint64_t seed;
    int delayed;         /* taco dual-scale: 0 = current chunk amax, 1 = use delayed_amax
                            (fp8_tensor honours it too: its chunk scale is the same thing) */
    float delayed_amax;  /* amax of the transformed values predicted from history (caller keeps history); <=0 means none yet -> fall back to current */
} CompressParams;

typedef struct {
    uint64_t saturated;  /* elements clamped to the format's max */
    uint64_t nonfinite;  /* NaN/inf elements seen in the input */
    float amax;          /* max |value| the chunk scale was computed from (post-transform for taco) - for delayed-scale history */
} CompressStats;

/* The chunk scale maps the amax onto fp8_max / headroom, rounded DOWN to a
 * power of two (so the amax lands in (max/2h, max/h]). Current scaling knows
 * the amax exactly and needs no headroom; a delayed amax is a prediction, so
 * it gets a factor 2 of room before values saturate. */
#define COMPRESS_HEADROOM_CURRENT 1.0f
#define COMPRESS_HEADROOM_DELAYED 2.0f

void compress_params_default(CompressParams* p, CompressMethod m);   /* fills sensible defaults */
/* The table's names (methods.c): "none", "cast", ..., "bf16"; "unknown" for a non-method. */
const char* compress_method_name(CompressMethod m);
int compress_method_parse(const char* s, CompressMethod* out);        /* 0 ok, -1 unknown */
/* NULL if p is usable, else a message naming the bad field (for config validation). */
const char* compress_params_error(const CompressParams* p);
/* EXACT wire size in bytes of a chunk of n elements: hdr + gbytes * ceil(n / G) + ebytes * n
 * of the method's row (methods.c), a function of p and n only, so a receiver knows the size */
size_t compress_bound(const CompressParams* p, size_t n);
size_t compress(const CompressParams* p, const float* x, size_t n, uint64_t stream, uint8_t* out, CompressStats* st); /* returns bytes written == compress_bound; stream feeds the SR counter; st may be NULL */
void decompress(const CompressParams* p, const uint8_t* in, size_t n, float* out);
/* out[i] = the sum of P compressed copies of a chunk of n (in[k]: copy k's
 * wire), in copy order, fused with the decode: the reduce-scatter's sum.
 * The FP8 pipeline sums in the rotated domain, one inverse transform for
 * all P (taco.c); the others add the decoded values, first copy first.
 * decompress is P = 1. Deterministic: the same bytes give the same bits. */
void decompress_sum(const CompressParams* p, const uint8_t* const* in, int P, size_t n, float* out);
/* The two-shot all-reduce's middle step, fused: the sum of P copies of p_in
 * (as decompress_sum takes them) re-encoded as p_out into out
 * (compress_bound(p_out, n) bytes, returned; SR stream `stream`; st may be
 * NULL). When compress_sum_stays_rotated(p_in, p_out) (methods.h: taco
 * into taco, one G and format, Hadamard on) the sum is encoded without
 * leaving the rotated domain, no transform at all (compress/README.md);
 * for every other pair it is compress(p_out, decompress_sum(p_in, ...)).
 * Deterministic: the same bytes give the same bytes. */
/* The sum that decompress_sum_recompress encodes, written out: the values
 * of taco_decode_sum_rotated (groups that can stay rotated left in the
 * rotated domain) when compress_sum_stays_rotated(p_in, p_out), else
 * decompress_sum's. Encoding out with compress_recompress_params(p_in,
 * p_out) (methods.h) is decompress_sum_recompress, to the bit (what the
 * GPU's unfused all-reduce does). */
void decompress_sum_rotated(const CompressParams* p_in, const CompressParams* p_out, const uint8_t* const* in, int P,
                            size_t n, float* out);
size_t decompress_sum_recompress(const CompressParams* p_in, const uint8_t* const* in, int P, size_t n,
                                 const CompressParams* p_out, uint64_t stream, uint8_t* out, CompressStats* st);
double compress_error_bound(const CompressParams* p); /* the stated relative-error bound (||x_hat-x||/||x||) the tests check against for well-behaved data, documented per method */

#ifdef __cplusplus
}
#endif
#endif /* COMPRESS_H */
