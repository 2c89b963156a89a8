/*
 * train/memcheck.h - the up-front memory estimate of a run.
 *
 * Out of memory is otherwise the kernel's OOM killer (rc 137, no message)
 * or a failed allocation after the data and the model were set up. So before
 * the model is allocated every rank estimates its peak: the backend buffers
 * gpt_init allocates (counted by running its allocations without allocating:
 * weights, gradients, moments, activations), the exchange scratch, and the
 * host transients of loading a model and writing a checkpoint. The ranks of
 * one node add theirs up and compare with what the node has: MemAvailable
 * from /proc/meminfo and the cgroup's limit minus its usage (v2 memory.max,
 * or v1 memory.limit_in_bytes); in the GPU build also the free memory of
 * each GPU (cudaMemGetInfo), shared by the ranks on it. Rank 0 prints its
 * estimate; a node that does not fit is one error, before any allocation.
 */
#ifndef TRAIN_MEMCHECK_H
#define TRAIN_MEMCHECK_H

#include <stddef.h>

#include "comm/comm.h"
#include "model/params.h"

typedef struct {
    size_t weights;      /* params + grads + moments (+ bf16 copy), backend memory */
    size_t acts;         /* activations and backward scratch, backend memory */
    size_t scratch;      /* exchange buffers (host, and device in the GPU build) */
    size_t transient;    /* host: the full model at load / the gather at a checkpoint */
    size_t host, device; /* totals */
} MemEstimate;

void memcheck_estimate(MemEstimate* e, GPTShape s, const Comm* c, int B, int T, int on_device);
/* Host bytes available to this process: min(MemAvailable, cgroup limit -
 * usage); 0 when neither can be read. */
size_t memcheck_host_available(void);
/* Collective: estimates, prints rank 0's line, compares per node and per GPU.
 * Returns 0, or -1 with one line in err (on the ranks of the node that does
 * not fit; agree on it with agree_or_exit). */
int memcheck_run(GPTShape s, const Comm* c, int B, int T, char* err, size_t errlen);
/* Measured, GPU build: the device memory in use now on this rank's GPU
 * (cudaMemGetInfo: total - free), kept as a high-water mark in *peak. The
 * buffers are all allocated by the first step's end (the exchange scratch
 * grows during it), so sampling at every step's end finds the peak. */
void memcheck_sample(size_t* peak);
/* Collective: rank 0 prints "memory (measured): device high-water ... MiB
 * per rank (max over ranks)" (or "per GPU" where ranks share one: the device
 * counts their memory together); activations ... MiB (exact)", the activations
 * being the bytes of the activation buffers gpt_init allocated (what
 * parallel.sp shrinks). The CPU build prints the activations only. */
void memcheck_report(GPTShape s, const Comm* c, int B, int T, size_t peak);

#endif /* TRAIN_MEMCHECK_H */
