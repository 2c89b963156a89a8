/*
 * train/log.c - JSONL log and the human progress line.
 */
#include "train/log.h"

#include <errno.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/check.h"

void log_open(Logger* lg, const char* dir, int is_rank0, int append, const char* config_json, int first_step) {
    memset(lg, 0, sizeof(*lg));
    lg->t_start = MPI_Wtime();
    lg->first_step = first_step;
    if (!is_rank0) return;
    char buf[1100];
    snprintf(buf, sizeof(buf), "%s", dir);
    for (char* p = buf + 1; *p; p++) {      /* mkdir -p */
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) FATAL("cannot create log.dir %s: %s", dir, strerror(errno));
    snprintf(buf, sizeof(buf), "%s/config.json", dir);
    FILE* cf = fopenCheck(buf, "w");
    fputs(config_json, cf);
    fputc('\n', cf);
    fcloseCheck(cf, buf);
    snprintf(buf, sizeof(buf), "%s/log.jsonl", dir);
    lg->f = fopenCheck(buf, append ? "a" : "w");
}

static void format_eta(char* out, size_t cap, double seconds) {
    if (seconds < 0) seconds = 0;
    int s = (int)(seconds + 0.5);
    if (s >= 3600) snprintf(out, cap, "%dh%02dm", s / 3600, (s % 3600) / 60);
    else snprintf(out, cap, "%dm%02ds", s / 60, s % 60);
}

void log_step(Logger* lg, const StepRecord* r, const Comm* c) {
    if (!lg->f) return;
    size_t cap = 64 * 1024 + (size_t)c->nsites * 160;
    char* line = mallocCheck(cap);
    int w = snprintf(line, cap,
                     "{\"step\":%d,\"loss\":%.9g,\"lr\":%.6g,\"grad_norm\":%.6g,\"ms\":%.3f,\"tok_per_s\":%.1f,"
                     "\"comm_bytes\":%llu,\"comm_ms\":%.3f",
                     r->step, r->loss, r->lr, r->grad_norm, r->ms, r->tok_per_s, r->comm_bytes, r->comm_ms);
    if (r->val_loss >= 0) w += snprintf(line + w, cap - (size_t)w, ",\"val_loss\":%.9g", r->val_loss);
    if (r->with_sites && c->tp_size > 1) {
        line[w++] = ',';
        w += comm_sites_json(c, line + w, cap - (size_t)w - 4);
    }
    snprintf(line + w, cap - (size_t)w, "}\n");
    fputs(line, lg->f);
    fflush(lg->f);
    free(line);
    if (lg->nloss == lg->cap) {
        lg->cap = lg->cap ? 2 * lg->cap : 256;
        lg->loss = realloc(lg->loss, (size_t)lg->cap * sizeof(float));
        if (!lg->loss) FATAL("out of memory keeping the loss curve");
    }
    lg->loss[lg->nloss++] = r->loss;

    double elapsed = MPI_Wtime() - lg->t_start;
    int done = r->step - lg->first_step;
    char eta[32];
    format_eta(eta, sizeof(eta), done > 0 ? elapsed / done * (r->steps - r->step) : 0);
    printf("step %5d/%d | loss %.4f | lr %.2e | norm %6.3f | %7.1f ms | %8.0f tok/s | tp comm %7.2f MB | ETA %s",
           r->step, r->steps, r->loss, r->lr, r->grad_norm, r->ms, r->tok_per_s, r->comm_bytes / 1e6, eta);
    if (r->val_loss >= 0) printf(" | val %.4f", r->val_loss);
    printf("\n");
    fflush(stdout);
}

void log_eval(Logger* lg, int step, int steps, float val_loss) {
    if (!lg->f) return;
    fprintf(lg->f, "{\"step\":%d,\"val_loss\":%.9g}\n", step, val_loss);
    fflush(lg->f);
    printf("step %5d/%d | val %.4f\n", step, steps, val_loss);
    fflush(stdout);
}

void log_print_curve(const Logger* lg) {
    enum { W = 60, H = 10 };
    if (!lg->f || lg->nloss < 2) return;
    /* each column is the mean loss of its share of the steps */
    float col[W], lo = 1e30f, hi = -1e30f;
    int ncol = lg->nloss < W ? lg->nloss : W;
    for (int c = 0; c < ncol; c++) {
        int a = c * lg->nloss / ncol, b = (c + 1) * lg->nloss / ncol;
        double sum = 0.0;
        for (int i = a; i < b; i++) sum += lg->loss[i];
        col[c] = (float)(sum / (b - a));
        if (col[c] < lo) lo = col[c];
        if (col[c] > hi) hi = col[c];
    }
    if (hi - lo < 1e-6f) hi = lo + 1e-6f;
    printf("train loss, steps %d..%d:\n", lg->first_step + 1, lg->first_step + lg->nloss);
    for (int row = 0; row < H; row++) {
        float level = hi - (hi - lo) * (float)row / (H - 1);
        printf("%8.3f |", level);
        for (int c = 0; c < ncol; c++) {
            int r = (int)((hi - col[c]) / (hi - lo) * (H - 1) + 0.5f);
            putchar(r == row ? '*' : ' ');
        }
        putchar('\n');
    }
    printf("         +");
    for (int c = 0; c < ncol; c++) putchar('-');
    printf("\n");
    fflush(stdout);
}

void log_close(Logger* lg) {
    if (lg->f) fcloseCheck(lg->f, "log.jsonl");
    lg->f = NULL;
    free(lg->loss);
    lg->loss = NULL;
}
