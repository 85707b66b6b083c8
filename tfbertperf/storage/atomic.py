"""Atomic local file writes, the one helper every writer uses (reports, prepared data, checkpoints, worker results).

A file is written under a temporary name in its own directory and renamed over the final name, so a reader (or a
killed run) sees the old file or the whole new one, never half of it.  durable=True also fsyncs the file before
the rename and the directory after it: the data then survives a crash of the machine, not only of the process
(reports, checkpoints, prepared data sets).  durable=False skips both fsyncs, for files another live process
reads right away and nobody needs after a crash (a worker's result handed to its parent).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory, making the renames and creations inside it durable (best effort: some file systems
    refuse to open or fsync a directory, which then is not an error)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temporary_name(path: Path) -> Path:
    """Where `path` is written before its rename: hidden, per process (two writers never share one)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def is_temporary(name: str) -> bool:
    """Whether a file name is one of atomic_file's temporaries (an unfinished write: never uploaded or read)."""
    return name.startswith(".") and name.endswith(".tmp")


@contextmanager
def atomic_file(path: str | os.PathLike, durable: bool = True):
    """`with atomic_file(p) as f: f.write(...)`: a binary file object on `.<name>.<pid>.tmp` beside `p`, renamed
    to `p` when the block ends without an exception (removed when it raises).  Parent directories are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        with open(tmp, "wb") as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)


def write_atomic(path: str | os.PathLike, data: bytes, durable: bool = True) -> Path:
    """Write `data` to `path` atomically (see the module docstring); returns the path."""
    with atomic_file(path, durable) as f:
        f.write(data)
    return Path(path)
