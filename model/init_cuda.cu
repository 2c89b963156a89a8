/*
 * model/init_cuda.cu - random weight initialisation on the GPU with cuRAND's
 * device API (model/init_cuda.h says what a value is and why).
 *
 * Per tensor t of the full model:
 *   1. generate the FULL tensor into one temporary device buffer: the normal
 *      kernel (weights) or the fill kernel (biases 0, norm gains 1), as
 *      params_init_std says (GPT-2's rule or Qwen2's), then zero the padding
 *      rows V..Vp-1 of wte (and of qwen2's untied LM head);
 *   2. copy this rank's shard blocks (params_shard_block: the one description
 *      the host slicer walks too) from it into the master buffer, one
 *      cudaMemcpy2DAsync per rectangular block (a plain copy when the block
 *      is whole rows, hence contiguous).
 * The buffer is allocated once, at the size of the largest tensor, and freed
 * at the end, so at most one full tensor is on the device at any time.
 * Everything runs in order on the backend's stream; the caller converts the
 * master into the bf16 working weights (gpt_init_device).
 */
#include <curand_kernel.h>

#include "model/init_cuda.h"
#include "ops/cuda_common.cuh"

#define INIT_THREADS 256

/* Grid for `work` independent items, capped (grid-stride loops do the rest):
 * the values never depend on it. */
static unsigned int init_blocks(size_t work) {
    size_t cap = (size_t)cuda_num_sms() * 16;
    size_t want = work ? ceil_div_u(work, INIT_THREADS) : 1;
    return (unsigned int)(want < cap ? want : cap);
}

/* p[e] = std * (normal e of Philox subsequence t under key seed), e < n.
 * One counter c per step of a thread: curand_init(seed, t, 4c) is O(1) for
 * Philox (it sets the 128-bit counter to (c, t), no sequential skipping), and
 * curand_normal4 turns that counter's four 32-bit words into the normals of
 * elements 4c..4c+3. p must be 16-byte aligned (the whole-tensor buffer is). */
__global__ void init_normal_kernel(float* p, size_t n, unsigned long long seed, int t, float std) {
    size_t ncounters = (n + 3) / 4;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ncounters; c += stride) {
        curandStatePhilox4_32_10_t st;
        curand_init(seed, (unsigned long long)t, 4ull * c, &st);
        float4 z = curand_normal4(&st);
        float v[4] = {std * z.x, std * z.y, std * z.z, std * z.w};
        size_t e = 4 * c;
        if (e + 4 <= n) {
            *reinterpret_cast<float4*>(p + e) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
            for (int k = 0; e + k < n; k++) p[e + k] = v[k];   /* a tensor of n % 4 != 0 */
        }
    }
}

__global__ void init_fill_kernel(float* p, size_t n, float value) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) p[e] = value;
}

/* Full tensor t into buf (device, pl->full[t] floats). */
static void init_tensor_full(float* buf, const ParamLayout* pl, int t, unsigned long long seed) {
    size_t n = pl->full[t];
    float fill, std = params_init_std(pl, t, &fill);
    cudaStream_t s = cuda_stream();
    if (std > 0.0f) {
        init_normal_kernel<<<init_blocks((n + 3) / 4), INIT_THREADS, 0, s>>>(buf, n, seed, t, std);
        CUDA_CHECK_LAUNCH("init_normal_kernel");
    } else {
        init_fill_kernel<<<init_blocks(n), INIT_THREADS, 0, s>>>(buf, n, fill);
        CUDA_CHECK_LAUNCH("init_fill_kernel");
    }
    const GPTShape* g = &pl->s;
    /* padding rows never see a token (nor produce a logit): zero, as on the host;
     * wte's, and for qwen2 an untied LM head's (an empty slot when tied) */
    if (t == P_WTE || (g->arch == ARCH_QWEN2 && t == Q_LMHEAD && n > 0)) {
        size_t real = (size_t)g->V * g->C, pad = (size_t)(g->Vp - g->V) * g->C;
        CUDA_CHECK(cudaMemsetAsync(buf + real, 0, pad * sizeof(float), s));
    }
}

/* This rank's blocks of tensor t: from the full tensor in buf into the
 * tensor's place in master. */
static void init_tensor_slice(float* master, const float* buf, const ParamLayout* pl, int t) {
    float* dst = master + pl->offset[t];
    int nb = params_shard_nblocks(pl, t);
    for (int i = 0; i < nb; i++) {
        ShardBlock b = params_shard_block(pl, t, i);
        size_t width = (size_t)b.cols * sizeof(float);
        if (b.ld == (size_t)b.cols) {   /* whole rows: one contiguous range (every replicated tensor, wte's rows) */
            CUDA_CHECK(cudaMemcpyAsync(dst + b.dst, buf + b.src, width * (size_t)b.rows, cudaMemcpyDeviceToDevice,
                                       cuda_stream()));
        } else {
            CUDA_CHECK(cudaMemcpy2DAsync(dst + b.dst, width, buf + b.src, b.ld * sizeof(float), width, (size_t)b.rows,
                                         cudaMemcpyDeviceToDevice, cuda_stream()));
        }
    }
}

void params_init_device(const ParamLayout* pl, float* master, unsigned long long seed) {
    int largest = 0;
    for (int t = 1; t < NUM_PARAM_TENSORS; t++) {
        if (pl->full[t] > pl->full[largest]) largest = t;
    }
    size_t bytes = pl->full[largest] * sizeof(float);
    float* buf = nullptr;
    cudaError_t e = cudaMalloc(&buf, bytes);
    if (e != cudaSuccess) {
        FATAL("model.init=device: no device memory for the %.1f MB the full %s tensor needs during init (%s); "
              "set model.init to \"host\" (draws on the CPU and uploads only this rank's shard)",
              (double)bytes / 1e6, params_tensor_name(pl, largest), cudaGetErrorString(e));
    }
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        init_tensor_full(buf, pl, t, seed);
        init_tensor_slice(master, buf, pl, t);
    }
    /* a fault inside the kernels or copies surfaces here, at a named call */
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));
    CUDA_CHECK(cudaFree(buf));
}
