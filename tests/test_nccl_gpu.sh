# tests/test_nccl_gpu.sh - the NCCL backend's tests, sourced by tests/run_tests_gpu.sh
# (uses its GPT settings, $T, run and $MPIRUN).
#
# NCCL needs one GPU per rank. On a one-GPU machine: the backend starts and
# trains at TP=1 with the MPI backend's exact losses, and two ranks sharing the
# GPU get a clear error (no hang). With 2+ GPUs: the collectives with NCCL
# transport bit for bit against the host collectives, and TP=2 / DP=2 training
# with NCCL giving the MPI backend's losses and gradient norms exactly (both
# compute the same fp32 operations in the same order: comm/comm_nccl.c); the
# NCCL runs capture their steps as CUDA graphs (train.cuda_graph, on by
# default there), and TP=2 with the graph gives the eager step's bits.

NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)

t_nccl_tp1() {
    timeout 300 $MPIRUN -np 1 build/train_gpu "${GPT[@]}" --set parallel.tp=1 --set comm.backend=nccl --set log.dir=$T/nccl_tp1 || return 1
    [ -f $T/gpu/log.jsonl ] || timeout 300 $MPIRUN -np 1 build/train_gpu "${GPT[@]}" --set parallel.tp=1 --set log.dir=$T/gpu || return 1
    python3 tests/compare_logs.py $T/nccl_tp1/log.jsonl $T/gpu/log.jsonl --key loss --exact
}

t_nccl_shared_gpu_error() {
    local out rc
    out=$(timeout 120 $MPIRUN -np 2 build/train_gpu "${GPT[@]}" --set parallel.tp=2 --set comm.backend=nccl \
          --set log.dir=$T/nccl_shared 2>&1); rc=$?
    if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then echo "expected a clean failure, rc=$rc"; return 1; fi
    echo "$out" | grep -q "share the GPU" || { echo "expected 'share the GPU' in: $out"; return 1; }
    echo "ok: $(echo "$out" | grep -m1 'share the GPU')"
}

# nccl_vs_mpi NAME NP ARGS...: the same run with both backends, identical logs
nccl_vs_mpi() {
    local name=$1 np=$2; shift 2
    for be in mpi nccl; do
        timeout 600 $MPIRUN -np $np build/train_gpu "${GPT[@]}" "$@" --set comm.backend=$be --set log.dir=$T/${name}_$be || return 1
    done
    python3 tests/compare_logs.py $T/${name}_nccl/log.jsonl $T/${name}_mpi/log.jsonl --key loss --exact || return 1
    python3 tests/compare_logs.py $T/${name}_nccl/log.jsonl $T/${name}_mpi/log.jsonl --key grad_norm --exact
}
t_nccl_tp2_none() { nccl_vs_mpi nccl_tp2_none 2 --set parallel.tp=2 --set compress.method=none; }
t_nccl_tp2_taco() { nccl_vs_mpi nccl_tp2_taco 2 --set parallel.tp=2 --set compress.method=taco; }
t_nccl_dp2() { nccl_vs_mpi nccl_dp2 2 --set parallel.tp=1 --set parallel.dp=2; }
t_nccl_tp2_graph() {
    local a=(--set parallel.tp=2 --set compress.method=taco --set comm.backend=nccl)
    timeout 600 $MPIRUN -np 2 build/train_gpu "${GPT[@]}" "${a[@]}" --set log.dir=$T/nccl_graph_on > $T/nccl_graph_on.out || return 1
    timeout 600 $MPIRUN -np 2 build/train_gpu "${GPT[@]}" "${a[@]}" --set train.cuda_graph=false \
        --set log.dir=$T/nccl_graph_off > $T/nccl_graph_off.out || return 1
    grep "captured" $T/nccl_graph_on.out || { echo "no step was captured"; return 1; }
    local k
    for k in loss grad_norm comm_bytes; do
        python3 tests/compare_logs.py $T/nccl_graph_on/log.jsonl $T/nccl_graph_off/log.jsonl --key $k --exact || return 1
    done
}

echo "NCCL backend ($NGPU GPU(s))"
run nccl_tp1_equals_mpi t_nccl_tp1
if [ "$NGPU" -ge 2 ]; then
    run test_coll_gpu_nccl_np2 $MPIRUN -np 2 build/gpu/test_coll_gpu --nccl
    [ "$NGPU" -ge 4 ] && run test_coll_gpu_nccl_np4 $MPIRUN -np 4 build/gpu/test_coll_gpu --nccl
    run nccl_tp2_none_equals_mpi t_nccl_tp2_none
    run nccl_tp2_taco_equals_mpi t_nccl_tp2_taco
    run nccl_dp2_equals_mpi t_nccl_dp2
    run nccl_tp2_graph_equals_eager t_nccl_tp2_graph
else
    run nccl_shared_gpu_clear_error t_nccl_shared_gpu_error
fi
