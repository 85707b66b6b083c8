"""One run's use of the tf.data service (`pipeline.data_service`), from start to the report's `data_service` block.

    session = ServiceSession(cfg, dataset_examples)   # off: every method is a no-op and block() is None
    session.start()                  # local:N starts the servers; grpc:// checks the dispatcher answers (5 s)
    cfg_for_pipeline = session.config(cfg)              # local:N → grpc://127.0.0.1:PORT, the pipeline's view
    session.training_started(); …train…; session.training_ended(result)
    session.stop()                   # workers, then the dispatcher; a server failing to stop is recorded
    report["data_service"] = session.block()

Where things are measured (the block's `measured`): the trainer sees only what arrives — elements, examples and
repeats (data/service.py Tally) and its own wait for the next batch (the step timer's get-next, which with the
service on is the wait on the service).  The workers' reads and CPU are theirs: for local:N the figures come
from each worker process (/proc: CPU seconds, bytes passed to read()) over the training span; behind grpc://
they are not visible from the trainer.
"""

from __future__ import annotations

import dataclasses
import re
import statistics

from tfbertperf.config.schema import parse_data_service
from tfbertperf.data.service import Tally, check, check_reachable

MEASURED = {
    "trainer": "elements/examples received and the step's wait for them (get-next), counted in the trainer",
    "local": "storage reads and CPU in the worker processes (/proc/<pid>: rchar = bytes passed to read(), page "
             "cache included; utime+stime), over the training span; the trainer's storage block sees none of them",
    "grpc": "storage reads and CPU happen on the remote workers and are not visible from the trainer",
}


class ServiceSession:
    """The service's life around one training process (module docstring)."""

    def __init__(self, cfg, dataset_examples: int | None = None) -> None:
        self.setting = str(cfg.pipeline.data_service)
        self.kind, self.workers_wanted, self.address = parse_data_service(self.setting)
        self.mode = cfg.pipeline.data_service_mode
        self.dataset_examples = dataset_examples
        self.cluster = None
        self.tally = Tally()
        self._jobs = 0
        self._start: list[dict] = []
        self._training: dict = {}
        self._shutdown: dict | None = None

    @property
    def on(self) -> bool:
        return self.kind != "off"

    def start(self, cfg) -> "ServiceSession":
        if not self.on:
            return self
        check(cfg)
        if self.kind == "local":
            from tfbertperf.data.service_cluster import LocalCluster

            self.cluster = LocalCluster(self.workers_wanted).start()
            self.address = self.cluster.address
        else:
            check_reachable(self.address)
        return self

    def config(self, cfg):
        """cfg as the pipeline sees it: a local cluster's address in place of local:N."""
        if self.kind != "local":
            return cfg
        return dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline,
                                                                     data_service=f"grpc://{self.address}"))

    def group_config(self, cfg, job: str):
        """cfg for the trainers of a multi-worker group: one shared job `job` on this service (a job the setting
        already names wins)."""
        if not self.on:
            return cfg
        address = self.address if "/" in self.address else f"{self.address}/{re.sub('[^A-Za-z0-9-]', '-', job)}"
        return dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, data_service=f"grpc://{address}"))

    def next_job_suffix(self) -> str:
        self._jobs += 1
        return f"-{self._jobs}"

    def training_started(self) -> None:
        if self.cluster is not None:
            self._start = self.cluster.status()

    def training_ended(self, result) -> None:
        """Freeze what the training received (the input ceiling's pipeline runs after and is not counted)."""
        if not self.on:
            return
        workers = self.cluster.status() if self.cluster is not None else []
        lost = sum(1 for w in workers if not w["alive"]) if self.cluster is not None else None
        self._training = {"workers_lost": lost, "workers": [_delta(w, self._start) for w in workers]}
        if result is None:  # a multi-worker launcher: its trainers count what they received
            return
        steady = result.input_wait_ms[result.warmup_steps:] or result.input_wait_ms
        self._training.update(self.tally.summary(self.dataset_examples, self.mode, lost))
        self._training["wait_ms_per_step"] = round(statistics.fmean(steady), 3) if steady else None

    def stop(self) -> None:
        if self.cluster is not None and self._shutdown is None:
            self._shutdown = self.cluster.stop()

    def block(self) -> dict | None:
        """report.json `data_service` (report/SCHEMA.md); None when the service is off."""
        if not self.on:
            return None
        out = {"setting": self.setting, "processing_mode": self.mode, "address": self.address,
               "workers_started": self.workers_wanted if self.kind == "local" else None,
               "measured": {"trainer": MEASURED["trainer"], "workers": MEASURED[self.kind]}, **self._training}
        if self._training.get("workers"):
            cpu = [w["cpu_s"] for w in self._training["workers"] if w["cpu_s"] is not None]
            read = [w["read_bytes"] for w in self._training["workers"] if w["read_bytes"] is not None]
            out["workers_cpu_s"] = round(sum(cpu), 3) if cpu else None
            out["workers_read_bytes"] = sum(read) if read else None
        if self._shutdown is not None:
            out["shutdown"] = self._shutdown
        return out


def _delta(now: dict, start: list[dict]) -> dict:
    """A worker's figures over the training span (its reading at the start subtracted)."""
    before = next((w for w in start if w["pid"] == now["pid"]), {})
    out = dict(now)
    for k in ("cpu_s", "read_bytes"):
        if now.get(k) is not None and before.get(k) is not None:
            out[k] = round(now[k] - before[k], 3) if k == "cpu_s" else now[k] - before[k]
    out["killed_by_signal"] = -now["exit"] if (now.get("exit") or 0) < 0 else None
    return out
