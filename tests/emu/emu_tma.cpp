/*
 * tests/emu/emu_tma.cpp - common/cuda_tma.cuh on the CPU emulator: the driver's
 * cuTensorMapEncodeTiled (found through cudaGetDriverEntryPointByVersion, as on the
 * GPU), the mbarriers of a block, the tile copies (cp.async.bulk.tensor) that
 * complete on them, and the tile stores back to global memory, read from our reading
 * of the PTX ISA and the driver API.
 *
 * A copy is checked when issued (map, destination alignment, inside the block's
 * dynamic shared memory, a barrier that was initialised and expects bytes) and then
 * lands at random: at once, or at the first wait on its barrier, its destination
 * reading NaN (0xFF bytes) until then, so a kernel that reads a tile before waiting
 * for it, or refills a stage that a product still reads, gets wrong results. A wait
 * for a phase that has not completed parks the thread until it has (emu_sched.cpp);
 * nothing that could complete it, a deadlock, is reported as one. A copy still in
 * flight when its block ends is an error (on the GPU it would write freed memory).
 * A store reads its shared tile at its commit or at the thread's wait, at random, so
 * a tile rewritten before the wait shows; one not waited for by the block's end is an
 * error too.
 */
#include "tests/emu/emu_internal.h"

#include <string.h>

#include <algorithm>
#include <map>
#include <vector>

using emu::emu_fail;
using emu::emu_park_mbar;
using emu::emu_rand_bit;

namespace {

/* what the encoder stores in the CUtensorMap's 128 bytes */
struct MapDesc {
    uint64_t magic;
    const unsigned char* base;
    int rank, esize, swizzle; /* swizzle: 0 or 128 (bytes) */
    uint64_t dims[3], strides[3]; /* strides[i]: bytes from one index of dimension i to the next */
    uint32_t box[3];
};
static_assert(sizeof(MapDesc) <= sizeof(CUtensorMap), "the emulated tensor map must fit a CUtensorMap");
const uint64_t MAP_MAGIC = 0x544d41454d55ull; /* "TMAEMU" */

struct TileCopy {
    MapDesc m;
    int c[3];
    unsigned char* dst;
};
struct MBar {
    unsigned expected = 0, pending = 0; /* arrivals per phase, and still missing in this one */
    long long tx = 0;                    /* bytes expected and not yet landed */
    unsigned phase = 0;                  /* phases completed */
    std::vector<TileCopy> copies;        /* issued, not landed */
};
std::map<uint32_t, MBar> g_bars; /* by offset in the block's shared memory */

/* a tile store (cp.async.bulk.tensor, shared -> global): done at issue or at the thread's
 * wait_group.read, at random; per thread, the stores not yet committed and those
 * committed and not yet waited for */
struct TileStore {
    MapDesc m;
    int c[3];
    const unsigned char* src;
};
struct ThreadStores {
    std::vector<TileStore> open, committed;
};
std::vector<ThreadStores> g_stores(emu::MAX_THREADS);
ThreadStores& my_stores() {
    return g_stores[threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)];
}

CUresult encode(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* base, const cuuint64_t* dims,
                const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t* estr, CUtensorMapInterleave il,
                CUtensorMapSwizzle swz, CUtensorMapL2promotion, CUtensorMapFloatOOBfill oob) {
    MapDesc m;
    memset(&m, 0, sizeof m);
    m.magic = MAP_MAGIC;
    m.base = (const unsigned char*)base;
    m.rank = (int)rank;
    switch (type) {
        case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: m.esize = 2; break;
        case CU_TENSOR_MAP_DATA_TYPE_FLOAT32: m.esize = 4; break;
        default: return CUDA_ERROR_INVALID_VALUE; /* the only two the kernels use */
    }
    /* 2-D and 3-D only, the kernels' shapes: a 1-D map of the backward's lse (B * NH * T
     * floats, boxes of 64) encoded on the GPU but stopped it with an illegal instruction
     * at T = 1 (H100, 2026-12-07), for a reason this emulator does not model. */
    if (rank < 2 || rank > 3 || !base || ((uintptr_t)base & 15) || il != CU_TENSOR_MAP_INTERLEAVE_NONE ||
        oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        return CUDA_ERROR_INVALID_VALUE;
    m.swizzle = swz == CU_TENSOR_MAP_SWIZZLE_NONE ? 0 : swz == CU_TENSOR_MAP_SWIZZLE_128B ? 128 : -1;
    if (m.swizzle < 0) return CUDA_ERROR_INVALID_VALUE;
    m.strides[0] = (uint64_t)m.esize;
    for (int i = 0; i < (int)rank; i++) {
        if (dims[i] == 0 || box[i] == 0 || box[i] > 256 || estr[i] != 1) return CUDA_ERROR_INVALID_VALUE;
        m.dims[i] = dims[i];
        m.box[i] = box[i];
        if (i > 0) {
            if (strides[i - 1] % 16) return CUDA_ERROR_INVALID_VALUE;
            m.strides[i] = strides[i - 1];
        }
    }
    const uint64_t inner = (uint64_t)box[0] * m.esize;
    if (inner % 16 || (m.swizzle && inner > (uint64_t)m.swizzle)) return CUDA_ERROR_INVALID_VALUE;
    memset(map, 0, sizeof *map);
    memcpy(map, &m, sizeof m);
    return CUDA_SUCCESS;
}

MBar& bar_at(uint64_t* bar, const char* what) {
    if ((uintptr_t)bar & 7) emu_fail("%s: mbarrier not 8-byte aligned", what);
    const uint32_t off = smem_u32(bar);
    auto it = g_bars.find(off);
    if (it == g_bars.end()) emu_fail("%s: mbarrier at shared offset %u was never initialised", what, off);
    return it->second;
}

size_t box_bytes(const MapDesc& m) {
    size_t n = (size_t)m.esize;
    for (int i = 0; i < m.rank; i++) n *= m.box[i];
    return n;
}

/* the 128-byte swizzle's place of byte `byte` of row r (no swizzle: byte itself) */
size_t box_at(const MapDesc& m, size_t r, size_t byte) {
    const size_t row_bytes = (size_t)m.box[0] * m.esize;
    return r * row_bytes + (m.swizzle ? ((((byte >> 4) ^ (r & 7)) << 4) | (byte & 15)) : byte);
}

/* The box of m at coordinates c, row by row (dimension 0 fastest): `rows` of them, the
 * box's columns [lo, hi) inside dimension 0, and row(r) the global address of row r's
 * column lo, or null when the row lies outside the tensor. */
struct BoxRows {
    const MapDesc& m;
    const int* c;
    size_t rows;
    int64_t lo, hi;
    BoxRows(const MapDesc& m_, const int* c_) : m(m_), c(c_) {
        rows = box_bytes(m) / ((size_t)m.box[0] * m.esize);
        lo = std::max<int64_t>(0, -(int64_t)c[0]);
        hi = std::min<int64_t>((int64_t)m.box[0], (int64_t)m.dims[0] - c[0]);
    }
    unsigned char* row(size_t r) const {
        const int64_t g1 = (int64_t)c[1] + (int64_t)(m.rank > 1 ? r % m.box[1] : 0);
        const int64_t g2 = (int64_t)c[2] + (int64_t)(m.rank > 2 ? r / m.box[1] : 0);
        const bool in = lo < hi && (m.rank < 2 || (g1 >= 0 && (uint64_t)g1 < m.dims[1])) &&
                        (m.rank < 3 || (g2 >= 0 && (uint64_t)g2 < m.dims[2]));
        if (!in) return nullptr;
        return const_cast<unsigned char*>(m.base) + (uint64_t)(m.rank > 1 ? g1 : 0) * m.strides[1] +
               (uint64_t)(m.rank > 2 ? g2 : 0) * m.strides[2] + (uint64_t)(c[0] + lo) * m.strides[0];
    }
};

/* the box's elements into shared memory, zeros outside the tensor; with the 128-byte
 * swizzle, 16-byte chunk c of each 128-byte row r goes to chunk c ^ (r % 8) */
void land(const TileCopy& t) {
    const MapDesc& m = t.m;
    const BoxRows box(m, t.c);
    for (size_t r = 0; r < box.rows; r++) {
        const unsigned char* src = box.row(r);
        if (src) emu_check_global(src, (size_t)(box.hi - box.lo) * m.esize, 1, "TMA tile source");
        for (int64_t i0 = 0; i0 < (int64_t)m.box[0]; i0++) {
            const size_t at = box_at(m, r, (size_t)i0 * m.esize);
            if (src && i0 >= box.lo && i0 < box.hi) memcpy(t.dst + at, src + (size_t)(i0 - box.lo) * m.esize, (size_t)m.esize);
            else memset(t.dst + at, 0, (size_t)m.esize);
        }
    }
}

/* the box's elements from shared memory (laid out as land leaves them) to the tensor;
 * those outside it are not written */
void store_now(const TileStore& t) {
    const MapDesc& m = t.m;
    const BoxRows box(m, t.c);
    for (size_t r = 0; r < box.rows; r++) {
        unsigned char* dst = box.row(r);
        if (!dst) continue;
        emu_check_global(dst, (size_t)(box.hi - box.lo) * m.esize, 1, "TMA tile store destination");
        for (int64_t i0 = box.lo; i0 < box.hi; i0++)
            memcpy(dst + (size_t)(i0 - box.lo) * m.esize, t.src + box_at(m, r, (size_t)i0 * m.esize), (size_t)m.esize);
    }
}

void complete_if_done(MBar& b) {
    if (b.pending == 0 && b.tx == 0 && b.copies.empty()) {
        b.phase++;
        b.pending = b.expected;
    }
}

void land_all(MBar& b) {
    for (const TileCopy& t : b.copies) {
        land(t);
        b.tx -= (long long)box_bytes(t.m);
    }
    b.copies.clear();
    if (b.tx < 0) emu_fail("mbarrier: the copies brought more bytes than mbar_expect_tx announced");
    complete_if_done(b);
}

void tma_load(void* dst, const CUtensorMap* map, const int* c, int rank, uint64_t* bar) {
    MapDesc m;
    memcpy(&m, map, sizeof m);
    if (m.magic != MAP_MAGIC) emu_fail("TMA copy from a tensor map that cuTensorMapEncodeTiled did not write");
    if (m.rank != rank) emu_fail("tma_load_%dd with a %d-d tensor map", rank, m.rank);
    const size_t n = box_bytes(m);
    const unsigned char* d = (const unsigned char*)dst;
    smem_u32(dst);
    smem_u32(d + n - 1); /* both ends inside the block's dynamic shared memory */
    if ((uintptr_t)smem_u32(dst) & (m.swizzle ? 1023 : 127))
        emu_fail("TMA destination not %d-byte aligned", m.swizzle ? 1024 : 128);
    MBar& b = bar_at(bar, "TMA copy");
    if (b.pending == b.expected && b.tx == 0)
        emu_fail("TMA copy on an mbarrier whose phase expects no bytes (mbar_expect_tx first)");
    TileCopy t;
    t.m = m;
    t.c[0] = c[0];
    t.c[1] = rank > 1 ? c[1] : 0;
    t.c[2] = rank > 2 ? c[2] : 0;
    t.dst = (unsigned char*)dst;
    if (emu_rand_bit()) { /* lands at once ... */
        land(t);
        b.tx -= (long long)n;
        if (b.tx < 0) emu_fail("mbarrier: the copies brought more bytes than mbar_expect_tx announced");
        complete_if_done(b);
        return;
    }
    memset(t.dst, 0xFF, n); /* ... or at the first wait: NaN until then */
    b.copies.push_back(t);
}

} /* namespace */

/* ---- the device side (emu_cuda.h) ---- */
void mbar_init(uint64_t* bar, unsigned count) {
    if ((uintptr_t)bar & 7) emu_fail("mbar_init: mbarrier not 8-byte aligned");
    if (count == 0) emu_fail("mbar_init with an arrival count of 0");
    MBar& b = g_bars[smem_u32(bar)];
    if (!b.copies.empty()) emu_fail("mbar_init on an mbarrier with copies in flight");
    b = MBar();
    b.expected = b.pending = count;
}

void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
    MBar& b = bar_at(bar, "mbar_expect_tx");
    if (b.pending == 0) emu_fail("mbar_expect_tx: more arrivals than the barrier's count in one phase");
    b.tx += bytes;
    b.pending--;
    complete_if_done(b);
}

void mbar_wait(uint64_t* bar, unsigned parity) {
    MBar& b = bar_at(bar, "mbar_wait");
    if ((b.phase & 1u) != (parity & 1u)) return; /* that phase has completed */
    land_all(b);
    if ((b.phase & 1u) != (parity & 1u)) return;
    emu_park_mbar(smem_u32(bar), parity & 1u);
}

namespace {

/* a store of map's box at c (rank coordinates) from src: checked, then queued */
void tma_store(const CUtensorMap* map, const int* c, int rank, const void* src) {
    MapDesc m;
    memcpy(&m, map, sizeof m);
    if (m.magic != MAP_MAGIC) emu_fail("TMA store to a tensor map that cuTensorMapEncodeTiled did not write");
    if (m.rank != rank) emu_fail("tma_store_%dd with a %d-d tensor map", rank, m.rank);
    const unsigned char* p = (const unsigned char*)src;
    smem_u32(src);
    smem_u32(p + box_bytes(m) - 1); /* both ends inside the block's dynamic shared memory */
    if ((uintptr_t)smem_u32(src) & (m.swizzle ? 1023 : 127))
        emu_fail("TMA store source not %d-byte aligned", m.swizzle ? 1024 : 128);
    TileStore t;
    t.m = m;
    t.c[0] = c[0], t.c[1] = c[1], t.c[2] = rank > 2 ? c[2] : 0;
    t.src = p;
    my_stores().open.push_back(t);
}

} /* namespace */

void tma_store_2d(const CUtensorMap* map, int c0, int c1, const void* src) {
    const int c[2] = {c0, c1};
    tma_store(map, c, 2, src);
}
void tma_store_3d(const CUtensorMap* map, int c0, int c1, int c2, const void* src) {
    const int c[3] = {c0, c1, c2};
    tma_store(map, c, 3, src);
}

void tma_store_commit() {
    ThreadStores& ts = my_stores();
    for (const TileStore& t : ts.open) {
        if (emu_rand_bit()) store_now(t); /* reads shared memory at once ... */
        else ts.committed.push_back(t);  /* ... or by the wait */
    }
    ts.open.clear();
}

void tma_store_wait_read() {
    ThreadStores& ts = my_stores();
    if (!ts.open.empty()) emu_fail("tma_store_wait_read with %zu TMA store(s) not committed", ts.open.size());
    for (const TileStore& t : ts.committed) store_now(t);
    ts.committed.clear();
}

void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
    const int c[2] = {c0, c1};
    tma_load(dst, map, c, 2, bar);
}
void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
    const int c[3] = {c0, c1, c2};
    tma_load(dst, map, c, 3, bar);
}

/* ---- the emulator's side (emu_internal.h) ---- */
bool emu::mbar_phase_done(uint32_t off, unsigned parity) {
    auto it = g_bars.find(off);
    if (it == g_bars.end()) return false;
    MBar& b = it->second;
    if ((b.phase & 1u) == parity) land_all(b);
    return (b.phase & 1u) != parity;
}

void emu::tma_block_start() { g_bars.clear(); }

void emu::tma_block_end() {
    for (ThreadStores& ts : g_stores)
        if (!ts.open.empty() || !ts.committed.empty())
            emu_fail("a TMA store was not waited for (tma_store_wait_read) before its block ended");
    for (auto& kv : g_bars)
        if (!kv.second.copies.empty() || kv.second.tx > 0)
            emu_fail("a TMA copy was still in flight (mbarrier at shared offset %u) when the block ended", kv.first);
    g_bars.clear();
}

void* emu::tma_encode_entry() { return (void*)&encode; }
