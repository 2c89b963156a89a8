#!/usr/bin/python3
"""tools/plot_hist.py - what a TP exchange's tensor looks like to the compressors.

usage: tools/plot_hist.py DUMP.npy [--group-size 64] [--format e4m3|e5m2] [--out FILE.png]
                          [--compress build/compress]

DUMP.npy is a trainer dump (compress.dump_step / dump_sites / dump_dir): the local input of
one exchange, float32 (B*T, C). Four panels, log-scale counts:
  1. values in units of their RMS, before and after TACO's adaptive-scale + Hadamard
     transform (computed in numpy exactly as compress/taco.c does), with a Gaussian of
     the same RMS: the raw tensor is dense near zero with a few large values (heavy tails,
     high kurtosis); the rotated groups are close to Gaussian;
  2. magnitudes relative to the tensor's max (log10): how far below the amax the values
     sit, i.e. where a single per-tensor FP8 scale puts them (E4M3 edges marked);
  3. the reconstruction error of fp8_tensor, fp8_group, int8_group and taco
     (build/compress roundtrip), in units of the input's RMS;
  4. the per-row relative error of each method, which shows rows that a method flushes
     toward zero (the whole-tensor error hides them).
The format defaults to the trainer's: E4M3 for *.fwd sites, E5M2 for *.bwd sites.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paritylib as pl  # noqa: E402

METHODS = ["fp8_tensor", "fp8_group", "int8_group", "taco"]
# (max, smallest normal, smallest subnormal) of each format (compress/README.md): with the
# tensor's amax scaled onto max (fp8_tensor), values below the smallest normal lose precision
# and values below half the smallest subnormal round to zero.
FP8_RANGE = {"e4m3": (448.0, 2.0 ** -6, 2.0 ** -9), "e5m2": (57344.0, 2.0 ** -14, 2.0 ** -16)}


def kurtosis(v):
    """Pearson kurtosis (3 for a Gaussian): large for a dense-near-zero, heavy-tailed tensor."""
    v = v.astype(np.float64) - v.mean()
    return float(np.mean(v ** 4) / np.mean(v ** 2) ** 2)


def rms(v):
    return float(np.sqrt(np.mean(v.astype(np.float64) ** 2)))


def main():
    ap = argparse.ArgumentParser(description="Histograms of a dumped TP tensor before/after the TACO transform "
                                             "and of each compressor's reconstruction error.")
    ap.add_argument("dump")
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--format", choices=["e4m3", "e5m2"], help="default: e4m3 for *.fwd, e5m2 for *.bwd")
    ap.add_argument("--out", help="PNG (default: hist_<site>.png next to the dump)")
    ap.add_argument("--compress", default="build/compress", help="the roundtrip CLI (default: %(default)s)")
    args = ap.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = pl.load_dump(args.dump)
    site, step, rank = pl.dump_site(args.dump)
    fmt = args.format or pl.default_format(site)
    r, _ = pl.taco_transform(x, args.group_size)
    flat = x.reshape(-1)
    out = args.out or os.path.join(os.path.dirname(args.dump) or ".", f"hist_{site}.png")

    fig, ax = plt.subplots(2, 2, figsize=(13, 9))
    # 1. shape before / after the transform, both in units of their own RMS
    sx, sr = flat / rms(flat), r / rms(r)
    lim = max(np.abs(sx).max(), np.abs(sr).max())
    bins = np.linspace(-lim, lim, 201)
    a = ax[0, 0]
    counts, _, _ = a.hist(sx, bins=bins, histtype="step", color="tab:blue", lw=1.3,
                          label=f"raw tensor (kurtosis {kurtosis(flat):.1f})")
    a.hist(sr, bins=bins, histtype="step", color="tab:red", lw=1.3,
           label=f"adaptive scale + Hadamard, G={args.group_size} (kurtosis {kurtosis(r):.1f})")
    centres = 0.5 * (bins[1:] + bins[:-1])
    gauss = flat.size * (bins[1] - bins[0]) * np.exp(-0.5 * centres ** 2) / np.sqrt(2 * np.pi)
    keep = gauss > 0.1  # the Gaussian's far tail would stretch the log axis by hundreds of decades
    a.plot(centres[keep], gauss[keep], "k--", lw=1, label="Gaussian, same RMS (kurtosis 3)")
    a.set_yscale("log")
    a.set_ylim(0.5, 3 * max(counts.max(), gauss.max()))
    a.set_xlabel("value / RMS")
    a.set_ylabel("count")
    a.set_title("values before and after the TACO transform")
    a.legend(fontsize=8)

    # 2. magnitudes relative to the amax: where one per-tensor scale puts them
    a = ax[0, 1]
    for v, c, lab in ((flat, "tab:blue", "raw |x| / max|x|"), (r, "tab:red", "transformed |r| / max|r|")):
        m = np.abs(v[v != 0]).astype(np.float64)
        a.hist(np.log10(m / m.max()), bins=120, histtype="step", color=c, lw=1.3, label=lab)
    top, normal, sub = FP8_RANGE[fmt]
    a.axvline(np.log10(normal / top), color="0.4", ls=":", label=f"{fmt.upper()} subnormal below (amax→{top:g})")
    a.axvline(np.log10(sub / 2 / top), color="0.2", ls="--", label=f"{fmt.upper()} rounds to 0 below")
    a.set_yscale("log")
    a.set_ylim(0.5, None)
    a.set_xlabel("log10(|value| / tensor max)")
    a.set_ylabel("count")
    a.set_title("dynamic range: dense near zero, few large values")
    a.legend(fontsize=8, loc="upper left")

    # 3. + 4. each method's reconstruction
    colours = pl.variant_colours(METHODS)
    # fp8_tensor and fp8_group often decode to the same values (no group near the subnormals),
    # so fp8_tensor is dashed to stay visible under fp8_group
    styles = {m: "--" if m == "fp8_tensor" else "-" for m in METHODS}
    errs = {}
    for m in METHODS:
        y, info = pl.roundtrip(args.compress, x, m, fmt, args.group_size)
        errs[m] = (y - x, pl.row_errors(x, y), info)
    s = rms(flat)
    lim = max(np.abs(e).max() for e, _, _ in errs.values()) / s
    bins = np.linspace(-lim, lim, 201)
    for m, (e, rows, info) in errs.items():
        ax[1, 0].hist(e.reshape(-1) / s, bins=bins, histtype="step", color=colours[m], lw=1.3, ls=styles[m],
                      label=f"{m}: rel_err {info['rel_err']:.4f}, SNR {info['snr_db']:.1f} dB")
        ax[1, 1].hist(np.log10(np.maximum(rows, 1e-12)), bins=np.linspace(-4, 0.5, 91), histtype="step",
                      color=colours[m], lw=1.3, ls=styles[m], label=f"{m}: mean {rows.mean():.4f}, max {rows.max():.3f}")
    a = ax[1, 0]
    a.set_yscale("log")
    a.set_ylim(0.5, None)
    a.set_xlabel("(x_hat − x) / RMS(x)")
    a.set_ylabel("count")
    a.set_title(f"reconstruction error ({fmt.upper()}, G={args.group_size}; int8_group is int8)")
    a.legend(fontsize=8)
    a = ax[1, 1]
    a.set_yscale("log")
    a.set_ylim(0.5, None)
    a.set_xlabel("log10(||row_hat − row|| / ||row||)")
    a.set_ylabel("rows")
    a.set_title("per-row relative error (a row = one token's vector)")
    a.legend(fontsize=8)

    where = f" (step {step}, rank {rank})" if step is not None else ""
    fig.suptitle(f"{site}{where}: {x.shape[0]} x {x.shape[1]} {'gradient' if site.endswith('.bwd') else 'activation'}"
                 f" partial sums")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"wrote {out}")


if __name__ == "__main__":
    try:
        main()
    except pl.ToolError as e:
        sys.exit(f"error: {e}")
