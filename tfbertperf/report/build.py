"""report.json assembly (schema tfbertperf.report/1, shared/DESIGN.md and docs/report-schema in README), the
run directory, and the files written into it."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from tfbertperf.errors import UsageError
from tfbertperf.report.caveats import caveats, storage_caveats

REPORT_SCHEMA = "tfbertperf.report/1"
RECOVERY_WAIT_SHARE = 0.02  # the loop waits for input > 2 % of the time → the pipeline is behind


def check_runs_root(cfg) -> None:
    """Before any work: run.out can be made (its nearest existing ancestor is a writable directory)."""
    import os

    p = Path(cfg.run.out).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir() or not os.access(p, os.W_OK | os.X_OK):
        why = "not a directory" if not p.is_dir() else "not writable"
        raise UsageError(f"--set run.out={cfg.run.out}: cannot create the runs directory ({p} is {why})")


def make_run_dir(cfg) -> Path:
    """runs/<UTC timestamp>-<workload>[-<name>]/ — created fresh, never reused (a suffix is added on collision)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = cfg.workload + (f"-{cfg.run.name}" if cfg.run.name else "")
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    root = Path(cfg.run.out)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--set run.out={cfg.run.out}: cannot create the runs directory ({e.strerror})") from None
    for i in range(1000):
        d = root / (f"{stamp}-{name}" + (f"-{i}" if i else ""))
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue
    raise UsageError(f"--set run.out={cfg.run.out}: could not create a fresh run directory")


def _percentiles(xs: list[float]) -> dict:
    import numpy as np

    a = np.asarray(xs or [0.0], dtype=float)
    return {
        "mean": round(float(a.mean()), 3),
        "p50": round(float(np.percentile(a, 50)), 3),
        "p90": round(float(np.percentile(a, 90)), 3),
        "max": round(float(a.max()), 3),
    }


def steady_steps(result) -> list[int]:
    """Indices of steps that count for throughput: after warm-up and outside the profiled window (profiling has
    its own overhead, measured separately by tools/bench/bench_overhead.py), and not among the probe's recovery
    steps (fed from buffers a run-ahead pipeline filled while a probe block ran; train/probe.py) nor the steps
    right after the capture stopped (filled while it was written: profile/stepfile.py after_stop) — where the
    pipeline is behind, as below."""
    w = result.profile_window
    idx = [i for i in range(len(result.step_times_ms)) if i >= result.warmup_steps]
    if w is not None:
        outside = [i for i in idx if not (w[0] <= i < w[1])]
        if len(outside) >= 3:
            idx = outside
    recovery = set(result.extra.get("probe_recovery_steps") or ())
    if w is not None and result.extra.get("profile_stop_ms"):  # fed while the capture was written (stepfile.py)
        from tfbertperf.profile.stepfile import after_stop

        recovery |= set(after_stop(result.step_times_ms, (w[0] - 1, w[1] + 1), result.warmup_steps,
                                   result.extra["profile_stop_ms"]))
    if recovery and result.input_wait_ms:
        kept = [i for i in idx if i not in recovery]
        # Only a pipeline that is behind (the loop waits for it) has room to run ahead during a probe block;
        # one that keeps up has full buffers when the block starts, so its recovery steps are ordinary steps.
        behind = kept and (sum(result.input_wait_ms[i] for i in kept)
                           > RECOVERY_WAIT_SHARE * sum(result.step_times_ms[i] for i in kept))
        if behind and len(kept) >= 3:
            idx = kept
    return idx or list(range(len(result.step_times_ms)))


def input_cost_ci95(result) -> float | None:
    """The half-width of the run's what-if 95 % interval: each probe block against the steady steps around it,
    as a user's step file is read (profile/stepfile.py interval); None without two blocks in the loop."""
    from tfbertperf.profile.stepfile import interval

    probe, blocks = result.extra.get("probe_step_times_ms"), result.extra.get("probe_blocks")
    return interval(result.step_times_ms, steady_steps(result), list(probe or ()), blocks) if probe else None


def steady_step_ms(result) -> float:
    """T: the mean wall time of the steady steps (ms).  T and T_c are both means: a stall that hits one step in
    N costs throughput, and the what-if answer is about throughput."""
    idx = steady_steps(result)
    return sum(result.step_times_ms[i] for i in idx) / max(1, len(idx))


def bar_entry(report: dict) -> dict:
    """A stacked-bar entry for report/plots.py: breakdown_ms plus the what-if input cost as a marker."""
    att = report.get("attribution") or {}
    bd = dict(att.get("breakdown_ms") or {})
    if att.get("input_cost_fraction") is not None:
        bd["_what_if_input_ms"] = att["input_cost_fraction"] * att["step_time_ms"]
    return bd


def build_report(cfg, run_dir: Path, result, attribution_doc: dict, storage: dict,
                 environment: dict, model_info: dict, plots: list[str]) -> dict:
    """Assemble report.json (schema tfbertperf.report/1) from the stages' results."""
    idx = steady_steps(result)
    times = [result.step_times_ms[i] for i in idx]
    total_s = sum(times) / 1000.0
    ex_per_s = result.global_batch_size * len(times) / total_s if total_s > 0 else 0.0
    report = {
        "schema": REPORT_SCHEMA,
        "run_id": run_dir.name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "workload": cfg.workload,
        "config": cfg.to_dict(),
        "environment": environment,
        "model": model_info,
        "training": {
            "loss_trajectory": [[int(s), float(l)] for s, l in result.loss_trajectory],
            "final_loss": float(result.final_loss),
            "global_batch_size": int(result.global_batch_size),
            "replicas": int(result.replicas),
            "per_replica_batch_size": int(result.extra.get(
                "per_replica_batch_size", result.global_batch_size // max(1, result.replicas))),
            "metrics": result.metrics,
        },
        "throughput": {
            "steps": int(result.steps),
            "steps_measured": len(times),
            "examples_per_sec": round(ex_per_s, 3),
            "tokens_per_sec": round(ex_per_s * result.seq_len, 3),
            "step_time_ms": _percentiles(times),
        },
        "attribution": attribution_doc.get("attribution"),
        "step_timer": attribution_doc.get("step_timer"),
        "accelerator_utilization": attribution_doc.get("accelerator_utilization"),
        "storage": storage,
        "verdict": attribution_doc.get("verdict"),
        "artifacts": {"tensorboard": "tensorboard", "plots": plots},
    }
    w = cfg.profile_window
    report["profile_window"] = {"steps": list(w) if w else None, "chosen": "auto" if cfg.window_is_auto else "user",
                                "note": cfg.window_choice()}
    # the what-if probe's sample: its blocks and timed steps, and with profile.probe_steps=auto why it stopped
    sample = result.extra.get("probe_sample")
    report["probe_sample"] = None if sample is None else {
        **sample, "blocks_ran": len(result.extra.get("probe_blocks") or ()), "timed_steps": int(result.probe_steps)}
    if "hosts" in attribution_doc:
        report["hosts"] = attribution_doc["hosts"]
    # the accelerator planes read straight from the capture (profile/devices.py); [] for a CPU-only run
    report["devices"] = attribution_doc.get("devices", [])
    report["caveats"] = caveats(cfg, result, len(times), environment or {}, idx) + storage_caveats(storage)
    return report


def profile_window_note(cfg, result, tb_dir: Path) -> str | None:
    """Why the profile in tb_dir is not this process's whole window (None when there is no profile): the window
    was cut short by Ctrl-C, or was profiled before the checkpoint this run resumed from.  Its steps are still
    the run's, so report.json keeps their attribution and verdict, with this note (attribution.window_note)."""
    if cfg.profile_window is None or not list(Path(tb_dir).glob("plugins/profile/*/*.xplane.pb")):
        return None
    w = f"{cfg.profile_window[0]}:{cfg.profile_window[1]}"
    if result.extra.get("interrupted_at_step") is not None:
        return f"the profiled window {w} was cut short by Ctrl-C after step {result.extra['interrupted_at_step']}"
    return f"the profiled window {w} was captured before the checkpoint this run resumed from"


INTERRUPTED = "INTERRUPTED"  # marker file in a run directory whose run was stopped by Ctrl-C (SIGINT)


def write_config(run_dir: Path, cfg) -> None:
    """config.yaml (atomically, secrets redacted): written first, so that a killed run can be resumed.  From here
    on the libraries' log records go to the run's library.log (errors.py library_log), not to the console."""
    import yaml

    from tfbertperf.errors import library_log

    library_log.to_file(Path(run_dir) / "library.log")

    from tfbertperf.report.io import atomic_write_text

    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def mark_interrupted(run_dir: Path, interrupted: bool, at_step: int | None = None) -> None:
    """Write the INTERRUPTED marker (at_step: the steps done when a report marked incomplete was written; None:
    stopped before any report), or, for a run that completed, remove one left by an earlier, now resumed,
    attempt."""
    from tfbertperf.report.io import atomic_write_text

    marker = Path(run_dir) / INTERRUPTED
    if interrupted:
        what = (f"after step {at_step}; report.json is marked incomplete" if at_step is not None
                else "before a report was written")
        atomic_write_text(marker, f"interrupted (SIGINT) {what}\n")
    elif marker.exists():
        marker.unlink()


def set_pipeline(report: dict, pipeline: dict) -> None:
    """report.json's `pipeline` (the knobs in force, data/pipeline.py effective_pipeline); a setting that cannot
    take effect as written (cycle_length above the number of shards) is also a caveat, said on the console."""
    report["pipeline"] = pipeline
    if pipeline.get("cycle_length_note"):
        report.setdefault("caveats", []).append(pipeline["cycle_length_note"])


def tokenizer_block(manifest: dict) -> dict:
    """report.json's `tokenizer`: {"name", "library", "version", "vocab_sha256", "lower_case", "vocab_size"} of
    the tokenizer the run's data were made with (env --diff ranks a difference as a numerics cause)."""
    from tfbertperf.data.tokcheck import manifest_tokenizer

    if manifest.get("origin") == "user":  # tokenized by whoever wrote the records: only the vocab size is known
        return {"name": "unknown (the data came pre-tokenized)", "library": None, "version": None,
                "vocab_sha256": None, "lower_case": None, "vocab_size": manifest.get("vocab_size"),
                "vocab_source": manifest.get("vocab_source")}
    return manifest_tokenizer(manifest)


def write_run_files(run_dir: Path, cfg, report: dict) -> None:
    """config.yaml, environment.json, report.json, report.md — each atomically (secrets redacted) — and the answer
    in TensorBoard (report/tensorboard.py).  report["headline"] is set here, from the final verdict."""
    from tfbertperf.report.headline import headline
    from tfbertperf.report.io import atomic_write_json, atomic_write_text
    from tfbertperf.report.markdown import run_markdown
    from tfbertperf.report.tensorboard import write_answer

    report["headline"] = headline(report)
    write_answer(run_dir, report)
    write_config(run_dir, cfg)
    atomic_write_json(run_dir / "environment.json", report.get("environment") or {})
    atomic_write_json(run_dir / "report.json", report)
    atomic_write_text(run_dir / "report.md", run_markdown(report))
