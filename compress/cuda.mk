# compress/cuda.mk - Makefile fragment for the CUDA compression kernels, the
# pipelined device collectives, their tests and benchmark. `include
# compress/cuda.mk` from the top Makefile (after model/cuda.mk, whose NVCC /
# CUDA_ARCH / MPI settings it reuses when they are set). It defines:
#   COMPRESS_CUDA_OBJS                  build/gpu/compress_cuda.o: link into build/train_gpu
#                                       (comm/collectives_cuda.c is plain C: add it to the
#                                       GPU build's C sources, like comm/collectives.c)
#   build/gpu/test_compress_gpu         kernels vs the CPU reference, bit for bit (GPU)
#   build/gpu/test_coll_gpu             device vs host collectives (mpirun -np 2 / 4; GPU)
#   build/gpu/bench_compress_gpu        bandwidth tables; --mpi: the all-reduce benchmark (GPU)
#   compress-ptxas                      registers / spills of the kernels -> build/gpu/compress_ptxas.txt
# The same two tests also run on the CPU under the emulator (no GPU; part of `make test`):
# build/emu/test_compress_gpu_emu and build/emu/test_coll_gpu_emu, built by tests/emu/emu.mk
# (`make -f tests/emu/emu.mk`) with the other emulated tests.
# The exact commands are also in compress/CUDA.md ("Build and run").
NVCC ?= nvcc
CUDA_HOME ?= /usr/local/cuda
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
MPI_CFLAGS ?= $(shell mpicc --showme:compile)
MPI_LIBS ?= $(shell mpicc --showme:link)

CMP_INC      = -Icommon -Icompress -Icomm -Imodel -Itrain
CMP_NVFLAGS  = -O3 -std=c++17 $(CUDA_ARCH) -DOPS_BF16 $(CMP_INC) $(MPI_CFLAGS) -Xcompiler -Wall,-Wextra -Werror all-warnings
# the CPU reference: IEEE, no contraction (compress/README.md)
CMP_CFLAGS   = -std=c11 -O2 -Wall -Wextra -ffp-contract=off -D_GNU_SOURCE -DOPS_BF16 $(CMP_INC) -I$(CUDA_HOME)/include
CMP_HDRS     = compress/compress_cuda.h compress/compress.h compress/fp8.h compress/hadamard.h compress/taco.h compress/bf16.h \
               compress/rng.h common/check.h
CMP_REF      = $(patsubst %.c,build/gpu/cref/%.o,compress/compress.c compress/taco.c compress/fp8.c \
               compress/hadamard.c comm/collectives.c common/check.c)
COMPRESS_CUDA_OBJS = build/gpu/compress_cuda.o
CMP_CUDART   = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lnccl

build/gpu/compress_cuda.o: compress/compress_cuda.cu $(CMP_HDRS)
	@mkdir -p build/gpu
	$(NVCC) $(CMP_NVFLAGS) -Xptxas -v -c $< -o $@ 2> $(@:.o=.ptxas) || { cat $(@:.o=.ptxas); exit 1; }

build/gpu/collectives_cuda.o: comm/collectives_cuda.c comm/collectives_cuda.h comm/comm.h comm/nccl_util.h $(CMP_HDRS)
	@mkdir -p build/gpu
	mpicc $(CMP_CFLAGS) -c $< -o $@

build/gpu/cref/%.o: %.c $(CMP_HDRS)
	@mkdir -p $(dir $@)
	mpicc $(CMP_CFLAGS) -c $< -o $@

build/gpu/test_compress_gpu: tests/test_compress_gpu.cu $(COMPRESS_CUDA_OBJS) $(CMP_REF)
	$(NVCC) $(CMP_NVFLAGS) -c tests/test_compress_gpu.cu -o build/gpu/test_compress_gpu.o
	$(NVCC) $(CUDA_ARCH) -o $@ build/gpu/test_compress_gpu.o $(COMPRESS_CUDA_OBJS) $(CMP_REF) $(MPI_LIBS)

build/gpu/test_coll_gpu: tests/test_coll_gpu.c build/gpu/collectives_cuda.o $(COMPRESS_CUDA_OBJS) $(CMP_REF)
	mpicc $(CMP_CFLAGS) -c tests/test_coll_gpu.c -o build/gpu/test_coll_gpu.o
	mpicc -o $@ build/gpu/test_coll_gpu.o build/gpu/collectives_cuda.o $(COMPRESS_CUDA_OBJS) $(CMP_REF) \
	  $(CMP_CUDART) -lstdc++ -lm

build/gpu/bench_compress_gpu: tools/bench_compress_gpu.cu build/gpu/collectives_cuda.o $(COMPRESS_CUDA_OBJS) $(CMP_REF)
	$(NVCC) $(CMP_NVFLAGS) -c tools/bench_compress_gpu.cu -o build/gpu/bench_compress_gpu.o
	$(NVCC) $(CUDA_ARCH) -o $@ build/gpu/bench_compress_gpu.o build/gpu/collectives_cuda.o $(COMPRESS_CUDA_OBJS) \
	  $(CMP_REF) $(MPI_LIBS) -L$(CUDA_HOME)/lib64 -lnccl

compress-ptxas: $(COMPRESS_CUDA_OBJS)
	sh tools/ptxas_report.sh < build/gpu/compress_cuda.ptxas > build/gpu/compress_ptxas.txt
	@cat build/gpu/compress_ptxas.txt
	@! grep SPILLS build/gpu/compress_ptxas.txt || echo "note: spills above (only the SR / int8 variants are expected near their cap)"

.PHONY: compress-ptxas
