# tests/test_sp.sh - end-to-end tests of sequence parallelism (parallel.sp)
# through build/train, sourced by tests/run_tests.sh after tests/test_train.sh
# and tests/test_qwen2.sh (their runs $T/tp2, $T/tp4, $T/tp2dp2, $T/q_tp2 are
# the non-sp references; T, TRAIN, SMALL, QWEN come from them).
#
# Tolerance of sp vs non-sp on the exact path: rel 1e-5 on the loss, 1e-4 on
# the gradient norm, as TP=P vs TP=1. Every row's arithmetic is the same in
# both layouts (the same rank-order sums, per-row norms), but the gradients
# of the replicated tensors (norms, row-parallel biases, wpe) are summed over
# a rank's N/P rows and then over the ranks instead of over N rows in one
# pass: the same fp32 additions in another order, so the last bits may
# differ and 20 steps of AdamW carry that into the loss at ~1e-7 relative.

SPB=(configs/default.json "${SMALL[@]}" --set train.steps=20 --set compress.method=none --set parallel.sp=true)

# the exact path: the losses of the non-sp runs at TP=2, 4 and DP=2 x TP=2, and
# the bytes of the two-shot all-reduce: at TP=2 those of the default one-shot
# too, while at TP=4 the default takes one-shot for these small tensors,
# which sends P - 1 = 3 tensors per rank against two-shot's 2 (P - 1) / P = 1.5
t_sp_equivalence() {
    $TRAIN -np 2 build/train "${SPB[@]}" --set parallel.tp=2 --set log.dir=$T/sp2 || return 1
    $TRAIN -np 4 build/train "${SPB[@]}" --set parallel.tp=4 --set log.dir=$T/sp4 || return 1
    $TRAIN -np 4 build/train "${SPB[@]}" --set parallel.tp=2 --set parallel.dp=2 --set log.dir=$T/sp2dp2 || return 1
    for r in 2 4 2dp2; do
        python3 tests/compare_logs.py $T/sp$r/log.jsonl $T/tp$r/log.jsonl --rtol 1e-5 || return 1
        python3 tests/compare_logs.py $T/sp$r/log.jsonl $T/tp$r/log.jsonl --key grad_norm --rtol 1e-4 || return 1
        if [ $r = 4 ]; then lo=0.499 hi=0.501; else lo=0.999 hi=1.001; fi
        python3 tests/compare_logs.py $T/sp$r/log.jsonl $T/tp$r/log.jsonl --ratio comm_bytes $lo $hi || return 1
    done
    # one piece per rank (contiguous rows, the default without overlap) or four: the same bits
    $TRAIN -np 2 build/train "${SPB[@]}" --set parallel.tp=2 --set comm.sp_chunks=4 --set log.dir=$T/sp2k4 || return 1
    python3 tests/compare_logs.py $T/sp2k4/log.jsonl $T/sp2/log.jsonl --exact || return 1
    # qwen2 (RMSNorm, no positions, untied head) against its non-sp run of tests/test_qwen2.sh
    $TRAIN -np 2 build/train "${SPB[@]}" "${QWEN[@]}" --set train.steps=10 --set parallel.tp=2 --set log.dir=$T/q_sp2 || return 1
    python3 tests/compare_logs.py $T/q_sp2/log.jsonl $T/q_tp2/log.jsonl --rtol 1e-5
}

# taco with sp tracks the exact sp run, with the bytes of taco without sp; the
# sp sites log their statistics under their own names
t_sp_taco() {
    local b=("${SPB[@]}" --set parallel.tp=2 --set compress.method=taco --set compress.stats_every=5)
    $TRAIN -np 2 build/train "${b[@]}" --set log.dir=$T/sp2taco || return 1
    $TRAIN -np 2 build/train "${b[@]}" --set parallel.sp=false --set log.dir=$T/tp2taco || return 1
    python3 tests/compare_logs.py $T/sp2taco/log.jsonl $T/sp2/log.jsonl --key loss --rtol 0.02 || return 1
    python3 tests/compare_logs.py $T/sp2taco/log.jsonl $T/tp2taco/log.jsonl --ratio comm_bytes 0.97 1.03 || return 1
    python3 - $T/sp2taco/log.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"sites"' in l]
sites = rows[-1]["sites"]
want = ["embed.rs", "L0.attn.ag", "L1.mlp.rs", "L0.attn.ag.bwd", "L1.mlp.rs.bwd", "lm_head.ag", "lm_head.ag.bwd", "embed.rs.bwd"]
missing = [w for w in want if w not in sites]
assert not missing and len(sites) == 8 * 2 + 4, (missing, sorted(sites))
assert all(s["method"] == "taco" and 0 < s["rel_err"] < 0.1 for s in sites.values()), sites
print("%d sp sites, rel_err %.3g..%.3g" % (len(sites), min(s["rel_err"] for s in sites.values()),
                                         max(s["rel_err"] for s in sites.values())))
PY
}

# compress.method=auto and the dumps with sp: the trials run on the row
# exchanges (none compress under an impossible bound: the exact bits; all of
# them without one), and a dump holds the site's local input (rs: [N, C], ag: [N/P, C])
t_sp_auto_dumps() {
    local b=("${SPB[@]}" --set train.steps=8 --set parallel.tp=2)
    $TRAIN -np 2 build/train "${b[@]}" --set compress.method=auto --set compress.auto_max_err=0 \
        --set log.dir=$T/sp_auto0 > $T/sp_auto0.out || return 1
    grep -q "^auto: 0 of 20 sites compress" $T/sp_auto0.out || return 1
    $TRAIN -np 2 build/train "${b[@]}" --set log.dir=$T/sp_none8 > /dev/null || return 1
    python3 tests/compare_logs.py $T/sp_auto0/log.jsonl $T/sp_none8/log.jsonl --exact || return 1
    $TRAIN -np 2 build/train "${b[@]}" --set compress.method=auto --set compress.auto_min_speedup=0 --set compress.auto_max_err=1 \
        --set compress.auto_steps=2 --set comm.overlap=true --set log.dir=$T/sp_auto1 > $T/sp_auto1.out || return 1
    grep -q "^auto: 20 of 20 sites compress" $T/sp_auto1.out || return 1
    $TRAIN -np 2 build/train "${b[@]}" --set compress.method=taco --set compress.dump_step=2 \
        --set compress.dump_sites=L0.attn.rs,lm_head.ag --set log.dir=$T/sp_dump > /dev/null || return 1
    python3 - $T/sp_dump <<'PY'
import ast, sys
def shape(path):
    head = open(path, "rb").read(128)
    return ast.literal_eval(head[10:head.index(b"\n")].decode())["shape"]
d = sys.argv[1]
got = {n: shape(f"{d}/{n}.step2.rank1.npy") for n in ("L0.attn.rs", "lm_head.ag")}
print(got)
assert got == {"L0.attn.rs": (128, 64), "lm_head.ag": (64, 64)}, got
PY
}

# a checkpoint written without sp resumes with it and vice versa (exact path:
# the resumed steps track the uninterrupted run of the other layout); with
# taco and calibrated group sizes the sites' state carries over, with a note
t_sp_resume() {
    local b=(configs/default.json "${SMALL[@]}" --set compress.method=none --set parallel.tp=2)
    $TRAIN -np 2 build/train "${b[@]}" --set train.steps=10 --set checkpoint.every=10 --set log.dir=$T/sp_ra > /dev/null || return 1
    $TRAIN -np 2 build/train "${b[@]}" --set train.steps=20 --set checkpoint.resume=true --set parallel.sp=true \
        --set log.dir=$T/sp_ra > $T/sp_ra.out || return 1
    grep -q "resumed from .* at step 10" $T/sp_ra.out || return 1
    python3 tests/compare_logs.py $T/sp_ra/log.jsonl $T/tp2/log.jsonl --rtol 1e-5 --from-step 11 || return 1
    $TRAIN -np 2 build/train "${b[@]}" --set train.steps=10 --set checkpoint.every=10 --set parallel.sp=true \
        --set log.dir=$T/sp_rb > /dev/null || return 1
    $TRAIN -np 2 build/train "${b[@]}" --set train.steps=20 --set checkpoint.resume=true --set log.dir=$T/sp_rb \
        > $T/sp_rb.out || return 1
    python3 tests/compare_logs.py $T/sp_rb/log.jsonl $T/sp2/log.jsonl --rtol 1e-5 --from-step 11 || return 1
    local t=(--set compress.method=taco --set compress.group_size=auto --set compress.calib_steps=3 --set train.steps=10)
    $TRAIN -np 2 build/train "${b[@]}" "${t[@]}" --set checkpoint.every=5 --set parallel.sp=true --set log.dir=$T/sp_rc \
        > /dev/null || return 1
    rm -f $T/sp_rc/ckpt/*00000010*
    $TRAIN -np 2 build/train "${b[@]}" "${t[@]}" --set checkpoint.resume=true --set log.dir=$T/sp_rc > $T/sp_rc.out || return 1
    grep -q "^note: checkpoint 5 was written with parallel.sp on" $T/sp_rc.out || { cat $T/sp_rc.out; return 1; }
    python3 tests/compare_logs.py $T/sp_rc/log.jsonl $T/tp2/log.jsonl --key loss --rtol 0.02 --from-step 6
}

# rows that do not split into ranks x pieces, and overlap without sp: one error line naming the keys
t_sp_config_errors() {
    local out
    out=$(timeout 60 $MPIRUN -np 2 build/train configs/default.json --set parallel.tp=2 --set parallel.sp=true \
          --set comm.sp_chunks=4 --set train.batch_size=1 --set train.seq_len=30 2>&1) && { echo "expected a failure"; return 1; }
    echo "$out" | grep -q "parallel.sp: the 30 rows of a batch (train.batch_size 1 x train.seq_len 30) do not divide by parallel.tp x comm.sp_chunks = 2 x 4" || { echo "$out"; return 1; }
    out=$(timeout 60 $MPIRUN -np 2 build/train configs/default.json --set parallel.tp=2 --set comm.overlap=true 2>&1) \
        && { echo "expected a failure"; return 1; }
    echo "$out" | grep -q "comm.overlap: true needs parallel.sp: true" || { echo "$out"; return 1; }
}

# comm.overlap: each piece's exchange between the GEMMs of the pieces, instead
# of one exchange after (before) all of them: the same bits, with taco (its
# chunk scales are per piece either way), stochastic rounding and delayed
# scaling, at TP=2 and 4, and for qwen2
t_sp_overlap() {
    local b=("${SPB[@]}" --set train.steps=10 --set compress.method=taco --set compress.stats_every=3 --set comm.sp_chunks=4)
    local cases=("2 --set compress.scale=delayed" "4 --set compress.rounding=stochastic" "2 ${QWEN[*]}")
    for i in 0 1 2; do
        local tp=${cases[$i]%% *} extra=(${cases[$i]#* })
        for ov in false true; do
            $TRAIN -np $tp build/train "${b[@]}" --set parallel.tp=$tp "${extra[@]}" --set comm.overlap=$ov \
                --set log.dir=$T/sp_ov${i}_$ov > /dev/null || return 1
        done
        python3 tests/compare_logs.py $T/sp_ov${i}_true/log.jsonl $T/sp_ov${i}_false/log.jsonl --exact || return 1
        python3 tests/compare_logs.py $T/sp_ov${i}_true/log.jsonl $T/sp_ov${i}_false/log.jsonl --key grad_norm --exact || return 1
        cmp <(grep -o '"sites".*' $T/sp_ov${i}_true/log.jsonl) <(grep -o '"sites".*' $T/sp_ov${i}_false/log.jsonl) || return 1
    done
}

run sp_equivalence t_sp_equivalence
run sp_overlap t_sp_overlap
run sp_taco t_sp_taco
run sp_auto_and_dumps t_sp_auto_dumps
run sp_resume t_sp_resume
run sp_config_errors t_sp_config_errors
