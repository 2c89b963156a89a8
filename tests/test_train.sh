# tests/test_train.sh - end-to-end tests of build/train, sourced by
# tests/run_tests.sh (tests/lib.sh provides `run`, $MPIRUN and $LOGDIR).
#
# Each test is a function that returns non-zero on failure; every mpirun is
# bounded by `timeout` so a hang is a failure, never a stuck CI.

T=build/test-runs
rm -rf "$T"; mkdir -p "$T"
TRAIN="timeout 300 $MPIRUN"
# a small model so that 20 steps at TP=4 on two cores take seconds
SMALL=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.max_seq_len=32
       --set train.batch_size=4 --set train.seq_len=32 --set train.eval_every=0 --set train.sample_every=0)

# same config at TP=1, 2, 4 and DP=2 x TP=2: the same losses for 20 steps
t_tp_equivalence() {
    local base=(configs/default.json "${SMALL[@]}" --set train.steps=20 --set compress.method=none)
    $TRAIN -np 1 build/train "${base[@]}" --set parallel.tp=1 --set log.dir=$T/tp1 || return 1
    $TRAIN -np 2 build/train "${base[@]}" --set parallel.tp=2 --set log.dir=$T/tp2 || return 1
    $TRAIN -np 4 build/train "${base[@]}" --set parallel.tp=4 --set log.dir=$T/tp4 || return 1
    # DP=2 splits each global batch of 2 x 4 rows over two ranks: compare with TP=2 DP=1 at batch 8
    $TRAIN -np 2 build/train "${base[@]}" --set parallel.tp=2 --set train.batch_size=8 --set log.dir=$T/tp2b8 || return 1
    $TRAIN -np 4 build/train "${base[@]}" --set parallel.tp=2 --set parallel.dp=2 --set log.dir=$T/tp2dp2 || return 1
    python3 tests/compare_logs.py $T/tp2/log.jsonl $T/tp1/log.jsonl --rtol 1e-5 || return 1
    python3 tests/compare_logs.py $T/tp4/log.jsonl $T/tp1/log.jsonl --rtol 1e-5 || return 1
    python3 tests/compare_logs.py $T/tp2dp2/log.jsonl $T/tp2b8/log.jsonl --rtol 1e-5 || return 1
    python3 tests/compare_logs.py $T/tp2/log.jsonl $T/tp1/log.jsonl --key grad_norm --rtol 1e-4
}

# comm.allreduce=one_shot: the exact path gives the two-shot losses bit for bit
# (TP=2 and 4: the same rank-order sums); taco tracks it with the same bytes
# at TP=2 (one tensor to one peer = two half tensors)
t_one_shot() {
    local base=(configs/default.json "${SMALL[@]}" --set train.steps=20)
    for tp in 2 4; do
        $TRAIN -np $tp build/train "${base[@]}" --set parallel.tp=$tp --set compress.method=none \
            --set comm.allreduce=two_shot --set log.dir=$T/two_$tp || return 1
        $TRAIN -np $tp build/train "${base[@]}" --set parallel.tp=$tp --set compress.method=none \
            --set comm.allreduce=one_shot --set log.dir=$T/one_$tp || return 1
        python3 tests/compare_logs.py $T/one_$tp/log.jsonl $T/two_$tp/log.jsonl --exact || return 1
    done
    # and it is the one-shot that ran: at TP=4 it sends 3 tensors per rank, not 1.5
    python3 tests/compare_logs.py $T/one_4/log.jsonl $T/two_4/log.jsonl --ratio comm_bytes 1.9 2.1 || return 1
    $TRAIN -np 2 build/train "${base[@]}" --set parallel.tp=2 --set compress.method=taco --set comm.allreduce=two_shot \
        --set log.dir=$T/taco_two || return 1
    $TRAIN -np 2 build/train "${base[@]}" --set parallel.tp=2 --set compress.method=taco --set comm.allreduce=one_shot \
        --set log.dir=$T/taco_one || return 1
    python3 tests/compare_logs.py $T/taco_one/log.jsonl $T/two_2/log.jsonl --key loss --rtol 0.02 || return 1
    python3 tests/compare_logs.py $T/taco_two/log.jsonl $T/taco_one/log.jsonl --ratio comm_bytes 0.97 1.03
}

# comm.allreduce=auto (the default) picks a shape per exchange by the bytes
# one-shot adds (comm/policy.h): none at TP=2, so there it is one-shot; at
# TP=4 a switch point of 0 KB keeps two-shot and a large one takes one-shot,
# bit for bit
t_allreduce_auto() {
    local base=(configs/default.json "${SMALL[@]}" --set train.steps=20 --set compress.method=taco)
    $TRAIN -np 2 build/train "${base[@]}" --set parallel.tp=2 --set log.dir=$T/auto_ar2 || return 1
    python3 tests/compare_logs.py $T/auto_ar2/log.jsonl $T/taco_one/log.jsonl --exact || return 1
    $TRAIN -np 4 build/train "${base[@]}" --set parallel.tp=4 --set comm.allreduce=two_shot --set log.dir=$T/ar4_two || return 1
    $TRAIN -np 4 build/train "${base[@]}" --set parallel.tp=4 --set comm.allreduce=one_shot --set log.dir=$T/ar4_one || return 1
    $TRAIN -np 4 build/train "${base[@]}" --set parallel.tp=4 --set comm.allreduce=auto --set comm.one_shot_extra_kb=0 \
        --set log.dir=$T/ar4_auto0 || return 1
    $TRAIN -np 4 build/train "${base[@]}" --set parallel.tp=4 --set comm.allreduce=auto --set comm.one_shot_extra_kb=100000 \
        --set log.dir=$T/ar4_autobig || return 1
    python3 tests/compare_logs.py $T/ar4_auto0/log.jsonl $T/ar4_two/log.jsonl --exact || return 1
    python3 tests/compare_logs.py $T/ar4_autobig/log.jsonl $T/ar4_one/log.jsonl --exact || return 1
    ! python3 tests/compare_logs.py $T/ar4_one/log.jsonl $T/ar4_two/log.jsonl --exact > /dev/null # the two shapes differ
}

# compress.method=auto: with a fidelity bound nothing meets (auto_max_err=0)
# every site stays exact, and the run equals method=none bit for bit; with no
# speed or error demand every site takes the candidate after the trial steps,
# and a resume from a checkpoint after the decision is bit-identical
t_auto() {
    local base=(configs/default.json "${SMALL[@]}" --set train.steps=12 --set parallel.tp=2)
    $TRAIN -np 2 build/train "${base[@]}" --set compress.method=none --set log.dir=$T/auto_none > /dev/null || return 1
    $TRAIN -np 2 build/train "${base[@]}" --set compress.method=auto --set compress.auto_max_err=0 \
        --set log.dir=$T/auto_strict > $T/auto_strict.out || return 1
    grep -q "^auto: 0 of 10 sites compress" $T/auto_strict.out || { grep "^auto" $T/auto_strict.out; return 1; }
    python3 tests/compare_logs.py $T/auto_strict/log.jsonl $T/auto_none/log.jsonl --exact || return 1
    local all=(--set compress.method=auto --set compress.auto_min_speedup=0 --set compress.auto_max_err=1 --set compress.auto_steps=2)
    $TRAIN -np 2 build/train "${base[@]}" "${all[@]}" --set log.dir=$T/auto_all > $T/auto_all.out || return 1
    grep -q "^auto: 10 of 10 sites compress" $T/auto_all.out || { grep "^auto" $T/auto_all.out; return 1; }
    python3 - $T/auto_all/log.jsonl <<'PY' || return 1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"sites"' in l]
first, last = rows[0]["sites"], rows[-1]["sites"]
assert all(v["method"] == "taco" for v in last.values()), last
assert rows[-1]["comm_bytes"] < 0.3 * rows[0]["comm_bytes"], (rows[0]["comm_bytes"], rows[-1]["comm_bytes"])
PY
    $TRAIN -np 2 build/train "${base[@]}" "${all[@]}" --set log.dir=$T/auto_part --set checkpoint.every=6 > /dev/null || return 1
    rm -f $T/auto_part/ckpt/*00000012*
    $TRAIN -np 2 build/train "${base[@]}" "${all[@]}" --set log.dir=$T/auto_part --set checkpoint.resume=true \
        > $T/auto_resume.out || return 1
    ! grep -q "^auto:" $T/auto_resume.out || { echo "the resumed run ran the trials again"; return 1; }
    python3 tests/compare_logs.py $T/auto_part/log.jsonl $T/auto_all/log.jsonl --exact || return 1
}

# save at step 10, resume, and the losses of steps 11..20 are bit-identical;
# a model file written by the trainer loads with the same loss
t_checkpoint_resume() {
    local base=(configs/default.json "${SMALL[@]}" --set train.steps=20 --set parallel.tp=2 --set compress.method=taco
                --set compress.group_size=auto --set compress.calib_steps=4 --set compress.scale=delayed)
    $TRAIN -np 2 build/train "${base[@]}" --set log.dir=$T/full || return 1
    $TRAIN -np 2 build/train "${base[@]}" --set log.dir=$T/part --set train.steps=20 --set checkpoint.every=10 \
        --set train.eval_every=0 > /dev/null || return 1
    ls $T/part/ckpt/done_00000010 $T/part/ckpt/model_00000010.bin || return 1
    # simulate a crash after step 10: drop the step-20 checkpoint, then resume
    rm -f $T/part/ckpt/*00000020*
    $TRAIN -np 2 build/train "${base[@]}" --set log.dir=$T/part --set checkpoint.resume=true | tee $T/resume.out || return 1
    grep -q "resumed from .* at step 10" $T/resume.out || return 1
    python3 tests/compare_logs.py $T/part/log.jsonl $T/full/log.jsonl --exact --from-step 11 || return 1
    # init_from: the step-10 model evaluates to the same val loss as in the run that wrote it
    local ev=(configs/default.json "${SMALL[@]}" --set parallel.tp=2 --set train.eval_every=1 --set train.eval_batches=2)
    $TRAIN -np 2 build/train "${ev[@]}" --set train.steps=10 --set train.eval_every=10 --set log.dir=$T/ev_a \
        --set checkpoint.every=10 || return 1
    $TRAIN -np 2 build/train "${ev[@]}" --set train.steps=0 --set log.dir=$T/ev_b \
        --set model.init_from=$T/ev_a/ckpt/model_00000010.bin || return 1
    python3 - "$T/ev_a/log.jsonl" "$T/ev_b/log.jsonl" <<'PY' || return 1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
va = [r["val_loss"] for r in a if r["step"] == 10][0]
vb = [r["val_loss"] for r in b if r["step"] == 0][0]
print("val loss of the saved model:", va, "after loading it:", vb)
sys.exit(0 if va == vb else 1)
PY
}

# each class of bad input: one error line naming the key or file, non-zero exit on every rank, no hang
t_config_errors() {
    expect_error() {  # expect_error PATTERN ARGS...
        local pat=$1; shift
        local out rc
        out=$(timeout 60 $MPIRUN -np 2 build/train "$@" 2>&1); rc=$?
        if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then echo "expected failure (rc=$rc): $*"; return 1; fi
        echo "$out" | grep -q -- "$pat" || { echo "expected '$pat' in: $out"; return 1; }
        echo "ok: $pat"
    }
    local c=configs/default.json
    expect_error "train.lrr" $c --set train.lrr=1 || return 1
    expect_error "train.lr" $c --set train.lr=abc || return 1
    expect_error "train.lr" $c --set train.lr=-1 || return 1
    expect_error "model.n_head" $c --set model.n_head=3 --set model.d_model=96 || return 1
    expect_error "tp" $c --set parallel.tp=4 || return 1
    expect_error "nonexistent.bin" $c --set data.train=datasets/nonexistent.bin || return 1
    printf '{"train": {"lr": 1e-3,,}}' > $T/bad.json
    expect_error "bad.json" $T/bad.json || return 1
    printf 'not a shard at all, just text' > $T/bad_shard.bin
    expect_error "bad_shard.bin" $c --set data.train=$T/bad_shard.bin || return 1
    expect_error "compress.method" $c --set compress.method=zip || return 1
    expect_error "model.init: \"device\" needs the GPU build" $c --set model.init=device || return 1
    expect_error 'comm.backend: "nccl" needs the GPU build' $c --set comm.backend=nccl || return 1
    expect_error "no config" || return 1
    # a model file of another shape: the error names the field
    expect_error "model.n_layer is 2 in the file but 3" $c "${SMALL[@]}" --set model.n_layer=3 --set model.init_from=$T/ev_a/ckpt/model_00000010.bin || return 1
}

# a diverging run stops on every rank, names the step, and leaves no checkpoint of that step
t_nonfinite() {
    local out rc
    out=$(timeout 120 $MPIRUN -np 2 build/train configs/default.json "${SMALL[@]}" --set train.lr=1e30 \
          --set train.warmup_steps=0 --set train.steps=10 --set log.dir=$T/nan --set checkpoint.every=1 2>&1); rc=$?
    echo "$out" | grep -v "^step"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a non-zero exit, got $rc"; return 1; }
    local step
    step=$(echo "$out" | sed -n 's/.*non-finite [a-z ]* at step \([0-9]*\).*/\1/p' | head -1)
    [ -n "$step" ] || { echo "no 'non-finite ... at step N' message"; return 1; }
    [ ! -e "$T/nan/ckpt/done_$(printf %08d "$step")" ] || { echo "a checkpoint of the failed step $step exists"; return 1; }
    echo "stopped at step $step, no checkpoint for it"
}

# a short run on the default data learns: loss well below ln(256) = 5.55
t_learns() {
    $TRAIN -np 2 build/train configs/default.json --set train.steps=150 --set log.dir=$T/learn || return 1
    python3 - $T/learn/log.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
last = [r for r in rows if "val_loss" in r][-1]
print("final train loss %.4f val loss %.4f" % (rows[-1]["loss"], last["val_loss"]))
sys.exit(0 if last["val_loss"] < 3.0 and rows[-1]["loss"] < 3.0 else 1)
PY
}

# TP=2 with taco for 300 steps stays within 2% of the exact run, moving ~3.9x fewer bytes
t_taco_vs_none() {
    local base=(configs/default.json --set train.steps=300 --set train.eval_every=100 --set train.sample_every=0)
    $TRAIN -np 2 build/train "${base[@]}" --set compress.method=none --set log.dir=$T/none || return 1
    $TRAIN -np 2 build/train "${base[@]}" --set compress.method=taco --set log.dir=$T/taco || return 1
    python3 tests/compare_logs.py $T/taco/log.jsonl $T/none/log.jsonl --key val_loss --rtol 0.02 || return 1
    python3 tests/compare_logs.py $T/none/log.jsonl $T/taco/log.jsonl --ratio comm_bytes 3.7 4.0
}

# train.cuda_graph where the build has no graphs: one note when it was asked for, none by default
t_cuda_graph_cpu_note() {
    local out
    out=$(timeout 60 $MPIRUN -np 1 build/train configs/default.json "${SMALL[@]}" --set parallel.tp=1 --set train.steps=1 \
          --set train.cuda_graph=true --set log.dir=$T/graph_cpu 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep "cuda_graph"
    echo "$out" | grep -q "^note: train.cuda_graph: the CPU build has no CUDA graphs; the steps run as usual" || return 1
    out=$(timeout 60 $MPIRUN -np 1 build/train configs/default.json "${SMALL[@]}" --set parallel.tp=1 --set train.steps=1 \
          --set log.dir=$T/graph_cpu 2>&1) || { echo "$out"; return 1; }
    ! echo "$out" | grep -q "cuda_graph"
}

# The GPU trainer under the CPU emulator (build/emu/train_gpu_emu, tests/emu/emu.mk), whose
# streams capture into graphs for real (tests/emu/emu_runtime.cpp): one rank captures its step
# as one CUDA graph after a warm-up step and replays it (train.cuda_graph, on by default there),
# and that gives the eager step's losses, gradient norms and validation losses bit for bit, with
# evaluation, sampling and checkpoints between the replays; a checkpoint resumes with the graph
# on, bit for bit (the step after the resume is the warm-up); a diverging run stops at a replayed
# step with the message of the eager one and no checkpoint of that step; with several ranks on
# the NCCL backend (nccl_emu.c, one emulated GPU per rank: EMU_OWN_GPU) the step is captured
# too, its NCCL groups, event forks and joins recorded, and gives the eager run's bits; where
# the exchanges need the host (the MPI backend, stochastic rounding) a graph that was asked for
# is refused with a note.
EMU_TRAIN=build/emu/train_gpu_emu
EMU_CFG=(configs/default.json --set parallel.tp=1 --set model.n_layer=2 --set model.d_model=64 --set model.n_head=2
         --set model.max_seq_len=32 --set train.batch_size=2 --set train.seq_len=32 --set train.eval_every=3
         --set train.eval_batches=1 --set train.sample_len=4 --set train.steps=6)
t_emu_cuda_graph() {
    local d=$T/emu_graph
    $TRAIN -np 1 $EMU_TRAIN "${EMU_CFG[@]}" --set train.cuda_graph=false --set log.dir=${d}_off > ${d}_off.out || return 1
    $TRAIN -np 1 $EMU_TRAIN "${EMU_CFG[@]}" --set checkpoint.every=3 --set log.dir=${d}_on > ${d}_on.out || return 1
    grep "cuda_graph" ${d}_on.out
    grep -q "^note: train.cuda_graph: on" ${d}_on.out || { echo "no note that the graph is on"; return 1; }
    grep -q "^train.cuda_graph: step 2 captured as one CUDA graph of [0-9]* nodes" ${d}_on.out || return 1
    grep -q "cuda_graph" ${d}_off.out && { echo "the run with train.cuda_graph=false used it"; return 1; }
    local k
    for k in loss grad_norm val_loss; do
        python3 tests/compare_logs.py ${d}_on/log.jsonl ${d}_off/log.jsonl --key $k --exact || return 1
    done
    [ "$(grep -c '"loss"' ${d}_on/log.jsonl)" -eq 6 ] || { echo "not 6 steps logged"; return 1; }
    # resume at step 3 with the graph on: step 4 eager, 5 captured, 6 replayed
    rm -f ${d}_on/ckpt/*00000006*
    $TRAIN -np 1 $EMU_TRAIN "${EMU_CFG[@]}" --set checkpoint.every=3 --set checkpoint.resume=true \
        --set log.dir=${d}_on > ${d}_resume.out || return 1
    grep -q "resumed from .* at step 3" ${d}_resume.out || return 1
    grep -q "^train.cuda_graph: step 5 captured" ${d}_resume.out || return 1
    for k in loss grad_norm; do
        python3 tests/compare_logs.py ${d}_on/log.jsonl ${d}_off/log.jsonl --key $k --exact --from-step 4 || return 1
    done
}

t_emu_cuda_graph_nonfinite() {
    local out rc step
    out=$(timeout 300 $MPIRUN -np 1 $EMU_TRAIN "${EMU_CFG[@]}" --set train.eval_every=0 --set train.sample_every=0 \
          --set train.lr=1e30 --set train.warmup_steps=0 --set checkpoint.every=1 --set log.dir=$T/emu_nan 2>&1); rc=$?
    echo "$out" | grep -v "^step"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a non-zero exit, got $rc"; return 1; }
    step=$(echo "$out" | sed -n 's/^error: non-finite [a-z ]* at step \([0-9]*\) .*Stopping before the update.*/\1/p' | head -1)
    [ -n "$step" ] || { echo "no 'non-finite ... at step N' message"; return 1; }
    [ "$step" -ge 2 ] || { echo "stopped at step $step, before the graph was captured"; return 1; }
    [ ! -e "$T/emu_nan/ckpt/done_$(printf %08d "$step")" ] || { echo "a checkpoint of the failed step $step exists"; return 1; }
    [ -e "$T/emu_nan/ckpt/done_$(printf %08d $((step - 1)))" ] || { echo "no checkpoint of step $((step - 1))"; return 1; }
    echo "stopped at step $step, the captured step; no checkpoint for it"
}

t_emu_cuda_graph_two_ranks() {
    local out
    out=$(timeout 300 $MPIRUN -np 2 $EMU_TRAIN "${EMU_CFG[@]}" --set parallel.tp=2 --set train.steps=0 \
          --set train.eval_every=0 --set train.cuda_graph=true --set log.dir=$T/emu_graph_tp2 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep "cuda_graph"
    echo "$out" | grep -q '^note: train.cuda_graph: not for this run of 2 ranks: .*comm.backend "nccl" does' || return 1
    [ "$(echo "$out" | grep -c cuda_graph)" -eq 1 ] || { echo "not one note"; return 1; }
    out=$(timeout 300 $MPIRUN -x EMU_OWN_GPU=1 -np 2 $EMU_TRAIN "${EMU_CFG[@]}" --set parallel.tp=2 --set comm.backend=nccl \
          --set compress.method=taco --set compress.rounding=stochastic --set train.steps=0 --set train.eval_every=0 \
          --set train.cuda_graph=true --set log.dir=$T/emu_graph_sr 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep "cuda_graph"
    echo "$out" | grep -q '^note: train.cuda_graph: not for this run of 2 ranks: stochastic rounding' || return 1
}

# the NCCL backend's steps as graphs, each against its eager run: the same losses, gradient
# norms, validation losses and bytes, bit for bit, and the MPI backend's eager run the same
# losses and norms (the step sums on the device add as the host does). TP = 2 (two-shot all-reduces: a network
# stream forked from the compute stream and joined back in every exchange, the step sums
# gathered on the device), its error sampled every 4 steps: steps 1 and 5 sample and run
# eagerly, 2 is the warm-up, 3 is captured, 4 and 6 replay. DP = 2: no exchange sites, step 2
# captured. TP = 2 x DP = 2 with the group size calibrated over 2 steps: steps 1-3 calibrate or
# decide, 4 warms up, 5 is captured.
t_emu_cuda_graph_nccl() {
    local nccl=(--set comm.backend=nccl --set compress.method=taco --set comm.allreduce=two_shot)
    local c np first par d k i=0
    for c in "2|3|--set parallel.tp=2 --set compress.stats_every=4" "2|2|--set parallel.tp=1 --set parallel.dp=2" \
             "4|5|--set parallel.tp=2 --set parallel.dp=2 --set compress.group_size=0 --set compress.calib_steps=2"; do
        IFS='|' read -r np first rest <<< "$c"
        read -r -a par <<< "$rest"
        i=$((i + 1))
        d=$T/emu_graph_nccl_$i
        $TRAIN -x EMU_OWN_GPU=1 -np $np $EMU_TRAIN "${EMU_CFG[@]}" "${nccl[@]}" "${par[@]}" \
            --set train.cuda_graph=false --set log.dir=${d}_off > ${d}_off.out || return 1
        $TRAIN -x EMU_OWN_GPU=1 -np $np $EMU_TRAIN "${EMU_CFG[@]}" "${nccl[@]}" "${par[@]}" \
            --set log.dir=${d}_on > ${d}_on.out || return 1
        grep "captured" ${d}_on.out
        grep -q "^train.cuda_graph: step $first captured as one CUDA graph of [0-9]* nodes" ${d}_on.out || return 1
        for k in loss grad_norm val_loss comm_bytes; do
            python3 tests/compare_logs.py ${d}_on/log.jsonl ${d}_off/log.jsonl --key $k --exact || return 1
        done
        # and the MPI backend (host sums of the step's scalars) gives the same bits
        $TRAIN -x EMU_OWN_GPU=1 -np $np $EMU_TRAIN "${EMU_CFG[@]}" "${nccl[@]}" "${par[@]}" --set comm.backend=mpi \
            --set comm.transport=staged --set train.cuda_graph=false --set log.dir=${d}_mpi > ${d}_mpi.out || return 1
        for k in loss grad_norm; do
            python3 tests/compare_logs.py ${d}_on/log.jsonl ${d}_mpi/log.jsonl --key $k --exact || return 1
        done
    done
}

# TP = 2 on the NCCL backend with a checkpoint every 3 steps, resumed at step 3 with the graph
# on: step 4 is the warm-up, 5 is captured, 6 replays, and the losses, norms and bytes of steps
# 4-6 are the eager run's, bit for bit (no error samples: comm.stats_every=0)
t_emu_cuda_graph_nccl_resume() {
    local d=$T/emu_graph_nccl_resume
    local a=(--set comm.backend=nccl --set compress.method=taco --set comm.allreduce=two_shot --set parallel.tp=2
             --set compress.stats_every=0 --set checkpoint.every=3)
    $TRAIN -x EMU_OWN_GPU=1 -np 2 $EMU_TRAIN "${EMU_CFG[@]}" "${a[@]}" --set train.cuda_graph=false \
        --set log.dir=${d}_off > ${d}_off.out || return 1
    $TRAIN -x EMU_OWN_GPU=1 -np 2 $EMU_TRAIN "${EMU_CFG[@]}" "${a[@]}" --set log.dir=${d}_on > ${d}_on.out || return 1
    grep -q "^train.cuda_graph: step 2 captured" ${d}_on.out || { grep cuda_graph ${d}_on.out; return 1; }
    rm -f ${d}_on/ckpt/*00000006*
    $TRAIN -x EMU_OWN_GPU=1 -np 2 $EMU_TRAIN "${EMU_CFG[@]}" "${a[@]}" --set checkpoint.resume=true \
        --set log.dir=${d}_on > ${d}_resume.out || return 1
    grep -q "resumed from .* at step 3" ${d}_resume.out || return 1
    grep "captured" ${d}_resume.out
    grep -q "^train.cuda_graph: step 5 captured" ${d}_resume.out || return 1
    local k
    for k in loss grad_norm comm_bytes; do
        python3 tests/compare_logs.py ${d}_on/log.jsonl ${d}_off/log.jsonl --key $k --exact --from-step 4 || return 1
    done
}

run tp_equivalence t_tp_equivalence
run one_shot_allreduce t_one_shot
run allreduce_auto t_allreduce_auto
run auto_compression t_auto
run checkpoint_resume t_checkpoint_resume
run config_errors t_config_errors
run nonfinite_stops t_nonfinite
run cuda_graph_cpu_build_note t_cuda_graph_cpu_note
if [ -d "${CUDA_HOME:-/usr/local/cuda}/include" ]; then  # the emulated GPU trainer is built with the emulated tests
    run emu_cuda_graph_eq_eager t_emu_cuda_graph
    run emu_cuda_graph_nonfinite_stops t_emu_cuda_graph_nonfinite
    run emu_cuda_graph_two_ranks_note t_emu_cuda_graph_two_ranks
    run emu_cuda_graph_nccl_eq_eager t_emu_cuda_graph_nccl
    run emu_cuda_graph_nccl_resume t_emu_cuda_graph_nccl_resume
fi
run learns_default_data t_learns
run taco_vs_none_300_steps t_taco_vs_none
