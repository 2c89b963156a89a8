#!/usr/bin/env bash
# tests/run_tests.sh - every CPU test: the layering rule (tools/check_layers.py),
# unit tests, multi-rank tests under mpirun, and end-to-end trainer tests
# (tests/test_train.sh, tests/test_reliability.sh). Called by
# `make test`; prints one line per test and a summary, exits 1 on failure.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
LOGDIR=build/test-logs
source tests/lib.sh

echo "layering"
run check_layers python3 tools/check_layers.py
echo "unit tests"
for t in test_fp8 test_hadamard test_compress test_ops test_ops_grad test_ops_qwen2 test_data test_config test_params test_safetensors; do
    run "$t" "build/$t"
done
# a norm forward while a norm backward's column sums are pending (no
# norm_backward_finish) must stop with an error that names the fix
norm_sums_pending_is_fatal() {
    local o=$LOGDIR/norm_sums_pending.out
    ! build/emu/test_ops_gpu_emu --pending-sums > "$o" 2>&1 && grep -q "norm_backward_finish" "$o" && cat "$o"
}
if [ -d "${CUDA_HOME:-/usr/local/cuda}/include" ]; then
    # the CUDA code run thread by thread under the CPU emulator of the GPU
    # (tests/emu, built by tests/emu/emu.mk): catches indexing, barrier,
    # divergence, layout and exactness bugs without a GPU. The model's ops,
    # the compression kernels (bit for bit vs the CPU), the device collectives
    # (MPI, and NCCL emulated over MPI by tests/emu/nccl_emu.c)
    echo "CUDA kernels under CPU emulation"
    run build_cuda_emulation make -s -j"$(nproc)" -f tests/emu/emu.mk
    OMP_NUM_THREADS=2 run test_ops_gpu_emulated build/emu/test_ops_gpu_emu
    run norm_sums_pending_is_fatal norm_sums_pending_is_fatal
    run test_compress_gpu_emulated build/emu/test_compress_gpu_emu --quick
    run test_coll_gpu_emulated_np2 $MPIRUN -np 2 build/emu/test_coll_gpu_emu --quick
    run test_coll_gpu_emulated_nccl_np3 $MPIRUN -np 3 build/emu/test_coll_gpu_emu --quick --nccl
    run test_coll_gpu_emulated_ipc_np4 $MPIRUN -np 4 build/emu/test_coll_gpu_emu --quick --ipc
fi
echo "multi-rank tests"
for p in 2 3 4; do run "test_collectives_np$p" $MPIRUN -np $p build/test_collectives; done
for p in 1 2 4; do run "test_gpt_np$p" $MPIRUN -np $p build/test_gpt; done
echo "trainer tests"
source tests/test_train.sh
echo "qwen2 trainer tests"
source tests/test_qwen2.sh
echo "sequence-parallel trainer tests"
source tests/test_sp.sh
echo "reliability tests"
source tests/test_reliability.sh
echo "tools tests"
run test_tools tests/test_tools.sh

summary
