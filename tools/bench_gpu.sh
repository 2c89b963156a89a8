#!/usr/bin/env bash
# tools/bench_gpu.sh - GPU benchmark tables (make bench-gpu). Prints markdown.
#
#   1. GPT-2 124M (V=50257 padded to 50304, B=16, T=1024, bf16) at TP=1: our
#      build/train_gpu (its step as one CUDA graph, the default, and eager)
#      next to the PyTorch reference measured in the same run
#      (tools/bench_pytorch.py, eager and torch.compile).
#   2. TP=1, 2, 4 on one GPU (ranks share the card, TP traffic by the default
#      comm.transport: CUDA IPC on one node) with the exact path and with taco: step time and the time
#      spent in TP exchanges (the exact path sends bf16: bit-equal to fp32).
#   3. TP=2 taco with each part of the compressed exchange disabled in turn.
#   4. With 2+ GPUs: TP=2 one rank per GPU, MPI vs NCCL backend.
# MFU counts 6N + 12 L C T FLOPs per token (N = parameters incl. embeddings)
# against 989 TFLOP/s, the H200's dense bf16 peak.
# Env: STEPS (default 30), OUT (a folder for logs; default build/bench), REPS (runs per
# variant in table 3, default 3), PARTS (default tp1,tp,stages,nccl: the tables to make).
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
STEPS=${STEPS:-30}
REPS=${REPS:-3}
PARTS=${PARTS:-tp1,tp,stages,nccl}
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

if [[ ",$PARTS," == *,tp1,* ]]; then
echo "### GPT-2 124M, TP=1, B=16, T=1024"
echo
echo "| implementation | ms/step | tokens/s | MFU |"
echo "|---|---|---|---|"
r=$(ours tp1_none 1 --set parallel.tp=1)
echo "| ours (build/train_gpu, the step as one CUDA graph) | $(field "$r" ms) | $(field "$r" tok_per_s) | $(field "$r" mfu) |"
re=$(ours tp1_eager 1 --set parallel.tp=1 --set train.cuda_graph=false)
echo "| ours, eager (train.cuda_graph=false) | $(field "$re" ms) | $(field "$re" tok_per_s) | $(field "$re" mfu) |"
echo
echo "PyTorch reference of the same model and step, same run (tools/bench_pytorch.py):"
echo '```'
python3 tools/bench_pytorch.py --ceilings 2>&1 | grep -v Warning || echo "bench_pytorch.py failed"
echo '```'
echo
fi

if [[ ",$PARTS," == *,tp,* ]]; then
echo "### TP on one GPU (ranks share the card; exchanges by the default transport, CUDA IPC)"
echo
echo "| TP | compress | ms/step | tokens/s | ms in TP exchanges | MB sent per rank per step |"
echo "|---|---|---|---|---|---|"
[ -n "${r:-}" ] && echo "| 1 | none | $(field "$r" ms) | $(field "$r" tok_per_s) | 0 | 0 |"
for tp in 2 4; do
    for m in none taco; do
        r2=$(ours tp${tp}_$m $tp --set parallel.tp=$tp --set compress.method=$m) || { echo "| $tp | $m | failed | | | |"; continue; }
        echo "| $tp | $m | $(field "$r2" ms) | $(field "$r2" tok_per_s) | $(field "$r2" comm_ms) | $(field "$r2" comm_MB) |"
    done
done
fi

if [[ ",$PARTS," == *,stages,* ]]; then
echo
echo "### Each part of the compressed exchange disabled in turn (TP=2 on one GPU)"
echo
# Runs of one configuration differ by up to ~15% here (two ranks and the MPI
# traffic share one GPU and the host), so every variant runs REPS times,
# interleaved round by round, and the table gives the median and the range.
LABELS=("taco: pipelined (K=4), fused all-gather encode, Hadamard, current scale"
        "no pipelining (comm.pipeline_depth=1)"
        "no fused encode (comm.fuse=false: sum to fp32, then encode)"
        "no Hadamard (compress.hadamard=false)"
        "delayed scale instead of current (one pass)"
        "no compression (exact path, bf16 wire)")
ARGS=("--set compress.method=taco"
      "--set compress.method=taco --set comm.pipeline_depth=1"
      "--set compress.method=taco --set comm.fuse=false"
      "--set compress.method=taco --set compress.hadamard=false"
      "--set compress.method=taco --set compress.scale=delayed"
      "--set compress.method=none")
: > "$OUTDIR/stages.jsonl"
for rep in $(seq "$REPS"); do
    for i in "${!LABELS[@]}"; do
        # shellcheck disable=SC2086
        r3=$(ours "st${i}_$rep" 2 --set parallel.tp=2 ${ARGS[$i]}) || continue
        echo "{\"v\": $i, \"rep\": $rep, \"s\": $r3}" >> "$OUTDIR/stages.jsonl"
    done
done
python3 - "$OUTDIR/stages.jsonl" "$REPS" "${LABELS[@]}" <<'PY'
import json, statistics, sys
path, reps, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = [json.loads(l) for l in open(path) if l.strip()]
print(f"{reps} interleaved runs per variant; each run's ms/step is its median after warm-up\n")
print("| variant | ms/step (median) | range | vs taco | ms in TP exchanges | MB sent per rank per step |")
print("|---|---|---|---|---|---|")
base = None
for i, lab in enumerate(labels):
    rs = [r["s"] for r in runs if r["v"] == i]
    if not rs:
        print(f"| {lab} | failed | | | | |"); continue
    ms = statistics.median(r["ms"] for r in rs)
    base = ms if i == 0 else base
    comm = statistics.median(r["comm_ms"] for r in rs)
    ratio = f"{ms / base:.2f}" if base else ""
    print(f"| {lab} | {ms:.1f} | {min(r['ms'] for r in rs):.1f}-{max(r['ms'] for r in rs):.1f} | {ratio} | {comm:.1f} | {rs[0]['comm_MB']} |")
PY
fi

ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -ge 2 ] && [[ ",$PARTS," == *,nccl,* ]]; then
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
