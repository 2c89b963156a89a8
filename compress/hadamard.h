/*
 * compress/hadamard.h - the orthonormal fast Walsh-Hadamard transform.
 *
 * hadamard_transform(x, G) replaces x (G = 2^k floats) by (H_G / sqrt(G)) x,
 * where H_G is the Sylvester Hadamard matrix (H_1 = [1], H_2m = [[H_m, H_m],
 * [H_m, -H_m]]). The transform is orthonormal and symmetric, so it is its own
 * inverse (up to float rounding).
 *
 * The exact operation order (a GPU version must do the same to be bit-exact):
 *   for h = 1, 2, 4, ..., G/2 (stages in this order):
 *     for every j with (j & h) == 0:  a = x[j], b = x[j + h];
 *                                     x[j] = a + b;  x[j + h] = a - b;
 *   then x[j] = x[j] * hadamard_norm(G) for every j (one float multiply).
 * Within a stage every output is one add or subtract of two values of the
 * previous stage, so the order inside a stage does not matter; the order of
 * the stages does (float addition is not associative).
 *
 * hadamard_norm(G) is the float nearest to 1/sqrt(G), defined without any
 * libm call: 2^-(k/2) for even k (exact), and 0x1.6a09e6p+0f * 2^-((k+1)/2)
 * for odd k, where 0x1.6a09e6p+0f is sqrt(2) rounded to float (scaling it by
 * a power of two keeps it the correctly rounded 1/sqrt(G)).
 */
#ifndef HADAMARD_H
#define HADAMARD_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if G is a power of two >= 1. */
int hadamard_is_pow2(long G);
/* The normalisation constant above. G must be a power of two. */
float hadamard_norm(int G);
/* The unnormalised butterflies only: x <- H_G x. */
void hadamard_butterflies(float* x, int G);
/* x <- (H_G / sqrt(G)) x in place; G must be a power of two (1 is the identity). */
void hadamard_transform(float* x, int G);

#ifdef __cplusplus
}
#endif
#endif /* HADAMARD_H */
