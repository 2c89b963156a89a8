/*
 * compress/cuda_pipeline.cuh - how a warp walks a job: its steps (32 units
 * each, the blocks of the grid taking turns) and the pipeline that keeps the
 * input rows of the next steps in flight while it computes on one.
 *
 * A kernel's warp takes its input rows step by step (InRows::take). Each take
 * first issues the copy S - 1 steps ahead into one of S shared-memory areas
 * (cuda_unit_io.cuh's rows_issue, cp.async), then waits for the oldest one and
 * reads the lane's row from its area. The few bytes that go with a row (an
 * FP8 copy's group exponent bytes and second scale) are loaded at issue time
 * into registers, and nothing reads those registers before the take that
 * needs them: an instruction that did would stall the warp for a whole memory
 * latency at every step (it did: replicating a G = 64 group byte, a
 * multiply right after its load, made the TACO decode 6% slower; H200,
 * 2026-12-03, compress/CUDA.md).
 */
#ifndef COMPRESS_CUDA_PIPELINE_CUH
#define COMPRESS_CUDA_PIPELINE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "compress/compress_cuda.h"
#include "compress/cuda_codec.cuh"
#include "compress/cuda_decode.cuh"
#include "compress/cuda_device.cuh"
#include "compress/cuda_unit_io.cuh"

namespace {

constexpr int THREADS = 128; /* threads per block */
constexpr int WARPS = THREADS / 32;
constexpr int TILE_UNITS = COMPRESS_WIRE_TILE / UNIT; /* a tile is one block's units */
static_assert(TILE_UNITS == THREADS, "a block holds one tile per step");

/* A warp's steps through a job: step t covers the 32 units from lu(t) (counted
 * from the job's u0); the blocks of the grid take turns, THREADS units each. */
struct WarpSteps {
    unsigned first, stride, nunits;
    __device__ __forceinline__ unsigned lu(unsigned t) const { return first + t * stride; }
    __device__ __forceinline__ bool has(unsigned t) const { return lu(t) < nunits; }
};
__device__ __forceinline__ WarpSteps warp_steps(const Span& sp, int warp) {
    WarpSteps s;
    s.first = blockIdx.x * THREADS + 32u * (unsigned)warp;
    s.stride = gridDim.x * THREADS;
    s.nunits = sp.u1 - sp.u0;
    return s;
}

/* The pipeline depths S of the kernels (areas of input rows per warp; S - 1
 * steps in flight while one is computed on), per kernel family, so that each
 * can be measured alone. */
#ifndef COMPRESS_STAGES
#define COMPRESS_STAGES 2
#endif
#ifndef DECOMPRESS_STAGES
#define DECOMPRESS_STAGES 2
#endif
static_assert(COMPRESS_STAGES >= 2 && COMPRESS_STAGES <= 4, "COMPRESS_STAGES is 2..4");
static_assert(DECOMPRESS_STAGES >= 2 && DECOMPRESS_STAGES <= 4, "DECOMPRESS_STAGES is 2..4");

/* The group bytes of a unit in two halves, a load and its use: G >= UNIT
 * (one group byte per unit, replicated over the four sub-blocks) loads the
 * byte alone and replicates it in group_bytes_word, when the take needs it;
 * the smaller groups (two or four bytes) are combined at once, as
 * load_group_bytes does (the rare shapes). */
__device__ __forceinline__ unsigned group_bytes_load(const GroupShape& c, const uint8_t* exps, unsigned g0, unsigned u,
                                                     int nv) {
    if (c.G >= UNIT) return (c.gb && nv > 0) ? (unsigned)exps[(unsigned)(((u64)UNIT * u) >> c.lg) - g0] : 0x7Fu;
    return load_group_bytes(c, exps, g0, u, nv);
}
__device__ __forceinline__ unsigned group_bytes_word(const GroupShape& c, unsigned loaded) {
    return c.G >= UNIT ? 0x01010101u * (loaded & 0xFFu) : loaded;
}

/* The warp's pipeline of input rows: steps are (unit step t, copy i), copy i
 * of P at bytes[i] (the job's unit u0; one array for a compress, P copies for
 * a decompress), taken in the order t = 0, 1, ..; i = 0 .. P-1. take()
 * issues the step S - 1 after the one it returns, so that many are always in
 * flight; the issue side keeps its own cursor (it, ii). LOADS: whether the
 * pipeline may load group bytes and scales (a decompress's; a compress loads
 * none, which its take can then rely on at compile time). */
template <int EB, int S, bool LOADS>
struct InRows {
    static_assert(S >= 2 && S <= 4, "a pipeline of 2..4 areas");
    uint4* area0; /* S areas back to back (no pointer array: it would live in local memory) */
    const uint8_t* const* bytes;
    int P;
    WarpSteps ws;
    Span sp;
    int lane;
    unsigned it; /* the next step to issue: (it, ii) */
    int ii;
    int a_issue, a_take; /* their areas */
    /* the copies' group bytes (FP8 inputs with a group byte: gshape.gb set) and
     * second scales (gscales set; NULL entry: 1.0f; one per tile when tiled,
     * else per chunk), loaded with the rows as group_bytes_load leaves them:
     * q_eb[0] / q_sc[0] belong to the oldest step in flight; eb / sc are the
     * taken step's */
    const uint8_t* const* gbytes;
    GroupShape gshape;
    const uint8_t* const* gscales;
    bool tiled;
    unsigned q_eb[S - 1], q_sc[S - 1];
    unsigned q_fast; /* bit k: step q[k]'s rows went by cp.async (the take reads them from its area) */
    unsigned eb, sc;

    __device__ __forceinline__ uint4* area(int k) const { return area0 + k * (area_bytes<EB>() / 16); }
    /* issue step (it, ii); its group bytes / scale / fast flag go to q[S - 2]
     * (the take reuses the flag rather than working it out again) */
    __device__ __forceinline__ void issue() {
        const unsigned t = it;
        const int i = ii;
        const bool has = ws.has(t);
        const WarpUnits w = warp_units(sp, ws.lu(t), lane); /* past the job: nv 0, not full */
        const bool fast = has && w.full && aligned16(bytes[i]);
        rows_issue<EB>(area(a_issue), fast ? bytes[i] + (size_t)EB * UNIT * ws.lu(t) : nullptr, lane);
        unsigned e = 0x7F7F7F7Fu, c = 0x3F800000u;
        if (gshape.gb && has)
            e = group_bytes_load(gshape, gbytes[i], (unsigned)(((u64)UNIT * sp.u0) >> gshape.lg), w.u, w.nv);
        if (gscales && has && gscales[i]) c = load_u32_any(gscales[i] + (tiled ? 4 * (size_t)(ws.lu(t) / TILE_UNITS) : 0));
        q_eb[S - 2] = e;
        q_sc[S - 2] = c;
        q_fast = (q_fast & ~(1u << (S - 2))) | (fast ? 1u << (S - 2) : 0u);
        a_issue = a_issue + 1 == S ? 0 : a_issue + 1;
        if (++ii == P) {
            ii = 0;
            it++;
        }
    }
    __device__ __forceinline__ void shift() {
#pragma unroll
        for (int k = 0; k + 1 < S - 1; k++) {
            q_eb[k] = q_eb[k + 1];
            q_sc[k] = q_sc[k + 1];
        }
        q_fast >>= 1;
    }
    __device__ __forceinline__ void start() {
        it = 0;
        ii = 0;
        a_issue = a_take = 0;
        eb = 0x7F7F7F7Fu;
        sc = 0x3F800000u;
        q_fast = 0u;
#pragma unroll
        for (int k = 0; k < S - 1; k++) {
            shift();
            issue();
        }
    }
    __device__ __forceinline__ void take(unsigned t, int i, const WarpUnits& w, Row<EB>& r) {
        (void)t; /* which step: the issue side keeps its own cursor, the flags their queue */
        const unsigned e = q_eb[0];
        const bool fast = q_fast & 1u;
        sc = q_sc[0];
        shift();
        issue();
        const bool reg_loads = LOADS && (gshape.gb || gscales != nullptr); /* later steps' loads in flight to registers */
        rows_take<EB, S - 1>(area(a_take), fast, reg_loads, bytes, i, (size_t)EB * UNIT * (w.lu0 + (unsigned)lane), w.nv,
                             lane, r);
        eb = gshape.gb ? group_bytes_word(gshape, e) : e; /* after the wait: the load has long landed */
        a_take = a_take + 1 == S ? 0 : a_take + 1;
    }
};

/* the staging areas of a warp in the block's dynamic shared memory: S for
 * input rows of EBI bytes per element, then one for output rows of EBO.
 * (Staging the output in the input area a take has just read, free until
 * the next issue, saves the last area; measured on the H200, 2026-12-03, it
 * bought nothing at S = 2, where registers and not shared memory bound the
 * resident blocks, and cost the FP8 encode 2-4% through 8 more bytes of
 * spill; S = 3 and 4 were no faster either, so the area stays.) */
template <int EBI, int EBO, int S>
__host__ __device__ constexpr int warp_smem_bytes() { return S * area_bytes<EBI>() + area_bytes<EBO>(); }
template <int EBI, int S, bool LOADS>
__device__ __forceinline__ uint4* out_area(const InRows<EBI, S, LOADS>& rows) { return rows.area0 + S * area_bytes<EBI>() / 16; }

} /* namespace */

#endif /* COMPRESS_CUDA_PIPELINE_CUH */
