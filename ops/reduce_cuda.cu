/*
 * ops/reduce_cuda.cu - the whole-tensor reductions of ops/ops.h: the queued
 * ones that leave their result in device memory (ops_sumsq_acc, the gradient
 * norm; ops_mean, the loss), the same sums returned to the host (ops_sumsq,
 * ops_sum), ops_all_finite (1 iff no element is inf or NaN), and
 * ops_grad_clip, the step's norm, clip scale and skip flag.
 *
 * Deterministic by construction: a fixed grid (RED_BLOCKS x RED_THREADS, not
 * the device's SM count), double accumulation, per-block sums in fixed order,
 * then one block adds the block sums in fixed order: same input, same bits,
 * on any run and any device. The host-returning ones come back through a
 * pinned slot.
 */
#include <math.h>

#include "ops/cuda_common.cuh"

/* ------------------------------------------------------------------------ */
/* norms: a fixed grid of RED_BLOCKS x RED_THREADS threads (not the device's
 * SM count), each summing a fixed grid-stride set of elements in double;
 * per-block sums in fixed order, then one block adds the block sums in fixed
 * order. Same input -> same bits, on any run. Blocks that would find no
 * element (n < RED_BLOCKS x RED_THREADS) are not launched: their sums would
 * be +0.0, which the final block reads in their place, so the additions and
 * the bits are those of the full grid (and the small tensors of a model,
 * its biases and norms, cost a few blocks instead of RED_BLOCKS). */
#define RED_BLOCKS 1024
#define RED_THREADS 256

template <int MODE> /* 0: sum, 1: sum of squares */
__device__ __forceinline__ void reduce_add(double& acc, float f) {
    const double v = (double)f;
    acc += MODE ? v * v : v; /* a float's square is exact in double */
}

/* VEC: x is 16-byte aligned and read as float4s, thread g taking the float4s
 * g, g + stride, ... (four loads in flight: a scalar load per thread leaves
 * too few bytes in flight to keep HBM busy) and then tail element g; the
 * scalar form takes elements g, g + stride, ... Each is a fixed order per
 * (n, alignment), so the sum is reproducible either way. */
template <int MODE, bool VEC>
__global__ void __launch_bounds__(RED_THREADS) reduce_partial_kernel(double* partial, const float* x, size_t n) {
    __shared__ double buf[32];
    double acc = 0.0;
    const size_t stride = (size_t)RED_BLOCKS * RED_THREADS, g = (size_t)blockIdx.x * RED_THREADS + threadIdx.x;
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const size_t n4 = n / 4;
        size_t i = g;
        for (; i + 3 * stride < n4; i += 4 * stride) {
            float4 v[4];
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = __ldcs(x4 + i + k * stride);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                reduce_add<MODE>(acc, v[k].x);
                reduce_add<MODE>(acc, v[k].y);
                reduce_add<MODE>(acc, v[k].z);
                reduce_add<MODE>(acc, v[k].w);
            }
        }
        for (; i < n4; i += stride) {
            const float4 v = __ldcs(x4 + i);
            reduce_add<MODE>(acc, v.x);
            reduce_add<MODE>(acc, v.y);
            reduce_add<MODE>(acc, v.z);
            reduce_add<MODE>(acc, v.w);
        }
        if (g < n - 4 * n4) reduce_add<MODE>(acc, x[4 * n4 + g]);
    } else {
        for (size_t i = g; i < n; i += stride) reduce_add<MODE>(acc, x[i]);
    }
    acc = block_sum_d(acc, buf);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/* How the final block's sum v lands: written, added to what is there (the
 * host's `acc += ...` done on the device, one double add, so a sequence of
 * them sums in the host's order), or divided by n and rounded to float. */
enum { FINAL_SET, FINAL_ACC, FINAL_MEAN };

template <int FINAL>
__global__ void __launch_bounds__(RED_BLOCKS) reduce_final_kernel(void* out, const double* partial, unsigned nb,
                                                                  size_t n) {
    __shared__ double buf[32];
    double v = block_sum_d(threadIdx.x < nb ? partial[threadIdx.x] : 0.0, buf);
    if (threadIdx.x != 0) return;
    if (FINAL == FINAL_SET) *(double*)out = v;
    else if (FINAL == FINAL_ACC) *(double*)out += v;
    else *(float*)out = (float)(v / (double)n);
}

/* the sum (square: of squares) of x[n] into out, queued */
template <int FINAL>
static void reduce_queue(void* out, const float* x, size_t n, int square) {
    cudaStream_t s = cuda_stream();
    double* partial = (double*)cuda_scratch(SCRATCH_REDUCE, (RED_BLOCKS + 1) * sizeof(double));
    const bool vec = is_aligned16(x);
    /* the threads that find an element: float4s (and the < 4 tail elements) or elements */
    const size_t items = vec ? (n / 4 > n % 4 ? n / 4 : n % 4) : n;
    const size_t need = (items + RED_THREADS - 1) / RED_THREADS;
    const unsigned nb = need < RED_BLOCKS ? (unsigned)need : RED_BLOCKS;
    if (square && vec) reduce_partial_kernel<1, true><<<nb, RED_THREADS, 0, s>>>(partial, x, n);
    else if (square) reduce_partial_kernel<1, false><<<nb, RED_THREADS, 0, s>>>(partial, x, n);
    else if (vec) reduce_partial_kernel<0, true><<<nb, RED_THREADS, 0, s>>>(partial, x, n);
    else reduce_partial_kernel<0, false><<<nb, RED_THREADS, 0, s>>>(partial, x, n);
    CUDA_CHECK_LAUNCH("reduce_partial_kernel");
    reduce_final_kernel<FINAL><<<1, RED_BLOCKS, 0, s>>>(out, partial, nb, n);
    CUDA_CHECK_LAUNCH("reduce_final_kernel");
}

void ops_sumsq_acc(double* acc, const float* x, size_t n) {
    if (n) reduce_queue<FINAL_ACC>(acc, x, n, 1);
}
void ops_mean(float* mean, const float* x, size_t n) {
    if (!n) FATAL("ops_mean of an empty tensor");
    reduce_queue<FINAL_MEAN>(mean, x, n, 0);
}

static double reduce_run(const float* x, size_t n, int square) {
    if (!n) return 0.0;
    cudaStream_t s = cuda_stream();
    double* partial = (double*)cuda_scratch(SCRATCH_REDUCE, (RED_BLOCKS + 1) * sizeof(double));
    reduce_queue<FINAL_SET>(partial + RED_BLOCKS, x, n, square);
    double* h = (double*)cuda_pinned(SCRATCH_REDUCE, sizeof(double));
    CUDA_CHECK(cudaMemcpyAsync(h, partial + RED_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return h[0];
}

double ops_sumsq(const float* x, size_t n) { return reduce_run(x, n, 1); }
double ops_sum(const float* x, size_t n) { return reduce_run(x, n, 0); }

/* train/main.c's arithmetic of old, on the device: sqrt in double (IEEE,
 * correctly rounded, as the host's), the float division (IEEE without
 * fast-math) */
__global__ void grad_clip_kernel(StepScalars* s, float grad_clip) {
    const float norm = (float)sqrt(s->sumsq);
    s->norm = norm;
    s->scale = (grad_clip > 0 && norm > grad_clip) ? grad_clip / norm : 1.0f;
    s->skip = !isfinite(s->loss) || !isfinite(norm);
}

void ops_grad_clip(StepScalars* s, float grad_clip) {
    grad_clip_kernel<<<1, 1, 0, cuda_stream()>>>(s, grad_clip);
    CUDA_CHECK_LAUNCH("grad_clip_kernel");
}

/* Any non-finite element stores 1 into the flag (all writers store the same
 * value, so the race is benign and the answer deterministic). */
__global__ void nonfinite_kernel(int* flag, const float* x, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    bool bad = false;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) bad |= !isfinite(x[i]);
    if (bad) *flag = 1;
}

int ops_all_finite(const float* x, size_t n) {
    if (!n) return 1;
    cudaStream_t s = cuda_stream();
    int* flag = (int*)cuda_scratch(SCRATCH_REDUCE, (RED_BLOCKS + 1) * sizeof(double)); /* shares the slot */
    CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), s));
    nonfinite_kernel<<<RED_BLOCKS, RED_THREADS, 0, s>>>(flag, x, n);
    CUDA_CHECK_LAUNCH("nonfinite_kernel");
    int* h = (int*)cuda_pinned(SCRATCH_REDUCE, sizeof(double));
    CUDA_CHECK(cudaMemcpyAsync(h, flag, sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return h[0] == 0;
}
