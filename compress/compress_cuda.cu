/*
 * compress/compress_cuda.cu - the host side of compress_cuda.h: a method's
 * Codec from its row in methods.h, the launch geometry, jobs into launches,
 * the whole-chunk functions and the device statistics.
 *
 * The device code lives in headers, one idea each: cuda_device.cuh (the
 * arithmetic, bit-exact with the CPU reference), cuda_unit_io.cuh (a unit's
 * loads and stores), cuda_codec.cuh (one unit through a method's encode),
 * cuda_decode.cuh (its decode and sums), cuda_kernels.cuh (the kernels);
 * selftest_cuda.cu checks the hardware fp8 conversion, SR's rounding and the
 * Philox words. compress/CUDA.md has the design.
 *
 * Work mapping (cuda_codec.cuh): one thread owns a UNIT of 64 consecutive
 * elements of a chunk, 64 / G whole groups for G <= 64 (one group at G =
 * 64), or a 64-element part of a group held by G / 64 lanes (G = 128, 256).
 * The Hadamard's stages inside 64 elements run in registers; only G = 128 /
 * 256 add one / two stages of shuffles. A warp's 32 units go through shared
 * memory so that every global access is coalesced (cuda_unit_io.cuh).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/cuda_check.h"
#include "compress/compress_cuda.h"
#include "compress/cuda_host.h"
#include "compress/cuda_kernels.cuh"
#include "compress/hadamard.h"
#include "compress/methods.h"

/* Every launch here goes through LAUNCH, which also launches a kernel picked
 * at run time through a function pointer; under the CPU emulator (tests/emu)
 * its <<<>>> is rewritten into emu_launch like every other launch in a .cu
 * file (compress/CUDA.md, "Running the kernels without a GPU"). */
#ifndef LAUNCH
#define LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#endif

/* Everything a kernel needs to know about p's method: its row in methods.h,
 * resolved for p as compress.c's taco_cfg_of resolves it for the CPU. */
static Codec codec_of(const CompressParams* p, const char* who) {
    compress_params_check(p, who);
    const CompressMethodInfo* m = compress_method_info(p->method);
    const CompressWireLayout l = compress_wire_layout(p);
    const CompressSwitches sw = compress_method_switches(p);
    Codec c;
    memset(&c, 0, sizeof(c));
    c.fam = m->family == CM_FAM_RAW ? FAM_NONE : m->family == CM_FAM_INT8 ? FAM_INT8 : FAM_FP8;
    c.cast = m->family == CM_FAM_CAST;
    c.fmt = (int)p->format;
    c.L = fp8_max(p->format);
    c.stochastic = p->stochastic != 0;
    c.seed = p->seed;
    c.G = l.G; /* UNIT for methods without groups */
    c.hdr = l.hdr;
    c.tiled = l.tbytes > 0;
    c.gran = l.gran;
    c.gb = l.gbytes;
    c.eb = l.ebytes;
    c.hadamard = sw.hadamard;
    c.adaptive = sw.adaptive;
    c.dual = sw.dual;
    /* a chunk scale is computed from the transformed values: the amax its history needs */
    c.stats_amax_r = m->hdr > 0 || m->tbytes > 0;
    /* taco_encode's rule: a delayed amax is used when > 0 and finite, else the current one */
    const float delayed_amax = compress_method_delayed_amax(p);
    if (c.dual && delayed_amax > 0.0f && isfinite(delayed_amax)) {
        c.delayed = 1;
        c.delayed_amax = delayed_amax;
    }
    /* a job's device amax (CompressJobDev.delayed_amax) is honoured where a host one would be */
    const CompressMethodInfo* mi = compress_method_info(p->method);
    c.delayed_dev = c.dual && p->delayed && (mi->hdr > 0 || mi->tbytes > 0);
    c.tpg = c.G > UNIT ? c.G / UNIT : 1;
    c.lg = 0;
    while ((1 << c.lg) < c.G) c.lg++;
    c.norm = hadamard_norm(c.G);
    return c;
}

/* 1 if the chunk scale needs the current chunk amax: an amax pass first */
static bool needs_amax_pass(const Codec& c) { return c.fam == FAM_FP8 && !c.cast && c.dual && !c.delayed && !c.tiled; }

int compress_dev_num_sms(void) {
    static int cached[64];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) FATAL("compress_cuda: device index %d out of range", dev);
    if (!cached[dev]) CUDA_CHECK(cudaDeviceGetAttribute(&cached[dev], cudaDevAttrMultiProcessorCount, dev));
    return cached[dev];
}

/* A kernel and the dynamic shared memory a block of it takes (its warps'
 * staging areas, cuda_kernels.cuh). */
struct Kernel {
    const void* fn;
    int smem;
};

/* Resident blocks per SM of a kernel at its shared memory, cached per kernel
 * (one device per process). The first use also raises the kernel's dynamic
 * shared memory limit, which starts at 48 KB. */
static int blocks_per_sm(const Kernel& k) {
    constexpr int MAX_KERNELS = 256; /* above the number of kernels this file builds (87 with the shapes, 2026-12-03) */
    static const void* keys[MAX_KERNELS];
    static int vals[MAX_KERNELS];
    static int used = 0;
    for (int i = 0; i < used; i++)
        if (keys[i] == k.fn) return vals[i];
    CUDA_CHECK(cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem));
    int nb = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k.fn, THREADS, (size_t)k.smem));
    if (nb < 1) nb = 1;
    if (used == MAX_KERNELS) FATAL("compress_cuda: more than %d kernels in the occupancy cache (raise MAX_KERNELS)", MAX_KERNELS);
    keys[used] = k.fn;
    vals[used] = nb;
    used++;
    return nb;
}

/* grid: enough blocks to fill the chip once (grid-stride beyond), split over the jobs */
static dim3 grid_for(const Kernel& k, u64 max_units, int njobs) {
    const u64 want = (max_units + THREADS - 1) / THREADS;
    u64 cap = (u64)compress_dev_num_sms() * (u64)blocks_per_sm(k) / (u64)njobs;
    if (cap < 1) cap = 1;
    u64 gx = want < cap ? want : cap;
    if (gx < 1) gx = 1;
    return dim3((unsigned)gx, (unsigned)njobs, 1);
}

static u64 ceil_div_u64(u64 a, u64 b) { return (a + b - 1) / b; }

static void check_range(const Codec& c, const CompressJobDev* j, const char* who) {
    const u64 gran = (u64)c.gran;
    if (j->e0 > j->e1 || j->e1 > j->n) FATAL("%s: job range [%zu, %zu) is outside its chunk of %zu elements", who, j->e0, j->e1, j->n);
    if (j->e0 % gran != 0 || (j->e1 % gran != 0 && j->e1 != j->n))
        FATAL("%s: job range [%zu, %zu) must start (and end, unless at the chunk end %zu) on a multiple of %llu elements",
              who, j->e0, j->e1, j->n, (unsigned long long)gran);
}

static Span span_of(const CompressJobDev* j, const char* who) {
    if (j->n >= ((size_t)1 << 35)) FATAL("%s: a chunk of %zu elements is too large (at most 2^35 - 1)", who, j->n);
    Span s;
    s.u0 = (unsigned)(j->e0 / UNIT);
    s.u1 = (unsigned)ceil_div_u64(j->e1, UNIT);
    s.nfull = (unsigned)(j->n / UNIT);
    s.tail = (unsigned)(j->n % UNIT);
    return s;
}

static CJob cjob_of(const Codec& c, const CompressJobDev* j, int encode, const char* who) {
    check_range(c, j, who);
    CJob r;
    r.x = j->x;
    r.scale = ((c.hdr && j->e0 == 0) || c.tiled) ? j->out.scale : nullptr;
    r.exps = c.gb ? j->out.exps : nullptr;
    r.codes = j->out.codes;
    r.sp = span_of(j, who);
    r.stream = j->stream;
    r.st = j->st;
    r.damax = j->delayed_amax;
    if (!r.x && r.sp.u1 > r.sp.u0) FATAL("%s: job without an input pointer", who);
    if (encode) { /* the amax pass writes nothing but the slot */
        if (!r.codes && r.sp.u1 > r.sp.u0) FATAL("%s: job without an element-byte pointer", who);
        if (c.gb && !r.exps && r.sp.u1 > r.sp.u0) FATAL("%s: job without a group-byte pointer", who);
        if (c.hdr && j->e0 == 0 && !r.scale) FATAL("%s: the range at element 0 needs the scale pointer", who);
        if (c.tiled && !r.scale && r.sp.u1 > r.sp.u0) FATAL("%s: job without the pointer to its tile scales", who);
    }
    return r;
}

int compress_dev_two_pass(const CompressParams* p) {
    return needs_amax_pass(codec_of(p, "compress_dev_two_pass"));
}

/* what a decompress kernel reads: its input's code path */
static int in_kind(const Codec& c) {
    if (c.fam == FAM_FP8) return c.fmt == FP8_E4M3 ? IN_E4M3 : IN_E5M2;
    if (c.fam == FAM_INT8) return IN_INT8;
    return c.eb == 4 ? IN_F32 : IN_BF16;
}

/* The fused recompress kernels are built for the pairs an all-reduce uses:
 * FP8 in and out in the same format (any methods and switches), or raw words
 * in and out (the exact path). Other pairs go through an fp32 sum. */
static bool can_fuse(const Codec& ci, const Codec& co) {
    if (ci.fam == FAM_FP8 && co.fam == FAM_FP8) return ci.fmt == co.fmt;
    return ci.fam == FAM_NONE && co.fam == FAM_NONE;
}

int compress_dev_can_fuse(const CompressParams* p_in, const CompressParams* p_out) {
    return can_fuse(codec_of(p_in, "compress_dev_can_fuse"), codec_of(p_out, "compress_dev_can_fuse")) ? 1 : 0;
}

typedef void (*CKernel)(Codec, CLaunch);

template <int FAM, int FMT, bool SR, int SHAPE>
static Kernel compress_kernel_in(int bf16) {
    if (bf16) return Kernel{(const void*)k_compress<FAM, FMT, SR, true, SHAPE>, compress_smem_bytes<true, FAM>()};
    return Kernel{(const void*)k_compress<FAM, FMT, SR, false, SHAPE>, compress_smem_bytes<false, FAM>()};
}
/* the kernel of the codec's shape (cuda_codec.cuh); the shapes that do not
 * fit the family are never built */
template <int FAM, int FMT, bool SR, int SHAPE>
static Kernel compress_kernel_fit(int bf16) {
    if constexpr (shape_fits(FAM, SHAPE)) return compress_kernel_in<FAM, FMT, SR, SHAPE>(bf16);
    else return compress_kernel_in<FAM, FMT, SR, SHAPE_ANY>(bf16);
}
template <int FAM, int FMT, bool SR>
static Kernel compress_kernel_shaped(const Codec& c, int bf16) {
    switch (shape_of(c)) {
    case SHAPE_GROUP64: return compress_kernel_fit<FAM, FMT, SR, SHAPE_GROUP64>(bf16);
    case SHAPE_TENSOR: return compress_kernel_fit<FAM, FMT, SR, SHAPE_TENSOR>(bf16);
    case SHAPE_GROUP128: return compress_kernel_fit<FAM, FMT, SR, SHAPE_GROUP128>(bf16);
    case SHAPE_WIDE128: return compress_kernel_fit<FAM, FMT, SR, SHAPE_WIDE128>(bf16);
    case SHAPE_INT8_64: return compress_kernel_fit<FAM, FMT, SR, SHAPE_INT8_64>(bf16);
    default: return compress_kernel_in<FAM, FMT, SR, SHAPE_ANY>(bf16);
    }
}
static Kernel compress_kernel(const Codec& c, int bf16) {
    if (c.fam == FAM_NONE) return compress_kernel_in<FAM_NONE, 0, false, SHAPE_ANY>(bf16);
    if (c.fam == FAM_INT8) return compress_kernel_shaped<FAM_INT8, 0, false>(c, bf16); /* SR is a run-time branch there */
    if (c.fmt == FP8_E4M3)
        return c.stochastic ? compress_kernel_shaped<FAM_FP8, FP8_E4M3, true>(c, bf16) : compress_kernel_shaped<FAM_FP8, FP8_E4M3, false>(c, bf16);
    return c.stochastic ? compress_kernel_shaped<FAM_FP8, FP8_E5M2, true>(c, bf16) : compress_kernel_shaped<FAM_FP8, FP8_E5M2, false>(c, bf16);
}
static Kernel amax_kernel(int bf16) {
    if (bf16) return Kernel{(const void*)k_amax<true>, compress_smem_bytes<true, FAM_FP8>()};
    return Kernel{(const void*)k_amax<false>, compress_smem_bytes<false, FAM_FP8>()};
}

/* jobs -> launches of at most MAX_JOBS */
static void launch_compress(const Codec& c, int bf16, const CompressJobDev* jobs, int njobs, int amax_pass,
                            cudaStream_t s, const char* who) {
    for (int first = 0; first < njobs; first += MAX_JOBS) {
        CLaunch L;
        memset(&L, 0, sizeof(L));
        L.njobs = njobs - first < MAX_JOBS ? njobs - first : MAX_JOBS;
        u64 max_units = 0;
        for (int i = 0; i < L.njobs; i++) {
            L.job[i] = cjob_of(c, &jobs[first + i], !amax_pass, who);
            if (L.job[i].sp.u1 - L.job[i].sp.u0 > max_units) max_units = L.job[i].sp.u1 - L.job[i].sp.u0;
            if (amax_pass && !L.job[i].st) FATAL("%s: current chunk scaling needs a CompressStatsDev per job (its amax slot)", who);
        }
        const Kernel k = amax_pass ? amax_kernel(bf16) : compress_kernel(c, bf16);
        const dim3 grid = grid_for(k, max_units, L.njobs);
        LAUNCH(((CKernel)k.fn), grid, THREADS, k.smem, s, c, L);
        CUDA_CHECK_LAUNCH(amax_pass ? "k_amax" : "k_compress");
    }
}

void compress_jobs_amax_dev(const CompressParams* p, int x_is_bf16, const CompressJobDev* jobs, int njobs, cudaStream_t s) {
    if (!compress_dev_two_pass(p) || njobs <= 0) return;
    launch_compress(codec_of(p, "compress_jobs_amax_dev"), x_is_bf16, jobs, njobs, 1, s, "compress_jobs_amax_dev");
}

void compress_jobs_encode_dev(const CompressParams* p, int x_is_bf16, const CompressJobDev* jobs, int njobs, cudaStream_t s) {
    if (njobs <= 0) return;
    const Codec c = codec_of(p, "compress_jobs_encode_dev");
    if (needs_amax_pass(c))
        for (int i = 0; i < njobs; i++)
            if (!jobs[i].st) FATAL("compress_jobs_encode_dev: current chunk scaling needs job.st (the amax slot of pass 1)");
    launch_compress(c, x_is_bf16, jobs, njobs, 0, s, "compress_jobs_encode_dev");
}

typedef void (*DKernel)(Codec, Codec, DLaunch);

template <int IN, int OUT, int FMT_OUT, bool SR, int SHAPE = SHAPE_ANY>
static Kernel dkernel() {
    return Kernel{(const void*)k_decompress<IN, OUT, FMT_OUT, SR, SHAPE>, decompress_smem_bytes<IN, OUT, SHAPE>()};
}
/* the kernel for OUT of the input codec's shape (and, for OUT_RECOMP, the
 * output's: `shape` is SHAPE_ANY unless both have it); the shapes that do not
 * fit the input's family are never built */
template <int IN, int OUT, int FMT_OUT, bool SR, int SHAPE>
static Kernel dkernel_fit() {
    constexpr int FAM = IN == IN_E4M3 || IN == IN_E5M2 ? FAM_FP8 : IN == IN_INT8 ? FAM_INT8 : FAM_NONE;
    if constexpr (shape_fits(FAM, SHAPE)) return dkernel<IN, OUT, FMT_OUT, SR, SHAPE>();
    else return dkernel<IN, OUT, FMT_OUT, SR, SHAPE_ANY>();
}
template <int IN, int OUT, int FMT_OUT, bool SR>
static Kernel dkernel_shaped(int shape) {
    switch (shape) {
    case SHAPE_GROUP64: return dkernel_fit<IN, OUT, FMT_OUT, SR, SHAPE_GROUP64>();
    case SHAPE_TENSOR: return dkernel_fit<IN, OUT, FMT_OUT, SR, SHAPE_TENSOR>();
    case SHAPE_GROUP128: return dkernel_fit<IN, OUT, FMT_OUT, SR, SHAPE_GROUP128>();
    case SHAPE_WIDE128: return dkernel_fit<IN, OUT, FMT_OUT, SR, SHAPE_WIDE128>();
    case SHAPE_INT8_64: return dkernel_fit<IN, OUT, FMT_OUT, SR, SHAPE_INT8_64>();
    default: return dkernel<IN, OUT, FMT_OUT, SR, SHAPE_ANY>();
    }
}
/* a sum of two or more copies to bf16: its own kernel (resident blocks) for
 * the straight-line FP8 shapes, the plain bf16 decoder otherwise */
template <int IN>
static Kernel dkernel_sum(int shape) {
    if constexpr (IN == IN_E4M3 || IN == IN_E5M2) {
        if (shape == SHAPE_GROUP64) return dkernel<IN, OUT_BF16_SUM, 0, false, SHAPE_GROUP64>();
        if (shape == SHAPE_TENSOR) return dkernel<IN, OUT_BF16_SUM, 0, false, SHAPE_TENSOR>();
    }
    return dkernel_shaped<IN, OUT_BF16, 0, false>(shape);
}
template <int IN>
static Kernel decompress_kernel_in(int out, int shape) {
    switch (out) {
    case OUT_F32: return dkernel_shaped<IN, OUT_F32, 0, false>(shape);
    case OUT_BF16: return dkernel_shaped<IN, OUT_BF16, 0, false>(shape);
    case OUT_BF16_SUM: return dkernel_sum<IN>(shape);
    default: return dkernel<IN, OUT_AMAX, 0, false>(); /* the amax pass of fp8_tensor's current scaling: rare */
    }
}
static Kernel decompress_kernel(int out, const Codec& ci, const Codec& co) {
    const int in = in_kind(ci);
    if (out == OUT_RECOMP) { /* can_fuse(ci, co) holds */
        const bool sr = co.fam == FAM_FP8 && co.stochastic;
        const int shape = shape_of(ci) == shape_of(co) ? shape_of(ci) : SHAPE_ANY;
        if (in == IN_E4M3) return sr ? dkernel_shaped<IN_E4M3, OUT_RECOMP, FP8_E4M3, true>(shape) : dkernel_shaped<IN_E4M3, OUT_RECOMP, FP8_E4M3, false>(shape);
        if (in == IN_E5M2) return sr ? dkernel_shaped<IN_E5M2, OUT_RECOMP, FP8_E5M2, true>(shape) : dkernel_shaped<IN_E5M2, OUT_RECOMP, FP8_E5M2, false>(shape);
        if (in == IN_BF16) return dkernel<IN_BF16, OUT_RECOMP, 0, false>();
        return dkernel<IN_F32, OUT_RECOMP, 0, false>();
    }
    switch (in) {
    case IN_E4M3: return decompress_kernel_in<IN_E4M3>(out, shape_of(ci));
    case IN_E5M2: return decompress_kernel_in<IN_E5M2>(out, shape_of(ci));
    case IN_INT8: return decompress_kernel_in<IN_INT8>(out, shape_of(ci));
    case IN_BF16: return decompress_kernel_in<IN_BF16>(out, SHAPE_ANY);
    default: return decompress_kernel_in<IN_F32>(out, SHAPE_ANY);
    }
}

void decompress_jobs_dev(const CompressParams* p_in, const CompressJobDev* jobs, int njobs, CompressDevMode mode,
                         const CompressParams* p_out, cudaStream_t s) {
    static const char* who = "decompress_jobs_dev";
    if (njobs <= 0) return;
    const int needs_out = mode == CDEV_REDUCE_AMAX || mode == CDEV_REDUCE_RECOMPRESS;
    if (needs_out && !p_out) FATAL("%s: mode %d needs p_out", who, (int)mode);
    if (mode == CDEV_REDUCE_ROTATED_F32 && !p_out) FATAL("%s: mode %d needs p_out", who, (int)mode);
    Codec ci = codec_of(p_in, who);
    Codec co = needs_out ? codec_of(p_out, who) : ci;
    /* taco into taco: the sum stays rotated and is encoded without the
     * transform (decompress_sum_recompress); ROTATED_F32 writes that sum */
    if ((mode == CDEV_REDUCE_RECOMPRESS || mode == CDEV_REDUCE_ROTATED_F32) && compress_sum_stays_rotated(p_in, p_out)) {
        ci.keep = 1;
        if (needs_out) {
            const CompressParams pe = compress_recompress_params(p_in, p_out);
            co = codec_of(&pe, who);
        }
    }
    int out = OUT_F32;
    switch (mode) {
    case CDEV_DECODE_F32: case CDEV_REDUCE_F32: case CDEV_REDUCE_ROTATED_F32: out = OUT_F32; break;
    case CDEV_DECODE_BF16: case CDEV_REDUCE_BF16: out = OUT_BF16; break;
    case CDEV_REDUCE_AMAX: out = OUT_AMAX; break;
    case CDEV_REDUCE_RECOMPRESS: out = OUT_RECOMP; break;
    default: FATAL("%s: unknown mode %d", who, (int)mode);
    }
    if (mode == CDEV_REDUCE_RECOMPRESS && !can_fuse(ci, co))
        FATAL("%s: %s sums are not re-compressed as %s in one kernel (compress_dev_can_fuse; use an fp32 sum)", who,
              ci.fam == FAM_FP8 ? (ci.fmt == FP8_E4M3 ? "E4M3" : "E5M2") : ci.fam == FAM_INT8 ? "int8_group" : "raw",
              co.fam == FAM_FP8 ? (co.fmt == FP8_E4M3 ? "E4M3" : "E5M2") : co.fam == FAM_INT8 ? "int8_group" : "raw");
    if (mode == CDEV_REDUCE_AMAX && !needs_amax_pass(co))
        FATAL("%s: the amax pass is only for current dual scaling", who);

    int first = 0;
    while (first < njobs) {
        DLaunch L;
        memset(&L, 0, sizeof(L));
        int nin_used = 0, nin_min = MAX_IN;
        u64 max_units = 0;
        while (first < njobs && L.njobs < MAX_JOBS) {
            const CompressJobDev* j = &jobs[first];
            if (j->nin < 1 || j->nin > MAX_IN) FATAL("%s: a job sums 1..%d inputs, not %d", who, MAX_IN, j->nin);
            if (nin_used + j->nin > MAX_IN) break;
            check_range(ci, j, who);
            if (needs_out) check_range(co, j, who);
            DJob& d = L.job[L.njobs];
            d.y = j->y;
            d.sp = span_of(j, who);
            d.stream = j->stream;
            d.st = j->st;
            d.damax = j->delayed_amax;
            d.in_first = nin_used;
            d.nin = j->nin;
            if (out == OUT_RECOMP) {
                d.oscale = ((co.hdr && j->e0 == 0) || co.tiled) ? j->out.scale : nullptr;
                d.oexps = co.gb ? j->out.exps : nullptr;
                d.ocodes = j->out.codes;
                if (co.hdr && j->e0 == 0 && !d.oscale) FATAL("%s: the range at element 0 needs out.scale", who);
                if (co.tiled && !d.oscale && d.sp.u1 > d.sp.u0) FATAL("%s: recompress job without its tile scales", who);
                if (d.sp.u1 > d.sp.u0 && (!d.ocodes || (co.gb && !d.oexps))) FATAL("%s: recompress job without output pointers", who);
            }
            if ((out == OUT_AMAX || out == OUT_RECOMP) && !d.st && needs_amax_pass(co))
                FATAL("%s: current chunk scaling needs job.st (the amax slot)", who);
            if ((out == OUT_F32 || out == OUT_BF16) && !d.y && d.sp.u1 > d.sp.u0) FATAL("%s: job without an output pointer", who);
            for (int i = 0; i < j->nin; i++) {
                L.in[nin_used + i].scale = (ci.hdr || ci.tiled) ? j->in[i].scale : nullptr;
                L.in[nin_used + i].exps = ci.gb ? j->in[i].exps : nullptr;
                L.in[nin_used + i].codes = j->in[i].codes;
                if (d.sp.u1 > d.sp.u0 && (!j->in[i].codes || (ci.gb && !j->in[i].exps) || ((ci.hdr || ci.tiled) && !j->in[i].scale)))
                    FATAL("%s: input %d of a job lacks a wire pointer", who, i);
            }
            nin_used += j->nin;
            if (j->nin < nin_min) nin_min = j->nin;
            if (d.sp.u1 - d.sp.u0 > max_units) max_units = d.sp.u1 - d.sp.u0;
            L.njobs++;
            first++;
        }
        const Kernel k = decompress_kernel(out == OUT_BF16 && nin_min >= 2 ? OUT_BF16_SUM : out, ci, co);
        const dim3 grid = grid_for(k, max_units, L.njobs);
        LAUNCH(((DKernel)k.fn), grid, THREADS, k.smem, s, ci, co, L);
        CUDA_CHECK_LAUNCH("k_decompress");
    }
}

/* the three parts of a whole chunk in the standard wire (methods.h) */
static CompressWireOut wire_out(const CompressWireLayout& l, uint8_t* out, size_t n) {
    CompressWireOut w;
    w.scale = (l.hdr || l.tbytes) ? out : nullptr; /* the chunk scale, or tile 0's */
    w.exps = l.gbytes ? out + compress_wire_groups_offset(&l, n) : nullptr;
    w.codes = out + compress_wire_codes_offset(&l, n);
    return w;
}
static CompressWireIn wire_in(const CompressWireLayout& l, const uint8_t* in, size_t n) {
    CompressWireIn w;
    w.scale = (l.hdr || l.tbytes) ? in : nullptr;
    w.exps = l.gbytes ? in + compress_wire_groups_offset(&l, n) : nullptr;
    w.codes = in + compress_wire_codes_offset(&l, n);
    return w;
}

/* ---- statistics ----------------------------------------------------------- */

CompressStatsDev* compress_stats_dev_alloc(int count) {
    if (count < 1) count = 1;
    CompressStatsDev* st = nullptr;
    CUDA_CHECK(cudaMalloc((void**)&st, sizeof(CompressStatsDev) * (size_t)count));
    CUDA_CHECK(cudaMemset(st, 0, sizeof(CompressStatsDev) * (size_t)count));
    return st;
}

void compress_stats_dev_free(CompressStatsDev* st) {
    if (st) CUDA_CHECK(cudaFree(st));
}

void compress_stats_dev_reset(CompressStatsDev* st, int count, cudaStream_t s) {
    if (st && count > 0) CUDA_CHECK(cudaMemsetAsync(st, 0, sizeof(CompressStatsDev) * (size_t)count, s));
}

CompressStats compress_stats_dev_read(const CompressStatsDev* st, int count, CompressStats* host, cudaStream_t s) {
    CompressStats r = {0, 0, 0.0f};
    if (st && count > 0) {
        CompressStatsDev* h = (CompressStatsDev*)mallocCheck(sizeof(CompressStatsDev) * (size_t)count);
        CUDA_CHECK(cudaMemcpyAsync(h, st, sizeof(CompressStatsDev) * (size_t)count, cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < count; i++) {
            r.saturated += h[i].saturated;
            r.nonfinite += h[i].nonfinite;
            float a;
            memcpy(&a, &h[i].amax_bits, sizeof(a));
            if (a > r.amax) r.amax = a;
        }
        free(h);
    }
    if (host) *host = r;
    return r;
}

/* one scratch stats struct (the amax slot when the caller passes st == NULL)
 * and one fp32 buffer for unfused sums; see the header on threads */
static CompressStatsDev* scratch_stats(void) {
    static CompressStatsDev* st = nullptr;
    if (!st) st = compress_stats_dev_alloc(1);
    return st;
}
static float* scratch_f32(size_t n) {
    static float* buf = nullptr;
    static size_t cap = 0;
    if (n > cap) {
        /* no queued kernel may still use the old buffer */
        CUDA_CHECK(cudaDeviceSynchronize());
        if (buf) CUDA_CHECK(cudaFree(buf));
        cap = n + n / 4 + 1024;
        CUDA_CHECK(cudaMalloc((void**)&buf, cap * sizeof(float)));
    }
    return buf;
}

/* ---- whole chunks ---------------------------------------------------------- */

size_t compress_dev(const CompressParams* p, const void* x, int x_is_bf16, size_t n, uint64_t stream, uint8_t* out,
                    CompressStatsDev* st, cudaStream_t s) {
    return compress_dev_scaled(p, x, x_is_bf16, n, stream, out, st, nullptr, s);
}

size_t compress_dev_scaled(const CompressParams* p, const void* x, int x_is_bf16, size_t n, uint64_t stream,
                           uint8_t* out, CompressStatsDev* st, const float* delayed_amax, cudaStream_t s) {
    const CompressWireLayout l = compress_wire_layout(p);
    const int two = compress_dev_two_pass(p);
    CompressJobDev j;
    memset(&j, 0, sizeof(j));
    j.n = n;
    j.e0 = 0;
    j.e1 = n;
    j.x = x;
    j.out = wire_out(l, out, n);
    j.stream = stream;
    j.st = st ? st : (two ? scratch_stats() : nullptr);
    j.delayed_amax = delayed_amax;
    if (two) {
        CUDA_CHECK(cudaMemsetAsync(&j.st->scale_amax_bits, 0, sizeof(unsigned), s));
        compress_jobs_amax_dev(p, x_is_bf16, &j, 1, s);
    }
    compress_jobs_encode_dev(p, x_is_bf16, &j, 1, s);
    return compress_bound(p, n);
}

void decompress_dev(const CompressParams* p, const uint8_t* in, size_t n, void* out, int out_is_bf16, cudaStream_t s) {
    const CompressWireLayout l = compress_wire_layout(p);
    CompressJobDev j;
    memset(&j, 0, sizeof(j));
    j.n = n;
    j.e0 = 0;
    j.e1 = n;
    j.y = out;
    j.nin = 1;
    j.in[0] = wire_in(l, in, n);
    decompress_jobs_dev(p, &j, 1, out_is_bf16 ? CDEV_DECODE_BF16 : CDEV_DECODE_F32, nullptr, s);
}

static void reduce_job(const CompressParams* p, const uint8_t* const* chunks, int P, size_t n, CompressJobDev* j,
                       const char* who) {
    if (P < 1 || P > COMPRESS_DEV_MAX_IN) FATAL("%s: P = %d copies; 1..%d are supported", who, P, COMPRESS_DEV_MAX_IN);
    const CompressWireLayout l = compress_wire_layout(p);
    memset(j, 0, sizeof(*j));
    j->n = n;
    j->e0 = 0;
    j->e1 = n;
    j->nin = P;
    for (int i = 0; i < P; i++) j->in[i] = wire_in(l, chunks[i], n);
}

void decompress_reduce_dev(const CompressParams* p, const uint8_t* const* chunks, int P, size_t n, void* out,
                           CompressDevSum kind, cudaStream_t s) {
    CompressJobDev j;
    reduce_job(p, chunks, P, n, &j, "decompress_reduce_dev");
    j.y = out;
    const CompressDevMode m = kind == CDEV_SUM_BF16 ? CDEV_REDUCE_BF16 : CDEV_REDUCE_F32;
    decompress_jobs_dev(p, &j, 1, m, nullptr, s);
}

size_t decompress_reduce_recompress_dev(const CompressParams* p_in, const uint8_t* const* chunks, int P, size_t n,
                                        const CompressParams* p_out, uint64_t stream, uint8_t* out,
                                        CompressStatsDev* st, cudaStream_t s) {
    if (!compress_dev_can_fuse(p_in, p_out)) {
        float* sum = scratch_f32(n ? n : 1);
        decompress_reduce_dev(p_in, chunks, P, n, sum, CDEV_SUM_F32, s);
        return compress_dev(p_out, sum, 0, n, stream, out, st, s);
    }
    const int two = compress_dev_two_pass(p_out);
    CompressJobDev j;
    reduce_job(p_in, chunks, P, n, &j, "decompress_reduce_recompress_dev");
    j.out = wire_out(compress_wire_layout(p_out), out, n);
    j.stream = stream;
    j.st = st ? st : (two ? scratch_stats() : nullptr);
    if (two) {
        CUDA_CHECK(cudaMemsetAsync(&j.st->scale_amax_bits, 0, sizeof(unsigned), s));
        decompress_jobs_dev(p_in, &j, 1, CDEV_REDUCE_AMAX, p_out, s);
    }
    decompress_jobs_dev(p_in, &j, 1, CDEV_REDUCE_RECOMPRESS, p_out, s);
    return compress_bound(p_out, n);
}

/* ---- self-checks ------------------------------------------------------------ */
