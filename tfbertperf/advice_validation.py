"""`tfbertperf analyze --validate`: the run's advice measured — its config re-run with each recommendation next to
re-runs of the baseline (through tfbertperf/job.py), judged by report/validation.py.  Composes job.py; not a
command itself (analyze.py calls it)."""

from __future__ import annotations

import sys

from tfbertperf.errors import UsageError
from tfbertperf.job import run


def validate(report: dict, doc: dict, progress: bool = True, repeat: int = 3, advice_sets=None) -> dict:
    """Measure the run's advice: re-run its config with each recommendation that maps to --set overrides (or, with
    `advice_sets`, those override lists instead) next to re-runs of the baseline, interleaved round-robin `repeat`
    times (baseline, advice 1, advice 2, baseline, …) so that the machine's drift hits all alike.  Each advice is
    judged by report/validation.py (speed-up in examples/s with its spread; confirmed only when faster and the
    ranges do not overlap) and doc["verdict"] is re-ranked: confirmed advice first, advice not confirmed last."""
    from tfbertperf.config import load_config
    from tfbertperf.redact import REDACTED
    from tfbertperf.report.stats import summary
    from tfbertperf.report.validation import judge, rank_verdict

    if advice_sets:
        known = {tuple(sorted(a.get("set") or [])): a for a in doc["verdict"].get("actions") or [] if a.get("set")}
        acts = [known.get(tuple(sorted(s))) or {"advice": f"given: --set {' --set '.join(s)}", "set": list(s)}
                for s in advice_sets]
    else:
        acts = [a for a in (doc["verdict"].get("actions") or []) if a.get("set")][:3]
    if not acts:
        raise UsageError("--validate: the verdict has no recommendation that maps to --set overrides")
    # Values redacted in the report (secrets, or keys whose names look like one) fall back to their defaults.
    flat = {f"{s}.{k}": v for s, body in report["config"].items() if isinstance(body, dict)
            for k, v in body.items() if v != REDACTED}
    cfgs = [load_config(overrides=flat)]
    cfgs += [load_config(overrides={**flat, **dict(x.split("=", 1) for x in a["set"])}) for a in acts]
    names = ["baseline"] + [f"advice {i}" for i in range(1, len(acts) + 1)]
    got: list[dict] = [{"eps": [], "step": [], "runs": []} for _ in cfgs]
    for rnd in range(1, max(1, repeat) + 1):
        for name, cfg, g in zip(names, cfgs, got):
            if progress:
                print(f"tfbertperf analyze --validate: round {rnd}/{repeat}, {name} run …", file=sys.stderr, flush=True)
            run_dir, rep = run(cfg, progress=False)
            g["eps"].append(rep["throughput"]["examples_per_sec"])
            g["step"].append(rep["throughput"]["step_time_ms"]["p50"])
            g["runs"].append(str(run_dir))
    base = got[0]
    results = [judge(a, base["eps"], g["eps"], g["step"], g["runs"]) for a, g in zip(acts, got[1:])]
    rank_verdict(doc["verdict"], results)
    top = results[0]
    return {"repeat": repeat, "order": "round-robin: " + ", ".join(names),
            "baseline": {"examples_per_sec": summary(base["eps"]), "step_ms": summary(base["step"]),
                         "runs": base["runs"]},
            "results": results, "validated": [r["advice"] for r in results if r["confirmed"]],
            "not_confirmed": [r["advice"] for r in results if not r["confirmed"]],
            # the first advice in the single-run validation's fields (speedup: examples/s ratio of the medians)
            "advice": top["advice"], "set": top["set"], "baseline_step_ms": summary(base["step"])["median"],
            "recommended_step_ms": top["step_ms"]["median"], "speedup": top["speedup"]["median"],
            "baseline_run": base["runs"][0], "recommended_run": top["runs"][0]}
