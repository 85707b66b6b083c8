"""`tfbertperf compare` — the same attribution side by side across storage backends, pipeline settings,
strategies, precisions or machines.

    tfbertperf compare --matrix pipeline.preset=naive,tuned [--matrix data.read_latency_ms=0,20] [--set k=v ...]
    tfbertperf compare --reports runs/A/report.json other-machine/report.json      # existing runs, e.g. two machines

Each matrix cell is a separate `tfbertperf run` process (fresh TF state: precision policies and strategies are
process-global), all writing under one comparison directory, so `tensorboard --logdir <that dir>` shows every run.
Output: comparison.json, comparison.md, comparison.html and plots/step_breakdown.png (stacked bars, one per run).
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import subprocess
import sys
from pathlib import Path

from tfbertperf.cliargs import Parser, add_run_arguments
from tfbertperf.config import load_config
from tfbertperf.errors import UsageError, cli_entry
from tfbertperf.report.comparison import load_report, write_comparison
from tfbertperf.report.markdown import comparison_markdown

def parse_matrix(items: list[str]) -> list[tuple[str, list[str]]]:
    """['a.b=1,2', 'c.d=x'] → [('a.b', ['1','2']), ('c.d', ['x'])]; every key and value is validated."""
    axes = []
    for it in items:
        if "=" not in it:
            raise UsageError(f"--matrix {it}: expected section.key=v1,v2,...")
        k, v = it.split("=", 1)
        vals = [x.strip() for x in v.split(",") if x.strip()]
        if not vals:
            raise UsageError(f"--matrix {it}: no values")
        for x in vals:  # fail before the first run, naming the bad value
            load_config(overrides={k.strip(): x}) if k.strip() != "data.uri" else None
        axes.append((k.strip(), vals))
    return axes


def run_matrix(axes, base_args: list[str], out_dir: Path, progress=True) -> list[tuple[str, dict, str]]:
    runs_root = out_dir / "runs"
    cells = list(itertools.product(*[[(k, v) for v in vals] for k, vals in axes])) or [()]
    labelled = []
    for n, cell in enumerate(cells, 1):
        label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in cell) or "run"
        if progress:
            sys.stderr.write(f"[tfbertperf compare] run {n}/{len(cells)}: {label}\n")
        before = set(runs_root.glob("*")) if runs_root.exists() else set()
        sets = [a for kv in cell for a in ("--set", f"{kv[0]}={kv[1]}")]
        name = "".join(c if c.isalnum() else "-" for c in label)[:60]
        cmd = [sys.executable, "-m", "tfbertperf.run", *base_args, *sets,
               "--set", f"run.out={runs_root}", "--set", f"run.name={name}"]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if progress else subprocess.PIPE, text=True)
        if proc.returncode != 0:
            err = (proc.stderr or "").strip().splitlines()
            raise UsageError(f"compare: run {label!r} failed (exit {proc.returncode})"
                             + (f": {err[-1]}" if err else ""))
        new = sorted(set(runs_root.glob("*")) - before)
        if not new:
            raise UsageError(f"compare: run {label!r} left no run directory")
        labelled.append((label, load_report(str(new[-1])), str(new[-1])))
    return labelled


@cli_entry
def main(argv=None) -> int:
    p = Parser(prog="tfbertperf compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--matrix", action="append", default=[], metavar="KEY=V1,V2",
                   help="an axis of the run matrix (repeatable; the matrix is their product)")
    p.add_argument("--reports", nargs="+", metavar="REPORT", help="compare existing report.json files / run directories (not a runs root: e.g. runs/2026*)")
    add_run_arguments(p)  # the part every cell shares
    p.add_argument("--out", default="runs", help="where the comparison directory goes (default ./runs)")
    args = p.parse_args(argv)
    if not args.matrix and not args.reports:
        raise UsageError("tfbertperf compare: give --matrix KEY=V1,V2 (runs) or --reports A B (existing runs)")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = Path(args.out) / f"{stamp}-compare"
    i = 0
    while out_dir.exists():
        i += 1
        out_dir = Path(args.out) / f"{stamp}-compare-{i}"
    if args.reports:
        labelled = []
        for r in args.reports:
            rep = load_report(r)
            labelled.append((rep.get("run_id") or os.path.basename(os.path.dirname(os.path.abspath(r))), rep, r))
        axes = None
    else:
        axes = parse_matrix(args.matrix)
        base = []
        if args.workload:
            base += ["--workload", args.workload]
        if args.data:
            base += ["--data", args.data]
        for s in args.sets:
            base += ["--set", s]
        load_config(args.workload, args.data, args.sets)  # validate the common part before any run
        out_dir.mkdir(parents=True)
        labelled = run_matrix(axes, base, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = write_comparison(out_dir, labelled, axes)
    print(comparison_markdown(doc))
    print(f"\ncomparison: {out_dir / 'comparison.md'}  (also comparison.json, comparison.html, plots/)")
    print(f"TensorBoard: tensorboard --logdir {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
