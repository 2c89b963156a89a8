/*
 * ops/attention_cuda.cu - fused causal self-attention (flash-attention
 * style) for attention_forward / attention_backward of ops/ops.h, and its
 * grouped-query form attention_gqa_forward / attention_gqa_backward
 * (Qwen2), of which the first two are the case NKV = NH.
 *
 * Layout (ops.h): qkv[B,T,(NH+2*NKV)*hs] holds q of the NH local heads, then
 * k of the NKV local kv heads, then v (head h at column h*hs of its part);
 * query head h reads kv head h / (NH/NKV). out[B,T,NH*hs]; lse[B,NH,T] is the
 * natural-log log-sum-exp of each row of scaled scores s = q.k / sqrt(hs),
 * the only state saved for the backward. Nothing of size T^2 is stored.
 *
 * Tensor cores through mma.sync.m16n8k16 (bf16 in, fp32 accumulate) with
 * ldmatrix loads from shared memory, and cp.async tile loads in 2-3 stages;
 * at hs = 64 on Hopper through the warpgroup MMA instead (ops/wgmma.cuh, the
 * kernels' WG form; attention_cuda_init decides, ops/ATTENTION.md has the numbers),
 * the tiles then coming by TMA (common/cuda_tma.cuh; att_map_rows, att_maps).
 * Every kernel uses 4 warps; each warp owns 16 rows of the block's tile, so a
 * warp's softmax statistics and accumulators never leave its registers.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16, lane = 4*g + t, g = lane/4, t = lane%4):
 *   A 16x16 (row):  reg0 = A[g][2t..2t+1], reg1 = A[g+8][2t..], reg2 = A[g][2t+8..], reg3 = A[g+8][2t+8..]
 *   B 16x8  (col):  reg0 = B[2t..2t+1][g],  reg1 = B[2t+8..2t+9][g]
 *   C 16x8  (f32):  c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
 * Two consecutive C tiles (n = 16 columns) re-packed to bf16 are exactly one
 * A fragment with k = those 16 columns: that is how P (and dS) feed the next
 * product without a trip through shared memory.
 *
 * Kernels (tile = 64 rows unless noted; grid.z walks tiles heaviest first,
 * so the long causal rows start early and the short ones fill the tail):
 *   forward:   block = (b, h, 64 queries). Loops over key tiles 0..diagonal:
 *              S = Q K^T, online softmax (running max m, sum l, in log2
 *              units), O += P V. Writes out = O / l and lse = (m + log2 l) ln 2.
 *   backward:  dq first, then dk/dv, which reads the D = rowsum(dout * out)
 *              that dq forms for its rows.
 *     dk/dv:   block = (b, kv head, 64 keys), each warp 16 keys. Loops over
 *              the group's query heads and, for each, over query tiles from
 *              the diagonal to T: S^T = K Q^T, P^T = exp(S^T - lse),
 *              dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D),
 *              dK += dS^T Q. dK, dV stay in registers, summed over the
 *              group's heads in head order; one write at the end.
 *     dq:      block = (b, h, 64 queries), each warp 16 queries. First D
 *              of its rows (written for dk/dv too), then loops over key
 *              tiles 0..diagonal: S, P, dP = dO V^T, dS, dQ += dS K.
 *   Splitting dq from dk/dv recomputes S and dP once more (7 instead of 5
 *   tile products) but makes every output element the sum of one thread in
 *   a fixed order: no atomics, bit-identical runs.
 *
 * GQA costs GPT-2 nothing: the kernels only take NKV for their row stride
 * and kv-head offsets (one integer division per block, or per tile step in
 * dk/dv), and NKV = NH gives exactly the old addresses, order of operations
 * and so the old bits.
 *
 * hs: any multiple of 16 from 16 to 128 (template instantiations). For
 * hs > 64 the backward narrows its inner tile to 32 to stay inside 255
 * registers without spills.
 *
 * The kernels are in ops/attention_kernels.cuh (which the CPU emulation
 * of tests/emu also compiles); this file holds the launchers.
 */
#include <math.h>

#include <stdlib.h>
#include <string.h>

#include "ops/cuda_common.cuh"
#include "ops/ops_cuda.h"
#include "ops/attention_kernels.cuh"
#include "ops/attention_bwd_kernels.cuh"

/* ------------------------------------------------------------------------------ */
/* host side */

static void attn_check_args(const char* who, const void* a, const void* b, const void* c, int B, int T, int NH, int NKV,
                            int hs) {
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || NH % NKV != 0)
        FATAL("%s: bad shape B=%d T=%d NH=%d NKV=%d (NKV must divide NH)", who, B, T, NH, NKV);
    if (hs < 16 || hs > 128 || hs % 16 != 0)
        FATAL("%s: head size hs=%d is not supported: the tensor-core kernels need hs a multiple of 16 "
              "in 16..128 (n_embd / n_head); add an instantiation in %s for larger heads", who, hs, __FILE__);
    if (!is_aligned16(a) || !is_aligned16(b) || (c && !is_aligned16(c)))
        FATAL("%s: activation pointers must be 16-byte aligned (cp.async); ops_malloc'd buffers are", who);
    if ((size_t)((T + 63) / 64) > 65535u)
        FATAL("%s: T=%d is too long for the grid (max %d)", who, T, 65535 * 64);
}

/* raise the dynamic shared memory limit once per kernel instantiation */
template <typename K>
static void attn_set_smem(K kernel, size_t bytes, bool* done) {
    if (*done) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = true;
}

/* Whether the hs = 64 kernels run in their warpgroup-MMA form (WG = true): only code
 * built for sm_90a has wgmma, and the driver runs that code only on a Hopper GPU, so
 * attention_cuda_init asks the device which build it runs (a one-thread probe).
 * ATT_WGMMA=0 in the environment keeps the mma.sync kernels (to compare the two). */
static int g_att_wgmma = 0;

__global__ void attn_wgmma_probe(int* flag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(ATT_EMULATE)
    *flag = 1;
#else
    *flag = 0;
#endif
}

void attention_cuda_init(void) {
    const char* env = getenv("ATT_WGMMA");
    if (env && strcmp(env, "0") == 0) {
        g_att_wgmma = 0;
        return;
    }
    int* flag = nullptr;
    int host = 0;
    CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
    CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
    attn_wgmma_probe<<<1, 1>>>(flag);
    CUDA_CHECK_LAUNCH("attn_wgmma_probe");
    CUDA_CHECK(cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(flag));
    g_att_wgmma = host;
}

int attention_uses_wgmma(void) { return g_att_wgmma; }

/* att_block's group of (head, batch row) pairs: as many as ATT_RASTER_BYTES of their
 * streamed tiles hold (two T x hs bf16 matrices per pair), at least 1, at most all */
static int att_raster(int npairs, int T, int hs) {
    const size_t per = (size_t)2 * T * hs * sizeof(bf16);
    const size_t n = ATT_RASTER_BYTES / (per ? per : 1);
    return (int)(n < 1 ? 1 : n > (size_t)npairs ? (size_t)npairs : n);
}

/* Whether a [B * NH][T] fp32 per-row vector (lse, D) can be copied in 16-byte pieces
 * (cp.async) or as TMA rows (a row stride of whole 16 bytes): T % 4 == 0, aligned base */
static int att_rows16(int T, const float* p) { return T % 4 == 0 && is_aligned16(p); }

/* The tensors the WG kernels copy by TMA, described anew at each call (a few
 * microseconds of host time; a captured graph keeps the values it was given).
 * att_map_rows: a [B][T][cols] bf16 activation in 64 x 64 boxes, 128-byte swizzle. */
static void att_map_rows(CUtensorMap* m, const char* what, const bf16* base, int B, int T, size_t cols) {
    const uint32_t tile[3] = {64, 64, 1};
    const uint64_t d[3] = {(uint64_t)cols, (uint64_t)T, (uint64_t)B}, s[2] = {cols * 2, cols * 2 * T};
    tma_map_encode(m, what, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, d, s, tile, CU_TENSOR_MAP_SWIZZLE_128B);
}
/* att_map_lse: a [B * NH][T] fp32 per-row vector (lse, D) in boxes of 64 rows; T % 4 == 0 */
static void att_map_lse(CUtensorMap* m, const char* what, const float* base, int B, int T, int NH) {
    const uint32_t rows[2] = {64, 1};
    const uint64_t d[2] = {(uint64_t)T, (uint64_t)B * NH}, s[1] = {(uint64_t)T * sizeof(float)};
    tma_map_encode(m, what, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, d, s, rows, CU_TENSOR_MAP_SWIZZLE_NONE);
}
static AttMaps att_maps(const bf16* dqkv, const bf16* qkv, const bf16* dout, const bf16* out, const float* lse,
                        const float* Dbuf, int B, int T, int NH, int NKV, int HS) {
    AttMaps m;
    memset(&m, 0, sizeof m);
    att_map_rows(&m.qkv, "attention_backward (qkv)", qkv, B, T, (size_t)(NH + 2 * NKV) * HS);
    att_map_rows(&m.dqkv, "attention_backward (dqkv)", dqkv, B, T, (size_t)(NH + 2 * NKV) * HS);
    att_map_rows(&m.dout, "attention_backward (dout)", dout, B, T, (size_t)NH * HS);
    att_map_rows(&m.out, "attention_backward (out)", out, B, T, (size_t)NH * HS);
    if (att_rows16(T, lse) && att_rows16(T, Dbuf)) {
        att_map_lse(&m.lse, "attention_backward (lse)", lse, B, T, NH);
        att_map_lse(&m.dsum, "attention_backward (D)", Dbuf, B, T, NH);
    }
    return m;
}

template <int HS, bool WG>
static void attn_forward_run(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV) {
    static bool smem_set = false;
    const size_t smem = FwdCfg<HS, WG>::SMEM;
    attn_set_smem(attn_fwd_kernel<HS, WG>, smem, &smem_set);
    const float scale_log2 = LOG2E / sqrtf((float)HS);
    const unsigned blocks = (unsigned)(NH * B) * ((T + FwdCfg<HS, WG>::BM - 1) / FwdCfg<HS, WG>::BM);
    AttFwdMaps maps;
    memset(&maps, 0, sizeof maps);
    if (WG) {
        att_map_rows(&maps.qkv, "attention_forward (qkv)", qkv, B, T, (size_t)(NH + 2 * NKV) * HS);
        att_map_rows(&maps.out, "attention_forward (out)", out, B, T, (size_t)NH * HS);
        maps.rows = att_rows16(T, lse);
        if (maps.rows) att_map_lse(&maps.lse, "attention_forward (lse)", lse, B, T, NH);
    }
    attn_fwd_kernel<HS, WG><<<blocks, ATT_THREADS, smem, cuda_stream()>>>(out, lse, qkv, B, T, NH, NKV, scale_log2,
                                                                         att_raster(NH * B, T, HS), maps);
    CUDA_CHECK_LAUNCH("attn_fwd_kernel");
}

template <int HS>
static void attn_forward_launch(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV) {
    if (HS == 64 && g_att_wgmma) attn_forward_run<64, true>(out, lse, qkv, B, T, NH, NKV);
    else attn_forward_run<HS, false>(out, lse, qkv, B, T, NH, NKV);
}

/* the dQ kernel, which also writes D = rowsum(dout * out), then the dK/dV kernel, which reads it */
template <int HS, bool WG>
static void attn_backward_run(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                              int B, int T, int NH, int NKV) {
    static bool smem_dkdv = false, smem_dq = false;
    cudaStream_t s = cuda_stream();
    const float scale = 1.0f / sqrtf((float)HS);
    const float scale_log2 = LOG2E * scale;
    float* Dbuf = (float*)cuda_scratch(SCRATCH_ATTN_D, (size_t)B * NH * T * sizeof(float));
    AttMaps maps;
    if (WG) maps = att_maps(dqkv, qkv, dout, out, lse, Dbuf, B, T, NH, NKV, HS);
    else memset(&maps, 0, sizeof maps);
    {
        const size_t smem = DqCfg<HS, WG>::SMEM;
        attn_set_smem(attn_bwd_dq_kernel<HS, WG>, smem, &smem_dq);
        const unsigned blocks = (unsigned)(NH * B) * ((T + DqCfg<HS, WG>::BM - 1) / DqCfg<HS, WG>::BM);
        attn_bwd_dq_kernel<HS, WG><<<blocks, ATT_THREADS, smem, s>>>(dqkv, dout, qkv, out, lse, Dbuf, B, T, NH, NKV,
                                                                     scale_log2, scale, att_raster(NH * B, T, HS), maps);
        CUDA_CHECK_LAUNCH("attn_bwd_dq_kernel");
    }
    {
        const size_t smem = DkvCfg<HS, WG>::SMEM;
        attn_set_smem(attn_bwd_dkdv_kernel<HS, WG>, smem, &smem_dkdv);
        /* one block per kv head, batch row and key tile */
        const unsigned blocks = (unsigned)(NKV * B) * ((T + DkvCfg<HS, WG>::BN - 1) / DkvCfg<HS, WG>::BN);
        /* the per-step lse and D rows go by cp.async when they are 16-byte aligned */
        const int rows16 = att_rows16(T, lse) && att_rows16(T, Dbuf);
        attn_bwd_dkdv_kernel<HS, WG><<<blocks, ATT_THREADS, smem, s>>>(dqkv, dout, qkv, lse, Dbuf, B, T, NH, NKV,
                                                                       scale_log2, scale, rows16,
                                                                       att_raster(NKV * B, T, HS * (NH / NKV)), maps);
        CUDA_CHECK_LAUNCH("attn_bwd_dkdv_kernel");
    }
}

template <int HS>
static void attn_backward_launch(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                                 int B, int T, int NH, int NKV) {
    if (HS == 64 && g_att_wgmma) attn_backward_run<64, true>(dqkv, dout, qkv, out, lse, B, T, NH, NKV);
    else attn_backward_run<HS, false>(dqkv, dout, qkv, out, lse, B, T, NH, NKV);
}

#define ATT_DISPATCH(hs, CALL)                                   \
    switch (hs) {                                                \
        case 16: CALL(16); break;                                \
        case 32: CALL(32); break;                                \
        case 48: CALL(48); break;                                \
        case 64: CALL(64); break;                                \
        case 80: CALL(80); break;                                \
        case 96: CALL(96); break;                                \
        case 112: CALL(112); break;                              \
        case 128: CALL(128); break;                              \
        default: FATAL("attention: unsupported head size %d", hs); \
    }

void attention_gqa_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int NKV, int hs) {
    attn_check_args("attention_forward", out, qkv, nullptr, B, T, NH, NKV, hs);
#define FWD_CALL(HS) attn_forward_launch<HS>((bf16*)out, lse, (const bf16*)qkv, B, T, NH, NKV)
    ATT_DISPATCH(hs, FWD_CALL)
#undef FWD_CALL
}

void attention_gqa_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                            const float* lse, int B, int T, int NH, int NKV, int hs) {
    attn_check_args("attention_backward", dqkv, dout, qkv, B, T, NH, NKV, hs);
    if (!is_aligned16(out)) FATAL("attention_backward: out must be 16-byte aligned");
#define BWD_CALL(HS) \
    attn_backward_launch<HS>((bf16*)dqkv, (const bf16*)dout, (const bf16*)qkv, (const bf16*)out, lse, B, T, NH, NKV)
    ATT_DISPATCH(hs, BWD_CALL)
#undef BWD_CALL
}

void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int hs) {
    attention_gqa_forward(out, lse, qkv, B, T, NH, NH, hs);
}

void attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, int B, int T, int NH, int hs) {
    attention_gqa_backward(dqkv, dout, qkv, out, lse, B, T, NH, NH, hs);
}
