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

#ifdef __cplusplus
extern "C" {
#endif

/* the backend's cudaStream_t, as void* */
void* ops_cuda_stream(void);
/* 1 when the attention of head size 64 runs Hopper's warpgroup-MMA kernels (an sm_90a
 * build on an sm_90 GPU, unless ATT_WGMMA=0), 0 for the mma.sync ones */
int attention_uses_wgmma(void);

#ifdef __cplusplus
}
#endif
#endif /* OPS_CUDA_H */
