"""The small storage interface every backend implements, and per-request metrics."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

MB = 1024 * 1024  # bytes in a mebibyte: the unit of data.chunk_mb / data.cache_mb


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


def local_path(uri: str) -> str:
    """The file-system path of a local URI (a plain path, or file://path)."""
    return split_uri(uri)[2]


def _union(intervals) -> float:
    """Total length covered by (start, end) intervals."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


class _ThreadFile:
    """A file descriptor held by one thread, closed when the thread ends (its thread-local goes)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


_SCHEDSTAT = threading.local()


def thread_core_wait() -> float | None:
    """Seconds this thread has spent runnable but waiting for a core, so far (Linux: the second field of
    /proc/thread-self/schedstat); None where that is not known.  A read's wall time less the growth of this over
    it is the time the read itself took: on a saturated CPU a page-cache read "takes" as long as its thread
    waits for a core, which is the CPU's doing, not the storage's."""
    f = getattr(_SCHEDSTAT, "file", None)
    try:
        if f is None:  # opened once per thread ("thread-self" names the opening thread), read with pread
            f = _SCHEDSTAT.file = _ThreadFile("/proc/thread-self/schedstat")
        return int(os.pread(f.fd, 128, 0).split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class StorageMetrics:
    """Thread-safe per-request counters: requests, bytes, latency distribution, retries, errors, read time.

    Definitions (report.json `storage`, report/SCHEMA.md): `requests` = successful data reads (ranged GETs, or
    for TF's own readers one reader-buffer fill of records; listing/stat calls are not counted), `bytes_read` =
    payload bytes they returned, `request_latency_ms` = wall time of each successful read, `retries` = attempts
    repeated after a transient failure (5xx, 429, connection reset, timeout, short read), `errors` = attempts
    that failed (transient or not).  Read time: `read_time_ms` = the reads' summed wall time (concurrent reads
    counted each), `busy_read_ms` = wall time during which at least one read was in flight, `blocking_read_ms`
    = wall time the input pipeline itself waited on reads, `background_read_ms` = busy read time nobody waited
    on (look-ahead, staging).  `read_mb_per_sec` = bytes_read / busy_read_ms (read throughput);
    `consume_mb_per_sec` = bytes_read / the span from the first read's start to the last read's end (the pace
    at which the run consumed data).  A blocking read's wait excludes the time its thread sat runnable waiting
    for a core (`core_wait_ms` passed to record(), from thread_core_wait()): that time is reported apart, as
    `read_core_wait_ms` and, over the measured steps, `read_core_wait_fraction`.  `records_skipped` /
    `corrupt_shards`: damaged records skipped with data.skip_corrupt=true, and the shards they were in.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_read = 0
        self.retries = 0
        self.errors = 0
        self.latencies_ms: list[float] = []
        self.read_seconds = 0.0  # summed wall time inside reads
        self.intervals: list[tuple[float, float]] = []  # (start, end) of each timed read, perf_counter seconds
        self.blocking_seconds = 0.0  # wall time the pipeline waited on reads
        # (start, end, seen by xprof as a file read, seconds of it the reading thread waited for a core)
        self.blocking_spans: list[tuple[float, float, bool, float]] = []
        self.core_wait_seconds = 0.0  # summed over blocking reads
        self.first_read: float | None = None
        self.last_read: float | None = None
        self.counters: dict[str, int] = {}  # additive report keys (cache_hits, cache_misses, staged_bytes, …)
        self.skipped: dict[str, int] = {}  # shard -> damaged records skipped (data.skip_corrupt)
        self.failure = None  # the first UsageError raised inside a tf.data function (see storage/integrity.py)

    def record(self, nbytes: int, latency_ms: float, *, blocking: bool = False, traced: bool = False,
               end: float | None = None, core_wait_ms: float | None = None) -> None:
        """One timed read of `nbytes` that ended at `end` (perf_counter; default now).  `blocking`: the input
        pipeline waited for it inline (TF's reader, emulated latency), so its time is blocking read time too;
        `traced`: xprof files it as a file read itself (TF's own reader ops); `core_wait_ms`: of its wall time,
        how long the reading thread was runnable but waiting for a core (not a wait on storage)."""
        now = time.perf_counter() if end is None else end
        waited = min(max(0.0, float(core_wait_ms or 0.0)), float(latency_ms)) / 1000.0
        with self._lock:
            self.requests += 1
            self.bytes_read += int(nbytes)
            self.latencies_ms.append(float(latency_ms))
            self.read_seconds += latency_ms / 1000.0
            self.intervals.append((now - latency_ms / 1000.0, now))
            if blocking:
                self.blocking_seconds += latency_ms / 1000.0 - waited
                self.core_wait_seconds += waited
                self.blocking_spans.append((now - latency_ms / 1000.0, now, traced, waited))
            if self.first_read is None or now - latency_ms / 1000.0 < self.first_read:
                self.first_read = now - latency_ms / 1000.0
            self.last_read = max(now, self.last_read or now)

    def block(self, seconds: float) -> None:
        """Wall time the pipeline waited for reads made in the background (a stream chunk, a staged shard)."""
        now = time.perf_counter()
        with self._lock:
            self.blocking_seconds += max(0.0, float(seconds))
            self.blocking_spans.append((now - max(0.0, float(seconds)), now, False, 0.0))

    def add_bytes(self, nbytes: int) -> None:
        """Bytes read outside our own requests, untimed."""
        now = time.perf_counter()
        with self._lock:
            self.bytes_read += int(nbytes)
            if self.first_read is None:
                self.first_read = now
            self.last_read = now

    def skip(self, shard: str, n: int = 1) -> None:
        with self._lock:
            self.skipped[shard] = self.skipped.get(shard, 0) + int(n)

    def note_failure(self, err) -> None:
        """Keep the first user-facing error raised inside a tf.data function (TF re-wraps it as an OpError)."""
        with self._lock:
            if self.failure is None:
                self.failure = err

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

    def untraced_blocking_ms(self, t0: float, t1: float) -> float:
        """Wall time in [t0, t1] (perf_counter) during which the pipeline waited on reads xprof cannot see as
        file reads (stream chunks, staged shards, emulated latency): the union of those waits, clipped."""
        return self.blocking_ms(t0, t1, untraced_only=True)

    def blocking_ms(self, t0: float, t1: float, untraced_only: bool = False, *, core_wait: bool = False) -> float:
        """Wall time in [t0, t1] (perf_counter) during which the pipeline waited on at least one read (only on
        reads xprof cannot see with untraced_only): the union of those waits, clipped to the span.  Each read's
        wait for a core is left out (its span is shortened by it: where in the read the thread waited is not
        known); with `core_wait`, the wall time that only those core waits add is returned instead."""
        with self._lock:
            spans = [(a, b, w) for a, b, traced, w in self.blocking_spans if not (untraced_only and traced)]
        full = _union([(max(a, t0), min(b, t1)) for a, b, _ in spans if min(b, t1) > max(a, t0)])
        own = _union([(max(a + w, t0), min(b, t1)) for a, b, w in spans if min(b, t1) > max(a + w, t0)])
        return (full - own if core_wait else own) * 1e3

    def _busy_seconds(self) -> float:
        return _union(self.intervals)

    def summary(self, span: tuple[float, float] | None = None) -> dict:
        """report.json `storage` counters (backend/mode/uri are added by the caller).  With `span` (perf_counter
        start and end of the measured steps) also `read_wait_fraction`: the share of that span's wall time in
        which the pipeline waited on at least one read (blocking_ms over the span ÷ its length) — what the
        verdict reads as "waiting on storage", free of the warm-up's cold reads — and `read_core_wait_fraction`:
        the share in which the pipeline was inside a read only because the reading thread waited for a core."""
        extra = {}
        if span and span[1] > span[0]:
            length = (span[1] - span[0]) * 1e3
            extra["read_wait_fraction"] = round(self.blocking_ms(*span) / length, 4)
            extra["read_core_wait_fraction"] = round(self.blocking_ms(*span, core_wait=True) / length, 4)
        with self._lock:
            lat = np.array(self.latencies_ms or [0.0])
            span = (self.last_read - self.first_read) if self.first_read and self.last_read else 0.0
            busy = self._busy_seconds()
            blocking = min(self.blocking_seconds, busy) if busy > 0 else self.blocking_seconds
            return {
                "bytes_read": int(self.bytes_read),
                "requests": int(self.requests),
                "read_mb_per_sec": round(self.bytes_read / 1e6 / busy, 3) if busy > 0 else 0.0,
                "consume_mb_per_sec": round(self.bytes_read / 1e6 / span, 3) if span > 0 else 0.0,
                "request_latency_ms": {
                    "p50": round(float(np.percentile(lat, 50)), 3),
                    "p90": round(float(np.percentile(lat, 90)), 3),
                    "p99": round(float(np.percentile(lat, 99)), 3),
                },
                "read_time_ms": round(self.read_seconds * 1e3, 3),
                "busy_read_ms": round(busy * 1e3, 3),
                "blocking_read_ms": round(blocking * 1e3, 3),
                "background_read_ms": round(max(0.0, busy - blocking - self.core_wait_seconds) * 1e3, 3),
                "read_core_wait_ms": round(self.core_wait_seconds * 1e3, 3),
                "retries": int(self.retries),
                "errors": int(self.errors),
                "records_skipped": int(sum(self.skipped.values())),
                "corrupt_shards": sorted(self.skipped),
                **{k: int(v) for k, v in sorted(self.counters.items())},
                **extra,
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
    # string tensor -> Dataset of 1-D string tensors, the records of one chunk / reader buffer each (stream,
    # local and native modes; None where a shard is read record by record).  Lets a pipeline interleave whole
    # groups and unbatch after the interleave: fewer, larger elements through it (local tuned at batch 32 went
    # 25-29 → 20-23 µs of CPU per example, 1.36× the examples/s; tools/bench/bench_pipeline_cost.py).
    read_batches: Callable | None = None
    compression: str = ""  # tf.data.TFRecordDataset's compression_type of every shard: "" or "GZIP"
