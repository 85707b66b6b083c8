"""Steps read from the step markers themselves, where xprof's step table has none.

xprof builds its step table from the groups its event forest makes, rooted at markers opened with `_r=1`.  Keras'
own `TensorBoard(profile_batch=…)` callback writes its markers ("Profiled batch", step_num = the batch within its
epoch) without it, so xprof finds no step in its captures.  And when each marked step runs a TensorFlow
while loop — Keras' `model.compile(steps_per_execution=N)`, N > 1, runs N batches per `train_function` call in a
`tf.while_loop`; a custom loop can do the same — xprof makes each loop iteration a group of its own (the executor
events carry an `iter_num`) and leaves the user's markers out: its step table is empty, and TensorBoard's input
pipeline and overview pages show no step.  The markers are still in the trace (ProfileCallback's
`Trace("train", step_num=i, _r=1)`, one per call), so the steps are read from them, one row per marker:

  step_time_ms   the marker's wall time (one call: N batches)
  input          the time the step blocked in get-next (contention.step_contention's reading, the same as
                 xprof's own input column: equal to the µs on captures xprof does group)
  host_compute   the union of the other events on the non-input threads inside the marker, less that wait
  other          the rest of the marker

`batches_per_step` is N as the trace shows it: the median, over the markers, of the loop iterations inside one
(the group ids of the events in the marker's span, each with at least a quarter of the largest one's events: the
loop's last test of its condition is a group of its own with a few events, 9 against ~280 in a Keras MLP's).
As xprof does, the capture's first and last marker are left out (a ProfileCallback capture runs one step more on
each side for that).
"""

from __future__ import annotations

import statistics
from collections import Counter

from tfbertperf.profile import contention
from tfbertperf.profile import intervals as iv
from tfbertperf.profile.steptable import CATEGORIES

LOOP = ("xprof's step table is empty: it made each iteration of the step's TensorFlow while loop a step of its own "
        "(Keras steps_per_execution > 1), so the steps here are read from the step markers")
NOT_ROOT = ("xprof's step table is empty: its steps come only from root markers (Trace(name, step_num=i, _r=1)), and "
            "these are not (Keras' TensorBoard(profile_batch) writes them so), so the steps here are read from them; "
            "tfbertperf.keras.ProfileCallback also records the step times and the threads' CPU")


def describe(batches_per_step: int | None) -> dict:
    """attribution.step_table (report/SCHEMA.md) for steps read from the markers: {"from": "markers",
    "batches_per_step", "notes": the lines analyze prints under its table}."""
    loop = bool(batches_per_step and batches_per_step > 1)
    notes = [f"a step here is one call of the training function: {batches_per_step} batches (steps_per_execution="
             f"{batches_per_step}), so ms/step is per {batches_per_step} batches", LOOP] if loop else [NOT_ROOT]
    return {"from": "markers", "batches_per_step": batches_per_step, "notes": notes}


def _marker(e: dict) -> int | None:
    num = str((e.get("args") or {}).get("step_num", ""))
    return int(num) if num.lstrip("-").isdigit() else None


def rows(trace: dict, waits: dict | None = None) -> tuple[list[dict], int | None]:
    """(step rows in steptable.step_rows' form, batches_per_step) from a trace_viewer dict's markers; ([], None)
    when the trace has fewer than three markers (nothing left once the first and last are out).  `waits`:
    step_contention(trace)["steps"] where the caller has read it already."""
    threads = contention.thread_table(trace)["threads"]
    marks, other, groups = [], [], []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        num, span = _marker(e), (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        if num is not None:
            marks.append((num, None, *span, "group_id" in e["args"]))
        elif not contention.is_input_thread(threads.get((e.get("pid"), e.get("tid")), "")):
            other.append(span)
            if "group_id" in (e.get("args") or {}):
                groups.append((span[0], e["args"]["group_id"]))
    marks = contention.marked(marks)  # the steps step_contention reads, numbered as it numbers them
    if len(marks) < 3:
        return [], None
    busy = iv.union(other) if other else iv.EMPTY
    waits = waits if waits is not None else contention.step_contention(trace)["steps"]
    out, per_marker = [], []
    for num, _, start, end in marks[1:-1]:
        step_ms = (end - start) / 1e3
        wait = min(step_ms, (waits.get(num) or {}).get("wait_ms", 0.0))
        covered = float(iv.length(iv.clip(busy, start, end))) / 1e3
        row = {"step": str(num), **{c: 0.0 for c in CATEGORIES}, "step_time_ms": step_ms, "input": wait}
        row["host_compute"] = max(0.0, min(covered, step_ms) - wait)
        row["other"] = step_ms - wait - row["host_compute"]
        out.append(row)
        sizes = Counter(g for t, g in groups if start <= t < end)  # events per loop iteration in the marker
        per_marker.append(sum(n >= max(sizes.values()) / 4 for n in sizes.values()) if sizes else 0)
    n = statistics.median(per_marker) if per_marker else 0
    return out, (int(n) if n >= 1 else None)
