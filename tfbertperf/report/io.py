"""Atomic file writes: a killed run never leaves half a report (write to a temporary name, fsync, rename)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tfbertperf.redact import redact_obj, redact_text
from tfbertperf.storage.atomic import write_atomic


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write bytes atomically and durably (storage/atomic.py: temporary name, fsync, rename)."""
    return write_atomic(path, data, durable=True)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write text (secrets redacted) atomically."""
    return atomic_write_bytes(path, redact_text(text).encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj) -> Path:
    """Write a JSON document (secrets redacted) atomically."""
    return atomic_write_bytes(path, (json.dumps(redact_obj(obj), indent=2, sort_keys=False) + "\n").encode("utf-8"))
