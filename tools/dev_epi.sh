#!/usr/bin/env bash
# tools/dev_epi.sh - the device check of the fused epilogues (issue 17): on a machine
# with a GPU, from the repository root, in about two minutes:
#   1. builds build/gpu/test_ops_gpu, build/gpu/bench_ops_gpu and build/train_gpu
#      (-Werror; the register report of the fused kernels from their .ptxas);
#   2. test_ops_gpu: every CUDA op vs the CPU op, the "fused" group's rows printed
#      (matmul_gelu_forward / gelu_matmul_backward on the cuBLASLt GELU epilogues
#      and on their unfused fallback, residual_layernorm_forward), and any FAIL;
#   3. bench_ops_gpu, the GPT-2 124M step (B=16, T=1024) as gpt.c now runs it, then
#      the same step with the separate ops the fusion replaced ("unfused"): both
#      tables and step times;
#   4. if time is left: the GPU trainer at TP=2 (two ranks on the GPU) with
#      parallel.sp and comm.overlap, against TP=1: the fused ops cut into row pieces.
# Logs under $OUT (default /tmp/out). Exit status 1 if a step failed.
#   tools/dev_epi.sh
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=4
CJ=$PWD/.deps/cjson/usr
export LD_LIBRARY_PATH=$CJ/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "$(( $(date +%s) - T0 ))s"; }
rc=0

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
make -j16 CJSON_PREFIX="$CJ" build/gpu/test_ops_gpu build/gpu/bench_ops_gpu build/train_gpu > "$OUT/build.log" 2>&1
b=$?; echo "== build rc=$b ($(el))"
[ $b -eq 0 ] || { tail -30 "$OUT/build.log"; exit 1; }
cat build/gpu/ops/*.ptxas | sh tools/ptxas_report.sh > "$OUT/ptxas_ops.txt" 2>/dev/null
echo "== registers (layernorm forward incl. the RES variant, GELU kernels):"
grep -E "layernorm_forward_kernel|gelu_(forward|backward)_kernel" "$OUT/ptxas_ops.txt" | head -12
grep -q SPILL "$OUT/ptxas_ops.txt" && echo "note: spills in $OUT/ptxas_ops.txt"

timeout 150 build/gpu/test_ops_gpu > "$OUT/test_ops_gpu.txt" 2>&1
t=$?; echo "== test_ops_gpu rc=$t ($(el))"
grep -E "^(matmul_gelu_forward|gelu_matmul_backward|residual_layernorm_forward) " "$OUT/test_ops_gpu.txt"
grep -E "FAIL|^note:|cuBLAS|fatal" "$OUT/test_ops_gpu.txt" | head -20
tail -1 "$OUT/test_ops_gpu.txt"
[ $t -eq 0 ] || rc=1

for mode in fused unfused; do
    arg=""; [ $mode = unfused ] && arg=unfused
    timeout 60 build/gpu/bench_ops_gpu 16 1024 10 $arg > "$OUT/bench_$mode.txt" 2>&1
    t=$?; echo "== bench_ops_gpu ($mode) rc=$t ($(el))"
    cat "$OUT/bench_$mode.txt"
    [ $t -eq 0 ] || rc=1
done
python3 - "$OUT/bench_fused.txt" "$OUT/bench_unfused.txt" <<'PY' || true
import re, sys
def step(p):
    m = re.search(r"step: median ([0-9.]+) ms", open(p).read())
    return float(m.group(1)) if m else None
f, u = step(sys.argv[1]), step(sys.argv[2])
if f and u: print("== step: fused %.2f ms, unfused %.2f ms: %.2f ms saved (%.1f%%)" % (f, u, u - f, 100 * (u - f) / u))
PY

# the trainer with the fused ops cut into row pieces (sp, overlap), if the budget allows
if [ $(( $(date +%s) - T0 )) -lt 100 ]; then
    G=(configs/default.json --set model.n_layer=4 --set model.n_head=4 --set model.d_model=256
       --set model.max_seq_len=256 --set train.seq_len=256 --set train.batch_size=8 --set train.eval_every=0
       --set train.sample_every=0 --set compress.method=none --set train.steps=10 --set train.lr=1e-3)
    R=$OUT/runs; rm -rf "$R"
    timeout 40 mpirun --oversubscribe -np 1 build/train_gpu "${G[@]}" --set log.dir=$R/tp1 > "$OUT/train_tp1.txt" 2>&1 &&
    timeout 40 mpirun --oversubscribe -np 2 build/train_gpu "${G[@]}" --set parallel.tp=2 --set parallel.sp=true \
        --set comm.sp_chunks=4 --set comm.overlap=true --set log.dir=$R/tp2sp > "$OUT/train_tp2sp.txt" 2>&1 &&
    python3 tests/compare_logs.py $R/tp2sp/log.jsonl $R/tp1/log.jsonl --key loss --rtol 1e-2
    t=$?; echo "== train_gpu TP=2 sp+overlap vs TP=1, 10 steps, loss rtol 1e-2: rc=$t ($(el))"
    grep -h '"loss"' $R/tp1/log.jsonl 2>/dev/null | tail -1
    [ $t -eq 0 ] || { rc=1; tail -5 "$OUT/train_tp1.txt" "$OUT/train_tp2sp.txt"; }
else
    echo "== trainer check skipped (time)"
fi
echo "== done rc=$rc ($(el)); logs in $OUT"
exit $rc
