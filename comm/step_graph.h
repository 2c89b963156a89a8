/*
 * comm/step_graph.h - what the exchanges need for a training step of several
 * ranks to be captured as one CUDA graph and replayed (train.cuda_graph;
 * the capture itself is ops/'s, the loop that decides it train/main.c's).
 *
 * A replay repeats the captured step's device work exactly: the same
 * kernels, transfers and event edges with the same arguments, and no host
 * code. So a run's exchanges qualify when every one of them is queued on the
 * device with nothing for the host to do or wait for: the NCCL backend, its
 * transfers, its rank-order sums and the step's two scalar sums
 * (comm_sum_step_dev) are; the MPI transport's progress loop, the IPC
 * transport's host tokens and sequence parallelism's host-staged sums of
 * the replicated gradients are not; and when a step's work is the same from
 * step to step: stochastic rounding draws its random streams per step, so
 * it is not. Some steps of a qualifying run still do host work in their
 * exchanges: calibrating a group size, timing compress.method "auto"'s
 * trials, sampling the compression error (comm.stats_every), dumping inputs
 * (comm.dump_step). Those steps run eagerly, between replays; the graph is
 * captured at the first step that does none of it, after one such step run
 * eagerly as the warm-up (it sizes every buffer).
 */
#ifndef COMM_STEP_GRAPH_H
#define COMM_STEP_GRAPH_H

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL when this run's steps may be captured (one rank always may), else
 * why not, as a phrase for the user's note ("the TP exchanges use MPI ..."). */
const char* comm_graph_blocker(const Comm* c);
/* After comm_step_begin: 1 if this step's exchanges do no host work, so it
 * may be captured or replayed; 0: it runs eagerly. The same on every rank. */
int comm_step_plain(const Comm* c);
/* Before the capture (ops_graph_begin): from now on the exchanges' device
 * buffers may not grow (they would move under the graph's nodes). */
void comm_graph_begin(Comm* c);
/* After the captured step (ops_graph_end): keep what its exchanges told the
 * host (bytes sent, calls, the exchange clock's marks) ... */
void comm_graph_captured(Comm* c);
/* ... and after each replay, put the same back: a replay runs no host code. */
void comm_graph_replayed(Comm* c);
/* Wait for the step's device work, under the watchdog when the step has
 * exchanges (a stopped peer is reported instead of hanging the wait). */
void comm_step_wait(Comm* c);
/* (comm_free's) */
void comm_graph_tally_free(Comm* c);

#ifdef __cplusplus
}
#endif
#endif /* COMM_STEP_GRAPH_H */
