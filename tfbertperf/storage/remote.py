"""What GCS and Azure Blob share: bounded retries with per-request metrics, and the three remote read modes.

    stream  SDK ranged reads of `data.chunk_mb` chunks (up to `data.concurrency` in flight, read ahead of the
            parser), TFRecord framing parsed in Python with both CRC checks, fed to tf.data with one
            `from_generator` per shard so the pipeline's interleave reads shards in parallel.
    stage   background workers download shards `data.lookahead` ahead of consumption into a bounded local cache
            (`data.cache_dir`, `data.cache_mb`); TFRecordDataset reads the local copies.  Cache hits counted.
    native  TF's own filesystem (gs:// only): TFRecordDataset on the URI.  Bytes are counted from the records.

Every data read runs inside `tf.profiler.experimental.Trace("storage_read", …)` so it shows in the trace viewer
next to the tf.data ops it feeds.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import Backend, ObjectInfo, ShardSource


class TransientError(Exception):
    """A failure worth retrying (5xx, 429, connection reset, short read)."""


_NETWORK_CAUSES = (  # (words in the exception chain's text, cause shown, permanent?)
    (("Name or service not known", "nodename nor servname", "No address associated with hostname"),
     "storage host cannot be resolved", True),
    (("Connection refused", "Errno 111"), "connection refused", False),
    (("Connection reset", "Errno 104", "RemoteDisconnected", "IncompleteRead", "ProtocolError"),
     "connection reset", False),
    (("timed out", "Timeout", "timeout"), "timed out", False),
)


def network_failure(exc: BaseException, shown: str) -> BaseException:
    """A network-level failure (no HTTP status) as TransientError(cause) — or, for a host name that does not
    resolve, a UsageError naming `shown` and the cause (retrying cannot help)."""
    text = f"{type(exc).__name__}: {exc}"
    for words, cause, permanent in _NETWORK_CAUSES:
        if any(w in text for w in words):
            return UsageError(f"{shown}: {cause}") if permanent else TransientError(cause)
    return TransientError(type(exc).__name__)


def _trace(name: str, **kw):
    """tf.profiler TraceMe context (a no-op when TF is not imported yet: storage must not force the import)."""
    import sys

    if "tensorflow" in sys.modules:
        import tensorflow as tf

        return tf.profiler.experimental.Trace(name, **kw)
    import contextlib

    return contextlib.nullcontext()


class RemoteBackend(Backend):
    """Base of the SDK backends.  Subclasses implement `_classify(exc)` and the raw `_read/_stat/…` calls."""

    max_attempts = 8  # per request; 5 % injected faults need ~3 in the worst case seen, 8 leaves a wide margin
    backoff_s = 0.05  # first retry delay; doubles each attempt (with jitter), capped at backoff_cap_s
    backoff_cap_s = 2.0
    connect_timeout_s = 20.0  # per request; a timeout is transient (retried)
    read_timeout_s = 120.0  # longest wait for the next bytes of a response

    def __init__(self, uri: str, data_cfg=None) -> None:
        super().__init__()
        self.uri = uri
        self.data_cfg = data_cfg
        self.shown_uri = redact_text(uri)

    # ---- retry ------------------------------------------------------------------------------------------
    def _classify(self, exc: BaseException, what: str) -> BaseException:
        """Return TransientError to retry, or the exception to raise (a UsageError for the user's mistakes)."""
        raise NotImplementedError

    def call(self, what: str, fn: Callable, *, count_bytes: bool = False):
        """Run `fn()` with bounded exponential-backoff retries on transient failures.

        `what` names the object for errors (it is redacted).  With `count_bytes`, the result's length and the
        wall time of the successful attempt are recorded as one request in `metrics`.
        """
        delay = self.backoff_s
        for attempt in range(1, self.max_attempts + 1):
            t0 = time.perf_counter()
            try:
                out = fn()
            except UsageError:
                self.metrics.error()
                raise
            except Exception as e:  # noqa: BLE001 — classified below, never swallowed
                self.metrics.error()
                verdict = self._classify(e, what)
                if not isinstance(verdict, TransientError):
                    raise verdict from None
                if attempt == self.max_attempts:
                    raise UsageError(
                        f"{redact_text(what)}: storage request failed after {attempt} attempts ({verdict})"
                    ) from None
                self.metrics.retry()
                time.sleep(min(self.backoff_cap_s, delay) * (0.5 + random.random()))
                delay *= 2
                continue
            if count_bytes:
                self.metrics.record(len(out), (time.perf_counter() - t0) * 1000.0)
            return out
        raise AssertionError("unreachable")

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        """`length` bytes of `uri` from byte `start` (fewer only at the end of the object); retried, counted."""

        def once():
            data = self._read_range(uri, start, length)
            if len(data) < length and start + len(data) < self._size_hint(uri, start + len(data)):
                raise TransientError(f"short read: {len(data)} of {length} bytes")
            return data

        with _trace("storage_read", uri=redact_text(uri), offset=start, bytes=length):
            return self.call(uri, once, count_bytes=True)

    def _size_hint(self, uri: str, at_least: int) -> int:
        """Object size when known (shard sources pre-stat their shards); `at_least` otherwise."""
        return self._sizes.get(uri, at_least) if hasattr(self, "_sizes") else at_least

    def _read_range(self, uri: str, start: int, length: int) -> bytes:
        raise NotImplementedError

    # ---- objects ----------------------------------------------------------------------------------------
    SHA256_KEY = ""  # the metadata key upload writes the content's sha256 under (per SDK naming rules)

    def _object(self, uri: str):
        """The SDK's properties of the object (with `.metadata`), or None when it does not exist."""
        raise NotImplementedError

    def exists(self, uri: str) -> bool:
        return self._object(uri) is not None

    def checksum(self, uri: str) -> str | None:
        obj = self._object(uri)
        return (obj.metadata or {}).get(self.SHA256_KEY) if obj is not None else None

    # ---- shard sources ----------------------------------------------------------------------------------
    def shard_source(self, uris: list[str], mode: str = "stream", data_cfg=None, record_bytes_hint: int = 2048,
                     hashes: dict[str, str] | None = None, compression: str = "none"):
        """ShardSource reading `uris` in `mode` (stream | stage | native); see the module docstring.  `hashes`
        ({uri: sha256} from manifest.json): stage mode checks each downloaded shard against it.  `compression`:
        none | gzip (stream mode inflates the chunks before parsing; stage and native: TFRecordDataset's)."""
        data_cfg = data_cfg if data_cfg is not None else self.data_cfg
        if not uris:
            raise UsageError(f"{self.shown_uri}: no shards to read")
        if mode == "native":
            return self._native_source(uris, record_bytes_hint, data_cfg, compression)
        infos = self._stat_all(uris, data_cfg)
        self._sizes = {i.uri: i.size for i in infos}
        if mode == "stream":
            from tfbertperf.storage.remote_modes import StreamReader

            return StreamReader(self, infos, data_cfg, compression).source()
        if mode == "stage":
            from tfbertperf.storage.remote_modes import Stager

            return Stager(self, infos, data_cfg, hashes, compression).source()
        raise UsageError(f"--set data.mode={mode}: expected one of local, native, stream, stage")

    def _stat_all(self, uris: list[str], data_cfg) -> list[ObjectInfo]:
        workers = max(1, int(getattr(data_cfg, "concurrency", 4) or 4))
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(self.stat, uris))

    def _native_source(self, uris: list[str], record_bytes_hint: int, data_cfg=None,
                       compression: str = "none") -> ShardSource:
        raise UsageError(
            f"{self.shown_uri}: data.mode=native reads through TensorFlow's own filesystem, which exists for gs:// "
            "only (tensorflow-io's az:// does not load on TF 2.21); use data.mode=stream or stage"
        )


# ---------------------------------------------------------------------------------------------------------
