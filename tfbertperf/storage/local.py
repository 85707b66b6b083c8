"""Local disk backend, with optional emulated slow storage (fixed latency + bandwidth cap per read).

The emulation exists so ground truth can be injected without cloud access: every read of `READ_BYTES` of a
shard (the first one is the open) blocks its tf.data thread for `read_latency_ms + bytes / bandwidth`, the way
a blocking remote read would — it costs wall time, not CPU.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import time

from tfbertperf.errors import UsageError
from tfbertperf.storage.base import Backend, ObjectInfo, ShardSource, local_path, thread_core_wait

READ_BYTES = 256 * 1024  # one emulated read request


def file_sha256(path: str) -> str:
    """Hex sha256 of a local file (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class LocalBackend(Backend):
    name = "local"

    def __init__(self, read_latency_ms: float = 0.0, read_bandwidth_mbps: float = 0.0) -> None:
        super().__init__()
        self.read_latency_ms = float(read_latency_ms)
        self.read_bandwidth_mbps = float(read_bandwidth_mbps)

    def _delay(self, nbytes: int) -> None:
        d = self.read_latency_ms / 1000.0
        if self.read_bandwidth_mbps > 0:
            d += nbytes / (self.read_bandwidth_mbps * 1e6)
        if d > 0:
            time.sleep(d)

    def list(self, prefix_uri: str) -> list[ObjectInfo]:
        p = local_path(prefix_uri)
        if os.path.isdir(p):
            files = [os.path.join(dp, f) for dp, _, fs in os.walk(p) for f in fs]
        else:
            files = glob.glob(p + "*")
        return sorted((ObjectInfo(f, os.path.getsize(f)) for f in files if os.path.isfile(f)), key=lambda o: o.uri)

    def stat(self, uri: str) -> ObjectInfo:
        p = local_path(uri)
        if not os.path.isfile(p):
            raise UsageError(f"{uri}: no such file")
        return ObjectInfo(p, os.path.getsize(p))

    def exists(self, uri: str) -> bool:
        return os.path.exists(local_path(uri))

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        t0 = time.perf_counter()
        with open(local_path(uri), "rb") as f:
            f.seek(start)
            data = f.read(length)
        self._delay(len(data))
        self.metrics.record(len(data), (time.perf_counter() - t0) * 1000.0)
        return data

    def upload(self, local_file: str, uri: str, sha256: str | None = None) -> None:
        dst = local_path(uri)
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        if os.path.abspath(local_file) != os.path.abspath(dst):
            from tfbertperf.storage.atomic import atomic_file

            with open(local_file, "rb") as src, atomic_file(dst) as f:  # temporary per process, then renamed
                shutil.copyfileobj(src, f, 4 << 20)

    def checksum(self, uri: str) -> str | None:
        p = local_path(uri)
        return file_sha256(p) if os.path.isfile(p) else None

    def join(self, prefix_uri: str, name: str) -> str:
        return os.path.join(local_path(prefix_uri), name)

    # ---- tf.data ------------------------------------------------------------------------------------------
    def shard_source(self, uris: list[str], record_bytes_hint: int = 2048, skip_corrupt: bool = False,
                     compression: str = "none") -> ShardSource:
        """TFRecordDataset per shard, counted (storage/tfreader.py); with emulated latency/bandwidth each
        READ_BYTES read blocks as above.  With `skip_corrupt`, shards are checked first and damaged ones are read
        by our own framing parser, which skips the damaged records (storage/integrity.py).  `compression`:
        none | gzip (TFRecordDataset's compression_type)."""
        from tfbertperf.storage.tfrecord import COMPRESSION_TYPES
        import tensorflow as tf

        from tfbertperf.storage.tfreader import counted_record_batches

        paths = [local_path(u) for u in uris]
        for p in paths:
            if not os.path.isfile(p):
                raise UsageError(f"shard {p}: no such file")
        metrics = self.metrics
        slow = self.read_latency_ms > 0 or self.read_bandwidth_mbps > 0
        per_read = max(1, READ_BYTES // max(1, int(record_bytes_hint)))
        ctype = COMPRESSION_TYPES[compression]
        damaged = set()
        if skip_corrupt:
            from tfbertperf.storage.integrity import corrupt_shards

            damaged = set(corrupt_shards(self, paths, compression))

        def _sleep_for(nbytes):
            t0, wait0 = time.perf_counter(), thread_core_wait()
            self._delay(int(nbytes))
            wait = thread_core_wait()
            metrics.record(int(nbytes), (time.perf_counter() - t0) * 1000.0, blocking=True,
                           core_wait_ms=None if wait is None or wait0 is None else (wait - wait0) * 1e3)
            return nbytes

        def tf_read_batches(filename):
            # groups of per_read records (one reader buffer): far fewer elements through the interleave
            if not slow:
                return counted_record_batches(filename, metrics, per_read=per_read, buffer_size=READ_BYTES,
                                              compression_type=ctype)
            ds = tf.data.TFRecordDataset(filename, compression_type=ctype, buffer_size=READ_BYTES)

            def _block(records):
                nbytes = tf.reduce_sum(tf.cast(tf.strings.length(records), tf.int64))
                done = tf.py_function(_sleep_for, [nbytes], tf.int64)
                with tf.control_dependencies([done]):
                    return tf.identity(records)

            return ds.batch(per_read).map(_block)

        def tf_read(filename):
            return tf_read_batches(filename).unbatch()

        read, read_batches = tf_read, tf_read_batches
        if damaged:
            from tfbertperf.storage.integrity import skipping_read

            read, read_batches = skipping_read(self, damaged, tf_read, chunk_bytes=READ_BYTES,
                                               compression=compression), None
        return ShardSource(tf.data.Dataset.from_tensor_slices(paths), read, self, "local", read_batches=read_batches,
                           compression=ctype)
