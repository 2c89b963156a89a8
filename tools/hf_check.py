#!/usr/bin/env python3
"""tools/hf_check.py - our Hugging Face loading and saving against transformers.

Needs torch, transformers and safetensors (the GPU machine has them; Debian's CPU
box does not). For each architecture (Qwen2ForCausalLM, GPT2LMHeadModel) and each
dtype (float32, bfloat16) it:
  1. builds a tiny random model (norm gains and biases randomised too, so every
     path matters) and save_pretrained()s it as safetensors;
  2. runs our trainer on it for 0 steps (model.init_from = the directory) and reads
     the validation loss of the first val batch from log.jsonl;
  3. computes the same loss with transformers' forward on the same batch (the first
     B x T tokens of the val shard, targets shifted by one, as data/shard.c reads it)
     and prints the relative difference: PASS within --tol (1e-5 for the fp32 CPU
     build; the bf16 GPU build, `--train build/train_gpu`, gets --tol-bf16: its
     activations carry 8 significant bits, ~4e-3 relative per op, and through the
     2 layers the mean loss of the batch moves by up to ~1e-2). The bf16 file is compared against
     transformers run in fp32 on the same (bf16-rounded) weights, which is exactly
     what the fp32 CPU build computes; transformers' own bf16 forward is printed
     beside it for information.
  4. (qwen2) trains ours 3 steps with a checkpoint, loads the checkpoint directory
     with AutoModelForCausalLM.from_pretrained and checks that transformers gives our
     logged validation loss of step 3.
Prints one PASS/FAIL/SKIP line per check and exits 1 on any FAIL.

usage: tools/hf_check.py [--train build/train] [--np 1] [--tol 1e-5] [--tol-bf16 2e-2]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM
except ImportError as e:  # the CPU box: say so, do not pretend
    print("SKIP hf_check: needs numpy, torch and transformers (%s)" % e)
    sys.exit(0)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VAL = os.path.join(ROOT, "datasets/bible/bible_val.bin")
B, T, V, C, L = 4, 32, 256, 64, 2
results = []


def report(ok, what, detail):
    tag = "PASS" if ok is True else "FAIL" if ok is False else "SKIP"
    results.append(tag)
    print("%s %-52s %s" % (tag, what, detail), flush=True)


def val_batch():
    """The first B x T window of the val shard, as dataloader_next reads it."""
    tok = np.fromfile(VAL, dtype="<u2", offset=256 * 4)
    x = torch.tensor(tok[: B * T].astype(np.int64)).view(B, T)
    y = torch.tensor(tok[1: B * T + 1].astype(np.int64)).view(B, T)
    return x, y


def hf_loss(model, x, y, dtype):
    model = model.to(dtype).eval()
    with torch.no_grad():
        logits = model(input_ids=x).logits.double()
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1)).item()


def our_keys(arch):
    keys = ["model.arch=" + arch, "model.vocab_size=%d" % V, "model.d_model=%d" % C, "model.n_layer=%d" % L,
            "model.n_head=4", "model.max_seq_len=64", "train.batch_size=%d" % B, "train.seq_len=%d" % T,
            "train.eval_batches=1", "train.sample_every=0", "compress.method=none", "parallel.tp=%d" % ARGS.np]
    if arch == "qwen2":
        keys += ["model.n_kv_head=2", "model.d_ff=96", "model.tie_embeddings=false", "model.norm_eps=1e-6",
                 "model.rope_theta=10000"]
    return keys


def run_ours(arch, logdir, extra):
    cmd = ["mpirun", "--oversubscribe", "-np", str(ARGS.np), ARGS.train, os.path.join(ROOT, "configs/default.json")]
    for k in our_keys(arch) + ["log.dir=" + logdir] + extra:
        cmd += ["--set", k]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stdout + p.stderr).strip().splitlines()[-3:]
    rows = [json.loads(l) for l in open(os.path.join(logdir, "log.jsonl"))]
    return {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}, None


def make_model(arch):
    torch.manual_seed(1234)
    if arch == "qwen2":
        cfg = Qwen2Config(vocab_size=V, hidden_size=C, intermediate_size=96, num_hidden_layers=L,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
        model = Qwen2ForCausalLM(cfg)
    else:
        cfg = GPT2Config(vocab_size=V, n_embd=C, n_layer=L, n_head=4, n_positions=64, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(cfg)
    with torch.no_grad():  # non-trivial gains and biases: their paths must be right too
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.float().eval()


def check_arch(arch, tmp):
    x, y = val_batch()
    gpu = ARGS.train.endswith("_gpu")
    tol = ARGS.tol_bf16 if gpu else ARGS.tol
    for dtype in (torch.float32, torch.bfloat16):
        dname = "float32" if dtype == torch.float32 else "bfloat16"
        what = "%s %s: our loss vs transformers" % (arch, dname)
        model = make_model(arch)
        d = os.path.join(tmp, "%s_%s" % (arch, dname))
        model.to(dtype).save_pretrained(d, safe_serialization=True)
        ref = hf_loss(model, x, y, torch.float32)  # fp32 forward of the (possibly bf16-rounded) weights
        ref_bf16 = hf_loss(model, x, y, torch.bfloat16) if dtype == torch.bfloat16 else None
        ours, err = run_ours(arch, os.path.join(tmp, "log_" + os.path.basename(d)),
                             ["model.init_from=" + d, "train.steps=0", "train.eval_every=1"])
        if ours is None:
            report(False, what, "our trainer failed: %s" % " | ".join(err))
            continue
        rel = abs(ours[0] - ref) / abs(ref)
        extra = "" if ref_bf16 is None else "; transformers' own bf16 forward %.6f (rel %.2e)" % (
            ref_bf16, abs(ours[0] - ref_bf16) / abs(ref_bf16))
        report(rel <= tol, what, "ours %.7f transformers %.7f rel %.2e (tol %.0e)%s" % (ours[0], ref, rel, tol, extra))

    if arch != "qwen2":
        return
    # a checkpoint of ours, opened by transformers
    what = "qwen2: our checkpoint opened by transformers"
    logdir = os.path.join(tmp, "log_ckpt")
    ours, err = run_ours(arch, logdir, ["train.steps=3", "train.eval_every=3", "checkpoint.every=3"])
    if ours is None:
        report(False, what, "our trainer failed: %s" % " | ".join(err))
        return
    ck = os.path.join(logdir, "ckpt", "model_00000003")
    try:
        model = AutoModelForCausalLM.from_pretrained(ck, torch_dtype=torch.float32)
    except Exception as e:  # noqa: BLE001 - any failure to open is the finding
        report(False, what, "from_pretrained(%s) failed: %s" % (ck, e))
        return
    ref = hf_loss(model, x, y, torch.float32)
    rel = abs(ours[3] - ref) / abs(ref)
    # the checkpoint holds our fp32 master weights; transformers runs them in fp32, so
    # the difference is our forward's: fp32 (CPU build) or bf16 (GPU build)
    report(rel <= tol, what, "ours at step 3 %.7f transformers %.7f rel %.2e (tol %.0e)" % (ours[3], ref, rel, tol))


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default=os.path.join(ROOT, "build/train"))
    ap.add_argument("--np", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-5, help="relative loss difference allowed, fp32 CPU build")
    ap.add_argument("--tol-bf16", type=float, default=2e-2,
                    help="the same for the bf16 GPU build (a train binary whose name ends in _gpu)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ARGS = ap.parse_args()
    print("hf_check: torch %s, transformers %s, %s" % (torch.__version__, transformers.__version__, ARGS.train))
    if not os.path.exists(VAL):
        report(False, "dataset", "%s missing: make data" % VAL)
        return 1
    tmp = tempfile.mkdtemp(prefix="hf_check_")
    try:
        for arch in ("qwen2", "gpt2"):
            check_arch(arch, tmp)
    finally:
        if ARGS.keep:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    nfail = results.count("FAIL")
    print("hf_check: %d passed, %d failed, %d skipped" % (results.count("PASS"), nfail, results.count("SKIP")))
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
