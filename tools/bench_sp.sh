#!/usr/bin/env bash
# tools/bench_sp.sh - sequence parallelism on the GPU: per-rank memory and step
# time per TP transport. Prints a markdown table headed by the GPU and the date.
#
# For GPT-2 124M and 350M (configs/gpt2_124m.json, gpt2_350m.json) at TP=2 and
# 4 (one rank per GPU; a TP larger than the GPU count is skipped unless SHARE=1,
# which lets ranks share the GPUs), for each transport of TRANSPORTS, every
# combination of compress none / taco x parallel.sp off / on x comm.overlap
# off / on (overlap only exists with sp): the median ms/step after warm-up,
# the ms of TP exchanges per step (log.jsonl's comm_ms: the device time between
# the events recorded around each exchange on the stream that runs it; with
# overlap off it is all exposed, with overlap on it includes the hidden part),
# MB sent per rank, the measured device high-water (cudaMemGetInfo, max over
# GPUs: per rank with one rank per GPU, the sharing ranks' sum under SHARE=1)
# and the activation bytes per rank (exact, what sp shrinks).
# For each sp run with overlap the overlap efficiency
#   (t_compute + t_exchange - t_step) / min(t_compute, t_exchange)
# with t_exchange = the exposed exchange ms and t_compute = step ms minus it,
# both of the run with overlap off (same sp_chunks), t_step of the overlapped run.
# Env: STEPS (default 30), OUT (logs; default build/bench_sp), MODELS (default
# "124m 350m"), TPS (default "2 4"), CHUNKS (comm.sp_chunks, default 4),
# TRANSPORTS (comm.transport values, default "auto"), SHARE (1: ranks may share
# a GPU), MODES (compress methods, default "none taco"); for a
# dry run of the script on the CPU: BIN=build/train NGPU=2 EXTRA="--set ..."
# (a smaller model through --set overrides).
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
STEPS=${STEPS:-30}
OUTDIR=${OUT:-build/bench_sp}
MODELS=${MODELS:-"124m 350m"}
TPS=${TPS:-"2 4"}
CHUNKS=${CHUNKS:-4}
TRANSPORTS=${TRANSPORTS:-auto}
SHARE=${SHARE:-0}
MODES=${MODES:-"none taco"}
BIN=${BIN:-build/train_gpu}
read -r -a EXTRA <<< "${EXTRA:-}"
mkdir -p "$OUTDIR"
ngpu=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo unknown)
echo "## Sequence parallelism: $ngpu x $gpu, $(hostname), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
if [ "$SHARE" = 1 ]; then placing="ranks share the $ngpu GPU(s) when TP > $ngpu"; else placing="one rank per GPU"; fi
echo "comm.sp_chunks = $CHUNKS, $STEPS steps per run, medians after 5 warm-up steps, $placing."
echo
echo "| model | TP | transport | compress | sp | overlap | ms/step | tokens/s | exchange ms | MB/rank/step | device peak MiB | activations MiB | overlap eff. |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"

run() {  # run NAME NP ARGS... -> "stats-json|peak-MiB|acts-MiB"
    local name=$1 np=$2; shift 2
    timeout 900 mpirun --oversubscribe -np "$np" "$BIN" "$@" "${EXTRA[@]}" --set train.steps=$STEPS \
        --set log.dir=$OUTDIR/$name > "$OUTDIR/$name.out" 2>&1 || { tail -20 "$OUTDIR/$name.out" >&2; return 1; }
    local st mem
    st=$(python3 tools/step_stats.py "$OUTDIR/$name/log.jsonl" --skip 5)
    mem=$(sed -n 's/^memory (measured): \(device high-water \([0-9.]*\) MiB.*\)\{0,1\}activations \([0-9.]*\) MiB.*/\2|\3/p' "$OUTDIR/$name.out")
    echo "$st|$mem"
}
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ''))" "${1%%|*}" "$2"; }

for model in $MODELS; do
    for tp in $TPS; do
        if [ "$tp" -gt "$ngpu" ] && [ "$SHARE" != 1 ]; then
            echo "| $model | $tp | (needs $tp GPUs, have $ngpu; SHARE=1 lets ranks share) | | | | | | | | | | |"; continue
        fi
        for tr in $TRANSPORTS; do
            for m in $MODES; do
                declare -A R=()
                for v in "false false" "true false" "true true"; do
                    set -- $v
                    name=${model}_tp${tp}_${tr}_${m}_sp$1_ov$2
                    r=$(run "$name" "$tp" configs/gpt2_$model.json --set parallel.tp=$tp --set compress.method=$m \
                        --set comm.transport=$tr --set parallel.sp=$1 --set comm.overlap=$2 \
                        --set comm.sp_chunks=$CHUNKS) || r=""
                    R["$1$2"]=$r
                    row="| $model | $tp | $tr | $m | $1 | $2"
                    if [ -z "$r" ]; then echo "$row | failed | | | | | | |"; continue; fi
                    eff=""
                    if [ "$2" = true ] && [ -n "${R[truefalse]}" ]; then
                        eff=$(python3 -c "
import json, sys
off, on = json.loads(sys.argv[1]), json.loads(sys.argv[2])
tx = off['comm_ms']; tc = off['ms'] - tx
print('%.2f' % ((tc + tx - on['ms']) / min(tc, tx)) if min(tc, tx) > 0 else '')" "${R[truefalse]%%|*}" "${r%%|*}")
                    fi
                    mem=${r#*|}
                    echo "$row | $(field "$r" ms) | $(field "$r" tok_per_s) | $(field "$r" comm_ms) | $(field "$r" comm_MB) | ${mem%%|*} | ${mem#*|} | $eff |"
                done
            done
        done
    done
done
