/*
 * ops/bias_cuda.cu - bias_forward (x[n,:] += bias) and bias_backward (dbias
 * += column sums of dout, also matmul_backward's dbias), and the two-stage
 * deterministic column sum behind it, whose second stage (colsum_finish,
 * declared in cuda_common.cuh) layernorm_backward also uses for the dw / db
 * of rows wider than 1024 (narrower rows leave theirs to the next launch:
 * ops/colsum_deferred.cuh).
 *
 * Determinism: no float atomics; the row chunking depends only on (N, C), so
 * the partial sums and the order they are added in are the same on every run
 * and every device.
 */
#include "ops/cuda_common.cuh"

/* x[n,:] += bias */
template <bool VEC>
__global__ void bias_forward_kernel(bf16* x, const bf16* bias, int N, int C) {
    const int nch = (C + 7) / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * nch) return;
    size_t n = idx / nch;
    int c = (int)(idx % nch) * 8;
    float a[8], b[8];
    ld8<VEC>(a, x + n * C, c, C);
    ld8<VEC>(b, bias, c, C);
#pragma unroll
    for (int k = 0; k < 8; k++) a[k] += b[k];
    st8<VEC>(x + n * C, c, C, a);
}

void bias_forward(floatX* x, const floatX* bias, int N, int C) {
    if (N <= 0 || C <= 0) return;
    size_t total = (size_t)N * ((C + 7) / 8);
    bf16* px = (bf16*)x;
    const bf16* pb = (const bf16*)bias;
    if (rows_vec_ok(C) && is_aligned16(px) && is_aligned16(pb))
        bias_forward_kernel<true><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(px, pb, N, C);
    else
        bias_forward_kernel<false><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(px, pb, N, C);
    CUDA_CHECK_LAUNCH("bias_forward_kernel");
}

/* ---- deterministic column sums (bias_backward, and the second stage of the
 * layernorm dw/db reduction) ------------------------------------------------
 * Stage 1: block (32 x 8 threads) = 256 columns x one chunk of rows; thread
 * (tx, ty) sums rows ty, ty+8, ... of the chunk for its 8 columns; the 8
 * row-lanes are then added in ty order -> partial[chunk][c].
 * Stage 2: dst[c] += sum over chunks, in a fixed order (colsum_finish_kernel).
 * The chunking depends only on (N, C), so the result is reproducible. */
#define CS_COLS 256 /* columns per stage-1 block: 32 threads x 8 */

template <bool VEC>
__global__ void colsum_partial_kernel(float* partial, const bf16* x, int N, int C, int rows_per_chunk) {
    __shared__ float sm[8][CS_COLS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = (blockIdx.x * 32 + tx) * 8;
    const int r0 = blockIdx.y * rows_per_chunk;
    const int r1 = min(N, r0 + rows_per_chunk);
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    if (c < C) {
        for (int n = r0 + ty; n < r1; n += 8) {
            float d[8];
            ld8<VEC>(d, x + (size_t)n * C, c, C);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += d[k];
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) sm[ty][tx * 8 + k] = acc[k];
    __syncthreads();
    /* 256 threads, 256 columns of this block: thread j finishes column j */
    const int j = ty * 32 + tx;
    const int cj = blockIdx.x * CS_COLS + j;
    if (cj < C) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) s += sm[k][j];
        partial[(size_t)blockIdx.y * C + cj] = s;
    }
}

/* dst[c] += sum_{p < nparts} partial[p*pstride + c]. One thread per column
 * adding hundreds of partials in a row is latency-bound (tens of us), so a
 * block of CF_LANES x 32 threads takes 32 columns: lane ty adds parts ty,
 * ty + CF_LANES, ... in ascending order, then row ty = 0 adds the CF_LANES
 * lane sums in lane order. The order depends on nparts only: reproducible. */
#define CF_LANES 16
__global__ void __launch_bounds__(CF_LANES * 32)
colsum_finish_kernel(float* dst, const float* partial, int nparts, int C, size_t pstride) {
    __shared__ float sm[CF_LANES][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    float s = 0.0f;
    if (c < C) {
#pragma unroll 4
        for (int p = ty; p < nparts; p += CF_LANES) s += partial[(size_t)p * pstride + c];
    }
    sm[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < C) {
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < CF_LANES; k++) t += sm[k][tx];
        dst[c] += t;
    }
}

void colsum_finish(float* dst, const float* partial, int nparts, int C, size_t pstride) {
    colsum_finish_kernel<<<ceil_div_u(C, 32), dim3(32, CF_LANES), 0, cuda_stream()>>>(dst, partial, nparts, C, pstride);
    CUDA_CHECK_LAUNCH("colsum_finish_kernel");
}

void bias_backward(float* dbias, const floatX* dout, int N, int C) {
    if (N <= 0 || C <= 0) return;
    const int gx = (int)ceil_div_u(C, CS_COLS);
    /* about 1024 blocks in all, at least 32 rows per chunk */
    int nchunks = (int)ceil_div_u(N, 32);
    int cap = 1024 / gx > 1 ? 1024 / gx : 1;
    if (nchunks > cap) nchunks = cap;
    const int rpc = (int)ceil_div_u(N, nchunks);
    nchunks = (int)ceil_div_u(N, rpc);
    float* partial = (float*)cuda_scratch(SCRATCH_COLSUM, (size_t)nchunks * C * sizeof(float));
    const bf16* d = (const bf16*)dout;
    dim3 grid(gx, nchunks), block(32, 8);
    if (rows_vec_ok(C) && is_aligned16(d))
        colsum_partial_kernel<true><<<grid, block, 0, cuda_stream()>>>(partial, d, N, C, rpc);
    else
        colsum_partial_kernel<false><<<grid, block, 0, cuda_stream()>>>(partial, d, N, C, rpc);
    CUDA_CHECK_LAUNCH("colsum_partial_kernel");
    colsum_finish(dbias, partial, nchunks, C, (size_t)C);
}
