"""One capture, parsed once, as the `Trace` every device-time analyzer reads (HTA's `Trace`; analyzers never
open files): the host plane's threads and their events, each accelerator plane's kernel and copy events, and
the HLO modules the capture carries.

Times are picoseconds on the profile clock (host and device planes share it: an event starts at
`line.timestamp_ns * 1000 + event.offset_ps`).  Definitions:
  - host thread: one line of a `/host:CPU` plane (its name, e.g. "python3", "pjrt_async_work_runner/…",
    "tf_data_private_threadpool/…"); its events are (name, start_ps, end_ps, step_num) sorted by start, where
    step_num is the event's `step_num` stat when it has one and its `_r` stat is 1 (a step marker: TF's
    `Trace(name, step_num=i, _r=1)`, JAX's `StepTraceAnnotation`), else None.
  - device kernel: an event on a device plane's counted line that is not a copy (profile/devices.py); a copy:
    one that is.  Copies carry bytes and the source memory kind when the tracer wrote a `memcpy_details` stat
    ("kind_src:pageable … size:50331648").  `hlo_modules`: the `hlo_module` stats of the kernels (XLA programs
    that ran on the device, e.g. "jit_step").
  - python_tracer: the host plane holds Python tracer frames (events named "$file.py:line function").
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tfbertperf.profile import devices
from tfbertperf.profile.xspace import read_space, stat_value

_SIZE_RE = re.compile(r"size:(\d+)")
_KIND_SRC_RE = re.compile(r"kind_src:(\w+)")


@dataclass
class HostEvent:
    name: str
    start: int
    end: int
    step_num: int | None = None


@dataclass
class HostThread:
    host: str
    name: str
    events: list[HostEvent]


@dataclass
class Copy:
    start: int
    end: int
    direction: str  # h2d | d2h | other
    bytes: int | None
    src_kind: str | None  # "pageable" | "pinned" | … (memcpy_details kind_src), None when not recorded


@dataclass
class DeviceTrace:
    host: str
    name: str  # "/device:GPU:0"
    busy: list[tuple[int, int]]  # union of kernel intervals (devices.py definitions)
    copies: list[Copy]
    kernel_names: Counter  # kernel name → count
    hlo_modules: Counter  # XLA program name → kernel count
    summary: dict  # devices.device_planes' row for this plane


@dataclass
class Trace:
    """The parsed capture (module docstring).  Build it with `load_trace(paths)`."""
    paths: list[Path]
    threads: list[HostThread] = field(default_factory=list)
    devices: list[DeviceTrace] = field(default_factory=list)
    hlo_protos: dict[str, bytes] = field(default_factory=dict)  # program name → serialized HloProto
    host_plane: bool = False
    python_tracer: bool = False

    def markers(self) -> list[tuple[HostThread, HostEvent]]:
        """Step-marker events (step_num set), with their thread, sorted by start."""
        out = [(t, e) for t in self.threads for e in t.events if e.step_num is not None]
        return sorted(out, key=lambda te: te[1].start)

    def active_devices(self) -> list[DeviceTrace]:
        """Device planes that ran kernels (a plane that only received copies is not one)."""
        return [d for d in self.devices if d.busy]


def _host_threads(plane, host: str) -> list[HostThread]:
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    want = {k for k, n in names.items() if n in ("step_num", "_r")}
    out = []
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        events = []
        for ev in line.events:
            meta = plane.event_metadata.get(ev.metadata_id)
            step = None
            if want:
                st = {names[s.metadata_id]: stat_value(s, names) for s in ev.stats if s.metadata_id in want}
                if st.get("step_num") is not None and int(st.get("_r") or 0) == 1:
                    step = int(st["step_num"])
            s = base + ev.offset_ps
            events.append(HostEvent(meta.name if meta else "", s, s + ev.duration_ps, step))
        events.sort(key=lambda e: (e.start, -e.end))
        out.append(HostThread(host, line.display_name or line.name, events))
    return out


def _device_trace(plane, host: str, summary: dict) -> DeviceTrace:
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    streams = [ln for ln in plane.lines if ln.name.startswith("Stream")]
    counted = streams or [ln for ln in plane.lines if ln.name == "XLA Ops"]
    copies, kernels, modules = [], Counter(), Counter()
    for line in counted:
        base = line.timestamp_ns * 1000
        tags = devices.stream_tags(line.name)
        copy_only = bool(tags) and all(t.startswith("Memcpy") for t in tags)
        for ev in line.events:
            if ev.WhichOneof("data") == "num_occurrences":
                continue
            meta = plane.event_metadata.get(ev.metadata_id)
            name = meta.name if meta else ""
            stats = {names.get(s.metadata_id, ""): stat_value(s, names) for s in ev.stats}
            s = base + ev.offset_ps
            if name.startswith("Memcpy") or copy_only:
                detail = str(stats.get("memcpy_details") or "")
                size, kind = _SIZE_RE.search(detail), _KIND_SRC_RE.search(detail)
                direction = devices.copy_direction(name if name.startswith("Memcpy") else
                                                   (tags[0] if len(tags) == 1 else ""))
                copies.append(Copy(s, s + ev.duration_ps, direction, int(size.group(1)) if size else None,
                                   kind.group(1) if kind else None))
            else:
                kernels[name] += 1
                if stats.get("hlo_module"):
                    modules[str(stats["hlo_module"])] += 1
    raw = next(p for p in devices.raw_planes([summary["path"]]) if p["name"] == plane.name)
    return DeviceTrace(host, plane.name, raw["busy"], sorted(copies, key=lambda c: c.start), kernels, modules,
                       summary)


def load_trace(paths) -> Trace:
    """The Trace of a capture's `.xplane.pb` files (one per host); each file is parsed once (xspace.py) and the
    Trace built once per set of files (cached on their paths, mtimes and sizes; analyzers only read it).
    Raises UsageError for an unreadable or damaged file."""
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    stamps = []
    for p in paths:
        st = read_space(p) and p.stat()  # read_space raises the one-line error for a bad file first
        stamps.append((str(p), st.st_mtime_ns, st.st_size))
    return _build(tuple(stamps))


@functools.lru_cache(maxsize=4)
def _build(stamps: tuple) -> Trace:
    paths = [Path(p) for p, _, _ in stamps]
    trace = Trace(paths)
    hlo = None
    for path in paths:
        space = read_space(path)
        host = space.hostnames[0] if space.hostnames else path.name.removesuffix(".xplane.pb")
        rows = {d["name"]: d for d in devices.device_planes([path])}
        for plane in space.planes:
            if plane.name.startswith("/host:CPU"):
                trace.host_plane = True
                trace.threads.extend(_host_threads(plane, host))
            elif plane.name in rows:
                trace.devices.append(_device_trace(plane, host, {**rows[plane.name], "path": str(path)}))
            elif plane.name == "/host:metadata":
                names = {k: m.name for k, m in plane.stat_metadata.items()}
                hlo = hlo or {}
                for meta in plane.event_metadata.values():
                    for st in meta.stats:
                        if names.get(st.metadata_id) == "Hlo Proto":
                            hlo[re.sub(r"\(\d+\)$", "", meta.name)] = st.bytes_value
    trace.hlo_protos = hlo or {}
    trace.python_tracer = any(e.name.startswith("$") for t in trace.threads for e in t.events[:2000])
    return trace
