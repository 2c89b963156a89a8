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
} Logger;

/* Creates log.dir, truncates log.jsonl unless appending (resume), writes
 * config.json (the effective config). Rank 0 only does file work. */
void log_open(Logger* lg, const char* dir, int is_rank0, int append, const char* config_json, int first_step);
void log_step(Logger* lg, const StepRecord* r, const Comm* c);
/* a line with only a validation loss (the evaluation before step 1) */
void log_eval(Logger* lg, int step, int steps, float val_loss);
/* prints the train-loss curve of this run as a text chart (rank 0) */
void log_print_curve(const Logger* lg);
void log_close(Logger* lg);

#endif /* LOG_H */
