"""Upload a prepared data directory to local disk, gs:// or az:// — parallel, idempotent, resumable.

Idempotent: an object that already has the same size and the same sha256 (stored as object metadata by a
previous upload) is skipped.  Resumable: objects are written whole, one per file, and manifest.json goes last,
so an interrupted upload leaves no manifest pointing at missing shards and a re-run uploads only what is missing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.local import file_sha256

MANIFEST = "manifest.json"


class _Progress:
    """One status line on stderr: files and MB done; redrawn in place on a terminal, a line per file otherwise."""

    def __init__(self, label: str, total_files: int, total_bytes: int, enabled: bool) -> None:
        self.label, self.total_files, self.total_bytes = label, total_files, total_bytes
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()
        self.files = self.bytes = 0
        self.t0 = time.perf_counter()
        self.lock = threading.Lock()

    def advance(self, nbytes: int, name: str, skipped: bool) -> None:
        with self.lock:
            self.files += 1
            self.bytes += nbytes
            if not self.enabled:
                return
            frac = self.bytes / self.total_bytes if self.total_bytes else 1.0
            bar = "#" * int(frac * 24)
            rate = self.bytes / 1e6 / max(1e-6, time.perf_counter() - self.t0)
            line = (f"upload {self.label} [{bar:<24}] {self.files}/{self.total_files} files "
                    f"{self.bytes / 1e6:.1f}/{self.total_bytes / 1e6:.1f} MB {rate:.1f} MB/s"
                    f"{' (skipped ' + name + ': unchanged)' if skipped else ''}")
            sys.stderr.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
            sys.stderr.flush()

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def upload_dir(local_dir: str, out_uri: str, data_cfg=None, progress: bool = True, backend=None) -> dict:
    """Upload every file under `local_dir` to `out_uri` (same relative names), manifest.json last.

    Args:
      local_dir: directory written by prepare (vocab.txt, shards, manifest.json).
      out_uri: destination prefix: a path, file://, gs://BUCKET/PREFIX or az://CONTAINER/PREFIX.
      data_cfg: DataConfig (`concurrency` = parallel uploads).
      progress: progress bar on stderr.
      backend: an open backend for out_uri (default: open_backend(out_uri, data_cfg)).
    Returns:
      {"uploaded": files written, "skipped": files already there unchanged, "bytes_uploaded": bytes written,
       "seconds": wall time}.
    Raises:
      UsageError naming the directory, file or URI.
    """
    from tfbertperf.storage.atomic import is_temporary
    from tfbertperf.storage.factory import open_backend

    if not os.path.isdir(local_dir):
        raise UsageError(f"{local_dir}: no such directory to upload")
    files = sorted(os.path.relpath(os.path.join(dp, f), local_dir)
                   for dp, _, fs in os.walk(local_dir) for f in fs if not is_temporary(f))
    if not files:
        raise UsageError(f"{local_dir}: nothing to upload (empty directory)")
    backend = backend or open_backend(out_uri, data_cfg)
    body = [f for f in files if f != MANIFEST]
    last = [f for f in files if f == MANIFEST]
    sizes = {f: os.path.getsize(os.path.join(local_dir, f)) for f in files}
    bar = _Progress(redact_text(out_uri), len(files), sum(sizes.values()), progress)
    stats = {"uploaded": 0, "skipped": 0, "bytes_uploaded": 0}
    lock = threading.Lock()
    t0 = time.perf_counter()

    def one(rel: str) -> None:
        src = os.path.join(local_dir, rel)
        dst = backend.join(out_uri, rel.replace(os.sep, "/"))
        sha = file_sha256(src)
        same = backend.exists(dst) and backend.stat(dst).size == sizes[rel] and backend.checksum(dst) == sha
        if not same:
            backend.upload(src, dst, sha256=sha)
        with lock:
            stats["skipped" if same else "uploaded"] += 1
            stats["bytes_uploaded"] += 0 if same else sizes[rel]
        bar.advance(sizes[rel], rel, same)

    workers = max(1, int(getattr(data_cfg, "concurrency", 4) or 4))
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="tfbertperf-upload") as pool:
            for fut in as_completed([pool.submit(one, f) for f in body]):
                fut.result()  # first failure stops the upload; manifest.json is not written
        for f in last:
            one(f)
    finally:
        bar.done()
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    return stats
