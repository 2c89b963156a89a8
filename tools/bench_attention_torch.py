#!/usr/bin/env python3
"""tools/bench_attention_torch.py - PyTorch's fused causal attention, timed on the
shape our bench_ops_gpu times (GPT-2 124M: B=16, NH=12, T=1024, hs=64, bf16), as the
reference for ops/attention_cuda.cu's forward and backward.

For each backend of F.scaled_dot_product_attention that runs here (flash, cuDNN,
memory-efficient), times the forward alone and the forward plus backward (CUDA events,
median over --iters), and prints the backward as their difference (noisy where the two
medians wander apart: compare the totals too), with TFLOP/s counted
as bench_ops_gpu counts them: forward 2 B NH T^2 hs (two products over the causal
half), backward 2.5 times that. Runs on the GPU machine; nothing is downloaded.

    python3 tools/bench_attention_torch.py
    python3 tools/bench_attention_torch.py --B 8 --T 2048 --iters 50
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_pytorch import time_ms  # tools/ is the script's directory, first on sys.path

BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--NH", type=int, default=12)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--hs", type=int, default=64)
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_attention_torch: no CUDA device (run it on the GPU machine)")
    B, NH, T, hs = args.B, args.NH, args.T, args.hs
    torch.manual_seed(0)
    shape = (B, NH, T, hs)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    fwd_flop = 2.0 * B * NH * T * T * hs
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, B={B} NH={NH} T={T} hs={hs}, causal, bf16")
    print(f"{'backend':<10} {'fwd ms':>8} {'TFLOP/s':>8} {'bwd ms':>8} {'TFLOP/s':>8} {'fwd+bwd ms':>10}")
    for name, backend in BACKENDS:
        try:
            with sdpa_kernel([backend]):
                def fwd():
                    with torch.no_grad():
                        F.scaled_dot_product_attention(q, k, v, is_causal=True)

                def fwd_bwd():
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    out.backward(dout)

                f_ms = time_ms(fwd, args.iters)
                fb_ms = time_ms(fwd_bwd, args.iters)
        except RuntimeError as e:  # the backend does not run this shape or this GPU
            print(f"{name:<10} not available: {str(e).splitlines()[0][:80]}")
            continue
        b_ms = fb_ms - f_ms
        print(f"{name:<10} {f_ms:8.3f} {fwd_flop / f_ms / 1e9:8.0f} {b_ms:8.3f} {2.5 * fwd_flop / b_ms / 1e9:8.0f} "
              f"{fb_ms:10.3f}")


if __name__ == "__main__":
    main()
