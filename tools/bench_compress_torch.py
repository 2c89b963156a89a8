#!/usr/bin/env python3
"""
tools/bench_compress_torch.py - the same compressors written as plain, unfused
PyTorch ops, timed the way tools/bench_compress_gpu.cu times the fused CUDA
kernels, so the two tables can be read side by side.

    python3 tools/bench_compress_torch.py [--sizes 4,16,64,256] [--reps 50]
                                          [--cuda-csv build/bench/compress_kernels.csv]

Methods (bf16 tensors of shape rows x 768, E4M3, round to nearest):
  per-tensor          amax -> power-of-two scale -> x * s -> float8_e4m3fn (the
                      naive method; ours: "fp8_tensor current")
  group-128+Hadamard  per-group power-of-two exponent, y @ H_128 (fp32 matmul,
                      TF32 off), chunk amax -> power-of-two chunk scale, cast
                      (TACO's steps; ours: "taco G=128 current")
Operations: compress (bf16 -> codes + scales), decompress (-> bf16) and
reduce P (P compressed copies -> decoded, summed in fp32 -> bf16).
Bandwidth counts the same bytes as the CUDA benchmark: bytes read + bytes
written by an ideal implementation (input once, output once), over the median
time of --reps calls after warm-up (CUDA events), inputs rotating over enough
buffers to span 4x the L2 cache; "vs copy" divides by the bandwidth of a
device-to-device copy of the same size measured in the same run. With
--cuda-csv (written by bench_compress_gpu --csv FILE) each row also shows the
fused kernel's time and the speedup.
"""
import argparse
import csv
import datetime
import math
import statistics

import torch

COLS = 768
FP8_MAX = 448.0


def time_ms(fn, reps, warm=3):
    for i in range(warm):
        fn(i)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for r in range(reps):
        starts[r].record()
        fn(warm + r)
        ends[r].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def hadamard(G, device):
    H = torch.ones(1, 1, device=device)
    while H.shape[0] < G:
        H = torch.cat([torch.cat([H, H], 1), torch.cat([H, -H], 1)], 0)
    return H / math.sqrt(G)


def pow2_floor(v):
    """2^floor(log2(v)) for v > 0 (the power-of-two chunk scale)"""
    return torch.exp2(torch.floor(torch.log2(v)))


# ---- per-tensor ------------------------------------------------------------------
def tensor_compress(x):
    xf = x.float()
    s = pow2_floor(FP8_MAX / xf.abs().amax().clamp_min(1e-30))
    q = (xf * s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, s


def tensor_decompress_sum(wires):
    acc = None
    for q, s in wires:
        d = q.float() / s
        acc = d if acc is None else acc + d
    return acc.to(torch.bfloat16)


# ---- group-G + Hadamard ------------------------------------------------------------
def group_compress(x, H):
    G = H.shape[0]
    xg = x.float().view(-1, G)
    a = xg.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)
    e = torch.ceil(torch.log2(a))  # the group exponent: a * 2^-e <= 1
    r = (xg * torch.exp2(-e)) @ H
    s = pow2_floor(FP8_MAX / r.abs().amax().clamp_min(1e-30))
    q = (r * s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, (e + 127).to(torch.uint8), s


def group_decompress_sum(wires, H):
    acc = None
    for q, eb, s in wires:
        d = ((q.float() / s) @ H) * torch.exp2(eb.float() - 127)
        acc = d if acc is None else acc + d
    return acc.to(torch.bfloat16).view(-1, COLS)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4,16,64,256", help="tensor sizes in MB (bf16)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--cuda-csv", default=None, help="bench_compress_gpu --csv output, to print next to it")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # the transform in true fp32, like the kernels
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"bench_compress_torch: {props.name}, torch {torch.__version__}, "
          f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S}")

    ours = {}
    if args.cuda_csv:
        with open(args.cuda_csv) as f:
            for row in csv.DictReader(f):
                ours[(int(row["size_mb"]), row["method"], row["op"])] = float(row["us"])
    twin = {"per-tensor": "fp8_tensor current", f"group-{args.group}+Hadamard": f"taco G={args.group} current"}

    H = hadamard(args.group, dev)
    print(f"{'MB':>6}  {'method':<22} {'op':<12} {'us':>10} {'GB/s':>9} {'vs copy':>8} {'fused us':>10} {'speedup':>8}")
    for mb in [int(s) for s in args.sizes.split(",")]:
        n = (mb << 20) // 2 // COLS * COLS
        R = max(2, math.ceil(4 * l2 / (2 * n)))
        xs = []
        for r in range(R):
            g = torch.Generator(device=dev).manual_seed(r)
            x = torch.randn(n // COLS, COLS, device=dev, generator=g)
            x[:, 5::97] *= 20.0
            xs.append(x.to(torch.bfloat16))
        ys = [torch.empty_like(x) for x in xs]
        t = time_ms(lambda i: ys[i % R].copy_(xs[(i + 1) % R]), args.reps)
        copy_gbps = 2 * 2 * n / (t * 1e6)
        print(f"{mb:>6}  {'copy_(D2D)':<22} {'copy':<12} {t * 1e3:>10.1f} {copy_gbps:>9.1f} {1.0:>8.2f}")

        def row(method, op, ms, moved):
            gbps = moved / (ms * 1e6)
            us = ours.get((mb, twin.get(method, ""), op))
            extra = f" {us:>10.1f} {ms * 1e3 / us:>7.1f}x" if us else ""
            print(f"{mb:>6}  {method:<22} {op:<12} {ms * 1e3:>10.1f} {gbps:>9.1f} {gbps / copy_gbps:>8.2f}{extra}")

        # per-tensor
        wire = n + 4
        wires = [tensor_compress(x) for x in xs]
        row("per-tensor", "compress", time_ms(lambda i: tensor_compress(xs[i % R]), args.reps), 2 * n + wire)
        row("per-tensor", "decompress", time_ms(lambda i: tensor_decompress_sum(wires[i % R:i % R + 1]), args.reps),
            wire + 2 * n)
        for P in (2, 4):
            sets = [[wires[(r + q) % R] for q in range(P)] for r in range(R)]
            row("per-tensor", f"reduce {P}", time_ms(lambda i: tensor_decompress_sum(sets[i % R]), args.reps),
                P * wire + 2 * n)
        # group + Hadamard
        name = f"group-{args.group}+Hadamard"
        wire = n + n // args.group + 4
        wires = [group_compress(x, H) for x in xs]
        row(name, "compress", time_ms(lambda i: group_compress(xs[i % R], H), args.reps), 2 * n + wire)
        row(name, "decompress", time_ms(lambda i: group_decompress_sum(wires[i % R:i % R + 1], H), args.reps),
            wire + 2 * n)
        for P in (2, 4):
            sets = [[wires[(r + q) % R] for q in range(P)] for r in range(R)]
            row(name, f"reduce {P}", time_ms(lambda i: group_decompress_sum(sets[i % R], H), args.reps),
                P * wire + 2 * n)
        del xs, ys, wires
        torch.cuda.empty_cache()
    print("(bandwidth = ideal bytes read + written / median time; 'fused' = bench_compress_gpu's kernel, same size)")


if __name__ == "__main__":
    main()
