/*
 * tools/compress_cli.c - build/compress: run one compressor on a file of floats.
 *
 *   build/compress roundtrip --method M [--format e4m3|e5m2] [--group-size G]
 *       [--no-hadamard] [--no-adaptive-scale] [--no-dual-scale]
 *       [--stochastic [--seed S]] [--stream K] [--delayed-amax A]
 *       --in X.f32 --out Y.f32
 *
 * Reads raw little-endian float32 (e.g. a tensor dumped from a run), sends it
 * through compress + decompress as one chunk, writes the decoded float32 and
 * prints one JSON line:
 *   {"method":..,"n":..,"rel_err":..,"max_abs_err":..,"snr_db":..,
 *    "bytes_in":..,"bytes_wire":..,"saturated":..,"nonfinite":..}
 * Errors are measured over the elements whose input is finite; a value that
 * is not a finite number (e.g. snr_db of an exact round trip) prints as null.
 *
 *   build/compress allreduce (the same options) [--unfused]
 *       --in X0.f32 --in X1.f32 [--in X2.f32 ...] --out Y.f32
 *
 * The two-shot all-reduce of P = (number of --in) ranks' tensors, as
 * comm/collectives.c's coll_allreduce runs it, without MPI: each rank's
 * tensor cut into P chunks on multiples of G (coll_chunk's cut), each chunk
 * compressed, rank j's P copies of chunk j summed and re-encoded by
 * decompress_sum_recompress (for taco: in the rotated domain), decoded. With
 * --unfused the middle step is the order used until 2026-12:
 * compress(decompress_sum(...)). Errors are against the exact (fp64) sum;
 * the JSON line is roundtrip's, plus "ranks". bytes_wire: one rank's bytes of
 * both phases.
 * Exit status: 0 ok, 1 file error, 2 bad command line.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "compress/compress.h"
#include "compress/methods.h"

static void cli_usage(FILE* f) {
    fprintf(f,
            "usage: compress roundtrip --method M [--format e4m3|e5m2] [--group-size G]\n"
            "           [--no-hadamard] [--no-adaptive-scale] [--no-dual-scale]\n"
            "           [--stochastic [--seed S]] [--stream K] [--delayed-amax A]\n"
            "           --in X.f32 --out Y.f32\n"
            "       compress allreduce (the same options) [--unfused] --in X0.f32 --in X1.f32 [...] --out Y.f32\n"
            "  M: none, cast, fp8_tensor, fp8_group, int8_group, taco\n"
            "  G: power of two 16..256 (default 64), for fp8_group, int8_group, taco\n"
            "  the --no-* switches turn off TACO's components (taco only)\n"
            "  --delayed-amax A: use A as the predicted amax for the chunk scale (taco, fp8_tensor)\n"
            "  X.f32 is raw little-endian float32; Y.f32 gets the decompressed values\n");
}

/* A command-line mistake: say what, show the usage, exit 2. */
#if defined(__GNUC__)
__attribute__((noreturn, format(printf, 1, 2)))
#endif
static void cli_fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    cli_usage(stderr);
    exit(2);
}

static unsigned long long cli_parse_u64(const char* opt, const char* s) {
    char* end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-') cli_fail("%s needs a non-negative integer, got '%s'", opt, s);
    return v;
}

/* JSON has no inf/NaN: print those as null. */
static void json_number(const char* key, double v, int last) {
    if (isfinite(v)) printf("\"%s\":%.9g%s", key, v, last ? "" : ",");
    else printf("\"%s\":null%s", key, last ? "" : ",");
}

static float* cli_read_floats(const char* path, size_t* n) {
    FILE* f = fopenCheck(path, "rb");
    if (fseek(f, 0, SEEK_END) != 0) FATAL("cannot seek in '%s': %s", path, strerror(errno));
    long bytes = ftell(f);
    if (bytes < 0) FATAL("cannot get the size of '%s': %s", path, strerror(errno));
    if (bytes == 0) FATAL("'%s' is empty: expected raw little-endian float32 values", path);
    if (bytes % 4 != 0)
        FATAL("'%s' is %ld bytes, not a multiple of 4: expected raw little-endian float32 values", path, bytes);
    rewind(f);
    *n = (size_t)bytes / 4;
    float* x = mallocCheck((size_t)bytes);
    freadCheck(x, sizeof(float), *n, f, path);
    fcloseCheck(f, path);
    return x;
}

#define MAX_RANKS 16

/* coll_chunk's cut (comm/collectives.c): chunk i of P on multiples of align */
static void chunk_of(size_t n, int P, int i, size_t align, size_t* b, size_t* c) {
    size_t units = (n + align - 1) / align, e;
    *b = units * (size_t)i / (size_t)P * align;
    e = units * (size_t)(i + 1) / (size_t)P * align;
    if (*b > n) *b = n;
    if (e > n) e = n;
    *c = e - *b;
}

static void print_errors(const char* method, size_t n, const double* exact, const float* y, int ranks, size_t wire,
                         const CompressStats* st) {
    double err2 = 0.0, norm2 = 0.0, max_abs = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(exact[i])) continue;
        double d = (double)y[i] - exact[i];
        err2 += d * d;
        norm2 += exact[i] * exact[i];
        if (!(fabs(d) <= max_abs)) max_abs = fabs(d); /* a NaN d propagates */
    }
    double rel = norm2 > 0.0 ? sqrt(err2 / norm2) : (err2 == 0.0 ? 0.0 : INFINITY);
    double snr = (err2 > 0.0 && norm2 > 0.0) ? 10.0 * log10(norm2 / err2) : INFINITY;
    printf("{\"method\":\"%s\",\"n\":%zu,", method, n);
    if (ranks) printf("\"ranks\":%d,", ranks);
    json_number("rel_err", rel, 0);
    json_number("max_abs_err", max_abs, 0);
    json_number("snr_db", snr, 0);
    printf("\"bytes_in\":%zu,\"bytes_wire\":%zu,\"saturated\":%llu,\"nonfinite\":%llu}\n", n * sizeof(float), wire,
           (unsigned long long)st->saturated, (unsigned long long)st->nonfinite);
}

/* the allreduce command (the header) */
static int run_allreduce(const CompressParams* p, const char* const* ins, int P, const char* out, int unfused) {
    if (P < 2) cli_fail("allreduce needs at least two --in files (one per rank)");
    float* x[MAX_RANKS];
    size_t n = 0;
    for (int r = 0; r < P; r++) {
        size_t m;
        x[r] = cli_read_floats(ins[r], &m);
        if (r && m != n) cli_fail("'%s' holds %zu floats, '%s' %zu: the ranks' tensors must have one size", ins[r], m, ins[0], n);
        n = m;
    }
    const size_t align = compress_method_uses_groups(p->method) ? (size_t)p->group_size : 1;
    double* exact = mallocCheck(n * sizeof(double));
    float* y = mallocCheck(n * sizeof(float));
    float* sum = mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        exact[i] = 0.0;
        for (int r = 0; r < P; r++) exact[i] += (double)x[r][i];
    }
    CompressStats tot = {0, 0, 0.0f};
    size_t wire = 0;
    for (int j = 0; j < P; j++) { /* chunk j: reduced by rank j */
        size_t b, c;
        chunk_of(n, P, j, align, &b, &c);
        const size_t cb = compress_bound(p, c);
        uint8_t* w = mallocCheck(cb * (size_t)P + 1);
        const uint8_t* copies[MAX_RANKS];
        CompressStats st;
        for (int r = 0; r < P; r++) { /* the reduce-scatter: every rank's copy of chunk j */
            compress(p, x[r] + b, c, (uint64_t)(r * MAX_RANKS + j), w + cb * (size_t)r, &st);
            copies[r] = w + cb * (size_t)r;
            tot.saturated += st.saturated;
            tot.nonfinite += st.nonfinite;
        }
        uint8_t* ag = mallocCheck(cb + 1);
        if (unfused) {
            if (c) decompress_sum(p, copies, P, c, sum);
            compress(p, sum, c, 1000u + (uint64_t)j, ag, &st);
        } else {
            decompress_sum_recompress(p, copies, P, c, p, 1000u + (uint64_t)j, ag, &st);
        }
        tot.saturated += st.saturated;
        tot.nonfinite += st.nonfinite;
        if (c) decompress(p, ag, c, y + b);
        if (j == 0) wire = 2 * cb * (size_t)(P - 1); /* rank 0 sends P - 1 chunks in each phase */
        free(w);
        free(ag);
    }
    FILE* f = fopenCheck(out, "wb");
    fwriteCheck(y, sizeof(float), n, f, out);
    fcloseCheck(f, out);
    print_errors(compress_method_name(p->method), n, exact, y, P, wire, &tot);
    for (int r = 0; r < P; r++) free(x[r]);
    free(exact);
    free(y);
    free(sum);
    return 0;
}

int main(int argc, char** argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        cli_usage(stdout);
        return 0;
    }
    const int allreduce = argc >= 2 && strcmp(argv[1], "allreduce") == 0;
    if (argc < 2 || (!allreduce && strcmp(argv[1], "roundtrip") != 0))
        cli_fail("the first argument must be the command 'roundtrip' or 'allreduce'");

    CompressParams p;
    compress_params_default(&p, CM_TACO);
    const char *method = NULL, *in = NULL, *out = NULL;
    const char* ins[MAX_RANKS];
    int nin = 0, unfused = 0;
    uint64_t stream = 0;
    for (int i = 2; i < argc; i++) {
        const char* a = argv[i];
        /* options that take a value */
        const char* with_value[] = {"--method", "--format", "--group-size", "--seed", "--stream", "--delayed-amax", "--in", "--out"};
        int takes = 0;
        for (size_t k = 0; k < sizeof(with_value) / sizeof(with_value[0]); k++) takes |= strcmp(a, with_value[k]) == 0;
        const char* v = NULL;
        if (takes) {
            if (i + 1 >= argc) cli_fail("option %s needs a value", a);
            v = argv[++i];
        }
        if (strcmp(a, "--method") == 0) method = v;
        else if (strcmp(a, "--in") == 0) {
            if (nin == MAX_RANKS) cli_fail("at most %d --in files", MAX_RANKS);
            in = ins[nin++] = v;
        } else if (strcmp(a, "--unfused") == 0 && allreduce) unfused = 1;
        else if (strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--format") == 0) {
            if (fp8_format_parse(v, &p.format) != 0) cli_fail("unknown --format '%s' (use e4m3 or e5m2)", v);
        } else if (strcmp(a, "--group-size") == 0) {
            unsigned long long g = cli_parse_u64(a, v);
            if (g > 1u << 20) cli_fail("--group-size %s is out of range", v);
            p.group_size = (int)g;
        } else if (strcmp(a, "--seed") == 0) p.seed = cli_parse_u64(a, v);
        else if (strcmp(a, "--stream") == 0) stream = cli_parse_u64(a, v);
        else if (strcmp(a, "--delayed-amax") == 0) {
            char* end;
            double d = strtod(v, &end);
            if (end == v || *end || !(d > 0.0) || !isfinite(d)) cli_fail("--delayed-amax needs a positive number, got '%s'", v);
            p.delayed = 1;
            p.delayed_amax = (float)d;
        } else if (strcmp(a, "--no-hadamard") == 0) p.hadamard = 0;
        else if (strcmp(a, "--no-adaptive-scale") == 0) p.adaptive_scale = 0;
        else if (strcmp(a, "--no-dual-scale") == 0) p.dual_scale = 0;
        else if (strcmp(a, "--stochastic") == 0) p.stochastic = 1;
        else cli_fail("unknown option '%s'", a);
    }
    if (!method) cli_fail("--method is required");
    if (!in) cli_fail("--in is required");
    if (!out) cli_fail("--out is required");
    if (compress_method_parse(method, &p.method) != 0) cli_fail("unknown --method '%s'", method);
    const char* bad = compress_params_error(&p);
    if (bad) cli_fail("%s", bad);
    if (allreduce) return run_allreduce(&p, ins, nin, out, unfused);
    if (nin > 1) cli_fail("roundtrip takes one --in");

    size_t n;
    float* x = cli_read_floats(in, &n);
    size_t wire_bytes = compress_bound(&p, n);
    uint8_t* wire = mallocCheck(wire_bytes);
    float* y = mallocCheck(n * sizeof(float));
    CompressStats st;
    compress(&p, x, n, stream, wire, &st);
    decompress(&p, wire, n, y);

    FILE* f = fopenCheck(out, "wb");
    fwriteCheck(y, sizeof(float), n, f, out);
    fcloseCheck(f, out);

    double* xd = mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) xd[i] = isfinite(x[i]) ? (double)x[i] : NAN;
    print_errors(compress_method_name(p.method), n, xd, y, 0, wire_bytes, &st);
    free(xd);
    free(x);
    free(y);
    free(wire);
    return 0;
}
