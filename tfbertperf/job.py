"""The profiled training job, composed from the stages: data → tf.data → Keras BERT → profiled training →
attribution → report.  The commands (`run`, `analyze --validate`, `compare`'s cells, multi-worker processes) call
it; it is not a command itself.

    run_dir, report = run(cfg)            # one process
    run_dir, report = run_multi_worker(cfg, workers=2)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tfbertperf.config import RunConfig
from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text


def log(msg: str) -> None:
    sys.stderr.write(f"[tfbertperf] {msg}\n")
    sys.stderr.flush()


def quiet_tf() -> None:
    # TF's C++ INFO lines (oneDNN, cuda stubs) bury the table; warnings and errors still show.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def ensure_data(cfg: RunConfig, backend, progress: bool = True) -> tuple[str, dict]:
    """Return (data URI, manifest).  A data set made from the config (no data.uri) is prepared on first use and
    again when its sources changed (corpus or vocab files edited: manifest source_sha256); an explicit URI must
    exist."""
    from tfbertperf.data.manifest import check_compatible, load_manifest

    uri = cfg.resolved_data_uri()
    why = None
    if cfg.uses_default_data():
        from tfbertperf.data.manifest import stale_reason

        why = ("first use only" if not backend.exists(backend.join(uri, "manifest.json"))
               else stale_reason(cfg, load_manifest(uri, backend)))
    if why:
        from tfbertperf.data.prepare import prepare_data

        log(f"preparing the data set in {uri} ({why})")
        t0 = time.perf_counter()
        prepare_data(cfg, uri, progress=progress)
        log(f"data ready in {time.perf_counter() - t0:.1f} s")
    manifest = load_manifest(uri, backend)
    check_compatible(cfg, manifest)
    return uri, manifest


class Inputs:
    """Everything the data side hands to a training process: backend, data URI, manifest, shard list."""

    def __init__(self, cfg: RunConfig, progress: bool = True) -> None:
        from tfbertperf.data.manifest import shard_uris
        from tfbertperf.storage import open_backend

        self.backend = open_backend(cfg.resolved_data_uri(), cfg.data)
        self.uri, self.manifest = ensure_data(cfg, self.backend, progress=progress)
        self.shard_uris, self.record_bytes_hint = shard_uris(cfg, self.manifest, self.backend)


def execute(cfg: RunConfig, out_dir: Path, tb_dir: Path, *, inputs: Inputs | None = None, strategy=None,
            progress: bool = True) -> dict:
    """Train + profile + attribute in this process; plots go to out_dir/plots.  Returns the report dict (not
    written).  `strategy`: an already-created tf.distribute strategy (multi-worker processes make theirs first)."""
    quiet_tf()
    from tfbertperf.data.pipeline import build_dataset, effective_pipeline, runs_ahead
    from tfbertperf.envinfo import fingerprint
    from tfbertperf.profile.attribution import attribute, step_timer_summary
    from tfbertperf.profile.capture import Capture
    from tfbertperf.profile.xprof_tools import find_xplanes
    from tfbertperf.report.build import bar_entry, build_report, steady_step_ms
    from tfbertperf.storage import open_shards
    from tfbertperf.train.loop import train

    say = log if progress else (lambda m: None)
    inputs = inputs or Inputs(cfg, progress)
    backend, manifest = inputs.backend, inputs.manifest
    tb_dir.mkdir(parents=True, exist_ok=True)
    environment = fingerprint(data_uri=inputs.uri, probe=True)

    sources = []

    def dataset_fn(input_context=None):
        source = open_shards(inputs.shard_uris, cfg.data, backend, record_bytes_hint=inputs.record_bytes_hint)
        sources.append(source)
        # Global batches, or per-replica batches of this input pipeline's own shards when train/ passes a
        # tf.distribute.InputContext (multi-worker: each worker reads only its shards).
        return build_dataset(cfg, manifest, source, input_context)

    capture = Capture.from_config(str(tb_dir), cfg.profile) if cfg.profile_window else None
    try:
        result = train(cfg, dataset_fn, int(manifest["vocab_size"]), str(tb_dir), progress=say, strategy=strategy,
                       input_runs_ahead=runs_ahead(cfg), capture=capture)
    finally:
        for s in sources:
            try:
                s.close()
            except Exception:  # noqa: BLE001 — closing background workers must not mask the real error
                pass

    step_ms = steady_step_ms(result)
    compute_only_ms = result.compute_only_step_ms  # the mean of the probe's timed steps
    storage = {"backend": backend.name, "mode": sources[0].mode if sources else cfg.data.mode,
               "uri": redact_text(inputs.uri)}
    storage.update(backend.metrics.summary())
    storage["read_ms_per_step"] = round(storage["read_time_ms"] / max(1, result.steps), 3)

    attribution_doc: dict = {}
    if result.profile_window is not None:
        attribution_doc = attribute(find_xplanes(str(tb_dir)), step_time_ms=step_ms,
                                    compute_only_step_ms=compute_only_ms, storage=storage, config=cfg.to_dict(),
                                    cpu_flags=(environment.get("cpu") or {}).get("flags"))
        # T and T_c of the what-if figure, so that a reader can recompute it (unclamped)
        attribution_doc["attribution"]["steady_step_time_ms"] = round(step_ms, 4)
        attribution_doc["attribution"]["compute_only_step_ms"] = (None if compute_only_ms is None
                                                                  else round(compute_only_ms, 4))
        # whether the capture recorded thread-pool tasks (profile.threadpool_events; profile/capture.py)
        attribution_doc["attribution"]["threadpool_events"] = result.extra.get("threadpool_events")
    attribution_doc["step_timer"] = step_timer_summary(result.step_times_ms, result.input_wait_ms,
                                                       result.warmup_steps)
    plots: list[str] = []
    if attribution_doc.get("attribution"):
        from tfbertperf.report.plots import write_step_breakdown

        write_step_breakdown(out_dir / "plots" / "step_breakdown.png", [(out_dir.name, bar_entry(attribution_doc))],
                             title=f"Step-time breakdown — BERT-{cfg.model.size} {cfg.model.task}, "
                                   f"{cfg.pipeline.preset} pipeline, {backend.name}")
        plots.append("plots/step_breakdown.png")

    report = build_report(cfg, out_dir, result, attribution_doc, storage, environment,
                          result.extra.get("model") or {}, plots)
    report["pipeline"] = effective_pipeline(cfg, len(inputs.shard_uris))  # the knobs in force (preset resolved)
    report["artifacts"]["tensorboard"] = os.path.relpath(tb_dir, out_dir)
    return report


def run(cfg: RunConfig, progress: bool = True) -> tuple[Path, dict]:
    """Run one profiled training job; return (run directory, report dict).

    Stages: data (prepare on first use for the default) → shard source for the storage backend and read mode →
    tf.data pipeline → Keras BERT training with step markers and the profiled window → xprof attribution →
    report.json / report.md / plots / environment.json in a fresh run directory.
    """
    from tfbertperf.report.build import make_run_dir, write_run_files

    quiet_tf()
    inputs = Inputs(cfg, progress)
    run_dir = make_run_dir(cfg)
    if progress:
        log(f"run directory {run_dir}")
    report = execute(cfg, run_dir, run_dir / "tensorboard", inputs=inputs, progress=progress)
    write_run_files(run_dir, cfg, report)
    return run_dir, report


def worker_entry(cfg: RunConfig, worker_index: int, worker_dir: str, strategy) -> dict:
    """Multi-worker body (called by tfbertperf.train.multiworker in each worker process): train on this worker's
    shards, profile into <run>/tensorboard/worker-<i> (TensorBoard shows each worker as a run), attribute it."""
    wdir = Path(worker_dir)
    tb = wdir.parent / "tensorboard" / f"worker-{worker_index}"
    report = execute(cfg, wdir, tb, strategy=strategy, progress=True)
    report["artifacts"]["tensorboard"] = os.path.relpath(tb, wdir.parent)
    report["artifacts"]["plots"] = [f"{wdir.name}/{p}" for p in report["artifacts"]["plots"]]
    return {"report": report}


def synthetic_worker(cfg, worker_index: int, worker_dir: str, strategy) -> dict:
    """A multi-worker body on synthetic batches (no storage): train, profile into worker_dir/tensorboard.

    Returns {"train": result_to_dict(TrainResult), "tensorboard": dir}.
    """
    from tfbertperf.data.synthetic import synthetic_dataset_fn
    from tfbertperf.profile.capture import Capture
    from tfbertperf.train.loop import train
    from tfbertperf.train.multiworker import result_to_dict

    vocab = 1000
    tb = os.path.join(worker_dir, "tensorboard")
    capture = Capture.from_config(tb, cfg.profile) if cfg.profile_window else None
    result = train(cfg, synthetic_dataset_fn(cfg, vocab, seed=worker_index), vocab, tb,
                   progress=lambda line: print(f"[worker {worker_index}] {line}", flush=True), strategy=strategy,
                   capture=capture)
    return {"train": result_to_dict(result), "tensorboard": tb}


def run_multi_worker(cfg: RunConfig, workers: int, progress: bool = True) -> tuple[Path, dict]:
    """`tfbertperf run --workers N`: N local MultiWorkerMirrored workers on loopback ports, each profiled and
    attributed; report.json holds worker 0's view plus a `workers` list with every worker's attribution.
    Raises WorkerError (train/multiworker.py) when the group fails."""
    from tfbertperf.report.build import bar_entry, make_run_dir, write_run_files
    from tfbertperf.report.plots import write_step_breakdown
    from tfbertperf.train.multiworker import launch_workers

    quiet_tf()
    Inputs(cfg, progress)  # prepare/validate the data once, before N processes would race for it
    run_dir = make_run_dir(cfg)
    log(f"run directory {run_dir}; launching {workers} local workers")
    parts = launch_workers(cfg, workers, run_dir, entry="tfbertperf.job:worker_entry",
                           progress=log if progress else (lambda m: None))
    reports = [p["report"] for p in parts]
    combined = dict(reports[0])
    combined["run_id"] = run_dir.name
    combined["workers"] = [
        {"worker": i, "attribution": r.get("attribution"), "step_timer": r.get("step_timer"),
         "throughput": r.get("throughput"), "accelerator_utilization": r.get("accelerator_utilization"),
         "verdict": r.get("verdict"), "storage": r.get("storage"), "tensorboard": r["artifacts"]["tensorboard"]}
        for i, r in enumerate(reports)
    ]
    write_step_breakdown(run_dir / "plots" / "step_breakdown.png",
                         [(f"worker {i}", bar_entry(r)) for i, r in enumerate(reports)],
                         title=f"Step-time breakdown per worker — {workers} workers, BERT-{cfg.model.size}")
    combined["artifacts"] = {"tensorboard": "tensorboard", "plots": ["plots/step_breakdown.png"],
                             "workers": [f"worker-{i}" for i in range(workers)]}
    write_run_files(run_dir, cfg, combined)
    return run_dir, combined


def validate(report: dict, doc: dict, progress: bool = True) -> dict:
    """Re-run our run with its top recommendation applied, next to a re-run of the baseline (same process, same
    machine state), and measure the speedup = baseline median step ÷ new median step."""
    from tfbertperf.config import load_config
    from tfbertperf.redact import REDACTED

    acts = [a for a in (doc["verdict"].get("actions") or []) if a.get("set")]
    if not acts:
        raise UsageError("--validate: the verdict has no recommendation that maps to --set overrides")
    top = acts[0]
    # Values redacted in the report (secrets, or keys whose names look like one) fall back to their defaults.
    flat = {f"{s}.{k}": v for s, body in report["config"].items() if isinstance(body, dict)
            for k, v in body.items() if v != REDACTED}
    base_cfg = load_config(overrides=flat)
    new_cfg = load_config(overrides={**flat, **dict(x.split("=", 1) for x in top["set"])})
    out = {"advice": top["advice"], "set": top["set"]}
    for name, cfg in (("baseline", base_cfg), ("recommended", new_cfg)):
        if progress:
            print(f"tfbertperf analyze --validate: {name} run …", file=sys.stderr, flush=True)
        run_dir, rep = run(cfg, progress=False)
        out[f"{name}_step_ms"] = rep["throughput"]["step_time_ms"]["p50"]
        out[f"{name}_run"] = str(run_dir)
    out["speedup"] = round(out["baseline_step_ms"] / out["recommended_step_ms"], 4)
    return out
