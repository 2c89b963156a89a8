/*
 * tests/testing.h - the check macro of the single-process C tests.
 *
 * CHECK(cond, fmt, ...) counts a failure and prints where and why (the first
 * 30 only, so a systematic bug does not flood the log); a test's main()
 * returns non-zero when `failures` is. Tests that write files get a fresh
 * directory, tmpdir, from testing_begin() and end with testing_end(), which
 * removes it and prints the verdict.
 */
#ifndef TESTING_H
#define TESTING_H

#include <stdio.h>
#include <stdlib.h>

static int failures = 0;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            if (failures < 30) {                                           \
                printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
                printf(__VA_ARGS__);                                       \
                printf("\n");                                              \
            }                                                              \
            failures++;                                                    \
        }                                                                  \
    } while (0)

static char tmpdir[256];

/* makes tmpdir = /tmp/<name>_XXXXXX; 0 ok */
static inline int testing_begin(const char* name) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/%s_XXXXXX", name);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

/* removes tmpdir, prints the verdict; the test's exit status */
static inline int testing_end(const char* name) {
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
    if (failures) {
        printf("%s: %d check(s) FAILED\n", name, failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif /* TESTING_H */
