/*
 * compress/cuda_fast.cuh - the FP8 pipeline's common case as straight-line
 * code: TACO's shape (adaptive group exponent, Hadamard, dual scale) with
 * one group per unit (G = 64), a full unit of finite values whose prescale
 * folds into the multiplier, and a second scale under which nothing
 * saturates; and the sum of the copies a decode receives. That is nearly every unit a
 * trainer sends and receives.
 *
 * The general encode (cuda_codec.cuh's fp8_prepare / fp8_finish_unit)
 * handles every method and every edge with run-time tests on the Codec and
 * per 16-element sub-block: four copies of each group quantity, masks of
 * nonfinite slots, paths for unrotated groups, two-multiply fallbacks. Each
 * test is cheap, but together with the joins of their paths they made up
 * about a third of the encode's instructions (compress/CUDA.md, section 2).
 * Here the same steps run with all of that known: a unit is one group, so
 * one exponent, one multiplier, six butterfly stages, one max. The bytes are
 * the general path's by construction: each step below is that path's step
 * with its conditions decided (cited per function), and a lane whose unit
 * does not meet them takes the general path. test_compress_gpu checks both
 * against the CPU reference, bit for bit.
 */
#ifndef COMPRESS_CUDA_FAST_CUH
#define COMPRESS_CUDA_FAST_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "compress/compress_cuda.h"
#include "compress/cuda_codec.cuh"
#include "compress/cuda_decode.cuh"
#include "compress/cuda_device.cuh"
#include "compress/cuda_unit_io.cuh"

namespace {

/* the codecs the straight-line path serves: those of the kernel shapes
 * SHAPE_GROUP64 (TACO's shape with one group per unit, with the Hadamard or
 * without it: the fused recompress encodes the rotated sum with the
 * transform off), SHAPE_TENSOR (fp8_tensor: no group exponent, e_u = 0, no
 * transform) and SHAPE_GROUP128 (fp8_group: a group exponent across two
 * lanes, no transform), a compile-time constant (cuda_codec.cuh's
 * shape_codec) */
__device__ __forceinline__ bool fast_codec(const Codec& c) { return c.fast != 0; }

/* 1 if this lane's unit takes fast_prepare, with *e its adaptive exponent
 * e_u (0 without one, as fp8_prepare) and *m its group's max |x| (float
 * bits): the warp's units all full (so the unit's group is full), no inf or
 * NaN in the group (nfmask: every group rotates, no slot is zeroed), with an
 * adaptive exponent an amax that is 0 or a normal float (pow2_ceil_normal),
 * and, with the Hadamard, e_u <= fold_max (the prescale folds into the
 * multiplier: fp8_prepare's proof; without it, fast_finish's bound on k
 * decides). A G = 128 group spans two lanes (tpg = 2, no Hadamard on this
 * path): both decide together. Every lane of the warp calls. */
__device__ __forceinline__ bool fast_unit(const Codec& c, const Scan& sc, const WarpUnits& w, int fold_max, int* e,
                                          unsigned* m) {
    if (!fast_codec(c) || !w.full) return false; /* warp-uniform */
    unsigned a = max4f_bits(sc.amax);
    bool ok = !sc.nfmask; /* scan_resolve has run: the masks are exact */
    if (c.tpg == 2) {
        a = max(a, __shfl_xor_sync(FULL, a, 1));
        const int partner_ok = __shfl_xor_sync(FULL, ok ? 1 : 0, 1); /* outside any condition: every lane */
        ok = ok && partner_ok;
    }
    /* a subnormal amax (rare) takes the general path's frexp; a zero one has e_u = 0 */
    if (!ok || (c.adaptive && a - 1u < 0x007FFFFFu)) return false;
    *m = a;
    *e = c.adaptive && a != 0u ? pow2_ceil_normal(a) : 0;
    return !c.hadamard || *e <= fold_max;
}

/* fp8_prepare for a fast_unit: v becomes H_un(x), unscaled (folded), and p
 * what fp8_prepare returns for it (every sub-block holds the group's
 * values). Without the Hadamard v stays x and max |x| is the scan's. Without
 * the adaptive exponent (e = 0) p.folded is set where fp8_prepare leaves it
 * clear: with nothing to fold, both mean "v times M" and give the same
 * multiplier (fast_finish_ok, fp8_finish_unit). */
__device__ __forceinline__ void fast_prepare(const Codec& c, float (&v)[UNIT], const Scan& sc, int e, unsigned m,
                                             Prep& p) {
    if (c.hadamard) {
        bfly_local_all(v, UNIT);
        m = max(max(absmax16(v, 0), absmax16(v, 1)), max(absmax16(v, 2), absmax16(v, 3)));
    }
    const unsigned ah = __float_as_uint(__fmul_rn(__uint_as_float(m), pow2f_normal(-e))); /* |e| <= 126 */
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        p.e_u[sb] = e;
        p.ng[sb] = c.hadamard ? c.norm : 1.0f;
        p.amax_h[sb] = ah;
    }
    p.amax_x = max4f(sc.amax);
    p.folded = c.hadamard != 0 || e <= 0;
}

/* the v fp8_prepare leaves when it does not fold (x 2^-e_u): what
 * fp8_finish_unit expects after a fast_prepare with p.folded unset */
__device__ __forceinline__ void fast_unfold(float (&v)[UNIT], const Prep& p) {
    if (p.folded) return;
    const float d = pow2f_dev(-p.e_u[0]);
#pragma unroll
    for (int j = 0; j < UNIT; j++) v[j] = __fmul_rn(v[j], d);
}

/* fp8_finish_unit for a fast_prepare'd unit when its conditions hold: the
 * group's byte b and k_m from group_km (dual scale: b = e_u, k_m = k; a
 * group scale alone: k_m maps the group onto the fp8 range), one multiplier
 * M 2^-e_u, a normal float (one multiply per element), and max |h| M <= L
 * (nothing saturates: no count, no clamp, and |v| <= L as SR's sr_cut
 * needs): fast_finish_ok tests them and gives the multiplier and b; when they
 * do not hold, the caller runs fp8_finish_unit instead.
 *
 * Without the Hadamard and with e_u > 0, fp8_finish_unit multiplies twice,
 * by 2^-e_u and then by M = 2^k: where x 2^-e_u is a normal float (or 0) that
 * is exact and equals the one multiply by 2^(k - e_u); where it is below
 * 2^-126, both results are at most 2^(k - 126) in magnitude, with x's sign,
 * and for k <= 126 - (BIAS + MB) that is at most half the smallest fp8
 * subnormal: both encode to the same signed zero. */
template <int FMT>
__device__ __forceinline__ bool fast_finish_ok(const Codec& c, const Prep& p, int kc, float* Mv, int* b) {
    const int e = p.e_u[0];
    const float ng = p.ng[0];
    const int k = group_km(c, p, 0, kc, b);
    if (!p.folded && k > 126 - (Fp8T<FMT>::BIAS + Fp8T<FMT>::MB)) return false;
    /* a scale or multiplier outside the normal range goes to the general path */
    const int kv = k - e;
    if (k < -126 || k > 127 || kv < -126 || kv > 127) return false;
    const float M = __fmul_rn(ng, pow2f_normal(k));
    if (!(__fmul_rn(__uint_as_float(p.amax_h[0]), M) <= c.L)) return false;
    *Mv = __fmul_rn(ng, pow2f_normal(kv));
    return *Mv >= 1.17549435e-38f;
}
/* ... and the unit's codes, group byte and statistics with that multiplier
 * (stochastic rounding: every lane of the warp calls). (The last butterfly
 * stage fused with this multiply, as fast_sum does, with max |h| from the
 * stage's pairs: 23% slower on an H100, 2026-12-05, not kept.) */
template <int FMT, bool SR>
__device__ __forceinline__ void fast_finish(const Codec& c, float (&v)[UNIT], const Prep& p, unsigned u, float Mv, int b,
                                            int lane, const GOut& go, u64 stream, Row<1>& out, TStats& ts) {
    ts.amax = fmaxf(ts.amax, c.stats_amax_r ? __fmul_rn(__uint_as_float(p.amax_h[0]), p.ng[0]) : p.amax_x);
    /* the group's byte, from the lane that starts it (G >= UNIT: one group per unit or per tpg units) */
    if (c.gb && go.exps && (lane & (c.tpg - 1)) == 0) go.exps[(unsigned)(((u64)UNIT * u) >> c.lg) - go.g0] = (uint8_t)(b + 127);
#pragma unroll
    for (int j = 0; j < UNIT; j++) v[j] = __fmul_rn(v[j], Mv);
    quantize<FMT, SR>(c, v, u, stream, out);
}

/* fast_sum's outcomes */
enum FastSum { FAST_NO = 0, FAST_DONE = 1, FAST_REDO = 2, FAST_UNCHECKED = 3 };

/* fp8_sum_unit in the common case: the unit's one group full and rotated in
 * every copy, each copy's dequantisation one multiply by a normal power of
 * two (dequant16's first branch); where the sum is transformed (not kept
 * rotated), the first copy's scale folds into the constant after the
 * transform (fold_const) and the others are added relative to it
 * (fold_many_ok says when that gives the same bits). Then
 * the sum is fp8_sum_unit's: the copies dequantised and added in order (its
 * start from -0.0f is the identity), one inverse transform, one multiply by
 * norm (or C); with ci.keep the sum stays as R; without the Hadamard
 * (fp8_tensor, TACO with it off) the sum of the dequantised copies is all,
 * and a NaN code reaches the output as the general path's NaN does.
 * Without the transform, a tail warp's units take this path too (the
 * arithmetic per element is the general path's, short unit or not); with
 * it, a tail warp without a short unit does (the last warp of a chunk whose
 * length is a multiple of UNIT: at 64 MB that one warp, on the general path,
 * kept its SM busy after the others were done).
 * (Sending TACO's tail warps back whole as well, so that its kernels hold no
 * inlined general sum, made its decode slower: 0.63 -> 0.58 of the copy at
 * 64 MB, 0.78 -> 0.76 at 256 MB; H200, 2026-12-03.) FAST_NO when the warp's
 * units are not eligible (the rows untouched; warp-uniform, since the rows
 * are taken by the whole warp), FAST_REDO when this lane's numbers are not
 * the common case (the rows are taken: the caller redoes the sum from
 * memory). A NaN code is found without scanning the codes: it makes every
 * output of the butterflies NaN, as does an inf - inf of overflowing sums,
 * and both go to the general path. A kept sum has no butterflies: a NaN code
 * makes its own element of the sum NaN, and an overflow an inf, so
 * FAST_UNCHECKED (done, kept as R, its codes not scanned) leaves the test to
 * the caller's scan of the sum, which the encode needs anyway: a lane whose
 * sum is not all finite redoes it on the general path (keep_check), which
 * tells a NaN code (a copy's group sent unrotated) from an overflow.
 * (Scanning each copy's codes for NaN cost ~0.8 instructions per element
 * and copy.) */
/* fast_sum's copy i: taken, its numbers tested, dequantised relative to
 * 2^e0 and added to acc; *eo is the copy's exponent e = b - k. FOLD (the
 * first copy only): not dequantised at all, its scale 2^e goes elsewhere:
 * into the constant C after the transform (fold_const), or, for a sum
 * without one, into the caller's encode (fast_sum's e0out).
 * A copy after the first is added by one fused multiply-add: the product of
 * an fp8 value (its lowest bit at least 2^-16) and a power of two in
 * [2^-126, 2^(127 - LIM)] is an exact float (at least 2^-142, no overflow),
 * so the fma's one rounding of f m + acc is the general path's rounding of
 * acc + (f m): the same bits, one instruction per element fewer. A scale
 * beyond that bound goes back to the general path. */
template <int FMT, bool FIRST, bool FOLD, class Rows>
__device__ __forceinline__ bool fast_copy(const Codec& ci, Rows& rows, unsigned t, int i, const WarpUnits& w,
                                          float (&acc)[UNIT], float* C, int e0, int* eo) {
    Row<1> r;
    rows.take(t, i, w, r);
    const InScale is = in_scale(rows.sc);
    const int b = (int)(rows.eb & 0xFFu) - 127; /* G = UNIT: one group byte */
    const int e = b - is.k;
    *eo = e;
    bool ok;
    float m = 1.0f;
    if (FOLD) {
        ok = (ci.hadamard && !ci.keep) ? fold_const(ci, b, is, C) : (!is.foreign && e >= -126 && e <= 127);
    } else {
        const int rel = e - e0;
        ok = !is.foreign && e >= -126 && e <= 127 && rel >= -126 && rel <= (FIRST ? 127 : 127 - Fp8T<FMT>::LIM);
        m = pow2f_normal(rel); /* outside its range ok is false and acc is redone from memory */
    }
#pragma unroll
    for (int sb = 0; sb < SB; sb++) {
        float f[16];
        fp8_sb_values<FMT>(r, sb, f);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            if (FIRST) acc[16 * sb + j] = FOLD ? f[j] : __fmul_rn(f[j], m);
            else acc[16 * sb + j] = __fmaf_rn(f[j], m, acc[16 * sb + j]); /* FOLD is FIRST's alone */
        }
    }
    return ok;
}

/* Several rotated copies summed relative to the first one's scale 2^e0
 * (fast_sum): the general path's sum U (every copy dequantised, added,
 * transformed, times norm) and this one, S = U 2^-e0 times C = norm 2^e0, give
 * the same bits when no intermediate of either loses bits to the subnormal
 * range or overflows (fold_const's and fp8_prepare's argument on a grid).
 * Every intermediate of U is a multiple of 2^q, q = min e_i - LOW (an fp8
 * value's lowest bit), and of S of 2^(q - e0); fast_copy's bounds (e_i and
 * e_i - e0 >= -126) keep both grids at 2^-142 or above, so a value below
 * the normal range is exact in both. What is left is overflow: no value
 * exceeds P 2^(max e_i + LIM) G in U, nor that times 2^-e0 in S (P <= 16).
 * The same holds for a sum without the transform taken relative to 2^e0
 * (fast_sum's e0out), with G for margin. */
template <int FMT>
__device__ __forceinline__ bool fold_many_ok(const Codec& ci, int e0, int emax) {
    const int hi = emax - (e0 < 0 ? e0 : 0);
    return hi + Fp8T<FMT>::LIM + ci.lg + 4 <= 126;
}
/* e0out: a caller that re-encodes the sum (the fused recompress) may take
 * a sum without the transform relative to the first copy's scale: acc = U
 * 2^-e0, *e0out = e0 (written only when the sum is done), one multiply per
 * element fewer; fold_many_ok's bounds make U and acc exact scalings of each
 * other, and the encode's multiplier takes the 2^e0 (fp8_tile_encode). */
template <int FMT, class Rows>
__device__ __forceinline__ int fast_sum(const Codec& ci, Rows& rows, unsigned t, const WarpUnits& w, int nin,
                                        float (&acc)[UNIT], unsigned* stay, int* e0out) {
    static_assert(COMPRESS_DEV_MAX_IN <= 16, "fold_many_ok bounds P by 16");
    if (!fast_codec(ci)) return FAST_NO;
    /* With the transform, a tail warp comes here only when each of its units
     * is full or wholly past the end (a short group needs the general path's
     * padding); a unit past the end reads as zeros and stores nothing. */
    if (ci.hadamard && !w.full && __ballot_sync(FULL, w.nv != UNIT && w.nv != 0) != 0u) return FAST_NO;
    float C = ci.norm;
    bool ok;
    int e0, e;
    if (!ci.hadamard || ci.keep) {
        /* no transform, or the sum kept rotated: the dequantised copies added in
         * order (without the transform full units or not), or relative to the
         * first copy's scale (e0out) */
        if (e0out) {
            ok = fast_copy<FMT, true, true>(ci, rows, t, 0, w, acc, &C, 0, &e0);
            int emax = e0;
            for (int i = 1; i < nin; i++) {
                ok = fast_copy<FMT, false, false>(ci, rows, t, i, w, acc, &C, e0, &e) && ok;
                emax = max(emax, e);
            }
            ok = ok && fold_many_ok<FMT>(ci, e0, emax); /* also for one copy: U must not overflow where acc does not */
            if (ok) *e0out = e0;
        } else {
            ok = fast_copy<FMT, true, false>(ci, rows, t, 0, w, acc, &C, 0, &e0);
            for (int i = 1; i < nin; i++) ok = fast_copy<FMT, false, false>(ci, rows, t, i, w, acc, &C, 0, &e) && ok;
        }
        if (!ci.hadamard) return ok ? FAST_DONE : FAST_REDO;
        *stay = 0xFu;
        return ok ? FAST_UNCHECKED : FAST_REDO;
    }
    /* the first copy's scale joins C; the others are added relative to it */
    ok = fast_copy<FMT, true, true>(ci, rows, t, 0, w, acc, &C, 0, &e0);
    int emax = e0;
    for (int i = 1; i < nin; i++) {
        ok = fast_copy<FMT, false, false>(ci, rows, t, i, w, acc, &C, e0, &e) && ok;
        emax = max(emax, e);
    }
    if (nin > 1) ok = ok && fold_many_ok<FMT>(ci, e0, emax);
    /* C = norm 2^e0 is a power of two at G = 64 (norm = 1/8; any other C goes
     * back); the values are multiples of 2^(min e_i - e0 - LOW), and
     * fast_copy's e_i >= -126 puts that times C at 2^-145 or above: the last
     * stage takes the multiply (bfly_last_scaled), with no branch around it
     * (two paths that join cost a register move per value) */
    ok = ok && pow2_normal(C);
    bfly_local_to16(acc, UNIT);
    bfly_last_scaled(acc, C);
    return ok && !isnan(acc[0]) ? FAST_DONE : FAST_REDO;
}

} /* namespace */

#endif /* COMPRESS_CUDA_FAST_CUH */
