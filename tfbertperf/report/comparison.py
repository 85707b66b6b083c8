"""A comparison's document (comparison.json, schema tfbertperf.comparison/2) and its files.

One row per cell (a matrix cell, a scenario's cell, or one --reports file).  A cell ran `repeat` times,
interleaved with the other cells; every figure of a row is the median of its runs, with its spread (min–max) in
row["stats"].  A failed cell is a row with status "failed" and its one-line error.  Figures are read from each
run's report.json; a key the report lacks is None (shown as "—").  Files: comparison.json, comparison.md,
index.html (self-contained page; comparison.html is the same page), plots/step_breakdown.png and
plots/throughput.png."""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from collections import Counter
from pathlib import Path

from tfbertperf.errors import UsageError
from tfbertperf.report.headline import device_kind
from tfbertperf.report.plots import CATEGORY_ORDER
from tfbertperf.report.stats import fmt, ratio, real_difference, summary

COMPARISON_SCHEMA = "tfbertperf.comparison/2"


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
    except OSError as e:
        raise UsageError(f"{path}: not a readable report ({e.strerror or type(e).__name__})") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("tfbertperf.report/"):
        raise UsageError(f"{path}: not a tfbertperf report.json")
    return doc


def _get(doc: dict, *path):
    for k in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def _div(x, k):
    return None if x is None else float(x) / k


# Figures of a row: name → how to read it from one report.json (None when the report lacks it).
FIGURES = {
    "examples_per_sec": lambda r: _get(r, "throughput", "examples_per_sec"),
    "step_time_ms": lambda r: _get(r, "throughput", "step_time_ms", "mean"),
    "profiled_step_time_ms": lambda r: _get(r, "attribution", "step_time_ms"),
    "input_bound_fraction": lambda r: _get(r, "attribution", "input_bound_fraction"),
    "input_cost_fraction": lambda r: _get(r, "attribution", "input_cost_fraction"),
    "input_wait_fraction": lambda r: _get(r, "step_timer", "input_wait_fraction"),
    "accelerator_utilization": lambda r: r.get("accelerator_utilization"),
    "storage_read_ms_per_step": lambda r: _get(r, "storage", "read_ms_per_step"),
    "preprocessing_ms_per_step": lambda r: _div(_get(r, "attribution", "input_ops_us", "preprocessing"), 1000.0),
    "request_p50_ms": lambda r: _get(r, "storage", "request_latency_ms", "p50"),
    "request_p99_ms": lambda r: _get(r, "storage", "request_latency_ms", "p99"),
    "read_mb_per_sec": lambda r: _get(r, "storage", "read_mb_per_sec"),
    "retries": lambda r: _get(r, "storage", "retries"),
    "input_ceiling_examples_per_sec": lambda r: _get(r, "input_ceiling", "examples_per_sec"),
    "headroom": lambda r: r.get("headroom"),
    "final_loss": lambda r: _get(r, "training", "final_loss"),
    "cpu_busy_fraction": lambda r: _get(r, "host_utilization", "cpu_busy_fraction_mean"),
    "read_wait_fraction": lambda r: _get(r, "storage", "read_wait_fraction"),
    "service_wait_ms_per_step": lambda r: _get(r, "data_service", "wait_ms_per_step"),  # tf.data service on
}


def _median(s):
    return None if s is None else s["median"]


def cell_row(cell: dict) -> dict:
    """One row from a cell {"label", "set": [...], "runs": [(report, run_dir)], "errors": [one-line errors]}."""
    runs, errors = cell.get("runs") or [], cell.get("errors") or []
    reps = [r for r, _ in runs]
    stats = {name: summary(fn(r) for r in reps) for name, fn in FIGURES.items()}
    for cat in CATEGORY_ORDER:
        stats[f"breakdown_ms.{cat}"] = summary(_get(r, "attribution", "breakdown_ms", cat) for r in reps)
        stats[f"fractions.{cat}"] = summary(_get(r, "attribution", "fractions", cat) for r in reps)
    au_pass = [_get(r, "attribution", "au_pass") for r in reps]
    au_pass = [bool(x) for x in au_pass if x is not None]
    verdicts = Counter(_get(r, "verdict", "bottleneck") for r in reps)
    causes = Counter(_get(r, "verdict", "input_cause") for r in reps if _get(r, "verdict", "input_cause"))
    # the run whose throughput is the median one speaks for the cell (verdict text, recommendations)
    mid = sorted(reps, key=lambda r: _get(r, "throughput", "examples_per_sec") or 0)[len(reps) // 2] if reps else {}
    row = {
        "label": cell["label"], "set": list(cell.get("set") or []),
        "status": "failed" if not reps else ("partial" if errors else "ok"),
        "error": errors[0] if errors else None, "errors": errors,
        "repeats": len(reps), "run_dirs": [d for _, d in runs],
        # where each run's data came from (report.json data.summary), in the order of run_dirs; None: an older report
        "data": [_get(r, "data", "summary") for r in reps],
        "run_dir": runs[len(runs) // 2][1] if runs else None,
        **{name: _median(s) for name, s in stats.items() if "." not in name},
        "breakdown_ms": {c: _median(stats[f"breakdown_ms.{c}"]) or 0.0 for c in CATEGORY_ORDER if reps},
        "fractions": {c: _median(stats[f"fractions.{c}"]) or 0.0 for c in CATEGORY_ORDER if reps},
        "stats": {k: v for k, v in stats.items() if v is not None},
        "au_pass": (all(au_pass) if au_pass else None),
        "au_pass_runs": f"{sum(au_pass)}/{len(au_pass)}" if au_pass else None,
        "bottleneck": verdicts.most_common(1)[0][0] if reps else None,
        "bottleneck_runs": f"{verdicts.most_common(1)[0][1]}/{len(reps)}" if reps else None,
        "input_cause": causes.most_common(1)[0][0] if causes else None,
        "verdict_of_median_run": _get(mid, "verdict", "summary"),
        "recommendations": list(_get(mid, "verdict", "recommendations") or []),
        "actions": list(_get(mid, "verdict", "actions") or []),
        "storage": {k: _get(mid, "storage", k) for k in ("backend", "mode", "uri")},
        "emulation": mid.get("emulation") if isinstance(mid, dict) else None,
        # "cpu": the CPU is the device, no AU is shown (its T_c / T is 1 − the input cost); "accelerator", "emulated"
        "device": device_kind(mid) if reps else None,
    }
    row["verdict"] = median_verdict(row) if reps else None
    return row


CAUSE_WORDS = {"storage": "waiting on storage", "preprocessing": "preprocessing-limited (CPU saturated)",
               "mixed": "storage reads and preprocessing both count"}


def median_verdict(row: dict) -> str:
    """The cell's verdict in one sentence quoting the same medians (and spreads) as the comparison's tables, so
    that it never contradicts them: the bottleneck most runs found, the input cause, input cost, AU, headroom."""
    s = row["stats"]
    parts = [f"{row['bottleneck']}-bound in {row['bottleneck_runs']} runs"]
    if row.get("input_cause"):
        parts[0] += f", {CAUSE_WORDS.get(row['input_cause'], row['input_cause'])}"
    for key, words, pct, digits in (("input_cost_fraction", "input cost (what-if)", True, 1),
                                    ("accelerator_utilization", "AU", True, 0),
                                    ("cpu_busy_fraction", "CPU busy", True, 0),
                                    ("read_wait_fraction", "waiting on reads", True, 0),
                                    ("headroom", "headroom", False, 2)):
        if s.get(key) is not None and not (key == "accelerator_utilization" and row.get("device") == "cpu"):
            parts.append(f"{words} {fmt(s[key], digits, pct=pct)}")
    return "; ".join(parts) + " (medians of the repeats)"


def rank_rows(rows: list[dict]) -> dict:
    """Each ok row against the fastest (median examples/s): ratio with spread and whether it is a real difference."""
    ok = [r for r in rows if r["status"] != "failed" and r.get("examples_per_sec")]
    if not ok:
        return {}
    fastest = max(ok, key=lambda r: r["examples_per_sec"])
    # another row than the fastest even when medians tie (a tie is still two cells to compare)
    slowest = min((r for r in ok if r is not fastest), key=lambda r: r["examples_per_sec"], default=fastest)
    f = fastest["stats"].get("examples_per_sec")
    for r in ok:
        s = r["stats"].get("examples_per_sec")
        r["vs_fastest"] = ratio(s, f)
        r["real_difference_vs_fastest"] = r is not fastest and real_difference(s, f)
    return {"fastest": fastest["label"], "slowest": slowest["label"]}


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


def build_comparison(out_dir: Path, cells: list[dict], axes=None, repeat: int = 1, scenario: dict | None = None,
                     machines: bool = False) -> dict:
    """The comparison document.  `machines`: the cells are reports from (possibly) different machines, so the
    environment difference of the slowest and fastest is part of the explanation."""
    from tfbertperf.report.explain import explain

    rows = [cell_row(c) for c in cells]
    ranking = rank_rows(rows)
    by_label = {c["label"]: c for c in cells}
    firsts = [c["runs"][0][0] for c in cells if c.get("runs")]
    env = []
    if ranking and ranking["fastest"] != ranking["slowest"]:
        env = env_diff([by_label[ranking["slowest"]]["runs"][0][0], by_label[ranking["fastest"]]["runs"][0][0]])
    elif len(firsts) > 1:
        env = env_diff([firsts[0], firsts[-1]])
    doc = {
        "schema": COMPARISON_SCHEMA,
        "id": out_dir.name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "axes": axes or [],
        "repeat": repeat,
        "order": "round-robin (A B C A B C …)" if repeat > 1 else "one run per cell",
        "scenario": scenario,
        "rows": rows,
        "failed": [r["label"] for r in rows if r["status"] == "failed"],
        "ranking": ranking,
        "environment_diff": env,
        "tensorboard": f"tensorboard --logdir {out_dir}",
    }
    doc["explanation"] = explain(doc, machines=machines)
    return doc


def write_comparison(out_dir: Path, cells: list[dict], axes=None, repeat: int = 1, scenario: dict | None = None,
                     machines: bool = False) -> dict:
    from tfbertperf.report.html import comparison_page
    from tfbertperf.report.io import atomic_write_bytes, atomic_write_json, atomic_write_text
    from tfbertperf.report.markdown import comparison_markdown
    from tfbertperf.report.plots import comparison_bars, throughput_png, write_step_breakdown

    doc = build_comparison(out_dir, cells, axes, repeat, scenario, machines)
    ok = [r for r in doc["rows"] if r["status"] != "failed"]
    # PNGs for comparison.md; index.html draws its own charts in HTML (report/html.py: legible on a phone)
    write_step_breakdown(out_dir / "plots" / "step_breakdown.png", comparison_bars(ok),
                         title="Step-time breakdown by cell (median of repeats)")
    atomic_write_bytes(out_dir / "plots" / "throughput.png", throughput_png(ok))
    md = comparison_markdown(doc)
    page = comparison_page(doc, str(out_dir))
    atomic_write_text(out_dir / "comparison.md", md)
    atomic_write_text(out_dir / "index.html", page)
    atomic_write_text(out_dir / "comparison.html", page)
    atomic_write_json(out_dir / "comparison.json", doc)
    return doc
