/*
 * tests/testing.h - the check macro of the single-process C tests.
 *
 * CHECK(cond, fmt, ...) counts a failure and prints where and why (the first
 * 30 only, so a systematic bug does not flood the log); a test's main()
 * returns non-zero when `failures` is.
 */
#ifndef TESTING_H
#define TESTING_H

#include <stdio.h>

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

#endif /* TESTING_H */
