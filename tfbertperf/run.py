"""`python -m tfbertperf.run` — the main job: data → tf.data → Keras BERT → profiled training → attribution report.

With no arguments it runs the embedded default: tiny BERT, pretraining, local shards prepared on first use from
Python's bundled pydoc text, CPU, a profiled window — and prints where the step time went.

    python -m tfbertperf.run [--workload NAME|FILE] [--data URI] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
from pathlib import Path

from tfbertperf.config import RunConfig, load_config
from tfbertperf.errors import UsageError, cli_entry
from tfbertperf.redact import redact_text

REPORT_SCHEMA = "tfbertperf.report/1"


def _log(msg: str) -> None:
    sys.stderr.write(f"[tfbertperf] {msg}\n")
    sys.stderr.flush()


def _quiet_tf() -> None:
    # TF's C++ INFO lines (oneDNN, cuda stubs) bury the table; warnings and errors still show.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


# ---- run directory ----------------------------------------------------------------------------------------

def make_run_dir(cfg: RunConfig) -> Path:
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


# ---- data -------------------------------------------------------------------------------------------------

def ensure_data(cfg: RunConfig, backend, progress: bool = True) -> tuple[str, dict]:
    """Return (data URI, manifest).  The embedded default is prepared on first use; an explicit URI must exist."""
    from tfbertperf.data.manifest import check_compatible, load_manifest

    uri = cfg.resolved_data_uri()
    if cfg.uses_default_data() and not backend.exists(backend.join(uri, "manifest.json")):
        from tfbertperf.data.prepare import prepare_data

        _log(f"preparing the default data set in {uri} (first use only)")
        t0 = time.perf_counter()
        prepare_data(cfg, uri, progress=progress)
        _log(f"data ready in {time.perf_counter() - t0:.1f} s")
    manifest = load_manifest(uri, backend)
    check_compatible(cfg, manifest)
    return uri, manifest


# ---- report -----------------------------------------------------------------------------------------------

def _percentiles(xs: list[float]) -> dict:
    import numpy as np

    a = np.asarray(xs or [0.0], dtype=float)
    return {
        "mean": round(float(a.mean()), 3),
        "p50": round(float(np.percentile(a, 50)), 3),
        "p90": round(float(np.percentile(a, 90)), 3),
        "max": round(float(a.max()), 3),
    }


RECOVERY_WAIT_SHARE = 0.02  # the loop waits for input > 2 % of the time → the pipeline is behind


def steady_steps(result) -> list[int]:
    """Indices of steps that count for throughput: after warm-up and outside the profiled window (profiling has
    its own overhead, measured separately by tools/bench/bench_overhead.py), and not among the probe's recovery
    steps (fed from buffers a run-ahead pipeline filled while a probe block ran; train/loop.py)."""
    w = result.profile_window
    idx = [i for i in range(len(result.step_times_ms)) if i >= result.warmup_steps]
    if w is not None:
        outside = [i for i in idx if not (w[0] <= i < w[1])]
        if len(outside) >= 3:
            idx = outside
    recovery = set(result.extra.get("probe_recovery_steps") or ())
    if recovery and result.input_wait_ms:
        kept = [i for i in idx if i not in recovery]
        # Only a pipeline that is behind (the loop waits for it) has room to run ahead during a probe block;
        # one that keeps up has full buffers when the block starts, so its recovery steps are ordinary steps.
        behind = kept and (sum(result.input_wait_ms[i] for i in kept)
                           > RECOVERY_WAIT_SHARE * sum(result.step_times_ms[i] for i in kept))
        if behind and len(kept) >= 3:
            idx = kept
    return idx or list(range(len(result.step_times_ms)))


def pipeline_runs_ahead(cfg: RunConfig) -> bool:
    """Whether the input pipeline has stages that work in the background (prefetch, parallel map or interleave,
    storage read-ahead) and so keeps filling buffers while the training loop is busy elsewhere."""
    from tfbertperf.data.pipeline import effective_pipeline

    eff = effective_pipeline(cfg)
    return (eff["prefetch"] != 0 or eff["num_parallel_calls"] != 1 or eff["cycle_length"] != 1
            or (cfg.data.mode == "stage" and cfg.data.lookahead > 0))


def build_report(cfg: RunConfig, run_dir: Path, result, attribution_doc: dict, storage: dict,
                 environment: dict, model_info: dict, plots: list[str]) -> dict:
    """Assemble report.json (schema tfbertperf.report/1, shared/DESIGN.md)."""
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
    for k in ("hosts", "au_threshold", "au_pass", "compute_only_step_ms"):
        if k in attribution_doc:
            report[k] = attribution_doc[k]
    return report


def write_run_files(run_dir: Path, cfg: RunConfig, report: dict) -> None:
    """config.yaml, environment.json, plots, report.json, report.md — each atomically; report.json last but one."""
    import yaml

    from tfbertperf.report.io import atomic_write_json, atomic_write_text
    from tfbertperf.report.render import render_markdown

    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    atomic_write_json(run_dir / "environment.json", report.get("environment") or {})
    atomic_write_json(run_dir / "report.json", report)
    atomic_write_text(run_dir / "report.md", render_markdown(report))


def _environment(uri: str) -> dict:
    try:
        from tfbertperf.env import fingerprint
    except ImportError:  # the env module is optional at this layer; the report still carries the basics
        import platform

        import tensorflow as tf

        return {"python": platform.python_version(), "platform": platform.platform(), "tensorflow": tf.__version__}
    return fingerprint(data_uri=uri, probe=True)


# ---- the job ----------------------------------------------------------------------------------------------

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
    _quiet_tf()
    from tfbertperf.data.pipeline import build_dataset, effective_pipeline
    from tfbertperf.profile.attribution import attribute, step_timer_summary
    from tfbertperf.profile.xprof_tools import find_xplanes
    from tfbertperf.storage import open_shards
    from tfbertperf.train.loop import train

    log = _log if progress else (lambda m: None)
    inputs = inputs or Inputs(cfg, progress)
    backend, manifest = inputs.backend, inputs.manifest
    tb_dir.mkdir(parents=True, exist_ok=True)
    environment = _environment(inputs.uri)

    sources = []

    def dataset_fn(input_context=None):
        source = open_shards(inputs.shard_uris, cfg.data, backend, record_bytes_hint=inputs.record_bytes_hint)
        sources.append(source)
        # Global batches, or per-replica batches of this input pipeline's own shards when train/ passes a
        # tf.distribute.InputContext (multi-worker: each worker reads only its shards).
        return build_dataset(cfg, manifest, source, input_context)

    try:
        result = train(cfg, dataset_fn, int(manifest["vocab_size"]), str(tb_dir), progress=log, strategy=strategy,
                       input_runs_ahead=pipeline_runs_ahead(cfg))
    finally:
        for s in sources:
            try:
                s.close()
            except Exception:  # noqa: BLE001 — closing background workers must not mask the real error
                pass

    idx = steady_steps(result)
    step_ms = sum(result.step_times_ms[i] for i in idx) / max(1, len(idx))
    # T and T_c by the same statistic (means): a stall that hits one step in N costs throughput, and the what-if
    # answer is about throughput.
    compute_only_ms = result.compute_only_step_ms  # the mean of the probe's timed steps
    storage = {"backend": backend.name, "mode": sources[0].mode if sources else cfg.data.mode,
               "uri": redact_text(inputs.uri)}
    storage.update(backend.metrics.summary())
    storage["read_ms_per_step"] = round(storage["read_time_ms"] / max(1, result.steps), 3)

    attribution_doc: dict = {}
    if result.profile_window is not None:
        xplanes = find_xplanes(str(tb_dir))
        attribution_doc = attribute(xplanes, step_time_ms=step_ms, compute_only_step_ms=compute_only_ms,
                                    storage=storage, config=cfg.to_dict())
        # T and T_c of the what-if figure, so that a reader can recompute it (unclamped)
        attribution_doc["attribution"]["steady_step_time_ms"] = round(step_ms, 4)
        attribution_doc["attribution"]["compute_only_step_ms"] = (None if compute_only_ms is None
                                                                  else round(compute_only_ms, 4))
        # whether the capture recorded thread-pool tasks (profile.threadpool_events; train/capture.py)
        attribution_doc["attribution"]["threadpool_events"] = result.extra.get("threadpool_events")
    attribution_doc["step_timer"] = step_timer_summary(result.step_times_ms, result.input_wait_ms,
                                                       result.warmup_steps)
    plots: list[str] = []
    if attribution_doc.get("attribution"):
        from tfbertperf.report.plots import write_step_breakdown

        write_step_breakdown(out_dir / "plots" / "step_breakdown.png", [(out_dir.name, _bar(attribution_doc))],
                             title=f"Step-time breakdown — BERT-{cfg.model.size} {cfg.model.task}, "
                                   f"{cfg.pipeline.preset} pipeline, {backend.name}")
        plots.append("plots/step_breakdown.png")

    report = build_report(cfg, out_dir, result, attribution_doc, storage, environment,
                          result.extra.get("model") or {}, plots)
    report["pipeline"] = effective_pipeline(cfg)  # the knobs actually in force (preset resolved)
    report["artifacts"]["tensorboard"] = os.path.relpath(tb_dir, out_dir)
    return report


def _bar(doc: dict) -> dict:
    """A stacked-bar entry: breakdown_ms plus the what-if input cost as a marker."""
    att = doc.get("attribution") or {}
    bd = dict(att.get("breakdown_ms") or {})
    if att.get("input_cost_fraction") is not None:
        bd["_what_if_input_ms"] = att["input_cost_fraction"] * att["step_time_ms"]
    return bd


def run(cfg: RunConfig, progress: bool = True) -> tuple[Path, dict]:
    """Run one profiled training job; return (run directory, report dict).

    Stages: data (prepare on first use for the default) → shard source for the storage backend and read mode →
    tf.data pipeline → Keras BERT training with step markers and the profiled window → xprof attribution →
    report.json / report.md / plots / environment.json in a fresh run directory.
    """
    _quiet_tf()
    inputs = Inputs(cfg, progress)
    run_dir = make_run_dir(cfg)
    if progress:
        _log(f"run directory {run_dir}")
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


def run_multi_worker(cfg: RunConfig, workers: int, progress: bool = True) -> tuple[Path, dict]:
    """`tfbertperf run --workers N`: N local MultiWorkerMirrored workers on loopback ports, each profiled and
    attributed; report.json holds worker 0's view plus a `workers` list with every worker's attribution."""
    from tfbertperf.report.plots import write_step_breakdown
    from tfbertperf.train.multiworker import WorkerError, launch_workers

    _quiet_tf()
    Inputs(cfg, progress)  # prepare/validate the data once, before N processes would race for it
    run_dir = make_run_dir(cfg)
    _log(f"run directory {run_dir}; launching {workers} local workers")
    try:
        parts = launch_workers(cfg, workers, run_dir, entry="tfbertperf.run:worker_entry",
                               progress=_log if progress else (lambda m: None))
    except WorkerError as e:
        sys.stderr.write(f"tfbertperf: error: {redact_text(str(e))}\n")
        raise SystemExit(1) from None
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
                         [(f"worker {i}", _bar(r)) for i, r in enumerate(reports)],
                         title=f"Step-time breakdown per worker — {workers} workers, BERT-{cfg.model.size}")
    combined["artifacts"] = {"tensorboard": "tensorboard", "plots": ["plots/step_breakdown.png"],
                             "workers": [f"worker-{i}" for i in range(workers)]}
    write_run_files(run_dir, cfg, combined)
    return run_dir, combined


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", metavar="NAME|FILE", help="workload name (tfbertperf/workloads/) or YAML file")
    p.add_argument("--data", metavar="URI", help="data location: path, file://, gs://bucket/prefix, az://container/prefix")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override any RunConfig field, e.g. --set pipeline.cycle_length=16 (repeatable)")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line + exit 2, like every other bad input
        raise UsageError(f"{self.prog}: {message}")


def print_summary(run_dir: Path, report: dict) -> None:
    from tfbertperf.report.render import attribution_table, verdict_line

    tp = report["throughput"]
    print(f"\nBERT-{report['model'].get('size')} {report['model'].get('task')}: "
          f"{report['model'].get('parameters', 0):,} parameters; {tp['steps']} steps, "
          f"{tp['examples_per_sec']:.1f} examples/s, step time mean {tp['step_time_ms']['mean']:.1f} ms")
    if report.get("attribution"):
        print()
        print(attribution_table(report))
        print()
        print(verdict_line(report))
        for r in (report.get("verdict") or {}).get("recommendations") or []:
            print(f"  - {r}")
    for w in report.get("workers") or []:
        a = w.get("attribution") or {}
        print(f"worker {w['worker']}: {a.get('steps_profiled', 0)} steps profiled, step {a.get('step_time_ms', 0):.1f} ms, "
              f"input cost {100 * (a.get('input_cost_fraction') or 0):.1f} %, "
              f"{(w.get('verdict') or {}).get('bottleneck')}-bound")
    print(f"\nreport: {run_dir / 'report.json'}   (also report.md, plots/)")
    print(f"TensorBoard: tensorboard --logdir {run_dir.parent}   → Profile tab")


@cli_entry
def main(argv=None) -> int:
    p = _Parser(prog="tfbertperf run", description=__doc__.split("\n\n")[0])
    add_run_arguments(p)
    p.add_argument("--workers", type=int, default=0,
                   help="multi_worker: launch N local workers on loopback ports (sets train.strategy=multi_worker)")
    args = p.parse_args(argv)
    sets = list(args.sets)
    if args.workers:
        if args.workers < 1:
            raise UsageError(f"--workers {args.workers}: must be >= 1")
        sets.append("train.strategy=multi_worker")
    cfg = load_config(args.workload, args.data, sets)
    if args.workers:
        run_dir, report = run_multi_worker(cfg, args.workers)
    else:
        run_dir, report = run(cfg)
    print_summary(run_dir, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
