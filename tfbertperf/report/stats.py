"""Repeated measurements: the median with its spread (min–max), and the rule that calls a difference real.

A figure measured N times is summarised as {"median", "min", "max", "n"}.  Two figures differ for real only when
their min–max ranges do not overlap; with one measurement each (no spread) nothing is called real.  Ratios of two
repeated figures carry the range of the ratios the extremes allow (worst and best case)."""

from __future__ import annotations

import statistics


def summary(values) -> dict | None:
    """{"median", "min", "max", "n"} of the numbers in `values` (None entries are skipped); None when empty."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return {"median": round(statistics.median(xs), 6), "min": round(min(xs), 6), "max": round(max(xs), 6),
            "n": len(xs)}


def overlap(a: dict | None, b: dict | None) -> bool:
    """Whether the min–max ranges of two summaries overlap (True when either is missing or has n < 2)."""
    if not a or not b or a["n"] < 2 or b["n"] < 2:
        return True
    return not (a["max"] < b["min"] or b["max"] < a["min"])


def ratio(num: dict | None, den: dict | None) -> dict | None:
    """num ÷ den of two summaries: median ÷ median, with the range min ÷ max … max ÷ min."""
    if not num or not den or not den["median"] or not den["min"] or not den["max"]:
        return None
    return {"median": round(num["median"] / den["median"], 4), "min": round(num["min"] / den["max"], 4),
            "max": round(num["max"] / den["min"], 4)}


def real_difference(a: dict | None, b: dict | None) -> bool:
    """A difference is real when both were measured at least twice and their min–max ranges are apart."""
    return bool(a and b and a["n"] >= 2 and b["n"] >= 2 and not overlap(a, b))


def number(x: float, digits: int = 1) -> str:
    """x with `digits` decimals, never "-0.0": a value that rounds to zero is shown as zero."""
    out = f"{x:.{digits}f}"
    return out[1:] if out.startswith("-") and not out.strip("-0.") else out


def fmt(s: dict | None, digits: int = 1, pct: bool = False, unit: str = "") -> str:
    """'12.3 (11.9–12.8)' — the median and, when measured more than once, its range; '—' when missing."""
    if not s:
        return "—"
    k = 100.0 if pct else 1.0
    u = " %" if pct else unit
    med = number(k * s["median"], digits)
    if s.get("n", 1) < 2 or s["min"] == s["max"]:
        return f"{med}{u}"
    return f"{med}{u} ({number(k * s['min'], digits)}–{number(k * s['max'], digits)})"


def fmt_ratio(r: dict | None) -> str:
    if not r:
        return "—"
    if r["min"] == r["max"]:
        return f"{r['median']:.2f}×"
    return f"{r['median']:.2f}× (spread {r['min']:.2f}–{r['max']:.2f}×)"
