/*
 * train/agree.h - ending a run cleanly on every rank after a failure that
 * may be local to some ranks (a file one rank cannot read or write).
 *
 * FATAL (common/check.h) ends the job with MPI_Abort: right for "cannot
 * happen" failures, but it kills the other ranks mid-way, so they cannot
 * remove their partial files and the user sees Open MPI's abort banner. Where
 * the ranks can meet (a step boundary, a checkpoint), they agree instead: one
 * collective finds the lowest failing rank, its message goes to every rank,
 * and each decides the same thing.
 */
#ifndef TRAIN_AGREE_H
#define TRAIN_AGREE_H

#include <stddef.h>

/* Collective over MPI_COMM_WORLD. Returns 1 when any rank passed failed != 0,
 * with the lowest failing rank's err copied into every rank's err; else 0. */
int agree_error(int failed, char* err, size_t errlen);
/* agree_error, then when any rank failed: world rank 0 prints err on stderr,
 * every rank finalizes MPI and exits with status 1. */
void agree_or_exit(int failed, char* err, size_t errlen);

/* puts prefix in front of the message in err (cut at errlen) */
void agree_prefix(char* err, size_t errlen, const char* prefix);

#endif /* TRAIN_AGREE_H */
