# tests/emu/emu.mk - builds the project's CUDA code for the CPU emulator
# (tests/emu/emu_cuda.h says what it is) and links the three emulated tests
# and the emulated GPU trainer, all under build/emu/:
#   test_ops_gpu_emu       the op backend (every ops/*.cu)
#                          vs the fp32 CPU ops: tests/test_ops_gpu.cu (+ test_ops_gpu_qwen2.cu, test_ops_gpu_step.cu,
#                          test_ops_gpu_tma.cu)
#   test_compress_gpu_emu  the compression kernels (every compress/*.cu) vs the CPU
#                          reference, bit for bit: tests/test_compress_gpu.cu (--quick in CI)
#   test_coll_gpu_emu      the device collectives (comm/collectives_cuda.c, comm/sp_cuda.c, the IPC
#                          transport of comm/ipc_cuda.c) vs the host ones: tests/test_coll_gpu.c under
#                          mpirun (--quick; --nccl: NCCL = nccl_emu.c; --ipc: the IPC transport only)
#   train_gpu_emu          build/train_gpu from the same sources (every .c of train/, model/, comm/,
#                          common/, compress/ and data/'s library, every .cu of ops/, compress/, comm/,
#                          model/), linked against the emulator and nccl_emu.c: tests/test_train.sh runs
#                          small models through it (the CUDA graph of a step against the eager step)
# Standalone (not included by the top Makefile; tests/run_tests.sh calls it for `make test`):
#   make -f tests/emu/emu.mk [-j2]        build the three
#   make -f tests/emu/emu.mk run          build, then run them as `make test` does
# Needs g++, gcc, mpicc, objcopy and the CUDA headers (no GPU, no CUDA libraries).
# Sanitizer builds elsewhere: make -f tests/emu/emu.mk E=build/emu-asan EMU_FLAGS=-fsanitize=address
# (the emulator then allocates exact sizes and switches threads with ucontext, which ASan follows).
#
# The one source rewrite: every CUDA source (.cu) is copied to build/emu/<path>.cpp with
# `k<<<cfg>>>(args)` turned into `emu_launch(k, cfg)(args)` and a `#line` that keeps
# messages on the original file and line; compress_cuda.cu's LAUNCH macro expands to such
# a launch, so it is rewritten too. Every C++ unit is compiled with emu_cuda.h force-included
# and tests/emu first on the include path (its curand_kernel.h stands in for cuRAND's).
# The C files (the CPU references, collectives_cuda.c, test_coll_gpu.c, nccl_emu.c) are
# compiled as they are, against the real <cuda_runtime_api.h> and <nccl.h>.
CUDA_HOME ?= /usr/local/cuda
E ?= build/emu
EMU_FLAGS ?=
MPI_CFLAGS := $(shell mpicc --showme:compile)
EMU_INC := -Itests/emu -I. -I$(CUDA_HOME)/include
# IEEE arithmetic without contraction, as the CPU reference (compress/README.md).
# ATT_RASTER_BYTES: at the tests' sizes the attention kernels' block groups (att_block)
# would hold every (head, row) pair; 256 KB makes them 4 pairs at T = 256 (6 pairs: a
# group of 4 and a part-filled one) and 1 at T = 1024, so the grouping is tested.
EMU_CXXFLAGS := -std=c++17 -O2 -Wall -Wextra -Wno-unknown-pragmas -Wno-unused-parameter -ffp-contract=off \
                -DOPS_BF16 -DATT_RASTER_BYTES=262144u $(EMU_INC) $(MPI_CFLAGS) -include tests/emu/emu_cuda.h \
                $(EMU_FLAGS)
EMU_CFLAGS := -std=c11 -O2 -fopenmp -Wall -Wextra -ffp-contract=off -D_GNU_SOURCE -DOPS_BF16 -I. -I$(CUDA_HOME)/include $(EMU_FLAGS)
DEPFLAGS = -MMD -MP -MF $(@:.o=.dep)
SED_LAUNCH := s/([A-Za-z_][A-Za-z0-9_]*(<[^<>;]*>)?)<<<(.*)>>>\(/emu_launch(\1, \3)(/

EMU_RT   := $(E)/tests/emu/emu_sched.o $(E)/tests/emu/emu_wgmma.o $(E)/tests/emu/emu_tma.o $(E)/tests/emu/emu_runtime.o $(E)/tests/emu/emu_cublaslt.o
EMU_REF  := $(patsubst %.c,$(E)/%.o,$(wildcard compress/*.c) comm/collectives.c comm/watchdog.c common/check.c)
OPS_OBJS := $(patsubst %.cu,$(E)/%.o,$(wildcard ops/*.cu))
CMP_OBJ  := $(patsubst %.cu,$(E)/%.o,$(wildcard compress/*.cu))
TESTS    := $(E)/test_ops_gpu_emu $(E)/test_compress_gpu_emu $(E)/test_coll_gpu_emu
TRAIN_OBJ := $(patsubst %.c,$(E)/%.o,$(wildcard train/*.c model/*.c comm/*.c common/*.c compress/*.c) data/shard.c \
                                     data/tokenizer.c) \
             $(patsubst %.cu,$(E)/%.o,$(wildcard ops/*.cu compress/*.cu comm/*.cu model/*.cu))
LINK     := mpicc -fopenmp $(EMU_FLAGS)
LIBS     := -lstdc++ -lm

.PHONY: all run
.SECONDARY:
all: $(TESTS) $(E)/train_gpu_emu

# the rewrite of a CUDA source (the tests' .cu have no launches: it leaves them as they are)
$(E)/%.cpp: %.cu tests/emu/emu.mk
	@mkdir -p $(dir $@)
	{ echo '#line 1 "$<"'; sed -E '$(SED_LAUNCH)' $<; } > $@
$(E)/%.o: $(E)/%.cpp tests/emu/emu.mk
	g++ $(EMU_CXXFLAGS) $(DEPFLAGS) -c $< -o $@
$(E)/%.o: %.cpp tests/emu/emu.mk
	@mkdir -p $(dir $@)
	g++ $(EMU_CXXFLAGS) $(DEPFLAGS) -c $< -o $@
$(E)/%.o: %.c tests/emu/emu.mk
	@mkdir -p $(dir $@)
	mpicc $(EMU_CFLAGS) $(DEPFLAGS) -c $< -o $@
$(E)/tests/test_coll_gpu.o: EMU_CFLAGS += -DCC_EMU_BUILD

# the fp32 CPU ops (both files, one object) with every ops.h function F renamed cpu_F (tests/ops_ref.syms), as for the GPU test
$(E)/ops_cpu_ref.o: ops/ops_cpu.c ops/ops_cpu_qwen2.c ops/ops.h tests/ops_ref.syms tests/emu/emu.mk
	@mkdir -p $(E)
	gcc -O2 -fopenmp -Wall -Wextra -I. $(EMU_FLAGS) -c ops/ops_cpu.c -o $(E)/ops_cpu_gpt2.o
	gcc -O2 -fopenmp -Wall -Wextra -I. $(EMU_FLAGS) -c ops/ops_cpu_qwen2.c -o $(E)/ops_cpu_qwen2.o
	ld -r $(E)/ops_cpu_gpt2.o $(E)/ops_cpu_qwen2.o -o $(E)/ops_cpu_plain.o
	objcopy --redefine-syms=tests/ops_ref.syms $(E)/ops_cpu_plain.o $@
	@left=$$(nm -g --defined-only $@ | awk '{print $$3}' | grep -v "^cpu_" || true); \
	  [ -z "$$left" ] || { echo "not renamed (update tests/ops_ref.syms): $$left"; exit 1; }

$(E)/test_ops_gpu_emu: $(E)/tests/test_ops_gpu.o $(E)/tests/test_ops_gpu_qwen2.o $(E)/tests/test_ops_gpu_step.o $(E)/tests/test_ops_gpu_tma.o $(OPS_OBJS) $(EMU_RT) $(E)/ops_cpu_ref.o $(E)/common/check.o
	$(LINK) -o $@ $^ $(LIBS)
$(E)/test_compress_gpu_emu: $(E)/tests/test_compress_gpu.o $(CMP_OBJ) $(EMU_RT) $(EMU_REF)
	$(LINK) -o $@ $^ $(LIBS)
$(E)/test_coll_gpu_emu: $(E)/tests/test_coll_gpu.o $(E)/comm/collectives_cuda.o $(E)/comm/oneshot_cuda.o $(E)/comm/stats_cuda.o \
                        $(E)/comm/ipc_cuda.o $(E)/comm/scratch_cuda.o $(E)/comm/sp_cuda.o $(E)/comm/sp.o \
                        $(CMP_OBJ) $(EMU_RT) \
                        $(E)/tests/emu/nccl_emu.o $(EMU_REF)
	$(LINK) -o $@ $^ $(LIBS)

$(E)/train_gpu_emu: $(TRAIN_OBJ) $(EMU_RT) $(E)/tests/emu/nccl_emu.o
	$(LINK) -o $@ $^ -lcjson $(LIBS)

# what `make test` runs (tests/run_tests.sh; the trainer's tests are tests/test_train.sh's)
run: $(TESTS)
	OMP_NUM_THREADS=2 $(E)/test_ops_gpu_emu
	$(E)/test_compress_gpu_emu --quick
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 $(E)/test_coll_gpu_emu --quick
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 3 $(E)/test_coll_gpu_emu --quick --nccl
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 4 $(E)/test_coll_gpu_emu --quick --ipc

-include $(shell find $(E) -name '*.dep' 2>/dev/null)
