/*
 * comm/watchdog.h - every MPI wait of a run under a deadline (comm.timeout_s).
 *
 * A rank that stops (SIGSTOP, a hung driver, a dead node the network has not
 * noticed) would leave its peers spinning forever inside a collective. So
 * every collective of a training run is issued nonblocking and completed by
 * wd_waitall, which polls it against a deadline. When the deadline passes:
 *   1. the rank sends a note (its step, site and operation) to every other
 *      rank on a communicator of its own, and collects the notes of the
 *      others for a grace period (WD_GRACE_S); a rank that is itself waiting
 *      answers at once (it polls for notes while it waits) and reports too;
 *   2. it prints one line: the step, the exchange site, the operation and
 *      the peers of that collective that did not answer (stopped, hung or
 *      dead) and those that did, with where they are waiting;
 *   3. it ends the job with MPI_Abort.
 * The results are those of the blocking calls (the same MPI operations,
 * completed later), so the exact path stays bit-exact.
 *
 * The watchdog is process-wide (one deadline, one "where am I" label), as a
 * process has one main thread doing MPI. Before wd_init, or with a timeout of
 * 0, wd_waitall is MPI_Waitall: unit tests and tools need no setup.
 */
#ifndef COMM_WATCHDOG_H
#define COMM_WATCHDOG_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WD_GRACE_S 2.0   /* how long a timed-out rank collects its peers' answers */

/* Collective over MPI_COMM_WORLD (duplicates it for the notes). */
void wd_init(double timeout_s);
void wd_free(void);
double wd_timeout(void);
/* The label of the next waits: the training step and the exchange site
 * (a string that outlives the wait, e.g. a site name; NULL = none). */
void wd_set_step(int step);
void wd_set_site(const char* site);

/* MPI_Waitall under the deadline; op names the operation ("all-to-all") and
 * comm is the communicator of the requests (its members are the peers). */
void wd_waitall(int n, MPI_Request* reqs, MPI_Comm comm, const char* op);

/* For loops that poll their own requests (the device collectives): start the
 * clock, then call wd_poll in every iteration; it returns while the deadline
 * has not passed and ends the job (as above) when it has. */
typedef struct {
    double t0;
    unsigned iter;
} WdClock;
void wd_clock_start(WdClock* k);
void wd_poll(WdClock* k, MPI_Comm comm, const char* op);

/* The blocking collectives the trainer uses, under the deadline. */
void wd_allreduce(const void* send, void* recv, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm, const char* what);
void wd_bcast(void* buf, int n, MPI_Datatype t, int root, MPI_Comm comm, const char* what);
void wd_barrier(MPI_Comm comm, const char* what);
void wd_allgather(const void* send, int n, MPI_Datatype t, void* recv, MPI_Comm comm, const char* what);
void wd_gather(const void* send, int n, MPI_Datatype t, void* recv, int root, MPI_Comm comm, const char* what);

#ifdef __cplusplus
}
#endif
#endif /* COMM_WATCHDOG_H */
