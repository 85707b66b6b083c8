"""The attribution block of an accelerator capture from device idle time (report.json `attribution` with
`source: "device_idle"`): wall-time steps (profile/steps.py), idle charged to the host's work (profile/idle.py)
and what the capture says about the program (profile/program_facts.py).

Definitions (means over the steps; milliseconds):
  - step_time_ms: the mean wall-time step (steps.py); step_source says whether host markers or consecutive
    launches of one XLA module delimited it.
  - breakdown_ms: device_compute = the devices' mean busy time in the step; input, host_to_device,
    kernel_launch, compile, output and other = the idle time charged to each (idle.py), other being the sum of
    other_named_ms (checkpoint, profiler, sync, python, idle).  With several devices each figure is the mean
    over them.  The categories sum to the step.
  - device_busy_fraction (AU): Σ busy ÷ Σ step wall over the steps and the devices that ran kernels.
  - transfer: bytes_per_step (host→device copies on the device), effective_gb_per_s = those bytes ÷ the
    host→device time charged per step (staging + copies the device waited for), memory = "pageable" when that
    rate is below half the device's measured pinned rate (train/devices.yaml; the copy engines' own rate when
    the table has none) else "pinned"; copy_engine_gb_per_s = bytes ÷ the device copies' own time.
    Judged only from BANDWIDTH_FROM_BYTES a step.  copy_ms_per_step: the device copies' own time; where it is
    under HAND_OFF_COPY_SHARE of the host→device time, hand_off_ms_per_step is the rest (the host handing the
    batch over, not copying it).
  - host_events_by_part: per host part (input, host_to_device, kernel_launch, compile, output, other), the
    training threads' host events recorded in the idle time charged to it, a step; kernels_per_step: the device's
    kernels started in a step.  What the profiler's measured cost is shared by (profile/unprofiled.py).
  - input_interpreter_held_ms: of the input, the training thread stalled in its own Python while a loader thread
    ran Python (it awaited the interpreter lock: idle.py `_interpreter_held`), per step.
  - xla_programs: the XLA programs that ran, by program id, with their device time inside the steps and
    precision (program_facts.programs_ran); xla_program_variants: the module names that ran as more than one
    compiled program (each judged by its share of device time; matmul_precision is the precision holding most).
  - unprofiled (with measured_step_ms, the step measured outside the capture, and t_c_ms, the probe's
    compute-only step where one ran): the same step as the program runs without the profiler
    (profile/unprofiled.py); None without it.
  - missing: what the capture lacks for a finding, and how to re-capture (Python frames when ≥ UNEXPLAINED_SHARE
    of the step is device idle with no host event at all).
"""

from __future__ import annotations

import statistics

import numpy as np

from tfbertperf.profile import idle, intervals, program_facts, unprofiled
from tfbertperf.profile.accelerator_facts import measured_facts
from tfbertperf.profile.steps import SOURCE_MARKERS, step_intervals
from tfbertperf.profile.steptable import CATEGORIES
from tfbertperf.profile.trace import Trace

PS_PER_MS = 1e9
PAGEABLE_BELOW_PINNED = 0.5
"""A transfer slower than half the device's pinned host→device rate is staged from pageable memory (H100 here:
pinned 47–55 GB/s, pageable 7–13 GB/s, so the two ranges sit far apart)."""

BANDWIDTH_FROM_BYTES = 1_000_000
"""Memory kind judged only from 1 MB a step up (the smallest size h2d_bandwidth.json measured): smaller copies
are bound by latency, not bandwidth."""

HAND_OFF_COPY_SHARE = 0.10
"""Host→device time whose device copies take under a tenth of it is the host handing the batch over, not the copy:
Keras on JAX on an H200 spent 0.7–0.9 ms a step (captured) in `jax.device_put` of 8–260 KB whose copies took 2–16
µs.  A transfer finding of such time is the loader's (profile/verdict.py idle_findings names it input)."""

UNEXPLAINED_SHARE = 0.05
"""Idle with no host event at all ≥ 5 % of the step is a finding the capture cannot explain: say what to
re-capture with."""

RECAPTURE_PYTHON = ("no Python tracer frames: a Python loader cannot be told from other host time — re-capture "
                    "with the Python tracer on: JAX: it is on by default (jax.profiler.ProfileOptions() has "
                    "python_tracer_level = 1): drop profiler_options that set it to 0; TensorFlow 2.21's pip build ignores "
                    "ProfilerOptions(python_tracer_level=1) (it logs 'python_tracer_level expects an i value.' and "
                    "records no Python frame): wrap the loader in tf.profiler.experimental.Trace(\"load_batch\") "
                    "spans to see it in Trace Viewer")
RECAPTURE_HOST = ("no host plane: device idle time cannot be charged to the host — re-capture with host tracing "
                  "on: TensorFlow records the host at level 2 by default (2.21 ignores ProfilerOptions, so leave "
                  "them at their defaults); JAX: jax.profiler.ProfileOptions host_tracer_level = 2")


def _ms(ps: float) -> float:
    return round(ps / PS_PER_MS, 4)


def _transfer(trace: Trace, rows: list[idle.StepIdle], hw: dict | None) -> dict | None:
    h2d_ps = statistics.fmean(r.charged["host_to_device"] for r in rows)
    nbytes = statistics.fmean(r.transfer_bytes for r in rows)
    sel = [(d.copies, d.copies.of("h2d") & (d.copies.bytes > 0)) for d in trace.active_devices()]
    if not any(m.any() for _, m in sel) and h2d_ps <= 0:
        return None
    copy_ps = intervals.length(intervals.union(np.concatenate(
        [intervals.from_columns(c.start[m], c.end[m]) for c, m in sel] or [intervals.EMPTY])))
    total_bytes = sum(int(c.bytes[m].sum()) for c, m in sel)
    engine = total_bytes / (copy_ps / 1e12) / 1e9 if copy_ps else None
    effective = nbytes / (h2d_ps / 1e12) / 1e9 if h2d_ps > 0 and nbytes else None
    facts = measured_facts((hw or {}).get("model"), (hw or {}).get("family")) or {}
    pinned = facts.get("pinned_h2d_gb_per_s") or engine
    memory = None
    if effective and pinned and nbytes >= BANDWIDTH_FROM_BYTES:
        memory = "pageable" if effective < PAGEABLE_BELOW_PINNED * pinned else "pinned"
    return {"bytes_per_step": round(nbytes), "exposed_ms_per_step": _ms(h2d_ps), "copy_ms_per_step":
            _ms(copy_ps / len(rows)) if copy_ps else None,
            "effective_gb_per_s": None if effective is None else round(effective, 2),
            "copy_engine_gb_per_s": None if engine is None else round(engine, 2),
            "pinned_gb_per_s": pinned and round(pinned, 2),
            "pinned_basis": "measured (device table)" if facts.get("pinned_h2d_gb_per_s") else
                            "this capture's copy-engine rate",
            "memory": memory,
            "source_memory_recorded": sorted({c.src_kind[i] for c, m in sel for i in np.flatnonzero(m).tolist()
                                              if c.src_kind[i]}),
            "measured": "host→device idle time per step (device copies and host staging), idle.py"}


def missing_data(trace: Trace) -> list[str]:
    """What a capture lacks for device-idle findings (no host plane, no Python tracer frames), with how to
    re-capture; [] when it has both."""
    if not trace.host_plane:
        return [RECAPTURE_HOST]
    return [] if trace.python_tracer else [RECAPTURE_PYTHON]


def attribute_from_idle(trace: Trace, *, hw: dict | None = None, measured_step_ms: float | None = None,
                        t_c_ms: float | None = None) -> dict | None:
    """The attribution block (module docstring) or None when the capture has no steps, no host plane or no
    device that ran kernels (the caller keeps xprof's reading then)."""
    steps, source = step_intervals(trace)
    if not steps or not trace.host_plane or not trace.active_devices():
        return None
    rows = idle.idle_by_step(trace, steps)
    wall = statistics.fmean(s.ps for s in steps)
    bd = {c: 0.0 for c in CATEGORIES}
    bd["device_compute"] = statistics.fmean(r.busy for r in rows)
    for k in ("input", "host_to_device", "kernel_launch", "compile", "output"):
        bd[k] = statistics.fmean(r.charged[k] for r in rows)
    named = {k: statistics.fmean(r.charged[k] for r in rows) for k in idle.OTHER_NAMED}
    bd["other"] = sum(named.values())
    transfer = _transfer(trace, rows, hw)
    copy_ms = (transfer or {}).get("copy_ms_per_step") or 0.0
    if copy_ms and copy_ms * PS_PER_MS < HAND_OFF_COPY_SHARE * bd["host_to_device"]:  # the hand-off, not the copy
        transfer["hand_off_ms_per_step"] = _ms(bd["host_to_device"] - copy_ms * PS_PER_MS)
    total = sum(bd.values()) or 1.0  # per-device means: rescale the tiny rounding so the parts sum to the step
    bd = {k: v * wall / total for k, v in bd.items()}
    fr = {k: v / wall for k, v in bd.items()}
    busy = sum(r.busy for r in rows) / sum(r.wall for r in rows)
    programs = program_facts.programs_ran(trace, steps)
    precision, precision_basis = program_facts.matmul_precision(trace, programs)
    # the host's unexplained idle needs Python frames to be named; without them say how to get them
    missing = [RECAPTURE_PYTHON] if not trace.python_tracer and named["idle"] >= UNEXPLAINED_SHARE * wall else []
    att = {
        "source": "device_idle",
        "step_source": source,
        "steps_profiled": len(steps),
        "step_time_ms": _ms(wall),
        "breakdown_ms": {k: _ms(v) for k, v in bd.items()},
        "fractions": {k: round(v, 6) for k, v in fr.items()},
        "other_named_ms": {k: _ms(v) for k, v in named.items()},
        "host_events_by_part": {k: round(statistics.fmean(r.events.get(k, 0) for r in rows), 1)
                                for k in ("input", "host_to_device", "kernel_launch", "compile", "output")} |
                               {"other": round(sum(statistics.fmean(r.events.get(k, 0) for r in rows)
                                                   for k in idle.OTHER_NAMED), 1)},
        "kernels_per_step": round(statistics.fmean(r.kernels for r in rows), 1),
        "input_interpreter_held_ms": _ms(statistics.fmean(r.interpreter_held for r in rows)),
        "delayed_dispatch_ms": {k: _ms(statistics.fmean(r.delayed_dispatch.get(k, 0) for r in rows))
                                for k in ("input", "host_to_device")},
        "input_bound_fraction": round(fr["input"] + fr["host_to_device"], 6),
        "device_busy_fraction": round(busy, 6),
        "transfer": transfer,
        "xla_compiled": program_facts.xla_compiled(trace, programs),
        "cuda_graphs": program_facts.cuda_graphs(trace),
        "matmul_precision": precision,
        "matmul_precision_basis": precision_basis,
        "xla_programs": programs,
        "xla_program_variants": sorted(program_facts.variants(programs)),
        "profiler_cost": program_facts.profiler_cost(trace, steps, measured_step_ms),
        "missing": missing,
        "step_markers": source == SOURCE_MARKERS,
    }
    att["unprofiled"] = unprofiled.view(att, measured_step_ms, t_c_ms)  # the program without the profiler
    return att
