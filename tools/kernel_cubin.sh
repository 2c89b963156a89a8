#!/bin/bash
# tools/kernel_cubin.sh - a few compression kernels alone, as an sm_90a cubin, in seconds.
#
# compress/compress_cuda.cu instantiates every kernel the method table can
# launch (~90) and takes minutes to compile. To read one kernel's registers and
# spills (ptxas -v) or its SASS (tools/sass_waits.py, nvdisasm), this compiles
# a file that includes compress/cuda_kernels.cuh and takes the address of the
# named instances only, in a few seconds. The code is near the full build's
# but depends on which kernels share the file: the TACO RNE recompress spills
# 236 bytes here, 228 in compress_cuda.cu, and the G=64 decode built beside
# only the recompress has no SHFL where the full build's has 264 (the general
# path's cross-lane stages, kept with the fp8_group recompress in the same
# list; 2026-12-07). So compare variants with the same list, and read the real
# code from the whole file as one cubin (about 3 minutes on 2 cores):
#   nvcc -O3 -std=c++17 -cubin -gencode arch=compute_90a,code=sm_90a -DOPS_BF16 -I. \
#        $(mpicc --showme:compile) -o full.cubin compress/compress_cuda.cu
# and time kernels from the real build.
#
#   tools/kernel_cubin.sh OUT.cubin 'k_decompress<IN_E4M3, OUT_RECOMP, FP8_E4M3, false, SHAPE_GROUP64>' ...
#
# (template arguments as in compress/cuda_kernels.cuh and cuda_codec.cuh; extra
# nvcc flags in $NVCC_FLAGS, e.g. -DDECOMPRESS_STAGES=3). Writes OUT.cubin and
# OUT.ptxas (ptxas -v: registers, spills per kernel) and prints the latter's
# register lines.
set -euo pipefail
if [ $# -lt 2 ]; then
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
out=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
src=$(mktemp --suffix=.cu)
trap 'rm -f "$src"' EXIT
{
    echo '#include "compress/compress_cuda.h"'
    echo '#include "compress/cuda_kernels.cuh"'
    echo 'const void* kernel_cubin_keep[] = {'
    for k in "$@"; do echo "    (const void*)$k,"; done
    echo '};'
} > "$src"
# shellcheck disable=SC2086
if ! "$nvcc" -O3 -std=c++17 -cubin -gencode arch=compute_90a,code=sm_90a -DOPS_BF16 -I"$root" \
        -Xptxas -v ${NVCC_FLAGS:-} -o "$out" "$src" > "${out%.cubin}.ptxas" 2>&1; then
    cat "${out%.cubin}.ptxas" >&2
    echo "kernel_cubin: nvcc failed on the instances above (are the template arguments right?)" >&2
    exit 1
fi
grep -E "Function properties for|Used [0-9]+ registers|spill" "${out%.cubin}.ptxas" |
    sed -E 's/.*Function properties for ([^ ]+).*/\1/' | c++filt |
    sed -E 's/(\(anonymous namespace\)|_INTERNAL_[0-9A-Za-z_]+):://g; s/^void //; s/\(.*$//'
