"""The tf.data service in a run (pipeline.data_service): the session that starts and stops it
(data/service_session.py), and what it adds to report.json — the `data_service` block, the storage block's note
that the shard reads happen in the service's workers, and the scale-out advice for a CPU-bound input."""

from __future__ import annotations

import math


def data_service(cfg, manifest: dict):
    """The run's started ServiceSession (pipeline.data_service; off: one that does nothing)."""
    from tfbertperf.data.service_session import ServiceSession

    return ServiceSession(cfg, manifest.get("num_examples")).start(cfg)


def scale_out_advice(verdict: dict, headroom: float | None, cfg) -> dict:
    """A CPU-bound input (input_cause "preprocessing") with the service off: advise moving preprocessing onto N
    tf.data service workers, N = ⌈1 / headroom⌉ (at least 2) — the workers that would lift the ceiling to the
    demand if each brought this host's pipeline rate.  The --set is local:N so that `analyze --validate` and
    `compare` can measure the split on this box (where it adds no cores); on real hosts: grpc://DISPATCHER:PORT."""
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


def add_data_service(report: dict, service, cfg) -> dict:
    """report.json `data_service` (the stopped session's block) when the service was on, the storage block's
    note, and the scale-out advice in the verdict; returns report."""
    if service is not None and service.on:
        report["data_service"] = service.block()
        if report.get("storage") is not None:  # its figures are the trainer's own reads (vocab, manifest) only
            report["storage"]["shard_reads_in"] = "tf.data service workers (data_service.workers)"
    if report.get("verdict"):
        report["verdict"] = scale_out_advice(report["verdict"], report.get("headroom"), cfg)
    return report
