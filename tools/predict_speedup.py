#!/usr/bin/env python3
"""tools/predict_speedup.py - predict step time and compression speedup on other links.

The model (one TP group, per rank, per step):

    t(bw)      = t_compute + t_codec + W / bw
    t_compute  = ms - comm_ms                of the measured uncompressed run
    W          = comm_bytes                  bytes this rank sends per step (from the log)
    bw         = W_none / comm_ms_none       the link's effective bandwidth, fitted on the
                                             measured uncompressed run
    t_codec    = comm_ms_c - W_c / bw        compression's own cost, fitted on the measured
                                             compressed run (0 for the exact path)

so speedup(bw) = t_none(bw) / t_compressed(bw). The fit uses runs at one TP degree (--fit);
the check predicts the runs at the other degrees with the SAME bw and the codec cost scaled
by the bytes each rank compresses, and prints predicted vs measured step times.

usage: predict_speedup.py --runs DIR [--fit-tp 2] [--method taco] [--links 25,50,100,400]
DIR holds one folder per run named tp<P>_<method> with a log.jsonl (tools/bench_gpu.sh
writes them). Prints markdown.
"""
import argparse
import json
import os
import statistics
import sys


def load(path):
    try:
        rows = [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"error: cannot read {path}: {e}")
    rows = [r for r in rows if "ms" in r][5:]          # skip warm-up steps
    if not rows:
        sys.exit(f"error: {path} has no steps after warm-up")
    med = lambda k: statistics.median(r[k] for r in rows)
    return {"ms": med("ms"), "comm_ms": med("comm_ms"), "bytes": med("comm_bytes")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--fit-tp", type=int, default=2)
    ap.add_argument("--method", default="taco")
    ap.add_argument("--links", default="25,50,100,400", help="link bandwidths in GB/s")
    a = ap.parse_args()
    runs = {}
    for name in sorted(os.listdir(a.runs)):
        log = os.path.join(a.runs, name, "log.jsonl")
        if name.startswith("tp") and "_" in name and os.path.exists(log):
            tp, method = name[2:].split("_", 1)
            runs[(int(tp), method)] = load(log)
    fit_none, fit_c = runs.get((a.fit_tp, "none")), runs.get((a.fit_tp, a.method))
    if not fit_none or not fit_c:
        sys.exit(f"error: need tp{a.fit_tp}_none and tp{a.fit_tp}_{a.method} in {a.runs}")
    bw = fit_none["bytes"] / (fit_none["comm_ms"] / 1e3)                 # bytes/s
    codec_per_byte = max(fit_c["comm_ms"] / 1e3 - fit_c["bytes"] / bw, 0.0) / fit_c["bytes"]
    print(f"fitted on TP={a.fit_tp}: effective link {bw / 1e9:.2f} GB/s, "
          f"{a.method} codec cost {codec_per_byte * 1e12:.3f} ms per GB sent\n")

    print("| TP | method | measured ms/step | predicted ms/step | error |")
    print("|---|---|---|---|---|")
    for (tp, m), r in sorted(runs.items()):
        if tp == 1 or m not in ("none", a.method):
            continue
        t_compute = runs[(tp, "none")]["ms"] - runs[(tp, "none")]["comm_ms"] if (tp, "none") in runs else None
        if t_compute is None:
            continue
        codec = codec_per_byte * r["bytes"] if m != "none" else 0.0
        pred = t_compute + (codec + r["bytes"] / bw) * 1e3
        print(f"| {tp} | {m} | {r['ms']:.1f} | {pred:.1f} | {100 * (pred - r['ms']) / r['ms']:+.1f}% |")

    print("\n| TP | link GB/s | none ms/step | " + a.method + " ms/step | speedup |")
    print("|---|---|---|---|---|")
    for tp in sorted({tp for tp, _ in runs if tp > 1}):
        if (tp, "none") not in runs or (tp, a.method) not in runs:
            continue
        n, c = runs[(tp, "none")], runs[(tp, a.method)]
        t_compute = n["ms"] - n["comm_ms"]
        for gbs in [float(x) for x in a.links.split(",")]:
            link = gbs * 1e9
            t_n = t_compute + n["bytes"] / link * 1e3
            t_c = t_compute + (codec_per_byte * c["bytes"] + c["bytes"] / link) * 1e3
            print(f"| {tp} | {gbs:g} | {t_n:.1f} | {t_c:.1f} | {t_n / t_c:.2f}x |")


if __name__ == "__main__":
    main()
