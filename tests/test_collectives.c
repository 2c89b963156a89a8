/*
 * tests/test_collectives.c - the compressed collectives of comm/collectives.c,
 * run under mpirun with P = 2, 3 and 4 ranks.
 *
 * For sizes that divide by nothing convenient, and for each method:
 *   - all-reduce: the exact path ("none") equals the fp64 sum to fp32 rounding
 *     (P-1 additions: rel 1e-6); compressed methods are within their stated
 *     bound b of the exact result. Each rank's contribution x_r is compressed
 *     with error <= b ||x_r||, so the reduce-scatter's error relative to the
 *     sum is <= b * sum_r ||x_r|| / ||sum_r x_r|| (the ratio grows when the
 *     contributions cancel), and the all-gather adds one more compression of
 *     the sum: <= b * (ratio + 1), plus 5% for the product of the two errors;
 *   - every rank holds bit-identical output (checked by comparing a hash of
 *     the output bytes across ranks), and the bits of the same all-reduce
 *     simulated with compress.h alone (decompress_sum_recompress: taco's sum
 *     re-encoded in the rotated domain);
 *   - the one-shot all-reduce: exact with "none", bit for bit the two-shot
 *     exact result; compressed, within b * ratio (one compression per
 *     contribution, none of the sum); identical on every rank;
 *     (P - 1) compressed tensors sent;
 *   - reduce-scatter and all-gather separately, against the exact halves;
 *   - bytes on the wire match what the formats promise;
 *   - the row exchanges of sequence parallelism (comm/sp.h) on [N, C] with
 *     K pieces per rank: the exact reduce-scatter is bit for bit the fp32
 *     rank-order sum of this rank's rows, and its all-gather returns the
 *     all-reduce's bits; compressed, within the bounds above; the all-gather
 *     is identical on every rank; K calls of one segment each give the bits
 *     of one call of all K (what keeps comm.overlap bit-identical); the bytes
 *     are (P - 1) compressed pieces per segment in each.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/sp.h"
#include "common/check.h"

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; printf("[rank %d] FAIL %s:%d: ", rank, __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
static int rank, P;

/* deterministic per-rank data: Gaussian-ish with a few outliers, as
 * activations of a transformer look */
static void fill(float* x, size_t n, int r, int salt) {
    unsigned long long s = 0x1234567ull * (unsigned long long)(r + 1) + (unsigned long long)salt * 77;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = ((s >> 11) & ((1ull << 53) - 1)) / 9007199254740992.0;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double v = ((s >> 11) & ((1ull << 53) - 1)) / 9007199254740992.0;
        double g = sqrt(-2.0 * log(u + 1e-12)) * cos(6.283185307179586 * v);
        x[i] = (float)(i % 97 == 5 ? 20.0 * g : g);
    }
}

static unsigned long long hash_bytes(const void* p, size_t n) {
    const unsigned char* b = p;
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int same_on_all_ranks(const float* x, size_t n) {
    unsigned long long h = hash_bytes(x, n * sizeof(float)), lo, hi;
    MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

static double rel_err(const float* y, const double* ref, size_t n) {
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) { e += (y[i] - ref[i]) * (y[i] - ref[i]); r += ref[i] * ref[i]; }
    return r > 0 ? sqrt(e / r) : sqrt(e);
}

static void test_method(CompressMethod m, size_t n) {
    CompressParams p;
    compress_params_default(&p, m);
    CollScratch s = {0};
    float* x = malloc(n * sizeof(float) + 4);
    double* ref = calloc(n + 1, sizeof(double));
    float* tmp = malloc(n * sizeof(float) + 4);
    size_t align = coll_align(&p), want = 0, b, cnt, mb, mcnt;
    coll_chunk(n, P, rank, align, &mb, &mcnt);
    double sum_norms = 0.0, sum_norms_mine = 0.0;   /* sum_r ||x_r||, whole tensor and my chunk */
    for (int r = 0; r < P; r++) {
        fill(tmp, n, r, (int)n);
        double a = 0.0, am = 0.0;
        for (size_t i = 0; i < n; i++) { ref[i] += tmp[i]; a += (double)tmp[i] * tmp[i]; }
        for (size_t i = mb; i < mb + mcnt; i++) am += (double)tmp[i] * tmp[i];
        sum_norms += sqrt(a);
        sum_norms_mine += sqrt(am);
    }
    double nref = 0.0, nref_mine = 0.0;
    for (size_t i = 0; i < n; i++) nref += ref[i] * ref[i];
    for (size_t i = mb; i < mb + mcnt; i++) nref_mine += ref[i] * ref[i];
    double ratio = sum_norms / sqrt(nref), ratio_mine = nref_mine > 0 ? sum_norms_mine / sqrt(nref_mine) : 1.0;
    fill(x, n, rank, (int)n);

    /* all-reduce */
    CollStats st = {0};
    coll_allreduce(MPI_COMM_WORLD, &p, &p, x, n, 99, &s, &st);
    double e = rel_err(x, ref, n);
    double bound = m == CM_NONE ? 1e-6 : 1.05 * compress_error_bound(&p) * (ratio + 1.0);
    CHECK(e <= bound, "allreduce %s n=%zu P=%d: rel err %.3g > bound %.3g", compress_method_name(m), n, P, e, bound);
    CHECK(same_on_all_ranks(x, n), "allreduce %s n=%zu P=%d: ranks disagree", compress_method_name(m), n, P);
    /* the same all-reduce without MPI, from compress.h alone: every rank's
     * chunk j compressed, rank j's copies summed and re-encoded by
     * decompress_sum_recompress (for taco in the rotated domain), decoded */
    {
        float* sim = malloc(n * sizeof(float) + 4);
        float** xr = malloc((size_t)P * sizeof(float*));
        for (int r = 0; r < P; r++) {
            xr[r] = malloc(n * sizeof(float) + 4);
            fill(xr[r], n, r, (int)n);
        }
        for (int j = 0; j < P; j++) {
            coll_chunk(n, P, j, align, &b, &cnt);
            const size_t cb = compress_bound(&p, cnt);
            uint8_t* w = malloc(cb * (size_t)(P + 1) + 1);
            const uint8_t** cp = malloc((size_t)P * sizeof(uint8_t*));
            for (int r = 0; r < P; r++) {
                compress(&p, xr[r] + b, cnt, coll_stream_of(99, r, j, 0), w + cb * (size_t)r, NULL);
                cp[r] = w + cb * (size_t)r;
            }
            decompress_sum_recompress(&p, cp, P, cnt, &p, coll_stream_of(99, j, j, 1), w + cb * (size_t)P, NULL);
            decompress(&p, w + cb * (size_t)P, cnt, sim + b);
            free(w);
            free(cp);
        }
        CHECK(memcmp(sim, x, n * sizeof(float)) == 0, "allreduce %s n=%zu P=%d: != the compress.h simulation",
              compress_method_name(m), n, P);
        for (int r = 0; r < P; r++) free(xr[r]);
        free(xr);
        free(sim);
    }
    /* wire bytes: everything but my own chunk in the all-to-all, plus my
     * compressed sum to P-1 ranks */
    for (int j = 0; j < P; j++) {
        coll_chunk(n, P, j, align, &b, &cnt);
        if (j != rank) want += compress_bound(&p, cnt);
    }
    want += compress_bound(&p, mcnt) * (size_t)(P - 1);
    CHECK(st.bytes_sent == want, "allreduce %s n=%zu: bytes %llu, expected %zu", compress_method_name(m), n,
          (unsigned long long)st.bytes_sent, want);
    if (m == CM_NONE) CHECK(st.bytes_sent == want && want >= (size_t)(P - 1) * 4 * (n / (size_t)P) , "none sends fp32");

    /* one-shot all-reduce: against the two-shot one (exact) or the bound */
    float* two = malloc(n * sizeof(float) + 4);
    memcpy(two, x, n * sizeof(float));
    fill(x, n, rank, (int)n);
    CollStats st1 = {0};
    coll_allreduce_one_shot(MPI_COMM_WORLD, &p, x, n, 99, &s, &st1);
    if (m == CM_NONE) {
        CHECK(memcmp(x, two, n * sizeof(float)) == 0, "one-shot none n=%zu P=%d: differs from the two-shot exact sum", n, P);
    } else {
        double e1 = rel_err(x, ref, n), bound1 = 1.05 * compress_error_bound(&p) * ratio;
        CHECK(e1 <= bound1, "one-shot %s n=%zu P=%d: rel err %.3g > bound %.3g", compress_method_name(m), n, P, e1, bound1);
    }
    CHECK(same_on_all_ranks(x, n), "one-shot %s n=%zu P=%d: ranks disagree", compress_method_name(m), n, P);
    CHECK(st1.bytes_sent == compress_bound(&p, n) * (size_t)(P - 1), "one-shot %s n=%zu: bytes %llu, expected %zu",
          compress_method_name(m), n, (unsigned long long)st1.bytes_sent, compress_bound(&p, n) * (size_t)(P - 1));
    free(two);

    /* reduce-scatter alone: my chunk of the sum */
    fill(x, n, rank, (int)n);
    float* mine = malloc((mcnt + 1) * sizeof(float));
    coll_reduce_scatter(MPI_COMM_WORLD, &p, x, n, mine, 7, &s, NULL);
    double er = rel_err(mine, ref + mb, mcnt);
    double b1 = m == CM_NONE ? 1e-6 : compress_error_bound(&p);
    CHECK(er <= (m == CM_NONE ? b1 : b1 * ratio_mine), "reduce_scatter %s n=%zu P=%d: rel err %.3g > %.3g", compress_method_name(m), n, P, er, b1);

    /* all-gather alone: every rank contributes its chunk of a known tensor */
    float* full = malloc(n * sizeof(float) + 4);
    fill(full, n, 1000, (int)n);                     /* the same tensor on every rank */
    coll_all_gather(MPI_COMM_WORLD, &p, full + mb, n, x, 8, &s, NULL);
    double* fd = malloc((n + 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) fd[i] = full[i];
    double eg = rel_err(x, fd, n);
    CHECK(m == CM_NONE ? eg == 0.0 : eg <= b1, "all_gather %s n=%zu P=%d: rel err %.3g", compress_method_name(m), n, P, eg);
    CHECK(same_on_all_ranks(x, n), "all_gather %s n=%zu: ranks disagree", compress_method_name(m), n);

    free(x); free(ref); free(tmp); free(mine); free(full); free(fd);
    coll_scratch_free(&s);
}

/* the sp row exchanges of N = P K rs rows of C columns, K pieces per rank */
static void test_sp(CompressMethod m, int rs, int C, int K) {
    CompressParams p;
    compress_params_default(&p, m);
    CollScratch s = {0};
    const int N = P * K * rs, R = N / P;
    const size_t n = (size_t)N * C, nl = (size_t)R * C;
    float* x = malloc(n * sizeof(float));
    float* tmp = malloc(n * sizeof(float));
    float* sum32 = calloc(nl, sizeof(float));        /* rank-order fp32 sum of my rows */
    double* ref = calloc(nl, sizeof(double));
    double norms = 0.0, nref = 0.0;
    for (int r = 0; r < P; r++) {
        fill(tmp, n, r, 31 * C + rs);
        double a = 0.0;
        for (int k = 0; k < K; k++) {
            int g0, rows;
            sp_piece(N, P, K, rank, k, &g0, &rows);
            for (size_t i = 0; i < (size_t)rows * C; i++) {
                size_t li = (size_t)k * rows * C + i;
                float v = tmp[(size_t)g0 * C + i];
                sum32[li] = r == 0 ? v : sum32[li] + v;
                ref[li] += v;
                a += (double)v * v;
            }
        }
        norms += sqrt(a);
    }
    for (size_t i = 0; i < nl; i++) nref += ref[i] * ref[i];
    const double ratio = nref > 0 ? norms / sqrt(nref) : 1.0, b1 = compress_error_bound(&p);
    const char* name = compress_method_name(m);
    fill(x, n, rank, 31 * C + rs);

    float* local = malloc(nl * sizeof(float));
    float* local1 = malloc(nl * sizeof(float));
    CollStats st = {0};
    sp_reduce_scatter_host(MPI_COMM_WORLD, K, &p, x, local, N, C, 0, K, 5, &s, &st);
    for (int k = 0; k < K; k++) sp_reduce_scatter_host(MPI_COMM_WORLD, K, &p, x, local1, N, C, k, k + 1, 5, &s, NULL);
    CHECK(memcmp(local, local1, nl * sizeof(float)) == 0, "sp rs %s N=%d C=%d K=%d: one segment per call differs", name, N, C, K);
    const size_t piece = (size_t)rs * C, want = (size_t)K * (size_t)(P - 1) * compress_bound(&p, piece);
    CHECK(st.bytes_sent == want, "sp rs %s: bytes %llu, expected %zu", name, (unsigned long long)st.bytes_sent, want);
    if (m == CM_NONE) {
        CHECK(memcmp(local, sum32, nl * sizeof(float)) == 0, "sp rs none N=%d C=%d K=%d: not the rank-order fp32 sum", N, C, K);
    } else {
        double e = rel_err(local, ref, nl);
        CHECK(e <= b1 * ratio, "sp rs %s N=%d C=%d K=%d: rel err %.3g > %.3g", name, N, C, K, e, b1 * ratio);
    }

    /* the all-gather of what the reduce-scatter left: exact, the all-reduce's bits */
    float* out = malloc(n * sizeof(float));
    float* out1 = malloc(n * sizeof(float));
    st = (CollStats){0};
    sp_all_gather_host(MPI_COMM_WORLD, K, &p, local, out, N, C, 0, K, 6, &s, &st);
    for (int k = 0; k < K; k++) sp_all_gather_host(MPI_COMM_WORLD, K, &p, local, out1, N, C, k, k + 1, 6, &s, NULL);
    CHECK(memcmp(out, out1, n * sizeof(float)) == 0, "sp ag %s N=%d C=%d K=%d: one segment per call differs", name, N, C, K);
    CHECK(st.bytes_sent == want, "sp ag %s: bytes %llu, expected %zu", name, (unsigned long long)st.bytes_sent, want);
    CHECK(same_on_all_ranks(out, n), "sp ag %s N=%d C=%d K=%d: ranks disagree", name, N, C, K);
    if (m == CM_NONE) {
        coll_allreduce(MPI_COMM_WORLD, &p, &p, x, n, 0, &s, NULL);
        CHECK(memcmp(out, x, n * sizeof(float)) == 0, "sp rs + ag none N=%d C=%d K=%d: not the all-reduce's bits", N, C, K);
    }
    /* the all-gather alone, of a tensor every rank knows */
    fill(tmp, n, 1000, C);
    for (int k = 0; k < K; k++) {
        int g0, rows;
        sp_piece(N, P, K, rank, k, &g0, &rows);
        memcpy(local + (size_t)k * rows * C, tmp + (size_t)g0 * C, (size_t)rows * C * sizeof(float));
    }
    sp_all_gather_host(MPI_COMM_WORLD, K, &p, local, out, N, C, 0, K, 7, &s, NULL);
    double* fd = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) fd[i] = tmp[i];
    double eg = rel_err(out, fd, n);
    CHECK(m == CM_NONE ? eg == 0.0 : eg <= b1, "sp ag %s N=%d C=%d K=%d: rel err %.3g", name, N, C, K, eg);
    CHECK(same_on_all_ranks(out, n), "sp ag %s: ranks disagree", name);

    free(x); free(tmp); free(sum32); free(ref); free(local); free(local1); free(out); free(out1); free(fd);
    coll_scratch_free(&s);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    /* chunking: covers [0,n) exactly, aligned */
    for (size_t n = 0; n < 300; n += 7) {
        size_t end = 0;
        for (int i = 0; i < P; i++) {
            size_t b, c;
            coll_chunk(n, P, i, 64, &b, &c);
            if (b != end || (i < P - 1 && c % 64 != 0 && b + c != n)) { failures++; printf("FAIL chunking n=%zu\n", n); }
            end = b + c;
        }
        if (end != n) { failures++; printf("FAIL chunk cover n=%zu\n", n); }
    }
    const size_t sizes[] = {1, 7, 1000, 12345, 100003};
    const CompressMethod methods[] = {CM_NONE, CM_FP8_TENSOR, CM_FP8_GROUP, CM_INT8_GROUP, CM_TACO};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (size_t k = 0; k < sizeof(methods) / sizeof(methods[0]); k++) test_method(methods[k], sizes[i]);
    const int sp_shapes[][3] = {{3, 37, 2}, {5, 64, 4}, {7, 100, 1}, {1, 768, 3}};   /* rows per piece, C, K */
    for (size_t i = 0; i < sizeof(sp_shapes) / sizeof(sp_shapes[0]); i++)
        for (size_t k = 0; k < sizeof(methods) / sizeof(methods[0]); k++)
            test_sp(methods[k], sp_shapes[i][0], sp_shapes[i][1], sp_shapes[i][2]);
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("test_collectives (P=%d): %s\n", P, total ? "FAILED" : "all passed");
    MPI_Finalize();
    return total ? 1 : 0;
}
