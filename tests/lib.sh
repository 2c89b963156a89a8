# tests/lib.sh - the test runner's shared pieces, sourced by run_tests.sh and
# run_tests_gpu.sh: MPI settings for root and oversubscription, and `run`.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --oversubscribe"
pass=0; fail=0; failed=()
mkdir -p "$LOGDIR"

# run NAME COMMAND... : one test, its output in $LOGDIR/NAME.log, one line of
# verdict; a failure shows the log's last lines. Plain commands get a time
# limit (a hang is a failure); shell functions bound their own mpiruns.
run() {
    local name=$1; shift
    local t0=$SECONDS
    local to="timeout ${TEST_TIMEOUT:-600}"
    declare -F "$1" > /dev/null && to=""
    if $to "$@" > "$LOGDIR/$name.log" 2>&1; then
        printf "  PASS  %-34s (%ds)\n" "$name" $((SECONDS - t0)); pass=$((pass + 1))
    else
        printf "  FAIL  %-34s (%ds) -- last lines of %s:\n" "$name" $((SECONDS - t0)) "$LOGDIR/$name.log"
        tail -n 25 "$LOGDIR/$name.log" | sed 's/^/        /'
        fail=$((fail + 1)); failed+=("$name")
    fi
}

# summary: the verdict of the whole suite (exit status 1 on any failure)
summary() {
    echo "----"
    echo "$pass passed, $fail failed"
    [ $fail -eq 0 ] || { echo "failed: ${failed[*]}"; return 1; }
}
