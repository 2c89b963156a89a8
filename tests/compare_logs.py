#!/usr/bin/env python3
"""tests/compare_logs.py - compare a key of two log.jsonl files step by step.

usage: compare_logs.py A.jsonl B.jsonl [--key loss] [--rtol 1e-5] [--exact]
       [--from-step S] [--ratio KEY MIN MAX]
Exits 1 (printing the first mismatch) if the values at the steps both logs
share differ by more than rtol (relative), or at all with --exact.
--ratio checks mean(A[KEY]) / mean(B[KEY]) lies in [MIN, MAX].
"""
import json
import sys


def load(path):
    rows = {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"error: {path}:{n}: not valid JSON ({e})")
                rows[r["step"]] = r
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e}")
    return rows


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    a, b = load(args[0]), load(args[1])
    key, rtol, exact, from_step, ratio = "loss", 1e-5, False, 0, None
    i = 2
    while i < len(args):
        if args[i] == "--key": key = args[i + 1]; i += 2
        elif args[i] == "--rtol": rtol = float(args[i + 1]); i += 2
        elif args[i] == "--exact": exact = True; i += 1
        elif args[i] == "--from-step": from_step = int(args[i + 1]); i += 2
        elif args[i] == "--ratio": ratio = (args[i + 1], float(args[i + 2]), float(args[i + 3])); i += 4
        else: sys.exit(f"error: unknown option {args[i]}")
    if ratio:
        k, lo, hi = ratio
        va = [r[k] for r in a.values() if k in r]
        vb = [r[k] for r in b.values() if k in r]
        q = (sum(va) / len(va)) / (sum(vb) / len(vb))
        print(f"mean {k}: ratio {q:.4f} (want [{lo}, {hi}])")
        sys.exit(0 if lo <= q <= hi else 1)
    steps = sorted(s for s in a if s in b and s >= from_step and key in a[s] and key in b[s])
    if not steps:
        sys.exit(f"error: no common steps with '{key}' in {args[0]} and {args[1]}")
    worst = 0.0
    for s in steps:
        x, y = a[s][key], b[s][key]
        if exact:
            if x != y:
                sys.exit(f"MISMATCH step {s}: {key} {x!r} != {y!r}")
            continue
        rel = abs(x - y) / max(abs(y), 1e-30)
        worst = max(worst, rel)
        if rel > rtol:
            sys.exit(f"MISMATCH step {s}: {key} {x} vs {y} (rel {rel:.3g} > {rtol})")
    print(f"{len(steps)} steps of '{key}' agree ({'exactly' if exact else f'worst rel {worst:.3g}'})")


if __name__ == "__main__":
    main()
