#!/bin/bash
# tools/dev_attn.sh - one device session for the attention backward work of
# issue 17 (branch attn_bwd; may be removed once the numbers are in
# docs/RESULTS.md). Run from the repository root on the GPU machine:
#   OUT=/some/dir bash tools/dev_attn.sh
# Builds test_ops_gpu and bench_ops_gpu, runs the whole test_ops_gpu, then
# bench_ops_gpu (GPT-2 124M, B=16 T=1024) on the three backward paths:
#   split8    the default: split dQ, 8-warp dK/dV/dQ kernel
#   split4    ATT_BWD_WARPS=4: split dQ, 4-warp kernel (64-key blocks)
#   fallback  ATT_DQ_SPLIT_CAP=0: the old dK/dV + dQ kernels
# and prints the attention lines and the step time of each. Logs in $OUT.
# About 2 minutes; every stage has its own timeout.
set -u
OUT=${OUT:-/tmp/dev_attn}
mkdir -p "$OUT"
CJ=$PWD/.deps/cjson/usr
export LD_LIBRARY_PATH=$CJ/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

stamp "build"
if ! timeout 90 make -j16 CJSON_PREFIX="$CJ" build/gpu/test_ops_gpu build/gpu/bench_ops_gpu > "$OUT/build.log" 2>&1; then
    echo "BUILD FAILED (tail of $OUT/build.log):"; tail -30 "$OUT/build.log"; exit 1
fi
cp build/gpu/ops/attention_cuda.ptxas "$OUT/attention_cuda.ptxas"
sh tools/ptxas_report.sh < build/gpu/ops/attention_cuda.ptxas > "$OUT/ptxas_attention.txt"
grep -c "SPILLS" "$OUT/ptxas_attention.txt" | sed 's/^/attention kernels with spills: /'
grep -i "warning" "$OUT/build.log" | head -5

stamp "test_ops_gpu (all groups)"
timeout 60 ./build/gpu/test_ops_gpu > "$OUT/test_ops_gpu.log" 2>&1
echo "test_ops_gpu rc=$?"
grep -E "FAIL|checks," "$OUT/test_ops_gpu.log" | head -20
grep -E "attention" "$OUT/test_ops_gpu.log" | grep -E "B=1 T=300|B=1 T=270" -A0

for path in split8 split4 fallback; do
    case $path in
        split8) env_set="ATT_BWD_WARPS=8" ;;
        split4) env_set="ATT_BWD_WARPS=4" ;;
        fallback) env_set="ATT_DQ_SPLIT_CAP=0" ;;
    esac
    stamp "bench_ops_gpu 16 1024 20 ($path: $env_set)"
    env $env_set timeout 25 ./build/gpu/bench_ops_gpu 16 1024 20 > "$OUT/bench_$path.log" 2>&1
    echo "rc=$?"
    grep -E "^step:|attention" "$OUT/bench_$path.log"
done
stamp "done; logs in $OUT"
