#!/usr/bin/python3
"""tools/plot_parity.py - the loss-parity picture of an experiment made by tools/parity.py.

usage: tools/plot_parity.py RUNDIR [--out FILE.png]   (default: RUNDIR/parity.png)

Top panel: train loss (bias-corrected EMA) and val loss (raw, circles) of every variant;
bottom panel: each variant's loss minus the `none` variant's, with the ±1% band of the
acceptance criterion. Variant colours come from tools/paritylib.py, `none` is black.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paritylib as pl  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description="Plot the losses of a parity experiment.")
    ap.add_argument("rundir")
    ap.add_argument("--out", help="PNG path (default: RUNDIR/parity.png)")
    args = ap.parse_args()
    runs = pl.load_runs(args.rundir)
    out = args.out or os.path.join(args.rundir, "parity.png")
    pl.plot_parity(runs, out, os.path.basename(os.path.normpath(args.rundir)))
    print(f"wrote {out}")


if __name__ == "__main__":
    try:
        main()
    except pl.ToolError as e:
        sys.exit(f"error: {e}")
