"""Where a run's data came from — the user's own TFRecords or a data set tfbertperf prepared — as report.json's
`data` block, the environment fingerprint's `data.dataset`, and prepare's refusal to write among the user's files.
"""

from __future__ import annotations

import os

from tfbertperf.data.records import FORMATS
from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.listing import human_bytes


def data_block(manifest: dict, cfg=None, checksums_verified: bool = False) -> dict:
    """report.json `data`: {"origin": "user" | "prepared", "summary", "files", "bytes", "format", "compression",
    "manifest", "checksums_verified", "uri"} (redacted URI; sizes from the storage listing or the manifest)."""
    if manifest.get("origin") == "user":
        n, size = manifest["files"], manifest["bytes"]
        extra = ""
        if manifest["task"] == "classify":
            extra = f" ({manifest['num_labels']} labels)"
        gz = ", GZIP" if manifest["compression"] == "gzip" else ""
        summary = (f"your data: {n} file{'s' if n != 1 else ''}, {human_bytes(size)}{gz}, {manifest['format']}"
                   f"{extra}, no manifest (described from the data)")
        return {"origin": "user", "summary": summary, "files": n, "bytes": size, "format": manifest["format"],
                "compression": manifest["compression"], "manifest": False, "checksums_verified": False,
                "uri": redact_text(manifest["uri"]), "task": manifest["task"], "seq_len": manifest["seq_len"],
                "vocab_size": manifest["vocab_size"], "vocab_source": manifest["vocab_source"],
                "num_labels": manifest.get("num_labels"), "labels_source": manifest.get("labels_source"),
                "records_checked": manifest["records_checked"], "checked": manifest["checked"]}
    shards = manifest.get("shards") or []
    corpus = manifest.get("corpus") or "the bundled text"
    return {"origin": "prepared", "summary": f"prepared by tfbertperf from {corpus}", "files": len(shards),
            "bytes": int(sum(int(s.get("bytes") or 0) for s in shards)),
            "format": FORMATS.get(manifest.get("task"), manifest.get("task")), "compression": "none",
            "manifest": True, "checksums_verified": bool(checksums_verified),
            "uri": redact_text(manifest.get("uri", ""))}


def describe_dataset(uri: str) -> dict:
    """What the data set at `uri` is, as a run's report.json `data` block says it (origin, summary, files, bytes,
    format, compression, manifest): a local folder with our manifest.json, or the user's TFRecords described from
    their first records (data/described.py, light).  Remote URIs are not read (no network calls here)."""
    import json

    from tfbertperf.data.described import describe

    keys = ("origin", "summary", "files", "bytes", "format", "compression", "manifest")
    if "://" in uri and not uri.startswith("file://"):
        return {"summary": "not described: remote data are not read by the fingerprint (a run's "
                           "environment.json says what it trained on)"}
    path = os.path.expanduser(uri[len("file://"):] if uri.startswith("file://") else uri)
    manifest = os.path.join(path, "manifest.json")
    if os.path.isfile(manifest):
        try:
            m = json.loads(open(manifest, encoding="utf-8").read())
            return {k: v for k, v in data_block(dict(m, uri=uri)).items() if k in keys}
        except (OSError, ValueError, TypeError, AttributeError) as e:
            return {"summary": f"not readable: {manifest}: {type(e).__name__}"}
    if not os.path.exists(path) and not any(c in path for c in "*?["):
        return {"summary": "not prepared yet (prepared on first run)"}
    from tfbertperf.config import load_config
    from tfbertperf.storage import open_backend

    try:
        cfg = load_config(data_uri=uri)
        return {k: v for k, v in data_block(describe(uri, open_backend(uri, cfg.data), cfg, light=True)).items()
                if k in keys}
    except UsageError as e:
        return {"summary": f"not usable as training data: {redact_text(str(e))}"}
