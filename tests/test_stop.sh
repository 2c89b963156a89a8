# tests/test_stop.sh - stopping a run from outside, end to end: SIGTERM, SIGINT and
# SIGUSR1 (a checkpoint at an agreed step, then a bit-identical resume) and SIGSTOP
# on one rank (the watchdog names the step, the site and the stopped peer, and ends
# the job). Sourced by tests/test_reliability.sh for the CPU build and by
# tests/run_tests_gpu.sh for the GPU build, after setting:
#   STOP_TRAIN  the binary (build/train or build/train_gpu)
#   STOP_CFG    an array: the config and --set options of a small TP=2 run
#   STOP_DIR    a scratch directory
# lib.sh provides $MPIRUN; RUN bounds every mpirun.
RUN=${RUN:-"timeout 300 $MPIRUN"}

# the pid of the rank with world rank $2 among the children of mpirun under `timeout` pid $1
rank_pid() {
    local mp p
    mp=$(ps --ppid "$1" -o pid= | head -1 | tr -d ' ')
    for p in $(ps --ppid "$mp" -o pid=); do
        tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo $p; return; }
    done
}
mpirun_pid() { ps --ppid "$1" -o pid= | head -1 | tr -d ' '; }
# wait until log $1 has at least $2 lines (at most 60 s)
wait_lines() { local i; for i in $(seq 600); do [ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ] && return 0; sleep 0.1; done; return 1; }

# SIGTERM, SIGINT and SIGUSR1 to a rank: every rank stops after the same step with a
# checkpoint; the resumed run equals an uninterrupted one bit for bit
t_sigterm_resume() {
    local base=("${STOP_CFG[@]}" --set train.steps=300 --set compress.method=taco --set compress.scale=delayed)
    $RUN -np 2 $STOP_TRAIN "${base[@]}" --set log.dir=$STOP_DIR/sig_ref > /dev/null || return 1
    local sig
    for sig in TERM INT USR1; do
        local d=$STOP_DIR/sig_rank_$sig
        $RUN -np 2 $STOP_TRAIN "${base[@]}" --set log.dir=$d > $d.out 2>&1 &
        local job=$!
        wait_lines $d/log.jsonl 20 || { echo "the run did not start"; kill $job; return 1; }
        local pid
        pid=$(rank_pid $job 1)
        [ -n "$pid" ] || { echo "no pid for rank 1"; kill $job; return 1; }
        kill -$sig "$pid"
        wait $job || { echo "rc $? after SIG$sig to a rank"; cat $d.out; return 1; }
        local step
        step=$(stop_step $d.out $sig 300) || return 1
        [ "$step" -lt 300 ] || { echo "the signal came too late to test anything"; return 1; }
        $RUN -np 2 $STOP_TRAIN "${base[@]}" --set log.dir=$d --set checkpoint.resume=true > $d.resume.out 2>&1 || return 1
        grep -q "resumed from $d/ckpt at step $step" $d.resume.out || return 1
        python3 tests/compare_logs.py $d/log.jsonl $STOP_DIR/sig_ref/log.jsonl --exact || return 1
        python3 -c "import sys; n=sum(1 for _ in open(sys.argv[1])); sys.exit(0 if n == 300 else 1)" $d/log.jsonl \
            || { echo "the log does not hold 300 steps once each"; return 1; }
        echo "SIG$sig to a rank: stopped after step $step, resumed bit-identically"
    done
}

# the step named by "stopped by SIG$2 after step N of $3; ..." in output $1, once its checkpoint exists
stop_step() {
    local step d=${1%.out}
    step=$(sed -n "s/^stopped by SIG$2 after step \([0-9]*\) of $3; checkpoint written to .*resume=true\$/\1/p" $1)
    [ -n "$step" ] || { echo "no stop message:" >&2; grep -v "^step" $1 >&2; return 1; }
    [ -e $d/ckpt/done_$(printf %08d $step) ] || { echo "no checkpoint of step $step" >&2; return 1; }
    echo $step
}

# SIGTERM to mpirun. Open MPI 4.1's mpirun does not forward it: it stops reading the ranks'
# output, sends them SIGCONT, SIGTERM odls_base_sigkill_timeout seconds later (default 1)
# and SIGKILL as long again after that, so the checkpoint must fit in that window
# (README.md says how to widen it) and the ranks must not block on the output nobody reads.
# The stop message may be lost with that output; the checkpoint and the log name the step.
# The run is long enough that the SIGTERM, 3 s after mpirun's, finds it running.
t_sigterm_mpirun() {
    local d=$STOP_DIR/sig_mpirun
    local cfg=("${STOP_CFG[@]}" --set train.steps=100000 --set log.dir=$d)
    $RUN --mca odls_base_sigkill_timeout 3 -np 2 $STOP_TRAIN "${cfg[@]}" > $d.out 2>&1 &
    local job=$!
    wait_lines $d/log.jsonl 20 || { echo "the run did not start"; kill $job; return 1; }
    local pid
    pid=$(mpirun_pid $job)
    [ -n "$pid" ] || { echo "no pid for mpirun"; kill $job; return 1; }
    kill -TERM "$pid"
    wait $job
    local rc=$? step
    # mpirun exits 1 after a signal of its own
    [ $rc -eq 1 ] || { echo "mpirun exited $rc"; grep -v "^step" $d.out; return 1; }
    step=$(ls $d/ckpt 2> /dev/null | sed -n 's/^done_0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1)
    [ -n "$step" ] || { echo "no checkpoint:"; grep -v "^step" $d.out; return 1; }
    [ "$(wc -l < $d/log.jsonl)" -eq "$step" ] || { echo "log.jsonl does not end at the checkpoint's step $step"; return 1; }
    if grep -q "^stopped by" $d.out; then
        grep -q "^stopped by SIGTERM after step $step of 100000; checkpoint written to" $d.out \
            || { echo "the stop message names another step than $step:"; grep "^stopped" $d.out; return 1; }
    fi
    $RUN -np 2 $STOP_TRAIN "${cfg[@]}" --set checkpoint.resume=true > $d.resume.out 2>&1 &
    job=$!
    wait_lines $d/log.jsonl $((step + 5)) || { echo "the resumed run did not go on"; kill $job; return 1; }
    grep -q "resumed from $d/ckpt at step $step" $d.resume.out || { echo "no resume message"; kill $job; return 1; }
    pid=$(rank_pid $job 0)
    kill -TERM "$pid"
    wait $job || { echo "the resumed run did not stop on SIGTERM"; return 1; }
    echo "SIGTERM to mpirun: stopped after step $step (message $(grep -c '^stopped by' $d.out) time(s) on stdout), the checkpoint resumes"
}

# a stopped rank: the ranks still running name the step, the site and the
# rank they wait on, and the job ends within timeout + grace + a few seconds
t_watchdog_stopped_rank() {
    local d=$STOP_DIR/wd
    $RUN -np 4 $STOP_TRAIN "${STOP_CFG[@]}" --set parallel.dp=2 --set train.steps=100000 --set comm.timeout_s=4 \
        --set log.dir=$d > $d.out 2>&1 &
    local job=$!
    wait_lines $d/log.jsonl 10 || { echo "the run did not start"; kill $job; return 1; }
    local pid
    pid=$(rank_pid $job 3)
    [ -n "$pid" ] || { echo "no pid for rank 3"; kill $job; return 1; }
    local t0=$SECONDS
    kill -STOP "$pid"
    wait $job
    local rc=$? took=$((SECONDS - t0))
    kill -CONT "$pid" 2> /dev/null; kill -KILL "$pid" 2> /dev/null
    grep "watchdog" $d.out
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected the job to abort, rc=$rc"; return 1; }
    [ $took -le 14 ] || { echo "took $took s to end (timeout 4 s)"; return 1; }
    grep -q "^\[rank 2\] error: watchdog: step [0-9]*, .*has not completed after 4 s.*Waiting on world rank 3 (no answer" $d.out \
        || { echo "rank 2 (rank 3's TP peer) did not name rank 3"; return 1; }
    [ "$(grep -c "error: watchdog: step" $d.out)" -ge 2 ] || { echo "fewer than 2 ranks reported"; return 1; }
    echo "ended $took s after SIGSTOP"
}

