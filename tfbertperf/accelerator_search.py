"""`tfbertperf run --max-accelerators`: the largest number of emulated devices the input keeps busy (AU ≥
profile.au_threshold), searched with short runs of tfbertperf/job.py (train/maxaccel.py), then one full run at
the found N.  Composes job.py; not a command itself (run.py calls it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tfbertperf import job
from tfbertperf.errors import UsageError


def max_accelerators(cfg, progress: bool = True, n_max: int = 4096) -> tuple[Path, dict]:
    """`tfbertperf run --max-accelerators`: short emulated runs (no profile, no probe, no ceiling; cfg's own
    train.steps) with N devices, searched by train/maxaccel.py; then one run at the found N with everything on.
    Writes that run's directory with report.json `max_accelerators`; returns (run dir, report)."""
    from tfbertperf.report.build import make_run_dir, write_run_files
    from tfbertperf.train.emulated_devices import from_config
    from tfbertperf.train.maxaccel import search

    if from_config(cfg) is None:
        raise UsageError("--max-accelerators: set emulate.device (a device profile) or emulate.step_ms")
    say = job.log if progress else (lambda m: None)
    inputs = job.Inputs(cfg, progress)
    run_dir = make_run_dir(cfg)
    say(f"run directory {run_dir}; searching the largest N with AU >= {cfg.profile.au_threshold:.0%}")

    def with_n(n: int, **profile):
        return dataclasses.replace(cfg, emulate=dataclasses.replace(cfg.emulate, accelerators=n),
                                   profile=dataclasses.replace(cfg.profile, **profile))

    def measure(n: int) -> dict:
        trial = with_n(n, steps="", probe_steps=0, ceiling_seconds=0.0, utilization_hz=0.0)
        d = run_dir / "trials" / f"n{n}"
        rep = job.execute(trial, d, d / "tensorboard", inputs=inputs, progress=False)
        return {"au": rep["emulation"]["au"], "examples_per_sec": rep["throughput"]["examples_per_sec"]}

    found = search(measure, float(cfg.profile.au_threshold), n_max=n_max, progress=say)
    final = with_n(max(1, found["n"]))
    say(f"N = {found['n']}: the full run at N={final.emulate.accelerators} (profile, ceiling, utilization)")
    report = job.execute(final, run_dir, run_dir / "tensorboard", inputs=inputs, progress=progress)
    report["max_accelerators"] = found
    write_run_files(run_dir, final, report)
    return run_dir, report
