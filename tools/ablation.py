#!/usr/bin/python3
"""tools/ablation.py - every compressor and every TACO ablation on real TP tensors.

usage: tools/ablation.py DUMPDIR [--out docs/ablation.md] [--group-size 64] [--compress build/compress]
       tools/ablation.py --collect CONFIG [--steps 200] [--dump-dir runs/ablation/dumps] [--set k=v ...]
                         [--binary build/train] [--mpirun "mpirun --oversubscribe"] [--out ...]

DUMPDIR holds trainer dumps (*.npy: the local input of each TP exchange, activations for
*.fwd sites and gradients for *.bwd sites). Each one goes through `build/compress roundtrip`
once per row of ROWS (the methods, TACO with each component off, E4M3 vs E5M2); the
markdown table gives, split into forward and backward sites, the mean whole-tensor relative
error, the mean per-row relative error (computed here in numpy: whole-tensor error is
dominated by the loudest rows and hides rows that collapse toward zero), the relative error
of the smaller half of the elements (which shows how a rotation redistributes FP8's error),
the SNR, and the wire bytes per fp32 byte. A second table gives these errors per site.

--collect trains CONFIG for --steps steps (exact exchanges, compress.method=none, so every
method is judged on the same uncompressed tensors) with every site dumped at the last step
into --dump-dir, then builds the table from those dumps.

--allreduce adds the all-reduce path: the ranks' dumps of one site and step (each rank's
local input of that exchange) go through `build/compress allreduce`, the two-shot
all-reduce of comm/collectives.c without MPI, once with the fused recompress (for taco the
sum stays in the rotated domain) and once with --unfused (decode, sum, compress: the order
before 2026-12); the table gives rel_err against the exact sum for both and their ratio.
"""
import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paritylib as pl  # noqa: E402

# (row label, method, format or None for the trainer's per-direction default, extra CLI flags)
ROWS = [
    ("none (fp32)", "none", None, []),
    ("fp8_tensor", "fp8_tensor", None, []),
    ("fp8_group", "fp8_group", None, []),
    ("int8_group", "int8_group", None, []),
    ("taco", "taco", None, []),
    ("taco --no-hadamard", "taco", None, ["--no-hadamard"]),
    ("taco --no-adaptive-scale", "taco", None, ["--no-adaptive-scale"]),
    ("taco --no-dual-scale", "taco", None, ["--no-dual-scale"]),
    ("taco, E4M3 everywhere", "taco", "e4m3", []),
    ("taco, E5M2 everywhere", "taco", "e5m2", []),
]
SITE_TABLE_METHODS = ["fp8_tensor", "fp8_group", "int8_group", "taco"]


def collect(args):
    """Train CONFIG with dumps at the last step; returns the dump directory."""
    cfg = pl.load_json(args.collect)
    sets = [pl.parse_set(s) for s in args.set]
    tp = pl.as_int(pl.config_get(cfg, sets, "parallel.tp", 1), "parallel.tp")
    np_ranks = tp * pl.as_int(pl.config_get(cfg, sets, "parallel.dp", 1), "parallel.dp")
    if tp < 2:
        raise pl.ToolError(f"{args.collect}: parallel.tp is 1, so there are no TP exchanges to dump (--set parallel.tp=2)")
    if not os.access(args.binary, os.X_OK):
        raise pl.ToolError(f"trainer '{args.binary}' is not an executable (run make, or pass --binary)")
    os.makedirs(args.dump_dir, exist_ok=True)
    stale = glob.glob(os.path.join(args.dump_dir, "*.npy"))
    if stale:
        print(f"removing {len(stale)} old dumps from {args.dump_dir}")
        for f in stale:
            os.remove(f)
    logdir = os.path.join(os.path.dirname(os.path.normpath(args.dump_dir)) or ".", "train")
    os.makedirs(logdir, exist_ok=True)
    cmd = [*shlex.split(args.mpirun), "-np", str(np_ranks), args.binary, args.collect]
    for o in [*args.set, f"train.steps={args.steps}", "compress.method=none", f"compress.dump_step={args.steps - 1}",
              "compress.dump_sites=all", f"compress.dump_dir={args.dump_dir}", f"log.dir={logdir}",
              "train.sample_every=0"]:
        cmd += ["--set", o]
    print(f"collecting dumps: {shlex.join(cmd)}", flush=True)
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    with open(os.path.join(logdir, "stdout.log"), "w") as f:
        f.write(p.stdout)
    if p.returncode != 0:
        raise pl.ToolError(f"the collection run failed (exit {p.returncode}); last lines:\n" +
                           "".join(p.stdout.splitlines(True)[-10:]))
    print(f"training + dumps took {time.time() - t0:.0f} s")
    return args.dump_dir


def evaluate(dumpdir, binary, group_size):
    """Roundtrip every dump through every row. Returns (files, zero, results) with
    results[label][file] = dict(rel, snr, rows, small, wire, bytes_in, saturated).
    All-zero dumps are left out (zero: their names): their relative error is undefined. The
    vocab-parallel embedding gives one, since byte-level text never looks up the upper half
    of the vocabulary, so that rank's partial sum is all zeros."""
    files = sorted(glob.glob(os.path.join(dumpdir, "*.npy")))
    if not files:
        raise pl.ToolError(f"no .npy dumps in '{dumpdir}' (make them with --collect CONFIG, or compress.dump_*)")
    results = {label: {} for label, _, _, _ in ROWS}
    zero = [f for f in files if not np.any(pl.load_dump(f))]
    files = [f for f in files if f not in zero]
    for path in files:
        x = pl.load_dump(path)
        site = pl.dump_site(path)[0]
        for label, method, fmt, flags in ROWS:
            y, info = pl.roundtrip(binary, x, method, fmt or pl.default_format(site), group_size, flags)
            rows = pl.row_errors(x, y)
            results[label][path] = {
                "rel": info["rel_err"],
                "snr": info["snr_db"] if info["snr_db"] is not None else float("inf"),
                "rows": float(rows.mean()) if rows.size else 0.0,
                "small": pl.small_half_error(x, y),
                "wire": info["bytes_wire"],
                "bytes_in": info["bytes_in"],
                "saturated": info["saturated"],
            }
        print(f"  {os.path.basename(path)}: {x.shape[0]}x{x.shape[1]}, taco rel_err "
              f"{results['taco'][path]['rel']:.4f}, per-row {results['taco'][path]['rows']:.4f}", flush=True)
    return files, zero, results


def allreduce_errors(dumpdir, binary, group_size):
    """results[label][site.step] = (rel_err fused, rel_err unfused) of the two-shot all-reduce
    of the ranks' dumps of that site and step. Sites with fewer than two ranks' dumps, or
    with an all-zero exact sum, are left out."""
    sites = {}
    for f in sorted(glob.glob(os.path.join(dumpdir, "*.npy"))):
        site, step, rank = pl.dump_site(f)
        if rank is not None:
            sites.setdefault((site, step), {})[rank] = f
    results = {label: {} for label, _, _, _ in ROWS}
    with tempfile.TemporaryDirectory() as tmp:
        for (site, step), ranks in sorted(sites.items()):
            if len(ranks) < 2:
                continue
            xs = [pl.load_dump(ranks[r]) for r in sorted(ranks)]
            if not np.any(sum(x.astype(np.float64) for x in xs)):
                continue
            ins = []
            for r, x in enumerate(xs):
                ins += ["--in", os.path.join(tmp, f"x{r}.f32")]
                x.astype("<f4").tofile(ins[-1])
            for label, method, fmt, flags in ROWS:
                errs = []
                for order in ([], ["--unfused"]):
                    cmd = [binary, "allreduce", "--method", method, "--format", fmt or pl.default_format(site),
                           "--group-size", str(group_size), *flags, *order, *ins, "--out", os.path.join(tmp, "y.f32")]
                    p = subprocess.run(cmd, capture_output=True, text=True)
                    if p.returncode != 0:
                        raise pl.ToolError(f"{shlex.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()}")
                    errs.append(json.loads(p.stdout)["rel_err"] or 0.0)
                results[label][f"{site}.step{step}"] = tuple(errs)
            print(f"  all-reduce {site} step {step} ({len(xs)} ranks): taco rel_err "
                  f"{results['taco'][f'{site}.step{step}'][0]:.5f} (before: "
                  f"{results['taco'][f'{site}.step{step}'][1]:.5f})", flush=True)
    return results


def allreduce_table(results, group_size):
    keys = sorted({k for r in results.values() for k in r})
    fwd = [k for k in keys if ".fwd." in k]
    bwd = [k for k in keys if ".bwd." in k]
    lines = ["", "## The two-shot all-reduce (rel_err against the exact sum)", "",
             f"{len(keys)} exchanges (the ranks' dumps of one site), each through `build/compress allreduce` at "
             f"G={group_size}: the reduce-scatter's encode, the middle step, the all-gather's decode. "
             "fused = decompress_sum_recompress (taco: the sum stays in the rotated domain); before = "
             "`--unfused`, decode + sum + compress. Means over the exchanges.", "",
             "| method | fwd fused | fwd before | bwd fused | bwd before | fused / before |", "|---|---|---|---|---|---|"]
    for label, _, _, _ in ROWS:
        res = results[label]
        cells = [label]
        for group in (fwd, bwd):
            for i in (0, 1):
                cells.append(f"{np.mean([res[k][i] for k in group]):.5f}" if group else "-")
        a, b = (sum(res[k][i] for k in keys) for i in (0, 1))
        cells.append(f"{a / b:.4f}" if b > 0 else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fmt_snr(v):
    return "∞" if v == float("inf") else f"{v:.1f}"


def table(files, zero, results, dumpdir, group_size):
    fwd = [f for f in files if pl.dump_site(f)[0].endswith(".fwd")]
    bwd = [f for f in files if pl.dump_site(f)[0].endswith(".bwd")]
    shapes = sorted({tuple(np.load(f, mmap_mode="r").shape) for f in files})
    steps = sorted({pl.dump_site(f)[1] for f in files if pl.dump_site(f)[1] is not None})
    # --collect leaves the training run's effective config next to the dumps
    cfg_path = os.path.join(os.path.dirname(os.path.normpath(dumpdir)) or ".", "train", "config.json")
    origin = ""
    if os.path.isfile(cfg_path):
        run = pl.load_json(cfg_path, "effective config")
        m, t, par = run["model"], run["train"], run["parallel"]
        origin = (f" Dumped by a run of L{m['n_layer']} d{m['d_model']} h{m['n_head']}, B{t['batch_size']} "
                  f"T{t['seq_len']}, tp={par['tp']}, {t['steps']} steps, compress.method={run['compress']['method']} "
                  f"(`{cfg_path}`).")
    lines = [
        "# Compression ablation on dumped TP tensors", "",
        f"Made {time.strftime('%Y-%m-%d')} by `tools/ablation.py`.{origin}", "",
        f"{len(files)} tensors from `{dumpdir}` ({len(fwd)} forward/activation, {len(bwd)} backward/gradient; "
        f"shapes {', '.join('x'.join(map(str, s)) for s in shapes)}; step {', '.join(map(str, steps)) or '?'}), "
        f"each compressed as one chunk by `build/compress roundtrip` at G={group_size}. Formats: E4M3 in both "
        "directions (the trainer's default) unless the row says otherwise; int8_group is int8. "
        "rel_err = ||x_hat-x||/||x|| per tensor, row err = mean over rows of ||row_hat-row||/||row||, "
        "small-half err = ||x_hat-x||/||x|| over the elements below the tensor's median |x|, "
        "SNR = 10 log10(||x||²/||x_hat-x||²) per tensor; every column is the mean over tensors." +
        (f" Left out as all zeros: {', '.join(os.path.basename(f) for f in zero)}." if zero else ""), "",
        "| method | fwd rel_err | fwd row err | fwd small-half err | fwd SNR dB | bwd rel_err | bwd row err "
        "| bwd small-half err | bwd SNR dB | wire / fp32 | saturated |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, _, _, _ in ROWS:
        res = results[label]
        cells = [label]
        for group in (fwd, bwd):
            if not group:
                cells += ["-"] * 4
                continue
            cells += [f"{np.mean([res[f]['rel'] for f in group]):.4f}",
                      f"{np.mean([res[f]['rows'] for f in group]):.4f}",
                      f"{np.mean([res[f]['small'] for f in group]):.4f}",
                      fmt_snr(np.mean([res[f]['snr'] for f in group]))]
        wire = sum(res[f]["wire"] for f in files) / sum(res[f]["bytes_in"] for f in files)
        cells += [f"{wire:.4f} ({1 / wire:.2f}x)", str(sum(res[f]["saturated"] for f in files))]
        lines.append("| " + " | ".join(cells) + " |")

    # per site: rel_err / row err / small-half err, averaged over the ranks' dumps of that site
    sites = {}
    for f in files:
        sites.setdefault(pl.dump_site(f)[0], []).append(f)
    order = sorted(sites, key=lambda s: (s.endswith(".bwd"), s.split(".")[0] == "lm_head", s))
    lines += ["", "## Per site: rel_err / row err / small-half err (mean over the ranks' dumps)", "",
              "| site | " + " | ".join(SITE_TABLE_METHODS) + " |", "|---|" + "---|" * len(SITE_TABLE_METHODS)]
    for s in order:
        cells = [" / ".join(f"{np.mean([results[m][f][k] for f in sites[s]]):.4f}" for k in ("rel", "rows", "small"))
                 for m in SITE_TABLE_METHODS]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description="Compression ablation on dumped TP tensors.")
    ap.add_argument("dumpdir", nargs="?")
    ap.add_argument("--collect", metavar="CONFIG", help="train CONFIG and dump every site first")
    ap.add_argument("--steps", type=int, default=200, help="training steps of --collect (default: %(default)s)")
    ap.add_argument("--dump-dir", default="runs/ablation/dumps", help="where --collect dumps (default: %(default)s)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override for --collect")
    ap.add_argument("--binary", default="build/train")
    ap.add_argument("--mpirun", default="mpirun --oversubscribe")
    ap.add_argument("--compress", default="build/compress", help="the roundtrip CLI (default: %(default)s)")
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--out", default="docs/ablation.md")
    ap.add_argument("--allreduce", action="store_true", help="also the two-shot all-reduce of the ranks' dumps")
    args = ap.parse_args()
    if bool(args.dumpdir) == bool(args.collect):
        ap.error("give either DUMPDIR or --collect CONFIG")
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    dumpdir = collect(args) if args.collect else args.dumpdir
    if not os.path.isdir(dumpdir):
        raise pl.ToolError(f"dump directory '{dumpdir}' does not exist")
    files, zero, results = evaluate(dumpdir, args.compress, args.group_size)
    if not files:
        raise pl.ToolError(f"every dump in '{dumpdir}' is all zeros")
    md = table(files, zero, results, dumpdir, args.group_size)
    if args.allreduce:
        md += allreduce_table(allreduce_errors(dumpdir, args.compress, args.group_size), args.group_size)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(md)
    print(md)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    try:
        main()
    except pl.ToolError as e:
        sys.exit(f"error: {e}")
