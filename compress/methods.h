/*
 * compress/methods.h - every compression method described once: one row per
 * method (name, wire layout, code path, FP8 pipeline switches), and what the
 * CPU reference, the GPU kernels and comm/ derive from it.
 *
 * The wire of a chunk of n values is four parts, any of them empty:
 *
 *   [hdr bytes: fp32 chunk scale][tbytes per tile of T][gbytes per group of G][ebytes per element]
 *
 * so its size is hdr + tbytes * ceil(n / T) + gbytes * ceil(n / G) + ebytes * n
 * (compress_bound), a function of (method, G, n) only: a receiver knows it
 * without a message. A tile is COMPRESS_WIRE_TILE elements, the most one GPU
 * block holds: a scale per tile can be computed in one pass over the data.
 * The parts exist whatever taco's switches say: a disabled part is still
 * sent, holding its neutral value (scale 1.0f, exponent byte 127), so the
 * ablations pay the same bytes; a delayed scale is written into every tile. Exponent bytes are E8M0: value
 * 2^(byte - 127), bytes 1..253 used. fp32 fields are little-endian, as on
 * every host and GPU we run on. What the bytes mean: compress/README.md.
 */
#ifndef COMPRESS_METHODS_H
#define COMPRESS_METHODS_H

#include <stddef.h>

#include "compress/compress.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which code path encodes a method. */
typedef enum {
    CM_FAM_RAW,  /* raw words: fp32 (ebytes 4) or bf16 (ebytes 2) */
    CM_FAM_CAST, /* the bare fp8 cast: no scale, NaN stays NaN, inf saturates */
    CM_FAM_FP8,  /* the FP8 group pipeline of taco.h, with the row's switches */
    CM_FAM_INT8  /* symmetric int8 with one fp32 step per group */
} CompressFamily;

/* A switch of the FP8 pipeline taken from CompressParams (taco's ablations). */
#define CM_SW_USER (-1)

/* The table, in CompressMethod order (methods.c checks it).
 *   hdr     chunk-header bytes: 4 = the fp32 chunk scale, 0 = none
 *   tbytes  bytes per tile of COMPRESS_WIRE_TILE elements: 4 = an fp32 scale per tile, 0 = no tiles
 *   gbytes  bytes per group of G: 1 = exponent byte, 4 = fp32 int8 step, 0 = no groups
 *   ebytes  bytes per element
 *   had, ada, dual  the FP8 pipeline's Hadamard, adaptive (per-group) scale and
 *           dual (per-chunk) scale: 0 or 1 fixed, or CM_SW_USER; 0 outside CM_FAM_FP8
 * The two FP8 baselines are the pipeline with its switches fixed, which is
 * how the ablation stays honest (one code path, one rounding behaviour). */
/*  X(method,        name,         hdr, tbytes, gbytes, ebytes, family,      had,        ada,        dual) */
#define COMPRESS_METHOD_TABLE(X)                                                                                 \
    X(CM_NONE,       "none",       0,   0,      0,      4,      CM_FAM_RAW,  0,          0,          0)          \
    X(CM_CAST,       "cast",       0,   0,      0,      1,      CM_FAM_CAST, 0,          0,          0)          \
    X(CM_FP8_TENSOR, "fp8_tensor", 4,   0,      0,      1,      CM_FAM_FP8,  0,          0,          1)          \
    X(CM_FP8_GROUP,  "fp8_group",  0,   0,      1,      1,      CM_FAM_FP8,  0,          1,          0)          \
    X(CM_INT8_GROUP, "int8_group", 0,   0,      4,      1,      CM_FAM_INT8, 0,          0,          0)          \
    X(CM_TACO,       "taco",       0,   4,      1,      1,      CM_FAM_FP8,  CM_SW_USER, CM_SW_USER, CM_SW_USER) \
    X(CM_BF16,       "bf16",       0,   0,      0,      2,      CM_FAM_RAW,  0,          0,          0)

/* "none|cast|fp8_tensor|fp8_group|int8_group|taco|bf16": every name in table
 * order, '|'-separated, for config enums. The preprocessor cannot leave the
 * separator out before the first name only, so every name gets one in front
 * (COMPRESS_METHOD_BAR_NAMES, a literal that more choices can follow) and
 * CHOICES starts at the second character: the address of an element of a
 * string literal is an address constant, so this may initialise a static. */
#define COMPRESS_METHOD_BAR_NAME_(m, name, ...) "|" name
#define COMPRESS_METHOD_BAR_NAMES COMPRESS_METHOD_TABLE(COMPRESS_METHOD_BAR_NAME_) /* "|none|cast|...": a literal */
#define COMPRESS_METHOD_CHOICES (&(COMPRESS_METHOD_BAR_NAMES)[1])

/* One row. */
typedef struct {
    const char* name;
    int hdr, tbytes, gbytes, ebytes;
    CompressFamily family;
    int hadamard, adaptive, dual; /* 0, 1 or CM_SW_USER */
} CompressMethodInfo;

const CompressMethodInfo* compress_method_info(CompressMethod m); /* NULL if m is not a method */
/* 1 if G matters (the wire has group bytes): fp8_group, int8_group, taco */
int compress_method_uses_groups(CompressMethod m);
/* FATAL naming `who` unless compress_params_error(p) is NULL. */
void compress_params_check(const CompressParams* p, const char* who);

/* ---- what the pipeline runs with, resolved for p (p valid) ------------------- */

/* The FP8 pipeline's switches, each 0 or 1: the row's, or p's where the row
 * says CM_SW_USER; all 0 outside CM_FAM_FP8. */
typedef struct {
    int hadamard, adaptive, dual;
} CompressSwitches;
CompressSwitches compress_method_switches(const CompressParams* p);
/* The predicted amax the chunk scale comes from: p->delayed_amax when
 * p->delayed and the method has a chunk scale, else 0. The encoders use it
 * only when dual scaling is on and it is > 0 and finite (else the current amax). */
float compress_method_delayed_amax(const CompressParams* p);

/* 1 if the fused recompress of p_in's sums as p_out (the two-shot
 * all-reduce's middle step) keeps the sum in the rotated domain: both are
 * the FP8 pipeline with the Hadamard on, with one group length and one fp8
 * format (the pairs the GPU fuses). Every other pair recompresses
 * compress(p_out, decompress_sum(p_in, ...)). compress/README.md. */
int compress_sum_stays_rotated(const CompressParams* p_in, const CompressParams* p_out);
/* What the recompress encodes that sum with: p_out with its Hadamard
 * switched off when the sum stays rotated (its groups that can be rotated
 * already are), else p_out itself. */
CompressParams compress_recompress_params(const CompressParams* p_in, const CompressParams* p_out);

/* ---- the wire layout: one definition for the CPU, the GPU and comm/ ----------
 * Element ranges of a chunk (the range interface of compress_cuda.h, the
 * pipelined collectives' sub-chunks) start on multiples of gran: whole
 * groups, whole tiles, and whole units of the kernels' COMPRESS_WIRE_UNIT
 * elements per thread (the unit is also G for methods without groups). */
#define COMPRESS_WIRE_UNIT 64
#define COMPRESS_WIRE_TILE 8192 /* elements per tile scale: one GPU block's 128 units */

typedef struct {
    int hdr;    /* bytes of the chunk header: 4 (fp32 scale) or 0 */
    int tbytes; /* bytes per tile: 4 (fp32 scale) or 0 */
    int T;      /* elements per tile (COMPRESS_WIRE_TILE) */
    int gbytes; /* bytes per group: 1 (exponent), 4 (int8 step) or 0 */
    int ebytes; /* bytes per element: 1 (fp8 / int8 / cast), 2 (bf16) or 4 (none) */
    int G;      /* elements per group of the group bytes (gbytes > 0); COMPRESS_WIRE_UNIT otherwise */
    int gran;   /* element granularity of ranges: max(COMPRESS_WIRE_UNIT, G), T with tiles */
} CompressWireLayout;
CompressWireLayout compress_wire_layout(const CompressParams* p);
/* bytes of the range [e0, e1) of a chunk of n: (e0 == 0 ? hdr : 0) + tile bytes + group bytes + element bytes */
size_t compress_wire_range_bytes(const CompressParams* p, size_t n, size_t e0, size_t e1);
/* tiles and groups of the range [e0, e1) (e0 a multiple of gran) */
size_t compress_wire_tiles(const CompressWireLayout* l, size_t e0, size_t e1);
size_t compress_wire_groups(const CompressWireLayout* l, size_t e0, size_t e1);
/* where a whole chunk's group bytes and element bytes start */
size_t compress_wire_groups_offset(const CompressWireLayout* l, size_t n);
size_t compress_wire_codes_offset(const CompressWireLayout* l, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* COMPRESS_METHODS_H */
