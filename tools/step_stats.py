#!/usr/bin/env python3
"""tools/step_stats.py - median step time of a run, for benchmark tables.

usage: step_stats.py LOG.jsonl [--skip N] [--flops-per-token F] [--peak TFLOPS]
Prints one JSON object: median ms/step over the steps after the first N
(warm-up), tokens/s at that median, mean comm_ms and comm_bytes, and MFU when
the model's FLOPs per token are given.
"""
import json
import statistics
import sys


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    path, skip, fpt, peak = args[0], 5, None, 989.0
    i = 1
    while i < len(args):
        if args[i] == "--skip": skip = int(args[i + 1])
        elif args[i] == "--flops-per-token": fpt = float(args[i + 1])
        elif args[i] == "--peak": peak = float(args[i + 1])
        else: sys.exit(f"error: unknown option {args[i]}")
        i += 2
    try:
        rows = [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"error: cannot read {path}: {e}")
    rows = [r for r in rows if "ms" in r][skip:]
    if not rows:
        sys.exit(f"error: {path} has no steps after the {skip} warm-up steps")
    ms = statistics.median(r["ms"] for r in rows)
    tok_per_step = statistics.median(r["tok_per_s"] * r["ms"] / 1e3 for r in rows)
    out = {"steps": len(rows), "ms": round(ms, 2), "tok_per_s": round(tok_per_step / (ms / 1e3)),
           "comm_ms": round(statistics.mean(r["comm_ms"] for r in rows), 2),
           "comm_MB": round(statistics.mean(r["comm_bytes"] for r in rows) / 1e6, 2),
           "loss_last": rows[-1]["loss"]}
    if fpt:
        out["mfu"] = round(out["tok_per_s"] * fpt / (peak * 1e12), 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
