#!/usr/bin/env bash
# tests/run_tests_gpu.sh - the CUDA tests (make test-gpu), on a machine with a GPU.
#
#   test_ops_gpu        every CUDA op against the fp32 CPU op on the same inputs
#   gpu_vs_cpu          build/train_gpu vs build/train: same weights and batches,
#                       10 steps track within bf16 tolerance
#   gpu_tp_equivalence  TP=1 vs TP=2 (two ranks sharing the GPU)
#   gpu_determinism     two identical GPU runs give bit-identical losses
#   gpu_cuda_graph      train.cuda_graph: the step replayed as one CUDA graph == the eager step,
#                       bit for bit (GPT-2 and Qwen2, evaluation and sampling between replays), a
#                       resume with the graph on, a diverging run stopped at the captured step
#   test_init_gpu       the device weight init: TP degrees bit-identical, distribution rules
#   gpu_memory_refusal  a model that cannot fit the GPU: one error before allocating
#   gpu_sigterm_resume, gpu_sigterm_mpirun, gpu_watchdog_stopped_rank  tests/test_stop.sh
#                       on the GPU build
#   gpu_init_device     model.init=device end to end: TP=1 and TP=2 track; "auto" picks the
#                       device for a GPT-2 350M-shaped model
#   qwen2_gpu_vs_cpu    model.arch=qwen2 (GQA, RMSNorm, RoPE, SwiGLU): build/train_gpu vs
#                       build/train from the same weights, 10 steps within bf16 tolerance
#   qwen2_gpu_tp        qwen2 at TP=2 vs TP=1, bit-identical reruns, a Hugging Face
#                       checkpoint resumed bit for bit, the device init at TP=1 and 2
#   gpu_sequence_parallel  parallel.sp vs not at TP=2, activations per rank, comm.overlap on == off
#   (and the compression kernels' tests when they are built)
#   gpu_transports      comm.transport ipc (two ranks sharing the GPU) trains to the staged
#                       transport's bits: none and taco (delayed scale), two-shot and one-shot
#   gpu_resume_delayed  taco with delayed scaling, the history on the device: a resume from a
#                       checkpoint repeats the uninterrupted run bit for bit
#   test_coll_gpu       the device collectives (staged, IPC) against the host ones at 2, 3, 4 ranks
#   the NCCL backend (tests/test_nccl_gpu.sh): with 2+ GPUs bit-identical to MPI
# `tests/run_tests_gpu.sh nccl` runs only the NCCL part; `tests/run_tests_gpu.sh graph` only what
# the step's CUDA graph touches: test_ops_gpu, gpu_vs_cpu, gpu_cuda_graph.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
LOGDIR=build/test-logs-gpu
TEST_TIMEOUT=900
source tests/lib.sh
T=build/test-runs-gpu
rm -rf "$T"; mkdir -p "$T"

# a GPT-2-like small model (hs = 64, the head size the attention kernels are tuned for)
GPT=(configs/default.json --set model.n_layer=4 --set model.n_head=4 --set model.d_model=256
     --set model.max_seq_len=256 --set train.seq_len=256 --set train.batch_size=8 --set train.eval_every=0
     --set train.sample_every=0 --set compress.method=none --set train.steps=10 --set train.lr=1e-3)

# bf16 activations carry 8 bits of mantissa: per-op errors ~4e-3 relative, and the
# loss (a mean over 2048 tokens) agrees with the fp32 reference to ~1e-2 relative
# over 10 steps; the gradient norm, a sum of squares of bf16-rounded products, to ~5e-2.
# cpu_vs_gpu PREFIX ARGS...: both builds at TP=1 into $T/PREFIXcpu and $T/PREFIXgpu, then those checks
cpu_vs_gpu() {
    local p=$1; shift
    timeout 600 $MPIRUN -np 1 build/train "$@" --set parallel.tp=1 --set log.dir=$T/${p}cpu || return 1
    timeout 600 $MPIRUN -np 1 build/train_gpu "$@" --set parallel.tp=1 --set log.dir=$T/${p}gpu || return 1
    python3 tests/compare_logs.py $T/${p}gpu/log.jsonl $T/${p}cpu/log.jsonl --key loss --rtol 1e-2 || return 1
    python3 tests/compare_logs.py $T/${p}gpu/log.jsonl $T/${p}cpu/log.jsonl --key grad_norm --rtol 5e-2
}
t_gpu_vs_cpu() { cpu_vs_gpu "" "${GPT[@]}"; }

t_gpu_tp() {
    timeout 600 $MPIRUN -np 2 build/train_gpu "${GPT[@]}" --set parallel.tp=2 --set log.dir=$T/gpu_tp2 || return 1
    [ -f $T/gpu/log.jsonl ] || timeout 600 $MPIRUN -np 1 build/train_gpu "${GPT[@]}" --set log.dir=$T/gpu --set parallel.tp=1 || return 1
    python3 tests/compare_logs.py $T/gpu_tp2/log.jsonl $T/gpu/log.jsonl --key loss --rtol 1e-2
}

t_gpu_determinism() {
    timeout 600 $MPIRUN -np 2 build/train_gpu "${GPT[@]}" --set parallel.tp=2 --set log.dir=$T/det_a || return 1
    timeout 600 $MPIRUN -np 2 build/train_gpu "${GPT[@]}" --set parallel.tp=2 --set log.dir=$T/det_b || return 1
    python3 tests/compare_logs.py $T/det_a/log.jsonl $T/det_b/log.jsonl --key loss --exact || return 1
    python3 tests/compare_logs.py $T/det_a/log.jsonl $T/det_b/log.jsonl --key grad_norm --exact
}

t_gpu_taco() {
    timeout 600 $MPIRUN -np 2 build/train_gpu "${GPT[@]}" --set parallel.tp=2 --set train.steps=60 \
        --set compress.method=none --set log.dir=$T/gpu_none || return 1
    timeout 600 $MPIRUN -np 2 build/train_gpu "${GPT[@]}" --set parallel.tp=2 --set train.steps=60 \
        --set compress.method=taco --set log.dir=$T/gpu_taco || return 1
    python3 tests/compare_logs.py $T/gpu_taco/log.jsonl $T/gpu_none/log.jsonl --key loss --rtol 3e-2 --from-step 50
}

t_gpu_transports() {
    local base=("${GPT[@]}" --set parallel.tp=2 --set train.steps=20 --set compress.stats_every=5)
    local m shape d
    for m in none taco; do
        for shape in two_shot one_shot sp; do  # sp: the row exchanges, piece by piece beside the GEMMs
            d=$T/tr_${m}_$shape
            local cfg=(--set compress.method=$m --set compress.scale=delayed)
            if [ $shape = sp ]; then cfg+=(--set parallel.sp=true --set comm.overlap=true)
            else cfg+=(--set comm.allreduce=$shape); fi
            timeout 600 $MPIRUN -np 2 build/train_gpu "${base[@]}" "${cfg[@]}" --set comm.transport=staged \
                --set log.dir=${d}_staged > ${d}_staged.out || return 1
            timeout 600 $MPIRUN -np 2 build/train_gpu "${base[@]}" "${cfg[@]}" --set comm.transport=ipc \
                --set log.dir=${d}_ipc > ${d}_ipc.out || return 1
            grep -q "^comm: TP exchanges by MPI (staged)" ${d}_staged.out || return 1
            grep -q "^comm: TP exchanges by CUDA IPC" ${d}_ipc.out || { echo "ipc was not used"; return 1; }
            python3 tests/compare_logs.py ${d}_ipc/log.jsonl ${d}_staged/log.jsonl --key loss --exact || return 1
            python3 tests/compare_logs.py ${d}_ipc/log.jsonl ${d}_staged/log.jsonl --key grad_norm --exact || return 1
            python3 tests/compare_logs.py ${d}_ipc/log.jsonl ${d}_staged/log.jsonl --key comm_bytes --exact || return 1
        done
    done
}

# the delayed-scale history lives on the device: a checkpoint must carry it (copied to the host
# when saved, back when loaded), or the resumed steps would scale differently; the all-reduce
# sites and the sequence-parallel row exchanges alike
t_gpu_resume_delayed() {
    local sp d
    for sp in false true; do
        local base=("${GPT[@]}" --set parallel.tp=2 --set train.steps=20 --set compress.method=taco --set compress.scale=delayed
                    --set parallel.sp=$sp)
        d=$T/rd_sp$sp
        timeout 600 $MPIRUN -np 2 build/train_gpu "${base[@]}" --set log.dir=${d}_full > /dev/null || return 1
        timeout 600 $MPIRUN -np 2 build/train_gpu "${base[@]}" --set log.dir=${d}_part --set checkpoint.every=10 > /dev/null || return 1
        rm -f ${d}_part/ckpt/*00000020*
        timeout 600 $MPIRUN -np 2 build/train_gpu "${base[@]}" --set log.dir=${d}_part --set checkpoint.resume=true \
            > ${d}_resume.out || return 1
        grep -q "resumed from .* at step 10" ${d}_resume.out || return 1
        python3 tests/compare_logs.py ${d}_part/log.jsonl ${d}_full/log.jsonl --exact --from-step 11 || return 1
        python3 tests/compare_logs.py ${d}_part/log.jsonl ${d}_full/log.jsonl --key grad_norm --exact --from-step 11 || return 1
    done
}

# a model whose activations cannot fit the GPU (~250 GB estimated for a 139 GB
# card, the host part small): one clear error before anything is allocated
t_gpu_memory_refusal() {
    local out
    out=$(timeout 120 $MPIRUN -np 1 build/train_gpu "${GPT[@]}" --set parallel.tp=1 --set model.n_layer=48 --set model.d_model=2048 \
        --set model.n_head=16 --set train.batch_size=256 --set log.dir=$T/gpu_mem 2>&1) && { echo "it ran"; return 1; }
    echo "$out" | grep "out of GPU memory before the start" || { echo "$out" | tail -5; return 1; }
    ! echo "$out" | grep -q "^step "
}

# model.init=device: both TP degrees slice the same full model drawn on the device, so they
# start identical and track as gpu_tp does; "auto" picks the device from 300M parameters on
t_gpu_init_device() {
    timeout 600 $MPIRUN -np 1 build/train_gpu "${GPT[@]}" --set parallel.tp=1 --set model.init=device --set log.dir=$T/init_dev1 \
        > $T/init_dev1.out || return 1
    grep "^init:" $T/init_dev1.out
    grep -q "^init: device (cuRAND Philox)" $T/init_dev1.out || return 1
    timeout 600 $MPIRUN -np 2 build/train_gpu "${GPT[@]}" --set parallel.tp=2 --set model.init=device \
        --set log.dir=$T/init_dev2 > /dev/null || return 1
    python3 tests/compare_logs.py $T/init_dev2/log.jsonl $T/init_dev1/log.jsonl --key loss --rtol 1e-2 || return 1
    timeout 600 $MPIRUN -np 1 build/train_gpu "${GPT[@]}" --set parallel.tp=1 --set model.n_layer=24 --set model.d_model=1024 \
        --set model.n_head=16 --set model.max_seq_len=1024 --set model.vocab_size=50257 --set train.steps=0 \
        --set log.dir=$T/init_auto > $T/init_auto.out || return 1
    grep "^init:" $T/init_auto.out
    grep -q "^init: device (cuRAND Philox), 354.9M params" $T/init_auto.out
}

# Qwen2 of the same size: 4 query heads over 2 kv heads (groups of 2, one kv head per rank
# at TP=2), hs = 64, an untied LM head
QWEN=("${GPT[@]}" --set model.arch=qwen2 --set model.n_kv_head=2 --set model.d_ff=704
      --set model.tie_embeddings=false --set model.rope_theta=10000)

# The tolerances of gpu_vs_cpu, for the same reason: bf16 activations (8 significant bits,
# ~4e-3 relative per op; RMSNorm, RoPE and SwiGLU round once per output as LayerNorm and GELU
# do) against the fp32 reference; the loss is a mean over 2048 tokens (rtol 1e-2), the
# gradient norm a sum of squares of bf16-rounded products (5e-2).
t_qwen2_gpu_vs_cpu() { cpu_vs_gpu q_ "${QWEN[@]}"; }

# TP=2 tracks TP=1 as GPT-2 does (rtol 1e-2: the two degrees sum the row-parallel partial
# products in a different order, each rounded to bf16); a rerun is bit-identical (the
# kernels' reductions have fixed orders, grouped-query dK/dV included); a checkpoint (a
# Hugging Face directory) resumes bit for bit; the device init agrees across degrees.
t_qwen2_gpu_tp() {
    timeout 600 $MPIRUN -np 2 build/train_gpu "${QWEN[@]}" --set parallel.tp=2 --set log.dir=$T/q_gpu_tp2 || return 1
    [ -f $T/q_gpu/log.jsonl ] || timeout 600 $MPIRUN -np 1 build/train_gpu "${QWEN[@]}" --set parallel.tp=1 \
        --set log.dir=$T/q_gpu || return 1
    python3 tests/compare_logs.py $T/q_gpu_tp2/log.jsonl $T/q_gpu/log.jsonl --key loss --rtol 1e-2 || return 1
    timeout 600 $MPIRUN -np 2 build/train_gpu "${QWEN[@]}" --set parallel.tp=2 --set log.dir=$T/q_gpu_tp2b \
        --set checkpoint.every=5 > /dev/null || return 1
    python3 tests/compare_logs.py $T/q_gpu_tp2b/log.jsonl $T/q_gpu_tp2/log.jsonl --key loss --exact || return 1
    python3 tests/compare_logs.py $T/q_gpu_tp2b/log.jsonl $T/q_gpu_tp2/log.jsonl --key grad_norm --exact || return 1
    ls $T/q_gpu_tp2b/ckpt/model_00000005/model.safetensors $T/q_gpu_tp2b/ckpt/model_00000005/config.json || return 1
    rm -rf $T/q_gpu_tp2b/ckpt/*00000010*
    timeout 600 $MPIRUN -np 2 build/train_gpu "${QWEN[@]}" --set parallel.tp=2 --set log.dir=$T/q_gpu_tp2b \
        --set checkpoint.every=5 --set checkpoint.resume=true > $T/q_gpu_resume.out || return 1
    grep -q "resumed from .* at step 5" $T/q_gpu_resume.out || return 1
    python3 tests/compare_logs.py $T/q_gpu_tp2b/log.jsonl $T/q_gpu_tp2/log.jsonl --key loss --exact --from-step 6 || return 1
    timeout 600 $MPIRUN -np 1 build/train_gpu "${QWEN[@]}" --set parallel.tp=1 --set model.init=device \
        --set log.dir=$T/q_dev1 > /dev/null || return 1
    timeout 600 $MPIRUN -np 2 build/train_gpu "${QWEN[@]}" --set parallel.tp=2 --set model.init=device \
        --set log.dir=$T/q_dev2 > /dev/null || return 1
    python3 tests/compare_logs.py $T/q_dev2/log.jsonl $T/q_dev1/log.jsonl --key loss --rtol 1e-2
}

# parallel.sp at TP=2 (two ranks, sharing the GPU or one each): the exact path
# tracks the non-sp run within the bf16 tolerance of gpu_tp (the GEMMs beside
# the exchanges run in comm.sp_chunks pieces, and cuBLAS may pick another kernel
# for another row count; the replicated gradients are summed in another order);
# the activations per rank shrink; comm.overlap on == off bit for bit with taco
# (and with the NCCL backend on 2+ GPUs, the MPI backend's bits)
t_gpu_sp() {
    local b=("${GPT[@]}" --set parallel.tp=2)
    timeout 600 $MPIRUN -np 2 build/train_gpu "${b[@]}" --set log.dir=$T/gpu_nosp2 > $T/gpu_nosp2.out || return 1
    timeout 600 $MPIRUN -np 2 build/train_gpu "${b[@]}" --set parallel.sp=true --set log.dir=$T/gpu_sp2 > $T/gpu_sp2.out || return 1
    grep "^memory (measured)" $T/gpu_nosp2.out $T/gpu_sp2.out
    python3 tests/compare_logs.py $T/gpu_sp2/log.jsonl $T/gpu_nosp2/log.jsonl --key loss --rtol 1e-2 || return 1
    python3 - $T/gpu_nosp2.out $T/gpu_sp2.out <<'PY' || return 1
import re, sys
act = [float(re.search(r"activations ([0-9.]+) MiB", open(p).read()).group(1)) for p in sys.argv[1:]]
print("activations per rank: %.1f MiB without sp, %.1f MiB with sp" % tuple(act))
sys.exit(0 if act[1] < 0.95 * act[0] else 1)
PY
    local ngpu backends=(mpi)
    ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
    [ "$ngpu" -ge 2 ] && backends+=(nccl)
    for be in "${backends[@]}"; do
        for ov in false true; do
            timeout 600 $MPIRUN -np 2 build/train_gpu "${b[@]}" --set parallel.sp=true --set compress.method=taco \
                --set comm.sp_chunks=4 --set comm.overlap=$ov --set comm.backend=$be --set log.dir=$T/gpu_sp_${be}_$ov \
                > $T/gpu_sp_${be}_$ov.out || return 1
        done
        # two ranks on one GPU over IPC (the mpi backend's auto transport): overlap is warned about
        if [ "$be" = mpi ] && [ "$ngpu" -lt 2 ]; then
            grep -q "^warning: comm.overlap with ranks sharing a GPU" $T/gpu_sp_mpi_true.out || return 1
            grep -q "^warning: comm.overlap" $T/gpu_sp_mpi_false.out && return 1
        fi
        python3 tests/compare_logs.py $T/gpu_sp_${be}_true/log.jsonl $T/gpu_sp_${be}_false/log.jsonl --exact || return 1
        python3 tests/compare_logs.py $T/gpu_sp_${be}_true/log.jsonl $T/gpu_sp_${be}_false/log.jsonl --key grad_norm --exact || return 1
        python3 tests/compare_logs.py $T/gpu_sp_${be}_true/log.jsonl $T/gpu_sp_mpi_true/log.jsonl --exact || return 1
    done
}

# train.cuda_graph (on by default at one rank): the step captured after a warm-up step and replayed
# gives the eager step's losses, gradient norms and validation losses bit for bit over 20 steps,
# with evaluation, sampling and checkpoints between the replays; a checkpoint resumes with the
# graph on, bit for bit (the step after the resume is the warm-up, the next one is captured); a
# diverging run stops with the eager run's message and no checkpoint of its step
t_gpu_cuda_graph() {
    local extra=(--set parallel.tp=1 --set train.steps=20 --set train.eval_every=10 --set train.eval_batches=2
                 --set train.sample_every=10 --set train.sample_len=8)
    local arch d k
    for arch in gpt2 qwen2; do
        local cfg=("${GPT[@]}")
        [ $arch = qwen2 ] && cfg=("${QWEN[@]}")
        d=$T/graph_$arch
        timeout 600 $MPIRUN -np 1 build/train_gpu "${cfg[@]}" "${extra[@]}" --set train.cuda_graph=false \
            --set log.dir=${d}_off > ${d}_off.out || return 1
        timeout 600 $MPIRUN -np 1 build/train_gpu "${cfg[@]}" "${extra[@]}" --set checkpoint.every=10 \
            --set log.dir=${d}_on > ${d}_on.out || return 1
        grep "cuda_graph" ${d}_on.out
        grep -q "^train.cuda_graph: step 2 captured as one CUDA graph" ${d}_on.out || return 1
        grep -q "cuda_graph" ${d}_off.out && { echo "the run with train.cuda_graph=false used it"; return 1; }
        for k in loss grad_norm val_loss; do
            python3 tests/compare_logs.py ${d}_on/log.jsonl ${d}_off/log.jsonl --key $k --exact || return 1
        done
        rm -rf ${d}_on/ckpt/*00000020*
        timeout 600 $MPIRUN -np 1 build/train_gpu "${cfg[@]}" "${extra[@]}" --set checkpoint.every=10 \
            --set checkpoint.resume=true --set log.dir=${d}_on > ${d}_resume.out || return 1
        grep -q "resumed from .* at step 10" ${d}_resume.out || return 1
        grep -q "^train.cuda_graph: step 12 captured" ${d}_resume.out || return 1
        for k in loss grad_norm; do
            python3 tests/compare_logs.py ${d}_on/log.jsonl ${d}_off/log.jsonl --key $k --exact --from-step 11 || return 1
        done
    done
    local out rc step
    out=$(timeout 600 $MPIRUN -np 1 build/train_gpu "${GPT[@]}" --set parallel.tp=1 --set train.lr=1e30 \
          --set train.warmup_steps=0 --set checkpoint.every=1 --set log.dir=$T/graph_nan 2>&1); rc=$?
    echo "$out" | grep -v "^step"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a non-zero exit, got $rc"; return 1; }
    step=$(echo "$out" | sed -n 's/^error: non-finite [a-z ]* at step \([0-9]*\) .*Stopping before the update.*/\1/p' | head -1)
    [ -n "$step" ] || { echo "no 'non-finite ... at step N' message"; return 1; }
    [ ! -e "$T/graph_nan/ckpt/done_$(printf %08d "$step")" ] || { echo "a checkpoint of the failed step $step exists"; return 1; }
    echo "stopped at step $step, no checkpoint for it"
}

if [ "${1:-}" = graph ]; then  # only the tests of the sync-free step and its CUDA graph
    run test_ops_gpu build/gpu/test_ops_gpu
    run gpu_vs_cpu t_gpu_vs_cpu
    run gpu_cuda_graph t_gpu_cuda_graph
    summary
    exit
fi
if [ "${1:-}" = nccl ]; then  # only the NCCL backend's tests (a multi-GPU session's first command)
    source tests/test_nccl_gpu.sh
    summary
    exit
fi

echo "GPU tests"
run test_ops_gpu build/gpu/test_ops_gpu
run test_init_gpu build/gpu/test_init_gpu
run gpu_init_device t_gpu_init_device
run gpu_vs_cpu t_gpu_vs_cpu
run gpu_tp_equivalence t_gpu_tp
run gpu_determinism t_gpu_determinism
run gpu_cuda_graph t_gpu_cuda_graph
run gpu_taco_tracks_none t_gpu_taco
run gpu_sequence_parallel t_gpu_sp
run gpu_memory_refusal t_gpu_memory_refusal
run gpu_transports t_gpu_transports
run gpu_resume_delayed t_gpu_resume_delayed
# the stop tests of the CPU suite on the GPU build, ranks sharing the GPU (staged exchanges):
# SIGTERM/SIGINT/SIGUSR1 then a bit-identical resume; a SIGSTOPped rank caught by the watchdog
STOP_TRAIN=build/train_gpu
STOP_CFG=(configs/default.json --set model.n_layer=2 --set model.d_model=128 --set model.n_head=2 --set model.max_seq_len=64
          --set train.batch_size=4 --set train.seq_len=64 --set train.eval_every=0 --set train.sample_every=0
          --set parallel.tp=2 --set compress.method=none)
STOP_DIR=$T/stop; mkdir -p $STOP_DIR
source tests/test_stop.sh
run gpu_sigterm_resume t_sigterm_resume
run gpu_sigterm_mpirun t_sigterm_mpirun
run gpu_watchdog_stopped_rank t_watchdog_stopped_rank
run qwen2_gpu_vs_cpu t_qwen2_gpu_vs_cpu
run qwen2_gpu_tp t_qwen2_gpu_tp
for t in build/gpu/test_compress_gpu; do [ -x $t ] && run "$(basename $t)" $t; done
for p in 2 3 4; do [ -x build/gpu/test_coll_gpu ] && run "test_coll_gpu_np$p" $MPIRUN -np $p build/gpu/test_coll_gpu; done
source tests/test_nccl_gpu.sh
summary
