"""A Python loader's time inside the steps of a capture whose compute runs on the host CPU, where xprof sees none.

xprof's CPU step table counts as input only tf.data's get-next; everything else in a step is host compute.  A JAX
loop on the CPU (`tfbertperf.jax_steps.StepTimer`, or Keras on its JAX backend) that builds its batches in Python —
a generator that reads or waits, a `PyDataset.__getitem__`, NumPy augmentation — read "compute-bound, input 0 %"
where the loader was most of the step (a 5 ms sleep a batch in front of a 0.2–1 ms step): the loader ran on the
training thread inside the step marker and was filed as compute.  With the Python tracer's frames in the capture
(JAX records them by default), the training thread's loader frames — of the frames the device-idle reading judges
(profile/idle.py rule 3), the outermost ones that hand nothing to the device and end in loader work (a sleep, a read,
NumPy, `next`, a queue get) — move, by their time inside each step, from host compute (then other) to input.  Not
the rule's other part, the Python before the step's first hand-off: on the host that is also the framework's own
(Keras' trainer on JAX spent ~150 µs of a 1.1 ms step there, beside a 135 µs `next` over its array slicing).

The same capture's compute is XLA's CPU runtime (`ThunkExecutor::Execute` on its `tf_XLA…` threads), which xprof's
table files as "other": a jitted JAX step fed from memory read "bound by other time … compile with XLA" (94.7 % other,
BENCHMARKS.md).  The union of those executions inside each step moves from other to host compute.

Left alone: a capture that runs tf.data (its get-next is the input xprof already counts, and the Python frames of a
TensorFlow program before its function call are Keras' own), and one with no Python frames (nothing to tell a
loader from compute: the answer then says the input is the blocked wait only, as before).
"""

from __future__ import annotations

import re

import numpy as np

from tfbertperf.profile import idle
from tfbertperf.profile import intervals as iv
from tfbertperf.profile.steptable import step_number
from tfbertperf.profile.trace import load_trace

PS_PER_MS = 1e9


XLA_CPU_RUN = re.compile(r"^ThunkExecutor::Execute$")
RESULT_WAIT = re.compile(r"^\$\S+ (block_until_ready|convert_to_numpy)$")
"""A Python frame that waits for XLA's result (jax.block_until_ready; Keras-JAX's convert_to_numpy of the step's
logs): the step's compute has not finished, whether or not XLA's threads are on a core.  On a busy machine they
are not, all the time: a JAX step fed from memory held 7.7 ms of a 7.9 ms step in block_until_ready while its XLA
events covered less, and 12.5 % of it read "other" (beside two busy processes on 2 cores)."""


def _tf_data(trace) -> bool:
    return any(t.mask(idle.GET_NEXT).any() or t.name.startswith("tf_data") for t in trace.threads)


def loader_ms_by_step(xplanes) -> dict[int, float]:
    """Per step number, the ms the training thread spent in Python loader frames inside that step's marker; {} where
    the module docstring leaves the capture alone."""
    trace = load_trace(xplanes)
    if not trace.python_tracer or _tf_data(trace):
        return {}
    out: dict[int, float] = {}
    for t in trace.threads:
        marks = [t.event(i) for i in t.marker_index().tolist()]
        if not marks:
            continue
        frames = iv.union(idle._python_frames(t, marks, loader_only=True)[0])
        for m in marks:
            out[m.step_num] = out.get(m.step_num, 0.0) + iv.length(iv.clip(frames, m.start, m.end)) / PS_PER_MS
    return out


def xla_cpu_ms_by_step(xplanes) -> dict[int, float]:
    """Per step number, the wall time XLA's CPU runtime ran, or a thread waited for its result (RESULT_WAIT), inside
    that step (the union over the threads); {} for a capture that runs tf.data or shows no such run."""
    trace = load_trace(xplanes)
    runs = [iv.from_columns(t.start[m], t.end[m]) for t in trace.threads
            for m in [t.mask(XLA_CPU_RUN) | t.mask(RESULT_WAIT)] if m.any()]
    if not runs or _tf_data(trace):
        return {}
    busy = iv.union(np.concatenate(runs))
    return {m.step_num: iv.length(iv.clip(busy, m.start, m.end)) / PS_PER_MS for _, m in trace.markers()}


def move_to_input(rows: list[dict], xplanes) -> tuple[list[dict], float | None]:
    """xprof's step rows with each step's loader time moved from host compute (then other) to input and XLA's CPU
    runtime from other to host compute, and the loader's mean a step (None where loader_ms_by_step gave nothing)."""
    loader, xla = loader_ms_by_step(xplanes), xla_cpu_ms_by_step(xplanes)
    moved = []
    for r in rows:
        n = step_number(r["step"])
        take = min(loader.get(n, 0.0), r["host_compute"] + r["other"])
        from_compute = min(take, r["host_compute"])
        r = {**r, "input": r["input"] + take, "host_compute": r["host_compute"] - from_compute,
             "other": r["other"] - (take - from_compute)}
        run = min(xla.get(n, 0.0), r["other"])  # XLA's CPU runtime: compute xprof filed as other
        moved.append(({**r, "host_compute": r["host_compute"] + run, "other": r["other"] - run}, take))
    return [r for r, _ in moved], (sum(t for _, t in moved) / len(moved) if moved and loader else None)
