"""Atomic file writes: a killed run never leaves half a report (write to a temporary name, fsync, rename)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from tfbertperf.redact import redact_obj, redact_text


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write text (secrets redacted) atomically."""
    return atomic_write_bytes(path, redact_text(text).encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj) -> Path:
    """Write a JSON document (secrets redacted) atomically."""
    return atomic_write_bytes(path, (json.dumps(redact_obj(obj), indent=2, sort_keys=False) + "\n").encode("utf-8"))
