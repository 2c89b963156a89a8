#!/usr/bin/env bash
# tools/gpu_session.sh - one device session's worth of GPU work, in one command:
# build, the compression tests, every benchmark table. Output: $OUT (or build/gpu-session).
#   tools/gpu_session.sh bench     every benchmark table (= kernels, then train)
#   tools/gpu_session.sh kernels   the compression kernels and the all-reduce tables
#   tools/gpu_session.sh train     the end-to-end tables (tools/bench_gpu.sh) and the prediction
#   tools/gpu_session.sh parity    the GPU loss-parity experiment (short form; PCONFIG, SEEDS, VARIANTS, PSTEPS)
#   tools/gpu_session.sh nccl      (2+ GPUs) the NCCL tests, NCCL all-reduce and MPI-vs-NCCL training tables
#   tools/gpu_session.sh test      make test-gpu, test_coll_gpu repeated (REPEATS, default 3), and
#                                  an Nsight Compute profile of the compression kernels (when ncu
#                                  is installed; PROFILE=0 skips it)
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
O=build/gpu-session            # everything; the chosen files are copied to $KEEP at the end
KEEP=${OUT:-$O}
mkdir -p "$O" "$KEEP"
make -j16 ${CJSON_PREFIX:+CJSON_PREFIX=$CJSON_PREFIX} all gpu > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
MODE=${1:-bench}
case "$MODE" in
bench|kernels|train)
    if [ "$MODE" != train ]; then  # the kernels and the collectives
        timeout 150 build/gpu/bench_compress_gpu --csv "$O/kernels.csv" > "$O/bench_compress.txt" 2>&1
        timeout 120 python3 tools/bench_compress_torch.py --cuda-csv "$O/kernels.csv" > "$O/bench_compress_torch.txt" 2>&1
        for p in 2 4; do
            timeout 150 mpirun --oversubscribe -np $p build/gpu/bench_compress_gpu --mpi --sizes 1,16,64,256 > "$O/bench_allreduce_np$p.txt" 2>&1
        done
        for p in 2 4; do
            timeout 150 mpirun --oversubscribe -np $p build/gpu/bench_compress_gpu --transports > "$O/bench_transports_np$p.txt" 2>&1
        done
        tail -20 "$O/bench_compress_torch.txt"; tail -42 "$O/bench_allreduce_np2.txt"; tail -42 "$O/bench_allreduce_np4.txt"
        cp "$O"/bench_compress.txt "$O"/bench_compress_torch.txt "$O"/bench_allreduce_np*.txt "$O"/bench_transports_np*.txt \
            "$KEEP"/ 2>/dev/null
    fi
    if [ "$MODE" != kernels ]; then  # end to end
        OUT="$O/train" STEPS=${STEPS:-25} timeout 500 tools/bench_gpu.sh > "$O/bench_gpu.md" 2>&1
        # the step-time model: this session's exchange curve and kernel table, or the last ones kept in docs/bench
        ex=$O/bench_transports_np2.txt; [ -s "$ex" ] || ex=docs/bench/bench_transports_np2.txt
        kt=$O/bench_compress.txt; [ -s "$kt" ] || kt=docs/bench/bench_compress.txt
        python3 tools/predict_speedup.py --runs "$O/train" --exchange "$ex" --kernels "$kt" --transport ipc \
            --ranks-per-gpu 2 > "$O/predict.md" 2>&1
        cat "$O/bench_gpu.md" "$O/predict.md"
        cp "$O"/bench_gpu.md "$O"/predict.md "$KEEP"/ 2>/dev/null
    fi
    ;;
test)
    tests/run_tests_gpu.sh > "$O/test_gpu.log" 2>&1; echo "run_tests_gpu rc=$?"; tail -25 "$O/test_gpu.log"
    for i in $(seq ${REPEATS:-3}); do
        for p in 2 4; do
            timeout 120 mpirun --oversubscribe -np $p build/gpu/test_coll_gpu > "$O/coll_rep$i.np$p.log" 2>&1
            echo "test_coll_gpu repeat $i np=$p rc=$? $(grep -E 'rows failed' "$O/coll_rep$i.np$p.log")"
            grep FAIL "$O/coll_rep$i.np$p.log" | head -3
        done
    done
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
    if [ -n "$NCU" ] && [ "${PROFILE:-1}" != 0 ]; then
        for only in "taco G=64 delayed" "none (fp32"; do
            timeout 200 "$NCU" --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
                --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis -c 40 \
                build/gpu/bench_compress_gpu --sizes 64 --reps 1 --only "$only" > "$O/ncu_${only%% *}.txt" 2>&1
            echo "ncu $only rc=$?"
        done
    fi
    cp "$O"/test_gpu.log "$O"/ncu_*.txt "$KEEP"/ 2>/dev/null
    cat "$O"/coll_rep*.log | grep -E "FAIL|rows failed" > "$KEEP/coll_repeats.txt"
    tar czf "$KEEP/test_logs.tgz" build/test-logs-gpu "$O"/*.log 2>/dev/null; ls "$KEEP"
    ;;
nccl)  # a machine with 2+ GPUs: the NCCL backend's tests, then its all-reduce and training tables
    tests/run_tests_gpu.sh nccl > "$O/test_nccl.log" 2>&1; echo "run_tests_gpu nccl rc=$?"; tail -12 "$O/test_nccl.log"
    timeout 150 mpirun --oversubscribe -np 2 build/gpu/bench_compress_gpu --mpi --nccl --sizes 1,16,64,256 > "$O/bench_allreduce_nccl_np2.txt" 2>&1
    tail -42 "$O/bench_allreduce_nccl_np2.txt"
    OUT="$O/train" STEPS=${STEPS:-20} PARTS=nccl timeout 300 tools/bench_gpu.sh > "$O/bench_nccl.md" 2>&1; cat "$O/bench_nccl.md"
    cp "$O"/test_nccl.log "$O"/bench_allreduce_nccl_np2.txt "$O"/bench_nccl.md "$KEEP"/ 2>/dev/null
    ;;
parity)  # PCONFIG=configs/parity_qwen_gpu.json for the Qwen2 shape; SEEDS=3 for none's seed band
    PCFG=${PCONFIG:-configs/parity_gpu.json}; PN=$(basename "$PCFG" .json)
    timeout 560 python3 tools/parity.py "$PCFG" --binary build/train_gpu --root "$O" --name "$PN" --seeds ${SEEDS:-1} \
        --variants ${VARIANTS:-none,fp8_tensor,taco} --set train.steps=${PSTEPS:-500} --set train.eval_every=50 > "$O/parity.log" 2>&1
    tail -5 "$O/parity.log"; cat "$O/$PN"/summary.md 2>/dev/null | head -20
    cp "$O"/parity.log "$O/$PN"/parity.png "$O/$PN"/summary.md "$O/$PN"/summary.csv "$KEEP"/ 2>/dev/null
    ;;
esac
