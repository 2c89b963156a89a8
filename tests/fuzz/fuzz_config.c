/*
 * tests/fuzz/fuzz_config.c - the config parser and --set.
 *
 * Input: a JSON config, then NUL-separated --set arguments ("key=value").
 * A config that loads must print to JSON that loads again (config.json of a
 * run is documented to be a loadable config).
 */
#include <string.h>

#include "tests/fuzz/fuzz_util.h"
#include "train/config.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    const uint8_t* nul = memchr(data, 0, n);
    size_t jlen = nul ? (size_t)(nul - data) : n;
    char path[64], err[1024];
    int fd = fuzz_file(data, jlen, path, sizeof(path));
    char* rest = NULL;
    char* sets[16];
    int nsets = 0;
    if (nul) {   /* the --set strings: a private NUL-terminated copy */
        size_t rn = n - jlen - 1;
        rest = malloc(rn + 1);
        memcpy(rest, nul + 1, rn);
        rest[rn] = '\0';
        for (char* p = rest; p < rest + rn && nsets < 16; p += strlen(p) + 1) sets[nsets++] = p;
    }
    Config c;
    if (config_load(&c, path, nsets, sets, err, sizeof(err)) == 0) {
        char* json = config_to_json(&c);
        char p2[64];
        int fd2 = fuzz_file((const uint8_t*)json, strlen(json), p2, sizeof(p2));
        Config again;
        if (config_load(&again, p2, 0, NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "config_to_json output does not load again: %s\n%s\n", err, json);
            abort();
        }
        close(fd2);
        free(json);
    } else if (!strchr(err, ' ') || strchr(err, '\n')) {
        fprintf(stderr, "an error must be one line of words: '%s'\n", err);
        abort();
    }
    free(rest);
    close(fd);
    return 0;
}
