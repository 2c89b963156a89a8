/* tests/cuda_emu/cuda_runtime.h - the emulator stands in for <cuda_runtime.h> (see cuda_emu.h) */
#include "cuda_emu.h"
