#!/usr/bin/env python3
"""tools/bench_ab.py - builds of the kernels timed against each other, side by side.

A kernel change is judged against the build without it, timed in the same command on the
same card (absolute times move by several percent between commands and machines). This
runs the builds' benchmarks in alternating rounds and tabulates them:

  tools/bench_ab.py run [--rounds N] [--out DIR] [--rows REGEX] [--base LABEL] LABEL=COMMAND ...
      runs every COMMAND once per round, in the order given, round after round (A B A B:
      a drift of the card's clocks or temperature falls on every build alike), keeps each
      output as DIR/LABEL_ROUND.txt, then prints the table. A command that fails is
      reported (exit status, last lines) and the others go on; the tool then exits 1.
  tools/bench_ab.py table [--rows REGEX] [--base LABEL] LABEL=FILE ...
      the table of outputs already there; a label given several times has several rounds.

The outputs are build/gpu/bench_compress_gpu's kernel tables (rows of MB, method, op, us,
GB/s and the fraction of the copy measured in the same run) or build/gpu/bench_ops_gpu's op
tables (op, calls, ms per step, share, rate and the fraction of its ceiling, and the step's
median), all of one kind. The table has one row per (MB, method, op) or op, in the order of
the first output that has it: per label the time of each round and the range of its
fraction, and for every label but the base (the first, or --base) the ratio of its median
time to the base's median (below 1: faster). It starts with the machine line of each
label's first output.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

# bench_compress_gpu: "  256  taco G=64 delayed   decompress   149.4   3594.1   0.92"
KERNEL_ROW = re.compile(r"^\s*(\d+)\s+(\S.*?)\s+(\d+\.\d)\s+(\d+\.\d)\s+(\d+\.\d\d)\s*$")
# bench_ops_gpu: "layernorm_backward   25   0.801   2.8%   4020 GB/s   75%" (rate and fraction may be -)
OP_ROW = re.compile(r"^(\S.*?)\s+(\d+)\s+(\d+\.\d{3})\s+\d+\.\d%\s+.*?\s(\d+%|-)\s*$")
OP_STEP = re.compile(r"^step: median (\d+\.\d+) ms")
KINDS = {  # kind: (machine line, unit of the time column, name of the fraction)
    "kernels": (re.compile(r"^bench_compress_gpu \(kernels\): (.*)$"), "us", "vs copy"),
    "ops": (re.compile(r"^bench_ops_gpu: (.*)$"), "ms", "of ceil"),
}


def parse(path):
    """(kind, machine line or None, {row key: (time, fraction or None)}, keys in order) of one output"""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        sys.exit("bench_ab: cannot read %s (%s)" % (path, e.strerror))
    kind = next((k for k, (mre, _, _) in KINDS.items() if any(mre.match(line) for line in lines)), None)
    machine, rows, order = None, {}, []
    for line in lines:
        key = None
        if kind:
            m = KINDS[kind][0].match(line)
            if m and machine is None:
                machine = m.group(1)
        m = KERNEL_ROW.match(line) if kind != "ops" else None
        if m:
            key, val = "%s MB  %s" % (m.group(1), " ".join(m.group(2).split())), (float(m.group(3)), float(m.group(5)))
        m = OP_ROW.match(line) if kind == "ops" else None
        if m:
            key, val = m.group(1), (float(m.group(3)), float(m.group(4)[:-1]) / 100 if m.group(4) != "-" else None)
        m = OP_STEP.match(line) if kind == "ops" else None
        if m:
            key, val = "step (median)", (float(m.group(1)), None)
        if key:
            if key not in rows:
                order.append(key)
            rows[key] = val
    if not rows:
        sys.exit("bench_ab: no benchmark rows in %s (is it a table of bench_compress_gpu or bench_ops_gpu?)" % path)
    return kind or "kernels", machine, rows, order


def pairs(specs, what):
    """[(label, value)] of LABEL=VALUE arguments"""
    out = []
    for s in specs:
        label, sep, value = s.partition("=")
        if not sep or not label or not value or not re.match(r"^[\w.+-]+$", label):
            sys.exit("bench_ab: '%s' is not LABEL=%s (a label of letters, digits, . + - _)" % (s, what))
        out.append((label, value))
    return out


def table(runs, rows_re, base):
    """the markdown table of runs: [(label, path)], a label's paths its rounds in order"""
    labels = []
    for label, _ in runs:
        if label not in labels:
            labels.append(label)
    if base is None:
        base = labels[0]
    if base not in labels:
        sys.exit("bench_ab: --base %s is none of the labels (%s)" % (base, ", ".join(labels)))
    data = {label: [] for label in labels}  # label -> [rows of each round]
    machine, order, kinds = {}, [], set()
    for label, path in runs:
        kind, m, rows, keys = parse(path)
        kinds.add(kind)
        machine.setdefault(label, m)
        data[label].append(rows)
        order += [k for k in keys if k not in order]
    if len(kinds) > 1:
        sys.exit("bench_ab: the outputs mix bench_compress_gpu's and bench_ops_gpu's tables")
    _, unit, frac_name = KINDS[kinds.pop()]
    pick = re.compile(rows_re) if rows_re else None
    out = ["%s: %s" % (label, machine[label] or "(no machine line)") for label in labels]
    head = ["row"] + ["%s %s" % (l, unit) for l in labels] + ["%s %s" % (l, frac_name) for l in labels]
    head += ["%s / %s" % (l, base) for l in labels if l != base]
    out += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in order:
        if pick and not pick.search(key):
            continue
        t = {l: [r[key][0] for r in data[l] if key in r] for l in labels}  # times, us or ms
        fr = {l: [r[key][1] for r in data[l] if key in r and r[key][1] is not None] for l in labels}
        cells = [key]
        cells += [", ".join(("%.1f" if unit == "us" else "%.3f") % u for u in t[l]) or "-" for l in labels]
        cells += [("%.2f-%.2f" % (min(fr[l]), max(fr[l])) if min(fr[l]) != max(fr[l]) else "%.2f" % fr[l][0])
                  if fr[l] else "-" for l in labels]
        for l in labels:
            if l == base:
                continue
            ok = t[l] and t[base] and statistics.median(t[base]) > 0
            cells.append("%.3f" % (statistics.median(t[l]) / statistics.median(t[base])) if ok else "-")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def run(cmds, rounds, outdir, rows_re, base):
    os.makedirs(outdir, exist_ok=True)
    done, failed = [], 0
    for r in range(1, rounds + 1):
        for label, cmd in cmds:
            path = os.path.join(outdir, "%s_%d.txt" % (label, r))
            print("round %d: %s: %s" % (r, label, cmd), flush=True)
            with open(path, "w") as f:
                rc = subprocess.run(cmd, shell=True, stdout=f, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                failed += 1
                with open(path) as f:
                    tail = f.read().splitlines()[-5:]
                print("bench_ab: %s (round %d) failed with exit status %d; its last lines:\n    %s"
                      % (label, r, rc, "\n    ".join(tail)), file=sys.stderr)
            else:
                done.append((label, path))
    if done:
        print(table(done, rows_re, base if base in [l for l, _ in done] else None))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="mode", required=True)
    pr = sub.add_parser("run", help="run the commands in alternating rounds, then tabulate")
    pr.add_argument("--rounds", type=int, default=2)
    pr.add_argument("--out", default="bench_ab.out", help="directory for the outputs (default bench_ab.out)")
    pt = sub.add_parser("table", help="tabulate outputs already there")
    for p in (pr, pt):
        p.add_argument("--rows", default=None, help="only the rows whose name ('MB  method op', or the op) matches this regex")
        p.add_argument("--base", default=None, help="the label the others are divided by (default: the first)")
        p.add_argument("specs", nargs="+", metavar="LABEL=COMMAND" if p is pr else "LABEL=FILE")
    a = ap.parse_args()
    if a.rows:
        try:
            re.compile(a.rows)
        except re.error as e:
            sys.exit("bench_ab: --rows '%s' is not a regular expression (%s)" % (a.rows, e))
    if a.mode == "table":
        print(table(pairs(a.specs, "FILE"), a.rows, a.base))
        return 0
    if a.rounds < 1:
        sys.exit("bench_ab: --rounds must be at least 1")
    cmds = pairs(a.specs, "COMMAND")
    if len({l for l, _ in cmds}) != len(cmds):
        sys.exit("bench_ab: run takes each label once (its rounds come from --rounds)")
    return run(cmds, a.rounds, a.out, a.rows, a.base)


if __name__ == "__main__":
    sys.exit(main())
