"""The stream and stage read modes of remote backends (storage/remote.py describes all three)."""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Iterator

from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import MB, ObjectInfo, ShardSource

if TYPE_CHECKING:  # annotations only: remote.py imports this module when a backend opens its shards
    from tfbertperf.storage.remote import RemoteBackend


class StreamReader:
    """Stream mode: ranged reads of chunk_mb, `concurrency` requests in flight across all shards."""

    def __init__(self, backend: RemoteBackend, infos: list[ObjectInfo], data_cfg, compression: str = "none") -> None:
        self.backend = backend
        self.gzip = compression == "gzip"  # chunks are inflated before the framing parser sees them
        self.sizes = {i.uri: i.size for i in infos}
        self.uris = [i.uri for i in infos]
        self.chunk_bytes = max(64 * 1024, int(float(getattr(data_cfg, "chunk_mb", 8.0)) * MB))
        self.concurrency = max(1, int(getattr(data_cfg, "concurrency", 4)))
        # Read-ahead per shard: enough to keep the pool busy when few shards are open at once.
        self.ahead = max(2, self.concurrency)
        self.skip_corrupt = bool(getattr(data_cfg, "skip_corrupt", False))
        self.pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="tfbertperf-stream")
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)

    def chunks(self, uri: str) -> Iterator[bytes]:
        """The shard's bytes in order, `ahead` ranged reads in flight."""
        size = self.sizes[uri]
        starts = list(range(0, size, self.chunk_bytes))
        pending: collections.deque[Future] = collections.deque()
        nxt = 0
        try:
            while (nxt < len(starts) or pending) and not self.closed:  # closed: the run is over, end quietly
                while nxt < len(starts) and len(pending) < self.ahead:
                    s = starts[nxt]
                    pending.append(self.pool.submit(self.backend.read_range, uri, s, min(self.chunk_bytes, size - s)))
                    nxt += 1
                t0 = time.perf_counter()
                data = pending.popleft().result()
                self.backend.metrics.block(time.perf_counter() - t0)  # the parser waited on this chunk
                yield data
        finally:
            for f in pending:
                f.cancel()

    def generator(self, uri_bytes) -> Iterator:
        """(chunk bytes, record starts, record lengths) per chunk of one shard; see iter_record_spans."""
        import numpy as np

        from tfbertperf.storage.tfrecord import iter_record_spans

        uri = uri_bytes.decode() if isinstance(uri_bytes, bytes) else str(uri_bytes)
        if uri not in self.sizes:
            raise UsageError(f"shard {redact_text(uri)}: not one of the shards this source was opened for")
        metrics, shown = self.backend.metrics, redact_text(uri)
        skip = (lambda _off, _why: metrics.skip(shown)) if self.skip_corrupt else None
        try:
            chunks = self.chunks(uri)
            if self.gzip:
                from tfbertperf.storage.tfrecord import gunzip_chunks

                chunks = gunzip_chunks(chunks, shown)
            for buf, starts, lengths in iter_record_spans(chunks, shown, skip):
                metrics.count("records_read", len(starts))
                yield buf, np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
        except UsageError as e:
            # A Python exception would cross into TF with its traceback (logged by TF's C++ as it goes); instead
            # the error is kept and a poisoned chunk (a record at offset -1) fails the substr op in C++, with a
            # short message; storage/integrity.py re-raises the kept error as the one line.
            metrics.note_failure(e)
            yield b"", np.asarray([-1], dtype=np.int64), np.asarray([0], dtype=np.int64)
        except (RuntimeError, CancelledError):  # the pool was shut down under us, its pending reads cancelled
            if not self.closed:  # (close(): the run is ending after an error elsewhere) — else a real failure
                raise

    def source(self) -> ShardSource:
        import tensorflow as tf

        self.backend.metrics.count("records_read", 0)
        spec = (tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64))

        def read_batches(filename):
            # One generator per shard (interleave opens several at once).  Each chunk crosses into tf.data as one
            # string plus offsets, and substr cuts the records out in C++.
            ds = tf.data.Dataset.from_generator(self.generator, args=(filename,), output_signature=spec)
            return ds.map(lambda buf, starts, lengths: tf.strings.substr(buf, starts, lengths))

        def read(filename):
            return read_batches(filename).unbatch()

        return ShardSource(tf.data.Dataset.from_tensor_slices(self.uris), read, self.backend, "stream",
                           close=self.close, read_batches=read_batches)


# ---------------------------------------------------------------------------------------------------------
class Stager:
    """Stage mode: a bounded local cache filled `lookahead` shards ahead of the reader by background workers.

    The pipeline asks for shards in the order of `uris` (repeating); asking for shard i (a py_function inside
    the interleave) returns its local path — waiting for it when it is not there yet (a miss) — and schedules
    shards i+1 … i+lookahead.  When the cache would exceed `cache_mb`, the least recently handed-out files are
    deleted; a file handed out less than GRACE_S ago is kept, because TFRecordDataset opens it just after the
    py_function returns (once open, deleting it is harmless on POSIX).
    """

    GRACE_S = 5.0

    def __init__(self, backend: RemoteBackend, infos: list[ObjectInfo], data_cfg,
                 hashes: dict[str, str] | None = None, compression: str = "none") -> None:
        self.backend = backend
        self.compression = compression  # staged files keep it; TFRecordDataset inflates them
        self.infos = {i.uri: i for i in infos}
        self.uris = [i.uri for i in infos]
        self.hashes = hashes or {}  # uri -> manifest.json's sha256: every download is checked (whole files: cheap)
        self.index = {u: k for k, u in enumerate(self.uris)}
        self.chunk_bytes = max(64 * 1024, int(float(getattr(data_cfg, "chunk_mb", 8.0)) * MB))
        self.lookahead = int(getattr(data_cfg, "lookahead", 4))
        self.skip_corrupt = bool(getattr(data_cfg, "skip_corrupt", False))
        self.cache_bytes = int(float(getattr(data_cfg, "cache_mb", 2048)) * MB)
        cache_dir = getattr(data_cfg, "cache_dir", "") or ""
        self.own_dir = not cache_dir
        self.dir = cache_dir or tempfile.mkdtemp(prefix="tfbertperf-stage-")
        os.makedirs(self.dir, exist_ok=True)
        self.lock = threading.Condition()
        self.ready: dict[str, str] = {}  # uri -> local path (complete files only)
        self.inflight: dict[str, Future] = {}
        self.handed_out: dict[str, float] = {}  # uri -> monotonic time last handed to the reader
        self.pool = ThreadPoolExecutor(max(1, int(getattr(data_cfg, "concurrency", 4))),
                                       thread_name_prefix="tfbertperf-stage")
        self.closed = False
        # cache_hit_bytes: what the reader got from the local cache instead of the store.  bytes_read counts the
        # store's bytes only, so a second pass over staged data adds hits, not bytes (stream mode reads it again):
        # bytes_read + cache_hit_bytes is what the pipeline consumed, comparable across modes.
        for key in ("cache_hits", "cache_misses", "cache_evictions", "staged_bytes", "cache_hit_bytes"):
            self.backend.metrics.count(key, 0)  # reported even when zero
        for uri in self.uris:  # files a previous run left in a persistent cache dir count as cached
            p = self._path(uri)
            if os.path.isfile(p) and os.path.getsize(p) == self.infos[uri].size:
                self.ready[uri] = p

    def _path(self, uri: str) -> str:
        key = hashlib.sha1(uri.encode()).hexdigest()[:16]
        return os.path.join(self.dir, f"{key}-{self.infos[uri].size}-{os.path.basename(uri.split('?')[0])}")

    def _used_bytes(self) -> int:
        return sum(self.infos[u].size for u in self.ready) + sum(self.infos[u].size for u in self.inflight)

    def _make_room(self, need: int, protect: set[str]) -> bool:
        """Evict least recently handed-out files until `need` more bytes fit; False if it cannot."""
        now = time.monotonic()
        while self._used_bytes() + need > self.cache_bytes:
            victims = [u for u in self.ready if u not in protect and now - self.handed_out.get(u, 0.0) > self.GRACE_S]
            if not victims:
                return False
            v = min(victims, key=lambda u: self.handed_out.get(u, 0.0))
            path = self.ready.pop(v)
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            self.backend.metrics.count("cache_evictions")
        return True

    def _download(self, uri: str) -> str:
        size = self.infos[uri].size
        final = self._path(uri)
        part = final + f".part{threading.get_ident()}"
        digest = hashlib.sha256()
        with open(part, "wb") as f:
            for start in range(0, size, self.chunk_bytes):
                if self.closed:
                    raise UsageError(f"shard {redact_text(uri)}: staging stopped")
                block = self.backend.read_range(uri, start, min(self.chunk_bytes, size - start))
                digest.update(block)
                f.write(block)
        want = self.hashes.get(uri)
        if want and digest.hexdigest() != want:
            from tfbertperf.storage.integrity import hash_mismatch

            if not self.skip_corrupt:
                os.remove(part)
                raise UsageError(hash_mismatch(uri, digest.hexdigest(), want))
            self.backend.metrics.skip(redact_text(uri), 0)  # named in storage.corrupt_shards; damaged frames below
        if self.skip_corrupt:
            self._drop_damaged(uri, part)
        os.replace(part, final)
        self.backend.metrics.count("staged_bytes", size)
        return final

    def _drop_damaged(self, uri: str, path: str) -> None:
        """data.skip_corrupt: rewrite a downloaded shard without its damaged frames (counted once per download)."""
        from tfbertperf.storage.integrity import first_problem, raw_chunks
        from tfbertperf.storage.local import LocalBackend
        from tfbertperf.storage.tfrecord import frame, iter_record_batches

        local = LocalBackend()
        if first_problem(local, path, self.compression) is None:
            return
        shown, metrics = redact_text(uri), self.backend.metrics
        chunks = raw_chunks(local, path)
        if self.compression == "gzip":  # the clean copy is compressed again: the reader's compression_type stays
            import gzip

            from tfbertperf.storage.tfrecord import gunzip_chunks

            chunks, opener = gunzip_chunks(chunks, shown), lambda p: gzip.open(p, "wb")
        else:
            opener = lambda p: open(p, "wb")  # noqa: E731
        with opener(path + ".clean") as out:
            for records in iter_record_batches(chunks, shown, lambda _o, _w: metrics.skip(shown)):
                out.write(b"".join(frame(r) for r in records))
        os.replace(path + ".clean", path)

    def _schedule(self, uri: str, demand: bool) -> Future | None:
        """Start downloading `uri` unless cached/in flight (caller holds the lock).  Look-ahead downloads are
        skipped when the cache is full of files still in use; demand downloads always go ahead."""
        if uri in self.ready:
            return None
        if uri in self.inflight:
            return self.inflight[uri]
        window = self._window_after(uri)
        if not self._make_room(self.infos[uri].size, protect=window | {uri}) and not demand:
            return None

        def job():
            try:
                path = self._download(uri)
            finally:
                with self.lock:
                    self.inflight.pop(uri, None)
            with self.lock:
                self.ready[uri] = path
                self.lock.notify_all()
            return path

        fut = self.pool.submit(job)
        self.inflight[uri] = fut
        return fut

    def _window_after(self, uri: str) -> set[str]:
        k = self.index[uri]
        n = len(self.uris)
        return {self.uris[(k + j) % n] for j in range(1, min(self.lookahead, n - 1) + 1)}

    def get(self, uri_bytes) -> bytes:
        """Local path of the shard (downloading it now on a miss); schedules the look-ahead window."""
        if hasattr(uri_bytes, "numpy"):  # an EagerTensor from tf.py_function
            uri_bytes = uri_bytes.numpy()
        uri = uri_bytes.decode() if isinstance(uri_bytes, bytes) else str(uri_bytes)
        if uri not in self.infos:
            raise UsageError(f"shard {redact_text(uri)}: not one of the shards this source was opened for")
        with self.lock:
            hit = uri in self.ready
            self.backend.metrics.count("cache_hits" if hit else "cache_misses")
            if hit:
                self.backend.metrics.count("cache_hit_bytes", self.infos[uri].size)
            fut = None if hit else self._schedule(uri, demand=True)
            self.handed_out[uri] = time.monotonic()
            k = self.index[uri]
            for j in range(1, self.lookahead + 1):
                nxt = self.uris[(k + j) % len(self.uris)]
                if nxt != uri:
                    self._schedule(nxt, demand=False)
        if fut is not None:
            t0 = time.perf_counter()
            try:
                fut.result()  # re-raises the download's error (already a one-line UsageError when it is the user's)
            except UsageError as e:
                # kept for storage/integrity.py; the reader gets a path that does not exist, so TF fails in C++
                # with a short message instead of logging this exception's traceback
                self.backend.metrics.note_failure(e)
                return os.path.join(self.dir, "failed-download-see-the-error-line").encode()
            finally:
                self.backend.metrics.block(time.perf_counter() - t0)  # the reader waited for this download
        with self.lock:
            path = self.ready.get(uri)
            self.handed_out[uri] = time.monotonic()
        if path is None:  # evicted between download and now: only possible with a cache smaller than a shard
            path = self._download(uri)
            with self.lock:
                self.ready[uri] = path
        return path.encode()

    def close(self) -> None:
        self.closed = True
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def source(self) -> ShardSource:
        import tensorflow as tf

        from tfbertperf.storage.tfrecord import COMPRESSION_TYPES

        ctype = COMPRESSION_TYPES[self.compression]

        def read(filename):
            local = tf.py_function(self.get, [filename], tf.string)
            local.set_shape([])
            return tf.data.TFRecordDataset(local, compression_type=ctype, buffer_size=min(self.chunk_bytes, 4 * MB))

        return ShardSource(tf.data.Dataset.from_tensor_slices(self.uris), read, self.backend, "stage", close=self.close,
                           compression=ctype)

