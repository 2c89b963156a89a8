/*
 * ops/encoder_cuda.cu - the embeddings of ops/ops.h: encoder_forward /
 * encoder_backward (token embedding, this rank's vocab slice of wte) and
 * position_forward / position_backward (wpe).
 *
 * Row-chunk kernels (cuda_common.cuh: rows_vec_ok, ld8/st8): rows of C bf16,
 * one thread per 8-column chunk, 16-byte accesses when C % 8 == 0 and the
 * pointers are aligned, scalar otherwise.
 *
 * Determinism: both backwards add into their fp32 gradient rows in the CPU
 * reference's exact order (dwte: positions of a token in increasing n, by
 * the host's plan of ops/encoder_plan.h; dwpe: b = 0..B-1), so the results are
 * bit-identical to the reference, with no float atomics.
 *
 * Dims: N = B*T rows, C channels, Vr vocab rows of this rank starting at
 * global id v0.
 */
#include "ops/cuda_common.cuh"
#include "ops/encoder_plan.h"

/* out[n,:] = wte[tok[n]-v0,:] inside the slice, else zeros */
template <bool VEC>
__global__ void encoder_forward_kernel(bf16* out, const int* tok, const bf16* wte, int N, int C, int v0, int Vr) {
    const int nch = (C + 7) / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * nch) return;
    int n = (int)(idx / nch), c = (int)(idx % nch) * 8;
    int row = tok[n] - v0;
    float f[8];
    if (row >= 0 && row < Vr) {
        ld8<VEC>(f, wte + (size_t)row * C, c, C);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) f[k] = 0.0f;
    }
    st8<VEC>(out + (size_t)n * C, c, C, f);
}

void encoder_forward(floatX* out, const int* tok, const floatX* wte, int N, int C, int v0, int Vr) {
    if (N <= 0 || C <= 0) return;
    size_t total = (size_t)N * ((C + 7) / 8);
    bf16* o = (bf16*)out;
    const bf16* w = (const bf16*)wte;
    if (rows_vec_ok(C) && is_aligned16(o) && is_aligned16(w))
        encoder_forward_kernel<true><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(o, tok, w, N, C, v0, Vr);
    else
        encoder_forward_kernel<false><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(o, tok, w, N, C, v0, Vr);
    CUDA_CHECK_LAUNCH("encoder_forward_kernel");
}

/* Encoder backward, deterministic. Positions holding the same token add into
 * the same dwte row, so the host groups them first (ops/encoder_plan.h: a
 * stable counting sort of the batch's ids by vocab row, made when the batch
 * is staged and copied in with it), and one block per touched row walks its
 * list in that order: dwte[row,c] = ((dwte + dout[n1]) + dout[n2]) + ..., the
 * CPU reference's exact order, so the result is bit-identical to it. The
 * grid is U = min(N, Vr) blocks, the most rows a batch can touch, and blocks
 * past the plan's nu return: the launch depends on the shape only, not on
 * the batch, as a CUDA graph replaying it needs. */
template <bool VEC>
__global__ void encoder_backward_kernel(float* dwte, const bf16* dout, const int* plan, int U, int C) {
    const int nu = plan[0];
    const int* rows = plan + 1;
    const int* start = plan + 1 + U;
    const int* pos = plan + 2 + 2 * U;
    const int nch = (C + 7) / 8;
    for (int u = blockIdx.x; u < nu; u += gridDim.x) {
        const int row = rows[u], p0 = start[u], p1 = start[u + 1];
        float* dw = dwte + (size_t)row * C;
        for (int ch = threadIdx.x; ch < nch; ch += blockDim.x) {
            const int c = ch * 8;
            float acc[8];
            if (VEC) {
                float4 a = *reinterpret_cast<const float4*>(dw + c);
                float4 b = *reinterpret_cast<const float4*>(dw + c + 4);
                acc[0] = a.x; acc[1] = a.y; acc[2] = a.z; acc[3] = a.w;
                acc[4] = b.x; acc[5] = b.y; acc[6] = b.z; acc[7] = b.w;
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] = (c + k < C) ? dw[c + k] : 0.0f;
            }
            for (int p = p0; p < p1; p++) {
                float d[8];
                ld8<VEC>(d, dout + (size_t)pos[p] * C, c, C);
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] += d[k];
            }
            if (VEC) {
                *reinterpret_cast<float4*>(dw + c) = make_float4(acc[0], acc[1], acc[2], acc[3]);
                *reinterpret_cast<float4*>(dw + c + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++)
                    if (c + k < C) dw[c + k] = acc[k];
            }
        }
    }
}

void encoder_backward(float* dwte, const floatX* dout, const int* plan, int N, int C, int Vr) {
    if (N <= 0 || C <= 0 || Vr <= 0) return;
    const int U = encoder_plan_rows(N, Vr);
    const bf16* d = (const bf16*)dout;
    if (rows_vec_ok(C) && is_aligned16(dwte) && is_aligned16(d))
        encoder_backward_kernel<true><<<U, 128, 0, cuda_stream()>>>(dwte, d, plan, U, C);
    else
        encoder_backward_kernel<false><<<U, 128, 0, cuda_stream()>>>(dwte, d, plan, U, C);
    CUDA_CHECK_LAUNCH("encoder_backward_kernel");
}

/* x[b,t,:] += wpe[t,:] */
template <bool VEC>
__global__ void position_forward_kernel(bf16* x, const bf16* wpe, int B, int T, int C) {
    const int nch = (C + 7) / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * nch) return;
    size_t bt = idx / nch;
    int c = (int)(idx % nch) * 8;
    int t = (int)(bt % T);
    float a[8], p[8];
    ld8<VEC>(a, x + bt * C, c, C);
    ld8<VEC>(p, wpe + (size_t)t * C, c, C);
#pragma unroll
    for (int k = 0; k < 8; k++) a[k] += p[k];
    st8<VEC>(x + bt * C, c, C, a);
}

void position_forward(floatX* x, const floatX* wpe, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    size_t total = (size_t)B * T * ((C + 7) / 8);
    bf16* px = (bf16*)x;
    const bf16* pw = (const bf16*)wpe;
    if (rows_vec_ok(C) && is_aligned16(px) && is_aligned16(pw))
        position_forward_kernel<true><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(px, pw, B, T, C);
    else
        position_forward_kernel<false><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(px, pw, B, T, C);
    CUDA_CHECK_LAUNCH("position_forward_kernel");
}

/* dwpe[t,:] += sum_b dx[b,t,:]: one thread per (t, chunk) adds b = 0..B-1 in
 * order onto dwpe, the CPU reference's order (bit-identical to it). */
template <bool VEC>
__global__ void position_backward_kernel(float* dwpe, const bf16* dx, int B, int T, int C) {
    const int nch = (C + 7) / 8;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * nch) return;
    int t = (int)(idx / nch), c = (int)(idx % nch) * 8;
    float* dp = dwpe + (size_t)t * C;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = (VEC || c + k < C) ? dp[c + k] : 0.0f;
    for (int b = 0; b < B; b++) {
        float d[8];
        ld8<VEC>(d, dx + ((size_t)b * T + t) * C, c, C);
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += d[k];
    }
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (VEC || c + k < C) dp[c + k] = acc[k];
}

void position_backward(float* dwpe, const floatX* dx, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    size_t total = (size_t)T * ((C + 7) / 8);
    const bf16* d = (const bf16*)dx;
    if (rows_vec_ok(C) && is_aligned16(d))
        position_backward_kernel<true><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(dwpe, d, B, T, C);
    else
        position_backward_kernel<false><<<ceil_div_u(total, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(dwpe, d, B, T, C);
    CUDA_CHECK_LAUNCH("position_backward_kernel");
}
