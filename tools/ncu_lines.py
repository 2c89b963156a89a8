#!/usr/bin/env python3
"""tools/ncu_lines.py - where a kernel's instructions go, per source line.

Nsight Compute's source page counts the instructions each SASS line executed;
nvdisasm -g says which source line each SASS line came from (inlined code
keeps its own file and line). Joined, they give executed instructions per
element per source line: the profile that showed where the compression
kernels spend their issue slots (compress/CUDA.md, section 2).

On the GPU machine, with a -lineinfo build of the benchmark:

  make BUILD=build-li NVCCFLAGS="-O3 -std=c++17 -lineinfo -gencode arch=compute_90,code=sm_90 \\
      -DOPS_BF16 -I. $(mpicc --showme:compile)" build-li/gpu/bench_compress_gpu
  (cd /tmp && cuobjdump -xelf all $OLDPWD/build-li/gpu/bench_compress_gpu)
  nvdisasm -g -c /tmp/compress_cuda.sm_90.cubin > lines.txt
  ncu --section SourceCounters -k regex:k_compress -c 1 --page source --print-source sass --csv \\
      build-li/gpu/bench_compress_gpu --sizes 64 --reps 1 --only 'taco G=64 delayed' > counts.csv

then, anywhere:

  tools/ncu_lines.py lines.txt counts.csv KERNEL_SUFFIX ELEMENTS [--top N] [--ops]

KERNEL_SUFFIX: the end of the kernel's mangled name as nvdisasm prints it
(e.g. k_compressILi0ELi0ELb0ELb1EEEvNS_5CodecENS_7CLaunchE); ELEMENTS: the
elements the profiled call processed (64 MB of bf16: 33554432). --ops adds
the per-opcode totals. The counts CSV's first address is the kernel's
offset 0, which is how the two files line up.
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


def sass_lines(path, suffix):
    """offset -> (file:line, SASS text) for the function whose name ends with suffix"""
    loc, cur, inside = {}, "?", False
    head = re.compile(r"^//-+ \.text\.(\S+)")
    fileline = re.compile(r'//## File "([^"]+)", line (\d+)')
    instr = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*$")
    with opener(path) as f:
        for line in f:
            m = head.match(line)
            if m:
                inside = m.group(1).endswith(suffix)
                continue
            if not inside:
                continue
            m = fileline.search(line)
            if m:
                cur = "%s:%s" % (os.path.basename(m.group(1)), m.group(2))
                continue
            m = instr.match(line)
            if m:
                loc[int(m.group(1), 16)] = (cur, m.group(2))
    return loc


def counts(path):
    """[(address, warp instructions executed, SASS text)] from ncu's source-page CSV"""
    with opener(path) as f:
        rows = list(csv.reader(f))
    hdr = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if hdr is None:
        sys.exit("ncu_lines: %s has no source-page table (ncu --page source --csv)" % path)
    col = rows[hdr].index("Instructions Executed")
    src = rows[hdr].index("Source")
    out = []
    for r in rows[hdr + 1:]:
        if len(r) <= col or not r[col].strip():
            continue
        try:
            out.append((int(r[0], 16), float(r[col].replace(",", "")), r[src].strip()))
        except ValueError:
            continue
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lines")
    ap.add_argument("counts")
    ap.add_argument("kernel_suffix")
    ap.add_argument("elements", type=float)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--ops", action="store_true")
    a = ap.parse_args()
    loc = sass_lines(a.lines, a.kernel_suffix)
    if not loc:
        sys.exit("ncu_lines: no function ending in %s in %s" % (a.kernel_suffix, a.lines))
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
