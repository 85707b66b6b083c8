"""The small storage interface every backend implements, and per-request metrics."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class ObjectInfo:
    uri: str  # full URI (or local path for the local backend)
    size: int  # bytes


def split_uri(uri: str) -> tuple[str, str, str]:
    """'gs://b/p/x' → ('gs', 'b', 'p/x'); 'az://c/p' → ('az', 'c', 'p'); a path or file:// → ('file', '', path)."""
    if uri.startswith("file://"):
        return "file", "", uri[len("file://"):]
    if "://" not in uri:
        return "file", "", uri
    scheme, rest = uri.split("://", 1)
    bucket, _, path = rest.partition("/")
    return scheme.lower(), bucket, path


class StorageMetrics:
    """Thread-safe per-request counters: requests, bytes, latency distribution, retries, errors.

    Definitions (report.json `storage`): `requests` = successful data reads (ranged GETs; listing/stat calls
    are not counted), `bytes_read` = payload bytes they returned, `request_latency_ms` = wall time of each
    successful read, `retries` = attempts repeated after a transient failure (5xx, 429, connection reset,
    short read), `errors` = attempts that failed (transient or not).  `read_mb_per_sec` = bytes_read / the
    span from the first read's start to the last read's end.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_read = 0
        self.retries = 0
        self.errors = 0
        self.latencies_ms: list[float] = []
        self.read_seconds = 0.0  # summed wall time inside reads
        self.first_read: float | None = None
        self.last_read: float | None = None
        self.counters: dict[str, int] = {}  # additive report keys (cache_hits, cache_misses, staged_bytes, …)

    def record(self, nbytes: int, latency_ms: float) -> None:
        now = time.perf_counter()
        with self._lock:
            self.requests += 1
            self.bytes_read += int(nbytes)
            self.latencies_ms.append(float(latency_ms))
            self.read_seconds += latency_ms / 1000.0
            if self.first_read is None:
                self.first_read = now - latency_ms / 1000.0
            self.last_read = now

    def add_bytes(self, nbytes: int) -> None:
        """Bytes read outside our own requests (native mode: TF's filesystem made the requests)."""
        now = time.perf_counter()
        with self._lock:
            self.bytes_read += int(nbytes)
            if self.first_read is None:
                self.first_read = now
            self.last_read = now

    def retry(self) -> None:
        with self._lock:
            self.retries += 1

    def error(self) -> None:
        with self._lock:
            self.errors += 1

    def count(self, name: str, n: int = 1) -> None:
        """Add `n` to an extra counter reported under `name` (e.g. cache_hits)."""
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + int(n)

    def summary(self) -> dict:
        """report.json `storage` counters (backend/mode/uri are added by the caller)."""
        with self._lock:
            lat = np.array(self.latencies_ms or [0.0])
            span = (self.last_read - self.first_read) if self.first_read and self.last_read else 0.0
            return {
                "bytes_read": int(self.bytes_read),
                "requests": int(self.requests),
                "read_mb_per_sec": round(self.bytes_read / 1e6 / span, 3) if span > 0 else 0.0,
                "request_latency_ms": {
                    "p50": round(float(np.percentile(lat, 50)), 3),
                    "p90": round(float(np.percentile(lat, 90)), 3),
                    "p99": round(float(np.percentile(lat, 99)), 3),
                },
                "read_time_ms": round(self.read_seconds * 1e3, 3),
                "retries": int(self.retries),
                "errors": int(self.errors),
                **{k: int(v) for k, v in sorted(self.counters.items())},
            }


class Backend:
    """One storage service.  URIs passed in are full URIs of this backend's scheme (or paths for local)."""

    name = "base"  # "local" | "gcs" | "azure"

    def __init__(self) -> None:
        self.metrics = StorageMetrics()

    def list(self, prefix_uri: str) -> list[ObjectInfo]:  # objects under a prefix, sorted by URI
        raise NotImplementedError

    def stat(self, uri: str) -> ObjectInfo:  # UsageError if missing
        raise NotImplementedError

    def exists(self, uri: str) -> bool:
        raise NotImplementedError

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        raise NotImplementedError

    def read(self, uri: str) -> bytes:
        return self.read_range(uri, 0, self.stat(uri).size)

    def upload(self, local_path: str, uri: str, sha256: str | None = None) -> None:
        """Write a local file to `uri`; `sha256` (hex), when given, is stored with the object for
        idempotent re-uploads (see checksum)."""
        raise NotImplementedError

    def checksum(self, uri: str) -> str | None:
        """The sha256 (hex) recorded for `uri` by upload, or None when unknown or missing."""
        return None

    def join(self, prefix_uri: str, name: str) -> str:
        return prefix_uri.rstrip("/") + "/" + name


@dataclass
class ShardSource:
    """What the pipeline interleaves over: `filenames` (a tf.data.Dataset of strings, one per shard, in order)
    and `read` (string tensor → tf.data.Dataset of serialized records for that shard)."""

    filenames: object  # tf.data.Dataset[tf.string]
    read: Callable  # tf.Tensor(string) -> tf.data.Dataset[tf.string]
    backend: Backend
    mode: str  # local|native|stream|stage
    close: Callable[[], None] = lambda: None  # stop background workers (stage mode)
    # stream mode only: string tensor -> Dataset of 1-D string tensors, the records of one chunk each.  Lets a
    # pipeline interleave whole chunks and unbatch after the interleave (fewer, larger elements through it).
    read_batches: Callable | None = None
