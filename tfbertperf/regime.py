"""The accelerator regime of a run, composed for tfbertperf/job.py: emulated devices (train/emulated.py) instead of
the model when `emulate.*` asks for them, the host utilization sampler around the loop (profile/utilization.py),
the input ceiling after it (data/ceiling.py), and what they add to report.json — `emulation`, `input_ceiling`,
`headroom`, `host_utilization`, plots/utilization.png, TensorBoard's host/* scalars, and the verdict's reading of
them (profile/verdict.py `refine`).  Like job.py it composes stages and is not a command.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


def dataset_config(cfg, emulation):
    """The config the input pipeline is built from: an emulated run's global batch is accelerators × batch_size."""
    if emulation is None or emulation.global_batch_size == cfg.train.batch_size:
        return cfg
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, batch_size=emulation.global_batch_size))


def data_service(cfg, manifest: dict):
    """The run's started data/service_session.ServiceSession (pipeline.data_service; off: one that does nothing)."""
    from tfbertperf.data.service_session import ServiceSession

    return ServiceSession(cfg, manifest.get("num_examples")).start(cfg)


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


def train_any(cfg, emulation, dataset_fn, vocab_size: int, tb_dir: str, *, say, strategy, capture, runs_ahead: bool,
              sampler, run_dir: str | None = None, service=None):
    """Train (the real model, or the emulated devices); the sampler marks train_start / train_end, and
    measured_start / measured_end around the steps after warm-up (the span the verdict reads the host over).
    result.extra["measured_span"]: those two perf_counter times (the storage reads' share is taken over it).
    `run_dir`: checkpoints and resume for the real model (train/checkpoint.py); None: none.
    `service`: the run's data/service_session.ServiceSession, told when the training starts and ends."""
    import time

    span: dict[str, float] = {}

    def mark(name: str) -> None:
        span[name] = time.perf_counter()
        if sampler is not None:
            sampler.mark(name)

    if sampler is not None:
        sampler.mark("train_start")
        capture = MarkingCapture(capture, sampler) if capture is not None else None
    if service is not None:
        service.training_started()
    try:
        if emulation is not None:
            from tfbertperf.train.emulated import train_emulated

            result = train_emulated(cfg, emulation, dataset_fn, tb_dir, progress=say, strategy=strategy,
                                    capture=capture, mark=mark)
        else:
            from tfbertperf.train.loop import train

            result = train(cfg, dataset_fn, vocab_size, tb_dir, progress=say, strategy=strategy,
                           input_runs_ahead=runs_ahead, capture=capture, run_dir=run_dir, mark=mark)
    finally:
        if sampler is not None:
            sampler.mark("train_end")
    if "measured_start" in span and "measured_end" in span:
        result.extra["measured_span"] = (span["measured_start"], span["measured_end"])
    if service is not None:
        service.training_ended(result)
    return result


def input_ceiling(cfg, dataset_fn, backend, record_bytes: float, say) -> dict | None:
    """The pipeline alone for profile.ceiling_seconds (None when 0)."""
    from tfbertperf.data.ceiling import measure_ceiling

    seconds = float(cfg.profile.ceiling_seconds or 0.0)
    if seconds <= 0:
        return None
    c = measure_ceiling(lambda: dataset_fn(None), seconds, bytes_read=lambda: backend.metrics.bytes_read,
                        record_bytes=record_bytes)
    say(f"input ceiling: {c['examples_per_sec']:.1f} examples/s, {c['mb_per_sec']:.2f} MB/s "
        f"(pipeline alone, {c['seconds']:.1f} s)")
    return c


def demand_examples_per_sec(result, emulation) -> float | None:
    """What the devices consume: the emulated devices' rate, else global batch ÷ the probe's T_c."""
    if emulation is not None:
        return emulation.demand_examples_per_sec
    if result.compute_only_step_ms:
        return result.global_batch_size * 1000.0 / result.compute_only_step_ms
    return None


def _read_share(report: dict) -> float | None:
    """The share of the measured steps' wall time the pipeline waited on reads (storage.read_wait_fraction), else
    the storage reads' time per step ÷ the mean step time (None when either is unknown)."""
    if (report.get("storage") or {}).get("read_wait_fraction") is not None:
        return report["storage"]["read_wait_fraction"]
    per_step = (report.get("storage") or {}).get("read_ms_per_step")
    step = ((report.get("throughput") or {}).get("step_time_ms") or {}).get("mean")
    return per_step / step if per_step is not None and step else None


def _host_summary(sampler) -> tuple[dict, str, str]:
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


def finish(report: dict, cfg, result, emulation, ceiling: dict | None, sampler, out_dir: Path, tb_dir: Path,
           title: str, service=None) -> dict:
    """Add the regime's keys to report (module docstring) and refine its verdict; returns report.  `service`
    (a stopped ServiceSession): report.json `data_service` when the tf.data service was on."""
    from tfbertperf.profile.verdict import AU_THRESHOLD_DEFAULT, refine

    if service is not None and service.on:
        report["data_service"] = service.block()
        if report.get("storage") is not None:  # its figures are the trainer's own reads (vocab, manifest) only
            report["storage"]["shard_reads_in"] = "tf.data service workers (data_service.workers)"

    threshold = float(cfg.profile.au_threshold or AU_THRESHOLD_DEFAULT)
    if emulation is not None:
        block = dict(result.extra["emulation"])
        block["au_threshold"] = threshold
        block["au_pass"] = bool(block["au"] >= threshold)
        block["examples_per_sec"] = report["throughput"]["examples_per_sec"]
        report["emulation"] = block
        report["accelerator_utilization"] = block["au"]  # MLPerf Storage's AU, exact here (T_c is step_ms)
    demand = demand_examples_per_sec(result, emulation)
    report["demand_examples_per_sec"] = None if demand is None else round(demand, 3)
    if ceiling is not None:
        from tfbertperf.data.ceiling import headroom

        report["input_ceiling"] = ceiling
        report["headroom"] = headroom(ceiling["examples_per_sec"], demand)
    if sampler is not None:
        sampler.stop()
        summary, start, end = _host_summary(sampler)
        summary["whole_run"] = {k: v for k, v in sampler.summary().items()
                                if k in ("cpu_busy_fraction_mean", "process_cpu_fraction_mean", "seconds")}
        summary["thread_cpu"] = sampler.thread_cpu(start, end)
        report["host_utilization"] = summary
        from tfbertperf.profile.utilization import write_scalars
        from tfbertperf.report.utilization_plot import write_utilization_plot

        write_scalars(str(tb_dir / "host"), sampler.samples)
        write_utilization_plot(out_dir / "plots" / "utilization.png", sampler.samples, sampler.marks, title=title)
        report["artifacts"]["plots"].append("plots/utilization.png")
    if report.get("verdict"):
        # the real model's compute on this host's CPU: its threads, not only the pipeline's, keep the cores busy
        on_host = emulation is None and not (report.get("host_utilization") or {}).get("gpus")
        report["verdict"] = refine(report["verdict"], headroom=report.get("headroom"),
                                   host=report.get("host_utilization"), ceiling=ceiling, demand=demand,
                                   emulation=report.get("emulation"), read_share=_read_share(report),
                                   model_on_host=on_host)
        report["verdict"] = scale_out_advice(report["verdict"], report.get("headroom"), cfg)
    return report


def scale_out_advice(verdict: dict, headroom: float | None, cfg) -> dict:
    """A CPU-bound input (input_cause "preprocessing") with the service off: advise moving preprocessing onto N
    tf.data service workers, N = ⌈1 / headroom⌉ (at least 2) — the workers that would lift the ceiling to the
    demand if each brought this host's pipeline rate.  The --set is local:N so that `analyze --validate` and
    `compare` can measure the split on this box (where it adds no cores); on real hosts: grpc://DISPATCHER:PORT."""
    import math

    if verdict.get("input_cause") != "preprocessing" or cfg.pipeline.data_service not in ("off", ""):
        return verdict
    n = max(2, math.ceil(1.0 / headroom)) if headroom else 2
    act = {"advice": f"scale out preprocessing to {n} tf.data service workers (--set pipeline.data_service="
                     f"local:{n} splits it here but adds no cores; on {n} hosts: grpc://DISPATCHER:PORT)",
           "set": [f"pipeline.data_service=local:{n}"]}
    out = dict(verdict)
    out["actions"] = list(out.get("actions") or []) + [act]
    out["recommendations"] = [a["advice"] for a in out["actions"]]
    return out


def max_accelerators(cfg, progress: bool = True, n_max: int = 4096) -> tuple[Path, dict]:
    """`tfbertperf run --max-accelerators`: short emulated runs (no profile, no probe, no ceiling; cfg's own
    train.steps) with N devices, searched by train/maxaccel.py; then one run at the found N with everything on.
    Writes that run's directory with report.json `max_accelerators`; returns (run dir, report)."""
    from tfbertperf import job
    from tfbertperf.errors import UsageError
    from tfbertperf.report.build import make_run_dir, write_run_files
    from tfbertperf.train.emulate import from_config
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
