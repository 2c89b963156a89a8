#!/bin/sh
# tests/emu/build_emu.sh - build the CUDA backend for the CPU emulation
# (tests/emu/emu_cuda.h) and link it with tests/test_ops_gpu.cu into
# build/emu/test_ops_gpu_emu: the whole GPU op test, run on a machine without
# a GPU (slow: the kernels run thread by thread). With --run, runs it.
#
# The CUDA sources go through one rewrite: `k<<<cfg>>>(args)` becomes
# `emu_launch(k, cfg)(args)`; `#line` keeps error messages on the original
# file and line. Needs g++, gcc, mpicc, objcopy and the CUDA headers.
set -eu
B=build/emu
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$B"
CXXFLAGS="-std=c++17 -O2 -g -Wall -Wextra -Wno-unknown-pragmas -Wno-unused-parameter -DOPS_BF16 -Icommon -Imodel -Itests -Itests/emu -I$CUDA_HOME/include"

for f in ops_cuda matmul_cuda attention_cuda; do
    { echo "#line 1 \"model/$f.cu\""; sed -E 's/([A-Za-z_][A-Za-z0-9_]*(<[^<>;]*>)?)<<<(.*)>>>\(/emu_launch(\1, \3)(/' "model/$f.cu"; } > "$B/$f.cpp"
    g++ $CXXFLAGS -include tests/emu/emu_cuda.h -c "$B/$f.cpp" -o "$B/$f.o"
done
g++ $CXXFLAGS -c tests/emu/emu_cuda.cpp -o "$B/emu_cuda.o"
g++ $CXXFLAGS -x c++ -c tests/test_ops_gpu.cu -o "$B/test_ops_gpu.o"

# the fp32 reference with every ops.h function F renamed cpu_F, as for the GPU test
${CC:-gcc} -O2 -fopenmp -Wall -Wextra -Icommon -Imodel -c model/ops_cpu.c -o "$B/ops_cpu_plain.o"
objcopy --redefine-syms=tests/ops_ref.syms "$B/ops_cpu_plain.o" "$B/ops_cpu_ref.o"
mpicc -O2 -Wall -Wextra -Icommon -c common/check.c -o "$B/check.o"

mpicc -fopenmp -o "$B/test_ops_gpu_emu" "$B/test_ops_gpu.o" "$B/ops_cuda.o" "$B/matmul_cuda.o" "$B/attention_cuda.o" \
    "$B/emu_cuda.o" "$B/ops_cpu_ref.o" "$B/check.o" -lstdc++ -lm
echo "built $B/test_ops_gpu_emu"
if [ "${1:-}" = "--run" ]; then "$B/test_ops_gpu_emu"; fi
