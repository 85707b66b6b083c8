"""A Python loader's time inside the steps of a capture whose compute runs on the host CPU, where xprof sees none.

xprof's CPU step table counts as input only tf.data's get-next; everything else in a step is host compute.  A JAX
loop on the CPU (`tfbertperf.jax_steps.StepTimer`, or Keras on its JAX backend) that builds its batches in Python —
a generator that reads or waits, a `PyDataset.__getitem__`, NumPy augmentation — read "compute-bound, input 0 %"
where the loader was most of the step (a 5 ms sleep a batch in front of a 0.2–1 ms step): the loader ran on the
training thread inside the step marker and was filed as compute.  With the Python tracer's frames in the capture
(JAX records them by default), the training thread's loader frames are the ones the device-idle reading already
judges (profile/idle.py rule 3: an outermost frame that hands nothing to the device and runs before the step's
first hand-off or ends in loader work, and the part of a hand-off frame before its first hand-off); their time
inside each step moves from host compute (then other) to input.

Left alone: a capture that runs tf.data (its get-next is the input xprof already counts, and the Python frames of a
TensorFlow program before its function call are Keras' own), and one with no Python frames (nothing to tell a
loader from compute: the answer then says the input is the blocked wait only, as before).
"""

from __future__ import annotations

from tfbertperf.profile import idle
from tfbertperf.profile import intervals as iv
from tfbertperf.profile.steptable import step_number
from tfbertperf.profile.trace import load_trace

PS_PER_MS = 1e9


def loader_ms_by_step(xplanes) -> dict[int, float]:
    """Per step number, the ms the training thread spent in Python loader frames inside that step's marker; {} where
    the module docstring leaves the capture alone."""
    trace = load_trace(xplanes)
    if not trace.python_tracer or any(t.mask(idle.GET_NEXT).any() or t.name.startswith("tf_data")
                                      for t in trace.threads):
        return {}
    out: dict[int, float] = {}
    for t in trace.threads:
        marks = [t.event(i) for i in t.marker_index().tolist()]
        if not marks:
            continue
        frames = iv.union(idle._python_frames(t, marks)[0])
        for m in marks:
            out[m.step_num] = out.get(m.step_num, 0.0) + iv.length(iv.clip(frames, m.start, m.end)) / PS_PER_MS
    return out


def move_to_input(rows: list[dict], xplanes) -> tuple[list[dict], float | None]:
    """xprof's step rows with each step's loader time moved from host compute (then other) to input, and the mean
    moved a step (None where nothing was read: loader_ms_by_step gave nothing)."""
    loader = loader_ms_by_step(xplanes)
    if not loader:
        return rows, None
    moved = []
    for r in rows:
        ms = loader.get(step_number(r["step"]), 0.0)
        take = min(ms, r["host_compute"] + r["other"])
        from_compute = min(take, r["host_compute"])
        r = {**r, "input": r["input"] + take, "host_compute": r["host_compute"] - from_compute,
             "other": r["other"] - (take - from_compute)}
        moved.append((r, take))
    return [r for r, _ in moved], (sum(t for _, t in moved) / len(moved) if moved else None)
