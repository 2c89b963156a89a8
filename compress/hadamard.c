/*
 * compress/hadamard.c - in-place orthonormal fast Walsh-Hadamard transform.
 *
 * log2(G) butterfly stages then one scaling multiply; see hadamard.h for the
 * exact operation order that the GPU kernels reproduce. Compile with
 * -ffp-contract=off: the butterflies are plain adds, but a contracted
 * "x * norm + y" anywhere downstream would round differently on each backend.
 */
#include "compress/hadamard.h"

#include "common/check.h"

int hadamard_is_pow2(long G) { return G >= 1 && (G & (G - 1)) == 0; }

float hadamard_norm(int G) {
    if (!hadamard_is_pow2(G)) FATAL("hadamard_norm: G = %d is not a power of two", G);
    int k = 0;
    while ((1 << k) < G) k++;
    /* 2^-(k/2) or sqrt(2) * 2^-((k+1)/2); both factors exact, the product is
     * a power-of-two scaling of a float, so it is exact too. */
    float p = 1.0f;
    for (int i = 0; i < (k + 1) / 2; i++) p *= 0.5f;
    return (k % 2 == 0) ? p : 0x1.6a09e6p+0f * p;
}

void hadamard_butterflies(float* x, int G) {
    for (int h = 1; h < G; h *= 2) {
        for (int i = 0; i < G; i += 2 * h) {
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
}

void hadamard_transform(float* x, int G) {
    if (!hadamard_is_pow2(G)) FATAL("hadamard_transform: G = %d is not a power of two", G);
    hadamard_butterflies(x, G);
    float norm = hadamard_norm(G);
    for (int j = 0; j < G; j++) x[j] = x[j] * norm;
}
