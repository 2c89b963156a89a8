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
 */
#ifndef TRAIN_SIGNALS_H
#define TRAIN_SIGNALS_H

/* installs the handlers (after MPI_Init, so they replace any default) */
void signals_install(void);
/* the last signal received (SIGTERM, SIGINT or SIGUSR1), or 0 */
int signals_pending(void);
/* "SIGTERM", "SIGINT", "SIGUSR1" */
const char* signals_name(int sig);

#endif /* TRAIN_SIGNALS_H */
