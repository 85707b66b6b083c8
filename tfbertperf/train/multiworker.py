"""Multi-worker training on one machine: N local worker processes on loopback ports, one TF_CONFIG each.

`launch_workers(cfg, n, out_dir, entry=…)` starts N processes of
`python -m tfbertperf.train.multiworker --entry MODULE:FUNCTION --worker-dir DIR`, each with
TF_CONFIG = {"cluster": {"worker": ["127.0.0.1:P0", …]}, "task": {"type": "worker", "index": i}} and the run's
config in its environment (TFBERTPERF_WORKER_CONFIG, JSON; never in a file, since it may hold a signed URI).
Each worker creates MultiWorkerMirroredStrategy first (before any other TF op, as TF requires), then calls
`entry(cfg, worker_index, worker_dir, strategy) -> dict` (JSON-able) and writes it to `DIR/result.json`.
The entries live above train/ (tfbertperf/job.py): `job:worker_entry` builds the real pipeline and attributes
the worker's own profile; `job:synthetic_worker` trains on synthetic batches (tests, demos).

A worker that fails stops the others (collectives would otherwise wait forever) and raises WorkerError with the
failing worker's last log line and the log path.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from tfbertperf.data.service_session import ServiceSession
from tfbertperf.errors import user_tf_log_level
from tfbertperf.train.result import TrainResult


class WorkerError(RuntimeError):
    """A local worker process failed or timed out (message is one line, with the worker's log path)."""


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tf_config(ports: list[int], index: int) -> dict:
    """TF_CONFIG for worker `index` of a loopback cluster on `ports`."""
    return {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": index}}


def result_to_dict(result: TrainResult) -> dict:
    """TrainResult → JSON-able dict (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(result)))


def result_from_dict(d: dict) -> TrainResult:
    """Inverse of result_to_dict (loss trajectory and window back to tuples)."""
    d = dict(d)
    d["loss_trajectory"] = [tuple(x) for x in d["loss_trajectory"]]
    d["profile_window"] = tuple(d["profile_window"]) if d.get("profile_window") else None
    return TrainResult(**d)


def _last_line(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    # TF's own INFO/WARNING chatter is not the reason a worker died; prefer the last Python-level line.
    useful = [x for x in lines if not x.startswith(("I0000", "W0000", "E0000", "WARNING: All", "To enable"))]
    return (useful or lines or [""])[-1][:300]


def launch_workers(
    cfg,
    n: int,
    out_dir: str | os.PathLike,
    entry: str,
    timeout_s: float | None = None,
    progress: Callable[[str], None] | None = print,
    retries: int = 2,
) -> list[dict]:
    """Run `cfg` on `n` local workers (MultiWorkerMirroredStrategy over loopback) and collect their results.

    Args:
      cfg: RunConfig; train.strategy is forced to multi_worker; train.batch_size stays the global batch.
      n: number of worker processes (>= 1).
      out_dir: each worker gets `out_dir/worker-<i>/` (log.txt, result.json, tensorboard/ with its profile).
      entry: "module:function" called in each worker as fn(cfg, worker_index, worker_dir, strategy) -> dict.
      timeout_s: wall-clock limit for each attempt of the whole group (None = none).
      progress: one line per worker start/finish.
      retries: times the whole group is rerun when a worker is killed by a signal (a crash inside TF, not a
        Python error): TF 2.21's profiler sometimes crashes collecting a multi-worker trace (`free(): invalid
        pointer` / `double free` in tf.profiler.experimental.stop).  Not ours: each worker is its own process
        with one profiler session, and the crash is inside stop(), before any shutdown.  It is TF's: a
        use-after-free in TSL's TraceMeRecorder::Consume (openxla/xla xla/tsl/profiler/backends/cpu/
        traceme_recorder.cc: a raw pointer into a per-thread std::deque kept across the reallocation of the
        `result` vector, which copies deques because std::deque's move is not noexcept in libstdc++; still so
        at openxla/xla 45bd14fd), hit by the cross-thread TraceMe pairs of every collective launch.  No
        upstream issue was found for it in tensorflow/tensorflow's or openxla/xla's trackers (issue 31); the
        cause and measurements: tests/programs/mw_profiler_crash.py.  Python errors are never retried.
    Returns:
      the workers' result dicts, in worker index order (each has "worker_index", "attempt" and "retries" added:
      one {"attempt", "worker", "signal", "log", "stack"} per crashed attempt — the crashed worker's log is kept
      as out_dir/crash-<attempt>-worker-<i>.log and `stack` holds its faulthandler lines).
    Raises:
      WorkerError when a worker exits non-zero (after the retries, for crashes) or the group times out.
    """
    say = progress or (lambda _line: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, strategy="multi_worker"))
    service = ServiceSession(cfg)  # pipeline.data_service: one service for the group (local:N started here)
    try:
        results = _attempts(cfg, service.start(cfg), n, out, entry, timeout_s, say, retries)
    finally:
        service.stop()  # its workers, then its dispatcher, after every trainer has finished
    for d in results:
        d["data_service"] = service.block()  # None when off
    return results


def _attempts(cfg, service, n: int, out: Path, entry: str, timeout_s, say, retries: int) -> list[dict]:
    crashes: list[dict] = []
    for attempt in range(1, retries + 2):
        # the trainers share one job of the service (a fresh one per attempt): they split its batches
        config_json = json.dumps(service.group_config(cfg, f"{out.name}-{attempt}").to_dict())
        service.training_started()
        try:
            results = _run_group(config_json, n, out, entry, timeout_s, say)
        except _WorkerCrashed as crash:
            kept = out / f"crash-{attempt}-worker-{crash.worker}.log"
            shutil.copyfile(crash.log, kept)  # the rerun clears the worker's directory
            crashes.append({"attempt": attempt, "worker": crash.worker, "signal": crash.signal, "log": kept.name,
                            "stack": _fault_stack(kept)})
            if attempt > retries:  # the reason TF or Python gave, where the log has one
                raise WorkerError(f"{crash}" + "".join(f" ({r})" for r in [_fault_reason(kept)] if r)) from None
            say(f"{crash}; rerunning all {n} workers (attempt {attempt + 1}/{retries + 1})")
            continue
        service.training_ended(None)
        for d in results:
            d["attempt"] = attempt
            d["retries"] = crashes
        return results
    raise AssertionError("unreachable")


def group_data_service(part: dict, reports: list[dict]) -> dict:
    """report.json `data_service` of a group: the launcher's view of its service (part["data_service"]: the
    workers' figures, shutdown) with each trainer's own block (what it received, its wait) under "trainers"."""
    if not part.get("data_service"):
        return {}
    return {"data_service": {**part["data_service"], "trainers": [r.get("data_service") for r in reports]}}


class _WorkerCrashed(WorkerError):
    """A worker died from a signal (SIGSEGV/SIGABRT inside TF)."""

    def __init__(self, worker: int, sig: str, log: Path) -> None:
        super().__init__(f"worker {worker} crashed ({sig}) — log: {log}")
        self.worker, self.signal, self.log = worker, sig, log


def _fault_stack(log: Path, lines: int = 12) -> str:
    """The faulthandler part of a crashed worker's log ("Fatal Python error: …" and the frames after it)."""
    text = log.read_text(errors="replace").splitlines()
    at = next((i for i, ln in enumerate(text) if ln.startswith("Fatal Python error")), max(0, len(text) - lines))
    return "\n".join(text[at: at + lines])


def _fault_reason(log: Path) -> str | None:
    """The first line of a crashed worker's log that says why: TF's fatal check ("F0000 … Check failed: …"), a C++
    `terminate called …`, or Python's "Fatal Python error: …"; None where there is none."""
    for ln in log.read_text(errors="replace").splitlines():
        if ln.startswith(("F0000", "terminate called", "Fatal Python error")) or "Check failed" in ln:
            return ln.strip()[:200]
    return None


def _run_group(config_json: str, n: int, out: Path, entry: str, timeout_s, say) -> list[dict]:
    ports = _free_ports(n)
    procs: list[tuple[subprocess.Popen, Path]] = []
    try:
        for i in range(n):
            wdir = out / f"worker-{i}"
            shutil.rmtree(wdir, ignore_errors=True)  # a crashed attempt leaves a partial profile behind
            wdir.mkdir(parents=True)
            env = dict(os.environ, TF_CONFIG=json.dumps(tf_config(ports, i)), TFBERTPERF_WORKER_CONFIG=config_json)
            env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the user's level, not the commands' quiet default: logs are files
            if user_tf_log_level is not None:
                env["TF_CPP_MIN_LOG_LEVEL"] = user_tf_log_level
            log = open(wdir / "log.txt", "wb")
            # -X faulthandler: a crash inside TF still leaves a Python stack in the log.
            cmd = [sys.executable, "-X", "faulthandler", "-m", "tfbertperf.train.multiworker", "--entry", entry,
                   "--worker-dir", str(wdir), "--index", str(i)]
            procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), wdir))
            log.close()
            say(f"worker {i}/{n} started on 127.0.0.1:{ports[i]} (log: {wdir / 'log.txt'})")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pending = set(range(n))
        while pending:
            for i in sorted(pending):
                proc, wdir = procs[i]
                code = proc.poll()
                if code is None:
                    continue
                pending.discard(i)
                if code < 0:
                    name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(code)
                    raise _WorkerCrashed(i, name, wdir / "log.txt")
                if code != 0:
                    raise WorkerError(
                        f"worker {i} failed (exit {code}): {_last_line(wdir / 'log.txt')} — log: {wdir / 'log.txt'}"
                    )
                say(f"worker {i}/{n} finished")
            if deadline is not None and time.monotonic() > deadline:
                raise WorkerError(f"workers timed out after {timeout_s:.0f} s — logs under {out}")
            time.sleep(0.2)
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    results = []
    for i, (_, wdir) in enumerate(procs):
        d = json.loads((wdir / "result.json").read_text())
        d["worker_index"] = i
        results.append(d)
    return results


def _load_entry(spec: str) -> Callable:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv=None) -> int:
    """Worker process body (started by launch_workers; not a user command)."""
    p = argparse.ArgumentParser(prog="python -m tfbertperf.train.multiworker")
    p.add_argument("--entry", required=True)
    p.add_argument("--worker-dir", required=True)
    p.add_argument("--index", type=int, required=True)
    a = p.parse_args(argv)
    from tfbertperf.config import config_from_dict
    from tfbertperf.train.strategy import make_strategy

    cfg = config_from_dict(json.loads(os.environ["TFBERTPERF_WORKER_CONFIG"]))
    strategy = make_strategy(cfg.train)  # first TF work in this process (MultiWorkerMirroredStrategy needs it)
    result = _load_entry(a.entry)(cfg, a.index, a.worker_dir, strategy)
    target = Path(a.worker_dir) / "result.json"
    from tfbertperf.storage.atomic import write_atomic

    write_atomic(target, json.dumps(result, indent=1).encode("utf-8"), durable=False)  # read by the live parent
    return 0


if __name__ == "__main__":
    sys.exit(main())
