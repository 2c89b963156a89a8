/*
 * tests/test_ops_gpu_tma.cu - common/cuda_tma.cuh on its own (group "tma" of
 * build/gpu/test_ops_gpu, whose main in tests/test_ops_gpu.cu runs it), the same test
 * on the GPU and under the emulator: the tile loads of the attention kernels (3-D bf16
 * boxes in the 128-byte swizzle, 2-D fp32 rows without), their zeros past the tensor's
 * end, one mbarrier's phases over three fills, and the tile stores, which write only
 * inside the tensor. Every byte is checked against the layout the host works out from
 * the definitions (ops/wgmma.cuh: 16-byte chunk c of row r at chunk c ^ (r % 8)), so the
 * emulator's reading of the copy engine (tests/emu/emu_tma.cpp) is held to the
 * hardware's. Needs compute capability 9.0 (the emulator reports it).
 */
#include <string.h>

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/cuda_tma.cuh"
#include "ops/wgmma.cuh"
#include "tests/ops_gpu_testing.h"

namespace {

constexpr int TB = 2, TT = 100, TC = 192; /* the bf16 tensor: [TB][TT][TC] */
constexpr int RN = 4;                     /* the fp32 rows: [RN][TT] */
constexpr int FILLS = 3;
constexpr int TILE = 64 * 64;             /* one box: 64 rows of 64 bf16 */

struct Fill {
    int c0, c1, c2; /* the tile's corner: column, row, batch */
    int r0, r1;     /* the fp32 strip's: column, row */
};
/* inside; rows past TT (zeros); a corner 4 rows from the end */
const Fill FILL[FILLS] = {{0, 0, 0, 0, 0}, {128, 64, 1, 64, 2}, {64, 96, 0, 32, 3}};
constexpr int ST_C0 = 128, ST_C1 = 64, ST_C2 = 0, ST_R0 = 64, ST_R1 = 1; /* where the last fill is stored */

struct Maps {
    CUtensorMap src3, dst3, src2, dst2;
    Fill fill[FILLS]; /* FILL, as the kernel's parameter */
};

/* three fills of one tile and one strip on one barrier, each copied out as it landed;
 * then the last fill stored back to dst3 / dst2 */
__global__ void tma_probe(uint16_t* tiles, float* strips, const __grid_constant__ Maps m) {
    DYNAMIC_SMEM(raw);
    const uint32_t pad = (WG_TILE_ALIGN - (smem_u32(raw) & (WG_TILE_ALIGN - 1))) & (WG_TILE_ALIGN - 1);
    uint16_t* tile = reinterpret_cast<uint16_t*>(raw + pad);
    float* strip = reinterpret_cast<float*>(tile + TILE);
    uint64_t* bar = reinterpret_cast<uint64_t*>(strip + 64);
    mbar_init_block(bar, 1);
    for (int f = 0; f < FILLS; f++) {
        if (threadIdx.x == 0) {
            mbar_expect_tx(bar, TILE * 2 + 64 * 4);
            tma_load_3d(tile, &m.src3, m.fill[f].c0, m.fill[f].c1, m.fill[f].c2, bar);
            tma_load_2d(strip, &m.src2, m.fill[f].r0, m.fill[f].r1, bar);
        }
        mbar_wait(bar, (unsigned)f & 1u);
        for (int i = threadIdx.x; i < TILE; i += blockDim.x) tiles[f * TILE + i] = tile[i];
        for (int i = threadIdx.x; i < 64; i += blockDim.x) strips[f * 64 + i] = strip[i];
        __syncthreads(); /* before the next fill overwrites them */
    }
    fence_async_smem();
    __syncthreads();
    if (threadIdx.x == 0) {
        tma_store_3d(&m.dst3, ST_C0, ST_C1, ST_C2, tile);
        tma_store_2d(&m.dst2, ST_R0, ST_R1, strip);
        tma_store_commit();
        tma_store_wait_read();
    }
}

/* the swizzled box's element at shared position p (row p / 64, chunk (p % 64) / 8 holds
 * logical chunk that ^ (row % 8)) of the 64 x 64 box at (c0, c1, c2), or 0 outside */
uint16_t box_elem(const std::vector<uint16_t>& src, int p, int c0, int c1, int c2) {
    const int r = p / 64, chunk = ((p % 64) / 8) ^ (r % 8), col = c0 + chunk * 8 + p % 8, row = c1 + r;
    if (row >= TT || col >= TC) return 0;
    return src[((size_t)c2 * TT + row) * TC + col];
}

void put_map(CUtensorMap* map, const char* what, void* base, bool bf16) {
    if (bf16) {
        const uint64_t d[3] = {TC, TT, TB}, s[2] = {TC * 2, (uint64_t)TC * 2 * TT};
        const uint32_t box[3] = {64, 64, 1};
        tma_map_encode(map, what, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, d, s, box, CU_TENSOR_MAP_SWIZZLE_128B);
    } else {
        const uint64_t d[2] = {TT, RN}, s[1] = {TT * 4};
        const uint32_t box[2] = {64, 1};
        tma_map_encode(map, what, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, d, s, box, CU_TENSOR_MAP_SWIZZLE_NONE);
    }
}

void test_tma() {
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 9) {
        printf("%-22s %-40s  (skipped: the copy engine needs compute capability 9.0)\n", "tma", "");
        return;
    }
    const size_t n3 = (size_t)TB * TT * TC, n2 = (size_t)RN * TT;
    std::vector<uint16_t> src3(n3), dst3(n3, 0x7F7F); /* 0x7F7F: not written */
    std::vector<float> src2(n2), dst2(n2, -7.0f);
    for (size_t i = 0; i < n3; i++) src3[i] = (uint16_t)(rng_u64() & 0x3FFF) | 0x3C00; /* finite, non-zero */
    for (size_t i = 0; i < n2; i++) src2[i] = rng_normal();
    uint16_t *ds3, *dd3, *dtiles;
    float *ds2, *dd2, *dstrips;
    CUDA_CHECK(cudaMalloc(&ds3, n3 * 2));
    CUDA_CHECK(cudaMalloc(&dd3, n3 * 2));
    CUDA_CHECK(cudaMalloc(&ds2, n2 * 4));
    CUDA_CHECK(cudaMalloc(&dd2, n2 * 4));
    CUDA_CHECK(cudaMalloc(&dtiles, (size_t)FILLS * TILE * 2));
    CUDA_CHECK(cudaMalloc(&dstrips, (size_t)FILLS * 64 * 4));
    CUDA_CHECK(cudaMemcpy(ds3, src3.data(), n3 * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dd3, dst3.data(), n3 * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(ds2, src2.data(), n2 * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dd2, dst2.data(), n2 * 4, cudaMemcpyHostToDevice));
    Maps m;
    put_map(&m.src3, "test tma (src3)", ds3, true);
    put_map(&m.dst3, "test tma (dst3)", dd3, true);
    put_map(&m.src2, "test tma (src2)", ds2, false);
    put_map(&m.dst2, "test tma (dst2)", dd2, false);
    memcpy(m.fill, FILL, sizeof FILL);
    const size_t smem = WG_TILE_ALIGN + TILE * 2 + 64 * 4 + 8;
    CUDA_CHECK(cudaFuncSetAttribute(tma_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    tma_probe<<<1, 128, smem>>>(dtiles, dstrips, m);
    CUDA_CHECK_LAUNCH("tma_probe");
    std::vector<uint16_t> tiles((size_t)FILLS * TILE), got3(n3);
    std::vector<float> strips((size_t)FILLS * 64), got2(n2);
    CUDA_CHECK(cudaMemcpy(tiles.data(), dtiles, tiles.size() * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(strips.data(), dstrips, strips.size() * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(got3.data(), dd3, n3 * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(got2.data(), dd2, n2 * 4, cudaMemcpyDeviceToHost));

    char what[64];
    for (int f = 0; f < FILLS; f++) {
        const Fill& F = FILL[f];
        size_t bad = 0;
        for (int p = 0; p < TILE; p++) bad += tiles[(size_t)f * TILE + p] != box_elem(src3, p, F.c0, F.c1, F.c2);
        snprintf(what, sizeof what, "3-D bf16 load, fill %d (%d,%d,%d)", f, F.c0, F.c1, F.c2);
        report("tma", what, (double)bad, TOL_EXACT, nullptr);
        bad = 0;
        for (int i = 0; i < 64; i++) {
            const float want = F.r0 + i < TT ? src2[(size_t)F.r1 * TT + F.r0 + i] : 0.0f;
            bad += memcmp(&strips[(size_t)f * 64 + i], &want, 4) != 0;
        }
        snprintf(what, sizeof what, "2-D fp32 load, fill %d (%d,%d)", f, F.r0, F.r1);
        report("tma", what, (double)bad, TOL_EXACT, nullptr);
    }
    /* the stores: the last fill's logical element (r, col) to (ST_C0 + col, ST_C1 + r, ST_C2)
     * where that is inside the tensor; everything else keeps the sentinel */
    const Fill& L = FILL[FILLS - 1];
    size_t bad = 0;
    for (int c2 = 0; c2 < TB; c2++)
        for (int row = 0; row < TT; row++)
            for (int col = 0; col < TC; col++) {
                const int r = row - ST_C1, cc = col - ST_C0;
                uint16_t want = 0x7F7F;
                if (c2 == ST_C2 && r >= 0 && r < 64 && cc >= 0 && cc < 64) {
                    const int lr = L.c1 + r, lc = L.c0 + cc;
                    want = lr < TT && lc < TC ? src3[((size_t)L.c2 * TT + lr) * TC + lc] : 0;
                }
                bad += got3[((size_t)c2 * TT + row) * TC + col] != want;
            }
    report("tma", "3-D bf16 store, rows past T skipped", (double)bad, TOL_EXACT, nullptr);
    bad = 0;
    for (int r1 = 0; r1 < RN; r1++)
        for (int t = 0; t < TT; t++) {
            const int i = t - ST_R0;
            float want = -7.0f;
            if (r1 == ST_R1 && i >= 0 && i < 64) want = L.r0 + i < TT ? src2[(size_t)L.r1 * TT + L.r0 + i] : 0.0f;
            bad += memcmp(&got2[(size_t)r1 * TT + t], &want, 4) != 0;
        }
    report("tma", "2-D fp32 store, rows past T skipped", (double)bad, TOL_EXACT, nullptr);
    CUDA_CHECK(cudaFree(ds3));
    CUDA_CHECK(cudaFree(dd3));
    CUDA_CHECK(cudaFree(ds2));
    CUDA_CHECK(cudaFree(dd2));
    CUDA_CHECK(cudaFree(dtiles));
    CUDA_CHECK(cudaFree(dstrips));
}

} /* namespace */

void test_ops_gpu_tma(const char* only) {
    if (!only || strstr("tma", only)) test_tma();
}
