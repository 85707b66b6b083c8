"""The run's answer in TensorBoard, where the design says users browse runs: the headline, the verdict and the
breakdown as text summaries (Text tab), and the per-category ms/step, the step time and the input cost as
scalars (Scalars tab), so that runs can be compared in TensorBoard itself.

Written once per run into <run>/<artifacts.tensorboard>/answer (a TensorBoard run of its own beside train/ and
host/), at step = the run's steps.
"""

from __future__ import annotations

from pathlib import Path

from tfbertperf.report.console import LABELS
from tfbertperf.report.headline import headline, pct, used_lines
from tfbertperf.report.plots import CATEGORY_ORDER

SUBDIR = "answer"
ANALYZE_SUBDIR = "tfbertperf_answer"  # `analyze LOGDIR --tensorboard`: a TensorBoard run of its own in the user's logdir


def breakdown_markdown(report: dict) -> str:
    """The breakdown as a markdown table (TensorBoard's Text tab renders markdown)."""
    att = report.get("attribution") or {}
    bd, fr = att.get("breakdown_ms") or {}, att.get("fractions") or {}
    rows = ["| category | ms/step | share |", "|---|---:|---:|"]
    rows += [f"| {LABELS.get(c, c)} | {float(bd.get(c, 0.0)):.2f} | {pct(fr.get(c, 0.0))} |"
             for c in CATEGORY_ORDER if float(bd.get(c, 0.0)) > 0 or c in ("input", "host_compute", "device_compute")]
    rows.append(f"| step time (profiled window, {att.get('steps_profiled', 0)} steps) | "
                f"{float(att.get('step_time_ms', 0.0)):.2f} | 100 % |")
    return "\n".join(rows)


def summaries(report: dict) -> tuple[dict[str, str], dict[str, float]]:
    """({text tag: markdown}, {scalar tag: value}) that write_answer writes."""
    from tfbertperf.report.console import verdict_line

    h = headline(report)
    v = report.get("verdict") or {}
    texts = {"headline": h["line"],
             "verdict": "\n".join([verdict_line(report).removeprefix("verdict: "), ""]
                                  + [f"- {r}" for r in v.get("recommendations") or []])}
    if "config" in report:  # our runs: what the run used (`analyze` on someone's capture has no config to show)
        texts["run_used"] = "\n".join(f"- {line}" for line in used_lines(report))
    scalars: dict[str, float] = {}
    att = report.get("attribution") or {}
    if att:
        texts["breakdown"] = breakdown_markdown(report)
        for cat in CATEGORY_ORDER:
            scalars[f"breakdown_ms/{cat}"] = float((att.get("breakdown_ms") or {}).get(cat, 0.0))
        scalars["profiled_step_time_ms"] = float(att.get("step_time_ms") or 0.0)
    if h["input_cost_fraction"] is not None:
        scalars["input_cost_fraction"] = float(h["input_cost_fraction"])
    tp = report.get("throughput") or {}
    if tp.get("examples_per_sec") is not None:
        scalars["examples_per_sec"] = float(tp["examples_per_sec"])
    return texts, scalars


def write_answer(run_dir: Path, report: dict, out: Path | None = None) -> Path:
    """Write summaries(report) into the run's TensorBoard directory (or `out`: `analyze --tensorboard` writes a
    user's capture's answer beside their runs, ANALYZE_SUBDIR); returns the directory written."""
    import tensorflow as tf

    out = Path(out) if out else Path(run_dir) / ((report.get("artifacts") or {}).get("tensorboard") or
                                                 "tensorboard") / SUBDIR
    texts, scalars = summaries(report)
    step = int((report.get("throughput") or {}).get("steps") or (report.get("attribution") or {}).get(
        "steps_profiled") or 0)
    writer = tf.summary.create_file_writer(str(out))
    with writer.as_default():
        for tag, text in texts.items():
            tf.summary.text(tag, text, step=step)
        for tag, value in scalars.items():
            tf.summary.scalar(tag, value, step=step)
    writer.flush()
    writer.close()
    return out
