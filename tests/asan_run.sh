#!/usr/bin/env bash
# tests/asan_run.sh - a short TP=2 taco run with a checkpoint and a resume
# under build/asan/train (make asan: ASan + UBSan), and a corrupted
# checkpoint refused under it. Passes only with zero sanitizer reports:
# ASan stops at the first error, UBSan is built with -fno-sanitize-recover,
# LeakSanitizer runs at exit with tests/asan/lsan.supp (Open MPI's own
# allocations only). Used by .ci/run; takes about a minute on 2 cores.
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:abort_on_error=0:exitcode=66:detect_stack_use_after_return=0
export LSAN_OPTIONS=suppressions=$PWD/tests/asan/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=66
D=build/asan-run
rm -rf $D; mkdir -p $D
A=(configs/default.json --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.max_seq_len=32
   --set train.batch_size=4 --set train.seq_len=32 --set train.eval_every=5 --set train.eval_batches=2
   --set train.sample_every=10 --set train.sample_len=8 --set parallel.tp=2 --set compress.method=taco
   --set compress.group_size=auto --set compress.calib_steps=3 --set checkpoint.every=5 --set log.dir=$D/run)
fail=0
step() {  # step NAME EXPECTED_RC ARGS...
    local name=$1 want=$2; shift 2
    timeout 600 mpirun --oversubscribe -np 2 build/asan/train "$@" > $D/$name.log 2>&1
    local rc=$?
    if grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: .*Sanitizer" $D/$name.log; then
        echo "FAIL $name: sanitizer report"; grep -E -A 12 "ERROR: |runtime error:" $D/$name.log | head -40; fail=1
    elif [ "$want" = 0 ] && [ $rc -ne 0 ]; then echo "FAIL $name: rc $rc"; tail -20 $D/$name.log; fail=1
    elif [ "$want" = 1 ] && { [ $rc -eq 0 ] || [ $rc -eq 66 ] || [ $rc -eq 124 ]; }; then echo "FAIL $name: rc $rc"; fail=1
    else echo "ok   $name (rc $rc, no sanitizer report)"; fi
}
step train 0 "${A[@]}" --set train.steps=10
rm -f $D/run/ckpt/*00000010*                         # resume from step 5
step resume 0 "${A[@]}" --set train.steps=10 --set checkpoint.resume=true
grep -q "resumed from .* at step 5" $D/resume.log || { echo "FAIL resume: did not resume"; fail=1; }
python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(3000); f.write(b'\x01\x02\x03\x04')" $D/run/ckpt/model_00000010.bin
step corrupt 1 "${A[@]}" --set train.steps=20 --set checkpoint.resume=true
grep -q "fails its checksum" $D/corrupt.log || { echo "FAIL corrupt: no checksum error"; fail=1; }
exit $fail
