#!/usr/bin/env bash
# tools/bench_gpu.sh - GPU benchmark tables (make bench-gpu). Prints markdown.
#
#   1. GPT-2 124M (V=50257 padded to 50304, B=16, T=1024, bf16) at TP=1: our
#      build/train_gpu next to the PyTorch reference measured in the same run
#      (tools/bench_pytorch.py, eager and torch.compile).
#   2. TP=1, 2, 4 on one GPU (ranks share the card, TP traffic goes through
#      host memory) with the exact path and with taco: step time and the time
#      spent in TP exchanges (the exact path sends bf16: bit-equal to fp32).
#   3. TP=2 taco with each part of the compressed exchange disabled in turn.
#   4. With 2+ GPUs: TP=2 one rank per GPU, MPI vs NCCL backend.
# MFU counts 6N + 12 L C T FLOPs per token (N = parameters incl. embeddings)
# against 989 TFLOP/s, the H200's dense bf16 peak.
# Env: STEPS (default 30), OUT (a folder for logs; default build/bench).
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
STEPS=${STEPS:-30}
OUTDIR=${OUT:-build/bench}
mkdir -p "$OUTDIR"
CFG=configs/gpt2_124m.json
FPT=$(python3 -c "L,C,T,V=12,768,1024,50304; N=V*C+T*C+L*(12*C*C+13*C)+2*C; print(6*N+12*L*C*T)")

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo unknown)
echo "## GPU benchmark: $gpu, $(date -u +%Y-%m-%d)"
echo

ours() {  # ours NAME NP ARGS... -> JSON stats line
    local name=$1 np=$2; shift 2
    timeout 600 mpirun --oversubscribe -np "$np" build/train_gpu $CFG --set train.steps=$STEPS \
        --set log.dir=$OUTDIR/$name "$@" > "$OUTDIR/$name.out" 2>&1 || { tail -20 "$OUTDIR/$name.out" >&2; return 1; }
    python3 tools/step_stats.py "$OUTDIR/$name/log.jsonl" --skip 5 --flops-per-token "$FPT"
}
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ''))" "$1" "$2"; }

echo "### GPT-2 124M, TP=1, B=16, T=1024"
echo
echo "| implementation | ms/step | tokens/s | MFU |"
echo "|---|---|---|---|"
r=$(ours tp1_none 1 --set parallel.tp=1)
echo "| ours (build/train_gpu) | $(field "$r" ms) | $(field "$r" tok_per_s) | $(field "$r" mfu) |"
echo
echo "PyTorch reference of the same model and step, same run (tools/bench_pytorch.py):"
echo '```'
python3 tools/bench_pytorch.py --ceilings 2>&1 | grep -v Warning || echo "bench_pytorch.py failed"
echo '```'
echo

echo "### TP on one GPU (ranks share the card; exchanges staged through host memory)"
echo
echo "| TP | compress | ms/step | tokens/s | ms in TP exchanges | MB sent per rank per step |"
echo "|---|---|---|---|---|---|"
echo "| 1 | none | $(field "$r" ms) | $(field "$r" tok_per_s) | 0 | 0 |"
for tp in 2 4; do
    for m in none taco; do
        r2=$(ours tp${tp}_$m $tp --set parallel.tp=$tp --set compress.method=$m) || { echo "| $tp | $m | failed | | | |"; continue; }
        echo "| $tp | $m | $(field "$r2" ms) | $(field "$r2" tok_per_s) | $(field "$r2" comm_ms) | $(field "$r2" comm_MB) |"
        if [ "$tp$m" = 2taco ]; then base=$r2; fi
    done
done

echo
echo "### Each part of the compressed exchange disabled in turn (TP=2 on one GPU)"
echo
echo "| variant | ms/step | vs taco | ms in TP exchanges | MB sent per rank per step |"
echo "|---|---|---|---|---|"
[ -n "${base:-}" ] || base=$(ours tp2_taco 2 --set parallel.tp=2 --set compress.method=taco)
stage() {  # stage LABEL NAME ARGS...
    local label=$1 name=$2; shift 2
    local r3
    r3=$(ours "$name" 2 --set parallel.tp=2 "$@") || { echo "| $label | failed | | | |"; return; }
    local ratio
    ratio=$(python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.2f}')" "$(field "$r3" ms)" "$(field "$base" ms)")
    echo "| $label | $(field "$r3" ms) | $ratio | $(field "$r3" comm_ms) | $(field "$r3" comm_MB) |"
}
echo "| taco: pipelined (K=4), fused all-gather encode, Hadamard, current scale | $(field "$base" ms) | 1.00 | $(field "$base" comm_ms) | $(field "$base" comm_MB) |"
stage "no pipelining (comm.pipeline_depth=1)" st_k1 --set compress.method=taco --set comm.pipeline_depth=1
stage "no fused encode (comm.fuse=false: sum to fp32, then encode)" st_unfused --set compress.method=taco --set comm.fuse=false
stage "no Hadamard (compress.hadamard=false)" st_nohad --set compress.method=taco --set compress.hadamard=false
stage "delayed scale instead of current (one pass)" st_delayed --set compress.method=taco --set compress.scale=delayed
stage "no compression (exact, bf16 wire)" st_none --set compress.method=none

ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -ge 2 ]; then
    echo
    echo "### TP=2, one rank per GPU ($ngpu GPUs): MPI vs NCCL backend"
    echo
    echo "| backend | compress | ms/step | tokens/s | ms in TP exchanges |"
    echo "|---|---|---|---|---|"
    for be in mpi nccl; do
        for m in none taco; do
            r4=$(ours x2_${be}_$m 2 --set parallel.tp=2 --set compress.method=$m --set comm.backend=$be) ||
                { echo "| $be | $m | failed | | |"; continue; }
            echo "| $be | $m | $(field "$r4" ms) | $(field "$r4" tok_per_s) | $(field "$r4" comm_ms) |"
        done
    done
fi
