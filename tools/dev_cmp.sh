#!/bin/bash
# tools/dev_cmp.sh - one GPU lease's check of the compression kernels: build,
# the bit-exactness tests, and the kernel bandwidth table, in under 180 s.
#
# Run from the repository root on the GPU machine (16 cores, one H200):
#   OUT=/some/dir sh tools/dev_cmp.sh        (OUT defaults to ./runs/dev_cmp)
# It builds build/gpu/{test_compress_gpu,bench_compress_gpu,test_coll_gpu}
# against the cJSON in .deps/cjson/usr, then runs, each under a timeout so
# that the whole stays inside the budget:
#   test_compress_gpu --quick             kernels vs the CPU reference, bit for bit
#   test_coll_gpu (mpirun -np 2)          device vs host collectives
#   test_coll_gpu --quick (mpirun -np 4)
#   bench_compress_gpu --sizes 64,256     the kernel table (fraction of copy bandwidth)
# Logs: $OUT/build.log, $OUT/<step>.log, $OUT/compress_kernels.csv,
# $OUT/ptxas.txt (registers and spills per kernel), $OUT/summary.txt (one line
# per step: rc and seconds). Exit status: 0 iff every step passed.
set -u
OUT=${OUT:-runs/dev_cmp}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.deps/cjson/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
T0=$(date +%s)
FAIL=0
: > "$OUT/summary.txt"

# step NAME SECONDS CMD...: run CMD with a timeout, log to $OUT/NAME.log
step() {
    local name=$1 limit=$2
    shift 2
    local t=$(date +%s)
    timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    local line
    line=$(printf '%-22s rc=%-3s %4ss (limit %ss)' "$name" "$rc" "$(( $(date +%s) - t ))" "$limit")
    echo "$line" | tee -a "$OUT/summary.txt"
    [ "$rc" -eq 0 ] || FAIL=1
    tail -n 3 "$OUT/$name.log"
}

step build 100 make -j16 CJSON_PREFIX="$PWD/.deps/cjson/usr" \
    build/gpu/test_compress_gpu build/gpu/bench_compress_gpu build/gpu/test_coll_gpu
if [ "$FAIL" -ne 0 ]; then
    echo "build failed: see $OUT/build.log"
    exit 1
fi
cat build/gpu/compress/*.ptxas 2>/dev/null | sh tools/ptxas_report.sh > "$OUT/ptxas.txt" 2>&1 || true

step test_compress_gpu 20 build/gpu/test_compress_gpu --quick
step test_coll_gpu_np2 35 $MPIRUN -np 2 build/gpu/test_coll_gpu
step test_coll_gpu_np4 15 $MPIRUN -np 4 build/gpu/test_coll_gpu --quick
# what is left of the 180 s goes to the bench (at least 15 s)
LEFT=$(( 175 - ($(date +%s) - T0) ))
[ "$LEFT" -lt 15 ] && LEFT=15
step bench_compress_gpu "$LEFT" build/gpu/bench_compress_gpu --sizes 64,256 --csv "$OUT/compress_kernels.csv"
cat "$OUT/bench_compress_gpu.log"
echo "total $(( $(date +%s) - T0 )) s; $( [ $FAIL -eq 0 ] && echo ALL PASSED || echo SOME FAILED )" | tee -a "$OUT/summary.txt"
exit $FAIL
