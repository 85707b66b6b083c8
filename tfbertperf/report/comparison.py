"""A comparison's document (comparison.json, schema tfbertperf.comparison/1) and its files: one row per run,
the environment difference of the first and last run, the stacked bars, markdown and HTML views."""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from pathlib import Path

from tfbertperf.errors import UsageError

COMPARISON_SCHEMA = "tfbertperf.comparison/1"


def load_report(path: str) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "report.json"
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        runs = sorted(q.parent.name for q in Path(path).glob("*/report.json")) if Path(path).is_dir() else []
        if runs:  # a runs root: say what to pass instead
            raise UsageError(f"{path}: a runs root ({len(runs)} runs), not a run; pass run directories, "
                             f"e.g. --reports {os.path.join(path, runs[0])} {os.path.join(path, runs[-1])}") from None
        raise UsageError(f"{path}: no such report (give report.json files or run directories)") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UsageError(f"{path}: not valid JSON") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("tfbertperf.report/"):
        raise UsageError(f"{path}: not a tfbertperf report.json")
    return doc


def row(label: str, rep: dict, run_dir: str | None) -> dict:
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


def env_diff(reports: list[dict]) -> list:
    """Ranked environment differences of the first and last report ([] for fewer than two).  A pair the diff
    cannot read is said on stderr in one line and gives []."""
    from tfbertperf.envinfo import diff

    if len(reports) < 2:
        return []
    try:
        return diff(reports[0], reports[-1])
    except UsageError as e:
        sys.stderr.write(f"tfbertperf compare: no environment difference: {e}\n")
        return []


def write_comparison(out_dir: Path, labelled: list[tuple[str, dict, str | None]], axes=None) -> dict:
    from tfbertperf.report.html import comparison_html
    from tfbertperf.report.io import atomic_write_json, atomic_write_text
    from tfbertperf.report.markdown import comparison_markdown
    from tfbertperf.report.plots import write_step_breakdown

    rows = [row(lbl, rep, d) for lbl, rep, d in labelled]
    doc = {
        "schema": COMPARISON_SCHEMA,
        "id": out_dir.name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "axes": axes or [],
        "rows": rows,
        "environment_diff": env_diff([rep for _, rep, _ in labelled]),
    }
    bars = []
    for r in rows:
        bd = dict(r["breakdown_ms"])
        if r["input_cost_fraction"] is not None and r["profiled_step_time_ms"]:
            bd["_what_if_input_ms"] = r["input_cost_fraction"] * r["profiled_step_time_ms"]
        bars.append((r["label"], bd))
    write_step_breakdown(out_dir / "plots" / "step_breakdown.png", bars, title="Step-time breakdown by run")
    md = comparison_markdown(doc)
    atomic_write_text(out_dir / "comparison.md", md)
    atomic_write_text(out_dir / "comparison.html", comparison_html(doc, md))
    atomic_write_json(out_dir / "comparison.json", doc)
    return doc
