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

/* Stochastic rounding's fast path (sr_clamp, sr_cut, the cast) against the
 * integer encoder with rng_sr_word's word, for the float patterns
 * base + step k and the random bytes of SR_BYTES: the TINY form for every
 * non-NaN float, the plain form where it applies (|x| >= the smallest
 * normal, or a zero). */
__constant__ unsigned SR_BYTES[8] = {0u, 1u, 2u, 100u, 127u, 128u, 254u, 255u};
template <int FMT>
__global__ void k_check_fp8_sr(u64 base, u64 count, u64 step, unsigned long long* bad, unsigned* first) {
    unsigned local = 0;
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < count * 3; k += (u64)gridDim.x * blockDim.x) {
        /* the pattern, then (for a sample, step > 1) the same with the bits
         * below the first 9 dropped ones all set, where a wrong carry shows:
         * the float's bits 0..D-10, and for the tiny form the bits worth
         * less than 2^-9 of the subnormal spacing */
        unsigned b = (unsigned)(base + (k / 3) * step);
        const int var = (int)(k % 3), e = (int)((b >> 23) & 0xFFu) - 127;
        if (var > 0 && step == 1) continue;
        if (var == 1) b |= (1u << (23 - Fp8T<FMT>::MB - 9)) - 1u;
        if (var == 2) b |= (1u << min(23, max(0, (FMT == FP8_E4M3 ? 5 : -2) - e))) - 1u;
        if ((b & 0x7FFFFFFFu) > 0x7F800000u) continue;
        const float x = __uint_as_float(b), xc = fminf(fmaxf(x, -0x1p127f), 0x1p127f);
        const bool plain = !(fabsf(x) < Fp8T<FMT>::MIN_NORMAL) || x == 0.0f;
        for (int i = 0; i < 8; i++) {
            const unsigned r = SR_BYTES[i];
            const unsigned want = fp8_encode_sw<FMT>(x, true, (r << 24) | 0x800000u);
            const unsigned tiny = fp8x2_rne<FMT>(sr_cut<FMT, true>(xc, r), 0.0f) & 0xFFu;
            const unsigned fast = plain ? fp8x2_rne<FMT>(sr_cut<FMT, false>(xc, r), 0.0f) & 0xFFu : want;
            if (tiny != want || fast != want) {
                local++;
                atomicMin(first, b);
            }
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

/* the mismatch counter and the smallest mismatching pattern of a check over
 * float patterns: zero and all ones on the device, then read back and freed */
struct Tally {
    unsigned long long* bad = nullptr;
    unsigned* first = nullptr;
    Tally() {
        CUDA_CHECK(cudaMalloc((void**)&bad, sizeof(unsigned long long)));
        CUDA_CHECK(cudaMalloc((void**)&first, sizeof(unsigned)));
        CUDA_CHECK(cudaMemset(bad, 0, sizeof(unsigned long long)));
        CUDA_CHECK(cudaMemset(first, 0xFF, sizeof(unsigned)));
    }
    unsigned long long finish(uint32_t* first_bad) {
        unsigned long long nbad = 0;
        unsigned f = 0;
        CUDA_CHECK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&f, first, sizeof(f), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaFree(bad));
        CUDA_CHECK(cudaFree(first));
        if (first_bad) *first_bad = f;
        return nbad;
    }
};

unsigned long long compress_dev_selftest_fp8(Fp8Format f, uint32_t* first_bad) {
    Tally t;
    const unsigned blocks = (unsigned)compress_dev_num_sms() * 8u;
    for (u64 base = 0; base < (1ull << 32); base += (1ull << 30)) {
        if (f == FP8_E4M3)
            k_check_fp8_hw<FP8_E4M3><<<blocks, 256, 0, 0>>>(base, t.bad, t.first);
        else
            k_check_fp8_hw<FP8_E5M2><<<blocks, 256, 0, 0>>>(base, t.bad, t.first);
        CUDA_CHECK_LAUNCH("k_check_fp8_hw");
    }
    return t.finish(first_bad);
}

unsigned long long compress_dev_selftest_sr(Fp8Format f, uint64_t step, uint32_t* first_bad) {
    if (step == 0) step = 1;
    Tally t;
    const unsigned blocks = (unsigned)compress_dev_num_sms() * 8u;
    const u64 total = ((1ull << 32) + step - 1) / step, per = 1ull << 28;
    for (u64 k0 = 0; k0 < total; k0 += per) {
        const u64 count = total - k0 < per ? total - k0 : per;
        if (f == FP8_E4M3)
            k_check_fp8_sr<FP8_E4M3><<<blocks, 256, 0, 0>>>(k0 * step, count, step, t.bad, t.first);
        else
            k_check_fp8_sr<FP8_E5M2><<<blocks, 256, 0, 0>>>(k0 * step, count, step, t.bad, t.first);
        CUDA_CHECK_LAUNCH("k_check_fp8_sr");
    }
    return t.finish(first_bad);
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
