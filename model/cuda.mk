# model/cuda.mk - Makefile fragment for the CUDA backend and its tests.
# `include model/cuda.mk` from the top Makefile (or paste it). It defines:
#   CUDA_OPS_OBJS                 the three objects of the op backend (model/ops.h)
#   CUDA_OBJS                     those plus the device weight init, for build/train_gpu
#   build/gpu/test_ops_gpu        CUDA ops vs the fp32 CPU reference (needs a GPU to run)
#   build/gpu/test_init_gpu       the device weight init: TP degrees agree bit for bit, the
#                                 distribution rules hold (needs a GPU to run; part of `make gpu`)
#   build/gpu/bench_ops_gpu       a GPT-2 124M step through ops.h, timed op by op (GPU)
#   cuda-ptxas                    registers/spills of every kernel -> build/gpu/ptxas.txt
# The same op test also runs on the CPU, against this backend under the CPU emulator
# (no GPU needed; part of `make test`): build/emu/test_ops_gpu_emu, built by
# tests/emu/emu.mk (`make -f tests/emu/emu.mk`) with the other emulated tests.
# Expects CC (gcc) and mpicc on PATH; NVCC and CUDA_HOME may be overridden.
NVCC ?= nvcc
CUDA_HOME ?= /usr/local/cuda
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
MPI_CFLAGS := $(shell mpicc --showme:compile)
MPI_LIBS := $(shell mpicc --showme:link)
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -DOPS_BF16 -Icommon -Imodel $(MPI_CFLAGS) -Xcompiler -Wall,-Wextra -Werror all-warnings
CUDA_LIBS := -lcublasLt -lcublas -lcudart
CUDA_OPS_OBJS := build/gpu/ops_cuda.o build/gpu/matmul_cuda.o build/gpu/attention_cuda.o
# init_cuda.o slices with model/params.c's shard blocks, so it links only where params.c does
CUDA_OBJS := $(CUDA_OPS_OBJS) build/gpu/init_cuda.o
CUDA_HDRS := model/ops.h model/cuda_common.cuh model/attention_kernels.cuh model/ops_cuda.h common/check.h

build/gpu/%.o: model/%.cu $(CUDA_HDRS)
	@mkdir -p build/gpu
	$(NVCC) $(NVCCFLAGS) -Xptxas -v -c $< -o $@ 2> $(@:.o=.ptxas) || { cat $(@:.o=.ptxas); exit 1; }
build/gpu/init_cuda.o: model/init_cuda.h model/params.h

cuda-ptxas: $(CUDA_OBJS)
	cat $(CUDA_OBJS:.o=.ptxas) | sh tools/ptxas_report.sh > build/gpu/ptxas.txt
	@! grep SPILLS build/gpu/ptxas.txt || echo "warning: register spills (above)"

# The fp32 reference with every ops.h function F renamed cpu_F (tests/ops_ref.syms).
build/gpu/ops_cpu_ref.o: model/ops_cpu.c model/ops.h tests/ops_ref.syms
	@mkdir -p build/gpu
	$(CC) -O2 -fopenmp -Wall -Wextra -Icommon -Imodel -c model/ops_cpu.c -o build/gpu/ops_cpu_plain.o
	objcopy --redefine-syms=tests/ops_ref.syms build/gpu/ops_cpu_plain.o $@
	@left=$$(nm -g --defined-only $@ | awk '{print $$3}' | grep -v "^cpu_" || true); \
	  [ -z "$$left" ] || { echo "not renamed (update tests/ops_ref.syms): $$left"; exit 1; }

build/gpu/check.o: common/check.c common/check.h
	@mkdir -p build/gpu
	mpicc -O2 -Wall -Wextra -Icommon -c $< -o $@

build/gpu/test_ops_gpu: tests/test_ops_gpu.cu tests/ops_ref.h $(CUDA_OPS_OBJS) build/gpu/ops_cpu_ref.o build/gpu/check.o
	$(NVCC) $(NVCCFLAGS) -Itests -c tests/test_ops_gpu.cu -o build/gpu/test_ops_gpu.o
	$(NVCC) $(CUDA_ARCH) -o $@ build/gpu/test_ops_gpu.o $(CUDA_OPS_OBJS) build/gpu/ops_cpu_ref.o build/gpu/check.o \
	  $(CUDA_LIBS) -lgomp $(MPI_LIBS)

# GPT-2 124M step through ops.h, op by op, with the copy/GEMM ceilings (needs a GPU to run)
build/gpu/bench_ops_gpu: tools/bench_ops_gpu.cu $(CUDA_OPS_OBJS) build/gpu/check.o
	$(NVCC) $(NVCCFLAGS) -c tools/bench_ops_gpu.cu -o build/gpu/bench_ops_gpu.o
	$(NVCC) $(CUDA_ARCH) -o $@ build/gpu/bench_ops_gpu.o $(CUDA_OPS_OBJS) build/gpu/check.o $(CUDA_LIBS) $(MPI_LIBS)

# The device weight init (needs a GPU to run). It links the trainer's objects, GPU_CORE of
# the top Makefile (defined after this file is included, so it cannot be a prerequisite
# here): build/train_gpu is, and brings every one of them up to date first.
gpu: build/gpu/test_init_gpu
build/gpu/test_init_gpu: tests/test_init_gpu.cu tests/testing.h model/init_cuda.h model/gpt.h model/params.h build/train_gpu
	$(NVCC) $(NVCCFLAGS) -Itests -Icomm -Icompress -Itrain -c $< -o $@.o
	$(CC) $(CFLAGS) $@.o $(GPU_CORE) -o $@ $(LDFLAGS) $(GPU_LIBS) $(LDLIBS)

.PHONY: cuda-ptxas
