#!/usr/bin/env bash
# tests/run_tests_gpu.sh - the CUDA tests (make test-gpu), on a machine with a GPU.
#
#   test_ops_gpu        every CUDA op against the fp32 CPU op on the same inputs
#   gpu_vs_cpu          build/train_gpu vs build/train: same weights and batches,
#                       10 steps track within bf16 tolerance
#   gpu_tp_equivalence  TP=1 vs TP=2 (two ranks sharing the GPU)
#   gpu_determinism     two identical GPU runs give bit-identical losses
#   test_init_gpu       the device weight init: TP degrees bit-identical, distribution rules
#   gpu_memory_refusal  a model that cannot fit the GPU: one error before allocating
#   gpu_init_device     model.init=device end to end: TP=1 and TP=2 track; "auto" picks the
#                       device for a GPT-2 350M-shaped model
#   (and the compression kernels' tests when they are built)
#   gpu_transports      comm.transport ipc (two ranks sharing the GPU) trains to the staged
#                       transport's bits: none and taco (delayed scale), two-shot and one-shot
#   gpu_resume_delayed  taco with delayed scaling, the history on the device: a resume from a
#                       checkpoint repeats the uninterrupted run bit for bit
#   test_coll_gpu       the device collectives (staged, IPC) against the host ones at 2, 3, 4 ranks
#   the NCCL backend (tests/test_nccl_gpu.sh): with 2+ GPUs bit-identical to MPI
# `tests/run_tests_gpu.sh nccl` runs only the NCCL part.
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
t_gpu_vs_cpu() {
    timeout 600 $MPIRUN -np 1 build/train "${GPT[@]}" --set parallel.tp=1 --set log.dir=$T/cpu || return 1
    timeout 600 $MPIRUN -np 1 build/train_gpu "${GPT[@]}" --set parallel.tp=1 --set log.dir=$T/gpu || return 1
    python3 tests/compare_logs.py $T/gpu/log.jsonl $T/cpu/log.jsonl --key loss --rtol 1e-2 || return 1
    python3 tests/compare_logs.py $T/gpu/log.jsonl $T/cpu/log.jsonl --key grad_norm --rtol 5e-2
}

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
        for shape in two_shot one_shot; do
            d=$T/tr_${m}_$shape
            local cfg=(--set compress.method=$m --set compress.scale=delayed --set comm.allreduce=$shape)
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
# when saved, back when loaded), or the resumed steps would scale differently
t_gpu_resume_delayed() {
    local base=("${GPT[@]}" --set parallel.tp=2 --set train.steps=20 --set compress.method=taco --set compress.scale=delayed)
    timeout 600 $MPIRUN -np 2 build/train_gpu "${base[@]}" --set log.dir=$T/rd_full > /dev/null || return 1
    timeout 600 $MPIRUN -np 2 build/train_gpu "${base[@]}" --set log.dir=$T/rd_part --set checkpoint.every=10 > /dev/null || return 1
    rm -f $T/rd_part/ckpt/*00000020*
    timeout 600 $MPIRUN -np 2 build/train_gpu "${base[@]}" --set log.dir=$T/rd_part --set checkpoint.resume=true \
        > $T/rd_resume.out || return 1
    grep -q "resumed from .* at step 10" $T/rd_resume.out || return 1
    python3 tests/compare_logs.py $T/rd_part/log.jsonl $T/rd_full/log.jsonl --exact --from-step 11 || return 1
    python3 tests/compare_logs.py $T/rd_part/log.jsonl $T/rd_full/log.jsonl --key grad_norm --exact --from-step 11
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
run gpu_taco_tracks_none t_gpu_taco
run gpu_memory_refusal t_gpu_memory_refusal
run gpu_transports t_gpu_transports
run gpu_resume_delayed t_gpu_resume_delayed
for t in build/gpu/test_compress_gpu; do [ -x $t ] && run "$(basename $t)" $t; done
for p in 2 3 4; do [ -x build/gpu/test_coll_gpu ] && run "test_coll_gpu_np$p" $MPIRUN -np $p build/gpu/test_coll_gpu; done
source tests/test_nccl_gpu.sh
summary
