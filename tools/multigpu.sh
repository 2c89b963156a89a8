#!/usr/bin/env bash
# tools/multigpu.sh - the multi-GPU scaling runs: one rank per GPU.
#
#   tools/multigpu.sh scaling   GPT-2 124M and 350M at TP = 2, 4, 8 (as many as there
#                               are GPUs), backends nccl and mpi, compress none vs taco,
#                               and TP=4 x DP=2 on 8 GPUs; one markdown row per run
#   tools/multigpu.sh parity    a few hundred steps of configs/parity_gpu.json at TP=8
#                               (or the largest TP the GPUs allow), none vs taco, with
#                               the loss plot (tools/parity.py)
#   tools/multigpu.sh dryrun    TP=2 with both ranks on GPU 0 (the one-GPU rehearsal)
#
# Run from the repository root after `make gpu` and `make data`. NVLink multicast
# stays off (NCCL_NVLS_ENABLE=0). Logs go to $OUT (default runs/multigpu).
# MODELS and BACKENDS (space-separated) narrow the scaling matrix.
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
OUTDIR=${OUT:-runs/multigpu}
STEPS=${STEPS:-30}
mkdir -p "$OUTDIR"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$NGPU" -ge 1 ] || { echo "error: no GPU visible (nvidia-smi -L)"; exit 1; }

run_one() {  # run_one NAME NP CONFIG ARGS... -> a markdown row
    local name=$1 np=$2 cfg=$3; shift 3
    if ! timeout 900 mpirun --oversubscribe -np "$np" build/train_gpu "$cfg" --set train.steps=$STEPS \
         --set log.dir="$OUTDIR/$name" "$@" > "$OUTDIR/$name.out" 2>&1; then
        echo "| $name | failed: $(grep -m1 -i error "$OUTDIR/$name.out" || tail -1 "$OUTDIR/$name.out") |"; return 0
    fi
    local s
    s=$(python3 tools/step_stats.py "$OUTDIR/$name/log.jsonl" --skip 5)
    python3 - "$name" "$s" <<'PY'
import json, sys
s = json.loads(sys.argv[2])
print(f"| {sys.argv[1]} | {s['ms']} | {s['tok_per_s']} | {s['comm_ms']} | {s['comm_MB']} |")
PY
}

case "${1:-}" in
scaling)
    echo "## Multi-GPU scaling: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $NGPU, $(date -u +%F)"
    echo "| run | ms/step | tokens/s | ms in TP exchanges | MB sent per rank |"
    echo "|---|---|---|---|---|"
    for model in ${MODELS:-gpt2_124m gpt2_350m}; do
        for tp in 2 4 8; do
            [ "$tp" -le "$NGPU" ] || continue
            for backend in ${BACKENDS:-nccl mpi}; do
                for m in none taco; do
                    run_one "${model}_tp${tp}_${backend}_${m}" "$tp" configs/$model.json --set parallel.tp=$tp \
                        --set comm.backend=$backend --set compress.method=$m
                done
            done
        done
        if [ "$NGPU" -ge 8 ]; then
            for m in none taco; do
                run_one "${model}_tp4dp2_nccl_${m}" 8 configs/$model.json --set parallel.tp=4 --set parallel.dp=2 \
                    --set comm.backend=nccl --set compress.method=$m
            done
        fi
    done
    ;;
parity)
    tp=8; while [ "$tp" -gt "$NGPU" ]; do tp=$((tp / 2)); done
    python3 tools/parity.py configs/parity_gpu.json --binary build/train_gpu --name parity_tp$tp --np $tp \
        --variants none,taco --set parallel.tp=$tp --set comm.backend=nccl --set train.steps=${PARITY_STEPS:-400}
    ;;
dryrun)
    echo "| run | ms/step | tokens/s | ms in TP exchanges | MB sent per rank |"
    echo "|---|---|---|---|---|"
    for m in none taco; do
        run_one "dryrun_gpt2_124m_tp2_mpi_$m" 2 configs/gpt2_124m.json --set parallel.tp=2 --set compress.method=$m
    done
    ;;
*)
    sed -n 2,16p "$0"; exit 1 ;;
esac
