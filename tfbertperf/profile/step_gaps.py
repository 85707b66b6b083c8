"""A loop that fetches its batch between its step markers: the wait for input falls outside every step (issue 29).

A TensorFlow loop written as many users write it,

    for i, batch in enumerate(dataset):
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            train_step(batch)

marks only the compute: `for` pulls the batch (`IteratorGetNext` on the loop's thread) before the marker opens.
A JAX loop marked as JAX's profiling docs show (`with jax.profiler.StepTraceAnnotation("train", step_num=i):`
around the step, `for batch in loader` outside it) does the same with a Python loader: its frames (the Python
tracer's, judged as profile/host_loader.py judges a loader inside a step) fall between the markers, and a loop
waiting 5 ms a batch in front of a 7 ms XLA step read "compute-bound, input 0 %" (truth 49 %).
xprof's step table, and every reading built on it, then see steps with no wait for input, and a loop that spends
95 % of its time waiting for a slow map read "compute-bound, input 4 %" (a serial map waiting 20 ms a batch before
a 2 ms step: 30 ms between markers).  The loop's step is what runs from one step's start to the next's (profile/
steps.py: the definition the device path uses already), so where the gaps between a thread's markers hold that
thread's get-next (or its loader frames), each step is widened to the next marker's start: the get-next (the
loader's) time in its gap is input, the rest of the gap other.  Steps whose gaps hold no get-next (Keras' own
callbacks between ProfileCallback's markers, the step file's measure too) are left as they are.
"""

from __future__ import annotations

import re

import numpy as np

from tfbertperf.profile import host_loader, outside_steps
from tfbertperf.profile import intervals as iv
from tfbertperf.profile.steptable import step_number
from tfbertperf.profile.trace import load_trace

# the loop thread's own fetch of a batch: an eager IteratorGetNext (`next(iterator)`, `for batch in dataset`)
FETCH = re.compile(r"^(IteratorGetNextOp::DoCompute|IteratorGetNextAsOptionalOp::DoCompute|"
                   r"EagerLocalExecute: IteratorGetNext)")
PS_PER_MS = 1e9


def note(att: dict) -> list[str]:
    """The console's line for a capture whose steps were widened (attribution.steps_widened_ms) by 5 % or more of
    the step, or whose gaps between markers no figure counts (steps_gap_unexplained_ms), else []."""
    ms, odd = att.get("steps_widened_ms"), att.get("steps_gap_unexplained_ms")
    if odd:
        return [f"the loop spends {odd:.2f} ms a step between its step markers (the median gap) in work the capture "
                f"cannot name, and no figure here counts it: put the whole step, its batch's fetch included, inside "
                f"the marker (tfbertperf.tf_steps / jax_steps StepTimer: `timer.steps(...)`), or capture a JAX loop "
                f"with its Python tracer on (the default)"]
    if not ms or ms < 0.05 * float(att.get("step_time_ms") or 0.0):  # a queue get of a batch made ahead: nothing to say
        return []
    jax = att.get("input_python_loader_ms_per_step") is not None  # a Python loader's capture (host_loader.py)
    return [f"the loop fetches its batches between its step markers ({ms:.2f} ms a step): each step counted to the "
            f"next marker's start, the fetch as input — fetch inside the marker ("
            + ("tfbertperf.jax_steps.StepTimer: `for batch in timer.steps(loader, step, state)`" if jax else
               "tfbertperf.tf_steps.StepTimer: `for step, batch in timer.steps(dataset)`")
            + ") so that every tool sees it"]


GAP_SHARE = 0.2  # gaps between markers this share of the step (start to start) or more: said where unexplained


def keys(gap_ms: float, xplanes) -> dict:
    """The attribution's keys: steps_widened_ms where widen() widened the steps; else, on a host capture
    (`xplanes` not None), steps_gap_unexplained_ms where unexplained() finds gaps no figure counts; else {}."""
    if gap_ms:
        return {"steps_widened_ms": round(gap_ms, 4)}
    ms = unexplained(xplanes) if xplanes else None
    return {"steps_gap_unexplained_ms": round(ms, 4)} if ms else {}


def unexplained(xplanes) -> float | None:
    """The median gap (ms) from one step marker's end to the next's start on the loop's thread, where it is
    GAP_SHARE or more of the median step start to start and no gap holds a fetch the capture can name
    (keys() asks where widen() found none): time the loop spends outside its markers that no figure counts (a JAX
    loop's loader captured without the Python tracer); else None.  Not on a capture that runs tf.data: a Keras fit's
    gaps are its own callbacks, its fetch inside the marked train function."""
    trace, gaps, spans = load_trace(xplanes), [], []
    if host_loader.tf_data(trace):
        return None
    for thread, marks in _by_thread(trace).values():
        cut = thread.start[thread.mask(lambda n: n == outside_steps.EVENT)]
        for m, nxt in zip(marks, marks[1:]):
            if not ((cut >= m.end) & (cut < nxt.start)).any():  # a gap that holds a validation is not the loop's
                gaps.append(max(0, nxt.start - m.end))
                spans.append(nxt.start - m.start)
    if not gaps:
        return None
    gap, span = float(np.median(gaps)), float(np.median(spans))
    return gap / PS_PER_MS if span > 0 and gap >= GAP_SHARE * span else None


def _by_thread(trace) -> dict:
    """{id(thread): (thread, its step markers in order)}"""
    by_thread: dict = {}
    for thread, ev in trace.markers():
        by_thread.setdefault(id(thread), (thread, []))[1].append(ev)
    return by_thread


def gaps_by_step(xplanes) -> dict[int, tuple[float, float]]:
    """Per step number, (the gap after its marker up to the next marker's start on the same thread, the loop
    thread's get-next time — or its loader frames' — in that gap), ms — only steps whose gap holds one; {} where
    none does."""
    trace = load_trace(xplanes)
    by_thread = _by_thread(trace)
    loaders = host_loader.loader_spans(trace) if by_thread else {}
    out: dict[int, tuple[float, float]] = {}
    for key, (thread, marks) in by_thread.items():
        fetch = thread.mask(FETCH)
        parts = [np.column_stack([thread.start[fetch], thread.end[fetch]])] if fetch.any() else []
        parts += [loaders[key]] if key in loaders and len(loaders[key]) else []
        spans = iv.union(np.concatenate(parts)) if parts else None
        cut = thread.start[thread.mask(lambda n: n == outside_steps.EVENT)]  # validation, epoch end: not the step's
        for m, nxt in zip(marks, marks[1:]):
            if spans is None or nxt.start <= m.end or m.step_num is None:
                continue
            end = min([nxt.start, *(int(c) for c in cut if m.end <= c < nxt.start)])
            waited = iv.length(iv.clip(spans, m.end, end))
            if waited > 0:
                out[m.step_num] = ((end - m.end) / PS_PER_MS, waited / PS_PER_MS)
    return out


def widen(rows: list[dict], xplanes) -> tuple[list[dict], float, float]:
    """xprof's step rows, each step whose gap holds the loop's fetch widened by its gap (gaps_by_step): the fetch
    time to input, the rest of the gap to other; the mean gap added a step and the mean fetch time in it (0.0, 0.0
    where none was)."""
    gaps = gaps_by_step(xplanes)
    if not gaps or not rows:
        return rows, 0.0, 0.0
    out, added = [], []
    for r in rows:
        gap, wait = gaps.get(step_number(r["step"]), (0.0, 0.0))
        added.append((gap, wait))
        out.append({**r, "step_time_ms": r["step_time_ms"] + gap, "input": r["input"] + wait,
                    "other": r["other"] + gap - wait})
    return out, sum(g for g, _ in added) / len(added), sum(w for _, w in added) / len(added)
