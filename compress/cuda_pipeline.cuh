/*
 * compress/cuda_pipeline.cuh - how a warp walks a job: its steps (32 units
 * each, the blocks of the grid taking turns) and the pipeline that keeps the
 * input rows of the next steps in flight while it computes on one.
 *
 * A kernel's warp takes its input rows step by step (InRows::take). Each take
 * first issues the copy S - 1 steps ahead into one of S shared-memory areas
 * (cuda_unit_io.cuh's rows_issue, cp.async), then waits for the oldest one and
 * reads the lane's row from its area. The few bytes that go with a row (an
 * FP8 copy's group exponent bytes and second scale) come in one of two forms,
 * chosen per kernel (Loads, below): loaded at issue time into registers that
 * nothing reads before the take that needs them (an instruction that did
 * would stall the warp for a whole memory latency at every step: replicating
 * a G = 64 group byte right after its load made the TACO decode 6% slower;
 * H200, 2026-12-03), or copied by cp.async into the area's side words with
 * the rows and read from there after the take's wait.
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

/* How a pipeline's steps bring their group bytes and scales (InRows' M):
 *   LOADS_NONE  none (a compress, whose take relies on it at compile time)
 *   LOADS_REGS  loaded at the issue into registers, a queue of S - 1 steps,
 *               read at the take; the row of a rare step reaches r through
 *               its slot in the area (rows_take's slot_only)
 *   LOADS_SIDE  copied by cp.async into the step's side words, in the rows'
 *               commit group, read from shared memory after the take's wait
 * Why two forms: a register load sets a dependency barrier, which counts
 * loads, and ptxas gave the loads of every step the same one, so the take's
 * first use of its step's scale also waited for the loads that take had just
 * issued for a later step (33% of the TACO decode's stall samples, 19% of the
 * recompress's; H100, 2026-12-06). The side words remove that wait and cost
 * shared-memory traffic and instructions; on an H100 (2026-12-07,
 * compress/CUDA.md section 2) they made the recompresses and the TACO G=128
 * decoders 3-9% faster and the TACO G=64 decode and reduce 4-5% slower at
 * 256 MB, so each decompress kernel takes the form that served it
 * (decompress_loads, cuda_kernels.cuh). */
enum Loads { LOADS_NONE = 0, LOADS_REGS = 1, LOADS_SIDE = 2 };

/* A step's side words (LOADS_SIDE), after the S areas of rows: its group
 * word per lane in words 0-31 and its scale in word 32, put there by the
 * issue and read by the take. Two forms of words 0-31 (the step's flag says
 * which): copied by cp.async as they are on the wire, the 32 units' 2048 / G
 * group bytes from the warp's first (32 words at G = 16 ... 2 at G = 256; a
 * full warp with 4-byte aligned bytes and scale, the common case), or stored
 * by the lanes as group_bytes_word leaves them (any other step: loaded at
 * issue, and waited for there, which only a job's last warp and misaligned
 * wires do). */
constexpr int SIDE_WORDS = 36; /* 33 used; 144 bytes keep the areas after them 16-byte aligned */
template <int M>
__host__ __device__ constexpr int side_bytes() { return M == LOADS_SIDE ? 4 * SIDE_WORDS : 0; }
__device__ __forceinline__ bool aligned4(const void* p) { return ((uintptr_t)p & 3u) == 0; }

/* the lane's group word from the copied form (a full warp: all 64 elements
 * of each unit valid), as group_bytes_word(load_group_bytes(..)) gives it */
__device__ __forceinline__ unsigned side_group_word(const GroupShape& c, const uint32_t* sd, int lane) {
    const uint8_t* b = reinterpret_cast<const uint8_t*>(sd);
    if (c.G >= UNIT) return 0x01010101u * (unsigned)b[((unsigned)lane * UNIT) >> c.lg];
    if (c.G == 32) return 0x0101u * (unsigned)b[2 * lane] | (0x0101u * (unsigned)b[2 * lane + 1]) << 16;
    return sd[lane]; /* G = 16: a byte per 16-element sub-block */
}

/* The warp's pipeline of input rows: steps are (unit step t, copy i), copy i
 * of P at bytes[i] (the job's unit u0; one array for a compress, P copies for
 * a decompress), taken in the order t = 0, 1, ..; i = 0 .. P-1. take()
 * issues the step S - 1 after the one it returns, so that many are always in
 * flight; the issue side keeps its own cursor (it, ii). M: how the steps'
 * group bytes and scales come (Loads above). */
template <int EB, int S, int M>
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
     * else per chunk); eb / sc are the taken step's. LOADS_REGS: q_eb[0] /
     * q_sc[0] belong to the oldest step in flight, as group_bytes_load left them */
    const uint8_t* const* gbytes;
    GroupShape gshape;
    const uint8_t* const* gscales;
    bool tiled;
    unsigned q_eb[S - 1], q_sc[S - 1];
    unsigned q_fast; /* bit k: the k-th oldest step in flight had its rows copied by cp.async */
    unsigned q_copied; /* bit k: ... and its side words (the copied form; LOADS_SIDE) */
    unsigned eb, sc;

    __device__ __forceinline__ uint4* area(int k) const { return area0 + k * (area_bytes<EB>() / 16); }
    __device__ __forceinline__ uint32_t* side(int k) const {
        return reinterpret_cast<uint32_t*>(area0 + S * (area_bytes<EB>() / 16)) + k * SIDE_WORDS;
    }
    /* whether this pipeline's steps carry group bytes or scales at all */
    __device__ __forceinline__ bool carries() const { return M != LOADS_NONE && (gshape.gb || gscales != nullptr); }
    /* step (it, ii)'s side words into the issue area; returns whether copied */
    __device__ __forceinline__ bool issue_side(unsigned t, int i, const WarpUnits& w, bool has) {
        uint32_t* sd = side(a_issue);
        const unsigned g0 = (unsigned)(((u64)UNIT * sp.u0) >> gshape.lg);
        /* the warp's first group byte, and the step's scale (NULL: 1.0f) */
        const uint8_t* ga =
            has && gshape.gb ? gbytes[i] + ((unsigned)(((u64)UNIT * (sp.u0 + ws.lu(t))) >> gshape.lg) - g0) : nullptr;
        const uint8_t* sa =
            has && gscales && gscales[i] ? gscales[i] + (tiled ? 4 * (size_t)(ws.lu(t) / TILE_UNITS) : 0) : nullptr;
        const bool copied = has && w.full && (!ga || aligned4(ga)) && (!sa || aligned4(sa));
        if (copied) {
            const int nw = ga ? (int)((32u * UNIT) >> gshape.lg) / 4 : 0; /* 32 words at G = 16 ... 2 at 256 */
            if (lane < nw) cp_async4(sd + lane, ga + 4 * lane);
            if (lane == 31) {
                if (sa) cp_async4(sd + 32, sa);
                else sd[32] = 0x3F800000u;
            }
        } else {
            /* the area's last reader is past the take's __syncwarp() */
            sd[lane] = ga ? group_bytes_word(gshape, group_bytes_load(gshape, gbytes[i], g0, w.u, w.nv)) : 0x7F7F7F7Fu;
            if (lane == 31) sd[32] = sa ? load_u32_any(sa) : 0x3F800000u;
        }
        return copied;
    }
    /* issue step (it, ii); its flags (and LOADS_REGS: its group bytes and
     * scale) go to position S - 2 of the queues (the take reuses the flags
     * rather than working them out again) */
    __device__ __forceinline__ void issue() {
        const unsigned t = it;
        const int i = ii;
        const bool has = ws.has(t);
        const WarpUnits w = warp_units(sp, ws.lu(t), lane); /* past the job: nv 0, not full */
        const bool fast = has && w.full && aligned16(bytes[i]);
        bool copied = false;
        if constexpr (M == LOADS_SIDE) copied = carries() && issue_side(t, i, w, has); /* in the rows' group */
        rows_issue<EB>(area(a_issue), fast ? bytes[i] + (size_t)EB * UNIT * ws.lu(t) : nullptr, lane); /* commits */
        if constexpr (M == LOADS_REGS) {
            unsigned e = 0x7F7F7F7Fu, c = 0x3F800000u;
            if (gshape.gb && has)
                e = group_bytes_load(gshape, gbytes[i], (unsigned)(((u64)UNIT * sp.u0) >> gshape.lg), w.u, w.nv);
            if (gscales && has && gscales[i])
                c = load_u32_any(gscales[i] + (tiled ? 4 * (size_t)(ws.lu(t) / TILE_UNITS) : 0));
            q_eb[S - 2] = e;
            q_sc[S - 2] = c;
        }
        q_fast = (q_fast & ~(1u << (S - 2))) | (fast ? 1u << (S - 2) : 0u);
        q_copied = (q_copied & ~(1u << (S - 2))) | (copied ? 1u << (S - 2) : 0u);
        a_issue = a_issue + 1 == S ? 0 : a_issue + 1;
        if (++ii == P) {
            ii = 0;
            it++;
        }
    }
    __device__ __forceinline__ void shift() {
        if constexpr (M == LOADS_REGS) {
#pragma unroll
            for (int k = 0; k + 1 < S - 1; k++) {
                q_eb[k] = q_eb[k + 1];
                q_sc[k] = q_sc[k + 1];
            }
        }
        q_fast >>= 1;
        q_copied >>= 1;
    }
    __device__ __forceinline__ void start() {
        it = 0;
        ii = 0;
        a_issue = a_take = 0;
        eb = 0x7F7F7F7Fu;
        sc = 0x3F800000u;
        q_fast = q_copied = 0u;
#pragma unroll
        for (int k = 0; k < S - 1; k++) {
            shift();
            issue();
        }
    }
    __device__ __forceinline__ void take(unsigned t, int i, const WarpUnits& w, Row<EB>& r) {
        (void)t; /* which step: the issue side keeps its own cursor, the flags their queue */
        const bool fast = q_fast & 1u, copied = q_copied & 1u;
        const unsigned e = q_eb[0];
        if constexpr (M == LOADS_REGS) sc = q_sc[0];
        shift();
        issue();
        /* LOADS_REGS: later steps' loads are in flight to registers */
        rows_take<EB, S - 1>(area(a_take), fast, M == LOADS_REGS && carries(), bytes, i,
                             (size_t)EB * UNIT * (w.lu0 + (unsigned)lane), w.nv, lane, r);
        if constexpr (M == LOADS_REGS) {
            eb = gshape.gb ? group_bytes_word(gshape, e) : e; /* after the wait: the load has long landed */
        } else if constexpr (M == LOADS_SIDE) {
            if (carries()) { /* landed with the rows */
                const uint32_t* sd = side(a_take);
                eb = !gshape.gb ? 0x7F7F7F7Fu : copied ? side_group_word(gshape, sd, lane) : sd[lane];
                sc = sd[32];
            }
        }
        __syncwarp(); /* the area may be refilled by the next issue */
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
template <int EBI, int EBO, int S, int M>
__host__ __device__ constexpr int warp_smem_bytes() {
    return S * (area_bytes<EBI>() + side_bytes<M>()) + area_bytes<EBO>();
}
template <int EBI, int S, int M>
__device__ __forceinline__ uint4* out_area(const InRows<EBI, S, M>& rows) {
    return rows.area0 + S * (area_bytes<EBI>() + side_bytes<M>()) / 16;
}

} /* namespace */

#endif /* COMPRESS_CUDA_PIPELINE_CUH */
