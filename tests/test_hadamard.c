/*
 * tests/test_hadamard.c - the orthonormal fast Walsh-Hadamard transform.
 *
 * For G = 1, 2, 4, ..., 1024: the transform of unit vectors gives the columns
 * of H_G / sqrt(G) (entries +-1/sqrt(G) with the Sylvester sign pattern
 * (-1)^popcount(i & j), computed here independently), pairwise orthonormal to
 * 1e-6; applying it twice gives x back to 1e-6 relative; it preserves the
 * 2-norm to float precision; the normalisation constant is the float nearest
 * to 1/sqrt(G). Exit status 0 when everything passes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "compress/hadamard.h"
#include "compress/rng.h"

#include "tests/testing.h"

#define GMAX 1024

static double norm2(const float* x, int G) {
    double s = 0.0;
    for (int i = 0; i < G; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

/* a reproducible Gaussian-ish vector (Box-Muller on Philox words) */
static void fill_random(float* x, int G, uint64_t stream) {
    for (int i = 0; i < G; i++) {
        double u1 = (rng_u32(1, stream, 2 * (uint64_t)i) + 1.0) / 4294967297.0;
        double u2 = rng_u32(1, stream, 2 * (uint64_t)i + 1) / 4294967296.0;
        x[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

static void test_size(int G) {
    static float cols[GMAX][GMAX]; /* column j = H e_j */
    const double inv = 1.0 / sqrt((double)G);

    /* the normalisation constant: nearest float to 1/sqrt(G) */
    float nrm = hadamard_norm(G);
    CHECK(fabs((double)nrm - inv) <= 0.5 * (nextafterf(nrm, 1.0f) - nrm), "G=%d norm %.9g vs %.9g", G, nrm, inv);

    /* columns: entries +-1/sqrt(G) with the Sylvester signs */
    int bad_entries = 0;
    for (int j = 0; j < G; j++) {
        for (int i = 0; i < G; i++) cols[j][i] = (i == j) ? 1.0f : 0.0f;
        hadamard_transform(cols[j], G);
        for (int i = 0; i < G; i++) {
            double want = (__builtin_popcount((unsigned)(i & j)) % 2) ? -inv : inv;
            if (fabs(cols[j][i] - want) > 1e-6 * inv) bad_entries++;
        }
    }
    CHECK(bad_entries == 0, "G=%d: %d entries of H e_j differ from +-1/sqrt(G)", G, bad_entries);

    /* orthonormal: <col_a, col_b> = delta_ab to 1e-6 (check a sample of pairs for big G) */
    double worst = 0.0;
    int stride = G > 256 ? 7 : 1;
    for (int a = 0; a < G; a += stride) {
        for (int b = 0; b < G; b += stride) {
            double dot = 0.0;
            for (int i = 0; i < G; i++) dot += (double)cols[a][i] * cols[b][i];
            double err = fabs(dot - (a == b ? 1.0 : 0.0));
            if (err > worst) worst = err;
        }
    }
    CHECK(worst < 1e-6, "G=%d: columns not orthonormal, worst |<a,b> - delta| = %g", G, worst);

    /* self-inverse and norm-preserving on random vectors */
    float x[GMAX], y[GMAX];
    for (int trial = 0; trial < 20; trial++) {
        fill_random(x, G, (uint64_t)(G * 100 + trial));
        if (trial == 1) x[G / 2] = 1000.0f; /* an outlier */
        for (int i = 0; i < G; i++) y[i] = x[i];
        hadamard_transform(y, G);
        double nx = norm2(x, G), ny = norm2(y, G);
        CHECK(fabs(ny - nx) <= 1e-6 * nx, "G=%d: norm %.9g -> %.9g", G, nx, ny);
        hadamard_transform(y, G);
        double diff = 0.0;
        for (int i = 0; i < G; i++) diff += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        CHECK(sqrt(diff) <= 1e-6 * nx, "G=%d: H(H(x)) differs from x by %g relative", G, sqrt(diff) / nx);
    }

    /* an outlier is spread over the whole group: |each output| = 1000/sqrt(G) */
    for (int i = 0; i < G; i++) x[i] = 0.0f;
    x[0] = 1000.0f;
    hadamard_transform(x, G);
    for (int i = 0; i < G; i++) CHECK(fabs(fabs(x[i]) - 1000.0 * inv) <= 1e-4 * inv, "G=%d spread", G);
}

int main(void) {
    CHECK(hadamard_is_pow2(1) && hadamard_is_pow2(64) && !hadamard_is_pow2(0) && !hadamard_is_pow2(48), "is_pow2");
    CHECK(hadamard_norm(1) == 1.0f && hadamard_norm(4) == 0.5f && hadamard_norm(256) == 0.0625f, "even norms exact");
    CHECK(hadamard_norm(2) == (float)(1.0 / sqrt(2.0)), "norm(2) is the float nearest 1/sqrt(2)");
    /* the butterflies of H_2 and H_4 written out */
    float a[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    hadamard_butterflies(a, 4);
    CHECK(a[0] == 10.0f && a[1] == -2.0f && a[2] == -4.0f && a[3] == 0.0f, "H_4 [1 2 3 4] = [10 -2 -4 0], got %g %g %g %g",
          a[0], a[1], a[2], a[3]);
    for (int G = 1; G <= GMAX; G *= 2) test_size(G);
    if (failures) {
        printf("test_hadamard: %d check(s) FAILED\n", failures);
        return 1;
    }
    printf("test_hadamard: all checks passed (G = 1..1024: columns, orthonormality, self-inverse, norm)\n");
    return 0;
}
