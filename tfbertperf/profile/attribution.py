"""Step-time attribution for a profile session: the facade the commands call (report.json's `attribution`,
`verdict`, `accelerator_utilization`, `hosts`).

The work is done in one module per job: steptable (xprof's tables → our categories), xprof_attribution (breakdown,
fractions, input shares, AU, step timer; definitions there), contention (CPU the input pipeline steals, from the
trace), verdict (bottleneck + summary) and advice (the advice table, as data).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tfbertperf.profile import autotuned_prefetch, devices, undecided, xprof_tools
from tfbertperf.profile.device_attribution import missing_data
from tfbertperf.profile.trace import load_trace
from tfbertperf.profile.xprof_attribution import (STEP_MARKER_HINT, STEPS_NOT_MARKED, NoStepsError,
                                                  accelerator_utilization, attribute_host)
from tfbertperf.profile.accelerator_facts import cross_check
from tfbertperf.profile.verdict import AU_THRESHOLD_DEFAULT, INPUT_BOUND_THRESHOLD, refine, verdict

__all__ = ["attribute", "device_summary", "step_timer_summary", "NoStepsError", "STEP_MARKER_HINT",
           "STEPS_NOT_MARKED"]


def _cfg_get(config: dict | None, section: str, key: str, default=None):
    if not config:
        return default
    return (config.get(section) or {}).get(key, default)


def device_summary(devs: list[dict], xplanes=None) -> dict:
    """`analyze`'s document for a profile with accelerator planes but no step markers (JAX captures, unmarked TF
    programs): the devices, their one-line summary, device_busy_fraction = Σ busy / Σ window over the devices
    that ran kernels (busy over the capture, not over steps), the note on marking steps, and `missing`: what the
    capture lacks for device-idle findings and how to re-capture (profile/device_attribution.py missing_data)."""
    compute = [d for d in devs if d["busy_ms"] > 0]
    window = sum(d["window_ms"] for d in compute)
    missing = missing_data(load_trace(xplanes)) if xplanes else []
    return {"attribution": None, "verdict": None, "accelerator_utilization": None, "hosts": {}, "devices": devs,
            "device_summary": devices.active_summary(devs), "steps_marked": False,
            "device_busy_fraction": round(sum(d["busy_ms"] for d in compute) / window, 6) if window else None,
            "note": STEPS_NOT_MARKED, "missing": missing}


def _emulated_wait_is_device_compute(att: dict, step_ms: float) -> dict:
    """A copy of `att` with the emulated device's wait (at most step_ms a step) moved from host_compute to
    device_compute, the fractions to match (see attribute's emulated_step_ms)."""
    bd, fr = dict(att["breakdown_ms"]), dict(att["fractions"])
    moved = min(float(step_ms), bd.get("host_compute", 0.0))
    bd["host_compute"] = round(bd["host_compute"] - moved, 4)
    bd["device_compute"] = round(bd.get("device_compute", 0.0) + moved, 4)
    for c in ("host_compute", "device_compute"):
        fr[c] = round(bd[c] / att["step_time_ms"], 6) if att["step_time_ms"] else 0.0
    return {**att, "breakdown_ms": bd, "fractions": fr, "emulated_device_ms": round(moved, 4)}


def joined_input_split(ops_us: dict, storage: dict | None) -> dict | None:
    """xprof's input-op split joined with our storage layer's own read time (our runs only).

    Some of our reads run inside tf.data functions xprof cannot tell from preprocessing: the emulated latency
    of the local backend is a `py_function` in a map, stream mode's chunk waits run under `from_generator`,
    stage mode's waits for a download in a `py_function`.  The time the pipeline waited on those reads inside
    the traced window, per profiled step (storage.joined_read_ms_per_step; background look-ahead and staging
    excluded, and TF's own reader left out because xprof files it as a file read itself), is moved to
    storage_read from preprocessing (then from unclassified), never more than those hold: the split's total is
    xprof's.  Runs without the windowed figure fall back to storage.read_ms_per_step (blocking reads over the
    run ÷ steps).  None when our storage metrics timed no such reads.
    """
    sto = storage or {}
    per_step = sto.get("joined_read_ms_per_step", sto.get("read_ms_per_step"))
    read_us = float(per_step or 0.0) * 1e3
    if read_us <= 0 or not ops_us:
        return None
    out = {k: float(ops_us.get(k, 0.0)) for k in ("storage_read", "preprocessing", "enqueue", "unclassified")}
    # the windowed figure holds reads xprof did not file as file reads at all; the old whole-run figure may
    # include them, so the part xprof did see is taken off it
    missing = read_us if "joined_read_ms_per_step" in sto else max(0.0, read_us - out["storage_read"])
    for k in ("preprocessing", "unclassified"):
        moved = min(missing, out[k])
        out[k] -= moved
        out["storage_read"] += moved
        missing -= moved
    return {k: round(v, 3) for k, v in out.items()}


def attribute(xplanes, *, step_time_ms: float | None = None, compute_only_step_ms: float | None = None,
              storage: dict | None = None, config: dict | None = None, trace: bool = True,
              env_devices=None, cpu_flags=None, refine_with: dict | None = None, emulated_au: float | None = None,
              emulated_step_ms: float | None = None, xprof: str = "auto",
              input_cost_ci95: float | None = None, dataset_prefetch: list | None = None,
              what_if_after_steps: bool = False, probe_by: str = "") -> dict:
    """Attribution, verdict and AU for a profile session (DESIGN.md report.json sections).

    Args:
      xplanes: the session's `.xplane.pb` files (see xprof_tools.find_xplanes), or anything find_xplanes takes.
      step_time_ms: mean step time T from the run's step timer (ms); default: xprof's mean profiled step.
      compute_only_step_ms: T_c from the what-if probe (ms); None for a foreign profile.
      input_cost_ci95: the half-width of the what-if's 95 % interval (profile/stepfile.py); where it straddles
        the input-bound line the verdict says it is undecided (profile/undecided.py).
      dataset_prefetch: the autotuned prefetches the step file names (read from the fit's dataset:
        profile/autotuned_prefetch.py in_dataset), reported where the capture shows none (Keras on JAX records no
        tf.data events).
      what_if_after_steps: the what-if's blocks all ran after the fit's last step (profile/stepfile.py
        probe_after_steps: no block grew such a prefetch's buffer, so the figure is not read as possibly low).
      probe_by: the step file's writer (its `written_by`): whose probe a "measure longer" action names.
      storage: report.json `storage` block (adds latency-based advice).  Its `joined_read_ms` (our untraced
        blocking reads in the traced window) is set here per step the capture spans, as
        `joined_read_ms_per_step`, like the input-op figures (attribution.input_ops_capture_steps).
      config: RunConfig.to_dict() of the run (advice names its knobs; profile.au_threshold).
      trace: also read xprof's trace for input_cost_estimate_fraction (costs a second conversion; only done
        when compute runs on the host).
      env_devices: the run environment's devices section (report.json environment.devices): names the chip
        for the advice and is cross-checked with xprof's hardware_type (attribution.hardware_warning).
      cpu_flags: the run environment's CPU flags (environment.cpu.flags): CPU precision advice (advice.py).
      refine_with: the run's input ceiling and host figures (verdict.refine's keyword arguments; job.py measures
        them first): the verdict reads them as it is made, once.  None (a foreign profile): not read.
      emulated_au: an emulated run's AU as its devices measured it (report.json emulation.au, DLIO's
        definition); it is the run's AU, so `run` and `analyze` of its directory give one figure.
      xprof: when xprof's input_pipeline_analyzer runs ("auto" | "always" | "never", xprof_attribution
        XPROF_MODES); attribution.xprof says whether it ran and why not.
      emulated_step_ms: an emulated run's device step (report.json emulation.step_ms).  xprof sees the emulated
        device's wait as host compute; it is the device's compute, so up to that much per step moves from
        host_compute to device_compute (`emulated_device_ms` says how much).
    Returns:
      {"attribution": {...}, "verdict": {...}, "accelerator_utilization": float,
       "hosts": {host: attribution block}, "devices": [device plane dicts, profile/devices.py]}; with several
      hosts the top-level attribution is xprof's combined view, and the estimate/stolen share are the mean of
      the hosts'.  attribution gains au_compute_only_ratio (T_c / T) when the probe ran, and hardware_warning
      (one line, or None).
    Raises:
      NoStepsError (a UsageError) when the profile has no step markers; UsageError for unreadable profiles.
    """
    if not (isinstance(xplanes, (list, tuple)) and xplanes and all(str(x).endswith(".xplane.pb") for x in xplanes)):
        xplanes = xprof_tools.find_xplanes(xplanes)
    xplanes = [Path(x) for x in xplanes]
    hosts = xprof_tools.by_host(xplanes)
    devs = devices.device_planes(xplanes)  # a damaged file is refused here, in one line, before xprof reads it
    kw = {"step_time_ms": step_time_ms, "compute_only_step_ms": compute_only_step_ms, "env_devices": env_devices}
    per_host = {h: attribute_host(files, trace=trace, xprof=xprof, **kw) for h, files in hosts.items()}
    if len(per_host) == 1:
        att = dict(next(iter(per_host.values())))
    else:
        att = attribute_host(xplanes, trace=False, xprof=xprof, **kw)
        est = [a["input_stolen_cpu_fraction"] for a in per_host.values() if a["input_stolen_cpu_fraction"] is not None]
        if est:
            stolen = statistics.fmean(est)
            att["input_stolen_cpu_fraction"] = round(stolen, 6)
            att["input_cost_estimate_fraction"] = round(min(1.0, att["input_bound_fraction"] + stolen), 6)
    if emulated_step_ms:
        per_host = {h: _emulated_wait_is_device_compute(a, emulated_step_ms) for h, a in per_host.items()}
        att = _emulated_wait_is_device_compute(att, emulated_step_ms)
    steps = att.get("input_ops_capture_steps") or att.get("steps_profiled")
    if storage is not None and storage.get("joined_read_ms") is not None and steps:
        storage["joined_read_ms_per_step"] = round(float(storage["joined_read_ms"]) / steps, 3)
    split = joined_input_split(att.get("input_ops_us") or {}, storage)
    if split is not None:
        att["input_split_us"] = split
    threshold = float(_cfg_get(config, "profile", "au_threshold", AU_THRESHOLD_DEFAULT) or AU_THRESHOLD_DEFAULT)
    au = (float(emulated_au) if emulated_au is not None else
          accelerator_utilization(att, step_time_ms=step_time_ms, compute_only_step_ms=compute_only_step_ms))
    T = step_time_ms or att["step_time_ms"]
    att["au_compute_only_ratio"] = (round(max(0.0, min(1.0, compute_only_step_ms / T)), 6)
                                    if compute_only_step_ms is not None and T else None)
    att["what_if_step_ms"] = round(T, 4) if compute_only_step_ms is not None and T else None  # the what-if's T
    att["hardware_warning"] = cross_check(att.get("hardware_type"), env_devices)
    att["au_threshold"] = threshold
    att["au_pass"] = bool(au >= threshold)
    att["input_cost_ci95"] = (round(float(input_cost_ci95), 6) if input_cost_ci95 is not None
                              and att.get("input_cost_fraction") is not None else None)
    # a user's fit: tf.data prefetches sizing their own buffer (profile/autotuned_prefetch.py; our runs: null)
    att["autotuned_prefetch"] = (load_trace(xplanes).autotuned_prefetch() or dataset_prefetch or None) \
        if config is None else None
    att["tfdata_maps"] = load_trace(xplanes).tfdata_maps() or None if config is None else None  # what its maps run
    att["what_if_after_steps"] = bool(what_if_after_steps) if att.get("input_cost_fraction") is not None else None
    vkw = {"config": config, "storage": storage, "au_threshold": threshold, "cpu_flags": cpu_flags}
    decided = verdict(att, au, **vkw)
    if refine_with is not None:
        # the step's blocked wait for input: on a contended host the cause is what the run waits on
        decided = refine(decided, **{"wait_share": att.get("input_bound_fraction"), **refine_with})
    decided = undecided.mark(decided, att, au, probe_steps=_cfg_get(config, "profile", "probe_steps", None),
                             probe_by=probe_by, **vkw)
    if config is None:  # a user's fit: a what-if its probe measured under an autotuned prefetch may read low
        decided = autotuned_prefetch.mark(decided, att, INPUT_BOUND_THRESHOLD)
    return {
        "attribution": att,
        "verdict": decided,
        "accelerator_utilization": round(au, 6),
        "hosts": per_host,
        "devices": devs,
    }


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
