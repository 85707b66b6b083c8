"""Validated advice: each advice's measured effect (repeated runs next to the baseline's) judged, and the
verdict's advice re-ranked so that advice that helped comes first and advice that did not drops to the end.

Speed-up = the advice's median examples/s ÷ the baseline's (throughput, so that advice that changes the batch
size is judged fairly), with the range its repeats allow.  Confirmed only when it is a speed-up (> 1) and the
min–max ranges of the two sets of runs do not overlap; otherwise "not confirmed here (0.88×, spread …)"."""

from __future__ import annotations

from tfbertperf.report.stats import ratio, real_difference, summary


def judge(advice: dict, base_eps: list[float], eps: list[float], step_ms: list[float], runs: list[str]) -> dict:
    b, s = summary(base_eps), summary(eps)
    sp = ratio(s, b)
    ok = bool(sp and sp["median"] > 1.0 and real_difference(s, b))
    why = "" if ok or not sp else (" — slower" if sp["max"] < 1.0 else " — within the noise")
    return {"advice": advice["advice"], "set": list(advice.get("set") or []), "examples_per_sec": s,
            "step_ms": summary(step_ms), "runs": runs, "speedup": sp, "confirmed": ok,
            "note": f"{'confirmed here' if ok else 'not confirmed here'} ({_ratio_words(sp)}{why})"}


def _ratio_words(sp: dict | None) -> str:
    """'0.88×, spread 0.83–0.92×' (the issue's wording); one run each has no spread."""
    if not sp:
        return "not measured"
    if sp["min"] == sp["max"]:
        return f"{sp['median']:.2f}×, one run each"
    return f"{sp['median']:.2f}×, spread {sp['min']:.2f}–{sp['max']:.2f}×"


def rank_verdict(verdict: dict, results: list[dict]) -> None:
    """Re-rank verdict["actions"] / ["recommendations"] in place: confirmed advice (largest speed-up first), then
    advice that was not measured, then advice not confirmed; measured advice carries its note."""
    measured = {r["advice"] for r in results}
    old = verdict.get("actions") or [{"advice": t, "set": []} for t in verdict.get("recommendations") or []]
    confirmed = sorted([r for r in results if r["confirmed"]], key=lambda r: -r["speedup"]["median"])
    refuted = [r for r in results if not r["confirmed"]]
    ranked = ([{"advice": f"{r['advice']} — {r['note']}", "set": r["set"], "validated": True} for r in confirmed]
              + [a for a in old if a["advice"] not in measured]
              + [{"advice": f"{r['advice']} — {r['note']}", "set": r["set"], "validated": False} for r in refuted])
    verdict["actions"] = ranked
    verdict["recommendations"] = [a["advice"] for a in ranked]
