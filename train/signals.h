/*
 * train/signals.h - a preemption-safe stop: SIGTERM, SIGINT, SIGUSR1.
 *
 * What a scheduler sends at preemption or at the time limit (Slurm: SIGTERM,
 * then SIGKILL after KillWait) must not lose the work since the last
 * checkpoint. The handler only records the signal (async-signal-safe: one
 * store to a sig_atomic_t); the training loop looks at it at each step
 * boundary, where the ranks agree (one all-reduce), so every rank stops after
 * the same step, writes a checkpoint there and exits 0 with a line saying how
 * to resume. A second signal of the same kind while stopping gets the default
 * action (the process ends), for a user who does not want to wait.
 *
 * Output must not stand in the way: Open MPI 4.1's mpirun, told to stop,
 * stops reading its ranks' output before it passes the signal on, so a rank
 * that prints blocks in write() and never reaches the checkpoint. Progress
 * lines therefore go out only once signals_stdout_ready() says so.
 */
#ifndef TRAIN_SIGNALS_H
#define TRAIN_SIGNALS_H

/* installs the handlers (after MPI_Init, so they replace any default) */
void signals_install(void);
/* the last signal received (SIGTERM, SIGINT or SIGUSR1), or 0 */
int signals_pending(void);
/* whether stdout can take a line now: waits while it is full, as a blocking
 * write would, until a stop signal is pending; from then on a full stdout
 * answers 0 and the caller drops its line */
int signals_stdout_ready(void);
/* "SIGTERM", "SIGINT", "SIGUSR1" */
const char* signals_name(int sig);

#endif /* TRAIN_SIGNALS_H */
