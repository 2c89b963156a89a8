#!/usr/bin/python3
"""tools/parity_summary.py - the summary table of an experiment made by tools/parity.py.

usage: tools/parity_summary.py RUNDIR     writes RUNDIR/summary.md and RUNDIR/summary.csv

One row per variant directory of RUNDIR: final val loss and its difference to `none`, wire
bytes and time per step, mean per-site relative error, saturations, and whether the run
diverged. A missing or corrupt log.jsonl is an error that names the file (exit 1).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paritylib as pl  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description="Summarize a parity experiment into summary.md and summary.csv.")
    ap.add_argument("rundir")
    args = ap.parse_args()
    rows = pl.write_summary(args.rundir, pl.load_runs(args.rundir))
    print(pl.summary_table(rows))
    print(f"wrote {os.path.join(args.rundir, 'summary.md')} and {os.path.join(args.rundir, 'summary.csv')}")


if __name__ == "__main__":
    try:
        main()
    except pl.ToolError as e:
        sys.exit(f"error: {e}")
