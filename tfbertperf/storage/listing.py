"""The files a data.uri names — a folder, a glob, one file or a comma list; local, gs:// or az:// — and what their
first bytes say (a TFRecord, GZIP-compressed or not).  Storage only: nothing here knows what a record holds.

  folder   listed recursively; names starting with "." or "_" (_SUCCESS, .crc) and files with a suffix in
           NON_DATA_SUFFIXES (vocab.txt, README.md …) are left out, and so are empty files (no records).
  glob     `*` and `?` stay within one path segment, `**` crosses them, [...] is a class; the same names are left out.
  file     taken as named.
Sizes come from the storage listing.  Reads here are not counted in the backend's metrics (a run's storage figures
are the training's reads).
"""

from __future__ import annotations

import glob
import os
import re

from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import ObjectInfo, split_uri

NON_DATA_SUFFIXES = (".txt", ".json", ".md", ".rst", ".csv", ".tsv", ".yaml", ".yml", ".py", ".sh", ".crc",
                     ".log", ".html", ".png", ".jpg", ".pdf", ".index", ".meta", ".ckpt", ".h5", ".pb", ".lock",
                     ".tmp", ".part", ".vocab", ".model", ".zip", ".tar")
GLOB_CHARS = "*?["
KIND_BYTES = 4096  # read of every file's start: its kind (a GZIP member inflates a frame header from far less)


def split_spec(uri: str) -> list[str]:
    """data.uri → its items (a comma list; a single URI is a list of one).  An az:// SAS query stays with the
    item it ends."""
    return [x.strip() for x in uri.split(",") if x.strip()]


def is_glob(item: str) -> bool:
    """Whether an item of data.uri is a glob (an az:// SAS query's characters do not count)."""
    base = base_uri(item)
    return any(c in base for c in GLOB_CHARS)


def glob_regex(pattern: str) -> re.Pattern:
    """A glob as a regex over whole paths: `*` and `?` within one segment, `**` across segments, [...] a class."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:j].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def data_name(uri: str) -> bool:
    """Whether a listed file may be a data file (module docstring: names that are left out)."""
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    return not name.startswith((".", "_")) and not name.lower().endswith(NON_DATA_SUFFIXES)


def base_uri(item: str) -> str:
    return item.split("?", 1)[0] if item.startswith("az://") else item


def list_files(uri: str, backend) -> list[ObjectInfo]:
    """The data files `uri` names (module docstring), sorted, each once.  UsageError naming the item for a path
    that does not exist, a glob matching nothing, a folder without data files, or a list that leaves the
    first item's bucket/container."""
    items = split_spec(uri)
    if not items:
        raise UsageError("--set data.uri: empty")
    first = split_uri(base_uri(items[0]))[:2]
    found: dict[str, ObjectInfo] = {}
    for item in items:
        shown = redact_text(item)
        base = base_uri(item)
        if backend.name == "local":
            base = os.path.expanduser(split_uri(base)[2])
        elif split_uri(base)[:2] != first:
            where = "bucket" if first[0] == "gs" else "container"
            raise UsageError(f"--set data.uri={redact_text(uri)}: every item of a list must be in "
                             f"{first[0]}://{first[1]} (the first item's {where})")
        if is_glob(base):
            if backend.name == "local":  # the same rules as glob_regex, without walking the tree above the glob
                hits = [ObjectInfo(p, os.path.getsize(p)) for p in glob.glob(base, recursive=True) if os.path.isfile(p)]
            else:  # list what the part before the first wildcard prefixes, keep the names the glob matches
                rx = glob_regex(base)
                hits = [o for o in backend.list(base[:min(base.index(c) for c in GLOB_CHARS if c in base)])
                        if rx.match(o.uri)]
            hits = [o for o in hits if data_name(o.uri) and o.size > 0]
            if not hits:
                raise UsageError(f"data.uri {shown}: the glob matches no data file")
        else:
            hits = _file_or_folder(base, backend, shown)
        for o in hits:
            found.setdefault(o.uri, o)
    return sorted(found.values(), key=lambda o: o.uri)


def _file_or_folder(base: str, backend, shown: str) -> list[ObjectInfo]:
    if backend.name == "local":
        if os.path.isfile(base):
            return [ObjectInfo(base, os.path.getsize(base))] if os.path.getsize(base) else []
        if not os.path.isdir(base):
            raise UsageError(f"data.uri {shown}: no such directory or file")
        listed = backend.list(base)
    else:
        if base.rstrip("/") == base and split_uri(base)[2] and backend.exists(base):
            info = backend.stat(base)
            return [info] if info.size else []
        listed = backend.list(base.rstrip("/") + "/" if split_uri(base)[2] else base)
        if not listed:
            raise UsageError(f"data.uri {shown}: no such object or prefix")
    hits = [o for o in listed if data_name(o.uri) and o.size > 0]
    if not hits:
        raise UsageError(f"data.uri {shown}: a folder with no data files ({len(listed)} other file(s): names "
                         f"starting with . or _, or suffixes such as .txt/.json, are not read as TFRecords)")
    return hits


def read_head(backend, info: ObjectInfo, nbytes: int) -> bytes:
    """The first `nbytes` of a file (all of it when smaller), uncounted in the backend's metrics."""
    n = min(int(nbytes), int(info.size))
    if n <= 0:
        return b""
    if backend.name == "local":
        with open(info.uri, "rb") as f:
            return f.read(n)
    return backend.call(info.uri, lambda: backend._read_range(info.uri, 0, n))  # noqa: SLF001 — uncounted read


def records_in(data: bytes, shown: str, gzip: bool, complete: bool, on_corrupt=None) -> list[bytes]:
    """The whole records in `data` (a file's first bytes, or all of them when `complete`)."""
    from tfbertperf.storage.tfrecord import gunzip_chunks, iter_record_batches

    if gzip:
        parts = []
        try:
            for block in gunzip_chunks([data], shown):
                parts.append(block)
        except UsageError as e:
            if complete or "truncated GZIP" not in str(e):
                raise
        data = b"".join(parts)
    out: list[bytes] = []
    batches = iter_record_batches([data], shown, on_corrupt)
    if complete:
        for b in batches:
            out.extend(b)
    else:
        out.extend(next(batches, []))  # the first chunk's whole records; its tail is cut, not damaged
    return out


def file_kind(head: bytes) -> str | None:
    """head_kind, looking inside a GZIP member for the frame header it must start with."""
    from tfbertperf.storage.tfrecord import head_kind

    kind = head_kind(head)
    if kind == "gzip":
        import zlib

        try:
            inner = zlib.decompressobj(wbits=31).decompress(head)
        except zlib.error:
            return None
        return "gzip" if head_kind(inner[:12]) == "tfrecord" and (len(inner) >= 12 or not inner) else None
    return kind


def human_bytes(n: int) -> str:
    """A size for people: 92.3 kB, 1.3 MB, 2.0 GB (powers of 1000)."""
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} bytes"
