#!/usr/bin/python3
"""tools/parity.py - loss-parity experiments in one command.

usage: tools/parity.py CONFIG [--np N] [--name EXP] [--variants v1,v2,...] [--seeds K] [--set k=v ...]
                       [--binary build/train] [--mpirun "mpirun --oversubscribe"] [--root runs]

Trains CONFIG once per compressor variant (tools/paritylib.py: VARIANTS), with the same seed,
data and model, each as its own mpirun into ROOT/EXP/<variant>/ (log.jsonl, config.json and
the trainer's output in stdout.log), then writes ROOT/EXP/parity.png, summary.md and
summary.csv. With --seeds K every variant also runs with train.seed + 1 .. + K-1 (the same
batches in the same order) into ROOT/EXP/<variant>.s<k>/; the plot draws none's band across
the seeds and the summary says whether each compressor's loss lies inside it.

Resumable: a variant whose run finished (exit 0 and a log that reaches train.steps) gets a
DONE file and is skipped next time. An unfinished variant is rerun from scratch: parity
configs write no checkpoints, and a fresh run gives the same losses as a resumed one.

A variant that fails does not stop the others; the runner reports it with the last lines of
its stdout.log and exits 1 at the end.
"""
import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paritylib as pl  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description="Run one config once per compressor variant and compare the losses.")
    ap.add_argument("config")
    ap.add_argument("--np", type=int, help="MPI ranks (default: parallel.tp * parallel.dp of the config)")
    ap.add_argument("--name", help="experiment name (default: the config's basename)")
    ap.add_argument("--variants", default=",".join(pl.VARIANTS), help="comma list (default: %(default)s)")
    ap.add_argument("--seeds", type=int, default=1, help="runs per variant, seeds train.seed + 0 .. K-1 (default 1)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for every variant (repeatable)")
    ap.add_argument("--binary", default="build/train")
    ap.add_argument("--mpirun", default="mpirun --oversubscribe",
                    help="launcher command; e.g. 'timeout 600 mpirun --oversubscribe' to bound each run")
    ap.add_argument("--root", default="runs", help="parent of the experiment directory (default: %(default)s)")
    return ap.parse_args()


def tail(path, n):
    try:
        with open(path, errors="replace") as f:
            return f.readlines()[-n:]
    except OSError:
        return [f"(no {path})\n"]


def finished(vdir):
    """True when the run in vdir reached train.steps: its log's last step equals the
    effective config's train.steps."""
    try:
        run = pl.Run(os.path.basename(vdir), vdir)
    except pl.ToolError:
        return False
    return run.final_step >= run.steps


def run_variant(name, idx, total, args, sets, np_ranks, vdir, label):
    """One mpirun for one variant (sets may carry its seed). Returns True on success."""
    if os.path.exists(vdir):
        print(f"[{idx}/{total}] {label}: unfinished earlier run in {vdir}, starting it again from scratch")
        shutil.rmtree(vdir)
    os.makedirs(vdir)
    overrides = [*sets, *(f"{k}={v}" for k, v in pl.VARIANTS[name][0].items()), f"log.dir={vdir}"]
    cmd = [*shlex.split(args.mpirun), "-np", str(np_ranks), args.binary, args.config]
    for o in overrides:
        cmd += ["--set", o]
    # the switches that are on in every variant would only repeat themselves
    what = " ".join(f"{k}={v}" for k, v in pl.VARIANTS[name][0].items() if v != "true")
    print(f"[{idx}/{total}] {label}: running ({what}); "
          f"output in {vdir}/stdout.log", flush=True)
    t0 = time.time()
    last_step_line = ""
    with open(os.path.join(vdir, "stdout.log"), "w") as out:
        out.write("# " + shlex.join(cmd) + "\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        for line in proc.stdout:
            out.write(line)
            out.flush()
            if line.startswith("step "):
                last_step_line = line.rstrip()
                # evaluations are the progress worth seeing; every step would flood the terminal
                if "| val " in line:
                    print(f"    {label}: {last_step_line}", flush=True)
        rc = proc.wait()
    secs = time.time() - t0
    print(f"    {label}: last line: {last_step_line or '(none)'}")
    if rc != 0:
        print(f"    {label}: FAILED (exit {rc}) after {secs:.0f} s", flush=True)
        return False
    if not finished(vdir):
        print(f"    {label}: FAILED: exit 0 but {vdir}/log.jsonl does not reach train.steps", flush=True)
        return False
    with open(os.path.join(vdir, "DONE"), "w") as f:
        f.write(f"finished {time.strftime('%Y-%m-%d %H:%M:%S')} in {secs:.1f} s\n")
    print(f"    {label}: done in {secs:.0f} s", flush=True)
    return True


def main():
    args = parse_args()
    cfg = pl.load_json(args.config)
    variants = pl.parse_variants(args.variants)
    sets = [pl.parse_set(s) for s in args.set]
    if not os.access(args.binary, os.X_OK):
        raise pl.ToolError(f"trainer '{args.binary}' is not an executable (run make, or pass --binary)")
    if not shutil.which(shlex.split(args.mpirun)[0]):
        raise pl.ToolError(f"launcher '{shlex.split(args.mpirun)[0]}' not found (see --mpirun)")
    if args.seeds < 1:
        raise pl.ToolError(f"--seeds must be at least 1, not {args.seeds}")
    for key in ("log.dir", "compress.method", "compress.hadamard", "compress.adaptive_scale", "compress.dual_scale"):
        if any(k == key for k, _ in sets):
            raise pl.ToolError(f"--set {key} would override what the runner sets per variant; leave it out")
    np_ranks = args.np or (pl.as_int(pl.config_get(cfg, sets, "parallel.tp", 1), "parallel.tp") *
                           pl.as_int(pl.config_get(cfg, sets, "parallel.dp", 1), "parallel.dp"))
    exp = args.name or os.path.splitext(os.path.basename(args.config))[0]
    rundir = os.path.join(args.root, exp)
    os.makedirs(rundir, exist_ok=True)
    print(f"parity experiment {exp}: {len(variants)} variants x {args.seeds} seed(s) of {args.config} at -np {np_ranks} "
          f"into {rundir}/")

    base_seed = pl.as_int(pl.config_get(cfg, sets, "train.seed", 1337), "train.seed")
    others = [f"{k}={v}" for k, v in sets if k != "train.seed"]
    jobs = [(name, k) for name in variants for k in range(args.seeds)]
    failed = []
    t0 = time.time()
    for i, (name, k) in enumerate(jobs, 1):
        vdir = pl.seed_dir(rundir, name, k)
        label = name if args.seeds == 1 else f"{name} seed {base_seed + k}"
        if os.path.isfile(os.path.join(vdir, "DONE")):
            print(f"[{i}/{len(jobs)}] {label}: skipped (finished earlier: {vdir}/DONE)")
            continue
        if not run_variant(name, i, len(jobs), args, [*others, f"train.seed={base_seed + k}"], np_ranks, vdir, label):
            failed.append((label, vdir))
    print(f"all variants: {time.time() - t0:.0f} s")

    # the summary and plot cover every variant of this invocation that left a log, so a
    # failure still shows how far it got (as "diverged")
    have_log = [v for v in variants if os.path.isfile(os.path.join(rundir, v, "log.jsonl"))]
    summary_ok = True
    if have_log:
        try:
            runs = pl.load_runs(rundir, have_log)
            rows = pl.write_summary(rundir, runs)
            pl.plot_parity(runs, os.path.join(rundir, "parity.png"), exp)
            print(f"wrote {rundir}/summary.md, {rundir}/summary.csv, {rundir}/parity.png\n")
            print(pl.summary_table(rows))
        except pl.ToolError as e:
            print(f"error: cannot summarize: {e}", file=sys.stderr)
            summary_ok = False
    for label, vdir in failed:
        log = os.path.join(vdir, "stdout.log")
        print(f"\nvariant {label} FAILED; last 10 lines of {log}:", file=sys.stderr)
        sys.stderr.write("".join("    " + line for line in tail(log, 10)))
    if failed:
        print(f"\nerror: failed variants: {', '.join(label for label, _ in failed)}", file=sys.stderr)
    return 0 if summary_ok and not failed else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except pl.ToolError as e:
        sys.exit(f"error: {e}")
