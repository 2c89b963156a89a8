#!/bin/sh
# tests/build_test_gpu.sh - build (and with --run, run) tests/test_ops_gpu: the
# CUDA backend against the fp32 CPU reference, linked into one binary.
#
# The same commands as Makefile rules are in model/CUDA.md ("Build"). Steps:
#   1. the three CUDA objects (sm_90 machine code + compute_90 PTX), -Xptxas -v
#      reports registers/spills into build/gpu/ptxas.txt (tools/ptxas_report.sh);
#   2. model/ops_cpu.c compiled as usual, then every ops.h symbol F renamed to
#      cpu_F (objcopy --redefine-syms=tests/ops_ref.syms), so both backends
#      link into one program;
#   3. common/check.c with mpicc (check_fatal calls MPI_Abort when MPI is up);
#   4. the test, linked with cuBLASLt, cuBLAS, cudart, OpenMP and MPI.
#   5. tools/bench_ops_gpu: a GPT-2 124M step through ops.h, timed op by op.
# Usage: sh tests/build_test_gpu.sh [--run | --bench | --all]   (from the repository root)
set -eu
B=build/gpu
mkdir -p "$B"
NVCC=${NVCC:-nvcc}
ARCH=${ARCH:-"-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"}
MPI_CFLAGS=$(mpicc --showme:compile)
MPI_LIBS=$(mpicc --showme:link)
NVFLAGS="-O3 -std=c++17 $ARCH -DOPS_BF16 -Icommon -Imodel $MPI_CFLAGS -Xcompiler -Wall,-Wextra -Werror all-warnings"

: > "$B/ptxas.txt"
for f in ops_cuda matmul_cuda attention_cuda; do
    $NVCC $NVFLAGS -Xptxas -v -c model/$f.cu -o "$B/$f.o" 2> "$B/$f.ptxas" || { cat "$B/$f.ptxas"; exit 1; }
    sh tools/ptxas_report.sh < "$B/$f.ptxas" >> "$B/ptxas.txt"
done
if grep -q SPILLS "$B/ptxas.txt"; then echo "warning: register spills:"; grep SPILLS "$B/ptxas.txt"; fi

# the CPU reference, renamed
${CC:-gcc} -O2 -fopenmp -Wall -Wextra -Icommon -Imodel -c model/ops_cpu.c -o "$B/ops_cpu_plain.o"
objcopy --redefine-syms=tests/ops_ref.syms "$B/ops_cpu_plain.o" "$B/ops_cpu_ref.o"
# every global function of ops.h must have been renamed: none may remain undecorated
left=$(nm -g --defined-only "$B/ops_cpu_ref.o" | awk '{print $3}' | grep -v '^cpu_' || true)
[ -z "$left" ] || { echo "error: not renamed in ops_cpu_ref.o (update tests/ops_ref.syms): $left"; exit 1; }

mpicc -O2 -Wall -Wextra -Icommon -c common/check.c -o "$B/check.o"

$NVCC $NVFLAGS -Itests -c tests/test_ops_gpu.cu -o "$B/test_ops_gpu.o"
$NVCC $ARCH -o "$B/test_ops_gpu" "$B/test_ops_gpu.o" "$B/ops_cuda.o" "$B/matmul_cuda.o" "$B/attention_cuda.o" \
    "$B/ops_cpu_ref.o" "$B/check.o" -lcublasLt -lcublas -lcudart -lgomp $MPI_LIBS
$NVCC $NVFLAGS -c tools/bench_ops_gpu.cu -o "$B/bench_ops_gpu.o"
$NVCC $ARCH -o "$B/bench_ops_gpu" "$B/bench_ops_gpu.o" "$B/ops_cuda.o" "$B/matmul_cuda.o" "$B/attention_cuda.o" \
    "$B/check.o" -lcublasLt -lcublas -lcudart $MPI_LIBS
echo "built $B/test_ops_gpu and $B/bench_ops_gpu (register report: $B/ptxas.txt)"

case "${1:-}" in
    --run) OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} "$B/test_ops_gpu" ;;
    --bench) "$B/bench_ops_gpu" ;;
    --all) rc=0; OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} "$B/test_ops_gpu" || rc=$?; "$B/bench_ops_gpu"; exit $rc ;;
esac
