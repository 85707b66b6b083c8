"""The host utilization sampler around a run (profile/utilization.py): started from `profile.utilization_hz`,
marking the profiled window on its timeline, and summarised into report.json `host_utilization` with its
artifacts (TensorBoard's host/* scalars, plots/utilization.png)."""

from __future__ import annotations

from pathlib import Path


class MarkingCapture:
    """The loop's capture, marking the sampler's timeline where the profiled window opens and closes."""

    def __init__(self, capture, sampler) -> None:
        self._capture, self._sampler, self._open = capture, sampler, False

    def start(self):
        if not self._open:
            self._sampler.mark("profile_start")
            self._open = True
        return self._capture.start()

    def stop(self):
        if self._open:
            self._sampler.mark("profile_stop")
            self._open = False
        return self._capture.stop()

    def __getattr__(self, name):
        return getattr(self._capture, name)


def start_sampler(cfg):
    """A started UtilizationSampler (profile.utilization_hz; None when 0)."""
    from tfbertperf.profile.utilization import UtilizationSampler

    hz = float(cfg.profile.utilization_hz or 0.0)
    return UtilizationSampler(hz=hz).start() if hz > 0 else None


def host_summary(sampler) -> tuple[dict, str, str]:
    """(summary, start mark, end mark): the run's host figures over the measured steps (after warm-up) where the
    loop marked them and the sampler caught at least 3 samples in them, else over the whole training (setup,
    compile and warm-up included) — the setup's idle seconds would otherwise dilute a short run's CPU saturation."""
    marks = {m["name"]: m["t"] for m in sampler.marks}
    if "measured_start" in marks and "measured_end" in marks:
        summary = sampler.summary(marks["measured_start"], marks["measured_end"])
        if summary.get("samples", 0) >= 3:
            return {**summary, "span": "measured steps"}, "measured_start", "measured_end"
    return ({**sampler.summary(marks.get("train_start"), marks.get("train_end")), "span": "training"},
            "train_start", "train_end")


def host_utilization(sampler) -> dict:
    """report.json `host_utilization` from a stopped sampler: host_summary's figures, the whole run's CPU
    (`whole_run`) and the run's threads over the same span (`thread_cpu`)."""
    summary, start, end = host_summary(sampler)
    summary["whole_run"] = {k: v for k, v in sampler.summary().items()
                            if k in ("cpu_busy_fraction_mean", "process_cpu_fraction_mean", "seconds",
                                     "disk_read_mb", "net_rx_mb")}
    summary["thread_cpu"] = sampler.thread_cpu(start, end)
    return summary


def write_host_artifacts(sampler, tb_dir: Path, out_dir: Path, title: str) -> str:
    """TensorBoard's host/* scalars under tb_dir/host and the utilization plot; returns the plot's path relative
    to out_dir."""
    from tfbertperf.profile.utilization import write_scalars
    from tfbertperf.report.utilization_plot import write_utilization_plot

    write_scalars(str(tb_dir / "host"), sampler.samples)
    write_utilization_plot(out_dir / "plots" / "utilization.png", sampler.samples, sampler.marks, title=title)
    return "plots/utilization.png"
