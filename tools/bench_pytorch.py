#!/usr/bin/env python3
"""tools/bench_pytorch.py - the PyTorch reference for our GPU trainer's speed.

Times full training steps (forward, backward, grad-norm clip, fused AdamW) of
GPT-2 124M written in plain PyTorch - the same model as ours: L=12, C=768,
NH=12, vocab 50257 padded to 50304, tied embedding/LM head, tanh GELU, bf16
autocast, causal flash attention through F.scaled_dot_product_attention - in
eager mode and under torch.compile, and prints a table of ms/step and tok/s
(median over --steps steps after warm-up). Runs on the GPU machine
(PyTorch 2.11 there); nothing is downloaded: the batches are random tokens.

Differences from our trainer, kept on purpose because they are how PyTorch
users run this model: the loss is taken over all 50304 logits (padding ids
never appear as targets, but their logits take part in the softmax, as in
llm.c's train_gpt2.py); weights are fp32 master copies under autocast rather
than bf16 working copies.

Anchors on the H200 (same card, B=16, T=1024, torch 2.11): eager 46.7 ms/step
(2026-12-01), torch.compile 35.75 ms/step with clipping and 35.51 ms without
(2026-12-02, one command). An earlier session's 32.4 ms for torch.compile was
not reproduced by that command.

    python3 tools/bench_pytorch.py                      # eager and compiled
    python3 tools/bench_pytorch.py --no-compile --steps 30
    python3 tools/bench_pytorch.py --ceilings           # also copy GB/s and GEMM TFLOP/s
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ANCHORS_MS = {"eager": 46.7, "compile": 35.8}  # measured on the H200, B=16, T=1024, clip 1.0 (see above)


class Block(nn.Module):
    """One transformer layer: pre-LN attention and MLP, residuals around both."""

    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)  # q of all heads, then k, then v (as ours)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        # [B, T, C] -> [B, NH, T, hs]
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/sqrt(hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        x = x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, L=12, C=768, NH=12, Vp=50304, maxT=1024):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        # GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2L)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "fcproj.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head, [B, T, Vp]
        # autocast runs cross_entropy in fp32
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def make_optimizer(model, lr=6e-4, wd=0.1):
    """Fused AdamW; weight decay on matrices only (embeddings, linear weights)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def sdpa_flash():
    """Context that restricts SDPA to the flash kernel (falls back to the
    default dispatcher on PyTorch versions without torch.nn.attention)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([SDPBackend.FLASH_ATTENTION])
    except ImportError:
        import contextlib

        return contextlib.nullcontext()


def run_mode(mode, args, device):
    torch.manual_seed(1337)
    model = GPT(L=args.layers, C=args.channels, NH=args.heads, Vp=args.vocab_padded, maxT=args.seq).to(device)
    nparams = sum(p.numel() for p in model.parameters())
    opt = make_optimizer(model)
    step_fn_model = torch.compile(model) if mode == "compile" else model

    # a few distinct batches, rotated: never time on one cached input
    gen = torch.Generator(device=device).manual_seed(42)
    batches = [torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=device, generator=gen) for _ in range(4)]

    def step(i):
        tok = batches[i % len(batches)]
        x, y = tok[:, :-1], tok[:, 1:]
        opt.zero_grad(set_to_none=True)
        with sdpa_flash(), torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_fn_model(x, y)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        return loss

    warmup = args.warmup if mode == "eager" else max(args.warmup, 3)  # compile: tracing + autotune
    t0 = time.time()
    for i in range(warmup):
        loss = step(i)
    torch.cuda.synchronize()
    warm_s = time.time() - t0

    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(args.steps):
        start.record()
        loss = step(warmup + i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    tokens = args.batch * args.seq
    med = statistics.median(times)
    # model FLOPs per step: 6 N per token for the weights, 6 L C T per token
    # for causal attention (half of the 12 L C T of full attention)
    flops = 6 * nparams * tokens + 6 * args.layers * args.channels * args.seq * tokens
    res = {
        "mode": mode,
        "ms": med,
        "min": min(times),
        "max": max(times),
        "toks": tokens / (med / 1e3),
        "tflops": flops / (med / 1e3) / 1e12,
        "loss": float(loss.item()),
        "warm_s": warm_s,
        "mem_gb": torch.cuda.max_memory_allocated() / 2**30,
        "nparams": nparams,
    }
    del model, opt, step_fn_model
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return res


def time_ms(fn, reps=20):
    """median milliseconds of fn() between two CUDA events over reps runs, after 3
    warm-up runs (tools/bench_attention_torch.py times with it too)"""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def ceilings(device):
    """The two ceilings of the library's METHOD.md: D2D copy GB/s (read + write)
    and bf16 GEMM TFLOP/s on random data, median of 20 events."""
    n = 1 << 29  # 1 GiB of bf16
    a = torch.randn(n, device=device, dtype=torch.bfloat16)
    b = torch.empty_like(a)
    ms = time_ms(lambda: b.copy_(a))
    copy_gbs = 2 * a.numel() * 2 / (ms / 1e3) / 1e9
    del a, b
    m = 8192
    x = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    y = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    ms = time_ms(lambda: x @ y)
    gemm_tf = 2 * m**3 / (ms / 1e3) / 1e12
    return copy_gbs, gemm_tf


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--batch", type=int, default=16, help="B")
    ap.add_argument("--seq", type=int, default=1024, help="T")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257, help="real vocab: targets are drawn below it")
    ap.add_argument("--vocab-padded", type=int, default=50304)
    ap.add_argument("--clip", type=float, default=1.0, help="global grad-norm clip (0: off)")
    ap.add_argument("--compile", dest="compile", action="store_true", default=True, help="also time torch.compile (default)")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="eager only")
    ap.add_argument("--no-eager", dest="eager", action="store_false", default=True, help="skip eager mode")
    ap.add_argument("--ceilings", action="store_true", help="also measure copy bandwidth and GEMM rate")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        raise SystemExit("bench_pytorch: no CUDA device visible; run this on the GPU machine")
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"B={args.batch} T={args.seq} L={args.layers} C={args.channels} NH={args.heads} Vp={args.vocab_padded}")

    modes = (["eager"] if args.eager else []) + (["compile"] if args.compile else [])
    results = []
    for mode in modes:
        try:
            results.append(run_mode(mode, args, device))
        except Exception as e:  # report, keep the other mode's numbers
            print(f"{mode}: failed: {type(e).__name__}: {e}")

    if args.ceilings:
        copy_gbs, gemm_tf = ceilings(device)
        print(f"ceilings: device copy {copy_gbs:.0f} GB/s (read+write), bf16 GEMM 8192^3 {gemm_tf:.0f} TFLOP/s")

    if results:
        print(f"params {results[0]['nparams'] / 1e6:.1f}M, {args.steps} timed steps per mode\n")
    hdr = f"{'mode':<8} {'ms/step':>8} {'min':>7} {'max':>7} {'tok/s':>9} {'TFLOP/s':>8} {'mem GB':>7} {'warm-up s':>9} {'loss':>7} {'anchor ms':>9}"
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        anchor = ANCHORS_MS.get(r["mode"]) if (args.batch, args.seq, args.layers, args.channels) == (16, 1024, 12, 768) else None
        print(f"{r['mode']:<8} {r['ms']:8.2f} {r['min']:7.2f} {r['max']:7.2f} {r['toks'] / 1e3:8.1f}k "
              f"{r['tflops']:8.1f} {r['mem_gb']:7.1f} {r['warm_s']:9.1f} {r['loss']:7.3f} "
              f"{anchor if anchor else '-':>9}")


if __name__ == "__main__":
    main()
