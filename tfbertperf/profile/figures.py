"""The attribution's figures from xprof's tables and trace (report.json's `attribution`, AU, `step_timer`).

Definitions (all times are means over the profiled steps that xprof found from the step markers):

- breakdown_ms / fractions: xprof's per-step breakdown mapped onto our categories (profile/steptable.py);
  fractions are of the mean profiled step time and sum to 1.
- input_bound_fraction: direct measure — (input + host_to_device) / step time: the share of the step the loop
  stood blocked waiting for data.
- input_cost_fraction: what-if truth from our in-run probe — (T − T_c) / T with T the pipeline-fed step time and
  T_c the compute-only step time (model fed a cached in-memory batch).  None for a foreign profile.
- input_cost_estimate_fraction (additive): for any profile — (blocked get-next + CPU the input pipeline stole
  from compute) / step time, from the host threads in xprof's trace (see profile/contention.py).  Closer to
  the what-if truth than the direct measure when the pipeline competes with compute for CPU cores.
- accelerator_utilization (MLPerf Storage): compute time / total time = T_c / T when the probe ran; otherwise
  the compute categories' share of the step minus the stolen share (i.e. compute not spent on the input
  pipeline's behalf).  au_pass = AU ≥ au_threshold (config profile.au_threshold, default 0.90).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tfbertperf.errors import UsageError
from tfbertperf.profile import contention, xprof_tools
from tfbertperf.profile.steptable import (COMPUTE_CATEGORIES, breakdown, input_ops_us, step_number, step_rows,
                                          table_meta)

STEP_MARKER_HINT = (
    "wrap each step as `with tf.profiler.experimental.Trace(\"train\", step_num=i, _r=1): batch = next(it); "
    "step(batch)` (next() inside the block), or use tfbertperf.keras.ProfileCallback with model.fit"
)


class NoStepsError(UsageError):
    """The profile holds no step markers xprof recognises."""


def joined_input_split(ops_us: dict, storage: dict | None) -> dict | None:
    """xprof's input-op split joined with our storage layer's own read time (our runs only).

    Our reads run inside tf.data functions xprof cannot tell from preprocessing: the emulated latency of the
    local backend is a `py_function` in a map, the stream mode's SDK reads run under `from_generator`.  So the
    part of our measured read time (storage.read_ms_per_step: wall time inside reads over the run ÷ steps run)
    that xprof did not already file as a file read is moved to storage_read from preprocessing (then from
    unclassified), never more than those hold.  None when our storage metrics timed no reads.
    """
    read_us = float((storage or {}).get("read_ms_per_step") or 0.0) * 1e3
    if read_us <= 0 or not ops_us:
        return None
    out = {k: float(ops_us.get(k, 0.0)) for k in ("storage_read", "preprocessing", "enqueue", "unclassified")}
    missing = max(0.0, read_us - out["storage_read"])
    for k in ("preprocessing", "unclassified"):
        moved = min(missing, out[k])
        out[k] -= moved
        out["storage_read"] += moved
        missing -= moved
    return {k: round(v, 3) for k, v in out.items()}


def _contention_for(trace: dict, step_names: set[int]) -> dict | None:
    res = contention.step_contention(trace)
    steps = [v for k, v in res["steps"].items() if k in step_names] or list(res["steps"].values())
    if not steps:
        return None
    return {
        "cores": res["cores"],
        "wait_ms": statistics.fmean(s["wait_ms"] for s in steps),
        "stolen_ms": statistics.fmean(s["stolen_ms"] for s in steps),
        "step_ms": statistics.fmean(s["step_ms"] for s in steps),
    }


def attribute_host(xplanes: list[Path], *, step_time_ms: float | None = None,
                   compute_only_step_ms: float | None = None, trace: bool = True) -> dict:
    """The `attribution` block for one set of xplanes (one host, or several combined by xprof).

    Raises NoStepsError when xprof finds no steps.
    """
    ipa = xprof_tools.convert(xplanes, "input_pipeline_analyzer")
    rows = step_rows(ipa)
    if not rows:
        where = Path(xplanes[0]).parent if xplanes else "profile"
        raise NoStepsError(f"{where}: the profile has no step markers xprof recognises; {STEP_MARKER_HINT}")
    prof_step_ms, bd = breakdown(rows)
    fr = {c: (v / prof_step_ms if prof_step_ms > 0 else 0.0) for c, v in bd.items()}
    input_bound = fr["input"] + fr["host_to_device"]
    T = step_time_ms if step_time_ms else prof_step_ms
    cost = None
    if compute_only_step_ms is not None and T and T > 0:
        cost = max(0.0, min(1.0, (T - compute_only_step_ms) / T))
    estimate = stolen_fraction = None
    cores = None
    if trace:
        numbers = {n for n in (step_number(r["step"]) for r in rows) if n is not None}
        c = _contention_for(xprof_tools.convert(xplanes, "trace_viewer"), numbers)
        if c and c["step_ms"] > 0:
            cores = c["cores"]
            stolen_fraction = min(1.0, c["stolen_ms"] / c["step_ms"])
            # xprof's own blocked-input share + the stolen share (both of the profiled step)
            estimate = min(1.0, input_bound + stolen_fraction)
    return {
        "source": "xprof",
        "steps_profiled": len(rows),
        "step_time_ms": round(prof_step_ms, 4),
        "breakdown_ms": {c: round(v, 4) for c, v in bd.items()},
        "fractions": {c: round(v, 6) for c, v in fr.items()},
        "input_bound_fraction": round(input_bound, 6),
        "input_cost_fraction": None if cost is None else round(cost, 6),
        "input_cost_estimate_fraction": None if estimate is None else round(estimate, 6),
        "input_stolen_cpu_fraction": None if stolen_fraction is None else round(stolen_fraction, 6),
        "cores_seen": cores,
        "input_ops_us": input_ops_us(ipa, len(rows)),
        **table_meta(ipa),
    }


def input_share(att: dict) -> tuple[float, str]:
    """The best input share available and its name (probe → trace estimate → direct)."""
    for key in ("input_cost_fraction", "input_cost_estimate_fraction", "input_bound_fraction"):
        v = att.get(key)
        if v is not None:
            return float(v), key
    return 0.0, "input_bound_fraction"


def accelerator_utilization(att: dict, *, step_time_ms: float | None = None,
                            compute_only_step_ms: float | None = None) -> float:
    """AU = compute time / total time (module docstring)."""
    T = step_time_ms or att.get("step_time_ms") or 0.0
    if compute_only_step_ms is not None and T > 0:
        return max(0.0, min(1.0, compute_only_step_ms / T))
    fr = att["fractions"]
    compute = sum(fr[c] for c in COMPUTE_CATEGORIES)
    compute -= att.get("input_stolen_cpu_fraction") or 0.0
    return max(0.0, min(1.0, compute))


def step_timer_summary(step_times_ms, input_wait_ms, warmup_steps: int) -> dict:
    """report.json `step_timer` from the always-on timer.

    Args:
      step_times_ms: wall time of every step (get-next + step), ms, in order.
      input_wait_ms: per step, wall time blocked in next(iterator), ms.
      warmup_steps: leading steps left out (tracing/compilation).
    Returns:
      {"steps": steps counted, "input_wait_fraction": Σ wait / Σ step time,
       "compute_fraction": 1 − input_wait_fraction} over the steps after warm-up (0.0s when none remain).
    """
    st = list(step_times_ms)[warmup_steps:]
    wt = list(input_wait_ms)[warmup_steps:]
    total = sum(st)
    if not st or total <= 0:
        return {"steps": len(st), "input_wait_fraction": 0.0, "compute_fraction": 0.0}
    wait = min(total, sum(wt[: len(st)]))
    f = wait / total
    return {"steps": len(st), "input_wait_fraction": round(f, 6), "compute_fraction": round(1.0 - f, 6)}
