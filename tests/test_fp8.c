/*
 * tests/test_fp8.c - the FP8 codecs against the OCP spec, value by value.
 *
 * Expected values are computed here independently of compress/fp8.c: decode
 * from the bit fields with ldexp, rounding by searching the 256 decoded values
 * in double precision. Checks: every code decodes right; encode(decode(c)) == c;
 * every tie between neighbouring codes rounds to even and its float neighbours
 * round to the nearer code; saturation between max and the overflow point and
 * for infinities; subnormals; signed zeros; NaN; random floats against the
 * brute-force RNE and SR references; SR's mean converges to the value.
 * Exit status 0 when everything passes.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "compress/fp8.h"
#include "compress/rng.h"

#include "tests/testing.h"

static const Fp8Format FORMATS[2] = {FP8_E4M3, FP8_E5M2};

/* The spec's value of code c, from the bit fields (independent of fp8.c). */
static double spec_value(uint8_t c, Fp8Format f) {
    int m = f == FP8_E4M3 ? 3 : 2, bias = f == FP8_E4M3 ? 7 : 15, ebits = 7 - m;
    int s = c >> 7, E = (c >> m) & ((1 << ebits) - 1), M = c & ((1 << m) - 1);
    int emax = (1 << ebits) - 1;
    double v;
    if (f == FP8_E4M3 && E == emax && M == (1 << m) - 1) return NAN;
    if (f == FP8_E5M2 && E == emax) {
        if (M != 0) return NAN;
        v = INFINITY;
    } else if (E == 0) {
        v = ldexp((double)M, 1 - bias - m);
    } else {
        v = ldexp(1.0 + ldexp((double)M, -m), E - bias);
    }
    return s ? -v : v;
}

static int is_finite_code(uint8_t c, Fp8Format f) { return isfinite(spec_value(c, f)); }

/* Brute-force RNE with saturation: the nearest finite code, ties to the even
 * code (the code's last bit is the mantissa's last bit). */
static uint8_t ref_encode(float xf, Fp8Format f) {
    if (isnan(xf)) return 0x7F;
    /* beyond max every finite code is "nearer" by less than double precision
     * can tell; the saturating rule says max */
    if (fabs((double)xf) >= fp8_max(f)) return (uint8_t)((signbit(xf) ? 0x80 : 0) | (f == FP8_E4M3 ? 0x7E : 0x7B));
    double x = xf, best_d = INFINITY;
    int best = -1;
    for (int c = 0; c < 256; c++) {
        if (!is_finite_code((uint8_t)c, f)) continue;
        double v = spec_value((uint8_t)c, f);
        if (v == 0.0 && (c & 0x80) != (signbit(x) ? 0x80 : 0)) continue; /* keep the sign of zero */
        if ((v > 0 && x < 0) || (v < 0 && x > 0)) continue;
        double d = fabs(v - x);
        if (d < best_d || (d == best_d && (c & 1) == 0)) {
            best_d = d;
            best = c;
        }
    }
    return (uint8_t)best;
}

/* Brute-force SR reference: between the neighbouring codes lo <= |x| < hi,
 * F = floor((|x| - lo) / (hi - lo) * 2^32) (exact in double), round up iff
 * F + rnd >= 2^32; beyond max, saturate. */
static uint8_t ref_encode_sr(float xf, Fp8Format f, uint32_t rnd) {
    if (isnan(xf)) return 0x7F;
    uint8_t sign = signbit(xf) ? 0x80 : 0;
    double a = fabs((double)xf), maxv = fp8_max(f);
    if (a >= maxv) return sign | (f == FP8_E4M3 ? 0x7E : 0x7B);
    int lo = 0;
    for (int c = 0; c < 0x80; c++)
        if (is_finite_code((uint8_t)c, f) && spec_value((uint8_t)c, f) <= a) lo = c;
    double vlo = spec_value((uint8_t)lo, f), vhi = spec_value((uint8_t)(lo + 1), f);
    double F = floor((a - vlo) / (vhi - vlo) * 4294967296.0);
    int up = F + (double)rnd >= 4294967296.0;
    return (uint8_t)(sign | (lo + up));
}

static float float_of(uint32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

static void test_decode_all(Fp8Format f) {
    int nan_count = 0;
    for (int c = 0; c < 256; c++) {
        double want = spec_value((uint8_t)c, f);
        float got = fp8_decode((uint8_t)c, f);
        if (isnan(want)) {
            nan_count++;
            CHECK(isnan(got), "%s code 0x%02X should be NaN, got %g", fp8_format_name(f), c, got);
            CHECK(fp8_is_nan((uint8_t)c, f), "%s fp8_is_nan(0x%02X)", fp8_format_name(f), c);
        } else {
            CHECK((double)got == want && !!signbit(got) == !!signbit(want), "%s code 0x%02X decodes to %.10g, spec %.10g",
                  fp8_format_name(f), c, got, want);
            CHECK(!fp8_is_nan((uint8_t)c, f), "%s fp8_is_nan(0x%02X) on a number", fp8_format_name(f), c);
        }
    }
    CHECK(nan_count == (f == FP8_E4M3 ? 2 : 6), "%s has %d NaN codes", fp8_format_name(f), nan_count);
    /* the constants the rest of the code relies on */
    CHECK(fp8_max(f) == (f == FP8_E4M3 ? 448.0f : 57344.0f), "fp8_max");
    CHECK(fp8_decode(f == FP8_E4M3 ? 0x7E : 0x7B, f) == fp8_max(f), "max code");
    CHECK(fp8_min_subnormal(f) == fp8_decode(0x01, f), "min subnormal");
    CHECK(fp8_min_normal(f) == fp8_decode((uint8_t)(1 << fp8_mantissa_bits(f)), f), "min normal");
    if (f == FP8_E5M2) {
        CHECK(isinf(fp8_decode(0x7C, f)) && fp8_decode(0x7C, f) > 0, "E5M2 0x7C is +inf");
        CHECK(isinf(fp8_decode(0xFC, f)) && fp8_decode(0xFC, f) < 0, "E5M2 0xFC is -inf");
    }
}

static void test_roundtrip_codes(Fp8Format f) {
    for (int c = 0; c < 256; c++) {
        float v = fp8_decode((uint8_t)c, f);
        if (isnan(v)) continue;
        uint8_t want = (uint8_t)c;
        if (isinf(v)) want = (uint8_t)((c & 0x80) | 0x7B); /* the saturating encoder maps inf to max */
        CHECK(fp8_encode(v, f) == want, "%s encode(decode(0x%02X) = %g) = 0x%02X", fp8_format_name(f), c, v,
              fp8_encode(v, f));
        /* an exactly representable value never moves under SR, whatever rnd */
        if (!isinf(v)) {
            CHECK(fp8_encode_sr(v, f, 0) == want && fp8_encode_sr(v, f, 0xFFFFFFFFu) == want,
                  "%s SR moved the exact value %g", fp8_format_name(f), v);
        }
    }
}

/* Every pair of neighbouring finite codes: the midpoint (exact in float)
 * rounds to the even code, its float neighbours to the nearer code. This
 * walks every binade, the subnormals and the subnormal/normal boundary. */
static void test_ties(Fp8Format f) {
    uint8_t maxc = f == FP8_E4M3 ? 0x7E : 0x7B;
    for (int c = 0; c < maxc; c++) {
        for (int sgn = 0; sgn < 2; sgn++) {
            uint8_t lo = (uint8_t)(c | (sgn << 7)), hi = (uint8_t)((c + 1) | (sgn << 7));
            float vlo = fp8_decode(lo, f), vhi = fp8_decode(hi, f);
            float mid = (vlo + vhi) * 0.5f; /* exact: both have few bits */
            CHECK((double)mid == ((double)vlo + (double)vhi) / 2, "midpoint not exact");
            uint8_t even = (c & 1) ? hi : lo;
            CHECK(fp8_encode(mid, f) == even, "%s tie %g between 0x%02X and 0x%02X gave 0x%02X", fp8_format_name(f), mid,
                  lo, hi, fp8_encode(mid, f));
            float toward_hi = nextafterf(mid, sgn ? -INFINITY : INFINITY);
            float toward_lo = nextafterf(mid, 0.0f);
            CHECK(fp8_encode(toward_hi, f) == hi, "%s just past tie %g -> 0x%02X", fp8_format_name(f), toward_hi,
                  fp8_encode(toward_hi, f));
            CHECK(fp8_encode(toward_lo, f) == lo, "%s just below tie %g -> 0x%02X", fp8_format_name(f), toward_lo,
                  fp8_encode(toward_lo, f));
        }
    }
}

static void test_special(Fp8Format f) {
    const char* nm = fp8_format_name(f);
    uint8_t maxc = f == FP8_E4M3 ? 0x7E : 0x7B;
    float maxv = fp8_max(f);
    /* the step just below max, and the overflow threshold max + half a step */
    float step = maxv - fp8_decode((uint8_t)(maxc - 1), f);
    float overflow = maxv + step * 0.5f;
    CHECK(fp8_encode(maxv, f) == maxc, "%s max", nm);
    CHECK(fp8_encode(nextafterf(maxv, 0.0f), f) == maxc, "%s just below max", nm);
    CHECK(fp8_encode(nextafterf(maxv, INFINITY), f) == maxc, "%s just above max", nm);
    CHECK(fp8_encode(maxv + step * 0.25f, f) == maxc, "%s between max and overflow", nm);
    CHECK(fp8_encode(nextafterf(overflow, 0.0f), f) == maxc, "%s just below overflow", nm);
    CHECK(fp8_encode(overflow, f) == maxc, "%s at the overflow threshold saturates", nm);
    CHECK(fp8_encode(nextafterf(overflow, INFINITY), f) == maxc, "%s above overflow saturates", nm);
    CHECK(fp8_encode(-overflow * 4, f) == (0x80 | maxc), "%s -large saturates", nm);
    CHECK(fp8_encode(FLT_MAX, f) == maxc && fp8_encode(-FLT_MAX, f) == (0x80 | maxc), "%s FLT_MAX", nm);
    CHECK(fp8_encode(INFINITY, f) == maxc && fp8_encode(-INFINITY, f) == (0x80 | maxc), "%s inf saturates", nm);
    CHECK(fp8_encode_sr(INFINITY, f, 123) == maxc && fp8_encode_sr(-INFINITY, f, 0xFFFFFFFFu) == (0x80 | maxc),
          "%s SR inf saturates", nm);
    CHECK(fp8_encode_sr(nextafterf(maxv, INFINITY), f, 0xFFFFFFFFu) == maxc, "%s SR above max saturates", nm);
    CHECK(fp8_encode(NAN, f) == FP8_NAN_CODE && fp8_encode(-NAN, f) == FP8_NAN_CODE, "%s NaN", nm);
    CHECK(fp8_encode_sr(NAN, f, 77) == FP8_NAN_CODE, "%s SR NaN", nm);
    CHECK(fp8_encode(0.0f, f) == 0x00 && fp8_encode(-0.0f, f) == 0x80, "%s signed zeros", nm);
    /* subnormals: the smallest, half of it (a tie with zero -> 0), around it */
    float sub = fp8_min_subnormal(f);
    CHECK(fp8_encode(sub, f) == 0x01 && fp8_encode(-sub, f) == 0x81, "%s min subnormal", nm);
    CHECK(fp8_encode(sub * 0.5f, f) == 0x00 && fp8_encode(-sub * 0.5f, f) == 0x80, "%s half min subnormal -> 0", nm);
    CHECK(fp8_encode(nextafterf(sub * 0.5f, 1.0f), f) == 0x01, "%s just above half min subnormal", nm);
    CHECK(fp8_encode(sub * 1.5f, f) == 0x02, "%s 1.5 min subnormal ties to 2", nm);
    CHECK(fp8_encode(sub * 2.5f, f) == 0x02, "%s 2.5 min subnormal ties to 2", nm);
    CHECK(fp8_encode(1e-45f, f) == 0x00 && fp8_encode(-1e-45f, f) == 0x80, "%s float subnormal -> 0", nm);
    CHECK(fp8_encode(1e-30f, f) == 0x00, "%s tiny -> 0", nm);
    /* a few hand-picked values */
    if (f == FP8_E4M3) {
        CHECK(fp8_encode(1.0f, f) == 0x38, "E4M3 1.0");
        CHECK(fp8_encode(-2.0f, f) == 0xC0, "E4M3 -2.0");
        CHECK(fp8_encode(0.1f, f) == 0x1D, "E4M3 0.1 -> 0.1015625");
        CHECK(fp8_encode(464.0f, f) == 0x7E, "E4M3 464 saturates");
        CHECK(fp8_encode(1.0625f, f) == 0x38, "E4M3 1.0625 ties to 1.0");
        CHECK(fp8_encode(1.1875f, f) == 0x3A, "E4M3 1.1875 ties to 1.25");
    } else {
        CHECK(fp8_encode(1.0f, f) == 0x3C, "E5M2 1.0");
        CHECK(fp8_encode(61440.0f, f) == 0x7B, "E5M2 61440 saturates");
        CHECK(fp8_encode(1.125f, f) == 0x3C, "E5M2 1.125 ties to 1.0");
    }
}

/* Random floats (log-uniform magnitudes around the fp8 range, plus raw bit
 * patterns) against the brute-force references. */
static void test_random_vs_reference(Fp8Format f) {
    int bad_rne = 0, bad_sr = 0;
    for (uint64_t i = 0; i < 200000; i++) {
        uint32_t w[4];
        rng_philox_block(42, (uint64_t)f, i, w);
        float x;
        if (i % 4 == 3) {
            x = float_of(w[0]); /* any bit pattern at all */
        } else {
            int e = (int)(w[0] % 48) - 30; /* 2^-30 .. 2^17 */
            x = ldexpf(1.0f + (float)(w[1] >> 8) * 0x1p-24f, e);
            if (w[0] & 0x80000000u) x = -x;
        }
        if (fp8_encode(x, f) != ref_encode(x, f)) {
            if (bad_rne++ < 5) printf("  RNE mismatch %s x=%a got 0x%02X want 0x%02X\n", fp8_format_name(f), x,
                                      fp8_encode(x, f), ref_encode(x, f));
        }
        if (!isnan(x) && fp8_encode_sr(x, f, w[2]) != ref_encode_sr(x, f, w[2])) {
            if (bad_sr++ < 5) printf("  SR mismatch %s x=%a rnd=%08x got 0x%02X want 0x%02X\n", fp8_format_name(f), x,
                                     w[2], fp8_encode_sr(x, f, w[2]), ref_encode_sr(x, f, w[2]));
        }
    }
    CHECK(bad_rne == 0, "%s: %d random floats encoded differently from the brute-force RNE", fp8_format_name(f), bad_rne);
    CHECK(bad_sr == 0, "%s: %d random floats encoded differently from the SR reference", fp8_format_name(f), bad_sr);
}

static void test_sr(Fp8Format f) {
    const char* nm = fp8_format_name(f);
    /* rnd = 0 truncates toward zero, all-ones rounds away from zero */
    float xs[] = {0.3f, -0.3f, 1.01f, 3.3e-3f, -7.7f, 100.5f};
    for (size_t k = 0; k < sizeof(xs) / sizeof(xs[0]); k++) {
        float x = xs[k];
        float dn = fp8_decode(fp8_encode_sr(x, f, 0), f);
        float up = fp8_decode(fp8_encode_sr(x, f, 0xFFFFFFFFu), f);
        CHECK(fabsf(dn) < fabsf(x) && fabsf(up) > fabsf(x), "%s SR extremes for %g: %g %g", nm, x, dn, up);
        CHECK(fp8_encode_sr(x, f, 0) == (uint8_t)(fp8_encode_sr(x, f, 0xFFFFFFFFu) - 1),
              "%s SR extremes are neighbours for %g", nm, x);
        /* the mean of many draws converges to x */
        const int N = 200000;
        double sum = 0.0;
        for (int i = 0; i < N; i++) sum += fp8_decode(fp8_encode_sr(x, f, rng_u32(7, 1000 + k, (uint64_t)i)), f);
        double mean = sum / N, ulp = fabs((double)up - (double)dn);
        CHECK(fabs(mean - x) < 5.0 * 0.5 * ulp / sqrt((double)N), "%s SR mean %.8g for %g (ulp %g)", nm, mean, x, ulp);
    }
    /* the threshold: x at a quarter of the way from lo to hi rounds up iff rnd >= 3/4 * 2^32 */
    float lo = 1.0f, hi = fp8_decode((uint8_t)(fp8_encode(1.0f, f) + 1), f);
    float q = lo + (hi - lo) * 0.25f;
    CHECK(fp8_decode(fp8_encode_sr(q, f, 0xBFFFFFFFu), f) == lo, "%s SR just below threshold", nm);
    CHECK(fp8_decode(fp8_encode_sr(q, f, 0xC0000000u), f) == hi, "%s SR at threshold", nm);
}

int main(void) {
    for (int k = 0; k < 2; k++) {
        Fp8Format f = FORMATS[k];
        test_decode_all(f);
        test_roundtrip_codes(f);
        test_ties(f);
        test_special(f);
        test_random_vs_reference(f);
        test_sr(f);
    }
    if (failures) {
        printf("test_fp8: %d check(s) FAILED\n", failures);
        return 1;
    }
    printf("test_fp8: all checks passed (E4M3 and E5M2: 256-code decode, roundtrip, ties, saturation, "
           "subnormals, 400k random floats vs brute-force RNE/SR, SR convergence)\n");
    return 0;
}
