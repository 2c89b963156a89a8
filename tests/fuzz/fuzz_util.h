/*
 * tests/fuzz/fuzz_util.h - shared by the libFuzzer harnesses: the loaders
 * under test take a path (they are the code a run executes, unchanged), so
 * each input is written to an anonymous in-memory file and handed over as
 * /proc/self/fd/N.
 */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#ifndef _GNU_SOURCE /* the Makefile defines it; a harness built by hand may not */
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* a memfd holding data[0..n); its path in path; returns the fd (close it) */
static int fuzz_file(const uint8_t* data, size_t n, char* path, size_t cap) {
    int fd = memfd_create("fuzz", 0);
    if (fd < 0) { perror("memfd_create"); abort(); }
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, data + off, n - off);
        if (w <= 0) { perror("write"); abort(); }
        off += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
