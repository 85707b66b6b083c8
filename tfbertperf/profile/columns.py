"""One capture file, read once into what the rules read: its host threads and its accelerator planes, as
columns (profile/xspace.py read_columns does the reading).  devices.py summarises the device planes from here,
trace.py builds the `Trace` the analyzers share from here; neither opens a file.

Definitions (times in picoseconds on the profile clock):
  - host thread (HostThread): one line of a `/host:CPU` plane; its events sorted by (start, −end), each with its
    name (an index into the plane's `names`) and step_num: the event's `step_num` stat when it also has `_r` = 1
    (a step marker: TF's `Trace(name, step_num=i, _r=1)`, JAX's `StepTraceAnnotation`), else MISSING.
  - device plane (DevicePlane): a `/device:<KIND>:<N>` plane (not CPU) — its counted lines' events (devices.py
    defines counted lines, copies and busy time) split into kernels and copies, their merged intervals, its
    `Steps` line, and what its stats say about the chip.
A file is read one at a time, and its raw columns are dropped once this digest is made; the digest is cached on
path, mtime and size, so every reader of one analysis shares it.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfbertperf.profile import intervals as iv
from tfbertperf.profile import kernel_programs, prefetch_stats
from tfbertperf.profile.intervals import parents
from tfbertperf.profile.xspace import MISSING, read_columns

PROGRESS_FROM_BYTES = 100_000_000
"""Captures from this size up say on stderr what is being read (file, MB, planes)."""

_DEVICE_RE = re.compile(r"^/device:([A-Za-z_]+):(\d+)$")
_STREAM_TAGS_RE = re.compile(r"\(([^)]*)\)\s*$")
_SIZE_RE = re.compile(r"size:(\d+)")
_KIND_SRC_RE = re.compile(r"kind_src:(\w+)")
DIRECTIONS = ("h2d", "d2h", "other")


def stream_tags(line_name: str) -> list[str]:
    """The tags of a GPU stream line: "Stream #14(Compute,Memset)" → ["Compute", "Memset"]; [] without any."""
    m = _STREAM_TAGS_RE.search(line_name)
    return [t.strip() for t in m.group(1).split(",")] if m else []


def copy_direction(tag: str) -> str:
    """"h2d", "d2h" or "other" from a copy event's name or its stream's tag ("MemcpyH2D" → "h2d")."""
    return "h2d" if "H2D" in tag.upper() else "d2h" if "D2H" in tag.upper() else "other"


def is_python_frame(name: str) -> bool:
    """A Python tracer frame: "$file.py:line function"."""
    return name.startswith("$")


class Names:
    """A plane's event names, interned once: events carry an index into `values`.  mask(rule) evaluates a rule
    (a compiled regex, searched, or any predicate on a name) once per distinct name, not once per event."""

    def __init__(self, values: list[str]):
        self.values = values
        self._masks: dict = {}

    def table(self, rule, dtype=bool) -> np.ndarray:
        """Per name: does the rule hold for it (dtype bool), or the rule's value for it (another dtype: a code)."""
        t = self._masks.get((rule, dtype))
        if t is None:
            test = rule.search if hasattr(rule, "search") else rule
            values = ((bool(test(n)) for n in self.values) if dtype is bool else (test(n) for n in self.values))
            t = self._masks[(rule, dtype)] = np.fromiter(values, dtype=dtype, count=len(self.values))
        return t

    def mask(self, codes: np.ndarray, rule) -> np.ndarray:
        return self.table(rule)[codes]


@dataclass
class HostEvent:
    """One host event as an object (for readers of a few events: markers, tests)."""
    name: str
    start: int
    end: int
    step_num: int | None = None


@dataclass
class HostThread:
    """One host thread (module docstring): columns sorted by (start, −end)."""
    host: str
    name: str
    id: int
    start: np.ndarray
    end: np.ndarray
    name_id: np.ndarray
    step_num: np.ndarray
    names: Names
    _nesting: tuple | None = field(default=None, repr=False, compare=False)
    # tf.data prefetches whose buffer tf.data sizes itself, seen on this thread: (iterator name, autotune mode,
    # largest buffer_limit recorded) — `prefetch(tf.data.AUTOTUNE)`, or the one tf.data injects after `.repeat()`
    prefetch: tuple = ()
    maps: tuple = ((), frozenset())  # tf.data maps: (name, autotuned, starts) each, and those reading a batch

    def __len__(self) -> int:
        return len(self.start)

    def mask(self, rule) -> np.ndarray:
        """bool per event: its name satisfies `rule` (Names.mask)."""
        return self.names.mask(self.name_id, rule)

    def event(self, i: int) -> HostEvent:
        step = int(self.step_num[i])
        return HostEvent(self.names.values[self.name_id[i]], int(self.start[i]), int(self.end[i]),
                         None if step == MISSING else step)

    @property
    def events(self) -> list[HostEvent]:
        """Every event as an object — for small captures and tests; the rules read the columns."""
        return [self.event(i) for i in range(len(self))]

    def nesting(self) -> tuple[np.ndarray, np.ndarray]:
        """(parent, depth) per event: the innermost earlier event still open when it starts (-1: none) and how
        many are (columns.parents) — the call nesting of Python frames and TraceMe scopes, computed once."""
        if self._nesting is None:
            self._nesting = parents(self.start, self.end)
        return self._nesting

    def marker_index(self) -> np.ndarray:
        """Indices of the step-marker events."""
        return np.flatnonzero(self.step_num != MISSING)


@dataclass
class Copy:
    """One device copy as an object: start, end (ps), direction, bytes (None when not recorded), src_kind."""
    start: int
    end: int
    direction: str
    bytes: int | None
    src_kind: str | None


@dataclass
class Copies:
    """A device's copy events as columns, sorted by start: direction ("h2d" | "d2h" | "other"), bytes (0 when
    the tracer wrote no memcpy_details size) and the source memory kind ("pageable", "pinned", … or None)."""
    start: np.ndarray
    end: np.ndarray
    direction: np.ndarray  # index into DIRECTIONS
    bytes: np.ndarray
    src_kind: list

    def __len__(self) -> int:
        return len(self.start)

    def __iter__(self):
        """Each copy as a Copy object (for readers of a few copies; the rules read the columns)."""
        for i in range(len(self)):
            n = int(self.bytes[i])
            yield Copy(int(self.start[i]), int(self.end[i]), DIRECTIONS[self.direction[i]], n or None,
                       self.src_kind[i])

    def of(self, direction: str) -> np.ndarray:
        return self.direction == DIRECTIONS.index(direction)

    def intervals(self, direction: str) -> np.ndarray:
        m = self.of(direction)
        return iv.union(iv.from_columns(self.start[m], self.end[m]))


@dataclass
class DevicePlane:
    """One accelerator plane of one file (module docstring)."""
    host: str
    name: str
    kind: str
    index: int
    events: int
    first: int | None
    last: int | None
    busy: np.ndarray  # merged kernel intervals
    memcpy: np.ndarray
    h2d: np.ndarray
    d2h: np.ndarray
    steps: list  # (step name, start, end) of the Steps line
    copies: Copies
    kernel_names: dict  # kernel name → count
    hlo_modules: dict  # XLA program name (hlo_module stat) → kernel count
    program_ids: dict  # XLA program id (program_id stat) → kernel count
    programs: dict  # (hlo_module name or None, program_id or None) → kernel count
    vendor: str | None
    compute_capability: str | None
    model: str | None
    # the kernels that carry an `hlo_module` stat: start, end, and an index into program_keys ((name, id or
    # None)), for each program's device time inside the steps (program_facts.programs_ran)
    program_kernels: tuple = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    program_keys: list = field(default_factory=list)
    kernel_starts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # every kernel's, sorted


@dataclass
class FileDigest:
    """What one capture file holds for the rules."""
    path: Path
    host: str
    threads: list = field(default_factory=list)
    devices: list = field(default_factory=list)
    hlo_protos: dict = field(default_factory=dict)
    hlo_by_id: dict = field(default_factory=dict)  # program id → (program name, serialized HloProto)
    host_plane: bool = False


def _device(plane, host: str, kind: str, index: int) -> DevicePlane:
    names = plane.event_names
    lines = [c for c in plane.lines if c.name != "Steps"]
    kern_s, kern_e, kern_n, kern_mod, kern_pid, kern_meta = [], [], [], [], [], []
    cp = {"s": [], "e": [], "d": [], "b": [], "k": []}
    strings = plane.strings
    # per interned string (-1, no stat: the last entry): the copy's size and source memory kind
    sizes = np.array([int(m.group(1)) if (m := _SIZE_RE.search(t)) else 0 for t in strings] + [0], dtype=np.int64)
    kinds = [m.group(1) if (m := _KIND_SRC_RE.search(t)) else None for t in strings] + [None]
    values: list = []
    for line in lines:
        codes, values = plane.name_table(line.meta)  # per distinct name, not per event: is it a copy, which way
        memcpy = np.array([v.startswith("Memcpy") for v in values], dtype=bool)
        tags = stream_tags(line.name)
        copy_only = bool(tags) and all(t.startswith("Memcpy") for t in tags)
        start, end = line.start, line.end
        is_copy = np.ones(len(line), dtype=bool) if copy_only else memcpy[codes]
        k = ~is_copy
        kern_s.append(start[k])
        kern_e.append(end[k])
        kern_n.append(codes[k])
        kern_meta.append(line.meta[k])
        for stat, out in (("hlo_module", kern_mod), ("program_id", kern_pid)):
            col = line.stats.get(stat)
            out.append(col[k] if col is not None else np.full(int(k.sum()), -1 if stat == "hlo_module" else MISSING,
                                                             dtype=np.int64))
        if is_copy.any():
            fallback = DIRECTIONS.index(copy_direction(tags[0] if len(tags) == 1 else ""))
            direction = np.array([DIRECTIONS.index(copy_direction(v)) if m else fallback
                                  for v, m in zip(values, memcpy)], dtype=np.int8)
            cp["s"].append(start[is_copy])
            cp["e"].append(end[is_copy])
            cp["d"].append(direction[codes[is_copy]])
            det = line.stats.get("memcpy_details")
            det = det[is_copy] if det is not None else np.full(int(is_copy.sum()), -1, dtype=np.int64)
            cp["b"].append(sizes[det])
            cp["k"].extend(kinds[i] for i in det.tolist())
    cat = (lambda parts, dt=np.int64: np.concatenate(parts) if parts else np.zeros(0, dtype=dt))
    ks, ke, kn, km, kp = cat(kern_s), cat(kern_e), cat(kern_n, np.int32), cat(kern_mod), cat(kern_pid)
    cs, ce = cat(cp["s"]), cat(cp["e"])
    order = np.argsort(cs, kind="stable")
    copies = Copies(cs[order], ce[order], cat(cp["d"], np.int8)[order], cat(cp["b"])[order],
                    [cp["k"][i] for i in order.tolist()])
    counted = sum(len(c) for c in lines)
    first = int(min(c.start.min() for c in lines if len(c))) if counted else None
    last = int(max(c.end.max() for c in lines if len(c))) if counted else None
    kernel_names: dict = {}
    for code in np.flatnonzero(counts := np.bincount(kn, minlength=len(values))).tolist():
        kernel_names[values[code]] = kernel_names.get(values[code], 0) + int(counts[code])  # same text, one name
    hlo, programs, pairs, program_kernels, keys = kernel_programs.tally(ks, ke, km, kp, cat(kern_meta), strings,
                                                                        plane.meta_programs)
    steps = []
    for line in (c for c in plane.lines if c.name == "Steps"):
        steps += [(names.get(m, ""), s, e) for m, s, e in zip(line.meta.tolist(), line.start.tolist(),
                                                              line.end.tolist())]
    h2d = copies.intervals("h2d")
    d2h = copies.intervals("d2h")
    stats = plane.stats
    cc = None
    if stats.get("compute_cap_major") is not None:
        cc = f"{int(stats['compute_cap_major'])}.{int(stats.get('compute_cap_minor') or 0)}"
    return DevicePlane(host, plane.name, kind, index, counted, first, last,
                       iv.union(iv.from_columns(ks, ke)), iv.union(iv.from_columns(cs, ce)), h2d, d2h, steps, copies,
                       kernel_names, hlo, programs, pairs, stats.get("device_vendor") or None, cc,
                       stats.get("device_name") or stats.get("gpu_device_name") or stats.get("device_type_string")
                       or None, program_kernels, keys, np.sort(ks))


def _thread(line, host: str, names: Names, table, strings: list = ()) -> HostThread:
    start, end = line.start, line.end
    step_gap = np.diff(start)
    if np.all((step_gap > 0) | ((step_gap == 0) & (end[1:] <= end[:-1]))):
        order = np.arange(len(start))  # written in that order already (a stable sort would keep it)
    else:
        order = np.lexsort((-end, start))  # by start, the longer first: a parent before its children
    start, end = start[order], end[order]
    codes = table[order]
    step = line.stats.get("step_num")
    r = line.stats.get("_r")
    if step is not None and r is not None:
        step = np.where((step != MISSING) & (r == 1), step, MISSING)[order]
    else:
        step = np.full(len(order), MISSING, dtype=np.int64)
    return HostThread(host, line.display_name or line.name, line.id, start, end, codes, step, names,
                      prefetch=prefetch_stats.from_line(line, names, table, strings),
                      maps=prefetch_stats.maps_from_line(line, names, table, strings))


def _progress(path: Path, size: int):
    if size < PROGRESS_FROM_BYTES:
        return None
    print(f"tfbertperf: reading {path} ({size / 1e6:.0f} MB)", file=sys.stderr, flush=True)

    def say(plane: str, number: int, planes: int, nbytes: int):
        print(f"tfbertperf: {path.name}: plane {number} of {planes}, {plane!r} ({nbytes / 1e6:.0f} MB)",
              file=sys.stderr, flush=True)
    return say


@functools.lru_cache(maxsize=32)  # a session's hosts (one file each) all stay digested for the combined view
def _digest(path: str, _mtime_ns: int, size: int) -> FileDigest:
    p = Path(path)
    space = read_columns(p, progress=_progress(p, size))
    out = FileDigest(p, space.host)
    while space.planes:
        plane = space.planes.pop(0)  # a plane's columns are dropped as soon as they are digested
        if plane.name.startswith("/host:CPU"):
            out.host_plane = True
            names = None
            for line in plane.lines:
                codes, values = plane.name_table(line.meta)
                names = names or Names(values)  # one table per plane: every thread's events index it
                out.threads.append(_thread(line, space.host, names, codes, plane.strings))
        elif (m := _DEVICE_RE.match(plane.name)) and m.group(1).upper() != "CPU":
            out.devices.append(_device(plane, space.host, m.group(1).upper(), int(m.group(2))))
        if plane.hlo_protos:
            out.hlo_protos.update(plane.hlo_protos)
            out.hlo_by_id.update(plane.hlo_by_id)
    out.devices.sort(key=lambda d: (d.kind, d.index))
    return out


def digest(path) -> FileDigest:
    """The FileDigest of one `.xplane.pb` (or `.xplane.pb.gz`) file, read once per analysis (cached on path,
    mtime and size).  Raises UsageError (one line naming the file) for a missing, unreadable or damaged file."""
    from tfbertperf.profile.xspace_proto import file_key

    return _digest(*file_key(path))
