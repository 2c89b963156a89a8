/*
 * comm/watchdog.c - see watchdog.h for the protocol.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include "comm/watchdog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"

enum { WD_TAG = 7, WD_NOTE = 160, WD_PROBE_EVERY = 256 };

static double wd_limit = 0.0;               /* seconds; 0 = off */
static MPI_Comm wd_comm = MPI_COMM_NULL;    /* notes between timed-out ranks */
static int wd_step = -1;
static const char* wd_site = NULL;

void wd_init(double timeout_s) {
    if (wd_comm == MPI_COMM_NULL) {
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &wd_comm));
        MPI_CHECK(MPI_Comm_set_errhandler(wd_comm, MPI_ERRORS_RETURN));
    }
    wd_limit = timeout_s > 0 ? timeout_s : 0.0;
}

void wd_free(void) {
    if (wd_comm != MPI_COMM_NULL) MPI_Comm_free(&wd_comm);
    wd_comm = MPI_COMM_NULL;
    wd_limit = 0.0;
}

double wd_timeout(void) { return wd_limit; }
void wd_set_step(int step) { wd_step = step; }
void wd_set_site(const char* site) { wd_site = site; }

static void where_am_i(char* out, size_t cap, const char* op) {
    if (wd_step >= 0) snprintf(out, cap, "step %d, %s%s%s", wd_step + 1, wd_site ? "site " : "", wd_site ? wd_site : "", wd_site ? ", " : "");
    else snprintf(out, cap, "before training, ");
    size_t k = strlen(out);
    snprintf(out + k, cap - k, "%s", op);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* The deadline passed (or a peer's note says the job is going down): tell
 * every rank, hear who answers, report, end the job. Never returns. */
static void wd_fire(MPI_Comm comm, const char* op, double waited, int told) {
    /* The MPI calls below are unchecked on purpose: the job is being torn
     * down, and a failed note must not replace this report by another. */
    int me, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    char mine[WD_NOTE];
    where_am_i(mine, sizeof(mine), op);
    MPI_Request* sreq = malloc(sizeof(MPI_Request) * (size_t)world);
    char* notes = calloc((size_t)world, WD_NOTE);     /* what each rank answered; "" = nothing */
    if (!sreq || !notes) FATAL("watchdog: out of memory");
    for (int r = 0; r < world; r++) {
        sreq[r] = MPI_REQUEST_NULL;
        if (r != me) MPI_Isend(mine, WD_NOTE, MPI_CHAR, r, WD_TAG, wd_comm, &sreq[r]);
    }
    double t_end = MPI_Wtime() + WD_GRACE_S;
    while (MPI_Wtime() < t_end) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, WD_TAG, wd_comm, &flag, &st);
        if (!flag) { sleep_s(0.001); continue; }
        char buf[WD_NOTE];
        MPI_Recv(buf, WD_NOTE, MPI_CHAR, st.MPI_SOURCE, WD_TAG, wd_comm, MPI_STATUS_IGNORE);
        buf[WD_NOTE - 1] = '\0';
        memcpy(notes + (size_t)st.MPI_SOURCE * WD_NOTE, buf, WD_NOTE);
    }
    /* the peers of the stuck operation, as world ranks */
    MPI_Group g, wg;
    int n = 1;
    MPI_Comm_size(comm, &n);
    MPI_Comm_group(comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int* in = malloc(sizeof(int) * (size_t)n);
    int* peer = malloc(sizeof(int) * (size_t)n);
    if (!in || !peer) FATAL("watchdog: out of memory");
    for (int i = 0; i < n; i++) in[i] = i;
    MPI_Group_translate_ranks(g, n, in, wg, peer);
    char silent[512] = "", answered[1536] = "";
    size_t ks = 0, ka = 0;
    for (int i = 0; i < n; i++) {
        int r = peer[i];
        if (r == me || r == MPI_UNDEFINED) continue;
        const char* note = notes + (size_t)r * WD_NOTE;
        if (!note[0]) ks += (size_t)snprintf(silent + ks, ks < sizeof(silent) ? sizeof(silent) - ks : 0, "%s%d", ks ? ", " : "", r);
        else ka += (size_t)snprintf(answered + ka, ka < sizeof(answered) ? sizeof(answered) - ka : 0, "; rank %d waits at %s", r, note);
    }
    fprintf(stderr, "[rank %d] error: watchdog: %s has not completed after %.0f s (comm.timeout_s = %g)%s. %s%s%s%s. "
            "Ending the job: check the named ranks and their nodes; if a step legitimately takes longer, raise "
            "comm.timeout_s\n", me, mine, waited, wd_limit, told ? " and a peer timed out" : "",
            silent[0] ? "Waiting on world rank " : "Every peer answered", silent, silent[0] ? " (no answer within "
            "2 s: stopped, hung or dead?)" : "", answered);
    fflush(stderr);
    sleep_s(0.5);   /* let the other reports reach stderr before the job is torn down */
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void wd_clock_start(WdClock* k) {
    k->t0 = MPI_Wtime();
    k->iter = 0;
}

void wd_poll(WdClock* k, MPI_Comm comm, const char* op) {
    if (wd_limit <= 0) return;
    double waited = MPI_Wtime() - k->t0;
    if (waited > wd_limit) wd_fire(comm, op, waited, 0);
    if (++k->iter % WD_PROBE_EVERY) return;
    int flag = 0;   /* a peer timed out: the job is going down, report where we are */
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, WD_TAG, wd_comm, &flag, MPI_STATUS_IGNORE));
    if (flag) wd_fire(comm, op, waited, 1);
}

void wd_waitall(int n, MPI_Request* reqs, MPI_Comm comm, const char* op) {
    if (wd_limit <= 0) {
        MPI_CHECK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
        return;
    }
    WdClock k;
    wd_clock_start(&k);
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
        if (done) return;
        wd_poll(&k, comm, op);
    }
}

void wd_allreduce(const void* send, void* recv, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm, const char* what) {
    MPI_Request r;
    MPI_CHECK(MPI_Iallreduce(send, recv, n, t, op, comm, &r));
    wd_waitall(1, &r, comm, what);
}

void wd_bcast(void* buf, int n, MPI_Datatype t, int root, MPI_Comm comm, const char* what) {
    MPI_Request r;
    MPI_CHECK(MPI_Ibcast(buf, n, t, root, comm, &r));
    wd_waitall(1, &r, comm, what);
}

void wd_barrier(MPI_Comm comm, const char* what) {
    MPI_Request r;
    MPI_CHECK(MPI_Ibarrier(comm, &r));
    wd_waitall(1, &r, comm, what);
}

void wd_allgather(const void* send, int n, MPI_Datatype t, void* recv, MPI_Comm comm, const char* what) {
    MPI_Request r;
    MPI_CHECK(MPI_Iallgather(send, n, t, recv, n, t, comm, &r));
    wd_waitall(1, &r, comm, what);
}

void wd_gather(const void* send, int n, MPI_Datatype t, void* recv, int root, MPI_Comm comm, const char* what) {
    MPI_Request r;
    MPI_CHECK(MPI_Igather(send, n, t, recv, n, t, root, comm, &r));
    wd_waitall(1, &r, comm, what);
}
