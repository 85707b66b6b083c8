"""`tfbertperf compare` — the same attribution side by side across storage backends, pipeline settings,
strategies, precisions or machines.

    tfbertperf compare --matrix pipeline.preset=naive,tuned [--matrix data.read_latency_ms=0,20] [--set k=v ...]
    tfbertperf compare --reports runs/A/report.json other-machine/report.json      # existing runs, e.g. two machines

Each matrix cell is a separate `tfbertperf run` process (fresh TF state: precision policies and strategies are
process-global), all writing under one comparison directory, so `tensorboard --logdir <that dir>` shows every run.
Output: comparison.json, comparison.md, comparison.html and plots/step_breakdown.png (stacked bars, one per run).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import html
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from tfbertperf.config import load_config
from tfbertperf.errors import UsageError, cli_entry
from tfbertperf.report.plots import CATEGORY_ORDER

COMPARISON_SCHEMA = "tfbertperf.comparison/1"


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


def load_report(path: str) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "report.json"
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: no such report") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UsageError(f"{path}: not valid JSON") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("tfbertperf.report/"):
        raise UsageError(f"{path}: not a tfbertperf report.json")
    return doc


def _row(label: str, rep: dict, run_dir: str | None) -> dict:
    att = rep.get("attribution") or {}
    tp = rep.get("throughput") or {}
    return {
        "label": label,
        "run_dir": run_dir,
        "examples_per_sec": tp.get("examples_per_sec"),
        "step_time_ms": (tp.get("step_time_ms") or {}).get("mean"),
        "profiled_step_time_ms": att.get("step_time_ms"),
        "breakdown_ms": att.get("breakdown_ms") or {},
        "fractions": att.get("fractions") or {},
        "input_bound_fraction": att.get("input_bound_fraction"),
        "input_cost_fraction": att.get("input_cost_fraction"),
        "input_wait_fraction": (rep.get("step_timer") or {}).get("input_wait_fraction"),
        "accelerator_utilization": rep.get("accelerator_utilization"),
        "bottleneck": (rep.get("verdict") or {}).get("bottleneck"),
        "storage": {k: (rep.get("storage") or {}).get(k) for k in ("backend", "mode", "read_mb_per_sec", "requests")},
        "final_loss": (rep.get("training") or {}).get("final_loss"),
    }


def _fmt(x, pct=False) -> str:
    if x is None:
        return "n/a"
    return f"{100 * float(x):.1f} %" if pct else f"{float(x):.2f}"


def render_markdown(doc: dict) -> str:
    rows = doc["rows"]
    out = [f"# tfbertperf comparison `{doc['id']}`", ""]
    if doc.get("axes"):
        out += ["Matrix: " + " × ".join(f"`{k}` ∈ {{{', '.join(v)}}}" for k, v in doc["axes"]), ""]
    out += ["| run | examples/s | step ms | input-bound (direct) | input cost (what-if) | blocked in next() | AU | "
            "bottleneck |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['label']} | {_fmt(r['examples_per_sec'])} | {_fmt(r['step_time_ms'])} | "
                   f"{_fmt(r['input_bound_fraction'], True)} | {_fmt(r['input_cost_fraction'], True)} | "
                   f"{_fmt(r['input_wait_fraction'], True)} | {_fmt(r['accelerator_utilization'], True)} | "
                   f"{r['bottleneck']} |")
    if rows and rows[0].get("examples_per_sec"):
        base = rows[0]["examples_per_sec"]
        out += ["", "Throughput relative to the first run: " + ", ".join(
            f"{r['label']} {float(r['examples_per_sec'] or 0) / base:.2f}×" for r in rows)]
    out += ["", "## Breakdown, ms per profiled step", "",
            "| run | " + " | ".join(CATEGORY_ORDER) + " |", "|---|" + "---:|" * len(CATEGORY_ORDER)]
    for r in rows:
        out.append(f"| {r['label']} | " + " | ".join(_fmt(r['breakdown_ms'].get(c, 0.0)) for c in CATEGORY_ORDER) + " |")
    if doc.get("environment_diff"):
        out += ["", "## Environment differences (ranked by likely impact)", ""]
        for d in doc["environment_diff"]:
            out.append(f"- {d.get('why') or d.get('summary') or d}")
    out += ["", "![step-time breakdown](plots/step_breakdown.png)", ""]
    return "\n".join(out)


def render_html(doc: dict, md: str) -> str:
    body = html.escape(md)
    return ("<!doctype html><html><head><meta charset='utf-8'><title>tfbertperf comparison</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}pre{white-space:pre-wrap}</style>"
            f"</head><body><img src='plots/step_breakdown.png' alt='step-time breakdown' style='max-width:100%'>"
            f"<pre>{body}</pre></body></html>")


def _env_diff(reports: list[dict]) -> list:
    if len(reports) < 2:
        return []
    try:
        from tfbertperf.env import diff
    except ImportError:
        return []
    try:
        return diff(reports[0], reports[-1])
    except UsageError:
        return []


def write_comparison(out_dir: Path, labelled: list[tuple[str, dict, str | None]], axes=None) -> dict:
    from tfbertperf.report.io import atomic_write_json, atomic_write_text
    from tfbertperf.report.plots import write_step_breakdown

    rows = [_row(lbl, rep, d) for lbl, rep, d in labelled]
    doc = {
        "schema": COMPARISON_SCHEMA,
        "id": out_dir.name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "axes": axes or [],
        "rows": rows,
        "environment_diff": _env_diff([rep for _, rep, _ in labelled]),
    }
    bars = []
    for r in rows:
        bd = dict(r["breakdown_ms"])
        if r["input_cost_fraction"] is not None and r["profiled_step_time_ms"]:
            bd["_what_if_input_ms"] = r["input_cost_fraction"] * r["profiled_step_time_ms"]
        bars.append((r["label"], bd))
    write_step_breakdown(out_dir / "plots" / "step_breakdown.png", bars, title="Step-time breakdown by run")
    md = render_markdown(doc)
    atomic_write_text(out_dir / "comparison.md", md)
    atomic_write_text(out_dir / "comparison.html", render_html(doc, md))
    atomic_write_json(out_dir / "comparison.json", doc)
    return doc


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
    class P(argparse.ArgumentParser):
        def error(self, message):
            raise UsageError(f"tfbertperf compare: {message}")

    p = P(prog="tfbertperf compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--matrix", action="append", default=[], metavar="KEY=V1,V2",
                   help="an axis of the run matrix (repeatable; the matrix is their product)")
    p.add_argument("--reports", nargs="+", metavar="REPORT", help="compare existing report.json files / run dirs")
    p.add_argument("--workload", metavar="NAME|FILE")
    p.add_argument("--data", metavar="URI")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE")
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
    print(render_markdown(doc))
    print(f"\ncomparison: {out_dir / 'comparison.md'}  (also comparison.json, comparison.html, plots/)")
    print(f"TensorBoard: tensorboard --logdir {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
