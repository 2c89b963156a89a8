/*
 * tests/emu/emu_internal.h - what the emulator's own files share (not for the
 * code under test, which sees emu_cuda.h only): the emulated device's shape,
 * the error exit, and the runtime's checks that the launches and cuBLASLt make.
 *   emu_sched.cpp    the SIMT scheduler, launches, warp primitives; emu_fail
 *   emu_wgmma.cpp    the warpgroup MMA (wgmma) of ops/wgmma.cuh
 *   emu_tma.cpp      the TMA tile copies and mbarriers of common/cuda_tma.cuh
 *   emu_runtime.cpp  the CUDA runtime: memory and its guard zones, streams,
 *                    events, errors, device queries
 *   emu_cublaslt.cpp cuBLASLt's matmul on host memory
 */
#ifndef EMU_INTERNAL_H
#define EMU_INTERNAL_H

#include "tests/emu/emu_cuda.h"

namespace emu {

/* the device: multiprocessors, resident blocks per SM, threads per block, shared memory per block */
enum { EMU_SMS = 4, EMU_OCC = 2, MAX_THREADS = 1024, SMEM_BYTES = 228 * 1024 };

/* prints the message (and the launch, block and thread when inside a kernel), exits 2 (emu_sched.cpp) */
[[noreturn]] void emu_fail(const char* fmt, ...);

/* emu_runtime.cpp */
extern cudaError_t last_error;                      /* what cudaGetLastError returns (and clears) */
void check_stream(cudaStream_t s, const char* what); /* a live stream, or a default one */
void check_all_guards(const char* when);             /* every device block's guard zones intact */
int kernel_smem_limit(const void* fn);               /* dynamic shared memory allowed for kernel fn */

/* emu_sched.cpp: a random bit of the scheduler's generator (EMU_SEED); the thread parks
 * until the mbarrier at shared offset off has completed its phase of this parity */
bool emu_rand_bit();
void emu_park_mbar(uint32_t off, unsigned parity);

/* emu_tma.cpp: whether that phase has completed (landing the copies that were waiting
 * for a reader); the mbarriers' state at a block's start and end; the encoder that
 * cudaGetDriverEntryPointByVersion hands out for cuTensorMapEncodeTiled */
bool mbar_phase_done(uint32_t off, unsigned parity);
void tma_block_start();
void tma_block_end();
void* tma_encode_entry();

} /* namespace emu */

#endif /* EMU_INTERNAL_H */
