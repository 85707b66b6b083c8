"""Plots people would rather see than read: the step-time breakdown as stacked bars."""

from __future__ import annotations

import io
from pathlib import Path

CATEGORY_ORDER = [
    "input", "host_to_device", "device_compute", "host_compute", "kernel_launch",
    "device_to_device", "collectives", "output", "compile", "other",
]
COLORS = {
    "input": "#d62728", "host_to_device": "#ff7f0e", "device_compute": "#2ca02c", "host_compute": "#98df8a",
    "kernel_launch": "#9467bd", "device_to_device": "#8c564b", "collectives": "#e377c2", "output": "#7f7f7f",
    "compile": "#bcbd22", "other": "#c7c7c7",
}


def _wrap(label: str, width: int = 24) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(label, width)[:4]) or label


def step_breakdown_png(bars: list[tuple[str, dict]], title: str = "Step-time breakdown") -> bytes:
    """Stacked bars, one per run: `bars` = [(label, breakdown_ms dict)], in ms per step.  Returns PNG bytes.

    When a bar's report also has a what-if figure, pass it as breakdown["_what_if_input_ms"] and it is drawn as a
    marker (the input cost measured against the compute-only probe, for comparison with the direct figure).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(bars))
    # about 1,100 px wide: the page shows it at full width, readable without zooming
    fig, ax = plt.subplots(figsize=(max(9.0, 1.6 * n + 4.0), 5.2), dpi=120)
    used = [c for c in CATEGORY_ORDER if any((b or {}).get(c, 0) > 0 for _, b in bars)]
    xs = list(range(len(bars)))
    bottoms = [0.0] * len(bars)
    for cat in used:
        vals = [float((b or {}).get(cat, 0.0)) for _, b in bars]
        ax.bar(xs, vals, bottom=bottoms, color=COLORS[cat], label=cat.replace("_", " "), width=0.6)
        bottoms = [a + v for a, v in zip(bottoms, vals)]
    for i, (_, b) in enumerate(bars):
        w = (b or {}).get("_what_if_input_ms")
        if w is not None:
            ax.plot([i - 0.3, i + 0.3], [w, w], color="black", linestyle="--", linewidth=1.2,
                    label="what-if input cost" if i == 0 else None)
        ax.text(i, bottoms[i], f"{bottoms[i]:.1f} ms", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xticklabels([_wrap(lbl) for lbl, _ in bars], rotation=20 if n > 3 else 0, ha="right" if n > 3 else "center",
                       fontsize=8)
    ax.set_ylabel("ms per step (profiled window)")
    ax.set_title(title, fontsize=9)
    if used:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def comparison_bars(rows: list[dict]) -> list[tuple[str, dict]]:
    """Stacked-bar entries of a comparison's rows (median breakdown, what-if input cost as the marker)."""
    bars = []
    for r in rows:
        bd = dict(r.get("breakdown_ms") or {})
        if r.get("input_cost_fraction") is not None and r.get("profiled_step_time_ms"):
            bd["_what_if_input_ms"] = r["input_cost_fraction"] * r["profiled_step_time_ms"]
        bars.append((r["label"], bd))
    return bars


def throughput_png(rows: list[dict]) -> bytes:
    """Horizontal bars of each row's median examples/s with its min–max spread as an error bar.  PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(rows))
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * n + 1.6), dpi=110)
    ys = list(range(len(rows)))
    meds, lo, hi = [], [], []
    for r in rows:
        s = (r.get("stats") or {}).get("examples_per_sec") or {"median": 0.0, "min": 0.0, "max": 0.0}
        meds.append(s["median"])
        lo.append(s["median"] - s["min"])
        hi.append(s["max"] - s["median"])
    ax.barh(ys, meds, xerr=[lo, hi], color="#1f77b4", height=0.55, capsize=4, ecolor="black")
    for y, m, h in zip(ys, meds, hi):
        ax.text(m + h, y, f"  {m:.1f}", va="center", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels([_wrap(r["label"]) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("examples/s (median; error bar = min–max of the repeats)")
    ax.set_xlim(0, max([m + h for m, h in zip(meds, hi)] or [1.0]) * 1.18 or 1.0)
    ax.set_title("Throughput by cell", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def write_step_breakdown(path: str | Path, bars: list[tuple[str, dict]], title: str = "Step-time breakdown") -> Path:
    from tfbertperf.report.io import atomic_write_bytes

    return atomic_write_bytes(path, step_breakdown_png(bars, title))
