/*
 * common/cuda_check.h - CUDA_CHECK and CUDA_CHECK_LAUNCH, the CUDA members of
 * the project's one family of check macros (common/check.h has MPI_CHECK and
 * the file / allocation checks; cuBLAS and NCCL have CUBLAS_CHECK in
 * ops/matmul_cuda.cu and NCCL_CHECK in comm/nccl_util.h). Every one of them
 * prints the failed call, the library's own words for the error and
 * file:line, then ends every rank through check_fatal, so no rank hangs.
 *
 * Plain C over the CUDA runtime API: usable from .c files of the GPU build
 * (comm/collectives_cuda.c) as well as from .cu files.
 */
#ifndef CUDA_CHECK_H
#define CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "common/check.h"

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t cuda_err_ = (call);                                                            \
        if (cuda_err_ != cudaSuccess)                                                              \
            check_fatal(__FILE__, __LINE__, "CUDA call failed: %s: %s (%s)", #call,                \
                        cudaGetErrorString(cuda_err_), cudaGetErrorName(cuda_err_));               \
    } while (0)

/* 1 while stream s is being captured into a CUDA graph (work queued on it
 * is recorded, not run: nothing may wait for it) */
static inline int cuda_stream_capturing(cudaStream_t s) {
    enum cudaStreamCaptureStatus st;
    CUDA_CHECK(cudaStreamIsCapturing(s, &st));
    return st != cudaStreamCaptureStatusNone;
}

/* After every launch: a bad launch configuration (grid, shared memory, ...)
 * shows up here at once; a fault inside a kernel surfaces at the next checked
 * synchronising call. */
#define CUDA_CHECK_LAUNCH(name)                                                                    \
    do {                                                                                           \
        cudaError_t cuda_err_ = cudaGetLastError();                                                \
        if (cuda_err_ != cudaSuccess)                                                              \
            check_fatal(__FILE__, __LINE__, "kernel launch failed: %s: %s (%s)", name,             \
                        cudaGetErrorString(cuda_err_), cudaGetErrorName(cuda_err_));               \
    } while (0)

#endif /* CUDA_CHECK_H */
