"""Parsing `.xplane.pb` files (XSpace protobufs), once: every reader in profile/ gets the parsed space from here.

HTA keeps trace parsing in one place and hands every analyzer the same parsed `Trace`; this module is that
place for us.  `read_space(path)` parses a file into an XSpace message and keeps the last few in memory (keyed on
path, mtime and size), so the device summary (devices.py), the host/device trace (trace.py) and its analyzers
never parse a file twice.  xprof's own converters read the files themselves (they are xprof's code, not ours).

The protobuf classes are TensorFlow's generated ones (xspace_proto.py, re-exported here with read_space and
stat_value); the columnar reading below decodes the wire format itself (xspace_wire.py, xspace_events.py).
"""

from __future__ import annotations

import array
import gzip
import mmap
import os
import re
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfbertperf.errors import UsageError
from tfbertperf.profile.xspace_events import _decode_events, _release
from tfbertperf.profile.xspace_proto import hlo_pb2, read_space, stat_value, xplane_pb2  # noqa: F401 — re-exported
from tfbertperf.profile.xspace_wire import MISSING, CorruptXSpace, _field_at, _fields, _nvarint, _Strings, _varint

# ---- the columnar reading (issue 32) ---------------------------------------------------------------------------
# A capture of hundreds of MB holds millions of events; one Python (or upb) object per event costs ~20 bytes of
# memory per byte of file and most of the analysis time.  Perfetto's trace processor and HTA keep a trace as
# columns instead: here each kept line becomes numpy arrays (start, duration, metadata id, the few stats the
# rules read), strings interned once per plane.  The file is mapped, not read; XSpace's wire format is walked
# plane by plane and line by line (one small Python step per event to find where it lies), the events' fields
# are decoded for all events of a chunk at once with numpy, and what no rule reads is skipped unread.


HOST_STATS = {"step_num": "int", "_r": "int", "autotune": "str", "autotune_mode": "str", "buffer_limit": "int"}
"""Host-plane stats the rules read: a step marker is an event with step_num and _r = 1 (trace.py); a tf.data
prefetch's iterator events carry autotune, autotune_mode and buffer_limit (columns.HostThread.prefetch)."""
DEVICE_STATS = {"hlo_module": "str", "memcpy_details": "str", "program_id": "int"}
"""Device-plane stats the rules read: the XLA program a kernel belongs to (name, id) and a copy's details."""

_DEVICE_PLANE_RE = re.compile(r"^/device:([A-Za-z_]+):(\d+)$")
_CHUNK_EVENTS = 1 << 18  # events decoded at once: bounds the temporary arrays (~50 MB) whatever the file's size


@dataclass
class Columns:
    """One line's events as arrays, in file order.  start and dur in picoseconds (start on the profile clock:
    line.timestamp_ns * 1000 + offset_ps); meta: the event's metadata id; stats: wanted stat name → int64 array
    (numeric stats: MISSING where absent; string stats: an index into the plane's `strings`, -1 where absent)."""
    id: int
    name: str
    display_name: str
    start: np.ndarray
    dur: np.ndarray
    meta: np.ndarray
    stats: dict

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class PlaneColumns:
    """One XPlane: its name, id, metadata (event metadata id → name; stat metadata id → name), its own stats
    (name → value), the kept lines as Columns, `strings` (the interned string stat values), and for the
    `/host:metadata` plane the serialized HLO protos (program name → bytes; program id → (name, bytes))."""
    id: int
    name: str
    event_names: dict
    stat_names: dict
    stats: dict
    lines: list
    strings: list
    hlo_protos: dict = field(default_factory=dict)
    hlo_by_id: dict = field(default_factory=dict)
    meta_programs: dict = field(default_factory=dict)  # device planes: event metadata id → (hlo_module, id)

    def name_table(self, ids: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """(codes, names): the events' metadata ids as indices into `names` (unknown ids → "", as a missing
        metadata entry reads)."""
        keys = np.array(sorted(self.event_names), dtype=np.int64)
        names = [self.event_names[k] for k in keys.tolist()] + [""]
        if not len(keys):
            return np.zeros(len(ids), dtype=np.int32), names
        pos = np.searchsorted(keys, ids).clip(0, len(keys) - 1)
        return np.where(keys[pos] == ids, pos, len(keys)).astype(np.int32), names


def _line(mm, a: np.ndarray, p: int, end: int, keep_line, wanted: dict, strings: _Strings,
          drop_aggregated: bool) -> Columns | None:
    """One XLine → Columns, or None when keep_line(name) says no rule reads it (its events are not walked)."""
    lid = ts = 0
    name = display = ""
    tags = array.array("q")  # where each event's field starts; the rest is found for all of them at once
    push = tags.append
    while p < end:
        if mm[p] == 0x22:  # an event: the one step per event done in Python (the hot loop)
            push(p)
            b = mm[p + 1]
            if b < 0x80:
                p += 2 + b
            else:
                n, q = _varint(mm, p + 1)
                p = q + n
            continue
        num, wt, value, p = _field_at(mm, p, end)
        if num == 1 and wt == 0:
            lid = value
        elif num == 3 and wt == 0:
            ts = value
        elif num in (2, 11) and wt == 2:
            try:
                text = mm[value[0]:value[1]].decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptXSpace("a line name is not valid UTF-8") from None
            if num == 2:
                name = text
                if not keep_line(name):
                    return None
            else:
                display = text
    if p != end:
        raise CorruptXSpace(f"an event runs past its line at byte {p}")
    if not keep_line(name):
        return None
    ev_t = np.frombuffer(tags, dtype=np.int64)
    ln, ev_s = _nvarint(a, ev_t + 1, np.full(len(ev_t), end, dtype=np.int64))
    ev_e = ev_s + ln
    lid, ts = (v - (1 << 64) if v >= 1 << 63 else v for v in (lid, ts))  # int64 fields: two's complement
    base = ts * 1000
    words = np.ndarray((max(0, len(a) - 7),), dtype="<u8", buffer=a, strides=(1,))
    parts = []
    for i in range(0, len(ev_s), _CHUNK_EVENTS):
        parts.append(_decode_events(a, words, mm, ev_s[i:i + _CHUNK_EVENTS], ev_e[i:i + _CHUNK_EVENTS], base, wanted,
                                    strings, drop_aggregated))
        _release(mm, int(ev_s[i]), int(ev_e[min(i + _CHUNK_EVENTS, len(ev_e)) - 1]))
    if parts:
        start, dur, meta = (np.concatenate([x[k] for x in parts]) for k in range(3))
        stats = {k: np.concatenate([x[3].get(k, np.full(len(x[0]), MISSING if wanted[k] == "int" else -1,
                                                             dtype=np.int64)) for x in parts])
                 for k in {k for x in parts for k in x[3]}}
    else:
        start = dur = meta = np.zeros(0, dtype=np.int64)
        stats = {}
    return Columns(lid, name, display, start, dur, meta, stats)


def _plane_kind(name: str) -> str:
    """"host" (a /host:CPU plane: every line is a thread), "device" (an accelerator), or "other"."""
    if name.startswith("/host:CPU"):
        return "host"
    m = _DEVICE_PLANE_RE.match(name)
    return "device" if m and m.group(1).upper() != "CPU" else "other"


def _plane(mm, a: np.ndarray, p: int, end: int) -> PlaneColumns:
    """One XPlane's bytes → PlaneColumns.  Everything but the lines (names, metadata, plane stats: small) is
    parsed by protobuf; the lines are walked here, and only those a rule reads are decoded."""
    pb = xplane_pb2()
    lines, rest = [], []  # the lines' payloads; the plane's other fields as written, for protobuf to parse
    q = p
    while q < end:
        num, wt, value, nxt = _field_at(mm, q, end)
        if num == 3 and wt == 2:
            lines.append(value)
        else:
            rest.append(mm[q:nxt])
        q = nxt
    head = pb.XPlane()
    try:
        head.ParseFromString(b"".join(rest))
    except Exception as e:  # noqa: BLE001 — protobuf's DecodeError, or a bad UTF-8 string (ValueError)
        raise CorruptXSpace(" ".join(str(e).split()).split(": ")[-1] or type(e).__name__) from None
    stat_names = {k: m.name for k, m in head.stat_metadata.items()}
    event_names = {k: m.name for k, m in head.event_metadata.items()}
    strings = _Strings(stat_names)
    stats = {}
    for st in head.stats:
        kind = st.WhichOneof("value")
        stats[stat_names.get(st.metadata_id, "")] = (stat_names.get(st.ref_value, "") if kind == "ref_value" else
                                                     getattr(st, kind) if kind else None)
    kind = _plane_kind(head.name)
    if kind == "host":
        keep, wanted, drop = (lambda n: True), HOST_STATS, False
    elif kind == "device":
        # the lines devices.py counts (Stream lines, else XLA Ops) and the Steps line; derived lines skipped
        names = [_line_name(mm, s, e) for s, e in lines]
        counted = "Stream" if any(n.startswith("Stream") for n in names) else "XLA Ops"
        keep = (lambda n: n == "Steps" or (n.startswith("Stream") if counted == "Stream" else n == "XLA Ops"))
        wanted, drop = DEVICE_STATS, True
    else:
        keep, wanted, drop = (lambda n: False), {}, False
    cols = [c for s, e in lines if (c := _line(mm, a, s, e, keep, wanted, strings, drop)) is not None]
    hlo, hlo_ids = {}, {}
    if head.name == "/host:metadata":
        for meta in head.event_metadata.values():
            st = {stat_names.get(s.metadata_id): s for s in meta.stats}
            if "Hlo Proto" not in st:
                continue
            name = re.sub(r"\(\d+\)$", "", meta.name)
            hlo[name] = st["Hlo Proto"].bytes_value
            # the program id: its `program_id` stat, else the name's "(id)" (program_facts.programs_ran)
            pid = stat_value(st["program_id"], stat_names) if "program_id" in st else None
            m = re.search(r"\((\d+)\)$", meta.name)
            pid = pid if pid is not None else (int(m.group(1)) if m else None)
            if pid is not None:
                hlo_ids[int(pid)] = (name, st["Hlo Proto"].bytes_value)
    meta_programs = {}  # TPU: an op's metadata, not the event, carries its program (program_facts.programs_ran)
    if kind == "device":
        for k, meta in head.event_metadata.items():
            st = {stat_names.get(x.metadata_id): stat_value(x, stat_names) for x in meta.stats}
            if st.get("hlo_module"):
                pid = st.get("program_id")
                meta_programs[k] = (str(st["hlo_module"]), None if pid is None else int(pid))
    return PlaneColumns(head.id, head.name, event_names, stat_names, stats, cols, strings.values, hlo, hlo_ids,
                        meta_programs)


def _line_name(mm, p: int, end: int) -> str:
    """An XLine's (or XPlane's) name, field 2, without walking its events or lines (written after it)."""
    for num, wt, value in _fields(mm, p, end):
        if num == 2 and wt == 2:
            return bytes(mm[value[0]:value[1]]).decode("utf-8", errors="replace")
        if num in (3, 4) and wt == 2:  # an XPlane's lines, an XLine's events
            break
    return ""


@dataclass
class SpaceColumns:
    """A capture file read into columns: its hostnames, errors, and planes (PlaneColumns)."""
    path: Path
    hostnames: list
    errors: list
    planes: list

    @property
    def host(self) -> str:
        return self.hostnames[0] if self.hostnames else self.path.name.removesuffix(".gz").removesuffix(".xplane.pb")


def _mapped(path: Path):
    """(mmap, the file object to close) of the capture; a gzipped one is inflated into a temporary file first."""
    f = open(path, "rb")
    if path.suffix == ".gz":
        tmp = tempfile.TemporaryFile()
        with f, gzip.open(f) as z:
            shutil.copyfileobj(z, tmp, 1 << 22)
        f = tmp
    if os.fstat(f.fileno()).st_size == 0:
        return None, f
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), f


def read_columns(path, progress=None) -> SpaceColumns:
    """The capture at `path` (`.xplane.pb`, or `.xplane.pb.gz`) as SpaceColumns: every /host:CPU line (threads)
    and each accelerator plane's counted lines and Steps line as arrays, other planes' metadata only.  Planes are
    read one at a time from the mapped file; `progress(plane_name, plane_number, planes, plane_bytes)` is called
    before each.
    Raises UsageError (one line naming the file) for a missing, unreadable or damaged file."""
    p = Path(path)
    try:
        mm, f = _mapped(p)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise UsageError(f"{p}: cannot read profile ({getattr(e, 'strerror', None) or e})") from None
    hostnames, errors, planes = [], [], []
    try:
        if mm is not None:  # an empty file has no planes: said below
            a = np.frombuffer(mm, dtype=np.uint8)
            try:
                top = [(num, value) for num, wt, value in _fields(mm, 0, len(mm)) if wt == 2]  # a few fields
                count = sum(1 for num, _ in top if num == 1)
                for num, value in top:
                    if num == 1:
                        if progress:  # before the plane: a large one takes a while
                            progress(_line_name(mm, *value), len(planes) + 1, count, value[1] - value[0])
                        planes.append(_plane(mm, a, *value))
                    elif num in (2, 4):
                        text = mm[value[0]:value[1]].decode("utf-8")
                        (errors if num == 2 else hostnames).append(text)
            except (CorruptXSpace, UnicodeDecodeError, IndexError) as e:
                raise UsageError(f"{p}: corrupt, not a readable XSpace profile ({e}); the file is damaged or not "
                                 f"an .xplane.pb") from None
            finally:
                del a
    finally:
        if mm is not None:
            try:
                mm.close()
            except BufferError:  # an array still views the map: it is released when that array goes
                pass
        f.close()
    if not planes:
        said = f"; the profiler reported: {' '.join(errors[0].split())}" if errors else ""
        raise UsageError(f"{p}: no profiler planes in this file (empty, corrupt or not an .xplane.pb){said}")
    if any("\ufffd" in pl.name for pl in planes):
        raise UsageError(f"{p}: corrupt, not a readable XSpace profile (U+FFFD in plane names); the file is "
                         f"damaged")
    return SpaceColumns(p, hostnames, errors, planes)
