"""What the accelerator regime adds to report.json — `emulation`, `demand_examples_per_sec`, `input_ceiling`,
`headroom`, `host_utilization`, plots/utilization.png, TensorBoard's host/* scalars — and the verdict's reading of
them.  RegimeFigures holds everything profile/verdict.py `refine` reads, measured after training and before the
verdict is made, so that the verdict is decided once (job.py hands `refine_inputs()` to profile/attribution.py
`attribute`) and the report is never sent back to profile/ to be re-judged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tfbertperf.compose.hostsampling import host_utilization, write_host_artifacts
from tfbertperf.compose.inputceiling import demand_examples_per_sec, read_share


@dataclass(frozen=True)
class RegimeFigures:
    emulation: dict | None  # report.json `emulation` less examples_per_sec (known once the report is built)
    demand: float | None  # examples/s the devices consume (compose/inputceiling.py)
    ceiling: dict | None  # the pipeline alone (data/ceiling.py), None when profile.ceiling_seconds is 0
    headroom: float | None  # ceiling ÷ demand
    host: dict | None  # report.json `host_utilization`, None without the sampler
    read_share: float | None  # share of the measured steps the pipeline waited on reads
    model_on_host: bool  # the real model computes on this host's CPU (its threads keep the cores busy too)

    def refine_inputs(self) -> dict:
        """The keyword arguments of profile/verdict.py `refine`."""
        return {"headroom": self.headroom, "host": self.host, "ceiling": self.ceiling, "demand": self.demand,
                "emulation": self.emulation, "read_share": self.read_share, "model_on_host": self.model_on_host}


def measure(cfg, result, emulation, ceiling: dict | None, sampler, storage: dict, step_mean_ms: float | None
            ) -> RegimeFigures:
    """The regime's figures of a finished training (the sampler is stopped here if it still runs).
    `step_mean_ms`: the mean wall time of the steady steps (report/build.py steady_step_ms)."""
    from tfbertperf.profile.verdict import AU_THRESHOLD_DEFAULT

    block = None
    if emulation is not None:
        threshold = float(cfg.profile.au_threshold or AU_THRESHOLD_DEFAULT)
        block = dict(result.extra["emulation"])
        block["au_threshold"] = threshold
        block["au_pass"] = bool(block["au"] >= threshold)
    demand = demand_examples_per_sec(result, emulation)
    headroom = None
    if ceiling is not None:
        from tfbertperf.data.ceiling import headroom as ceiling_headroom

        headroom = ceiling_headroom(ceiling["examples_per_sec"], demand)
    host = None
    if sampler is not None:
        sampler.stop()
        host = host_utilization(sampler)
    step_mean = None if step_mean_ms is None else round(step_mean_ms, 3)  # as report.json's step_time_ms.mean
    return RegimeFigures(emulation=block, demand=demand, ceiling=ceiling, headroom=headroom, host=host,
                         read_share=read_share(storage, step_mean),
                         model_on_host=emulation is None and not (host or {}).get("gpus"))


def add_to_report(report: dict, figures: RegimeFigures, sampler, out_dir: Path, tb_dir: Path, title: str) -> dict:
    """Add the regime's keys (module docstring) to the built report and write the host artifacts; the verdict
    is left as attribute() decided it.  Returns report."""
    if figures.emulation is not None:
        block = dict(figures.emulation)
        block["examples_per_sec"] = report["throughput"]["examples_per_sec"]
        report["emulation"] = block
        report["accelerator_utilization"] = block["au"]  # MLPerf Storage's AU, exact here (T_c is step_ms)
    report["demand_examples_per_sec"] = None if figures.demand is None else round(figures.demand, 3)
    if figures.ceiling is not None:
        report["input_ceiling"] = figures.ceiling
        report["headroom"] = figures.headroom
    if sampler is not None:
        report["host_utilization"] = figures.host
        report["artifacts"]["plots"].append(write_host_artifacts(sampler, tb_dir, out_dir, title))
    return report
