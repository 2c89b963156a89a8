# tests/test_qwen2.sh - end-to-end tests of model.arch = "qwen2" through
# build/train, sourced by tests/run_tests.sh after tests/test_train.sh (which
# sets T, TRAIN and SMALL).

# 8 heads over 4 kv heads (grouped-query: n_kv_head divides by tp = 1, 2, 4), untied head
QWEN=(--set model.arch=qwen2 --set model.n_head=8 --set model.n_kv_head=4 --set model.d_ff=96
      --set model.tie_embeddings=false --set model.rope_theta=10000)

# TP=1, 2, 4 give the same losses and gradient norms (exact wire, rtol 1e-5 as GPT-2's)
t_qwen2_tp_equivalence() {
    local base=(configs/default.json "${SMALL[@]}" "${QWEN[@]}" --set train.steps=10 --set compress.method=none)
    for p in 1 2 4; do
        $TRAIN -np $p build/train "${base[@]}" --set parallel.tp=$p --set log.dir=$T/q_tp$p || return 1
    done
    for p in 2 4; do
        python3 tests/compare_logs.py $T/q_tp$p/log.jsonl $T/q_tp1/log.jsonl --rtol 1e-5 || return 1
        python3 tests/compare_logs.py $T/q_tp$p/log.jsonl $T/q_tp1/log.jsonl --key grad_norm --rtol 1e-4 || return 1
    done
}

# taco at TP=2 with checkpoints: the checkpoint is a Hugging Face directory,
# a resume from step 5 repeats steps 6..10 bit for bit, and the directory
# loads with model.init_from to the validation loss of the run that wrote it
t_qwen2_checkpoint_resume() {
    local base=(configs/default.json "${SMALL[@]}" "${QWEN[@]}" --set train.steps=10 --set parallel.tp=2
                --set compress.method=taco)
    $TRAIN -np 2 build/train "${base[@]}" --set log.dir=$T/q_full || return 1
    $TRAIN -np 2 build/train "${base[@]}" --set log.dir=$T/q_part --set checkpoint.every=5 > /dev/null || return 1
    ls $T/q_part/ckpt/done_00000005 $T/q_part/ckpt/model_00000005/model.safetensors \
       $T/q_part/ckpt/model_00000005/config.json || return 1
    grep -q '"model_type":[[:space:]]*"qwen2"' $T/q_part/ckpt/model_00000005/config.json || return 1
    rm -rf $T/q_part/ckpt/*00000010*
    $TRAIN -np 2 build/train "${base[@]}" --set log.dir=$T/q_part --set checkpoint.resume=true | tee $T/q_resume.out || return 1
    grep -q "resumed from .* at step 5" $T/q_resume.out || return 1
    python3 tests/compare_logs.py $T/q_part/log.jsonl $T/q_full/log.jsonl --exact --from-step 6 || return 1
    local ev=(configs/default.json "${SMALL[@]}" "${QWEN[@]}" --set parallel.tp=2 --set train.eval_batches=2)
    $TRAIN -np 2 build/train "${ev[@]}" --set train.steps=5 --set train.eval_every=5 --set log.dir=$T/q_ev_a \
        --set checkpoint.every=5 || return 1
    $TRAIN -np 2 build/train "${ev[@]}" --set train.steps=0 --set train.eval_every=1 --set log.dir=$T/q_ev_b \
        --set model.init_from=$T/q_ev_a/ckpt/model_00000005 || return 1
    python3 - "$T/q_ev_a/log.jsonl" "$T/q_ev_b/log.jsonl" <<'PY' || return 1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
va = [r["val_loss"] for r in a if r["step"] == 5][0]
vb = [r["val_loss"] for r in b if r["step"] == 0][0]
print("val loss at step 5: %.7f; the saved directory loaded: %.7f" % (va, vb))
sys.exit(0 if va == vb else 1)
PY
}

# a bad Hugging Face directory or config: one error on every rank, exit 1, no hang
t_qwen2_bad_inputs() {
    local dir=$T/q_ev_a/ckpt/model_00000005 bad=$T/q_bad
    local ev=(configs/default.json "${SMALL[@]}" "${QWEN[@]}" --set parallel.tp=2 --set train.steps=0)
    expect_fail() {   # expect_fail NEEDLE ARGS...: exit 1 with NEEDLE in the output
        local needle=$1; shift
        $TRAIN -np 2 build/train "$@" > $T/q_bad.out 2>&1 && { echo "expected a failure"; return 1; }
        cat $T/q_bad.out
        grep -qF "$needle" $T/q_bad.out || { echo "missing: $needle"; return 1; }
    }
    rm -rf $bad && cp -r $dir $bad && truncate -s -64 $bad/model.safetensors
    expect_fail "lm_head.weight needs data bytes" "${ev[@]}" --set model.init_from=$bad || return 1
    expect_fail "model.d_ff is 64 in our config but intermediate_size is 96" "${ev[@]}" --set model.d_ff=64 \
        --set model.init_from=$dir || return 1
    expect_fail "model.n_kv_head: 4 is not divisible by parallel.tp = 8" configs/default.json "${QWEN[@]}" \
        --set parallel.tp=8 || return 1
    expect_fail "model.n_kv_head: 3 does not divide model.n_head = 8" "${ev[@]}" --set model.n_kv_head=3 || return 1
    expect_fail "llm.c model files hold GPT-2 only" "${ev[@]}" --set model.init_from=$T/part/ckpt/model_00000010.bin || return 1
}

run qwen2_tp_equivalence t_qwen2_tp_equivalence
run qwen2_checkpoint_resume t_qwen2_checkpoint_resume
run qwen2_bad_inputs t_qwen2_bad_inputs
