# tests/test_reliability.sh - the failure classes of a training run, end to end on
# build/train: checksummed checkpoints, checked writes, rotation, the log
# on resume, the messages, a stop on SIGTERM / SIGINT / SIGUSR1 (to a rank and to mpirun), the watchdog on a stopped
# rank, the memory check and the size checks. Sourced by tests/run_tests.sh
# after tests/test_train.sh (lib.sh provides `run`, $MPIRUN and $LOGDIR).
#
# Each test can fail: it checks the exit status, the message (naming the
# file or key) and the state left on disk, not only that something ran.

R=build/test-reliability
rm -rf "$R"; mkdir -p "$R"
RUN="timeout 300 $MPIRUN"
TINY=(configs/default.json --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.max_seq_len=32
      --set train.batch_size=4 --set train.seq_len=32 --set train.eval_every=0 --set train.sample_every=0
      --set parallel.tp=2 --set compress.method=none)

# expect_fail PATTERN ARGS... : a 2-rank run that must fail with PATTERN in
# its output, within 60 s, and before any training step when NOSTEP=1
expect_fail() {
    local pat=$1; shift
    local out rc
    out=$(timeout 60 $MPIRUN -np 2 build/train "$@" 2>&1); rc=$?
    if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then echo "expected a failure (rc=$rc): $*"; echo "$out" | tail -5; return 1; fi
    echo "$out" | grep -q -- "$pat" || { echo "expected '$pat' in:"; echo "$out" | grep -v "^step" | head -20; return 1; }
    if [ "${NOSTEP:-0}" = 1 ] && echo "$out" | grep -q "^step "; then echo "training ran before the error: $*"; return 1; fi
    echo "ok: $pat"
}

# overwrite 4 bytes of FILE at OFFSET with the float32 VALUE (nan allowed)
poke_f32() { python3 -c "import struct,sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); f.write(struct.pack('<f', float(sys.argv[3])))" "$@"; }
poke_i32() { python3 -c "import struct,sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); f.write(struct.pack('<i', int(sys.argv[3])))" "$@"; }
poke_i64() { python3 -c "import struct,sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); f.write(struct.pack('<q', int(sys.argv[3])))" "$@"; }

# every corruption of a checkpoint is one error naming the file and the older checkpoint
t_checkpoint_checksums() {
    local d=$R/ck c=$R/ck/ckpt
    $RUN -np 2 build/train "${TINY[@]}" --set train.steps=20 --set checkpoint.every=10 --set log.dir=$d > /dev/null || return 1
    cp -a $c $R/ck_orig
    restore() { rm -rf $c; cp -a $R/ck_orig $c; }
    local res=("${TINY[@]}" --set train.steps=40 --set log.dir=$d --set checkpoint.resume=true)
    export NOSTEP=1
    poke_f32 $c/model_00000020.bin 5000 0.5                          # one weight changed
    expect_fail "model_00000020.bin fails its checksum" "${res[@]}" || return 1
    expect_fail "An older complete checkpoint exists: step 10" "${res[@]}" || return 1
    restore
    poke_f32 $c/state_00000020_r1.bin 200 0.25                       # an Adam moment overwritten
    expect_fail "state_00000020_r1.bin fails its checksum" "${res[@]}" || return 1
    restore
    poke_i64 $c/state_00000020_r0.bin 48 128                         # a valid-looking data position
    expect_fail "state_00000020_r0.bin fails its checksum" "${res[@]}" || return 1
    restore
    : > $c/done_00000030                                             # a stray marker
    expect_fail "checkpoint 30 is incomplete: missing $c/model_00000030.bin" "${res[@]}" || return 1
    restore
    poke_i32 $c/model_00000020.bin 32 0                              # no checksum (as llm.c writes it) ...
    poke_f32 $c/model_00000020.bin $((1024 + 4 * 1000)) nan          # ... and a NaN weight
    expect_fail "model_00000020.bin holds a non-finite weight at tensor wte, element 1000 (nan)" "${res[@]}" || return 1
    expect_fail "model.init_from: .*non-finite weight at tensor wte, element 1000" "${TINY[@]}" --set log.dir=$R/ck_init \
        --set model.init_from=$c/model_00000020.bin || return 1
    unset NOSTEP
    restore
    # a model file without a checksum (llm.c's) loads, with a note; training proceeds
    cp $c/model_00000020.bin $R/llmc.bin
    poke_i32 $R/llmc.bin 32 0
    local out
    out=$($RUN -np 2 build/train "${TINY[@]}" --set train.steps=2 --set log.dir=$R/ck_llmc --set model.init_from=$R/llmc.bin 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep -q "note: $R/llmc.bin has no checksum" || { echo "no note for a file without checksum"; return 1; }
    # the intact checkpoint resumes; asking for fewer steps than it holds says there is nothing to do
    $RUN -np 2 build/train "${res[@]}" > $R/ck_resume.out 2>&1 || return 1
    grep -q "resumed from $c at step 20" $R/ck_resume.out || return 1
    out=$($RUN -np 2 build/train "${TINY[@]}" --set train.steps=15 --set log.dir=$d --set checkpoint.resume=true 2>&1) || { echo "rc $?"; return 1; }
    echo "$out" | grep -q "nothing to do: the newest checkpoint in $c is at step 20 and train.steps is 15" || { echo "$out"; return 1; }
    echo "$out" | grep -q "^step " && { echo "trained although there was nothing to do"; return 1; }
    echo "all corruptions found"
}

# checkpoint.keep: 2 keeps the newest two; the log after a resume has each step once
t_checkpoint_keep_and_log() {
    local d=$R/keep
    $RUN -np 2 build/train "${TINY[@]}" --set train.steps=20 --set checkpoint.every=5 --set checkpoint.keep=2 \
        --set log.dir=$d > /dev/null || return 1
    local left
    left=$(cd $d/ckpt && ls | tr '\n' ' ')
    [ "$left" = "done_00000015 done_00000020 model_00000015.bin model_00000020.bin state_00000015_r0.bin state_00000015_r1.bin state_00000020_r0.bin state_00000020_r1.bin " ] \
        || { echo "after rotation: $left"; return 1; }
    # a crash after step 20 whose last checkpoint is 15, with a line cut mid-way
    rm -f $d/ckpt/*00000020*
    printf '{"step":21,"loss":4.1' >> $d/log.jsonl
    $RUN -np 2 build/train "${TINY[@]}" --set train.steps=20 --set checkpoint.every=5 --set checkpoint.keep=2 \
        --set log.dir=$d --set checkpoint.resume=true > /dev/null || return 1
    $RUN -np 2 build/train "${TINY[@]}" --set train.steps=20 --set log.dir=$R/keep_ref > /dev/null || return 1
    python3 - $d/log.jsonl $R/keep_ref/log.jsonl <<'PY' || return 1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]          # every line must parse: the cut line is gone
ref = [json.loads(l) for l in open(sys.argv[2])]
steps = [r["step"] for r in rows]
print("steps in the resumed log:", steps)
assert steps == [r["step"] for r in ref], "each step once, in order"
assert all(a["loss"] == b["loss"] for a, b in zip(rows, ref)), "losses equal the uninterrupted run"
PY
}

# unwritable output directories are found before training; the message names the key
t_unwritable_dirs() {
    : > $R/afile
    NOSTEP=1 expect_fail "checkpoint.dir $R/afile/ckpt is not writable" "${TINY[@]}" --set log.dir=$R/uw \
        --set checkpoint.dir=$R/afile/ckpt || return 1
    NOSTEP=1 expect_fail "log.dir $R/afile/log is not writable" "${TINY[@]}" --set log.dir=$R/afile/log \
        --set checkpoint.dir=$R/uw_ckpt || return 1
}

# a full disk: the failed checkpoint leaves no partial file and the previous
# one intact (it resumes); a full log.dir is an error, not a silent cut
t_full_disk() {
    local disk=$R/disk
    mkdir -p $disk
    mount -t tmpfs -o size=1600k tmpfs $disk || return 1
    local out rc
    out=$($RUN -np 2 build/train "${TINY[@]}" --set train.steps=30 --set checkpoint.every=10 --set log.dir=$R/fd \
          --set checkpoint.dir=$disk/ckpt 2>&1); rc=$?
    echo "$out" | grep -v "^step"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a failure, rc=$rc"; umount $disk; return 1; }
    echo "$out" | grep -q "No space left on device.*checkpoint 20 was not written and its partial files were removed" \
        || { echo "no disk-full message"; umount $disk; return 1; }
    local left
    left=$(cd $disk/ckpt && ls | tr '\n' ' ')
    [ "$left" = "done_00000010 model_00000010.bin state_00000010_r0.bin state_00000010_r1.bin " ] \
        || { echo "left on the full disk: $left"; umount $disk; return 1; }
    $RUN -np 2 build/train "${TINY[@]}" --set train.steps=12 --set log.dir=$R/fd --set checkpoint.dir=$disk/ckpt \
        --set checkpoint.resume=true > $R/fd_resume.out 2>&1 || { cat $R/fd_resume.out; umount $disk; return 1; }
    grep -q "resumed from $disk/ckpt at step 10" $R/fd_resume.out || { umount $disk; return 1; }
    umount $disk
    # log.dir on 16 KB: config.json fits, the log fills up during training
    mount -t tmpfs -o size=16k tmpfs $disk || return 1
    out=$($RUN -np 2 build/train "${TINY[@]}" --set train.steps=400 --set log.dir=$disk/log 2>&1); rc=$?
    umount $disk
    echo "$out" | grep -v "^step" | tail -3
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a failure, rc=$rc"; return 1; }
    echo "$out" | grep -q "error: log.dir: writing $disk/log/log.jsonl failed: No space left on device" \
        || { echo "no log-full message"; return 1; }
}

# sizes: a model beyond memory is refused before allocation; int overflow is refused with the key
t_memory_and_sizes() {
    export NOSTEP=1
    expect_fail "out of memory before the start: the 2 ranks on this node need an estimated" "${TINY[@]}" \
        --set model.d_model=16384 --set model.n_layer=48 --set model.n_head=16 --set log.dir=$R/mem || return 1
    expect_fail "model.d_model = 536870912 is too large" "${TINY[@]}" --set model.d_model=536870912 \
        --set model.n_head=2 --set log.dir=$R/mem || return 1
    unset NOSTEP
    local out
    out=$($RUN -np 2 build/train "${TINY[@]}" --set train.steps=1 --set log.dir=$R/mem_ok 2>&1) || return 1
    echo "$out" | grep "^memory (estimate, rank 0): host [0-9.]* GiB" || { echo "no estimate printed"; return 1; }
}

run checkpoint_checksums t_checkpoint_checksums
run checkpoint_keep_and_log t_checkpoint_keep_and_log
run unwritable_dirs t_unwritable_dirs
if mkdir -p $R/probe_mount && mount -t tmpfs -o size=4k tmpfs $R/probe_mount 2> $R/mount.err; then
    umount $R/probe_mount
    run full_disk t_full_disk  # (indented: inside the mount probe)
else
    printf "  SKIP  %-34s (mount -t tmpfs is not permitted here: %s)\n" full_disk "$(head -c 120 $R/mount.err)"
fi
# the stop tests (tests/test_stop.sh) on the CPU build
STOP_TRAIN=build/train
STOP_CFG=("${TINY[@]}")
STOP_DIR=$R
source tests/test_stop.sh
run sigterm_resume t_sigterm_resume
run sigterm_mpirun t_sigterm_mpirun
run watchdog_stopped_rank t_watchdog_stopped_rank
run memory_and_sizes t_memory_and_sizes
