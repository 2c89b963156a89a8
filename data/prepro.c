/*
 * data/prepro.c - build/prepro: any text file -> byte-level token shards.
 *
 *   build/prepro --in corpus.txt --out-dir DIR [--val-frac 0.05] [--name NAME]
 *
 * Tokenisation is the identity on bytes (vocab 256: token = byte value), so
 * any UTF-8 text (or any file at all) works and no tokenizer file is needed.
 * It writes DIR/NAME_train.bin and DIR/NAME_val.bin in llm.c's shard format
 * (data/shard.h). The val split is the LAST val-frac of the bytes, not a
 * random sample: contiguous held-out text is what the loss curves of llm.c
 * style runs expect, and the split is reproducible with no seed. The split
 * point is moved forward to the next UTF-8 character boundary so no
 * character is cut in two. Each split must get at least 2 tokens (one input,
 * one target); the loader later demands one full batch per shard.
 */
#define _POSIX_C_SOURCE 200809L /* mkdir, stat */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/check.h"
#include "data/shard.h"

static void prepro_usage(FILE* out) {
    fprintf(out,
            "usage: build/prepro --in FILE --out-dir DIR [--val-frac F] [--name NAME]\n"
            "\n"
            "Turns a text file into byte-level token shards (vocab 256, token = byte value)\n"
            "in llm.c's .bin format: DIR/NAME_train.bin and DIR/NAME_val.bin.\n"
            "\n"
            "  --in FILE       input text (UTF-8, or any bytes)\n"
            "  --out-dir DIR   output directory, created if missing (like mkdir -p)\n"
            "  --val-frac F    fraction of the bytes held out for validation, in (0, 1);\n"
            "                  the val split is the LAST F of the file (default 0.05)\n"
            "  --name NAME     base name of the outputs (default: the input's file name\n"
            "                  without its extension)\n"
            "  --help          this text\n");
}

/* Print "prepro: error: ..." and exit 1. The tool runs outside MPI on one
 * process, so a plain exit is the right way out. */
#if defined(__GNUC__)
__attribute__((noreturn, format(printf, 1, 2)))
#endif
static void prepro_die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "prepro: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* mkdir -p: create every missing component; existing directories are fine. */
static void prepro_mkdirs(const char* dir) {
    size_t len = strlen(dir);
    char* p = (char*)mallocCheck(len + 1);
    memcpy(p, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char saved = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            prepro_die("cannot create output directory '%s': %s", p, strerror(errno));
        }
        p[i] = saved;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        prepro_die("output path '%s' exists but is not a directory", dir);
    }
    free(p);
}

/* Whole input in memory: byte-level data is at most a few GB and we need
 * the length before we can split it. */
static unsigned char* prepro_read(const char* path, size_t* n_out) {
    FILE* f = fopen(path, "rb");
    if (!f) prepro_die("cannot open input '%s': %s", path, strerror(errno));
    size_t cap = 1 << 20, n = 0;
    unsigned char* buf = (unsigned char*)mallocCheck(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            unsigned char* grown = (unsigned char*)realloc(buf, cap);
            if (!grown) prepro_die("out of memory reading '%s' (%zu bytes so far)", path, n);
            buf = grown;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) prepro_die("reading '%s' failed: %s", path, strerror(errno));
    fclose(f);
    *n_out = n;
    return buf;
}

/* Default NAME: "dir/bible.txt" -> "bible". A leading dot is part of the
 * name (".corpus" stays ".corpus"). */
static char* prepro_default_name(const char* path) {
    const char* base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    const char* dot = strrchr(base, '.');
    if (dot && dot != base) len = (size_t)(dot - base);
    char* name = (char*)mallocCheck(len + 1);
    memcpy(name, base, len);
    name[len] = '\0';
    return name;
}

/* Widen bytes to uint16 tokens and write one shard. */
static void prepro_write_split(const char* dir, const char* name, const char* split,
                               const unsigned char* bytes, size_t n) {
    size_t plen = strlen(dir) + strlen(name) + strlen(split) + 16;
    char* path = (char*)mallocCheck(plen);
    snprintf(path, plen, "%s/%s_%s.bin", dir, name, split);
    uint16_t* tokens = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) tokens[i] = bytes[i];
    char err[512];
    if (shard_write(path, tokens, n, err, sizeof(err)) != 0) prepro_die("%s", err);
    printf("prepro: wrote %s: %zu tokens\n", path, n);
    free(tokens);
    free(path);
}

int main(int argc, char** argv) {
    const char* in = NULL;
    const char* out_dir = NULL;
    const char* name_arg = NULL;
    double val_frac = 0.05;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            prepro_usage(stdout);
            return 0;
        }
        int takes_value = strcmp(a, "--in") == 0 || strcmp(a, "--out-dir") == 0 ||
                          strcmp(a, "--val-frac") == 0 || strcmp(a, "--name") == 0;
        if (!takes_value) {
            prepro_usage(stderr);
            prepro_die("unknown argument '%s'", a);
        }
        if (i + 1 >= argc) prepro_die("%s needs a value (see --help)", a);
        const char* v = argv[++i];
        if (strcmp(a, "--in") == 0) in = v;
        else if (strcmp(a, "--out-dir") == 0) out_dir = v;
        else if (strcmp(a, "--name") == 0) name_arg = v;
        else {
            char* end = NULL;
            val_frac = strtod(v, &end);
            if (end == v || *end != '\0' || !(val_frac > 0.0 && val_frac < 1.0)) {
                prepro_die("--val-frac: expected a number in (0, 1), got \"%s\"", v);
            }
        }
    }
    if (!in) {
        prepro_usage(stderr);
        prepro_die("missing --in FILE");
    }
    if (!out_dir || !out_dir[0]) {
        prepro_usage(stderr);
        prepro_die("missing --out-dir DIR");
    }
    if (name_arg && (!name_arg[0] || strchr(name_arg, '/'))) {
        prepro_die("--name: expected a plain file name without '/', got \"%s\"", name_arg);
    }

    size_t n = 0;
    unsigned char* bytes = prepro_read(in, &n);
    if (n == 0) prepro_die("input '%s' is empty", in);

    /* The val split is the last val_frac of the bytes, starting on a UTF-8
     * character boundary (continuation bytes are 10xxxxxx). */
    size_t split = n - (size_t)llround(val_frac * (double)n);
    while (split < n && (bytes[split] & 0xC0) == 0x80) split++;
    size_t n_train = split, n_val = n - split;
    if (n_train < 2 || n_val < 2) {
        prepro_die("input '%s' is too small: %zu bytes give %zu train and %zu val tokens with --val-frac %g, "
                   "and each split needs at least 2; use more text or another --val-frac", in, n, n_train,
                   n_val, val_frac);
    }
    if (n_train > (size_t)SHARD_MAX_TOKENS) {
        prepro_die("input '%s' is too large: the train split has %zu tokens, one shard holds at most %lld",
                   in, n_train, SHARD_MAX_TOKENS);
    }

    prepro_mkdirs(out_dir);
    char* name = name_arg ? NULL : prepro_default_name(in);
    const char* base = name_arg ? name_arg : name;
    if (!base[0]) prepro_die("cannot derive a name from '%s'; pass --name", in);
    prepro_write_split(out_dir, base, "train", bytes, n_train);
    prepro_write_split(out_dir, base, "val", bytes + n_train, n_val);
    printf("prepro: %zu bytes -> %zu train + %zu val tokens (vocab 256, byte-level; val = last %.4g of the file)\n",
           n, n_train, n_val, val_frac);
    free(name);
    free(bytes);
    return 0;
}
