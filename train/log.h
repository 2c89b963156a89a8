/*
 * train/log.h - the run's log: <log.dir>/log.jsonl (one JSON object per
 * logged step, written by world rank 0) and a progress line on stdout.
 */
#ifndef LOG_H
#define LOG_H

#include <stdio.h>

#include "comm/sites.h"

typedef struct {
    int step, steps;
    float loss, lr, grad_norm;
    double ms, tok_per_s;
    unsigned long long comm_bytes;
    double comm_ms;
    float val_loss;        /* < 0: not evaluated this step */
    int with_sites;        /* include per-site stats */
} StepRecord;

typedef struct {
    FILE* f;               /* NULL on ranks other than 0 */
    double t_start;
    int first_step;
    float* loss;           /* train loss per logged step, for the final curve */
    int nloss, cap;
    char path[1100];       /* <log.dir>/log.jsonl */
    int failed;            /* a write failed; err says how (rank 0) */
    char err[1024];
} Logger;

/* Creates log.dir, writes config.json (the effective config), truncates
 * log.jsonl, or on a resume (append) rewrites it atomically to end at step
 * first_step, then appends. Rank 0 only does file work. 0, or -1 with one
 * line in err. */
int log_open(Logger* lg, const char* dir, int is_rank0, int append, const char* config_json, int first_step, char* err,
             size_t errlen);
/* mkdir -p dir, then create and remove a file in it: 0 when writable, else -1
 * with one line in err naming `key` (the config key) and the directory. */
int log_probe_dir(const char* key, const char* dir, int rank, char* err, size_t errlen);
/* log_step and log_eval never end the run: a failed write sets lg->failed
 * and lg->err, which the trainer checks at each step boundary. */
void log_step(Logger* lg, const StepRecord* r, const Comm* c);
/* a line with only a validation loss (the evaluation before step 1) */
void log_eval(Logger* lg, int step, int steps, float val_loss);
/* prints the train-loss curve of this run as a text chart (rank 0) */
void log_print_curve(const Logger* lg);
/* Closes the log (flush + fsync); -1 with err when that or an earlier
 * write failed (lg->failed). */
int log_close(Logger* lg, char* err, size_t errlen);

#endif /* LOG_H */
