"""Two report.json documents side by side: attribution, throughput and loss trajectories, with a verdict on
whether the losses agree (and whether they could be expected to)."""

from __future__ import annotations

import math
import re
from typing import Any

from tfbertperf.envinfo.values import dig, flatten, num

# Config keys that, when different, make a loss comparison apples-to-oranges (beyond numerics noise).
_NUMERICS_CONFIG = re.compile(
    r"^config\.(model\..*|data\.(seq_len|max_predictions|vocab.*|seed|dupe_factor|masked_lm_prob|corpus"
    r"|short_seq_prob)|train\.(batch_size|seed|learning_rate)|pipeline\.(shuffle_buffer|preset))$"
)


def _at(doc: dict, dotted: str) -> Any:
    return dig(doc, *dotted.split("."))


def compare_losses(traj_a: Any, traj_b: Any, rtol: float, atol: float) -> dict:
    """Compare two loss trajectories [[step, loss], …] at their common steps.

    Match = every common step satisfies |a − b| <= atol + rtol·|b| and neither is NaN/inf.
    Returns {"steps_compared", "max_abs_diff", "max_rel_diff", "first_divergent_step", "match", "identical"}.
    """
    def as_map(t):
        m = {}
        for item in t or []:
            if isinstance(item, (list, tuple)) and len(item) == 2 and num(item[0]) is not None:
                m[int(item[0])] = item[1]
        return m

    ma, mb = as_map(traj_a), as_map(traj_b)
    common = sorted(set(ma) & set(mb))
    res = {"steps_compared": len(common), "rtol": rtol, "atol": atol, "max_abs_diff": None, "max_rel_diff": None,
           "first_divergent_step": None, "match": None, "identical": None}
    if not common:
        return res
    max_abs = max_rel = 0.0
    first_bad = None
    for s in common:
        a, b = num(ma[s]), num(mb[s])
        if a is None or b is None:  # NaN/inf/None
            first_bad = s if first_bad is None else first_bad
            max_abs = max_rel = math.inf
            continue
        d = abs(a - b)
        max_abs = max(max_abs, d)
        max_rel = max(max_rel, d / max(abs(a), abs(b), 1e-12))
        if d > atol + rtol * abs(b) and first_bad is None:
            first_bad = s
    res.update(max_abs_diff=max_abs, max_rel_diff=max_rel, first_divergent_step=first_bad,
               match=first_bad is None, identical=all(ma[s] == mb[s] for s in common))
    return res


def side_by_side(a: dict, b: dict, rtol: float = 1e-3, atol: float = 1e-5) -> dict:
    """Attribution, throughput and loss trajectories of two report.json documents next to each other.

    Returns {"metrics": [{"name", "a", "b", "ratio_b_over_a"}], "fractions": [{"name", "a", "b", "delta"}],
    "bottleneck": {"a", "b"}, "loss_trajectory": {"a", "b"}, "numerics": {…compare_losses…, "comparable",
    "verdict"}}.  Fractions are of the mean profiled step time (report.json attribution.fractions).
    """
    metric_paths = [
        ("step_time_ms (profiled)", "attribution.step_time_ms"),
        ("step_time_ms mean (all steps)", "throughput.step_time_ms.mean"),
        ("examples_per_sec", "throughput.examples_per_sec"),
        ("input_bound_fraction", "attribution.input_bound_fraction"),
        ("input_cost_fraction (what-if)", "attribution.input_cost_fraction"),
        ("step_timer input_wait_fraction", "step_timer.input_wait_fraction"),
        ("accelerator_utilization", "accelerator_utilization"),
        ("storage read_mb_per_sec", "storage.read_mb_per_sec"),
        ("storage request_latency_ms p50", "storage.request_latency_ms.p50"),
        ("final_loss", "training.final_loss"),
    ]
    metrics = []
    for name, path in metric_paths:
        va, vb = _at(a, path), _at(b, path)
        if va is None and vb is None:
            continue
        na, nb = num(va), num(vb)
        metrics.append({"name": name, "a": va, "b": vb,
                        "ratio_b_over_a": round(nb / na, 3) if na and nb is not None and na != 0 else None})
    fa, fb = _at(a, "attribution.fractions") or {}, _at(b, "attribution.fractions") or {}
    fractions = []
    for k in list(fa) + [k for k in fb if k not in fa]:
        va, vb = num(fa.get(k)), num(fb.get(k))
        fractions.append({"name": k, "a": va, "b": vb,
                          "delta": round(vb - va, 4) if va is not None and vb is not None else None})
    ta, tb = _at(a, "training.loss_trajectory"), _at(b, "training.loss_trajectory")
    numerics = compare_losses(ta, tb, rtol, atol)
    ca, cb = flatten({"config": a.get("config") or {}}), flatten({"config": b.get("config") or {}})
    differing = sorted(k[7:] for k in set(ca) | set(cb) if ca.get(k) != cb.get(k) and _NUMERICS_CONFIG.match(k))
    numerics["comparable"] = not differing
    numerics["config_differences"] = differing
    numerics["verdict"] = numerics_verdict(numerics, a, b)
    return {"metrics": metrics, "fractions": fractions,
            "bottleneck": {"a": _at(a, "verdict.bottleneck"), "b": _at(b, "verdict.bottleneck")},
            "loss_trajectory": {"a": ta, "b": tb}, "numerics": numerics}


def numerics_verdict(n: dict, a: dict, b: dict) -> str:
    """One sentence on whether the two runs' losses agree."""
    if not n["steps_compared"]:
        return "numerics not compared: the reports share no logged loss step"
    if n["config_differences"] and n["identical"]:
        # Not "expected to differ" next to identical losses: say what identical losses mean here.
        return ("numerics bit-identical over " f"{n['steps_compared']} common steps although the runs differ in "
                + ", ".join(n["config_differences"]) + ": that difference did not reach the numerics "
                "(the same batches in the same order; check that the setting took effect)")
    if n["config_differences"]:
        return ("numerics not comparable: the runs differ in " + ", ".join(n["config_differences"])
                + " (losses are expected to differ)")
    if n["identical"]:
        return f"numerics match: losses are bit-identical over {n['steps_compared']} common steps"
    tol = f"rtol={n['rtol']:g}, atol={n['atol']:g}"
    if n["match"]:
        return (f"numerics match within {tol} over {n['steps_compared']} common steps "
                f"(max relative difference {n['max_rel_diff']:.2g})")
    why = ""
    nondet = [d for d in (a, b) if d.get("config") is not None and not _at(d, "config.pipeline.deterministic")]
    if nondet:
        why = "; note pipeline.deterministic=false, so batch order alone can explain a difference"
    return (f"numerics differ beyond {tol}: first at step {n['first_divergent_step']}, max relative difference "
            f"{n['max_rel_diff']:.2g}{why}")

