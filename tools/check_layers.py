#!/usr/bin/env python3
"""tools/check_layers.py [ROOT] - the project's floors, checked from its #include lines.

The source folders form floors (docs/ARCHITECTURE.md); a file may include a header of
its own folder or of a LOWER floor, never of a higher one, and the two folders of
floor 2 (compress/, data/) stay independent of each other. On top of that:
  - every project include names its folder ("comm/sites.h"), relative to the root,
    and the header exists (so the one include path is the root);
  - no source file (folders below and tools/) is longer than MAX_LINES lines.
tests/ and tools/ sit above every floor and may include anything.
Prints one line per violation and a summary; exit status 1 if there is any.
`make test` runs it (tests/run_tests.sh)."""
import os
import re
import sys

FLOORS = {            # folder -> floor; a higher number may include a lower one
    "train": 5,       # the trainer: loop, config, log, checkpoints
    "model": 4,       # the networks: gpt.c, params
    "comm": 3,        # groups, exchange sites, collectives, transports
    "compress": 2,    # the compressors (CPU reference + CUDA kernels)
    "data": 2,        # shards, loader, tokenizer
    "ops": 1,         # the op backend (CPU + CUDA), device memory
    "common": 0,      # the ground: check macros, bf16
}
ON_TOP = ("tests", "tools")          # may include any floor
SOURCE = (".c", ".h", ".cu", ".cuh", ".cpp")
MAX_LINES = 800
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def sources(root, folders):
    for top in folders:
        for d, subs, files in os.walk(os.path.join(root, top)):
            subs.sort()
            for f in sorted(files):
                if f.endswith(SOURCE):
                    yield os.path.relpath(os.path.join(d, f), root)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = []
    checked = 0
    for path in sources(root, list(FLOORS) + list(ON_TOP)):
        checked += 1
        top = path.split(os.sep)[0]
        with open(os.path.join(root, path), errors="replace") as f:
            lines = f.readlines()
        if len(lines) > MAX_LINES:
            problems.append(f"{path}: {len(lines)} lines (at most {MAX_LINES}: split it along its seams)")
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            to = inc.split("/")[0]
            if "/" not in inc or to not in FLOORS and to not in ON_TOP:
                problems.append(f"{path}:{n}: #include \"{inc}\" does not name a project folder")
                continue
            if not os.path.isfile(os.path.join(root, inc)):
                problems.append(f"{path}:{n}: #include \"{inc}\": no such file")
                continue
            if top in ON_TOP or to == top:
                continue
            if to in ON_TOP:
                problems.append(f"{path}:{n}: includes {inc}: tests/ and tools/ sit above every floor")
            elif FLOORS[to] > FLOORS[top]:
                problems.append(f"{path}:{n}: includes {inc}: {to}/ (floor {FLOORS[to]}) is above "
                                f"{top}/ (floor {FLOORS[top]})")
            elif FLOORS[to] == FLOORS[top]:
                problems.append(f"{path}:{n}: includes {inc}: {top}/ and {to}/ share floor {FLOORS[top]} "
                                f"and stay independent")
    for p in problems:
        print("layering:", p)
    print(f"check_layers: {checked} source files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
