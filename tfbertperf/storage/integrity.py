"""Damaged shards and failed reads, in every read mode: one line naming the shard (or URI) and the cause.

TF reports a bad shard as `DataLossError: corrupted record at 4926` (TFRecordDataset: local, stage, native
modes), without the file; a `UsageError` raised inside a tf.data function (stream mode's framing parser, stage
mode's downloads) reaches the training loop re-wrapped as a TF error with a traceback in its text; TF's gs://
filesystem fails with curl's or the service's words.  `storage_errors` turns all of these into a UsageError:

* an error our own code raised inside tf.data is kept by the backend's metrics (`note_failure`) and re-raised;
* data loss: the shards are checked with our framing parser (storage/tfrecord.py, both CRCs) and the first
  damaged one is named with the byte offset of its first bad frame;
* TF filesystem errors: the URI they name (else the data URI) and the cause (host not resolvable or
  unreachable, timeout, HTTP 401/403/404).

`data.skip_corrupt=true` reads past damage instead: `corrupt_shards` finds the damaged shards before training
(local and native modes) and `skipping_read` reads those through our parser, which skips damaged frames and
counts them (storage.records_skipped, storage.corrupt_shards); stream mode skips while it parses, stage mode
while it downloads.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from typing import Iterator

from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import local_path
from tfbertperf.storage.tfrecord import iter_record_batches

SCAN_CHUNK = 4 * 1024 * 1024


def raw_chunks(backend, uri: str, chunk_bytes: int = SCAN_CHUNK, *, counted: bool = False) -> Iterator[bytes]:
    """The bytes of `uri` in order; `counted`: through backend.read_range (metrics, retries), else uncounted
    (local: the file; remote: retried raw ranged reads)."""
    if backend.name == "local":
        if counted:
            size = os.path.getsize(local_path(uri))
            for s in range(0, size, chunk_bytes):
                yield backend.read_range(uri, s, chunk_bytes)
            return
        with open(local_path(uri), "rb") as f:
            yield from iter(lambda: f.read(chunk_bytes), b"")
        return
    size = backend.stat(uri).size
    for s in range(0, size, chunk_bytes):
        n = min(chunk_bytes, size - s)
        if counted:
            yield backend.read_range(uri, s, n)
        else:
            yield backend.call(uri, lambda s=s, n=n: backend._read_range(uri, s, n))


def record_chunks(backend, uri: str, compression: str = "none", chunk_bytes: int = SCAN_CHUNK, *,
                  counted: bool = False) -> Iterator[bytes]:
    """The bytes of `uri`'s TFRecords in order: raw_chunks, inflated when `compression` is gzip (a frame's byte
    offset is then one in the inflated stream)."""
    chunks = raw_chunks(backend, uri, chunk_bytes, counted=counted)
    if compression == "gzip":
        from tfbertperf.storage.tfrecord import gunzip_chunks

        return gunzip_chunks(chunks, redact_text(uri))
    return chunks


def first_problem(backend, uri: str, compression: str = "none") -> str | None:
    """'shard <uri>: corrupt TFRecord at byte N (…)' for the first damaged frame of `uri` (or its damaged GZIP
    data), or None if sound."""
    try:
        for _ in iter_record_batches(record_chunks(backend, uri, compression), redact_text(uri)):
            pass
    except UsageError as e:
        return str(e)
    return None


def hash_mismatch(uri: str, got: str, want: str) -> str:
    """The one line for a shard whose bytes are not the ones manifest.json recorded (same size, other content)."""
    return (f"shard {redact_text(uri)}: sha256 {got[:12]}… differs from manifest.json's {want[:12]}… "
            f"(damaged or replaced after prepare)")


def verify_hashes(backend, uris: list[str], hashes: dict[str, str], skip: bool) -> list[str]:
    """data.verify=sha256: hash each of `uris` that manifest.json gives a sha256 for (read once, uncounted).

    A mismatch raises UsageError naming the shard, or with `skip` (data.skip_corrupt) is recorded in the
    backend's metrics (storage.corrupt_shards names it) and the run goes on.  Returns the mismatched shards.
    """
    import hashlib

    if not hashes:
        raise UsageError("--set data.verify=sha256: manifest.json records no shard hashes (prepared before they "
                         "were); re-run `tfbertperf prepare`")
    bad = []
    for uri in uris:
        if uri not in hashes:
            continue
        h = hashlib.sha256()
        for block in raw_chunks(backend, uri):
            h.update(block)
        if h.hexdigest() != hashes[uri]:
            if not skip:
                raise UsageError(hash_mismatch(uri, h.hexdigest(), hashes[uri]))
            backend.metrics.skip(redact_text(uri), 0)  # named in storage.corrupt_shards, no record skipped
            bad.append(uri)
    return bad


def corrupt_shards(backend, uris: list[str], compression: str = "none") -> list[str]:
    """The shards among `uris` with at least one damaged frame (each read once, uncounted)."""
    return [u for u in uris if first_problem(backend, u, compression) is not None]


def skipping_records(backend, uri: str, chunk_bytes: int, compression: str = "none") -> Iterator[bytes]:
    """The sound records of `uri`; damaged frames are skipped and counted in backend.metrics (damaged GZIP data
    cannot be read past: it ends the shard with its one-line error)."""
    metrics, shown = backend.metrics, redact_text(uri)
    chunks = raw_chunks(backend, uri, chunk_bytes, counted=True)

    def timed():  # our reads run inline here: the pipeline waits for them
        while True:
            t0 = time.perf_counter()
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            metrics.block(time.perf_counter() - t0)
            yield chunk

    stream = timed()
    if compression == "gzip":
        from tfbertperf.storage.tfrecord import gunzip_chunks

        stream = gunzip_chunks(stream, shown)
    try:
        for records in iter_record_batches(stream, shown, on_corrupt=lambda _off, _why: metrics.skip(shown)):
            yield from records
    except UsageError as e:
        metrics.note_failure(e)
        raise


def skipping_read(backend, damaged: set[str], fallback, chunk_bytes: int, compression: str = "none"):
    """A ShardSource `read`: the shards in `damaged` through skipping_records, the others through `fallback`."""
    import tensorflow as tf

    names = tf.constant(sorted(damaged))

    def gen(filename):
        name = filename.decode() if isinstance(filename, bytes) else str(filename)
        yield from skipping_records(backend, name, chunk_bytes, compression)

    def read(filename):
        bad = tf.reduce_any(tf.equal(filename, names))
        ours = tf.data.Dataset.from_generator(gen, args=(filename,), output_signature=tf.TensorSpec([], tf.string))
        # take(0) builds an empty iterator: the branch not taken never opens the file
        none, every = tf.constant(0, tf.int64), tf.constant(-1, tf.int64)
        return fallback(filename).take(tf.where(bad, none, every)).concatenate(ours.take(tf.where(bad, every, none)))

    return read


# ---- TF errors → one line -------------------------------------------------------------------------------
_CAUSES = [  # (pattern in TF's message, cause shown)
    (r"[Cc]ould not resolve host|[Cc]ouldn't resolve host|libcurl code 6\b", "storage host cannot be resolved"),
    (r"[Cc]ouldn't connect|[Ff]ailed to connect|[Cc]onnection refused|libcurl code 7\b",
     "storage host unreachable (connection refused)"),
    (r"[Tt]imed? ?out|libcurl code 28\b", "storage request timed out"),
    (r"SSL|certificate|libcurl code (35|51|58|60|77)\b", "TLS handshake with the storage host failed"),
    (r"(HTTP response code|status) 401\b", "credentials rejected (HTTP 401)"),
    (r"(HTTP response code|status) 403\b", "access denied (HTTP 403)"),
    (r"(HTTP response code|status) 404\b", "not found (HTTP 404)"),
]
_URI = re.compile(r"\b(?:gs|az|s3)://[^\s'\"`,;)\]]+")


def _first_line(msg: str) -> str:
    """TF's message on one line: without the function-node prefix, the [Op:…] suffix and bodies' line breaks."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", " ".join(str(msg).split()))
    text = re.sub(r"\s*\[\[\{\{node [^]]*\]\]", "", text)
    text = re.sub(r"\s*\[Op:\w+\].*$", "", text).strip()
    return text if len(text) <= 200 else text[:197] + "…"


def translate(exc: BaseException, backend, uris: list[str], data_uri: str,
              compression: str = "none") -> UsageError | None:
    """The one-line UsageError for a TF error met while reading `uris`, or None when it is not a storage error."""
    if backend.metrics.failure is not None:
        return backend.metrics.failure
    msg = getattr(exc, "message", None) or str(exc)
    name = type(exc).__name__
    if name == "DataLossError" or re.search(r"corrupted record|truncated record|data CRC|length CRC", msg):
        for u in uris:
            problem = first_problem(backend, u, compression)
            if problem is not None:
                return UsageError(problem)
        return UsageError(f"data {redact_text(data_uri)}: TensorFlow reported damaged data ({_first_line(msg)}), "
                          "yet every shard checks out now (changed while reading?)")
    if not re.search(r"libcurl|HTTP request|HTTP response code|\b(?:gs|az|s3)://", msg):
        return None  # not about storage: a model or runtime error passes unchanged
    for pattern, cause in _CAUSES:
        if re.search(pattern, msg):
            m = _URI.search(msg)
            return UsageError(f"{redact_text(m.group(0) if m else data_uri)}: {cause} "
                              f"(TensorFlow: {redact_text(_first_line(msg))})")
    if name in ("NotFoundError", "PermissionDeniedError", "UnauthenticatedError", "UnavailableError") and (
            _URI.search(msg) or "gs://" in data_uri):
        m = _URI.search(msg)
        return UsageError(f"{redact_text(m.group(0) if m else data_uri)}: {_first_line(redact_text(msg))}")
    return None


@contextlib.contextmanager
def storage_errors(backend, uris: list[str], data_uri: str, compression: str = "none"):
    """Re-raise storage failures met inside the block (training on a pipeline over `uris`) as one-line
    UsageErrors (module docstring); anything else passes unchanged."""
    try:
        yield
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 — translated when it is a storage failure, re-raised otherwise
        err = translate(e, backend, uris, data_uri, compression) if "tensorflow" in type(e).__module__ or \
            backend.metrics.failure is not None else None
        if err is None:
            raise
        raise err from None
