#!/usr/bin/env python3
"""tools/sass_waits.py - what each SASS instruction of a kernel waits for.

Since Volta, every 128-bit instruction carries its scheduling in the top bits
of its second 64-bit word (bit 41 of that word onward): a stall count (4 bits),
the yield bit (printed Y when set), the dependency barrier (0-5, or 7 for none) that a variable-latency
instruction sets when it writes its result (3 bits) and when it has read its
operands (3 bits), and a mask of the barriers the instruction waits on before
it issues (6 bits). ptxas chooses the barriers, and may give one barrier to
loads of different kinds; an instruction that needs only a shared-memory load
then also waits for a global load that happens to share it. That is how the
row join in compress/cuda_unit_io.cuh's rows_take was found (compress/CUDA.md,
section 1, "Memory"): Nsight Compute says that a warp waited, these bits say
on what.

Inputs: the cubin (its raw bytes: from `nvcc -cubin` or tools/kernel_cubin.sh, or `cuobjdump -xelf all`
on a binary), and the text of the same code with mnemonics (`nvdisasm -g -c`,
as tools/ncu_lines.py takes it: the two must come from one build). Optional:
ncu's source-page CSV (ncu_lines.py's recipe) for executed instructions and
stall samples per instruction.

  tools/sass_waits.py CUBIN LISTING KERNEL_SUFFIX [--range LO:HI] [--counts CSV]
  tools/sass_waits.py CUBIN LISTING KERNEL_SUFFIX --global-waits [--counts CSV]
  tools/sass_waits.py CUBIN LISTING KERNEL_SUFFIX --reaching OFFSET [--counts CSV]
  tools/sass_waits.py CUBIN LISTING KERNEL_SUFFIX --global-waits --flow [--counts CSV]
  tools/sass_waits.py CUBIN - KERNEL_SUFFIX --opcodes REF_CUBIN:REF_LISTING ...

The first form prints every instruction of the range (hex offsets) as
`offset [executed samples] stall W<set> R<set> w<waits> text`. --global-waits
lists instead the instructions that wait on a barrier whose most recent setter
before them, in address order, is a global or generic load (LD, LDG), with that
setter; with --counts, only the executed ones, most stall samples first. Address
order is not control flow, so a hit is a lead to read in the first form.

--reaching follows control flow instead (branch targets from the listing's
labels): for each barrier the instruction at OFFSET waits on, every instruction
that may have set it since the last wait on it, on any path that reaches OFFSET
(with --counts, through executed instructions only). A barrier counts its
setters: the wait lasts until the slowest of them is done, which is how a use
of a value loaded a step earlier can wait for loads issued just before it
(compress/CUDA.md section 2, "The scale's wait"). --global-waits --flow lists
the instructions for which any such setter is a global load.

Without nvdisasm (this machine has only nvcc and ptxas), LISTING "-" and
--opcodes name an older cubin and its listing, of the same kernel, from a
machine that has it: the instruction names (no operands) are then read off the
opcode field (the low 12 bits of the first word, one name each in the sm_90a
code seen so far), enough for --global-waits and for reading the wait bits of
a variant built here with tools/kernel_cubin.sh.
"""
import argparse
import os
import re
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ncu_lines  # noqa: E402  (the listing and CSV readers)


def kernel_text(cubin, suffix):
    """the bytes of the .text section of the function whose name ends with suffix"""
    try:
        out = subprocess.run(["readelf", "-SW", cubin], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("sass_waits: readelf -SW %s failed (%s); binutils' readelf reads cubins" % (cubin, e))
    for line in out.splitlines():
        m = re.search(r"\]\s+\.text\.(\S+)\s+PROGBITS\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m and m.group(1).endswith(suffix):
            off, size = int(m.group(2), 16), int(m.group(3), 16)
            with open(cubin, "rb") as f:
                f.seek(off)
                return f.read(size)
    sys.exit("sass_waits: no .text section ending in %s in %s" % (suffix, cubin))


def control(word_hi):
    """(stall, yield, write barrier, read barrier, wait mask) of an instruction's high word"""
    c = word_hi >> 41
    return c & 0xF, (c >> 4) & 1, (c >> 5) & 7, (c >> 8) & 7, (c >> 11) & 0x3F


def fmt_ctrl(stall, yld, wb, rb, wm):
    waits = "".join(str(b) for b in range(6) if wm >> b & 1)
    return "st%-2d %s %-2s %-2s %-7s" % (stall, "Y" if yld else " ", "W%d" % wb if wb != 7 else "",
                                         "R%d" % rb if rb != 7 else "", "w" + waits if waits else "")


def words(text):
    """an instruction's text split into words, its guard predicate (@P0, @!UP1) left out"""
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()


def names_from_opcodes(code, ref_cubin, ref_listing, suffix):
    """offset -> ("?", instruction name) for code, named by the opcodes of a reference build"""
    ref = kernel_text(ref_cubin, suffix)
    ref_loc = ncu_lines.sass_lines(ref_listing, suffix)
    name = {}
    for off, (_, text) in ref_loc.items():
        op = words(text)
        if op and off + 16 <= len(ref):
            name[struct.unpack_from("<Q", ref, off)[0] & 0xFFF] = op[0].split(".")[0]
    loc = {}
    for off in range(0, len(code), 16):
        opc = struct.unpack_from("<Q", code, off)[0] & 0xFFF
        loc[off] = ("?", name.get(opc, "op%03x" % opc))
    return loc


def listing_labels(path, suffix):
    """label -> offset of the instruction that follows it, in the function whose name ends with suffix"""
    labels, pending = {}, []
    for line in ncu_lines.function_lines(path, suffix):
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            pending.append(m.group(1))
            continue
        m = ncu_lines.INSTR.match(line)
        if m:
            for lab in pending:
                labels[lab] = int(m.group(1), 16)
            pending = []
    return labels


def predecessors(loc, labels, size):
    """offset -> offsets that may run just before it (fall-through and branches)"""
    pred = {off: [] for off in range(0, size, 16)}
    for off in range(0, size, 16):
        text = loc[off][1]
        op = words(text)
        name = op[0] if op else ""
        target = re.search(r"\((\.L_x_\d+)\)", text)
        if name.startswith("BRA") and target and target.group(1) in labels:
            pred[labels[target.group(1)]].append(off)
        # an unguarded plain branch, exit or return never falls through (BRA.DIV does)
        stops = name in ("BRA", "EXIT", "RET", "RET.REL", "RET.ABS") or name.startswith(("BRX", "JMX"))
        if (text.startswith("@") or not stops) and off + 16 < size:
            pred[off + 16].append(off)
    return pred


def reaching_setters(off, b, ctrl, pred, executed):
    """instructions that may have set barrier b (as write or read barrier) since its last wait, on paths to off"""
    found, seen, frontier = set(), {off}, list(pred[off])  # walked backwards, depth first
    while frontier:
        y = frontier.pop()
        if y in seen or (executed and executed.get(y, 0) <= 0):
            continue
        seen.add(y)
        _, _, wb, rb, wm = ctrl[y // 16]
        if wb == b or rb == b:
            found.add(y)
        if not wm >> b & 1:  # a wait on b drains it: what came before is done
            frontier.extend(pred[y])
    return sorted(found)


def is_global_load(text):
    op = words(text)
    return bool(op) and re.match(r"^(LD|LDG)(\.|$)", op[0]) is not None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cubin")
    ap.add_argument("listing")
    ap.add_argument("kernel_suffix")
    ap.add_argument("--range", default=None, help="LO:HI, hex offsets")
    ap.add_argument("--counts", default=None, help="ncu source-page CSV of the same build")
    ap.add_argument("--global-waits", action="store_true")
    ap.add_argument("--opcodes", default=None, help="REF_CUBIN:REF_LISTING, with LISTING -")
    ap.add_argument("--reaching", default=None, help="OFFSET (hex): the setters each of its waits may wait for")
    ap.add_argument("--flow", action="store_true", help="with --global-waits: setters by control flow")
    a = ap.parse_args()
    if (a.reaching or a.flow) and a.listing == "-":
        sys.exit("sass_waits: --reaching and --flow need the listing (its labels are the branch targets)")
    code = kernel_text(a.cubin, a.kernel_suffix)
    if a.listing == "-":
        if not a.opcodes or ":" not in a.opcodes:
            sys.exit("sass_waits: LISTING - needs --opcodes REF_CUBIN:REF_LISTING")
        ref_cubin, ref_listing = a.opcodes.split(":", 1)
        loc = names_from_opcodes(code, ref_cubin, ref_listing, a.kernel_suffix)
    else:
        loc = ncu_lines.sass_lines(a.listing, a.kernel_suffix)
    if len(loc) != len(code) // 16:
        sys.exit("sass_waits: the listing has %d instructions and the cubin %d: not one build"
                 % (len(loc), len(code) // 16))
    executed, samples = {}, {}
    if a.counts:
        cnt = ncu_lines.counts(a.counts)
        base = cnt[0][0]
        executed = {addr - base: n for addr, n, _ in cnt}
        samples = {addr - base: sum(r.values()) for addr, r in ncu_lines.stall_samples(a.counts)}
    ctrl = [control(struct.unpack_from("<QQ", code, off)[1]) for off in range(0, len(code), 16)]

    def line(off):
        extra = " %8.0f %5.0f" % (executed.get(off, 0), samples.get(off, 0)) if a.counts else ""
        return "%05x%s %s %-24s %s" % (off, extra, fmt_ctrl(*ctrl[off // 16]), loc[off][0], loc[off][1])

    if a.reaching or a.flow:
        pred = predecessors(loc, listing_labels(a.listing, a.kernel_suffix), len(code))
    if a.reaching:
        off = int(a.reaching, 16)
        print(line(off))
        for b in range(6):
            if ctrl[off // 16][4] >> b & 1:
                for y in reaching_setters(off, b, ctrl, pred, executed):
                    print("      barrier %d may be set by %s" % (b, line(y)))
        return
    if not a.global_waits:
        lo, hi = 0, len(code) - 16
        if a.range:
            lo, hi = (int(x, 16) for x in a.range.split(":"))
        for off in range(lo, min(hi, len(code) - 16) + 1, 16):
            print(line(off))
        return
    last, hits = {}, []
    for off in range(0, len(code), 16):
        _, _, wb, _, wm = ctrl[off // 16]
        for b in range(6):
            if not wm >> b & 1 or (a.counts and executed.get(off, 0) <= 0):
                continue
            if a.flow:
                hits += [(off, b, y) for y in reaching_setters(off, b, ctrl, pred, executed) if is_global_load(loc[y][1])]
            elif b in last and is_global_load(loc[last[b]][1]):
                hits.append((off, b, last[b]))
        if wb != 7:
            last[wb] = off
    if a.counts:
        hits.sort(key=lambda h: (-samples.get(h[0], 0), h[0]))
    shown = None
    for off, b, setter in hits:
        if off != shown:
            print(line(off))
            shown = off
        print("      waits on barrier %d, %s %05x: %s" % (b, "may be set by" if a.flow else "last set by", setter,
                                                       loc[setter][1]))
    print("%d instructions wait on a barrier %s a global load" % (len({h[0] for h in hits}),
                                                                  "that may be set by" if a.flow else "last set by"))


if __name__ == "__main__":
    main()
