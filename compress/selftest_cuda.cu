/*
 * compress/selftest_cuda.cu - the self-checks of the device arithmetic that
 * compress_cuda.h declares, run by tests/test_compress_gpu.cu: the hardware
 * fp8 conversion the kernels use for RNE against the integer encoder, on all
 * 2^32 floats, and the kernels' Philox words against curand_init + curand.
 * The launches are plain <<<>>> ones (named kernels), which the CPU
 * emulator's build rewrites like every other.
 */
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <curand_kernel.h>
#include <stdint.h>

#include "common/cuda_check.h"
#include "compress/compress_cuda.h"
#include "compress/cuda_device.cuh"
#include "compress/cuda_host.h"

namespace {

/* every float bit pattern but NaN: hardware RNE conversion == integer encoder */
template <int FMT>
__global__ void k_check_fp8_hw(u64 base, unsigned long long* bad, unsigned* first) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    unsigned local = 0;
    for (u64 i = base + (u64)blockIdx.x * blockDim.x + threadIdx.x; i < base + (1ull << 30); i += stride) {
        const unsigned b = (unsigned)i;
        if ((b & 0x7FFFFFFFu) > 0x7F800000u) continue;
        const float x = __uint_as_float(b);
        const unsigned hw = (unsigned)__nv_cvt_float2_to_fp8x2(make_float2(x, 0.0f), __NV_SATFINITE,
                                                                FMT == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2) & 0xFFu;
        const unsigned sw = fp8_encode_sw<FMT>(x, false, 0u);
        if (hw != sw) {
            local++;
            atomicMin(first, b);
        }
    }
    if (local) atomicAdd(bad, (unsigned long long)local);
}

/* the kernels' Philox words, and whether curand_init + curand agree */
__global__ void k_check_philox(u64 seed, u64 stream, u64 n, unsigned* words, unsigned long long* bad) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const uint4 r = philox_block(seed, stream, i >> 2);
        const unsigned w = (i & 3) == 0 ? r.x : (i & 3) == 1 ? r.y : (i & 3) == 2 ? r.z : r.w;
        words[i] = w;
        curandStatePhilox4_32_10_t st;
        curand_init(seed, stream, i, &st);
        if (curand(&st) != w) atomicAdd(bad, 1ull);
    }
}

} /* namespace */

unsigned long long compress_dev_selftest_fp8(Fp8Format f, uint32_t* first_bad) {
    unsigned long long* d_bad = nullptr;
    unsigned* d_first = nullptr;
    CUDA_CHECK(cudaMalloc((void**)&d_bad, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMalloc((void**)&d_first, sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(d_bad, 0, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(d_first, 0xFF, sizeof(unsigned)));
    const unsigned blocks = (unsigned)compress_dev_num_sms() * 8u;
    for (u64 base = 0; base < (1ull << 32); base += (1ull << 30)) {
        if (f == FP8_E4M3)
            k_check_fp8_hw<FP8_E4M3><<<blocks, 256, 0, 0>>>(base, d_bad, d_first);
        else
            k_check_fp8_hw<FP8_E5M2><<<blocks, 256, 0, 0>>>(base, d_bad, d_first);
        CUDA_CHECK_LAUNCH("k_check_fp8_hw");
    }
    unsigned long long bad = 0;
    unsigned first = 0;
    CUDA_CHECK(cudaMemcpy(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&first, d_first, sizeof(first), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d_bad));
    CUDA_CHECK(cudaFree(d_first));
    if (first_bad) *first_bad = first;
    return bad;
}

unsigned long long compress_dev_selftest_philox(uint64_t seed, uint64_t stream, size_t n, uint32_t* words_host) {
    unsigned* d_words = nullptr;
    unsigned long long* d_bad = nullptr;
    CUDA_CHECK(cudaMalloc((void**)&d_words, sizeof(unsigned) * (n ? n : 1)));
    CUDA_CHECK(cudaMalloc((void**)&d_bad, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(d_bad, 0, sizeof(unsigned long long)));
    k_check_philox<<<64, 256, 0, 0>>>(seed, stream, n, d_words, d_bad);
    CUDA_CHECK_LAUNCH("k_check_philox");
    unsigned long long bad = 0;
    CUDA_CHECK(cudaMemcpy(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost));
    if (words_host && n) CUDA_CHECK(cudaMemcpy(words_host, d_words, sizeof(unsigned) * n, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d_words));
    CUDA_CHECK(cudaFree(d_bad));
    return bad;
}
