/*
 * train/agree.c - see agree.h.
 */
#include "train/agree.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "comm/watchdog.h"
#include "common/check.h"

int agree_error(int failed, char* err, size_t errlen) {
    int world, rank, first;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    int mine = failed ? rank : world;
    wd_allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, "agreeing on an error");
    if (first == world) return 0;
    if (errlen > (size_t)INT32_MAX) errlen = (size_t)INT32_MAX;
    wd_bcast(err, (int)errlen, MPI_CHAR, first, MPI_COMM_WORLD, "sharing an error message");
    err[errlen - 1] = '\0';
    return 1;
}

void agree_or_exit(int failed, char* err, size_t errlen) {
    if (!agree_error(failed, err, errlen)) return;
    int rank;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    if (rank == 0) {
        fprintf(stderr, "%s\n", err);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(1);
}

void agree_prefix(char* err, size_t errlen, const char* prefix) {
    size_t p = strlen(prefix), n = strlen(err);
    if (p >= errlen) return;
    if (n + p >= errlen) n = errlen - p - 1;   /* the message's end gives way to the prefix */
    memmove(err + p, err, n);
    memcpy(err, prefix, p);
    err[p + n] = '\0';
}
