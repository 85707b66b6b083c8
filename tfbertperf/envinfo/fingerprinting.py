"""The environment fingerprint: everything about this machine that changes BERT training speed or numerics,
one section per collector, secrets redacted.

It reads only local state (files under /proc and /sys, env vars, installed package metadata, TF's build info and
physical-device list) — no network call, no TF runtime initialisation — and every value passes through
tfbertperf.redact before it is returned.  run embeds it in every report.json under "environment".
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any

from tfbertperf.envinfo import hardware, software
from tfbertperf.envinfo.datalocation import describe_location
from tfbertperf.redact import redact_obj, redact_text

SCHEMA = "tfbertperf.env/1"
SECTIONS = ("host", "python", "os", "packages", "tensorflow", "devices", "cpu", "memory", "threads", "onednn",
            "xla", "precision", "determinism", "env", "data")


def _section(fn, *args) -> dict:
    """Run one collector; a failure becomes {"error": …} in that section instead of breaking the fingerprint."""
    try:
        return fn(*args)
    except Exception as e:  # a collector bug must never cost the user their run report
        return software.error_entry(e)


def fingerprint(data_uri: str | None = None, probe: bool = True, dataset: bool = True) -> dict:
    """Fingerprint this machine: everything that changes BERT training speed or numerics, secrets redacted.

    Args:
      data_uri: the data location to describe (a path, file://, gs://…, az://…); None or "" = the embedded default
        data directory (tfbertperf.config.default_data_dir()).
      probe: run the short read probe on local data (<= 0.6 s: cold 4 KiB first-byte latency and sequential
        MB/s, 10^6 bytes/s).  Remote URIs are never probed (no network calls here).
      dataset: describe the data set at a local `data_uri` under data.dataset (its origin: prepared by tfbertperf
        or the user's own, files, bytes, format; envinfo/datalocation.py describe_dataset); a run sets it itself.
    Returns:
      {"schema": "tfbertperf.env/1", "collected": ISO-8601 UTC, "collect_ms": ms spent here, and one dict per
      section in SECTIONS}.  Costs well under 2 s beyond `import tensorflow`.
    """
    t_import = time.perf_counter()
    import tensorflow as tf  # the fingerprint is of the TF that this process runs

    t0 = time.perf_counter()

    if not data_uri:  # None or "" (RunConfig's "embedded default")
        from tfbertperf.config import default_data_dir

        data_uri = default_data_dir()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "collected": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": _section(hardware.host_info),
        "python": _section(software.python_info),
        "os": _section(software.os_info),
        "packages": _section(software.package_versions),
        "tensorflow": _section(software.tensorflow_info, tf),
        "devices": _section(hardware.devices_info, tf),
        "cpu": _section(hardware.cpu_info),
        "memory": _section(hardware.memory_info),
        "threads": _section(software.threads_info, tf),
        "onednn": _section(software.onednn_info),
        "xla": _section(software.xla_info, tf),
        "precision": _section(software.precision_info, tf),
        "determinism": _section(software.determinism_info),
        "env": _section(software.env_vars),
        "data": _section(describe_location, str(data_uri), probe),
    }
    if dataset and isinstance(doc["data"], dict) and "error" not in doc["data"]:
        from tfbertperf.data.origin import describe_dataset

        doc["data"]["dataset"] = _section(describe_dataset, str(data_uri))
    doc["collect_ms"] = round((time.perf_counter() - t0) * 1e3, 1)  # excludes the TF import
    doc["tf_import_ms"] = round((t0 - t_import) * 1e3, 1)  # ~0 when TF was already imported
    # Belt and braces: every collector already redacts, this catches a secret in an unexpected place.  The env
    # section is exempt from the by-name pass only: its collector already replaced every secret-named value and
    # keeps the endpoint parts of connection strings visible (Azurite vs a real account); values still go
    # through the by-pattern pass.
    return {k: ({n: redact_obj(v) if not isinstance(v, str) else redact_text(v) for n, v in sec.items()}
                if k == "env" and isinstance(sec, dict) else redact_obj(sec))
            for k, sec in doc.items()}
