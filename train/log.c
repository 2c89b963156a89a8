/*
 * train/log.c - JSONL log and the human progress line.
 */
#include "train/log.h"

#include <errno.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/stat.h>

#include "common/check.h"
#include "train/signals.h"

/* mkdir -p */
static int make_dirs(const char* dir, char* err, size_t errlen) {
    char buf[1100];
    snprintf(buf, sizeof(buf), "%s", dir);
    for (char* p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);   /* the last mkdir reports a failure of any level */
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return check_errorf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
    return 0;
}

int log_probe_dir(const char* key, const char* dir, int rank, char* err, size_t errlen) {
    if (make_dirs(dir, err, errlen) != 0) goto fail;
    char path[1200];
    snprintf(path, sizeof(path), "%s/.probe_r%d.tmp", dir, rank);
    FILE* f = fopenErr(path, "wb", err, errlen);
    if (!f) goto fail;
    int rc = fputsErr("probe\n", f, path, err, errlen);
    if (rc == 0) rc = fcloseErr(f, path, err, errlen);
    else fclose(f);
    remove(path);
    if (rc == 0) return 0;
fail:;
    char why[900];
    snprintf(why, sizeof(why), "%s", err);
    return check_errorf(err, errlen, "error: %s %s is not writable (%s); fix its permissions or free space, or "
                        "point %s elsewhere, before any training work is done", key, dir, why, key);
}

/* Keep the lines of path whose step is <= step, through path.tmp and a
 * rename, so a crash mid-way leaves the old log whole. A line cut by a crash
 * (no newline) or that does not start with {"step":N goes too. */
static int log_truncate(const char* path, int step, char* err, size_t errlen) {
    FILE* in = fopen(path, "rb");
    if (!in) return errno == ENOENT ? 0 : check_errorf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    char tmp[1200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* out = fopenErr(tmp, "wb", err, errlen);
    if (!out) { fclose(in); return -1; }
    char* line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, in)) > 0) {
        int s;
        if (line[len - 1] != '\n' || sscanf(line, "{\"step\":%d", &s) != 1 || s > step) continue;
        rc = fputsErr(line, out, tmp, err, errlen);
    }
    free(line);
    if (rc == 0 && ferror(in)) rc = check_errorf(err, errlen, "reading %s failed: %s", path, strerror(errno));
    fclose(in);
    if (rc == 0) rc = fcloseErr(out, tmp, err, errlen);
    else fclose(out);
    if (rc == 0 && rename(tmp, path) != 0) rc = check_errorf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc != 0) remove(tmp);
    return rc;
}

int log_open(Logger* lg, const char* dir, int is_rank0, int append, const char* config_json, int first_step, char* err,
             size_t errlen) {
    memset(lg, 0, sizeof(*lg));
    lg->t_start = MPI_Wtime();
    lg->first_step = first_step;
    if (!is_rank0) return 0;
    if (make_dirs(dir, err, errlen) != 0) return -1;
    char buf[1100];
    snprintf(buf, sizeof(buf), "%s/config.json", dir);
    FILE* cf = fopenErr(buf, "w", err, errlen);
    if (!cf) return -1;
    int rc = fputsErr(config_json, cf, buf, err, errlen);
    if (rc == 0) rc = fputsErr("\n", cf, buf, err, errlen);
    if (rc == 0) rc = fcloseErr(cf, buf, err, errlen);
    else fclose(cf);
    if (rc != 0) return -1;
    snprintf(buf, sizeof(buf), "%s/log.jsonl", dir);
    /* a resume continues the log at the checkpoint's step: the steps the
     * crashed run logged after it are run again and must appear once */
    if (append && log_truncate(buf, first_step, err, errlen) != 0) return -1;
    lg->f = fopenErr(buf, append ? "a" : "w", err, errlen);
    if (!lg->f) return -1;
    snprintf(lg->path, sizeof(lg->path), "%s", buf);
    return 0;
}

/* a failed log write is kept, not fatal: the trainer checks log_failed at the
 * step boundary, where all ranks agree to stop (so none is left waiting) */
static void log_write(Logger* lg, const char* text) {
    if (lg->failed) return;
    if (fputsErr(text, lg->f, lg->path, lg->err, sizeof(lg->err)) != 0) lg->failed = 1;
    else if (fflush(lg->f) != 0) {
        check_errorf(lg->err, sizeof(lg->err), "writing %s failed: %s. Is the disk full?", lg->path, strerror(errno));
        lg->failed = 1;
    }
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
    log_write(lg, line);
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
    if (!signals_stdout_ready()) return;   /* stopping, and nobody reads stdout */
    printf("step %5d/%d | loss %.4f | lr %.2e | norm %6.3f | %7.1f ms | %8.0f tok/s | tp comm %7.2f MB | ETA %s",
           r->step, r->steps, r->loss, r->lr, r->grad_norm, r->ms, r->tok_per_s, r->comm_bytes / 1e6, eta);
    if (r->val_loss >= 0) printf(" | val %.4f", r->val_loss);
    printf("\n");
    fflush(stdout);
}

void log_eval(Logger* lg, int step, int steps, float val_loss) {
    if (!lg->f) return;
    char line[128];
    snprintf(line, sizeof(line), "{\"step\":%d,\"val_loss\":%.9g}\n", step, val_loss);
    log_write(lg, line);
    if (!signals_stdout_ready()) return;
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

int log_close(Logger* lg, char* err, size_t errlen) {
    int rc = 0;
    if (lg->failed) rc = check_errorf(err, errlen, "%s", lg->err);
    if (lg->f && fcloseErr(lg->f, lg->path, rc ? NULL : err, rc ? 0 : errlen) != 0) rc = -1;
    lg->f = NULL;
    free(lg->loss);
    lg->loss = NULL;
    return rc;
}
