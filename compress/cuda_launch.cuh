/*
 * compress/cuda_launch.cuh - what each compression kernel is built for,
 * decided at compile time from its template parameters: the resident blocks
 * per SM asked of the register allocator, what a decompress kernel reads
 * and does with its sum, and how its input pipeline brings a copy's group
 * bytes and scales (cuda_pipeline.cuh, Loads). Each choice carries the
 * measurement that made it. Device-side constants; included by
 * cuda_kernels.cuh.
 */
#ifndef COMPRESS_CUDA_LAUNCH_CUH
#define COMPRESS_CUDA_LAUNCH_CUH

#include "compress/cuda_codec.cuh"
#include "compress/cuda_pipeline.cuh"

namespace {

/* Minimum resident blocks per SM asked of the register allocator
 * (__launch_bounds__): 8 x 128 threads caps a kernel at 64 registers, 6 at
 * 80, 5 at 96, 4 at 128. A thread holds 64 values, so the kernels get 4
 * (the SR encode too: at 3 blocks it took 163 registers and was 4-8% slower
 * than at 4, where the bf16 one spills 12 bytes; H200, 2026-12-02); the
 * register report (compress/CUDA.md) flags any spill. */
#ifndef COMPRESS_MIN_BLOCKS
#define COMPRESS_MIN_BLOCKS 4
#endif
#ifndef DECOMPRESS_MIN_BLOCKS
#define DECOMPRESS_MIN_BLOCKS 3
#endif
#ifndef COMPRESS_SR_MIN_BLOCKS
#define COMPRESS_SR_MIN_BLOCKS COMPRESS_MIN_BLOCKS
#endif
#ifndef DECOMPRESS_SR_MIN_BLOCKS
#define DECOMPRESS_SR_MIN_BLOCKS DECOMPRESS_MIN_BLOCKS
#endif
/* The decoders to bf16 (decode and decompress-reduce) of fp8_group, TACO at
 * G=128 and int8_group run 4 blocks (128 registers; up to 152 bytes of
 * spill): measured on the H200 against 3 (2026-12-03, 256 MB / 64 MB,
 * fraction of copy): fp8_group reduce P=2 0.80 -> 0.87 / 0.69 -> 0.73
 * (decode 0.84 -> 0.83 / 0.72 -> 0.74), TACO G=128 decode 0.67 -> 0.71 /
 * 0.56 -> 0.56, reduce 0.62 -> 0.68, int8_group decode 0.80 -> 0.85 / 0.68
 * -> 0.69, reduce 0.74 -> 0.80 / 0.63 -> 0.67. TACO G=64 was measured at 4
 * only together with a change not kept (cuda_fast.cuh, fast_sum's tail
 * warps): 0.01-0.04 above the kept kernels at 256 MB, 0.03-0.07 below at
 * 64 MB; fp8_tensor moved within noise; the
 * raw wires lost (fp32 0.87 -> 0.70), and so did fp8_group's recompress
 * (0.63 -> 0.45, 296 bytes of spill): they keep DECOMPRESS_MIN_BLOCKS, as
 * do the fp32 outputs, which were not measured. */
#ifndef DECOMPRESS_WIDE_MIN_BLOCKS
#define DECOMPRESS_WIDE_MIN_BLOCKS 4
#endif
/* The decompress-reduce to bf16 (two or more copies) of the straight-line
 * shapes GROUP64 and TENSOR (OUT_BF16_SUM) runs 4 blocks; their plain decode
 * stays at 3. Measured on an H100 (2026-12-05, 256 MB, fraction of copy, one
 * kernel for both at 4 blocks): TACO G=64 reduce P = 2 / 4 0.93 -> 0.94 /
 * 0.97, but its decode 0.92 -> 0.88 (48 bytes of spill). */
#ifndef DECOMPRESS_SUM_MIN_BLOCKS
#define DECOMPRESS_SUM_MIN_BLOCKS 4
#endif
/* The fused decompress-reduce-recompress (OUT_RECOMP, round to nearest):
 * TACO G=64's (SHAPE_GROUP64) runs 4 blocks (128 registers, 228 bytes of
 * spill), the others 3. At 4 against 3 on an H100 (2026-12-06, 256 MB, us,
 * three rounds): TACO P = 2 current 185-187 -> 172, delayed 170-171 -> 165;
 * fp8_group 163 -> 153, but on the H200 it lost a third at 4 in 2026-12-03's
 * kernels (above), so it keeps 3 until the H200 says otherwise; fp8_tensor
 * 157 -> 167-169. No H200 has timed TACO's at 4 yet. */
#ifndef DECOMPRESS_RECOMP_MIN_BLOCKS
#define DECOMPRESS_RECOMP_MIN_BLOCKS DECOMPRESS_MIN_BLOCKS
#endif
#ifndef DECOMPRESS_RECOMP64_MIN_BLOCKS
#define DECOMPRESS_RECOMP64_MIN_BLOCKS 4
#endif

/* what k_decompress does with the sum */
/* OUT_BF16_SUM: OUT_BF16 for sums of two or more copies (decompress-reduce),
 * built for its own resident blocks per SM (decompress_min_blocks) */
enum OutKind { OUT_F32 = 0, OUT_BF16 = 1, OUT_AMAX = 2, OUT_RECOMP = 3, OUT_BF16_SUM = 4 };

/* How a decompress kernel's steps bring their group bytes and scales
 * (cuda_pipeline.cuh, Loads): in the side words for the fused recompress of
 * the straight-line group shapes (TACO G=64, fp8_group G=128) and for TACO at
 * G = 128, whose kernels they made 3-10% faster on an H100; in registers for
 * the rest: they made TACO G=64's decode and reduce 4-5% slower at 256 MB
 * and TACO G=256's recompress (SHAPE_ANY) 10-17% slower, and changed
 * fp8_tensor's, fp8_group's decoders and int8_group's by under 1%
 * (2026-12-07, compress/CUDA.md section 2). */
template <int OUT, int SHAPE>
__host__ __device__ constexpr int decompress_loads() {
    return (OUT == OUT_RECOMP && (SHAPE == SHAPE_GROUP64 || SHAPE == SHAPE_GROUP128)) || SHAPE == SHAPE_WIDE128
               ? LOADS_SIDE
               : LOADS_REGS;
}

/* What a decompress kernel reads (a template parameter: one code path per
 * kernel keeps the register allocation tight), and its bytes per element. */
enum InKind { IN_E4M3 = 0, IN_E5M2 = 1, IN_INT8 = 2, IN_BF16 = 3, IN_F32 = 4 };
__host__ __device__ constexpr int in_bytes(int in) { return in == IN_F32 ? 4 : in == IN_BF16 ? 2 : 1; }

/* the resident blocks per SM a decompress kernel is compiled for (the constants above) */
template <int IN, int OUT, bool SR, int SHAPE>
__host__ __device__ constexpr int decompress_min_blocks() {
    if (SR) return DECOMPRESS_SR_MIN_BLOCKS;
    const bool coded = IN == IN_E4M3 || IN == IN_E5M2 || IN == IN_INT8;
    const bool wide = SHAPE == SHAPE_GROUP128 || SHAPE == SHAPE_WIDE128 || SHAPE == SHAPE_INT8_64;
    if (coded && wide && OUT == OUT_BF16) return DECOMPRESS_WIDE_MIN_BLOCKS;
    if (OUT == OUT_BF16_SUM) return DECOMPRESS_SUM_MIN_BLOCKS;
    if (OUT == OUT_RECOMP) return SHAPE == SHAPE_GROUP64 ? DECOMPRESS_RECOMP64_MIN_BLOCKS : DECOMPRESS_RECOMP_MIN_BLOCKS;
    return DECOMPRESS_MIN_BLOCKS;
}

} /* namespace */

#endif /* COMPRESS_CUDA_LAUNCH_CUH */
