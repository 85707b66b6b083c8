"""One capture, read once, as the `Trace` every device-time analyzer reads (HTA's `Trace`; analyzers never
open files): the host plane's threads and their events, each accelerator plane's kernel and copy events, and
the HLO modules the capture carries.  Everything is columns (numpy arrays, names interned once per plane:
profile/columns.py), so the memory grows with events as bytes, not as Python objects.

Times are picoseconds on the profile clock (host and device planes share it: an event starts at
`line.timestamp_ns * 1000 + event.offset_ps`).  Definitions:
  - host thread: one line of a `/host:CPU` plane (its name, e.g. "python3", "pjrt_async_work_runner/…",
    "tf_data_private_threadpool/…"); its events are columns start, end, name (thread.mask(rule) tests names),
    step_num, sorted by start, where step_num is the event's `step_num` stat when it has one and its `_r` stat
    is 1 (a step marker: TF's `Trace(name, step_num=i, _r=1)`, JAX's `StepTraceAnnotation`), else MISSING.
  - device kernel: an event on a device plane's counted line that is not a copy (profile/devices.py); a copy:
    one that is.  Copies carry bytes and the source memory kind when the tracer wrote a `memcpy_details` stat
    ("kind_src:pageable … size:50331648").  `hlo_modules`: the `hlo_module` stats of the kernels (XLA programs
    that ran on the device, e.g. "jit_step"); `program_ids`: their `program_id` stats; `programs`: the
    (name, id) pairs — one name can be several compiled programs.
  - python_tracer: the host plane holds Python tracer frames (events named "$file.py:line function").
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfbertperf.profile import devices
# HostEvent, Copy and MISSING are re-exported: readers of a few events or copies, and rules comparing with MISSING
from tfbertperf.profile.columns import Copies, Copy, HostEvent, HostThread, digest, is_python_frame  # noqa: F401
from tfbertperf.profile.xspace import MISSING  # noqa: F401


@dataclass
class DeviceTrace:
    host: str
    name: str  # "/device:GPU:0"
    busy: np.ndarray  # merged kernel intervals, (n, 2) picoseconds (devices.py definitions)
    copies: Copies
    kernel_names: Counter  # kernel name → count
    hlo_modules: Counter  # XLA program name → kernel count
    summary: dict  # devices.device_planes' row for this plane
    program_ids: Counter = field(default_factory=Counter)  # XLA program id → kernel count
    programs: Counter = field(default_factory=Counter)  # (program name, program id) → kernel count
    # kernels with an `hlo_module` stat: (start, end, index into program_keys); program_keys: (name, id or None)
    program_kernels: tuple = ()
    program_keys: list = field(default_factory=list)
    kernel_starts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # every kernel's, sorted


@dataclass
class Trace:
    """The parsed capture (module docstring).  Build it with `load_trace(paths)`."""
    paths: list[Path]
    threads: list[HostThread] = field(default_factory=list)
    devices: list[DeviceTrace] = field(default_factory=list)
    hlo_protos: dict[str, bytes] = field(default_factory=dict)  # program name → serialized HloProto
    hlo_by_id: dict[int, tuple] = field(default_factory=dict)  # program id → (program name, serialized HloProto)
    host_plane: bool = False
    python_tracer: bool = False

    def markers(self) -> list[tuple[HostThread, HostEvent]]:
        """Step-marker events (step_num set), with their thread, sorted by start."""
        out = [(t, t.event(i)) for t in self.threads for i in t.marker_index().tolist()]
        return sorted(out, key=lambda te: te[1].start)

    def _in_steps(self):
        """A mask function over event start times: inside a step marker (the last marker starting at or before each
        event, still running then); every event where the capture has no markers."""
        spans = sorted((e.start, e.end) for _, e in self.markers())
        if not spans:
            return lambda at: np.ones(len(at), dtype=bool)
        starts = np.array([a for a, _ in spans], dtype=np.int64)
        ends = np.maximum.accumulate(np.array([b for _, b in spans], dtype=np.int64))

        def inside(at):
            k = np.searchsorted(starts, at, side="right") - 1
            return (k >= 0) & (at <= ends[np.maximum(k, 0)])
        return inside

    def autotuned_prefetch(self) -> list[dict]:
        """tf.data prefetches whose buffer tf.data sizes itself (HostThread.prefetch), one per iterator:
        {"iterator", "autotune_mode", "buffer_limit_max"}.  Where the capture has step markers, only those with an
        event inside a step: a fit's validation dataset (`validation_data=`, evaluated between epochs, a window
        across an epoch's end) gets tf.data's injected prefetch of its own, which feeds no training step."""
        inside, seen = self._in_steps(), {}
        for t in self.threads:
            for name, mode, limits, at in t.prefetch:
                limits = limits[inside(at)]
                if len(limits):
                    seen[(name, mode)] = max(seen.get((name, mode), 0), int(limits.max()))
        return [{"iterator": n, "autotune_mode": m, "buffer_limit_max": lim} for (n, m), lim in sorted(seen.items())]

    def tfdata_maps(self) -> list[dict]:
        """tf.data maps (HostThread.maps), one per iterator: {"iterator", "autotuned", "after_batch"}; where the
        capture has step markers, only those with an event inside a step (a validation dataset's maps feed none)."""
        inside, seen = self._in_steps(), {}
        batched = set().union(*(t.maps[1] for t in self.threads)) if self.threads else set()
        for t in self.threads:
            for name, auto, at in t.maps[0]:
                if inside(at).any():
                    seen[name] = seen.get(name, False) or bool(auto)
        return [{"iterator": n, "autotuned": a, "after_batch": n in batched} for n, a in sorted(seen.items())]

    def active_devices(self) -> list[DeviceTrace]:
        """Device planes that ran kernels (a plane that only received copies is not one)."""
        return [d for d in self.devices if len(d.busy)]

    def host_span(self) -> tuple[int, int] | None:
        """(first start, last end) over every host event; None without host events."""
        spans = [(int(t.start[0]), int(t.end.max())) for t in self.threads if len(t)]
        return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None


def load_trace(paths) -> Trace:
    """The Trace of a capture's `.xplane.pb` files (one per host); each file is read once (columns.py, one file
    at a time) and the Trace built once per set of files (cached on their paths, mtimes and sizes; analyzers
    only read it).  Raises UsageError for an unreadable or damaged file."""
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    stamps = []
    for p in paths:
        st = digest(p) and p.stat()  # digest raises the one-line error for a bad file first
        stamps.append((str(p), st.st_mtime_ns, st.st_size))
    return _build(tuple(stamps))


@functools.lru_cache(maxsize=4)
def _build(stamps: tuple) -> Trace:
    paths = [Path(p) for p, _, _ in stamps]
    trace = Trace(paths)
    hlo = None
    for path in paths:
        d = digest(path)
        rows = {r["name"]: r for r in devices.device_planes([path])}
        trace.host_plane |= d.host_plane
        trace.threads.extend(d.threads)
        for plane in d.devices:
            trace.devices.append(DeviceTrace(plane.host, plane.name, plane.busy, plane.copies,
                                             Counter(plane.kernel_names), Counter(plane.hlo_modules),
                                             {**rows[plane.name], "path": str(path)}, Counter(plane.program_ids),
                                             Counter(plane.programs), plane.program_kernels,
                                             plane.program_keys, plane.kernel_starts))
        if d.hlo_protos:
            hlo = {**(hlo or {}), **d.hlo_protos}
            trace.hlo_by_id.update(d.hlo_by_id)
    trace.hlo_protos = hlo or {}
    # the first 2,000 events of each thread show whether the Python tracer ran
    trace.python_tracer = any(t.names.table(is_python_frame)[t.name_id[:2000]].any()
                              for t in trace.threads)
    return trace
