"""The max-accelerators search (MLPerf Storage's headline figure): the largest number N of emulated devices whose
AU stays ≥ the threshold, found with short runs.

AU falls as N grows (demand = N × batch ÷ step time, while the pipeline's ceiling is fixed), so the search doubles
N until a run fails, then bisects between the last pass and the first fail; N + 1 is always measured, so the
report shows the AU on both sides of the edge.  `measure(n)` is the caller's short run.
"""

from __future__ import annotations

from typing import Callable


def search(measure: Callable[[int], dict], threshold: float, n_max: int = 4096,
           progress: Callable[[str], None] | None = None, confirm: int = 1) -> dict:
    """Args:
      measure: n → {"au": float, "examples_per_sec": float, …} from one short run with n emulated devices.
      threshold: AU pass mark (profile.au_threshold).
      n_max: the search stops there (N = n_max when even that passes).
      confirm: a failing N is run up to this many times more and passes if any run passes (the best run is
        kept): on a shared machine one short run can fail on another tenant's burst, and a false fail halves
        the search's answer.
    Returns:
      {"n", "au_at_n", "au_at_n_plus_1", "examples_per_sec_at_n", "examples_per_sec_at_n_plus_1", "threshold",
       "trials": [{"accelerators", "au", "examples_per_sec", "pass"}] every run in order}; the AU at an N is its
      best run's; n = 0 when one device
      already fails (au_at_n and examples_per_sec_at_n are then None).
    """
    say = progress or (lambda _m: None)
    seen: dict[int, dict] = {}
    trials: list[dict] = []

    def run(n: int) -> bool:
        if n in seen:
            return seen[n]["pass"]
        for _ in range(1 + max(0, confirm)):
            if n in seen and seen[n]["pass"]:
                break
            m = measure(n)
            t = {"accelerators": n, "au": float(m["au"]), "examples_per_sec": float(m["examples_per_sec"]),
                 "pass": bool(m["au"] >= threshold)}
            trials.append(t)
            say(f"max-accelerators: N={n}  AU {m['au']:.1%}  {m['examples_per_sec']:.1f} examples/s  "
                f"{'pass' if t['pass'] else 'fail'}")
            if n not in seen or t["au"] > seen[n]["au"]:
                seen[n] = t
        return seen[n]["pass"]

    lo, hi = 0, None  # lo: largest passing N known; hi: smallest failing N known
    n = 1
    while n <= n_max:
        if run(n):
            lo, n = n, n * 2
        else:
            hi = n
            break
    if hi is None:
        hi = n_max + 1
        lo = max(lo, 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(mid):
            lo = mid
        else:
            hi = mid
    if lo + 1 <= n_max:
        run(lo + 1)
    at, nxt = seen.get(lo), seen.get(lo + 1)
    return {"n": lo, "au_at_n": at and round(at["au"], 6), "au_at_n_plus_1": nxt and round(nxt["au"], 6),
            "examples_per_sec_at_n": at and round(at["examples_per_sec"], 3),
            "examples_per_sec_at_n_plus_1": nxt and round(nxt["examples_per_sec"], 3),
            "threshold": threshold, "trials": trials}
