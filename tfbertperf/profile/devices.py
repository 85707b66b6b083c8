"""Accelerator device planes read straight from XSpace protobufs (`*.xplane.pb`): busy, copy and idle time.

xprof's converters answer per-step questions, but its generic step table has no host→device column and says
nothing about devices that did no work.  This module reads each `/device:<KIND>:<N>` plane itself, with the
protobuf classes TensorFlow ships, read once into columns by profile/columns.py.

Definitions (all per device plane; `/host:*` planes and `/device:CPU:*` are skipped):
  - counted lines: the `Stream #…` lines a GPU tracer writes (CUPTI / ROCm: "Stream #134(Compute)",
    "Stream #135(MemcpyH2D)", "Stream #16(Kernel)"); a plane without any (TPU) counts its `XLA Ops` line.
    Derived lines ("TensorFlow Ops", "TensorFlow Name Scope", "Steps", "XLA Modules") repeat the same time
    and are left out.
  - memcpy event: every event on a copy-only stream (all of the stream's tags start with "Memcpy"), and an
    event named "Memcpy…" on any other stream.  Its direction comes from the event name, else the stream tag:
    "H2D" → h2d, "D2H" → d2h, anything else (D2D, P2P) counts in memcpy only.
  - busy_ms: length of the union of the non-memcpy event intervals on the counted lines (overlapping kernels
    on two streams count once).  memcpy_ms / h2d_ms / d2h_ms: the same for the memcpy events.
  - window_ms: first event start to last event end on the counted lines; busy_fraction = busy / window
    (0 when there are no events).  events: number of events on the counted lines.
Times inside the file are picoseconds: an event starts at `line.timestamp_ns * 1000 + event.offset_ps`, on the
same clock as the host plane, so device intervals can be compared with host step boundaries.  Interval
functions here take and return picoseconds; everything named `*_ms` is milliseconds.
"""

from __future__ import annotations

import os

import numpy as np

from tfbertperf.profile.columns import copy_direction, digest, stream_tags  # noqa: F401  (their home was here)
from tfbertperf.profile.intervals import clip as _clip
from tfbertperf.profile.intervals import length as _length
from tfbertperf.profile.intervals import union as _union
from tfbertperf.profile.steptable import step_number

PS_PER_MS = 1_000_000_000
CONTRACT_KEYS = ("name", "kind", "busy_ms", "memcpy_ms", "h2d_ms", "d2h_ms", "window_ms", "busy_fraction")


def raw_planes(paths) -> list[dict]:
    """Per device plane: its busy / copy intervals in picoseconds (merged (n, 2) arrays, profile/intervals.py),
    before rounding, and what its stats say (profile/columns.py reads each file once)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    return [{"host": d.host, "name": d.name, "kind": d.kind, "index": d.index, "events": d.events,
             "vendor": d.vendor, "compute_capability": d.compute_capability, "model": d.model, "busy": d.busy,
             "memcpy": d.memcpy, "h2d": d.h2d, "d2h": d.d2h, "first": d.first, "last": d.last, "steps": d.steps}
            for path in paths for d in digest(path).devices]


def _ms(ps: int) -> float:
    return round(ps / PS_PER_MS, 4)


def device_planes(paths: list[str]) -> list[dict]:
    """One dict per accelerator device plane of the given `.xplane.pb` files (one file per host).

    Keys: name ("/device:GPU:4"), kind ("GPU", "TPU", …), busy_ms, memcpy_ms, h2d_ms, d2h_ms, window_ms,
    busy_fraction (see the module docstring), plus events (count), host (XSpace hostname, else file stem) and
    what the plane's stats say about the chip: vendor ("AMD"; None when absent — TF's CUPTI planes have none),
    compute_capability ("7.0", from compute_cap_major/minor; ROCm planes report the gfx version, 9.4 = gfx942)
    and model (a device_name or gpu_device_name stat: "NVIDIA H100 80GB HBM3"; None in the V100 and MI300X files).
    Idle planes (no events) are included with zeros.  Sorted by file, then kind and device index.
    Milliseconds are rounded to 4 decimals.  Raises UsageError for an unreadable or damaged file.
    """
    out = []
    for d in raw_planes(paths):
        busy, window = _length(d["busy"]), (d["last"] - d["first"]) if d["events"] else 0
        out.append({"name": d["name"], "kind": d["kind"], "busy_ms": _ms(busy), "memcpy_ms": _ms(_length(d["memcpy"])),
                    "h2d_ms": _ms(_length(d["h2d"])), "d2h_ms": _ms(_length(d["d2h"])), "window_ms": _ms(window),
                    "busy_fraction": round(busy / window, 4) if window else 0.0,
                    "events": d["events"], "host": d["host"], "vendor": d["vendor"],
                    "compute_capability": d["compute_capability"], "model": d["model"]})
    return out


def _select(paths, device: str | None) -> list[dict]:
    """Planes named `device` ("GPU:4" or "/device:GPU:4"); all of them when device is None."""
    want = None if device is None else "/device:" + device.removeprefix("/device:")
    return [d for d in raw_planes(paths) if want is None or d["name"] == want]


def h2d_intervals(paths: list[str], device: str | None = None) -> list[tuple[int, int]]:
    """Host→device copy intervals, in picoseconds on the profile clock, merged into disjoint sorted pairs.

    With device=None the union over all device planes: the wall time during which at least one H2D copy was in
    flight (copies to 8 GPUs at once count once).  device="GPU:4" restricts it to one plane.
    """
    merged = _union(np.concatenate([d["h2d"] for d in _select(paths, device)] or [np.zeros((0, 2), np.int64)]))
    return [(s, e) for s, e in merged.tolist()]


def h2d_ms_between(paths: list[str], start_ps: int, end_ps: int, device: str | None = None) -> float:
    """Milliseconds of H2D copy (union, as h2d_intervals) that fall inside [start_ps, end_ps) on the profile clock.

    Intervals are clipped to the window, so a copy straddling a step boundary is split between the two steps.
    """
    return _ms(_length(_clip(h2d_intervals(paths, device), start_ps, end_ps)))


def device_steps(paths: list[str]) -> list[dict]:
    """The device planes' `Steps` lines (the TF GPU tracer writes one event per step; JAX and TPU captures may not).

    One dict per step event: {"host", "device", "step" (the step name, e.g. "0"), "start_ps", "end_ps",
    "duration_ms"}; start/end in picoseconds on the profile clock.  Empty when no plane has a Steps line.
    """
    return [{"host": d["host"], "device": d["name"], "step": name, "start_ps": s, "end_ps": e,
             "duration_ms": _ms(e - s)} for d in raw_planes(paths) for name, s, e in d["steps"]]


def busy_ms_by_step(paths: list[str]) -> dict[str, dict[tuple[str, str], float]]:
    """Kernel (busy) milliseconds per step and device: step name → {(host, device name): busy ms inside that
    device's own Steps event}.  Empty when no plane has a Steps line."""
    planes = {(d["host"], d["name"]): d for d in raw_planes(paths)}
    out: dict[str, dict[str, float]] = {}
    for st in device_steps(paths):
        busy = _length(_clip(planes[(st["host"], st["device"])]["busy"], st["start_ps"], st["end_ps"]))
        out.setdefault(st["step"], {})[(st["host"], st["device"])] = _ms(busy)
    return out


def h2d_ms_by_step(paths: list[str], exposed: bool = False) -> dict[str, float]:
    """H2D copy milliseconds per step: step name → the largest per-device H2D time inside that device's step.

    exposed=True counts only the copy time during which that device ran no kernel (its busy intervals): a copy
    that overlaps compute (prefetch to device, a second stream) costs the step nothing, and xprof's own step
    breakdown gives overlapped time to compute.  In the V100 fixture step 0 holds 0.0511 ms of H2D on GPU:6,
    0.0224 ms of it exposed (GPU:4: 0.0463 / 0.0225).

    Each device's copies are clipped to its own `Steps` event, because replicas need not run a step at the same
    moment (in the V100 capture GPU:4 ran step 0 about 650 ms before GPU:6); the step waits for its slowest
    replica, hence the max over devices.  How a caller holding xprof's per-step table uses it: xprof's step
    number and the step name here are the same group id (`str(step_number)`); for each step, move
    min(h2d, input_ms) out of "input" into "host_to_device" when that table counts copies as input, or out of
    "other"/"All others" when it does not (xprof's generic table has no H2D column).  Without a Steps line,
    use h2d_ms_between with the caller's own step boundaries (picoseconds, same clock as the host plane).
    """
    planes = {(d["host"], d["name"]): d for d in raw_planes(paths)}
    out: dict[str, float] = {}
    for st in device_steps(paths):
        d = planes[(st["host"], st["device"])]
        copies = _length(_clip(d["h2d"], st["start_ps"], st["end_ps"]))
        if exposed:  # |copies \ busy| = |copies ∪ busy| − |busy|, both clipped to the step
            busy = _clip(d["busy"], st["start_ps"], st["end_ps"])
            copies = _length(_union(np.concatenate([_clip(d["h2d"], st["start_ps"], st["end_ps"]), busy]))) \
                - _length(busy)
        out[st["step"]] = max(out.get(st["step"], 0.0), _ms(copies))
    return out


def _short(d: dict, multi_host: bool) -> str:
    name = d["name"].removeprefix("/device:")
    return f"{d['host']}/{name}" if multi_host else name


def active_summary(devices: list[dict]) -> str:
    """One line per kind, joined by "; ": "3 of 8 GPUs active: GPU:1, GPU:4, GPU:6; 5 idle: GPU:0, …".

    Active = the plane has at least one event (a GPU that only received copies counts: it took part).
    """
    if not devices:
        return "no accelerator device planes in the profile (host-only capture)"
    multi_host = len({d.get("host") for d in devices}) > 1
    parts = []
    for kind in dict.fromkeys(d["kind"] for d in devices):
        mine = [d for d in devices if d["kind"] == kind]
        active = [_short(d, multi_host) for d in mine if d.get("events", 0) or d["busy_ms"] or d["memcpy_ms"]]
        idle = [_short(d, multi_host) for d in mine if _short(d, multi_host) not in active]
        text = f"{len(active)} of {len(mine)} {kind}{'s' if len(mine) != 1 else ''} active"
        text += f": {', '.join(active)}" if active else ""
        text += f"; {len(idle)} idle: {', '.join(idle)}" if idle else ""
        parts.append(text)
    return "; ".join(parts)


def format_device_table(devices: list[dict]) -> str:
    """Fixed-width console table (one row per device, ms and busy %), then the active_summary line."""
    multi_host = len({d.get("host") for d in devices}) > 1
    head = f"{'device':<14} {'kind':<5} {'busy ms':>10} {'memcpy ms':>10} {'h2d ms':>9} {'d2h ms':>9} " \
           f"{'window ms':>10} {'busy %':>7}"
    rows = [head, "-" * len(head)]
    for d in devices:
        rows.append(f"{_short(d, multi_host):<14} {d['kind']:<5} {d['busy_ms']:>10.3f} {d['memcpy_ms']:>10.3f} "
                    f"{d['h2d_ms']:>9.3f} {d['d2h_ms']:>9.3f} {d['window_ms']:>10.3f} "
                    f"{100 * d['busy_fraction']:>6.1f}%")
    rows.append(active_summary(devices))
    return "\n".join(rows)


def device_utilization(devs: list[dict], busy_by_step: dict, rows: list[dict]) -> float | None:
    """attribution.device_busy_fraction: the compute devices' busy time in the steps ÷ their wall time (the
    rows: xprof's step rows); busy_by_step as busy_ms_by_step.  None without kernels."""
    compute = [d for d in devs if d["busy_ms"] > 0]
    wall = sum(r["step_time_ms"] for r in rows)
    if not compute or wall <= 0:
        return None
    by_number = {step_number(k): v for k, v in busy_by_step.items()}
    matched = [by_number[n] for n in (step_number(r["step"]) for r in rows) if n in by_number]
    if matched:
        busy = sum(m.get((d["host"], d["name"]), 0.0) for m in matched for d in compute)
    else:
        busy = sum(min(d["busy_ms"], wall) for d in compute)
    return max(0.0, min(1.0, busy / (len(compute) * wall)))
