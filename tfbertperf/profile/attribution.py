"""Step-time attribution for a profile session: the facade the commands call (report.json's `attribution`,
`verdict`, `accelerator_utilization`, `hosts`).

The work is done in one module per job: steptable (xprof's tables → our categories), figures (breakdown,
fractions, input shares, AU, step timer; definitions there), contention (CPU the input pipeline steals, from the
trace), verdict (bottleneck + summary) and advice (the advice table, as data).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tfbertperf.profile import xprof_tools
from tfbertperf.profile.figures import (STEP_MARKER_HINT, NoStepsError, accelerator_utilization, attribute_host,
                                       joined_input_split, step_timer_summary)
from tfbertperf.profile.verdict import AU_THRESHOLD_DEFAULT, verdict

__all__ = ["attribute", "step_timer_summary", "NoStepsError", "STEP_MARKER_HINT"]


def _cfg_get(config: dict | None, section: str, key: str, default=None):
    if not config:
        return default
    return (config.get(section) or {}).get(key, default)


def attribute(xplanes, *, step_time_ms: float | None = None, compute_only_step_ms: float | None = None,
              storage: dict | None = None, config: dict | None = None, trace: bool = True) -> dict:
    """Attribution, verdict and AU for a profile session (DESIGN.md report.json sections).

    Args:
      xplanes: the session's `.xplane.pb` files (see xprof_tools.find_xplanes), or anything find_xplanes takes.
      step_time_ms: mean step time T from the run's step timer (ms); default: xprof's mean profiled step.
      compute_only_step_ms: T_c from the what-if probe (ms); None for a foreign profile.
      storage: report.json `storage` block (adds latency-based advice).
      config: RunConfig.to_dict() of the run (advice names its knobs; profile.au_threshold).
      trace: also read xprof's trace for input_cost_estimate_fraction (costs a second conversion).
    Returns:
      {"attribution": {...}, "verdict": {...}, "accelerator_utilization": float,
       "hosts": {host: attribution block}}; with several hosts the top-level attribution is xprof's combined
      view, and the estimate/stolen share are the mean of the hosts'.
    Raises:
      NoStepsError (a UsageError) when the profile has no step markers; UsageError for unreadable profiles.
    """
    if not (isinstance(xplanes, (list, tuple)) and xplanes and all(str(x).endswith(".xplane.pb") for x in xplanes)):
        xplanes = xprof_tools.find_xplanes(xplanes)
    xplanes = [Path(x) for x in xplanes]
    hosts = xprof_tools.by_host(xplanes)
    per_host = {h: attribute_host(files, step_time_ms=step_time_ms, compute_only_step_ms=compute_only_step_ms,
                                  trace=trace)
                for h, files in hosts.items()}
    if len(per_host) == 1:
        att = dict(next(iter(per_host.values())))
    else:
        att = attribute_host(xplanes, step_time_ms=step_time_ms, compute_only_step_ms=compute_only_step_ms,
                             trace=False)
        est = [a["input_stolen_cpu_fraction"] for a in per_host.values() if a["input_stolen_cpu_fraction"] is not None]
        if est:
            stolen = statistics.fmean(est)
            att["input_stolen_cpu_fraction"] = round(stolen, 6)
            att["input_cost_estimate_fraction"] = round(min(1.0, att["input_bound_fraction"] + stolen), 6)
    split = joined_input_split(att.get("input_ops_us") or {}, storage)
    if split is not None:
        att["input_split_us"] = split
    threshold = float(_cfg_get(config, "profile", "au_threshold", AU_THRESHOLD_DEFAULT) or AU_THRESHOLD_DEFAULT)
    au = accelerator_utilization(att, step_time_ms=step_time_ms, compute_only_step_ms=compute_only_step_ms)
    att["au_threshold"] = threshold
    att["au_pass"] = bool(au >= threshold)
    return {
        "attribution": att,
        "verdict": verdict(att, au, config=config, storage=storage, au_threshold=threshold),
        "accelerator_utilization": round(au, 6),
        "hosts": per_host,
    }
