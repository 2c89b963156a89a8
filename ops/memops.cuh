/*
 * ops/memops.cuh - the run-time choice between kernel variants of the row
 * norms (layernorm_cuda.cu), while they are being measured on the H200.
 * The packed-row helpers they use are in cuda_common.cuh, their in-kernel
 * finish of the dw / db column sums in colsum_tail.cuh.
 *
 * Each of these ops has several kernels that compute the same function; an
 * environment variable picks one at every call (0 = the kernel the backend
 * had before the variants, the default while the others are measured):
 *   TPFP8_LN_FWD_VARIANT    (0..2) layernorm_forward, residual_layernorm_forward, rmsnorm_forward
 *   TPFP8_LN_BWD_VARIANT    (0..3) layernorm_backward, rmsnorm_backward
 * Every variant is deterministic (its reduction order depends on shapes
 * only); two variants agree within rounding, not bit for bit.
 * tests/test_ops_gpu.cu runs its norm checks under every variant;
 * tools/bench_ops_gpu.cu times them side by side.
 */
#ifndef OPS_MEMOPS_CUH
#define OPS_MEMOPS_CUH

#include <stdlib.h>
#include <string.h>

#include "ops/colsum_tail.cuh"
#include "ops/cuda_common.cuh"

/* the variant an environment variable selects, 0 .. nvariants-1 (unset or
 * empty: 0); anything else is a fatal error naming the variable */
static inline int memops_variant(const char* env, int nvariants) {
    const char* s = getenv(env);
    if (!s || !*s) return 0;
    char* end = nullptr;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0 || v >= nvariants)
        FATAL("%s=%s: expected an integer from 0 to %d (ops/memops.cuh lists the variants)", env, s, nvariants - 1);
    return (int)v;
}

#endif /* OPS_MEMOPS_CUH */
