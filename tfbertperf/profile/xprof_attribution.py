"""The attribution's figures from xprof's tables and trace (report.json's `attribution`, AU, `step_timer`).

Definitions (all times are means over the profiled steps that xprof found from the step markers):

- breakdown_ms / fractions: xprof's per-step breakdown mapped onto our categories (profile/steptable.py);
  fractions are of the mean profiled step time and sum to 1.
- input_bound_fraction: direct measure — (input + host_to_device) / step time: the share of the step the loop
  stood blocked waiting for data.
- input_cost_fraction: what-if truth from our in-run probe — (T − T_c) / T with T the pipeline-fed step time and
  T_c the compute-only step time (model fed a cached in-memory batch).  None for a foreign profile.
- input_cost_estimate_fraction (additive): for any profile whose compute runs on the host — (blocked get-next +
  CPU the input pipeline stole from compute) / step time, from the host threads in xprof's trace (see
  profile/contention.py); input_cost_estimate_unprofiled_fraction: the same ms ÷ the measured unprofiled step
  (profile/unprofiled.py host_estimate), read by the verdict before the captured share; input_cost_estimate_ci95
  its 95 % half-width over the captured steps (profile/undecided.py).  The stolen CPU is the input threads'
  measured CPU where the capture has their clocks (input_cpu_basis says measured or estimated;
  input_cpu_ms_per_step the measured input CPU in the steps' compute phases).  None on accelerators: busy tf.data
  threads do not slow a GPU/TPU kernel.
- compute_on: "host" when xprof says CPU_ONLY or the profile has no device plane with events, else "accelerator".
- host_to_device (accelerators, steps marked): the copy time measured on the device planes' H2D streams, per
  step — the part of each device's H2D copies inside its own step during which it ran no kernel (exposed
  copies; copies hidden behind compute cost the step nothing), the slowest device's, matched to xprof's step
  rows by step number and moved out of input, then device compute, then other (steptable.move_transfer).
  So input = waiting for tf.data, host_to_device = copies.  `transfer` records what moved and from where.
- accelerator_utilization: on the host (MLPerf Storage) compute time / total time = T_c / T when the probe
  ran; otherwise the compute categories' share of the step minus the stolen share.  On accelerators: device
  busy ÷ wall over the profiled steps, device_busy_fraction = Σ_d busy_d / (n × Σ_s step_s) over the n devices
  that ran kernels (not those that only received copies), busy_d the union of d's kernel intervals inside d's
  own `Steps` events of the profiled steps (without them: over the whole capture, at most Σ_s step_s).
  au_compute_only_ratio keeps T_c / T as its own figure whenever the probe ran.  au_pass = AU ≥ au_threshold
  (config profile.au_threshold, default 0.90).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from tfbertperf.errors import UsageError
from tfbertperf.profile import (contention, devices, host_loader, intervals, loaders, machine_load, marker_steps,
                                outside_steps, program_facts, step_gaps, threadcpu, unprofiled, xprof_tools)
from tfbertperf.profile.accelerator_facts import classify_device
from tfbertperf.profile.device_attribution import attribute_from_idle
from tfbertperf.profile.trace import load_trace
from tfbertperf.profile.steptable import (COMPUTE_CATEGORIES, breakdown, input_ops_per_step, move_transfer, step_number,
                                          step_rows, table_meta)
from tfbertperf.train.blocks import mean_ci95

STEP_MARKER_HINT = (
    "wrap each step as `with tf.profiler.experimental.Trace(\"train\", step_num=i, _r=1): batch = next(it); "
    "step(batch)` (next() inside the block), or use tfbertperf.keras.ProfileCallback with model.fit"
)


STEPS_NOT_MARKED = (
    "steps were not marked, so this is the device summary only (no per-step attribution); mark each step — "
    f"TensorFlow: {STEP_MARKER_HINT}; JAX: `with jax.profiler.StepTraceAnnotation(\"train\", step_num=i):` "
    "around each step"
)


class NoStepsError(UsageError):
    """The profile holds no step markers xprof recognises."""


def _contention_for(trace: dict, step_names: set[int], thread_cpu: dict | None = None, res=None,
                    threads: tuple = ({}, None)) -> dict | None:
    """contention.step_contention's steps summed up; `threads`: host_loader.thread_stolen_by_step's reading (a
    loader thread's CPU taken from XLA's CPU step), added to each step's stolen time."""
    res = res or contention.step_contention(trace, thread_cpu=thread_cpu)  # res: already read (marker_steps)
    steps = [(k, v) for k, v in res["steps"].items() if k in step_names] or list(res["steps"].items())
    if not steps:
        return None
    steps = [{**v, "stolen_ms": v["stolen_ms"] + threads[0].get(k, 0.0)} for k, v in steps]
    cpu = [s["input_cpu_ms"] for s in steps if s["input_cpu_ms"] is not None]
    return {
        "cores": res["cores"],
        "wait_ms": statistics.fmean(s["wait_ms"] for s in steps),
        "stolen_ms": statistics.fmean(s["stolen_ms"] for s in steps),
        "waits_ms": statistics.fmean(s.get("waits_ms", 0.0) for s in steps),  # of it: contention's core_wait part
        # the Python input's ceiling (contention.py, core_wait.ceiling), inf without one
        "ceiling_ms": float("inf") if threads[0] else statistics.fmean(s["ceiling_ms"] for s in steps),
        "step_ms": statistics.fmean(s["step_ms"] for s in steps),
        "input_cpu_ms": threads[1] if threads[0] else statistics.fmean(cpu) if cpu else None,
        "basis": "measured loader" if threads[0] else res["input_cpu_basis"] + (" loader" if res.get("python_loader")
                                                                                 else ""),
        # the estimate's spread over the captured steps: its 95 % interval (profile/undecided.py reads it)
        "ci95": mean_ci95([(s["wait_ms"] + s["stolen_ms"]) / s["step_ms"] for s in steps if s["step_ms"] > 0]),
        "loader_wanted_ms": res["loader_wanted_ms"],  # the CPU a Python loader wanted a step (advice.py)
    }


INPUT_CPU_BASIS = {
    "measured": "measured: the input threads' CPU clocks over the capture (threadcpu.json beside it)",
    "measured loader": "measured: the input threads' CPU clocks over the capture (threadcpu.json beside it), the "
                       "Python loader's threads and processes included (a PyDataset, a generator)",
    "estimated": "estimated: the input threads' busy periods (function runs; py_function wall time not counted, "
                 "it may be a wait) — record the threads' CPU with tfbertperf.keras.ProfileCallback to measure it",
}


def compute_on_host(hardware_type: str, devs: list[dict]) -> bool:
    """True when the training compute runs on the host cores (module docstring, compute_on)."""
    return str(hardware_type or "").upper() in ("CPU_ONLY", "CPU") or not any(d.get("events") for d in devs)


def _accelerator(devs: list[dict], env_devices) -> dict | None:
    """classify_device facts for the first device plane that ran kernels (else the first with events)."""
    active = sorted((d for d in devs if d.get("events")), key=lambda d: d["busy_ms"] <= 0)
    if not active:
        return None
    d = active[0]
    facts = classify_device(d["kind"], d.get("vendor"), d.get("model"), d.get("compute_capability"), env_devices)
    return {**facts, "model": d.get("model")} if facts is not None else None


def _idle_reading(att: dict, idle_att: dict | None) -> dict:
    """att with the device-idle reading (profile/device_attribution.py) in place of xprof's step table where the
    capture allows one; xprof's figures stay under xprof_step_time_ms / xprof_breakdown_ms."""
    if idle_att is None:
        return att
    return {**att, "xprof_step_time_ms": att.get("step_time_ms"), "xprof_breakdown_ms": att.get("breakdown_ms"),
            "xprof_transfer": att.get("transfer"), **idle_att, "input_cost_fraction": att.get("input_cost_fraction")}


INPUT_OP_PREFIXES = ("Iterator::", "MemcpyHToD", "InfeedEnqueue")
"""Host events xprof counts as input ops: tf.data iterators and the enqueue/copy to the device (IsDatasetOp,
IsInfeedEnqueueOp, IsMemcpyHToDOp)."""


def _is_input_op(name: str) -> bool:
    return name.startswith(INPUT_OP_PREFIXES)


def _input_ops(ipa: list, xplanes, step_ms: float | None, rows: int = 1) -> dict:
    """The input-op figures per step the capture spans (steptable.input_ops_per_step): the capture's span and
    its wall time with an input op running are read from the host plane (union over threads)."""
    if not step_ms:  # no step to divide by (the caller fills them in once it has one)
        return {"input_ops_us": None, "input_ops_thread_us": None, "input_ops_concurrency": None,
                "input_ops_capture_steps": None, "input_generator_us": None}
    trace = load_trace(xplanes)
    span = trace.host_span()
    if span is None:
        return {**input_ops_per_step(ipa, rows, None), "input_generator_us": None}

    def union_of(rule) -> np.ndarray:  # wall time with ≥ 1 such event running on some thread
        return intervals.union(np.concatenate([intervals.from_columns(t.start[m], t.end[m]) for t in trace.threads
                                               for m in [t.mask(rule)]] or [intervals.EMPTY]))
    outside = union_of(lambda n: n == outside_steps.EVENT)  # fit's validation and epoch ends: no step's input ops
    steps = max(rows, (span[1] - span[0] - intervals.length(outside)) / 1e9 / step_ms)
    wall_ps = lambda rule: intervals.length(intervals.subtract(union_of(rule), outside))  # noqa: E731
    # per step, the wall time a from_generator source ran (the batches come from Python: advice.py)
    return {**input_ops_per_step(ipa, steps, wall_ps(_is_input_op) / 1e6),
            "input_generator_us": round(wall_ps(loaders.is_generator) / 1e6 / steps, 3)}


XPROF_MODES = ("auto", "always", "never")
"""When analyze runs xprof's input_pipeline_analyzer (`--xprof`): auto — only where its figures are the answer or
feed one (module docstring of attribute_host); always — on every capture (its step table and input conclusion
beside ours); never — not at all (a capture whose answer is xprof's step table is then refused)."""


def _xprof_needed(trace, devs: list[dict], idle_att: dict | None, mode: str) -> str | None:
    """Why xprof's conversion is not run (the JSON's attribution.xprof.skipped), or None when it is."""
    if mode == "always":
        return None
    if mode == "never":
        return "--xprof never"
    if not any(d["busy_ms"] > 0 for d in devs) or idle_att is None:
        return None  # host compute, or no device-idle reading: xprof's step table is the attribution
    if any(t.mask(_is_input_op).any() for t in trace.threads):
        return None  # tf.data input ops: xprof's split of them (read / preprocess / enqueue) feeds the advice
    return ("accelerator capture read from device idle time, with no input op for xprof to split: its step "
            "table and input-op figures would add nothing (--xprof always runs it)")


def attribute_host(xplanes: list[Path], *, step_time_ms: float | None = None,
                   compute_only_step_ms: float | None = None, trace: bool = True, env_devices=None,
                   xprof: str = "auto") -> dict:
    """The `attribution` block for one set of xplanes (one host, or several combined by xprof).

    env_devices: the environment's devices section (report.json environment.devices), for naming the chip.
    xprof: XPROF_MODES.  With "auto" xprof's input_pipeline_analyzer runs when the capture computes on the host
      (its step table is the breakdown), when our device-idle reading cannot be made (no steps, no host plane),
      or when the host ran tf.data input ops (its input-op split feeds the advice); an accelerator capture read
      from device idle time without input ops skips it.  attribution.xprof says which: {"ran": bool, "tools":
      [...], "skipped": why or None}; the xprof-only keys (xprof_step_time_ms, xprof_breakdown_ms,
      xprof_transfer, xprof_input_conclusion) are None when it did not run.
    Raises NoStepsError when neither xprof nor the device-idle reading finds steps; UsageError for
    `xprof="never"` on a capture whose answer is xprof's step table.
    """
    if xprof not in XPROF_MODES:
        raise UsageError(f"--xprof {xprof}: expected one of {', '.join(XPROF_MODES)}")
    devs = devices.device_planes(xplanes)  # also refuses a damaged file in one line, before xprof reads it
    accelerator = _accelerator(devs, env_devices)
    tr = load_trace(xplanes)
    idle_att = (attribute_from_idle(tr, hw=accelerator, measured_step_ms=step_time_ms, t_c_ms=compute_only_step_ms)
                if any(d["busy_ms"] > 0 for d in devs) else None)
    skipped = _xprof_needed(tr, devs, idle_att, xprof)
    if skipped is not None:
        return _without_xprof(xplanes, devs, idle_att, accelerator, skipped, step_time_ms, compute_only_step_ms)
    ipa = xprof_tools.convert(xplanes, "input_pipeline_analyzer")
    ran = {"xprof": {"ran": True, "tools": ["input_pipeline_analyzer"], "skipped": None}}
    rows, meta, tv, per_step, res = step_rows(ipa), table_meta(ipa), None, None, None
    if not rows and compute_on_host(meta["hardware_type"], devs):  # markers xprof left out: profile/marker_steps.py
        tv = xprof_tools.convert(xplanes, "trace_viewer")
        res = contention.step_contention(tv, thread_cpu=threadcpu.read_beside(xplanes[0]) if xplanes else None)
        rows, per_step = marker_steps.rows(tv, res["steps"])
    if not rows:
        # xprof found no steps; our own reading may (markers xprof skips, or launches of one XLA module)
        active = [d for d in devs if d["busy_ms"] > 0]
        if active:
            hw = meta["hardware_type"] or active[0]["kind"]
            att = _idle_reading({"source": "xprof", **meta, "hardware_type": hw, "compute_on": "accelerator",
                                 "input_cost_fraction": None, "input_cost_estimate_fraction": None,
                                 "input_stolen_cpu_fraction": None, "cores_seen": None,
                                 **_input_ops(ipa, xplanes, None), "accelerator": accelerator, **ran}, idle_att)
            if att.get("source") == "device_idle":
                return {**att, **_input_ops(ipa, xplanes, att["step_time_ms"], att["steps_profiled"])}
        where = xprof_tools.source_file(xplanes[0]).parent if xplanes else "profile"
        raise NoStepsError(f"{where}: the profile has no step markers xprof recognises; {STEP_MARKER_HINT}")
    on_host = compute_on_host(meta["hardware_type"], devs)
    rows, loader_ms, held_ms = host_loader.move_to_input(rows, xplanes) if on_host else (rows, None, None)
    rows, gap_ms, fetch_ms = step_gaps.widen(rows, xplanes) if on_host else (rows, 0.0, 0.0)  # between the markers
    loader_ms = None if loader_ms is None else loader_ms + fetch_ms  # a Python loader's frames there (step_gaps.py)
    transfer = None
    if not on_host:
        inflight = devices.h2d_ms_by_step(xplanes)
        transfer = move_transfer(rows, devices.h2d_ms_by_step(xplanes, exposed=True))
        transfer["inflight_ms_per_step"] = round(statistics.fmean(inflight.values()), 6) if inflight else 0.0
        transfer["measured"] = "exposed H2D copies on the device planes' Memcpy streams, per step"
    prof_step_ms, bd = breakdown(rows)
    fr = {c: (v / prof_step_ms if prof_step_ms > 0 else 0.0) for c, v in bd.items()}
    input_bound = fr["input"] + fr["host_to_device"]
    T = step_time_ms if step_time_ms else prof_step_ms
    cost = max(0.0, min(1.0, (T - compute_only_step_ms) / T)) if compute_only_step_ms is not None and T else None
    estimate = stolen_fraction = est_ci = waits = cores = cpu_basis = input_cpu_ms = loader_wanted_ms = None
    most = 1.0  # the estimate's ceiling, a share of the step (core_wait.ceiling): the unprofiled share's too
    if trace and on_host:
        numbers = {n for n in (step_number(r["step"]) for r in rows) if n is not None}
        record = threadcpu.read_beside(xplanes[0]) if xplanes else None
        c = _contention_for(tv or xprof_tools.convert(xplanes, "trace_viewer"), numbers, record, res,
                            host_loader.thread_stolen_by_step(xplanes, record))
        ran["xprof"]["tools"].append("trace_viewer")
        if c and c["step_ms"] > 0:
            cores, cpu_basis, input_cpu_ms, est_ci, loader_wanted_ms = (
                c["cores"], INPUT_CPU_BASIS[c["basis"]], c["input_cpu_ms"], c["ci95"], c["loader_wanted_ms"])
            stolen_fraction = min(1.0, c["stolen_ms"] / (c["step_ms"] + gap_ms))
            waits = min(stolen_fraction, c["waits_ms"] / (c["step_ms"] + gap_ms))
            # xprof's own blocked-input share + the stolen share (both of the profiled step)
            estimate = min(1.0, input_bound + stolen_fraction)
            most = min(1.0, input_bound + c["ceiling_ms"] / (c["step_ms"] + gap_ms))
    events = sum(len(t) for t in tr.threads) / len(rows)  # host events a step: the profiler's cost (unprofiled.py)
    unprof = unprofiled.host_estimate(estimate, prof_step_ms, step_time_ms, events, program_facts.HOST_EVENT_COST_US,
                                      most)
    caveat = host_loader.traced_loader(xplanes) if unprof is not None and on_host else None  # a traced loader
    busy = None if on_host else devices.device_utilization(devs, devices.busy_ms_by_step(xplanes), rows)
    att = {
        "source": "xprof",
        "steps_profiled": len(rows), "host_events_per_step": round(events) if on_host else None,
        "step_time_ms": round(prof_step_ms, 4),
        "breakdown_ms": {c: round(v, 4) for c, v in bd.items()},
        "fractions": {c: round(v, 6) for c, v in fr.items()},
        "input_bound_fraction": round(input_bound, 6),
        "input_cost_fraction": None if cost is None else round(cost, 6),
        "input_cost_estimate_fraction": None if estimate is None else round(estimate, 6),
        "input_cost_estimate_unprofiled_fraction": None if unprof is None else round(unprof, 6),
        **({"input_cost_estimate_unprofiled_caveat": caveat} if caveat else {}),
        "input_cost_estimate_ci95": None if est_ci is None or estimate is None else round(est_ci, 6),
        "input_stolen_cpu_fraction": None if stolen_fraction is None else round(stolen_fraction, 6),
        **({"input_stolen_waits_fraction": round(waits, 6)} if waits else {}),  # of it: core_wait.py's part
        "input_cpu_basis": cpu_basis,
        "input_cpu_ms_per_step": None if input_cpu_ms is None else round(input_cpu_ms, 4),
        "input_loader_wanted_ms_per_step": None if loader_wanted_ms is None else round(loader_wanted_ms, 4),
        "cores_seen": cores,
        **_input_ops(ipa, xplanes, prof_step_ms, len(rows)),
        **meta,
        "compute_on": "host" if on_host else "accelerator",
        "transfer": transfer,
        "device_busy_fraction": None if busy is None else round(busy, 6),
        "accelerator": None if on_host else accelerator,
        "step_table": marker_steps.describe(per_step) if tv else None,
        "input_python_loader_ms_per_step": None if loader_ms is None else round(loader_ms, 4),
        **({} if held_ms is None else {"input_interpreter_held_ms": round(held_ms, 4)}),
        **step_gaps.keys(gap_ms, xplanes if on_host else None),  # a fetch (or gaps unexplained) between the markers
        **machine_load.reading(record := threadcpu.read_beside(xplanes[0]) if xplanes else None),  # a shared machine?
        **outside_steps.reading(record), **loaders.workers_reading(record),  # validation, epoch ends; loader workers
        **({"input_loader_threads_unrecorded_ms_per_step": round(unrec, 4)} if on_host and (
            unrec := host_loader.unrecorded_loader_ms(xplanes, record)) else {}),  # no record of a loader thread
        **ran,
    }
    return att if on_host else _idle_reading(att, idle_att)


def _without_xprof(xplanes, devs: list[dict], idle_att: dict | None, accelerator, skipped: str,
                   step_time_ms: float | None, compute_only_step_ms: float | None) -> dict:
    """attribute_host's block from the device-idle reading alone (xprof not run: `skipped` says why)."""
    if idle_att is None:
        where = xprof_tools.source_file(xplanes[0]) if xplanes else "profile"
        raise UsageError(f"{where}: --xprof never, but this capture's attribution is xprof's step table (it "
                         f"computes on the host, or the device-idle reading finds no steps); run with --xprof auto")
    active = [d for d in devs if d["busy_ms"] > 0]
    T = step_time_ms or idle_att["step_time_ms"]
    cost = None
    if compute_only_step_ms is not None and T and T > 0:
        cost = round(max(0.0, min(1.0, (T - compute_only_step_ms) / T)), 6)
    # no input op on the host: xprof's input-op split is zero, known without it (auto); never: unknown
    has_ops = any(t.mask(_is_input_op).any() for t in load_trace(xplanes).threads)
    ops = (_input_ops([], xplanes, idle_att["step_time_ms"], idle_att["steps_profiled"]) if not has_ops else
           {"input_ops_us": None, "input_ops_thread_us": None, "input_ops_concurrency": None,
            "input_ops_capture_steps": None, "input_generator_us": None})
    return {"source": "xprof", "hardware_type": active[0]["kind"], "xprof_input_conclusion": None,
            "compute_on": "accelerator", "input_cost_estimate_fraction": None, "input_stolen_cpu_fraction": None,
            "input_cpu_basis": None, "input_cpu_ms_per_step": None, "cores_seen": None, **ops, "accelerator": accelerator,
            "xprof": {"ran": False, "tools": [], "skipped": skipped},
            "xprof_step_time_ms": None, "xprof_breakdown_ms": None, "xprof_transfer": None,
            **idle_att, "input_cost_fraction": cost}


INPUT_SHARES = ("input_cost_fraction", "input_cost_estimate_unprofiled_fraction", "input_cost_estimate_fraction",
                "input_bound_fraction")


def input_share(att: dict) -> tuple[float, str]:
    """The best input share available and its name (probe → trace estimate → direct)."""
    for key in INPUT_SHARES:
        v = att.get(key)
        if v is not None:
            return float(v), key
    return 0.0, "input_bound_fraction"


def accelerator_utilization(att: dict, *, step_time_ms: float | None = None,
                            compute_only_step_ms: float | None = None) -> float:
    """AU = compute time / total time (module docstring): device busy ÷ wall on accelerators, else T_c / T or the
    compute share less the stolen share."""
    if att.get("compute_on") == "accelerator" and att.get("device_busy_fraction") is not None:
        # the program as it runs: busy ÷ the unprofiled step where one was measured (profile/unprofiled.py)
        return float((att.get("unprofiled") or att)["device_busy_fraction"])
    T = step_time_ms or att.get("step_time_ms") or 0.0
    if compute_only_step_ms is not None and T > 0:
        return max(0.0, min(1.0, compute_only_step_ms / T))
    fr = att["fractions"]
    compute = sum(fr[c] for c in COMPUTE_CATEGORIES)
    compute -= att.get("input_stolen_cpu_fraction") or 0.0
    return max(0.0, min(1.0, compute))

