#!/usr/bin/env python3
"""tools/predict_speedup.py - the step-time model: predict the step time and the compression speedup on other links.

One TP group, per rank, per step, n_x exchanges of a tensor of S bytes (bf16) each:

    t_step     = t_compute + n_x * t_x
    t_x        = alpha + kernels(S) + S_wire / bw

    t_compute  = ms - comm_ms of the measured exact run
    n_x, S     = the exchanges of a step and the tensor bytes of one (S = the exact run's bytes
                 sent per exchange: at P = 2 both all-reduce shapes send the tensor once)
    S_wire     = the method's bytes sent per exchange (its run's comm_bytes / n_x)
    alpha      = fixed cost per exchange (launches, hand-offs, waits)
    kernels(S) = the method's kernels on one rank: compress S, decode-reduce-recompress the
                 rank's S/P, decode S (two-shot); or compress S and decode-reduce P copies of S
                 (one-shot), each scaled from the kernel table's largest size

Two uses:
  1. The check. On the measured transport, t_x(S) = alpha_m + beta_m S is fitted per method
     from the exchange-time curve (bench_compress_gpu --transports, sizes >= 1 MB): that
     curve holds the measured fixed cost, kernels and bytes together. The predicted steps are
     printed against the measured ones.
  2. The prediction. On a link of bandwidth bw with fixed cost --link-latency-us per exchange,
     kernels(S) from the kernel table (bench_compress_gpu, one process: one rank per GPU) and
     t_compute / --ranks-per-gpu (ranks that shared a GPU ran their compute one after the
     other), the speedup t_none / t_method for each link of --links.

usage: predict_speedup.py --exchange FILE --kernels FILE
           (--exchanges N --measured none=MS,COMM_MS,MB [--measured taco=MS,COMM_MS,MB] | --runs DIR)
           [--transport ipc] [--shape two-shot] [--tp 2] [--method taco]
           [--kernel-name "taco G=64 current"] [--links 370,100,50,25] [--link-latency-us 20]
           [--ranks-per-gpu 1]
MS, COMM_MS = the step's median ms and its ms in exchanges, MB = MB sent per rank per step
(log.jsonl's ms, comm_ms, comm_bytes; tools/bench_sp.sh's and bench_gpu.sh's tables). Or --runs DIR:
folders tp<TP>_none and tp<TP>_<method> with a log.jsonl each (tools/bench_gpu.sh writes them):
medians after 5 warm-up steps, and N = the sites in the log. Prints markdown.
"""
import argparse
import json
import os
import re
import statistics
import sys


def load_run(path):
    """(ms, comm_ms, bytes) medians after 5 warm-up steps, and the number of exchange sites"""
    try:
        rows = [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"error: cannot read {path}: {e}")
    sites = next((len(r["sites"]) for r in reversed(rows) if isinstance(r.get("sites"), dict)), None)
    rows = [r for r in rows if "ms" in r][5:]
    if not rows:
        sys.exit(f"error: {path} has no steps after warm-up")
    med = lambda k: statistics.median(r[k] for r in rows)
    return {"ms": med("ms"), "comm_ms": med("comm_ms"), "bytes": med("comm_bytes")}, sites


def fit_line(points):
    """least-squares t = a + b s over (s, t) points"""
    n = len(points)
    if n < 2:
        sys.exit("error: the exchange file has fewer than 2 sizes >= 1 MB for this transport and shape")
    ms = sum(s for s, _ in points) / n
    mt = sum(t for _, t in points) / n
    sxx = sum((s - ms) ** 2 for s, _ in points)
    b = sum((s - ms) * (t - mt) for s, t in points) / sxx
    return mt - b * ms, b


def read_exchange(path, transport, shape):
    """{wire: (alpha_us, us_per_byte)} from bench_compress_gpu --transports output"""
    pts = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e}")
    for line in lines:
        f = line.split()
        if len(f) >= 5 and f[0].isdigit() and f[2] == shape and f[3] == transport:
            size = int(f[0])
            if size >= 1 << 20:
                pts.setdefault(f[1], []).append((size, float(f[4])))
    if not pts:
        sys.exit(f"error: {path} has no '{shape}' rows on transport '{transport}'")
    return {w: fit_line(p) for w, p in pts.items()}


def read_kernels(path):
    """{(name, op): us per byte of bf16 tensor} from the kernel table's largest size"""
    rows = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e}")
    pat = re.compile(r"^\s*(\d+)\s+(.+?)\s{2,}(compress|decompress|reduce \d|recompress \d)\s+([\d.]+)")
    for line in lines:
        m = pat.match(line)
        if m:
            mb, name, op, us = int(m.group(1)), m.group(2).strip(), m.group(3), float(m.group(4))
            key = (name, op)
            if key not in rows or mb > rows[key][0]:
                rows[key] = (mb, us)
    return {k: us / (mb * (1 << 20)) for k, (mb, us) in rows.items()}


def kernel_us(table, name, shape, P, S):
    """one rank's kernel time for an exchange of S tensor bytes"""
    def get(op):
        if (name, op) not in table:
            sys.exit(f"error: the kernel table has no '{name}' '{op}' row")
        return table[(name, op)] * S
    if shape == "one-shot":
        return get("compress") + get(f"reduce {P}")
    return get("compress") + get(f"recompress {P}") / P + get("decompress")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exchange", required=True, help="bench_compress_gpu --transports output")
    ap.add_argument("--kernels", required=True, help="bench_compress_gpu kernel table")
    ap.add_argument("--exchanges", type=int, help="exchanges per step (GPT-2, no sp: 4 L + 2)")
    ap.add_argument("--measured", action="append", default=[], help="METHOD=MS,COMM_MS,MB")
    ap.add_argument("--runs", help="a folder of tp<TP>_<method>/log.jsonl runs, instead of --measured")
    ap.add_argument("--transport", default="ipc")
    ap.add_argument("--shape", default="two-shot", choices=["two-shot", "one-shot"])
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--method", default="taco")
    ap.add_argument("--kernel-name", default="taco G=64 current", help="the method's rows in the kernel table")
    ap.add_argument("--links", default="370,100,50,25", help="link bandwidths in GB/s")
    ap.add_argument("--link-latency-us", type=float, default=20.0, help="fixed cost per exchange on those links")
    ap.add_argument("--ranks-per-gpu", type=int, default=1,
                    help="ranks that shared a GPU in the measured runs: the GPU ran their compute one after the "
                         "other, so one rank alone computes t_compute / this")
    a = ap.parse_args()

    runs = {}
    for m in a.measured:
        try:
            name, vals = m.split("=", 1)
            ms, comm, mb = (float(v) for v in vals.split(","))
        except ValueError:
            sys.exit(f"error: --measured {m!r}: expected METHOD=MS,COMM_MS,MB")
        runs[name] = {"ms": ms, "comm_ms": comm, "bytes": mb * 1e6}
    n = a.exchanges
    if a.runs:
        for m in ("none", a.method):
            log = os.path.join(a.runs, f"tp{a.tp}_{m}", "log.jsonl")
            if os.path.exists(log):
                runs[m], sites = load_run(log)
                n = n or sites
    if not n:
        sys.exit("error: the number of exchanges per step is unknown: give --exchanges N")
    if "none" not in runs:
        sys.exit("error: the exact run is needed (--measured none=... or DIR/tp<TP>_none): t_compute and S come from it")
    t_compute = runs["none"]["ms"] - runs["none"]["comm_ms"]
    S = runs["none"]["bytes"] / n                  # bf16 tensor bytes per exchange (sent once at P = 2)
    fits = read_exchange(a.exchange, a.transport, a.shape)
    ktab = read_kernels(a.kernels)
    wire_of = {"none": "bf16", a.method: a.method}
    kname = {"none": "bf16 wire", a.method: a.kernel_name}

    print(f"Fitted on `{a.transport}`, `{a.shape}` (sizes >= 1 MB): t_x = alpha + beta S")
    print()
    print("| method | alpha (fixed cost) us | beta us/MB |")
    print("|---|---|---|")
    for m, w in wire_of.items():
        if w in fits:
            print(f"| {m} | {fits[w][0]:.0f} | {fits[w][1] * (1 << 20):.2f} |")
    print()
    print(f"Check, TP={a.tp}: t_compute = {t_compute:.1f} ms, {n} exchanges of {S / 1e6:.1f} MB a step")
    print()
    print("| method | measured ms/step | predicted ms/step | error |")
    print("|---|---|---|---|")
    for m, r in runs.items():
        w = wire_of.get(m)
        if w not in fits:
            continue
        al, be = fits[w]
        pred = t_compute + n * (al + be * S) / 1e3
        print(f"| {m} | {r['ms']:.1f} | {pred:.1f} | {100 * (pred - r['ms']) / r['ms']:+.1f}% |")
    if a.method not in runs:
        return
    print()
    t_alone = t_compute / a.ranks_per_gpu
    kn = kernel_us(ktab, kname["none"], a.shape, a.tp, S)
    kc = kernel_us(ktab, kname[a.method], a.shape, a.tp, S)
    wn, wc = S, runs[a.method]["bytes"] / n
    print(f"Prediction, one rank per GPU: t_compute {t_alone:.1f} ms; kernels per exchange {kn:.0f} us exact, {kc:.0f} us {a.method} "
          f"(kernel table); {a.link_latency_us:g} us fixed cost per exchange (assumed); "
          f"{wn / 1e6:.1f} / {wc / 1e6:.1f} MB sent per exchange")
    print()
    print(f"| TP | link GB/s | none ms/step | {a.method} ms/step | speedup |")
    print("|---|---|---|---|---|")
    for gbs in [float(x) for x in a.links.split(",")]:
        bw = gbs * 1e9 / 1e6                       # bytes per us
        t_n = t_alone + n * (a.link_latency_us + kn + wn / bw) / 1e3
        t_c = t_alone + n * (a.link_latency_us + kc + wc / bw) / 1e3
        print(f"| {a.tp} | {gbs:g} | {t_n:.1f} | {t_c:.1f} | {t_n / t_c:.2f}x |")


if __name__ == "__main__":
    main()
