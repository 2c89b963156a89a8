/*
 * model/init_cuda.h - random weight initialisation on the GPU (model.init =
 * "device"), GPU build only: model/init_cuda.cu.
 *
 * The host init (params_init_full) builds the whole fp32 model in host memory
 * on every rank and then slices it: for large models that is seconds of CPU
 * time and gigabytes of host memory per rank. The device init keeps the same
 * rule - draw the FULL tensor from the seed, then keep this rank's blocks - but
 * on the GPU, one tensor at a time, so TP degrees still start identical.
 *
 * What a value is: element e of tensor t is std_t * z, where z is normal
 * number e of cuRAND's Philox4_32_10 stream with key = seed and subsequence =
 * t, drawn four per 128-bit counter by curand_normal4 (Box-Muller on the
 * counter's four 32-bit words): counter e/4, lane e%4. It depends only on
 * (seed, t, e), never on the TP degree, the rank, the launch shape or the run.
 * Same distributions as the host init (params_init_std), different values.
 */
#ifndef INIT_CUDA_H
#define INIT_CUDA_H

#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fill master (device memory: this rank's flat fp32 shard, pl->total floats,
 * laid out as params_copy_shard lays out `local`) with the full model drawn
 * from seed and sliced to (pl->P, pl->r). Uses the backend's stream (ops_init
 * first) and returns when the work is done. Needs one temporary device buffer
 * the size of the largest full tensor (fcw: L * 4C * C floats). */
void params_init_device(const ParamLayout* pl, float* master, unsigned long long seed);

#ifdef __cplusplus
}
#endif
#endif /* INIT_CUDA_H */
