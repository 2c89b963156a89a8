#!/usr/bin/env python3
"""tools/ncu_lines.py - where a kernel's instructions go, per source line.

Nsight Compute's source page counts the instructions each SASS line executed;
nvdisasm -g says which source line each SASS line came from (inlined code
keeps its own file and line). Joined, they give executed instructions per
element per source line: the profile that showed where the compression
kernels spend their issue slots (compress/CUDA.md, section 2).

On the GPU machine, with a -lineinfo build of the benchmark:

  make BUILD=build-li CUDA_ARCH="-gencode arch=compute_90a,code=sm_90a -lineinfo" \\
      build-li/gpu/bench_compress_gpu
  (cd /tmp && cuobjdump -xelf all $OLDPWD/build-li/gpu/bench_compress_gpu)
  nvdisasm -g -c /tmp/compress_cuda.sm_90a.cubin > lines.txt
  ncu --kernel-name-base mangled -k regex:k_decompressILi0ELi3E --launch-skip 2 -c 1 \\
      --section SourceCounters --page source --print-source sass --csv \\
      build-li/gpu/bench_compress_gpu --sizes 64 --reps 1 --only 'taco G=64 delayed' > counts.csv

(-k with the mangled name's start picks one template instance, here the fused
recompress; --launch-skip 2 the third launch, past the first warm-up calls.)
then, anywhere:

  tools/ncu_lines.py lines.txt counts.csv KERNEL_SUFFIX ELEMENTS [--top N] [--ops] [--stalls]

KERNEL_SUFFIX: the end of the kernel's mangled name as nvdisasm prints it
(e.g. k_compressILi0ELi0ELb0ELb1EEEvNS_5CodecENS_7CLaunchE); ELEMENTS: the
elements the profiled call processed (64 MB of bf16: 33554432). --ops adds
the per-opcode totals; --stalls the warp-state samples instead: their
reasons over the kernel, and the source lines where warps waited most, each
with its leading reasons (a wait shows at the instruction that needs the
value, so a load's latency lands on its first use). The counts CSV's first
address is the kernel's offset 0, which is how the two files line up.
"""
import argparse
import collections
import csv
import gzip
import os
import re
import sys


def opener(path):
    return gzip.open(path, "rt", errors="replace") if path.endswith(".gz") else open(path, errors="replace")


def function_lines(path, suffix):
    """the lines of an nvdisasm listing inside the function whose name ends with suffix"""
    head = re.compile(r"^//-+ \.text\.(\S+)")
    inside = False
    with opener(path) as f:
        for line in f:
            m = head.match(line)
            if m:
                inside = m.group(1).endswith(suffix)
            elif inside:
                yield line


INSTR = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*$")  # an instruction line: offset, text


def sass_lines(path, suffix):
    """offset -> (file:line, SASS text) for the function whose name ends with suffix"""
    loc, cur = {}, "?"
    fileline = re.compile(r'//## File "([^"]+)", line (\d+)')
    for line in function_lines(path, suffix):
        m = fileline.search(line)
        if m:
            cur = "%s:%s" % (os.path.basename(m.group(1)), m.group(2))
            continue
        m = INSTR.match(line)
        if m:
            loc[int(m.group(1), 16)] = (cur, m.group(2))
    return loc


def source_table(path):
    """the header and the rows of ncu's source-page table in the CSV at path"""
    with opener(path) as f:
        rows = list(csv.reader(f))
    hdr = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if hdr is None:
        sys.exit("ncu_lines: %s has no source-page table (ncu --page source --csv)" % path)
    return rows[hdr], rows[hdr + 1:]


def counts(path):
    """[(address, warp instructions executed, SASS text)] from ncu's source-page CSV"""
    header, rows = source_table(path)
    col = header.index("Instructions Executed")
    src = header.index("Source")
    out = []
    for r in rows:
        if len(r) <= col or not r[col].strip():
            continue
        try:
            out.append((int(r[0], 16), float(r[col].replace(",", "")), r[src].strip()))
        except ValueError:
            continue
    return out


def stall_samples(path):
    """[(address, {reason: samples})] from the same CSV's stall_* columns (all samples)"""
    header, rows = source_table(path)
    cols = [(i, c[len("stall_"):]) for i, c in enumerate(header) if c.startswith("stall_") and "Not Issued" not in c]
    if not cols:
        sys.exit("ncu_lines: %s has no stall_* columns (ncu --section SourceCounters)" % path)
    out = []
    for r in rows:
        try:
            addr = int(r[0], 16)
        except (ValueError, IndexError):
            continue
        out.append((addr, {name: float(r[i].replace(",", "") or 0) for i, name in cols if i < len(r)}))
    return out


def print_stalls(loc, path, top):
    samples = stall_samples(path)
    base = samples[0][0]
    total, per_line = collections.Counter(), collections.defaultdict(collections.Counter)
    for addr, reasons in samples:
        where = loc.get(addr - base, ("?", ""))[0]
        for name, v in reasons.items():
            total[name] += v
            per_line[where][name] += v
    n = sum(total.values())
    if n == 0:
        sys.exit("ncu_lines: no stall samples in %s" % path)
    print("%.0f warp-state samples" % n)
    for name, v in total.most_common(12):
        print("%6.1f%%  %s" % (100 * v / n, name))
    print("\nwhere warps waited (share of all samples, the line's leading reasons):")
    ranked = sorted(per_line.items(), key=lambda kv: -sum(kv[1].values()))[:top]
    for where, reasons in ranked:
        v = sum(reasons.values())
        lead = ", ".join("%s %.0f%%" % (k, 100 * x / v) for k, x in reasons.most_common(3))
        print("%6.1f%%  %-28s %s" % (100 * v / n, where, lead))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lines")
    ap.add_argument("counts")
    ap.add_argument("kernel_suffix")
    ap.add_argument("elements", type=float)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--ops", action="store_true")
    ap.add_argument("--stalls", action="store_true")
    a = ap.parse_args()
    loc = sass_lines(a.lines, a.kernel_suffix)
    if not loc:
        sys.exit("ncu_lines: no function ending in %s in %s" % (a.kernel_suffix, a.lines))
    if a.stalls:
        print_stalls(loc, a.counts, a.top)
        return
    cnt = counts(a.counts)
    if not cnt:
        sys.exit("ncu_lines: no counts in %s" % a.counts)
    base = cnt[0][0]
    per_line, per_op, unmatched = collections.Counter(), collections.Counter(), 0
    for addr, n, text in cnt:
        v = n * 32 / a.elements  # warp instructions -> thread instructions per element
        where = loc.get(addr - base)
        if where is None:
            unmatched += 1
        per_line[where[0] if where else "?"] += v
        op = re.sub(r"^@!?U?P\w+\s+", "", text).split()
        per_op[op[0].split(".")[0] if op else "?"] += v
    print("%.2f instructions per element (%d SASS lines without a source line)" % (sum(per_line.values()), unmatched))
    for k, v in per_line.most_common(a.top):
        print("%7.3f  %s" % (v, k))
    if a.ops:
        print("\nper opcode:")
        for k, v in per_op.most_common(a.top):
            print("%7.3f  %s" % (v, k))


if __name__ == "__main__":
    main()
