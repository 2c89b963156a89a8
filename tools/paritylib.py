#!/usr/bin/python3
"""tools/paritylib.py - code shared by the loss-parity and compression-analysis tools.

tools/parity.py (runner), tools/plot_parity.py (loss plot), tools/parity_summary.py
(summary table), tools/plot_hist.py (dump histograms) and tools/ablation.py (per-method
error table) all import this module, so the variant table, the log reader, the summary
and the numpy mirror of compress/taco.c exist once.

Every function that meets bad input raises ToolError with one line that names the file
(and line); the command-line tools print it as "error: ..." and exit 1.
"""
import json
import math
import os
import re
import subprocess
import tempfile

import numpy as np


class ToolError(Exception):
    """A user-facing error: one line, naming the file or option at fault."""


# ---- the variants of a parity experiment ------------------------------------------
#
# One table: name -> the --set overrides that select the compressor, and the colour the
# variant has in every plot. Every variant sets all three TACO switches, so a config that
# turns one of them off cannot silently change what "taco" means; the switches do not
# affect the baselines (compress/README.md), so setting them there is harmless.
_TACO_ON = {"compress.hadamard": "true", "compress.adaptive_scale": "true", "compress.dual_scale": "true"}
VARIANTS = {
    "none": ({"compress.method": "none", **_TACO_ON}, "black"),
    "fp8_tensor": ({"compress.method": "fp8_tensor", **_TACO_ON}, "tab:orange"),
    "int8_group": ({"compress.method": "int8_group", **_TACO_ON}, "tab:green"),
    "fp8_group": ({"compress.method": "fp8_group", **_TACO_ON}, "tab:purple"),
    "taco": ({"compress.method": "taco", **_TACO_ON}, "tab:red"),
    "taco_no_hadamard": ({"compress.method": "taco", **_TACO_ON, "compress.hadamard": "false"}, "tab:blue"),
    "taco_no_adaptive_scale": ({"compress.method": "taco", **_TACO_ON, "compress.adaptive_scale": "false"},
                               "tab:brown"),
    "taco_no_dual_scale": ({"compress.method": "taco", **_TACO_ON, "compress.dual_scale": "false"}, "tab:pink"),
    # the same compressor through the two-shot all-reduce: the partials quantised, then the reduced
    # chunk again, where the default at TP = 2 (comm.allreduce "auto": one-shot) quantises each once
    "taco_two_shot": ({"compress.method": "taco", **_TACO_ON, "comm.allreduce": "two_shot"}, "tab:olive"),
}
# colours for directories that are not in the table (e.g. a hand-made variant)
_EXTRA_COLOURS = ["tab:cyan", "tab:gray", "gold", "navy", "lime"]

# The acceptance criterion of the parity experiment, and the divergence rule of the summary.
PARITY_TOLERANCE_PCT = 1.0
DIVERGED_MARGIN = 1.0


# Seeds: run k >= 1 of a variant lives in <rundir>/<variant>.s<k> with train.seed + k (the
# same batches in the same order: the seed draws the initial weights and the rounding noise).
def seed_dir(rundir, name, k):
    return os.path.join(rundir, name if k == 0 else f"{name}.s{k}")


def _is_seed_dir(d):
    return re.search(r"\.s\d+$", d) is not None


def parse_variants(text):
    """'none,taco' -> ['none', 'taco'], checked against the table."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names:
        raise ToolError("--variants is empty; known variants: " + ", ".join(VARIANTS))
    for v in names:
        if v not in VARIANTS:
            raise ToolError(f"unknown variant '{v}'; known variants: {', '.join(VARIANTS)}")
    if len(set(names)) != len(names):
        raise ToolError(f"--variants lists a variant twice: {text}")
    return names


def variant_colours(names):
    """Colour per variant name: the table's, then spare colours in order for the rest."""
    spare = iter(_EXTRA_COLOURS * (1 + len(names) // len(_EXTRA_COLOURS)))
    return {n: VARIANTS[n][1] if n in VARIANTS else next(spare) for n in names}


# ---- configs -----------------------------------------------------------------------

def load_json(path, what="config"):
    if not os.path.isfile(path):
        raise ToolError(f"{what} '{path}' does not exist")
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ToolError(f"{what} '{path}' is not valid JSON: {e}") from None


def parse_set(item):
    """'train.steps=20' -> ('train.steps', '20'), with the trainer's key=value rule."""
    key, eq, value = item.partition("=")
    if not eq or not key:
        raise ToolError(f"--set '{item}': expected key=value, e.g. --set train.steps=100")
    return key, value


def config_get(cfg, sets, key, default):
    """The value of a dotted key: the last --set of it, else the config file's, else default
    (the trainer's default from train/config.c, which the caller passes)."""
    for k, v in reversed(sets):
        if k == key:
            return v
    node = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def as_int(value, key):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ToolError(f"{key} must be an integer, got '{value}'") from None


# ---- logs ----------------------------------------------------------------------------

# C's printf spells non-finite numbers nan / inf / -inf, which JSON does not allow; a
# diverged run's log must read as "diverged", not as "corrupt".
_C_NONFINITE = re.compile(r"(?<=[:,\[])\s*(-?)(nan|inf)(?=[,}\]])", re.IGNORECASE)


def _c_nonfinite_to_json(m):
    if m.group(2).lower() == "nan":
        return "NaN"
    return "-Infinity" if m.group(1) else "Infinity"


def read_log(path):
    """The records of a log.jsonl, in order. Raises ToolError naming the file for a missing
    file, a line that is not one JSON object (e.g. truncated), or a log without val_loss."""
    if not os.path.isfile(path):
        raise ToolError(f"missing log: {path} does not exist (did the run start?)")
    records = []
    with open(path) as f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(_C_NONFINITE.sub(_c_nonfinite_to_json, line))
            except json.JSONDecodeError as e:
                raise ToolError(f"corrupt log: {path} line {no} is not valid JSON ({e.msg}): "
                                f"{line.strip()[:80]!r}") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                raise ToolError(f"corrupt log: {path} line {no} is not a log record with an integer 'step'")
            records.append(rec)
    if not records:
        raise ToolError(f"empty log: {path} has no records")
    if not any("val_loss" in r for r in records):
        raise ToolError(f"log without validation: {path} has no val_loss at all "
                        "(set train.eval_every > 0 for parity runs)")
    return records


class Run:
    """One variant's results: its log records and its effective config.json."""

    def __init__(self, name, vdir):
        self.name = name
        self.dir = vdir
        self.records = read_log(os.path.join(vdir, "log.jsonl"))
        self.config = load_json(os.path.join(vdir, "config.json"), "effective config")
        self.steps = self.config.get("train", {}).get("steps")
        if not isinstance(self.steps, int):
            raise ToolError(f"{vdir}/config.json has no integer train.steps")
        self.train = [r for r in self.records if "loss" in r]
        self.val = [r for r in self.records if "val_loss" in r]
        self.final_step = max(r["step"] for r in self.records)
        self.seeds = []  # the same variant's runs with the other seeds (load_runs)

    def final_val(self):
        return self.val[-1]["val_loss"]


def discover_variants(rundir):
    """The variant directories of a parity experiment: every sub-directory of rundir, in the
    table's order, then the others by name."""
    if not os.path.isdir(rundir):
        raise ToolError(f"run directory '{rundir}' does not exist")
    subdirs = sorted(d for d in os.listdir(rundir)
                     if os.path.isdir(os.path.join(rundir, d)) and not d.startswith(".") and not _is_seed_dir(d))
    if not subdirs:
        raise ToolError(f"'{rundir}' has no variant directories (expected e.g. {rundir}/none/log.jsonl)")
    order = {n: i for i, n in enumerate(VARIANTS)}
    return sorted(subdirs, key=lambda d: (order.get(d, len(order)), d))


def load_runs(rundir, names=None):
    """One Run per variant, with its other seeds' runs (the .s1, .s2, ... directories that hold a
    log, in order) in run.seeds."""
    runs = []
    for n in names or discover_variants(rundir):
        run = Run(n, os.path.join(rundir, n))
        k = 1
        while os.path.isfile(os.path.join(seed_dir(rundir, n, k), "log.jsonl")):
            run.seeds.append(Run(n, seed_dir(rundir, n, k)))
            k += 1
        runs.append(run)
    return runs


def tail_mean(run):
    """Mean train loss over the last 10% of the run's steps."""
    tail = [r["loss"] for r in run.train if r["step"] > 0.9 * run.steps]
    return float(np.mean(tail)) if tail else float("nan")


# ---- summary -----------------------------------------------------------------------

SITE_KINDS = ["embed.fwd", "attn.fwd", "mlp.fwd", "attn.bwd", "mlp.bwd", "lm_head.bwd"]


def _site_kind(site):
    """'L3.mlp.bwd' -> 'mlp.bwd'; 'embed.fwd' stays."""
    return site.split(".", 1)[1] if re.match(r"L\d+\.", site) else site


def _finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def summarize(runs):
    """One dict per run with the summary columns (None where not applicable)."""
    base = next((r for r in runs if r.name == "none"), None)
    base_val = base.final_val() if base else None
    base_loss = {r["step"]: r["loss"] for r in base.train} if base else {}
    base_bytes = None
    rows = []
    for run in runs:
        comm = [r["comm_bytes"] for r in run.train if "comm_bytes" in r]
        # Step time: without step 1 (first-touch allocations) and without the steps that
        # sampled rel_err, which pay an extra exact all-reduce per compressed site that the
        # `none` run does not; fall back to every step if that leaves none.
        timed = [r["ms"] for r in run.train
                 if r["step"] > 1 and not any("rel_err" in s for s in r.get("sites", {}).values())]
        timed = timed or [r["ms"] for r in run.train]
        rel = {"all": [], "fwd": [], "bwd": []}
        per_kind = {k: [] for k in SITE_KINDS}
        saturated = 0
        for r in run.train:
            for site, s in r.get("sites", {}).items():
                saturated += s.get("saturated", 0)
                if "rel_err" in s:
                    rel["all"].append(s["rel_err"])
                    rel["bwd" if site.endswith(".bwd") else "fwd"].append(s["rel_err"])
                    per_kind.setdefault(_site_kind(site), []).append(s["rel_err"])
        # Every variant sees the same batches in the same order, so the train losses pair up
        # step by step; their mean difference over the last 10% of training is a far less noisy
        # measure of a compressor's cost than one final val loss.
        tail = [(r["loss"], base_loss[r["step"]]) for r in run.train
                if r["step"] > 0.9 * run.steps and r["step"] in base_loss]
        final_val = run.final_val()
        why = []
        if not all(_finite(r.get(k, 0.0)) for r in run.records for k in ("loss", "val_loss", "grad_norm")):
            why.append("non-finite loss")
        if run.final_step < run.steps:
            why.append(f"stopped at step {run.final_step} of {run.steps}")
        if base_val is not None and run is not base and not final_val <= base_val + DIVERGED_MARGIN:
            why.append(f"val loss > none + {DIVERGED_MARGIN:g}")
        mean_bytes = float(np.mean(comm)) if comm else None
        if run is base:
            base_bytes = mean_bytes
        rows.append({
            "variant": run.name,
            "final_step": run.final_step,
            "final_val_loss": final_val,
            "val_diff": final_val - base_val if base_val is not None else None,
            "val_diff_pct": 100.0 * (final_val - base_val) / base_val if base_val else None,
            "train_diff_pct_tail": (100.0 * sum(a - b for a, b in tail) / sum(b for _, b in tail)) if tail else None,
            "comm_bytes_per_step": mean_bytes,
            "step_ms": float(np.mean(timed)) if timed else None,
            "mean_rel_err": float(np.mean(rel["all"])) if rel["all"] else None,
            "mean_rel_err_fwd": float(np.mean(rel["fwd"])) if rel["fwd"] else None,
            "mean_rel_err_bwd": float(np.mean(rel["bwd"])) if rel["bwd"] else None,
            "rel_err_by_kind": {k: float(np.mean(v)) if v else None for k, v in per_kind.items()},
            "saturated": saturated,
            "diverged": "yes" if why else "no",
            "diverged_why": "; ".join(why),
        })
    # The seed band: none's tail train loss across its seeds is the noise a compressor's loss
    # must be compared with. A variant run with the same seeds is inside the band when its
    # tail loss, averaged over its seeds, lies between the lowest and the highest of none's.
    band = [tail_mean(r) for r in ([base] + base.seeds)] if base else []
    for row, run in zip(rows, runs):
        mine = [tail_mean(r) for r in [run] + run.seeds]
        row["seeds"] = len(mine)
        row["seed_gap_pct"] = row["seed_band_pct"] = row["inside_seed_band"] = None
        if len(band) > 1 and run is not base:
            k = min(len(mine), len(band))  # seed k of the variant pairs with seed k of none
            gap = float(np.mean([mine[i] - band[i] for i in range(k)]))
            row["seed_gap_pct"] = 100.0 * gap / float(np.mean(band))
            row["seed_band_pct"] = 100.0 * (max(band) - min(band)) / float(np.mean(band))
            m = float(np.mean(mine))
            row["inside_seed_band"] = "yes" if min(band) <= m <= max(band) else "no"
        elif len(band) > 1:
            row["seed_band_pct"] = 100.0 * (max(band) - min(band)) / float(np.mean(band))
    for row in rows:
        b = row["comm_bytes_per_step"]
        row["bytes_vs_none"] = base_bytes / b if base_bytes and b else None
        d = row["val_diff_pct"]
        row["within_tolerance"] = None if d is None else ("yes" if abs(d) <= PARITY_TOLERANCE_PCT else "no")
    return rows


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


SUMMARY_COLUMNS = [  # (csv name, markdown header, format)
    ("variant", "variant", "s"),
    ("final_step", "final step", "d"),
    ("final_val_loss", "final val loss", ".4f"),
    ("val_diff", "Δ vs none", "+.4f"),
    ("val_diff_pct", "Δ %", "+.2f"),
    ("within_tolerance", f"within {PARITY_TOLERANCE_PCT:g}%", "s"),
    ("train_diff_pct_tail", "train Δ % (last 10%)", "+.2f"),
    ("comm_bytes_per_step", "wire bytes/step", ",.0f"),
    ("bytes_vs_none", "x fewer than none", ".2f"),
    ("step_ms", "step ms", ".1f"),
    ("mean_rel_err", "mean site rel_err", ".4f"),
    ("mean_rel_err_fwd", "fwd rel_err", ".4f"),
    ("mean_rel_err_bwd", "bwd rel_err", ".4f"),
    ("saturated", "saturated", "d"),
    ("seeds", "seeds", "d"),
    ("seed_gap_pct", "train Δ % vs none, over seeds", "+.2f"),
    ("seed_band_pct", "none's seed band %", ".2f"),
    ("inside_seed_band", "inside none's band", "s"),
    ("diverged", "diverged", "s"),
]


def summary_table(rows):
    """The main summary table, markdown, one row per variant."""
    lines = ["| " + " | ".join(h for _, h, _ in SUMMARY_COLUMNS) + " |", "|" + "---|" * len(SUMMARY_COLUMNS)]
    for row in rows:
        cells = [_fmt(row[c], f) for c, _, f in SUMMARY_COLUMNS]
        if row["diverged_why"]:
            cells[-1] += f" ({row['diverged_why']})"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_markdown(rows, runs, title):
    lines = [f"# {title}", "", summary_table(rows)]
    cfg = runs[0].config
    every = cfg.get("compress", {}).get("stats_every")
    lines += ["",
              "final val loss: the last val_loss in the log; Δ against the `none` variant (the val loss of one "
              "evaluation is noisy: compare the spread of the val circles in the plot). "
              "train Δ % (last 10%): mean over the last 10% of steps of the train loss minus none's at the same "
              "step (same batches), relative to none's. "
              "wire bytes/step: mean comm_bytes (bytes one rank sends in TP exchanges per step). "
              "step ms: mean over steps 2.. that did not sample rel_err (sampling costs an extra exact "
              "all-reduce per compressed site). "
              f"rel_err: ||x_hat - x|| / ||x|| of the compressed all-reduce against the exact one, mean over "
              f"every site and sampled step (every {every} steps); fwd = activation sites, bwd = gradient sites. "
              "saturated: elements clamped by the FP8 cast, summed over the sampled steps only. "
              "seeds: runs of the variant (train.seed, +1, ...; the same batches). With several: train Δ % vs "
              "none, over seeds: the mean over seeds of the variant's tail train loss (last 10% of steps) minus "
              "none's with the same seed, relative to none's; none's seed band %: the spread (max - min) of none's "
              "tail train loss across its seeds, relative to its mean: the seed-to-seed noise; inside none's band: "
              "the variant's tail loss, averaged over its seeds, lies within that spread. "
              f"diverged: a non-finite loss, a log that stops before train.steps, or a final val loss more than "
              f"{DIVERGED_MARGIN:g} above none's.",
              "", "## Mean rel_err per site kind (averaged over layers and sampled steps)", "",
              "| variant | " + " | ".join(SITE_KINDS) + " |", "|---|" + "---|" * len(SITE_KINDS)]
    for row in rows:
        by = row["rel_err_by_kind"]
        lines.append(f"| {row['variant']} | " + " | ".join(_fmt(by.get(k), ".4f") for k in SITE_KINDS) + " |")
    return "\n".join(lines) + "\n"


def summary_csv(rows):
    out = [",".join(c for c, _, _ in SUMMARY_COLUMNS) + ",diverged_why"]
    for row in rows:
        cells = ["" if row[c] is None else (f"{row[c]:.6g}" if isinstance(row[c], float) else str(row[c]))
                 for c, _, _ in SUMMARY_COLUMNS]
        out.append(",".join(cells) + "," + '"' + row["diverged_why"].replace('"', "'") + '"')
    return "\n".join(out) + "\n"


def model_title(run):
    """'L2 d64 h4 | B8 T64 | tp=2 dp=1 | 1000 steps' from a run's effective config ('qwen2 kv2 L2 ...'
    for another architecture)."""
    c = run.config
    m, t, p = c.get("model", {}), c.get("train", {}), c.get("parallel", {})
    arch = "" if m.get("arch", "gpt2") == "gpt2" else f"{m.get('arch')} kv{m.get('n_kv_head')} "
    return (f"{arch}L{m.get('n_layer')} d{m.get('d_model')} h{m.get('n_head')} | B{t.get('batch_size')} "
            f"T{t.get('seq_len')} | tp={p.get('tp')} dp={p.get('dp')} | {t.get('steps')} steps")


def write_summary(rundir, runs):
    """summary.md and summary.csv into rundir; returns the rows."""
    rows = summarize(runs)
    title = f"Loss parity: {os.path.basename(os.path.normpath(rundir))} ({model_title(runs[0])})"
    with open(os.path.join(rundir, "summary.md"), "w") as f:
        f.write(summary_markdown(rows, runs, title))
    with open(os.path.join(rundir, "summary.csv"), "w") as f:
        f.write(summary_csv(rows))
    return rows


# ---- the parity plot -----------------------------------------------------------------

def ema_span(steps):
    """Smoothing span in steps: 2% of the run, at least 5, so short and long runs look alike."""
    return max(5, round(steps / 50))


def ema(values, span):
    """Bias-corrected exponential moving average (as Adam corrects its moments), so the first
    points are not pulled toward the very first loss."""
    beta = 1.0 - 2.0 / (span + 1.0)
    out, acc = [], 0.0
    for i, v in enumerate(values, 1):
        acc = beta * acc + (1.0 - beta) * v
        out.append(acc / (1.0 - beta ** i))
    return np.array(out)


def plot_parity(runs, out, exp_name):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = variant_colours([r.name for r in runs])
    span = ema_span(runs[0].steps)
    fig, (top, bot) = plt.subplots(2, 1, figsize=(11, 9), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    smooth = {}
    for run in runs:
        steps = np.array([r["step"] for r in run.train])
        loss = np.array([r["loss"] for r in run.train], dtype=float)
        sm = ema(loss, span)
        smooth[run.name] = dict(zip(steps.tolist(), sm))
        c = colours[run.name]
        lw = 2.0 if run.name == "none" else 1.2
        top.plot(steps, sm, color=c, lw=lw, label=f"{run.name} (final val {run.final_val():.4f})")
        vs = [r["step"] for r in run.val]
        top.plot(vs, [r["val_loss"] for r in run.val], "o", color=c, ms=4, mfc="none" if run.name != "none" else c)
    # the y range: from just below the lowest curve to the level the runs pass after 10% of
    # training, so the first steps' drop from ln(V) does not squash the part that matters
    tail = [v for s in smooth.values() for st, v in s.items() if st >= 0.1 * runs[0].steps and math.isfinite(v)]
    tail += [r["val_loss"] for run in runs for r in run.val if r["step"] >= 0.1 * runs[0].steps]
    if tail:
        lo, hi = min(tail), max(tail)
        top.set_ylim(lo - 0.05 * (hi - lo + 0.1), hi + 0.05 * (hi - lo + 0.1))
    base = next((r for r in runs if r.name == "none"), None)
    if base is not None and base.seeds:
        curves = [dict(zip([r["step"] for r in b.train], ema(np.array([r["loss"] for r in b.train], dtype=float), span)))
                  for b in [base] + base.seeds]
        common = sorted(set.intersection(*[set(c) for c in curves]))
        lo = [min(c[s] for c in curves) for s in common]
        hi = [max(c[s] for c in curves) for s in common]
        top.fill_between(common, lo, hi, color="0.75", alpha=0.5, lw=0,
                         label=f"none across {len(curves)} seeds (min..max of the EMA)")
    top.set_ylabel("loss (nats/token)")
    top.set_title(f"train loss: EMA, span {span} steps (lines); val loss: raw (circles)", fontsize=10)
    top.legend(fontsize=8, ncol=2)
    top.grid(alpha=0.3)

    if base is None:
        bot.text(0.5, 0.5, "no `none` variant: nothing to compare against", ha="center", transform=bot.transAxes)
    else:
        tol = base.final_val() * PARITY_TOLERANCE_PCT / 100.0
        bot.axhspan(-tol, tol, color="0.85", label=f"±{PARITY_TOLERANCE_PCT:g}% of none's final val loss")
        bot.axhline(0.0, color="black", lw=1.0)
        base_val = {r["step"]: r["val_loss"] for r in base.val}
        for run in runs:
            if run is base:
                continue
            c = colours[run.name]
            common = sorted(set(smooth[run.name]) & set(smooth["none"]))
            bot.plot(common, [smooth[run.name][s] - smooth["none"][s] for s in common], color=c, lw=1.2,
                     label=run.name)
            vs = [r for r in run.val if r["step"] in base_val]
            bot.plot([r["step"] for r in vs], [r["val_loss"] - base_val[r["step"]] for r in vs], "o", color=c,
                     ms=4, mfc="none")
        bot.legend(fontsize=8, ncol=3)
    bot.set_xlabel("step")
    bot.set_ylabel("loss − none's loss")
    bot.set_title("difference to `none`: train EMA (lines), val (circles)", fontsize=10)
    bot.grid(alpha=0.3)
    fig.suptitle(f"{exp_name}: {model_title(runs[0])}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


# ---- compression of dumped tensors ----------------------------------------------------

def load_dump(path):
    """A trainer dump: float32, shape (B*T, C)."""
    if not os.path.isfile(path):
        raise ToolError(f"dump '{path}' does not exist")
    try:
        x = np.load(path)
    except (ValueError, OSError) as e:
        raise ToolError(f"'{path}' is not a readable .npy file: {e}") from None
    if x.dtype != np.float32 or x.ndim != 2:
        raise ToolError(f"'{path}' holds {x.dtype} of shape {x.shape}; expected a float32 (rows, cols) dump")
    return x


def dump_site(path):
    """'dumps/L1.mlp.bwd.step199.rank0.npy' -> ('L1.mlp.bwd', 199, 0); (name, None, None) for
    files not named the trainer's way."""
    base = os.path.basename(path)
    m = re.match(r"(.+)\.step(\d+)\.rank(\d+)\.npy$", base)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else (base[:-4] if base.endswith(".npy") else base,
                                                                       None, None)


def default_format(site):
    """The trainer's default format for a site: E4M3 in both directions (the ablation in
    docs/ablation.md measured E5M2 gradients at twice the error, with no saturations
    in E4M3 once the group exponent has normalised each group)."""
    return "e4m3"


def roundtrip(binary, x, method, fmt, group_size, flags=(), workdir=None):
    """x through `build/compress roundtrip` as one chunk; returns (x_hat, the CLI's JSON)."""
    if not os.access(binary, os.X_OK):
        raise ToolError(f"'{binary}' is not an executable (build it with make)")
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        src, dst = os.path.join(tmp, "x.f32"), os.path.join(tmp, "y.f32")
        x.astype("<f4").tofile(src)
        cmd = [binary, "roundtrip", "--method", method, "--format", fmt, "--group-size", str(group_size),
               *flags, "--in", src, "--out", dst]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise ToolError(f"{' '.join(cmd[:-4])} failed (exit {p.returncode}): {p.stderr.strip()}")
        info = json.loads(p.stdout)
        y = np.fromfile(dst, dtype="<f4").reshape(x.shape)
    return y, info


def row_errors(x, y):
    """||row_hat - row|| / ||row|| for every row with a non-zero norm."""
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    norm = np.linalg.norm(x64, axis=1)
    keep = norm > 0
    return np.linalg.norm(y64 - x64, axis=1)[keep] / norm[keep]


def small_half_error(x, y):
    """||x_hat - x|| / ||x|| over the elements below the tensor's median |x|. FP8's log-spaced
    grid gives every element the same relative error; a rotation before the cast spreads each
    group's error evenly over its elements, which this shows and the whole-tensor error hides."""
    a = np.abs(x)
    small = a < np.median(a)
    nx = np.linalg.norm(x[small].astype(np.float64))
    return float(np.linalg.norm((y[small] - x[small]).astype(np.float64)) / nx) if nx > 0 else 0.0


def _unit_exponent(a):
    """Per group: the smallest e with a * 2^-e <= 1 (0 for a zero group), kept in [-126, 126]:
    compress/taco.c's -taco_pow2_fit(a, 1.0f), from frexp like the C code."""
    m, e = np.frexp(a)
    eu = e - 1 + (m > 0.5)
    return np.where(a > 0, np.clip(eu, -126, 126), 0).astype(np.int32)


def _hadamard_norm(G):
    """compress/hadamard.c's hadamard_norm: the float nearest 1/sqrt(G)."""
    k = G.bit_length() - 1
    p = np.float32(0.5) ** ((k + 1) // 2)
    return np.float32(p) if k % 2 == 0 else np.float32(float.fromhex("0x1.6a09e6p+0")) * np.float32(p)


def taco_transform(x, G):
    """TACO steps 1-3 on the flattened tensor, as one chunk: per group of G, scale by
    2^-e_u (adaptive scale) and rotate with the orthonormal Walsh-Hadamard transform, in
    float32 with compress/hadamard.c's butterfly order, so the values are the ones the fp8
    cast sees before the chunk scale. A short tail group and groups holding NaN/inf are not
    rotated, as in taco.c. Returns (r, e_u per group)."""
    if G < 1 or G & (G - 1):
        raise ToolError(f"--group-size {G} is not a power of two")
    flat = x.reshape(-1).astype(np.float32)
    n = flat.size
    ng = -(-n // G)
    pad = np.zeros(ng * G, dtype=np.float32)
    pad[:n] = flat
    groups = pad.reshape(ng, G)
    finite = np.isfinite(groups)
    a = np.max(np.where(finite, np.abs(groups), 0.0), axis=1)
    eu = _unit_exponent(a)
    y = np.where(finite, groups, 0.0).astype(np.float32) * np.ldexp(np.float32(1.0), -eu)[:, None]
    rotate = finite.all(axis=1)
    if n % G:
        rotate[-1] = False
    r = y[rotate]
    h = 1
    while h < G:
        v = r.reshape(r.shape[0], G // (2 * h), 2, h)
        r = np.stack([v[:, :, 0, :] + v[:, :, 1, :], v[:, :, 0, :] - v[:, :, 1, :]], axis=2).reshape(-1, G)
        h *= 2
    y[rotate] = r * _hadamard_norm(G)
    return y.reshape(-1)[:n], eu
