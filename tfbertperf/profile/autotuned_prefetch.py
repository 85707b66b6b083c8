"""A tf.data prefetch that sizes its own buffer, seen in the capture: where a user's fit measured its what-if with
ProfileCallback's probe, the figure is a lower bound (issue 29; BENCHMARKS.md, "the probe and tf.data's
autotuned prefetch").

tf.data's legacy prefetch autotuner (`prefetch(tf.data.AUTOTUNE)`, and the prefetch tf.data injects after a
`.repeat()` that ends a pipeline: `Options.experimental_optimization.inject_prefetch`, on by default) doubles its
buffer each time the buffer fills to its limit and is then drained to empty.  A fit whose pipeline is slower than
its step keeps that buffer empty and never grows it; each probe block pauses the real pipeline for tens of
milliseconds, the buffer fills, the real steps after it drain it, and the limit doubles — so within a few blocks
the real steps between blocks all run on batches banked during the pauses, faster than the fit runs without the
probe, and T, hence the input cost (T − T_c) / T, reads low.  Measured on Keras' TensorFlow backend (a per-example
map, the probe against a plain fit beside it): with `prefetch(tf.data.AUTOTUNE)` at the end 23.7–33.0 % against
45.3–55.8 % (−18 to −26 pp, five pairs), with the injected prefetch 9–34 pp low; with a fixed `prefetch(2)` and
nothing injected −2.2 to +7.0 pp.  The recovery rule (train/recovery.py) cannot see it: the fit never returns to
its own pace between blocks.

The capture shows such a prefetch: its iterator events carry `autotune: true` and `autotune_mode` (columns.py
HostThread.prefetch).  `mark` keeps an input-bound verdict whose measured figure already reaches the line (a lower
bound above it), and makes one below the line undecided between compute and input, its first action the fix for
measuring: a fixed prefetch size and no injected prefetch while the probe runs.  Only for a user's fit (no run
report: `run`'s own probe is measured against its truth in BENCHMARKS.md, not this).
"""

from __future__ import annotations

import numpy as np

from tfbertperf.profile.xspace_wire import MISSING

FIX = ("for the measuring fit give every prefetch a fixed size — `prefetch(2)` in place of "
       "`prefetch(tf.data.AUTOTUNE)` — and turn tf.data's injected one off (`options = tf.data.Options(); "
       "options.experimental_optimization.inject_prefetch = False; ds = ds.with_options(options)`), then measure "
       "again with ProfileCallback(probe=True)")


def from_line(line, names, table, strings) -> tuple:
    """(iterator name, autotune mode, largest buffer_limit recorded) per autotuned prefetch among a host line's
    events (its `autotune`, `autotune_mode` and `buffer_limit` stats: xspace.HOST_STATS)."""
    auto = line.stats.get("autotune")
    true = [i for i, v in enumerate(strings) if v == "true"]
    if auto is None or not true:
        return ()
    hit = np.flatnonzero(np.isin(auto, true))
    mode, limit = line.stats.get("autotune_mode"), line.stats.get("buffer_limit")
    out: dict = {}
    for i in hit.tolist():
        key = (names.values[table[i]], strings[mode[i]] if mode is not None and mode[i] >= 0 else "")
        out[key] = max(out.get(key, 0), int(limit[i]) if limit is not None and limit[i] != MISSING else 0)
    return tuple((name, m, lim) for (name, m), lim in sorted(out.items()))


def words(found: list[dict]) -> str:
    """The prefetches in a clause: "Iterator::Root::Prefetch (legacy autotune)"."""
    return ", ".join(f"{f['iterator']}" + (f" ({f['autotune_mode']} autotune)" if f["autotune_mode"] else "")
                     for f in found)


def mark(decided: dict, att: dict, threshold: float) -> dict:
    """`decided` with the what-if read as a lower bound where the capture shows an autotuned prefetch and a user's
    probe measured the figure (module docstring); else `decided` unchanged."""
    found, icf = att.get("autotuned_prefetch"), att.get("input_cost_fraction")
    if not found or icf is None or decided.get("bottleneck") not in ("input", "compute"):
        return decided
    why = (f"the what-if {icf:.0%} is a lower bound: the capture shows tf.data prefetching with a buffer it sizes "
           f"itself ({words(found)}), which grows at each of the probe's pauses, so the real steps between its "
           "blocks ran on batches banked during them")
    decided = {**decided, "summary": f"{decided['summary']}; {why}"}
    und = decided.get("undecided")
    if decided["bottleneck"] == "input" and not und:  # a lower bound above the line: input-bound all the more
        return decided
    acts = decided.get("actions") or [{"advice": r, "set": []} for r in decided.get("recommendations") or []]
    if und:  # its interval straddles the line: a longer fit reads low the same way, the fix decides
        acts = acts[1:]
    decided["undecided"] = {**(und or {"between": ["compute", "input"], "input_cost_fraction": round(icf, 4),
                                       "ci95": att.get("input_cost_ci95"), "threshold": threshold}),
                            "probe_steps_to_decide": None, "longer_by": None, "source": "autotuned_prefetch"}
    advice = f"measure again before acting on this verdict, with the probe reading the fit's own pace: {FIX}"
    decided["actions"] = [{"advice": advice, "set": []}, *acts]
    decided["recommendations"] = [a["advice"] for a in decided["actions"]]
    return decided
