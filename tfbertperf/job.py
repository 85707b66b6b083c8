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
    again when its sources changed (manifest source_sha256, data/prep/source.py); data.uri names ours (a folder
    with manifest.json) or the user's TFRecords, described from the records (data/described.py) — never written."""
    from tfbertperf.data.described import fit_config, open_data
    from tfbertperf.data.manifest import check_compatible, load_manifest, stale_reason

    uri = cfg.resolved_data_uri()
    why = None
    if cfg.uses_default_data():
        why = ("first use only" if not backend.exists(backend.join(uri, "manifest.json"))
               else stale_reason(cfg, load_manifest(uri, backend)))
    if why:
        from tfbertperf.data.prep import prepare_data

        log(f"preparing the data set in {uri} ({why})")
        t0 = time.perf_counter()
        prepare_data(cfg, uri, progress=progress)
        log(f"data ready in {time.perf_counter() - t0:.1f} s")
    manifest = open_data(cfg, uri, backend, say=log if progress else (lambda m: None))
    check_compatible(fit_config(cfg, manifest), manifest)
    return uri, manifest


def check_init(cfg: RunConfig, manifest: dict | None = None) -> None:
    """model.init: a checkpoint that cannot load is one line before any data work or run directory (and, given
    the data's manifest, a vocab larger than the checkpoint's)."""
    if cfg.model.init:
        from tfbertperf.model.hf_preflight import preflight

        preflight(cfg.model.init, cfg.data.seq_len, int(manifest["vocab_size"]) if manifest else 0)


class Inputs:
    """Everything the data side hands to a training process: backend, data URI, manifest (ours, or the
    description of the user's data), shard list, and `cfg` fitted to the data (data/described.py fit_config)."""

    def __init__(self, cfg: RunConfig, progress: bool = True) -> None:
        from tfbertperf.data.described import fit_config
        from tfbertperf.data.manifest import shard_hashes, shard_uris
        from tfbertperf.storage import open_backend
        from tfbertperf.storage.listing import is_glob, split_spec

        self.backend = open_backend(split_spec(cfg.resolved_data_uri())[0], cfg.data)
        self.uri, self.manifest = ensure_data(cfg, self.backend, progress=progress)
        self.cfg = fit_config(cfg, self.manifest)
        self.shard_uris, self.record_bytes_hint = shard_uris(self.cfg, self.manifest, self.backend)
        self.hashes = shard_hashes(self.cfg, self.manifest, self.backend)  # {uri: sha256}; {} for older/user sets
        self.compression = self.manifest.get("compression") or "none"
        items = split_spec(self.uri)  # the fingerprint looks at a folder, else at a glob's or a list's first file
        self.location = items[0] if len(items) == 1 and not is_glob(items[0]) else self.shard_uris[0]

    def checksums_verified(self, cfg: RunConfig, mode: str) -> bool:
        """Whether the shards' bytes were checked against manifest.json's sha256 (data.verify=sha256, or stage
        mode, which checks every download)."""
        return bool(self.hashes) and (cfg.data.verify == "sha256" or (self.backend.name != "local" and mode == "stage"))


def _close(sources: list) -> None:
    """Close and forget the shard sources opened so far."""
    while sources:
        try:
            sources.pop().close()
        except Exception:  # noqa: BLE001 — closing background workers must not mask the real error
            pass


def execute(cfg: RunConfig, out_dir: Path, tb_dir: Path, *, inputs: Inputs | None = None, strategy=None,
            progress: bool = True, checkpoints: bool = False) -> dict:
    """Train + profile + attribute in this process; plots go to out_dir/plots.  Returns the report dict (not
    written).  `strategy`: an already-created tf.distribute strategy (multi-worker processes make theirs first).
    `checkpoints`: save/resume checkpoints under out_dir (train/checkpoint.py)."""
    quiet_tf()
    from tfbertperf.data.described import fit_config
    from tfbertperf.data.origin import data_block
    from tfbertperf.data.records import data_errors
    from tfbertperf.data.pipeline import build_dataset, effective_pipeline, runs_ahead
    from tfbertperf.envinfo import fingerprint
    from tfbertperf.profile.attribution import attribute, step_timer_summary
    from tfbertperf.profile.capture import Capture
    from tfbertperf.profile.xprof_tools import find_xplanes
    from tfbertperf.report.build import (bar_entry, build_report, input_cost_ci95, profile_window_note, set_pipeline,
                                         steady_step_ms, tokenizer_block)
    from tfbertperf.storage import open_shards
    from tfbertperf.compose import regime_report
    from tfbertperf.compose.hostsampling import start_sampler
    from tfbertperf.compose.inputceiling import input_ceiling
    from tfbertperf.compose.dataservice import add_data_service, data_service
    from tfbertperf.compose.training import dataset_config, train_any
    from tfbertperf.storage.integrity import storage_errors
    from tfbertperf.train.emulated_devices import from_config as emulation_from_config

    say = log if progress else (lambda m: None)
    emulation = emulation_from_config(cfg)  # None: the real model runs
    inputs = inputs or Inputs(cfg, progress)
    backend, manifest = inputs.backend, inputs.manifest
    cfg = fit_config(cfg, manifest)  # the data's task, sizes, label count (the user's data: described from them)
    tb_dir.mkdir(parents=True, exist_ok=True)
    environment = fingerprint(data_uri=inputs.location, probe=True, dataset=False)  # `data` said below

    sources = []
    service = data_service(cfg, manifest)  # pipeline.data_service: local:N starts its servers here
    data_cfg = service.config(dataset_config(cfg, emulation))  # emulated: accelerators × batch_size per step

    def dataset_fn(input_context=None):
        source = open_shards(inputs.shard_uris, cfg.data, backend, inputs.record_bytes_hint, inputs.hashes,
                             compression=inputs.compression)
        sources.append(source)
        # Global batches, or per-replica batches of this input pipeline's own shards when train/ passes a
        # tf.distribute.InputContext (multi-worker: each worker reads only its shards, or shares a service job).
        return build_dataset(data_cfg, manifest, source, input_context, service=service)

    capture = Capture.from_config(str(tb_dir), cfg.profile) if cfg.profile_window else None
    say(cfg.window_choice())  # which steps are traced, and whether the user or the run's length chose them
    sampler = start_sampler(cfg)
    try:
        # damaged shards and TF filesystem errors; a record that breaks the data's layout
        with data_errors(manifest, backend, cfg), storage_errors(backend, inputs.shard_uris, inputs.uri,
                                                                  inputs.compression):
            result = train_any(cfg, emulation, dataset_fn, int(manifest["vocab_size"]), str(tb_dir),
                               say=say, strategy=strategy, capture=capture, runs_ahead=runs_ahead(cfg),
                               sampler=sampler, run_dir=str(out_dir) if checkpoints else None, service=service)
        mode = sources[0].mode if sources else cfg.data.mode
        storage = {"backend": backend.name, "mode": mode, "uri": redact_text(inputs.uri)}
        # the training's reads only (the ceiling runs after this); read_wait_fraction over the measured steps
        storage.update(backend.metrics.summary(span=result.extra.get("measured_span")))
        _close(sources)  # the training's readers stop before the ceiling's pipeline runs alone
        ceiling = None
        if result.extra.get("interrupted_at_step") is None:  # Ctrl-C: no further measuring
            with data_errors(manifest, backend, cfg), storage_errors(backend, inputs.shard_uris, inputs.uri,
                                                                      inputs.compression):
                ceiling = input_ceiling(cfg, dataset_fn, backend, inputs.record_bytes_hint, say)
    finally:
        if sampler is not None:
            sampler.stop()
        _close(sources)
        service.stop()  # workers, then the dispatcher; a server failing at exit is recorded, not raised

    step_ms = steady_step_ms(result)
    compute_only_ms = result.compute_only_step_ms  # the mean of the probe's timed steps
    # what the pipeline waited on per step (background look-ahead/staging excluded; report/SCHEMA.md)
    storage["read_ms_per_step"] = round(storage["blocking_read_ms"] / max(1, result.steps), 3)
    if capture is not None and capture.started_at and capture.stopped_at and result.profile_window:
        # the same, in the traced window only and for reads xprof cannot see: what the input split may move
        # (per step xprof found, like its input-op figures: set by attribute() as joined_read_ms_per_step)
        window = (capture.started_at, capture.stopped_at)
        storage["joined_read_ms"] = round(backend.metrics.untraced_blocking_ms(*window), 3)
    # headroom, host figures, reads' share: known before the verdict, which reads them as it is made (once)
    figures = regime_report.measure(cfg, result, emulation, ceiling, sampler, storage, step_ms)

    attribution_doc: dict = {}
    # the window this process profiled, else the profile its directory holds (report/build.py window_note)
    window_note = None if result.profile_window is not None else profile_window_note(cfg, result, tb_dir)
    if result.profile_window is not None or window_note:
        attribution_doc = attribute(find_xplanes(str(tb_dir)), step_time_ms=step_ms,
                                    compute_only_step_ms=compute_only_ms, storage=storage, config=cfg.to_dict(),
                                    input_cost_ci95=input_cost_ci95(result),
                                    env_devices=environment.get("devices"),
                                    cpu_flags=(environment.get("cpu") or {}).get("flags"),
                                    refine_with=figures.refine_inputs(),
                                    # an emulated run: its devices' AU, their wait as device compute (one source)
                                    **{f"emulated_{k}": v for k, v in (result.extra.get("emulation") or {}).items()
                                       if k in ("au", "step_ms")})
        # T and T_c of the what-if figure (to recompute it, unclamped); thread-pool tasks recorded (capture.py)
        attribution_doc["attribution"].update(
            steady_step_time_ms=round(step_ms, 4), window_note=window_note,
            compute_only_step_ms=None if compute_only_ms is None else round(compute_only_ms, 4),
            threadpool_events=result.extra.get("threadpool_events"))
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
    set_pipeline(report, effective_pipeline(cfg, len(inputs.shard_uris)))  # the knobs in force (preset resolved)
    if capture is not None and result.profile_window is not None:
        # profile.* tracer settings the capture did not get (TF 2.21 drops ProfilerOptions; capture.py)
        from tfbertperf.profile.capture import ignored_settings

        report["caveats"].extend(ignored_settings(cfg.profile, capture.dropped_options, find_xplanes(str(tb_dir))))
    report["tokenizer"] = tokenizer_block(manifest)
    report["data"] = data_block(manifest, cfg, inputs.checksums_verified(cfg, storage["mode"]))  # origin, sizes
    if isinstance((report.get("environment") or {}).get("data"), dict):  # environment.json and env --diff say it
        report["environment"]["data"]["dataset"] = {k: report["data"][k] for k in (
            "origin", "summary", "files", "bytes", "format", "compression", "manifest")}
    report["artifacts"]["tensorboard"] = os.path.relpath(tb_dir, out_dir)
    if result.extra.get("interrupted_at_step") is not None:
        report["incomplete"] = True  # Ctrl-C: the steps done, no probe after the loop, no partial profile
        report["interrupted_at_step"] = result.extra["interrupted_at_step"]
    if result.extra.get("resumed_from_step"):
        report["resumed_from_step"] = result.extra["resumed_from_step"]
    report = regime_report.add_to_report(report, figures, sampler, out_dir, tb_dir,
                                         title=f"Host utilization — {out_dir.name}")
    return add_data_service(report, service, cfg)  # report.json data_service; scale-out advice


def run(cfg: RunConfig, progress: bool = True, resume: Path | None = None) -> tuple[Path, dict]:
    """Run one profiled training job; return (run directory, report dict).

    Stages: data (prepare on first use for the default) → shard source for the storage backend and read mode →
    tf.data pipeline → Keras BERT training with step markers and the profiled window → xprof attribution →
    report.json / report.md / plots / environment.json in a fresh run directory (config.yaml first, so that a
    killed run can be resumed).  `resume`: an earlier run's directory to continue from its last checkpoint
    (`resume_config` gives its cfg).  Ctrl-C during training ends with a report marked incomplete and the
    INTERRUPTED marker (report/build.py `mark_interrupted`); at any other moment only the marker is written.
    """
    from tfbertperf.report.build import (check_runs_root, make_run_dir, mark_interrupted, write_config,
                                         write_run_files)

    quiet_tf()
    check_runs_root(cfg)
    from tfbertperf.train.emulated_devices import from_config as emulation_from_config
    from tfbertperf.train.strategy import check_placement

    emulation_from_config(cfg)  # a bad emulate.* setting is refused before any data is prepared
    check_placement(cfg.train)  # so is a device or TPU that is not here
    check_init(cfg)
    inputs = Inputs(cfg, progress)
    cfg = inputs.cfg  # fitted to the data (the user's: task, sizes, labels from the records)
    check_init(cfg, inputs.manifest)
    run_dir = resume or make_run_dir(cfg)
    if progress:
        log(f"run directory {run_dir}")
    try:
        write_config(run_dir, cfg)
        report = execute(cfg, run_dir, run_dir / "tensorboard", inputs=inputs, progress=progress,
                         checkpoints=bool(cfg.train.checkpoint_every or resume))
        write_run_files(run_dir, cfg, report)
    except KeyboardInterrupt:
        mark_interrupted(run_dir, True)
        raise
    except UsageError:
        # bad input found only once the data were read (a missing or corrupt shard, a refused request): a new
        # run directory with nothing to resume from is debris, not a run
        from tfbertperf.train.checkpoint import latest_step

        if resume is None and not latest_step(run_dir):
            import shutil

            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    mark_interrupted(run_dir, bool(report.get("incomplete")), report.get("interrupted_at_step"))
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
    from tfbertperf.report.build import bar_entry, check_runs_root, make_run_dir, write_run_files
    from tfbertperf.report.plots import write_step_breakdown
    from tfbertperf.train.multiworker import group_data_service, launch_workers

    quiet_tf()
    check_runs_root(cfg)
    check_init(cfg)
    check_init(cfg, Inputs(cfg, progress).manifest)  # prepare/validate the data once, before N processes race
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
    combined["retries"] = parts[0].get("retries") or []  # group re-runs after a worker crashed, and why
    combined.update(group_data_service(parts[0], reports))  # the group's one tf.data service, if any
    write_run_files(run_dir, cfg, combined)
    return run_dir, combined
