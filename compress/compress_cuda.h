/*
 * compress/compress_cuda.h - the compressors of compress.h as fused CUDA
 * kernels on device buffers (C API, callable from C and C++).
 *
 * The kernels repeat the CPU reference (compress.c, taco.c, fp8.c,
 * hadamard.c) operation for operation, so for round-to-nearest they write
 * THE SAME BYTES as compress() and decode to the same fp32 bits as
 * decompress() / decompress_reduce(); stochastic rounding draws the same
 * Philox words (cuRAND's Philox4x32-10 with the mapping of rng.h) and is
 * bit-identical too. Inputs may be fp32 or bf16 (uint16_t bit patterns):
 * bf16 -> fp32 is exact, so compress_dev(bf16 x) == compress(float(x)).
 * The wire layout is methods.h's; see compress/CUDA.md for the kernels'
 * design and how to build, test and benchmark them.
 *
 * Two levels:
 *   1. whole chunks in the standard wire layout: compress_dev, decompress_dev,
 *      decompress_reduce_dev, decompress_reduce_recompress_dev;
 *   2. a batched range interface (CompressJobDev) used by the pipelined
 *      collectives (comm/collectives_cuda.c): a chunk is processed in element
 *      ranges whose wire parts (scale, group bytes, element bytes) may live
 *      anywhere, several chunks per launch.
 * Everything is asynchronous on the given stream; nothing synchronises except
 * compress_stats_dev_read. Statistics accumulate in a small device struct.
 *
 * Not thread-safe: the launch helpers keep a small per-process cache and one
 * scratch buffer (used only when a caller passes st == NULL or a method
 * cannot be fused); use one host thread per process, as the trainer does.
 */
#ifndef COMPRESS_CUDA_H
#define COMPRESS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "common/check.h"
#include "common/cuda_check.h"
#include "compress/compress.h"
#include "compress/methods.h" /* CompressWireLayout: the wire's parts */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- statistics in device memory --------------------------------------------
 * One struct per compressed chunk stream. saturated / nonfinite / amax mean
 * what CompressStats means and ACCUMULATE (sum, sum, max) until reset.
 * scale_amax_bits is the per-chunk slot a current-scaling compression first
 * reduces its chunk amax into (float bits; >= 0 floats order like unsigned
 * ints, so atomicMax on the bits is a float max); it is reset by the
 * whole-chunk functions, and by compress_stats_dev_reset. One struct must not
 * be used by two chunks in flight at once. */
typedef struct {
    unsigned long long saturated;
    unsigned long long nonfinite;
    unsigned int amax_bits;       /* float bits: max amax over the calls since the reset */
    unsigned int scale_amax_bits; /* float bits: the chunk amax of the current call's scale */
    unsigned int pad[2];          /* 32 bytes */
} CompressStatsDev;

CompressStatsDev* compress_stats_dev_alloc(int count);              /* zeroed device array */
void compress_stats_dev_free(CompressStatsDev* st);
void compress_stats_dev_reset(CompressStatsDev* st, int count, cudaStream_t s);
/* Copies st[0..count) to the host and SYNCHRONISES s; fills CompressStats
 * (amax from amax_bits). host may be NULL; returns the summed/maxed stats. */
CompressStats compress_stats_dev_read(const CompressStatsDev* st, int count, CompressStats* host, cudaStream_t s);

/* ---- whole chunks, standard wire layout ------------------------------------- */

/* x[n] (fp32, or bf16 bit patterns if x_is_bf16) -> out[compress_bound(p, n)],
 * the same bytes as compress(p, float(x), n, stream, out, NULL). Returns the
 * bytes written. st (may be NULL) accumulates the statistics. One pass,
 * also for taco's current scaling (a block holds a tile and reduces its
 * amax); fp8_tensor's current per-tensor scale takes two: a chunk-amax pass,
 * then the encode pass. */
size_t compress_dev(const CompressParams* p, const void* x, int x_is_bf16, size_t n, uint64_t stream, uint8_t* out,
                    CompressStatsDev* st, cudaStream_t s);
/* compress_dev with the delayed amax read from device memory when the kernel
 * runs (CompressJobDev.delayed_amax; NULL: p's). */
size_t compress_dev_scaled(const CompressParams* p, const void* x, int x_is_bf16, size_t n, uint64_t stream,
                           uint8_t* out, CompressStatsDev* st, const float* delayed_amax, cudaStream_t s);
/* in (compress_bound(p, n) bytes) -> out[n] as fp32, or bf16 (round to
 * nearest even of the fp32 decompress() result) if out_is_bf16. */
void decompress_dev(const CompressParams* p, const uint8_t* in, size_t n, void* out, int out_is_bf16, cudaStream_t s);

/* What a decompress-reduce writes. */
typedef enum {
    CDEV_SUM_F32, /* out = decompress_sum(chunks) (fp32; the order of coll_reduce_scatter) */
    CDEV_SUM_BF16 /* out = bf16(decompress_sum(chunks)) (round to nearest even) */
} CompressDevSum;
/* chunks: a HOST array of P device pointers to compressed chunks of n
 * elements (P <= COMPRESS_DEV_MAX_IN). The sum is decompress_sum's, to the bit. */
void decompress_reduce_dev(const CompressParams* p, const uint8_t* const* chunks, int P, size_t n, void* out,
                           CompressDevSum kind, cudaStream_t s);
/* The fused all-gather step: sum the P chunks and compress the sum with
 * p_out (SR stream `stream`) into out, without the sum going through
 * memory; the same bytes as decompress_sum_recompress (compress.h): for
 * taco into taco the sum stays in the rotated domain, no transform at all.
 * For fp8_tensor's current scale one pass finds the amax of the sum and a
 * second pass re-decodes, re-sums and encodes; otherwise one pass. Pairs
 * that are not fused (compress_dev_can_fuse) go through an fp32 scratch
 * sum. Returns compress_bound(p_out, n). */
size_t decompress_reduce_recompress_dev(const CompressParams* p_in, const uint8_t* const* chunks, int P, size_t n,
                                        const CompressParams* p_out, uint64_t stream, uint8_t* out,
                                        CompressStatsDev* st, cudaStream_t s);

/* ---- the range interface (pipelined collectives) -----------------------------
 * A chunk's wire = [hdr bytes: fp32 scale][gbytes per group][ebytes per
 * element] (CompressWireLayout, compress_wire_layout and
 * compress_wire_range_bytes: methods.h). A job covers the element range
 * [e0, e1) of one chunk of n elements; e0 is a multiple of layout.gran, e1
 * too or e1 == n.
 * Its wire parts are given by pointer, so a pipelined sender can place the
 * group bytes and element bytes of each range wherever its messages go:
 * exps points at the group byte(s) of group e0 / G, codes at the bytes of
 * element e0, scale (only meaningful when e0 == 0 for outputs; always the
 * chunk's scale for inputs) at the 4 scale bytes. Pointers may have any
 * alignment (16-byte aligned codes take the fastest path). For methods with
 * tile scales (taco: COMPRESS_WIRE_TILE elements per fp32 scale) scale points
 * at the scales of the range's tiles, from tile e0 / T, for inputs and
 * outputs alike; ranges then start on tiles (layout.gran). */
#define COMPRESS_DEV_MAX_IN 16   /* most compressed inputs one decompress job sums (the TP degree) */
#define COMPRESS_DEV_MAX_JOBS 16 /* jobs per kernel launch (more are split over launches) */

typedef struct {
    const uint8_t* scale; /* the chunk's 4 scale bytes (NULL when hdr == 0) */
    const uint8_t* exps;  /* group bytes from group e0 / G (NULL when gbytes == 0) */
    const uint8_t* codes; /* element bytes from element e0 */
} CompressWireIn;
typedef struct {
    uint8_t* scale; /* written when e0 == 0 and hdr > 0 (else may be NULL) */
    uint8_t* exps;
    uint8_t* codes;
} CompressWireOut;

typedef struct {
    size_t n, e0, e1;      /* chunk length and this job's range */
    const void* x;         /* compress: element 0 of the chunk's input */
    void* y;               /* decompress: element 0 of the chunk's output (fp32 / bf16) */
    CompressWireOut out;   /* compress, recompress: where the range's wire goes */
    int nin;               /* decompress: copies to sum, in this order (1 = plain decode) */
    CompressWireIn in[COMPRESS_DEV_MAX_IN];
    uint64_t stream;       /* SR stream of the (re)compressed chunk (compress()'s stream) */
    CompressStatsDev* st;  /* stats + scale amax slot of the (re)compressed chunk; required
                              for current dual scaling, else may be NULL */
    const float* delayed_amax; /* device memory, or NULL: the (re)compression's delayed amax, read
                              when the kernel runs instead of p->delayed_amax (same rule: used
                              when > 0 and finite, else the current amax). For methods that honour
                              p->delayed; the caller passes p->delayed_amax = 0, so that the host
                              plans for the current amax (an amax pass for fp8_tensor, which the
                              kernels then ignore when the device value is valid) */
} CompressJobDev;

/* 1 if p's chunk scale needs the current amax of the whole chunk (an amax
 * pass first): fp8_tensor with current scaling. */
int compress_dev_two_pass(const CompressParams* p);
/* 1 if decompress_jobs_dev can recompress p_in's sums as p_out directly. */
int compress_dev_can_fuse(const CompressParams* p_in, const CompressParams* p_out);

/* Pass 1 of current dual scaling: atomically max each job's transformed amax
 * into job.st->scale_amax_bits. The slots must have been reset (to 0) before
 * the first range of the chunk; no-op when !compress_dev_two_pass(p). */
void compress_jobs_amax_dev(const CompressParams* p, int x_is_bf16, const CompressJobDev* jobs, int njobs,
                            cudaStream_t s);
/* The encode pass: writes each job's range (and the scale with the range at
 * e0 == 0), chunk scale from job.st->scale_amax_bits (current) or p's
 * delayed amax; accumulates job.st. */
void compress_jobs_encode_dev(const CompressParams* p, int x_is_bf16, const CompressJobDev* jobs, int njobs,
                              cudaStream_t s);

typedef enum {
    CDEV_DECODE_F32,        /* y = decompress(in[0])                (fp32) */
    CDEV_DECODE_BF16,       /* y = bf16(decompress(in[0])) */
    CDEV_REDUCE_F32,        /* y = decompress_sum(in[0..nin))       (fp32) */
    CDEV_REDUCE_BF16,       /* y = bf16(decompress_sum(in[0..nin))) */
    CDEV_REDUCE_AMAX,       /* the sum's transformed amax under p_out -> job.st->scale_amax_bits */
    CDEV_REDUCE_RECOMPRESS, /* decompress_sum_recompress(p_in, in, p_out) -> job.out, stats -> job.st:
                               compress(p_out, sum), or for taco into taco the sum kept in the
                               rotated domain (compress_sum_stays_rotated) */
    CDEV_REDUCE_ROTATED_F32 /* y = decompress_sum_rotated(p_in, p_out, in) (fp32): the sum the
                               recompress encodes; compress_recompress_params(p_in, p_out) encodes
                               it to the same bytes in a second pass (the unfused all-reduce) */
} CompressDevMode;
void decompress_jobs_dev(const CompressParams* p_in, const CompressJobDev* jobs, int njobs, CompressDevMode mode,
                         const CompressParams* p_out, cudaStream_t s);

/* ---- self-checks of the device arithmetic (tests/test_compress_gpu.cu) ------ */
/* The hardware RNE conversion the kernels use against the integer encoder
 * (fp8.c's rules) for every non-NaN float bit pattern: returns the number of
 * mismatches (0 expected), *first_bad the smallest mismatching pattern.
 * Synchronous; about a second. */
unsigned long long compress_dev_selftest_fp8(Fp8Format f, uint32_t* first_bad);
/* Stochastic rounding's arithmetic (cuda_device.cuh's sr_cut and the cast)
 * against the integer encoder with rng_sr_word's words, for the float
 * patterns 0, step, 2 step, ... (step 1: all of them) and 8 random bytes:
 * returns the number of mismatches (0 expected), *first_bad the smallest
 * mismatching pattern. Synchronous; a few seconds at step 1. */
unsigned long long compress_dev_selftest_sr(Fp8Format f, uint64_t step, uint32_t* first_bad);
/* The Philox words the kernels draw for elements 0..n-1 of (seed, stream)
 * into words_host (compare with rng_u32), and the number of elements where
 * curand_init(seed, stream, i) + curand() disagrees with them (0 expected). */
unsigned long long compress_dev_selftest_philox(uint64_t seed, uint64_t stream, size_t n, uint32_t* words_host);

#ifdef __cplusplus
}
#endif
#endif /* COMPRESS_CUDA_H */
