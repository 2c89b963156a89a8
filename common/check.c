/*
 * common/check.c - implementation of the checked calls in check.h.
 */
#include "common/check.h"

#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void check_fatal(const char* file, int line, const char* fmt, ...) {
    int rank = -1, up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    va_list ap;
    va_start(ap, fmt);
    if (rank >= 0) fprintf(stderr, "[rank %d] error: ", rank);
    else fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (%s:%d)\n", file, line);
    fflush(stderr);
    if (up && !down) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void check_mpi(int err, const char* call, const char* file, int line) {
    if (err == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    check_fatal(file, line, "MPI call failed: %s: %s. Check that every rank runs the same "
                "config and that mpirun's -np matches parallel.tp * parallel.dp", call, msg);
}

int check_errorf(char* err, size_t errlen, const char* fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        for (char* p = err; *p; p++) {
            if (*p == '\n' || *p == '\r') *p = ' ';
        }
    }
    return -1;
}

FILE* check_fopen(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (!f) {
        check_fatal(file, line, "cannot open '%s' (mode %s): %s. Check the path exists and is %s",
                    path, mode, strerror(errno), mode[0] == 'r' ? "readable" : "writable");
    }
    return f;
}

void check_fread(void* ptr, size_t size, size_t n, FILE* f, const char* what, const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        check_fatal(file, line, "short read of %s: wanted %zu items, got %zu (%s). The file is "
                    "truncated or not in the expected format", what, n, got,
                    ferror(f) ? strerror(errno) : "end of file");
    }
}

void check_fwrite(const void* ptr, size_t size, size_t n, FILE* f, const char* what, const char* file, int line) {
    size_t put = fwrite(ptr, size, n, f);
    if (put != n) {
        check_fatal(file, line, "short write of %s: wanted %zu items, wrote %zu (%s). Is the disk full?",
                    what, n, put, strerror(errno));
    }
}

void check_fclose(FILE* f, const char* what, const char* file, int line) {
    if (fclose(f) != 0) {
        check_fatal(file, line, "closing %s failed: %s. Is the disk full?", what, strerror(errno));
    }
}

void* check_malloc(size_t bytes, const char* file, int line) {
    void* p = malloc(bytes ? bytes : 1);
    if (!p) check_fatal(file, line, "out of host memory allocating %zu bytes; use a smaller model or batch", bytes);
    return p;
}

void* check_calloc(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p) check_fatal(file, line, "out of host memory allocating %zu x %zu bytes; use a smaller model or batch", n, size);
    return p;
}

FILE* check_fopen_err(const char* path, const char* mode, char* err, size_t errlen) {
    FILE* f = fopen(path, mode);
    if (!f) {
        check_errorf(err, errlen, "cannot open '%s' (mode %s): %s. Check the path exists and is %s", path, mode,
                     strerror(errno), mode[0] == 'r' ? "readable" : "writable");
    }
    return f;
}

int check_fwrite_err(const void* ptr, size_t size, size_t n, FILE* f, const char* what, char* err, size_t errlen) {
    size_t put = fwrite(ptr, size, n, f);
    if (put == n) return 0;
    return check_errorf(err, errlen, "writing %s failed after %zu of %zu items: %s. Is the disk full?", what, put, n,
                        strerror(errno));
}

int check_fputs_err(const char* s, FILE* f, const char* what, char* err, size_t errlen) {
    if (fputs(s, f) >= 0) return 0;
    return check_errorf(err, errlen, "writing %s failed: %s. Is the disk full?", what, strerror(errno));
}

int check_fclose_err(FILE* f, const char* what, char* err, size_t errlen) {
    int e = 0;
    if (fflush(f) != 0) e = errno;
    else if (fsync(fileno(f)) != 0 && errno != EINVAL && errno != EROFS) e = errno; /* EINVAL: a pipe or tty, nothing to sync */
    if (fclose(f) != 0 && e == 0) e = errno;
    if (e == 0) return 0;
    return check_errorf(err, errlen, "writing %s failed: %s. Is the disk full?", what, strerror(e));
}
