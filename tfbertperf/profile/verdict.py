"""The verdict: which resource bounds the step, in one line with its numbers, and the advice that applies
(profile/advice.py).  Thresholds are module constants; README quotes them."""

from __future__ import annotations

from tfbertperf.profile.advice import actions
from tfbertperf.profile.figures import input_share

INPUT_BOUND_THRESHOLD = 0.20
"""Bottleneck "input" when the input share of the step is ≥ 0.20 — the step would be ≥ 20 % shorter with free
input.  The input share is the best figure available: input_cost_fraction (probe) → input_cost_estimate_fraction
(trace) → input_bound_fraction (direct).  xprof itself calls ≥ 20 % "highly input-bound"."""

TRANSFER_BOUND_THRESHOLD = 0.15
"""Bottleneck "transfer" when host→device copies take ≥ 15 % of the step and at least as much as the wait for
input does.  Every input share contains the copies (the direct one adds them; the probe's T_c and the trace
estimate leave them in T), so the wait for input is the share less the copies."""

OTHER_BOUND_THRESHOLD = 0.30
"""Bottleneck "other" when time outside input and compute (xprof's "other": Python/eager overhead, idle;
plus compile and output) is ≥ 30 % of the step."""

AU_THRESHOLD_DEFAULT = 0.90
"""MLPerf Storage's accelerator-utilization pass mark (compute time / total time)."""


def verdict(att: dict, au: float, *, config: dict | None = None, storage: dict | None = None,
            au_threshold: float = AU_THRESHOLD_DEFAULT, cpu_flags=None) -> dict:
    """{"bottleneck", "summary", "recommendations"} from an attribution block (thresholds: module constants)."""
    fr = att["fractions"]
    share, source = input_share(att)
    other = fr["other"] + fr["compile"] + fr["output"]
    h2d = fr["host_to_device"]
    if h2d >= TRANSFER_BOUND_THRESHOLD and h2d >= share - h2d:
        bottleneck = "transfer"
    elif share >= INPUT_BOUND_THRESHOLD:
        bottleneck = "input"
    elif other >= OTHER_BOUND_THRESHOLD:
        bottleneck = "other"
    else:
        bottleneck = "compute"
    label = {"input_cost_fraction": "what-if probe", "input_cost_estimate_fraction": "wait + stolen CPU",
             "input_bound_fraction": "blocked wait"}[source]
    what = {"input": "input-bound", "compute": "compute-bound", "transfer": "transfer-bound",
            "other": "bound by other time (Python/eager overhead, idle)"}[bottleneck]
    copies = f", host→device copies {h2d:.0%}" if h2d >= 0.005 else ""
    summary = (f"{what}: input costs {share:.0%} of the {att['step_time_ms']:.1f} ms step ({label}; blocked wait "
               f"{att['input_bound_fraction']:.0%}{copies}); AU {au:.0%} {'≥' if au >= au_threshold else '<'} "
               f"{au_threshold:.0%} → {'pass' if au >= au_threshold else 'fail'}")
    acts = actions(bottleneck, att, config, storage, cpu_flags=cpu_flags)
    return {"bottleneck": bottleneck, "summary": summary,
            "recommendations": [a["advice"] for a in acts], "actions": acts}
