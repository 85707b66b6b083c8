"""A comparison explained in words with numbers: the slowest cell against the fastest — whether the difference is
real, which step-time categories grew and by how much, the storage figures behind it, the environment
differences (reports from two machines), and the slowest cell's top recommendation with its measured effect when
the comparison itself measured it (a cell that differs from the slowest exactly by the advice's settings)."""

from __future__ import annotations

from tfbertperf.report.stats import fmt, fmt_ratio, number, ratio, real_difference

STORAGE_FIGURES = [  # (row key, words, unit, digits)
    ("storage_read_ms_per_step", "storage read", " ms/step", 2),
    ("preprocessing_ms_per_step", "preprocessing", " ms/step", 2),
    ("request_p50_ms", "request p50", " ms", 1),
    ("request_p99_ms", "request p99", " ms", 1),
    ("read_mb_per_sec", "read", " MB/s", 1),
    ("retries", "retries", "", 0),
    ("service_wait_ms_per_step", "wait on the tf.data service", " ms/step", 2),
]


def _settings(row: dict) -> dict:
    return {k: str(v).strip().lower() for k, v in (x.split("=", 1) for x in row.get("set") or [] if "=" in x)}


def measured_effect(rows: list[dict], base: dict, sets: list[str]) -> dict | None:
    """The cell that is `base` with `sets` applied (all other settings equal), and its throughput ÷ base's."""
    want = dict(_settings(base))
    want.update({k: v.strip().lower() for k, v in (x.split("=", 1) for x in sets)})
    if want == _settings(base):
        return None
    for r in rows:
        if r is not base and r["status"] != "failed" and _settings(r) == want:
            b, n = base["stats"].get("examples_per_sec"), r["stats"].get("examples_per_sec")
            rt = ratio(n, b)
            return {"cell": r["label"], "speedup": rt, "confirmed": bool(rt and rt["median"] > 1.0
                                                                          and real_difference(n, b))}
    return None


CAUSE_TEXT = {"storage": "waiting on storage (the input waits on reads, not on the CPU)",
              "preprocessing": "preprocessing-limited (the CPU is saturated)",
              "mixed": "input-bound with the CPU partly busy (storage reads and preprocessing both count)"}


def cause_sentence(slow: dict, fast: dict) -> str:
    """Why the slower cell is slower, from its verdict (most runs' bottleneck and input cause) and the medians
    that decided it: input cost, CPU busy, the share of the time the pipeline waited on reads, request p50."""
    s = slow["stats"]
    what = CAUSE_TEXT.get(slow.get("input_cause")) if slow.get("bottleneck") == "input" else None
    head = f"cause: {slow['label']!r} is {slow.get('bottleneck')}-bound in {slow.get('bottleneck_runs')} runs"
    head += f", {what}" if what else ""
    figs = []
    for key, words, pct, unit in (("input_cost_fraction", "input cost (what-if)", True, ""),
                                  ("cpu_busy_fraction", "CPU busy", True, ""),
                                  ("read_wait_fraction", "time waiting on reads", True, ""),
                                  ("request_p50_ms", "request p50", False, " ms")):
        if s.get(key) is not None:
            figs.append(f"{words} {fmt(s[key], 0 if pct else 1, pct=pct, unit=unit)}")
    fast_cost = fmt(fast["stats"].get("input_cost_fraction"), 0, pct=True)
    return (head + (f": {', '.join(figs)}" if figs else "")
            + f"; {fast['label']!r} is {fast.get('bottleneck')}-bound (input cost {fast_cost})")


def _growth(slow: dict, fast: dict) -> list[dict]:
    out = []
    st, ft = slow.get("profiled_step_time_ms") or 0.0, fast.get("profiled_step_time_ms") or 0.0
    for cat, ms in (slow.get("breakdown_ms") or {}).items():
        f = (fast.get("breakdown_ms") or {}).get(cat, 0.0)
        if ms - f >= 0.05:  # shown with one decimal: a smaller growth would read "grew by 0.0 ms"
            out.append({"category": cat, "slow_ms": round(ms, 3), "fast_ms": round(f, 3), "grew_ms": round(ms - f, 3),
                        "slow_share": round(ms / st, 4) if st else None,
                        "fast_share": round(f / ft, 4) if ft else None})
    return sorted(out, key=lambda d: -d["grew_ms"])


def explain(doc: dict, machines: bool = False) -> dict:
    """{"lines": [sentences, most important first], "headline", "growth", "storage", "environment",
    "recommendation"}; {"lines": [...]} only when fewer than two cells ran."""
    rows = doc["rows"]
    lines: list[str] = []
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        lines.append(f"{len(failed)} of {len(rows)} cells failed: " + "; ".join(
            f"{r['label']}: {r['error']}" for r in failed))
    rk = doc.get("ranking") or {}
    by = {r["label"]: r for r in rows}
    if not rk or rk["fastest"] == rk["slowest"]:
        return {"lines": lines + ["fewer than two cells ran: nothing to compare"], "headline": None}
    slow, fast = by[rk["slowest"]], by[rk["fastest"]]
    rt = ratio(slow["stats"].get("examples_per_sec"), fast["stats"].get("examples_per_sec"))
    real = real_difference(slow["stats"].get("examples_per_sec"), fast["stats"].get("examples_per_sec"))
    n = min(slow["repeats"], fast["repeats"])
    figures = (f"{fmt(slow['stats'].get('examples_per_sec'))} vs {fmt(fast['stats'].get('examples_per_sec'))} "
               f"examples/s, {n} {'run' if n == 1 else 'runs'} each")
    # "slower"/"faster" only for a difference the repeats show; otherwise the sentence says what they do show
    if real:
        headline = (f"{slow['label']!r} is slower than {fast['label']!r}: {fmt_ratio(rt)} its throughput "
                    f"({figures}) — the min–max ranges of the repeats do not overlap: a real difference")
    elif n < 2:
        headline = (f"{slow['label']!r} measured {fmt_ratio(rt)} the throughput of {fast['label']!r} ({figures}) — "
                    "one run each cannot tell a difference from the machine's noise (--repeat 3 can)")
    else:
        headline = (f"{slow['label']!r} and {fast['label']!r} run at the same speed within the noise: "
                    f"{fmt_ratio(rt)} ({figures}) — the ranges of the repeats overlap")
    cause = cause_sentence(slow, fast) if real else None
    lines.append(headline)
    if cause:
        lines.append(cause)
    growth = _growth(slow, fast)
    whole = [fmt(x["stats"].get("step_time_ms")) for x in (fast, slow)]
    prof = [x.get("profiled_step_time_ms") or 0.0 for x in (fast, slow)]
    grew = (slow.get("step_time_ms") or 0.0) - (fast.get("step_time_ms") or 0.0)
    if grew > 0:
        cost = [fmt(x["stats"].get("input_cost_fraction"), 0, pct=True) for x in (fast, slow)]
        d = prof[1] - prof[0]
        window = (f"grew by {number(d)} ms" if round(d, 1) > 0 else
                  f"shrank by {number(-d)} ms" if round(d, 1) < 0 else "did not change")
        lines.append(f"step time over the whole run grew by {number(grew)} ms ({whole[0]} → {whole[1]} ms); the profiled "
                     f"window's step {window} ({number(prof[0])} → {number(prof[1])} ms); input cost "
                     f"(what-if) {cost[0]} → {cost[1]}"
                     + ("; most of the growth lies outside the profiled window (stalls the window did not catch)"
                        if grew > 2 * max(prof[1] - prof[0], 0.0) + 1.0 else ""))
    for g in growth[:3]:
        share = (f"; {100 * g['fast_share']:.0f} % → {100 * g['slow_share']:.0f} % of the step"
                 if g["slow_share"] is not None and g["fast_share"] is not None else "")
        lines.append(f"{g['category'].replace('_', ' ')} grew by {g['grew_ms']:.1f} ms/step "
                     f"({g['fast_ms']:.1f} → {g['slow_ms']:.1f} ms{share})")
    sto = []
    for key, words, unit, digits in STORAGE_FIGURES:
        a, b = fast["stats"].get(key), slow["stats"].get(key)
        if a or b:
            sto.append(f"{words} {fmt(a, digits, unit=unit)} → {fmt(b, digits, unit=unit)}")
    if sto:
        lines.append(f"storage and input, fastest → slowest ({fast['storage'].get('backend')}/"
                     f"{fast['storage'].get('mode')} → {slow['storage'].get('backend')}/{slow['storage'].get('mode')}): "
                     + ", ".join(sto))
    env = [d for d in doc.get("environment_diff") or [] if not str(d.get("name", "")).startswith("config.")]
    if machines and env:
        lines.append("environment differences (ranked by likely impact): " + "; ".join(
            f"{d['name']}: {d.get('a')} → {d.get('b')} ({d['impact']}: {d['why']})" for d in env[:3]))
    rec = None
    acts = [a for a in slow.get("actions") or [] if a.get("set")]
    if acts:
        eff = measured_effect(rows, slow, acts[0]["set"])
        rec = {"advice": acts[0]["advice"], "set": acts[0]["set"], "measured": eff}
        if eff:
            verdict = "confirmed" if eff["confirmed"] else "not confirmed here"
            lines.append(f"top recommendation for {slow['label']!r}: {acts[0]['advice']} — measured in this "
                         f"comparison by cell {eff['cell']!r}: {fmt_ratio(eff['speedup'])} → {verdict}")
        else:
            lines.append(f"top recommendation for {slow['label']!r}: {acts[0]['advice']} — not measured in this "
                         f"comparison (`tfbertperf analyze {slow['run_dir']} --validate` measures it)")
    elif slow.get("recommendations"):
        lines.append(f"top recommendation for {slow['label']!r}: {slow['recommendations'][0]}")
    measured = []  # any cell's advice that another cell of this comparison is exactly
    for r in rows:
        for a in [a for a in r.get("actions") or [] if a.get("set")][:3]:
            eff = measured_effect(rows, r, a["set"])
            if eff and not (r is slow and rec and a["advice"] == rec["advice"]):
                measured.append({"cell": r["label"], "advice": a["advice"], **eff})
                lines.append(f"advice for {r['label']!r} measured by cell {eff['cell']!r}: {a['advice']} → "
                             f"{fmt_ratio(eff['speedup'])}, "
                             f"{'confirmed' if eff['confirmed'] else 'not confirmed here'}")
    return {"lines": lines, "headline": headline, "cause": cause,
            "answer": headline + (f"; {cause}" if cause else ""), "measured_advice": measured, "real": real, "ratio": rt, "growth": growth,
            "storage": sto, "environment": env[:3] if machines else [], "recommendation": rec}
