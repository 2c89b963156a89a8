/*
 * tests/emu/emu_wgmma.cpp - the warpgroup MMA of ops/wgmma.cuh on the CPU emulator:
 * wgmma.mma_async m64n64k16 (bf16 in, fp32 accumulators), its descriptors and the
 * 128-byte swizzle, read from our reading of the PTX ISA, not from the kernels' helpers.
 *
 * Each thread keeps its own products: one is recorded when issued, with the descriptors
 * and, for a register A, the warp's 32 A fragments (a warp collective), and computed at
 * the wg_wait that retires its commit group, from shared memory as it is at that moment.
 * Between issue and retirement the thread's accumulators hold NaN, so code that reads them
 * before the wait, or a tile overwritten before the product that reads it has retired,
 * shows up as wrong results. What it checks besides: every product is committed before a
 * wait, the descriptors use the 128-byte swizzle from the first row of a 1024-byte
 * pattern (the only form the kernels use), and every element read lies inside the
 * block's dynamic shared memory.
 */
#include "tests/emu/emu_internal.h"

#include <math.h>
#include <string.h>

#include <deque>
#include <vector>

using emu::emu_fail;

namespace {

struct Product {
    float* d;          /* the thread's 32 accumulators */
    bool first;        /* the first pending product into d: starts from d0 */
    float d0[32];      /* d when that first product was issued */
    bool a_regs;       /* A from registers (a_tile) or from shared memory (da) */
    float a_tile[16][16];
    uint64_t da, db;
    int tb;            /* B MN-major */
    bool zero;         /* the scale-d predicate false: d = A B, from zero */
};

struct ThreadProducts {
    std::vector<Product> open;               /* issued, not committed */
    std::deque<std::vector<Product>> groups; /* committed, not retired */
};
std::vector<ThreadProducts> g_threads(emu::MAX_THREADS);

int thread_index() {
    return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}

float bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* element (mn, k) of a 128-byte-swizzled operand: K-major (row mn, column k) or
 * MN-major (row k, column mn) */
float operand(uint64_t desc, int mn, int k, bool mn_major) {
    const uint32_t start = (uint32_t)(desc & 0x3FFF) << 4;
    const uint32_t lbo = (uint32_t)((desc >> 16) & 0x3FFF) << 4;
    const uint32_t sbo = (uint32_t)((desc >> 32) & 0x3FFF) << 4;
    if ((desc >> 62) != 1 || ((desc >> 49) & 7) != 0)
        emu_fail("wgmma descriptor 0x%016llx: only the 128-byte swizzle with base offset 0 is emulated",
                 (unsigned long long)desc);
    if (start & 0x380)
        emu_fail("wgmma descriptor start 0x%x is not in the first row of a 1024-byte swizzle pattern "
                 "(misaligned tile)", start);
    uint32_t addr = mn_major ? start + (uint32_t)(mn / 64) * lbo + (uint32_t)(k / 8) * sbo + (uint32_t)(k % 8) * 128 +
                                   (uint32_t)(mn % 64) * 2
                             : start + (uint32_t)(mn / 8) * sbo + (uint32_t)(mn % 8) * 128 + (uint32_t)k * 2;
    addr ^= ((addr >> 7) & 7) << 4; /* the 16-byte chunk XOR the row within the pattern */
    if (addr + 2 > (uint32_t)emu::SMEM_BYTES) emu_fail("wgmma operand read past shared memory (offset %u)", addr);
    uint16_t h;
    memcpy(&h, emu_dynamic_smem() + addr, 2);
    return bf16_value(h);
}

/* D rows of warp w of the warpgroup: 16w + g + 8(e/2), column 8j + 2t + e%2 */
void compute(Product& p) {
    const int tid = thread_index(), w = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++) {
            const int r = g + 8 * (e / 2), col = 8 * j + 2 * t + e % 2;
            float acc = p.zero ? 0.0f : p.first ? p.d0[4 * j + e] : p.d[4 * j + e];
            for (int k = 0; k < 16; k++) {
                const float a = p.a_regs ? p.a_tile[r][k] : operand(p.da, 16 * w + r, k, false);
                acc += a * operand(p.db, col, k, p.tb != 0);
            }
            p.d[4 * j + e] = acc;
        }
}

} /* namespace */

void wg_fence() {}

void emu_wg_mma(float (&d)[8][4], const uint32_t* a, uint64_t da, uint64_t db, int tb, bool zero) {
    Product p;
    p.d = &d[0][0];
    p.zero = zero;
    p.a_regs = a != nullptr;
    p.da = da;
    p.db = db;
    p.tb = tb;
    if (a) {
        uint32_t mine[4];
        memcpy(mine, a, sizeof mine);
        const uint32_t (*frag)[4] = emu_warp_gather4(mine);
        /* mma.sync's A layout: lane 4g + t, register i, half h -> (row g + 8(i%2), column 2t + h + 8(i/2)) */
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++)
                for (int h = 0; h < 2; h++)
                    p.a_tile[l / 4 + 8 * (i % 2)][2 * (l % 4) + h + 8 * (i / 2)] =
                        bf16_value((uint16_t)(frag[l][i] >> (16 * h)));
    }
    ThreadProducts& tp = g_threads[thread_index()];
    bool pending = false;
    for (const Product& q : tp.open) pending |= q.d == p.d;
    for (const std::vector<Product>& grp : tp.groups)
        for (const Product& q : grp) pending |= q.d == p.d;
    p.first = !pending;
    if (p.first) {
        memcpy(p.d0, p.d, sizeof p.d0);
        for (int i = 0; i < 32; i++) p.d[i] = NAN;
    }
    tp.open.push_back(p);
}

void wg_commit() {
    ThreadProducts& tp = g_threads[thread_index()];
    tp.groups.push_back(tp.open);
    tp.open.clear();
}

void emu_wg_wait(int n) {
    ThreadProducts& tp = g_threads[thread_index()];
    if (!tp.open.empty()) emu_fail("wg_wait with %zu wgmma product(s) issued but not committed", tp.open.size());
    while ((int)tp.groups.size() > n) {
        for (Product& p : tp.groups.front()) compute(p);
        tp.groups.pop_front();
    }
}
