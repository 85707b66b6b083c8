"""Utilization timeline (PNG): host CPU busy / iowait % and process RSS over the run, the profiled window shaded.

Input: the samples and marks of tfbertperf.profile.utilization.UtilizationSampler (t in seconds since start).
"""

from __future__ import annotations

from pathlib import Path


def _mark_times(marks) -> dict[str, float]:
    """{name: t} from [{"name", "t"}], [(name, t)] or {name: t}; the first occurrence of a name wins."""
    if isinstance(marks, dict):
        return {str(k): float(v) for k, v in marks.items()}
    out: dict[str, float] = {}
    for m in marks or []:
        name, t = (m["name"], m["t"]) if isinstance(m, dict) else (m[0], m[1])
        out.setdefault(str(name), float(t))
    return out


def utilization_png(samples: list[dict], marks=None, title: str = "Host utilization") -> bytes:
    """PNG bytes: CPU busy % and iowait % (left axis, whole machine), RSS MB (right axis), a shaded span from
    mark "profile_start" to "profile_stop" when both exist (other marks as dotted lines)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] for s in samples]
    fig, ax = plt.subplots(figsize=(9.0, 4.2), dpi=110)
    ax.plot(t, [100 * s["cpu_busy"] for s in samples], color="#1f77b4", label="CPU busy %", linewidth=1.2)
    ax.plot(t, [100 * s["cpu_iowait"] for s in samples], color="#d62728", label="CPU iowait %", linewidth=1.0)
    if any("process_cpu" in s for s in samples):
        ax.plot(t, [100 * s.get("process_cpu", 0.0) for s in samples], color="#9467bd", label="this process %",
                linewidth=1.0)
    ax.set_ylim(0, 105)
    ax.set_xlabel("seconds since sampler start")
    ax.set_ylabel("% of all cores")
    ax2 = ax.twinx()
    ax2.plot(t, [s["rss_mb"] for s in samples], color="#2ca02c", label="RSS MB", linewidth=1.0, linestyle="--")
    ax2.set_ylabel("process RSS (MB)")
    ax2.set_ylim(bottom=0)
    mt = _mark_times(marks)
    if "profile_start" in mt and "profile_stop" in mt:
        ax.axvspan(mt["profile_start"], mt["profile_stop"], color="#ffbf00", alpha=0.2, label="profiled window")
    for name, x in mt.items():
        if name not in ("profile_start", "profile_stop"):
            ax.axvline(x, color="grey", linestyle=":", linewidth=0.8)
            ax.text(x, 102, name, fontsize=6, rotation=90, va="top", ha="right", color="grey")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left", bbox_to_anchor=(1.08, 1.0))
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def write_utilization_plot(path: str | Path, samples: list[dict], marks=None, title: str = "Host utilization") -> Path:
    """Write `utilization_png(samples, marks, title)` to `path` atomically (temporary name, then os.replace)."""
    from tfbertperf.report.io import atomic_write_bytes

    return atomic_write_bytes(path, utilization_png(samples, marks, title))


__all__ = ["utilization_png", "write_utilization_plot"]
