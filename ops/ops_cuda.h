/*
 * ops/ops_cuda.h - what the CUDA backend offers beyond ops/ops.h, for
 * other modules of the GPU build (comm/, compress/) that must queue their own
 * kernels or copies in order with the model's.
 *
 * Plain C, no CUDA headers: the stream is handed out as void* (cast it to
 * cudaStream_t). Every op of ops.h runs on this one stream; ops_init must
 * have been called first.
 */
#ifndef OPS_CUDA_H
#define OPS_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the backend's cudaStream_t, as void* */
void* ops_cuda_stream(void);

/* Attention backward knobs, for tests and benchmarks (ops/CUDA.md): the
 * byte cap on the split dQ's partial buffer (above it, or at 0, the
 * backward runs the separate dQ kernel) and the warps per block (4 or 8) of
 * the split path's dK/dV/dQ kernel. Each returns the previous value. The
 * defaults: ATT_DQ_SPLIT_CAP and ATT_BWD_WARPS from the environment at the
 * first backward, else 1 GiB and 8. */
size_t ops_attention_set_dq_split_cap(size_t bytes);
int ops_attention_set_bwd_warps(int warps);

#ifdef __cplusplus
}
#endif
#endif /* OPS_CUDA_H */
