"""Parsing `.xplane.pb` files (XSpace protobufs), once: every reader in profile/ gets the parsed space from here.

HTA keeps trace parsing in one place and hands every analyzer the same parsed `Trace`; this module is that
place for us.  `read_space(path)` parses a file into an XSpace message and keeps the last few in memory (keyed on
path, mtime and size), so the device summary (devices.py), the host/device trace (trace.py) and its analyzers
never parse a file twice.  xprof's own converters read the files themselves (they are xprof's code, not ours).

The protobuf classes are TensorFlow's generated ones (`tensorflow/tsl/profiler/protobuf/xplane_pb2.py`, and
for the HLO modules a capture carries in its `/host:metadata` plane `tensorflow/compiler/xla/service/hlo_pb2.py`);
xprof 2.24 ships no Python copy of its own.
"""

from __future__ import annotations

import array
import functools
import gzip
import importlib
import importlib.util
import mmap
import os
import re
import shutil
import sys
import tempfile
import types
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfbertperf.errors import UsageError

_TF_IMPORT_RE = re.compile(r"^from tensorflow\.([\w.]+) import (\w+) as (\w+)$", re.M)


def _tf_root() -> str | None:
    spec = importlib.util.find_spec("tensorflow")  # locates the package without importing it
    for root in (spec.submodule_search_locations or []) if spec else []:
        return root
    return None


@functools.cache
def _generated(relpath: str) -> types.ModuleType | None:
    """Execute one of TensorFlow's generated `*_pb2.py` files (path relative to the tensorflow package) without
    importing TensorFlow: `import tensorflow…` would load all of it (~6 s, native libraries), while the
    generated files need only google.protobuf and each other.  Their `from tensorflow.x import y_pb2 as z`
    lines are satisfied by executing those files the same way first.  The default descriptor pool accepts the
    identical file twice, so a later real `import tensorflow` hands back the same message classes."""
    root = _tf_root()
    path = os.path.join(root, relpath) if root else ""
    if not path or not os.path.exists(path):
        return None
    source = Path(path).read_text()
    module = types.ModuleType("_tfbertperf_" + relpath.replace("/", "_").removesuffix(".py"))
    for pkg, name, alias in _TF_IMPORT_RE.findall(source):
        dep = _generated(os.path.join(*pkg.split("."), name + ".py"))
        if dep is None:
            return None
        setattr(module, alias, dep)
    try:
        exec(compile(_TF_IMPORT_RE.sub("", source), path, "exec"), module.__dict__)
    except Exception:  # e.g. a protobuf runtime too old for this gencode: the import fallback says why
        return None
    return module


def _proto_module(relpath: str, *names: str):
    if "tensorflow" not in sys.modules:
        module = _generated(relpath)
        if module is not None:
            return module
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


@functools.cache
def xplane_pb2():
    """TensorFlow's generated xplane_pb2 module; UsageError when neither TensorFlow nor tsl is installed."""
    module = _proto_module(os.path.join("tsl", "profiler", "protobuf", "xplane_pb2.py"),
                           "tensorflow.tsl.profiler.protobuf.xplane_pb2", "tsl.profiler.protobuf.xplane_pb2")
    if module is None:
        raise UsageError("cannot read .xplane.pb files: TensorFlow's xplane_pb2 protobuf module is not installed")
    return module


@functools.cache
def hlo_pb2():
    """XLA's generated hlo_pb2 module (HloProto), or None when it is not installed (no precision from HLO then)."""
    return _proto_module(os.path.join("compiler", "xla", "service", "hlo_pb2.py"),
                         "tensorflow.compiler.xla.service.hlo_pb2", "xla.service.hlo_pb2")


def _parse(path: Path):
    """Parse one file into an XSpace; a file that is not one raises UsageError (one line, names the file)."""
    from google.protobuf.message import DecodeError

    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot read profile ({e.strerror or e})") from None
    space = xplane_pb2().XSpace()
    try:
        # proto3 string fields are UTF-8 checked while parsing, so text mangled in transit ("…" bytes
        # replaced by EF BF BD) fails here too: either the lengths no longer add up or a string is invalid.
        space.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        reason = " ".join(str(e).split()).split(": ")[-1] or type(e).__name__
        raise UsageError(f"{path}: corrupt, not a readable XSpace profile ({reason}); the file is damaged or not "
                         f"an .xplane.pb") from None
    # Random bytes can parse as unknown fields; a real capture always has at least one plane, and U+FFFD in a
    # plane name only appears after a text-mode UTF-8 round trip.
    if not space.planes:
        said = f"; the profiler reported: {' '.join(space.errors[0].split())}" if space.errors else ""
        raise UsageError(f"{path}: no profiler planes in this file (empty, corrupt or not an .xplane.pb){said}")
    if any("\ufffd" in p.name for p in space.planes):
        raise UsageError(f"{path}: corrupt, not a readable XSpace profile (U+FFFD in plane names); the file is "
                         f"damaged")
    return space


@functools.lru_cache(maxsize=4)
def _cached(path: str, _mtime_ns: int, _size: int):
    return _parse(Path(path))


def read_space(path) -> object:
    """The parsed XSpace of one `.xplane.pb` file (cached on path + mtime + size: parsed once per analysis).
    Raises UsageError (one line naming the file) for a missing, unreadable or damaged file."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise UsageError(f"{p}: cannot read profile ({e.strerror or e})") from None
    return _cached(str(p), st.st_mtime_ns, st.st_size)


def stat_value(stat, names: dict[int, str]):
    """One XStat's value: its number or string; a reference to a stat-metadata string (`ref_value`) is resolved
    to that string through `names` (plane.stat_metadata id → name)."""
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    return getattr(stat, kind) if kind else None


# ---- the columnar reading (issue 32) ---------------------------------------------------------------------------
# A capture of hundreds of MB holds millions of events; one Python (or upb) object per event costs ~20 bytes of
# memory per byte of file and most of the analysis time.  Perfetto's trace processor and HTA keep a trace as
# columns instead: here each kept line becomes numpy arrays (start, duration, metadata id, the few stats the
# rules read), strings interned once per plane.  The file is mapped, not read; XSpace's wire format is walked
# plane by plane and line by line (one small Python step per event to find where it lies), the events' fields
# are decoded for all events of a chunk at once with numpy, and what no rule reads is skipped unread.

MISSING = np.iinfo(np.int64).min
"""The value of a numeric stat an event does not carry."""

HOST_STATS = {"step_num": "int", "_r": "int"}
"""Host-plane stats the rules read: a step marker is an event with step_num and _r = 1 (trace.py)."""
DEVICE_STATS = {"hlo_module": "str", "memcpy_details": "str", "program_id": "int"}
"""Device-plane stats the rules read: the XLA program a kernel belongs to (name, id) and a copy's details."""

_DEVICE_PLANE_RE = re.compile(r"^/device:([A-Za-z_]+):(\d+)$")
_CHUNK_EVENTS = 1 << 18  # events decoded at once: bounds the temporary arrays (~50 MB) whatever the file's size


class CorruptXSpace(Exception):
    """The bytes are not a well-formed XSpace (the reason is the message)."""


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


def _varint(buf, p: int) -> tuple[int, int]:
    """(value, position after it) of one varint at buf[p]."""
    value = shift = 0
    while True:
        try:
            b = buf[p]
        except IndexError:
            raise CorruptXSpace(f"truncated varint at byte {p}") from None
        value |= (b & 0x7F) << shift
        p += 1
        if b < 0x80:
            return value, p
        shift += 7
        if shift > 63:
            raise CorruptXSpace(f"varint too long at byte {p}")


def _field_at(buf, p: int, end: int) -> tuple[int, int, object, int]:
    """(field number, wire type, value — a number, (start, end) of a length-delimited payload, or None for a
    fixed-size one —, position after it) of the one field at buf[p], inside a message ending at `end`."""
    tag, p = _varint(buf, p)
    num, wt = tag >> 3, tag & 7
    if wt == 0:
        value, p = _varint(buf, p)
    elif wt == 2:
        n, p = _varint(buf, p)
        value = (p, p + n)
        p += n
    elif wt == 1:
        value, p = None, p + 8
    elif wt == 5:
        value, p = None, p + 4
    else:
        raise CorruptXSpace(f"wire type {wt} at byte {p}")
    if p > end or num == 0:
        raise CorruptXSpace(f"field {num} runs past its message at byte {p}")
    return num, wt, value, p


def _fields(buf, p: int, end: int):
    """(field number, wire type, value) of each field of the message buf[p:end] (_field_at)."""
    while p < end:
        num, wt, value, p = _field_at(buf, p, end)
        yield num, wt, value


def _nvarint(a: np.ndarray, p: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized varints: (values as int64 — two's complement, as protobuf writes negative int64s — and the
    positions after them) of the varints at positions p of the byte array a; a varint that runs to `limit` (its
    message's end) or past 10 bytes is corrupt."""
    if np.any(p >= limit):
        raise CorruptXSpace("field runs past its message")
    b = a[p]
    more = np.flatnonzero(b >= 0x80)
    value = b.astype(np.int64)
    q = p + 1
    if not more.size:  # the common case: one-byte values (tags, small ids, short lengths)
        return value, q
    value &= 0x7F
    shift = 7
    while more.size:
        if shift > 63 or np.any(q[more] >= limit[more]):
            raise CorruptXSpace("truncated varint")
        b = a[q[more]]
        value[more] |= (b & 0x7F).astype(np.int64) << shift
        q[more] += 1
        more = more[b >= 0x80]
        shift += 7
    return value, q


_HIGH_BITS = np.uint64(0x8080808080808080)
_GROUP_MASKS = [np.uint64(0x7F << (7 * k)) for k in range(8)]


def _nvarint_wide(a: np.ndarray, words: np.ndarray, p: np.ndarray, limit: np.ndarray):
    """_nvarint for fields of several bytes (times in picoseconds: 5-7 bytes): eight bytes read at once per
    varint (`words`: the map viewed as unaligned little-endian uint64 at every byte offset) and the 7-bit groups
    gathered with shifts, instead of one pass per byte.  Varints near the map's end or longer than 8 bytes go to
    _nvarint."""
    slow = p >= len(words)
    w = words[np.where(slow, 0, p)]
    term = ~w & _HIGH_BITS  # bit 7 of every byte that ends a varint
    slow |= term == 0
    low = term & (~term + np.uint64(1))  # the first ending byte's bit 7
    x = w & ((low << np.uint64(1)) - np.uint64(1))  # the bytes up to it (all 8 when it is the last)
    value = np.zeros(len(p), dtype=np.uint64)
    for k, m in enumerate(_GROUP_MASKS):
        value |= (x >> np.uint64(k)) & m
    nbytes = (np.log2(low.astype(np.float64) + 1.0).astype(np.int64) + 1) // 8  # low = 2^(8k+7) → k + 1 bytes
    q = p + nbytes
    value = value.view(np.int64)
    if slow.any():
        i = np.flatnonzero(slow)
        value[i], q[i] = _nvarint(a, p[i], limit[i])
    if np.any(q > limit):
        raise CorruptXSpace("truncated varint")
    return value, q


def _decode_messages(a: np.ndarray, start: np.ndarray, end: np.ndarray, varints: tuple, nested: int | None):
    """Decode many small messages at once.  Returns ({field: (indices, uint64 values)} for the varint fields in
    `varints`, (indices, payload starts, payload ends) of the length-delimited field `nested`, {field: (indices,
    payload starts, ends)} of the other length-delimited fields, {field: (indices, positions)} of fixed64 fields).
    Fields repeat in any order; the last of a repeated scalar wins, as in protobuf."""
    out = {f: ([], []) for f in varints}
    sub_i, sub_s, sub_e = [], [], []
    lens: dict = {}
    fixed: dict = {}
    idx = np.flatnonzero(start < end)
    pos = start.copy()
    while idx.size:
        p, lim = pos[idx], end[idx]
        tag, p = _nvarint(a, p, lim)
        num, wt = tag >> 3, tag & 7
        if np.any((num == 0) | (wt == 3) | (wt == 4) | (wt > 5)):
            raise CorruptXSpace("bad field tag")
        m = wt == 0
        if m.any():
            v, q = _nvarint(a, p[m], lim[m])
            p[m] = q
            for f in varints:
                k = num[m] == f
                if k.any():
                    out[f][0].append(idx[m][k])
                    out[f][1].append(v[k])
        m = wt == 2
        if m.any():
            n, q = _nvarint(a, p[m], lim[m])
            qe = q + n
            p[m] = qe
            for f in np.unique(num[m]).tolist():
                k = num[m] == f
                dest = (sub_i, sub_s, sub_e) if f == nested else lens.setdefault(f, ([], [], []))
                dest[0].append(idx[m][k])
                dest[1].append(q[k])
                dest[2].append(qe[k])
        for w, width in ((1, 8), (5, 4)):
            m = wt == w
            if m.any():
                fixed.setdefault(w, ([], [], []))
                fixed[w][0].append(idx[m])
                fixed[w][1].append(p[m])
                fixed[w][2].append(num[m])
                p[m] += width
        if np.any(p > lim):
            raise CorruptXSpace("field runs past its message")
        pos[idx] = p
        idx = idx[p < lim]

    def cat(parts, dtype=np.int64):
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    varint_out = {f: (cat(i), cat(v)) for f, (i, v) in out.items()}
    sub = (cat(sub_i), cat(sub_s), cat(sub_e))
    lens_out = {f: tuple(cat(x) for x in v) for f, v in lens.items()}
    fixed_out = {w: tuple(cat(x) for x in v) for w, v in fixed.items()}
    return varint_out, sub, lens_out, fixed_out


def _last(n: int, idx: np.ndarray, values: np.ndarray, fill, dtype) -> np.ndarray:
    col = np.full(n, fill, dtype=dtype)
    col[idx] = values  # a repeated field: numpy assigns in order, so the last one wins, as protobuf's parser does
    return col


class _Strings:
    """A plane's interned string stat values: ref_value → the stat metadata's name, str_value → the text."""

    def __init__(self, stat_names: dict):
        self.values: list[str] = []
        self.codes: dict[str, int] = {}
        self.stat_names = stat_names

    def code(self, text: str) -> int:
        c = self.codes.get(text)
        if c is None:
            c = self.codes[text] = len(self.values)
            self.values.append(text)
        return c


def _canonical_events(a: np.ndarray, words: np.ndarray, s: np.ndarray, e: np.ndarray, wanted_ids: np.ndarray):
    """The fast path: events written in field-number order (what every protobuf serializer does) —
    [1 metadata_id] [2 offset_ps] [3 duration_ps] [4 stats]* [5 num_occurrences].  Returns (meta, offset, dur,
    aggregated, (stat event indices, payload starts, payload ends), ok) where ok marks the events this order
    read to their end; the others go to the general decoder.  wanted_ids: bool per one-byte stat metadata id
    (0–127), True for the ids a rule reads: other stats are not returned."""
    n, top = len(s), len(a) - 1
    pos = s.copy()
    cols = [np.zeros(n, dtype=np.int64) for _ in range(3)]
    for tag, col in zip((0x08, 0x10, 0x18), cols):
        m = np.flatnonzero((pos < e) & (a[np.minimum(pos, top)] == tag))
        if m.size:
            v, q = (_nvarint if tag == 0x08 else
                    lambda a, p, lim: _nvarint_wide(a, words, p, lim))(a, pos[m] + 1, e[m])
            col[m] = v
            pos[m] = q
    si, ss, se = [], [], []
    m = np.flatnonzero((pos < e) & (a[np.minimum(pos, top)] == 0x22))
    cur, em = pos[m], e[m]  # the active events' positions and ends, compressed along with m
    while m.size:
        q = cur + 1
        ln = a[q]
        if ln.max() < 0x80:  # one-byte lengths (stats under 128 bytes: nearly all of them) need no varint pass
            q = q + 1
            end = q + ln
        else:
            ln, q = _nvarint(a, q, em)
            end = q + ln
        if np.any(end > em):
            raise CorruptXSpace("a stat runs past its event")
        # keep only the stats a rule may read: a payload that starts with a one-byte metadata id (0x08, id) not
        # wanted is skipped here; anything else is kept for the exact decode
        b1 = a[np.minimum(q + 1, top)]
        keep = (end > q) & ((a[q] != 0x08) | (b1 >= 0x80) | wanted_ids[b1 & 0x7F])
        si.append(m[keep])
        ss.append(q[keep])
        se.append(end[keep])
        more = end < em
        more[more] = a[end[more]] == 0x22
        done = ~more
        pos[m[done]] = end[done]
        m, cur, em = m[more], end[more], em[more]
    aggregated = np.zeros(n, dtype=bool)
    m = np.flatnonzero((pos < e) & (a[np.minimum(pos, top)] == 0x28))
    if m.size:
        _, pos[m] = _nvarint(a, pos[m] + 1, e[m])
        aggregated[m] = True
    cat = (lambda x: np.concatenate(x) if x else np.zeros(0, dtype=np.int64))
    return (*cols, aggregated, (cat(si), cat(ss), cat(se)), pos == e)


def _general_events(a: np.ndarray, s: np.ndarray, e: np.ndarray):
    """Any field order (the slow path, for events the fast path could not read); same results."""
    n = len(s)
    var, stats, _, _ = _decode_messages(a, s, e, (1, 2, 3, 5), nested=4)
    order = np.full(n, -1, dtype=np.int64)  # XEvent's `data` oneof: the later of offset_ps / num_occurrences wins
    order[var[2][0]] = 2
    order[var[5][0]] = 5
    return (_last(n, *var[1], 0, np.int64), _last(n, *var[2], 0, np.int64), _last(n, *var[3], 0, np.int64),
            order == 5, stats)


def _decode_events(a: np.ndarray, words: np.ndarray, mm, ev_s: np.ndarray, ev_e: np.ndarray, base_ps: int,
                   wanted: dict, strings: _Strings, drop_aggregated: bool):
    """One chunk of a line's events (payload starts/ends) → (start, dur, meta, stats) arrays."""
    n = len(ev_s)
    ids = {mid: name for mid, name in strings.stat_names.items() if name in wanted}
    table = np.zeros(128, dtype=bool)
    table[[i for i in ids if 0 <= i < 128]] = True
    meta, offset, dur, aggregated, (si, ss, se), ok = _canonical_events(a, words, ev_s, ev_e, table)
    if not ok.all():
        bad = np.flatnonzero(~ok)
        keep_stats = ~np.isin(si, bad)
        si, ss, se = si[keep_stats], ss[keep_stats], se[keep_stats]
        m2, o2, d2, g2, (i2, s2, e2) = _general_events(a, ev_s[bad], ev_e[bad])
        meta[bad], offset[bad], dur[bad], aggregated[bad] = m2, o2, d2, g2
        si, ss, se = np.concatenate([si, bad[i2]]), np.concatenate([ss, s2]), np.concatenate([se, e2])
    keep = ~aggregated if drop_aggregated and aggregated.any() else None
    stats = {}
    if ids and len(si):
        # only the stats a rule reads are decoded: their metadata id is the payload's first field (0x08) in
        # every serializer; a stat that starts otherwise is decoded in full
        top = len(a) - 1
        first = (ss < se) & (a[np.minimum(ss, top)] == 0x08)
        m = np.flatnonzero(first)
        sid = np.full(len(si), -1, dtype=np.int64)
        if m.size:
            sid[m] = _nvarint(a, ss[m] + 1, se[m])[0]
        sel = ~first | np.isin(sid, np.array(sorted(ids), dtype=np.int64))
        si, ss, se = si[sel], ss[sel], se[sel]
        sv, _, slen, sfixed = _decode_messages(a, ss, se, (1, 3, 4, 7), nested=None)
        m = len(si)
        mid = _last(m, *sv[1], 0, np.int64)
        want_ids = np.array(sorted(ids), dtype=np.int64)
        hit = np.isin(mid, want_ids)
        for stat_id, name in ids.items():
            rows = hit & (mid == stat_id)
            if not rows.any():
                continue
            kind = wanted[name]
            col = np.full(n, MISSING if kind == "int" else -1, dtype=np.int64)
            for f in (3, 4, 7):  # uint64, int64, ref — numbers, or (ref) a stat metadata name
                j, v = sv[f]
                sel = rows[j]
                if not sel.any():
                    continue
                ev, v = si[j[sel]], v[sel]
                if kind == "int" and f != 7:
                    col[ev] = v
                elif kind == "str":  # interned once per distinct value, not once per event
                    u, inv = np.unique(v, return_inverse=True)
                    codes = [strings.code(strings.stat_names.get(x, "") if f == 7 else
                                          str(x if f == 4 or x >= 0 else x + (1 << 64))) for x in u.tolist()]
                    col[ev] = np.array(codes, dtype=np.int64)[inv]
            if 1 in sfixed:  # double_value
                j, pos, num = sfixed[1]
                sel = rows[j] & (num == 2)
                if sel.any():
                    vals = np.frombuffer(b"".join(mm[q:q + 8] for q in pos[sel].tolist()), dtype="<f8")
                    col[si[j[sel]]] = (vals.astype(np.int64) if kind == "int" else
                                       [strings.code(repr(x)) for x in vals.tolist()])
            if 5 in slen and kind == "str":  # str_value: decoded one by one (rare: TF's memcpy_details)
                j, s0, s1 = slen[5]
                sel = rows[j]
                if sel.any():
                    try:
                        col[si[j[sel]]] = [strings.code(mm[x:y].decode("utf-8"))
                                           for x, y in zip(s0[sel].tolist(), s1[sel].tolist())]
                    except UnicodeDecodeError:
                        raise CorruptXSpace("a string stat is not valid UTF-8") from None
            stats[name] = col
    start = offset + base_ps
    if keep is not None:
        start, dur, meta = start[keep], dur[keep], meta[keep]
        stats = {k: v[keep] for k, v in stats.items()}
    return start, dur, meta, stats


def _release(mm, start: int, end: int) -> None:
    """Let the kernel drop the mapped file's pages of bytes already decoded: the capture's bytes are read once,
    so a 1 GB file need not stay resident (they would only count as this process's memory; the file is
    unchanged, and a page read again is read from it again)."""
    page = mmap.PAGESIZE
    lo = (start // page) * page
    if end > lo and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        try:
            mm.madvise(mmap.MADV_DONTNEED, lo, end - lo)
        except (OSError, ValueError):  # advice only
            pass


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
