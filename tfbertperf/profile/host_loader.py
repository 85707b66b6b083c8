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

A loader run ahead in a thread of its own (the loader advice followed: a `threading.Thread` filling a queue, a
PyDataset's worker threads) takes no time inside the steps: its cost is the CPU it takes from XLA's CPU step on the
same cores.  With the thread-CPU record StepTimer writes beside the capture (profile/threadcpu.py: each thread's CPU
over the window by its capture line), the process's other Python threads' CPU (less the Python tracer's cost of the
frames it recorded on them, PY_FRAME_COST_US) is spread over the time their frames run (less their waits: a queue
`put` on a full queue, a sleep), a child process's (a loader in worker processes: Grain's, PyTorch's DataLoader) over
the whole capture, which records none of its work, and the part that overlapped XLA's CPU runtime costs the step by
contention.py's rule: X × f × C × p, f the fair-share loss per core-ms of k̄ loader threads beside a compute W wide
on C cores, p the share of XLA's compute CPU on its intra-op pool (`tf_XLAEigen`: parallel regions a preempted part
holds up whole) against the training thread and XLA's client threads (thread_stolen_by_step), and at most what
the pool's threads waited for a core (their run-queue time in the record, a step): a loader that has the cores to
itself between XLA's runs (a 12 ms NumPy loader in front of a 7 ms step) runs at more than its fair share, and
the share read 6.7 ms a step where the truth was 4.7 and the pool waited 4.5.  Found on
tests/programs/jax_cpu_loader.py --thread / --process (issue 29): a thread or a process making NumPy batches beside
a 7 ms XLA step read "compute-bound, input 0–0.5 %" against truths of 15–43 %.

A loader thread that runs Python holds the interpreter lock: the training thread, outside XLA's run (returning
from its wait for XLA's result: Keras-JAX's convert_to_numpy of the step's logs, block_until_ready; inside Keras'
and JAX's own dispatch), waits out the loader's Python.  A Keras fit on JAX fed by `PyDataset(workers=2)` threads
computing 8 ms of Python a batch read "compute-bound, 13-14 %" against a measured what-if of 82-91 %.  So the
training thread's time in a step outside XLA's runs, its result wait before the last run ended and its own waits,
where another Python thread ran Python (idle.running_python: not in a wait) and outside its loader frames, moves to
input (lock_wait_by_step; `input_interpreter_held_ms`), scaled by two measured bounds from the thread-CPU record:
the thread cannot have waited longer than it was not running (that time less its CPU clock), and the lock is held
for the loader's CPU without the Python tracer's frames (less PY_FRAME_COST_US a frame: a pure-Python loader runs
5-10x slower under the tracer, and its captured lock waits with it).  Without a record, only the result wait after
XLA's last run counts.  Not where child processes load (the pool's threads here only carry their batches).

Left alone: a capture that runs tf.data (its get-next is the input xprof already counts, and the Python frames of a
TensorFlow program before its function call are Keras' own), and one with no Python frames (nothing to tell a
loader from compute: the answer then says the input is the blocked wait only, as before).
"""

from __future__ import annotations

import re

import numpy as np

from tfbertperf.profile import idle, threadcpu
from tfbertperf.profile import intervals as iv
from tfbertperf.profile.columns import is_python_frame
from tfbertperf.profile.steptable import step_number
from tfbertperf.profile.trace import load_trace

PS_PER_MS = 1e9


XLA_CPU_RUN = re.compile(r"^ThunkExecutor::Execute$")
RESULT_WAIT = re.compile(r"^\$\S+ (block_until_ready|convert_to_numpy)$")
"""A Python frame that waits for XLA's result (jax.block_until_ready; Keras-JAX's convert_to_numpy of the step's
logs): the step's compute has not finished, whether or not XLA's threads are on a core.  On a busy machine they
are not, all the time: a JAX step fed from memory held 7.7 ms of a 7.9 ms step in block_until_ready while its XLA
events covered less, and 12.5 % of it read "other" (beside two busy processes on 2 cores)."""


_RUN_OR_WAIT = re.compile(f"{XLA_CPU_RUN.pattern}|{RESULT_WAIT.pattern}")  # one rule: its mask is cached per plane


PY_FRAME_COST_US = 0.2
"""The Python tracer's cost per frame it records, on the CPU of the thread running the frame: a pure-Python loader
of fixed work (tests/programs/jax_cpu_loader.py --loader python --thread, 2 and 5 ms a batch unprofiled) used 8.8 and
32.7 ms of CPU a step under the tracer for 38,000 and 116,000 recorded frames: 0.18 and 0.24 µs a frame."""
XLA_POOL = re.compile(r"^tf_XLAEigen")  # XLA's CPU intra-op threads: an op's parallel parts (profile/contention.py)


def tf_data(trace) -> bool:
    return any(t.mask(idle.GET_NEXT).any() or t.name.startswith("tf_data") for t in trace.threads)


def _loader_frames(trace) -> dict[int, tuple]:
    """Per training thread (by id): (the thread, its step markers, its loader frames as merged intervals: the frames
    that end in loader work, idle.py rule 3 with loader_only); read once per capture (move_to_input and
    step_gaps.py both ask: the Trace is built once and only read, trace.py)."""
    if "_loader_frames" not in trace.__dict__:
        out = {}
        for t in trace.threads:
            marks = [t.event(i) for i in t.marker_index().tolist()]
            if marks:
                out[id(t)] = (t, marks, iv.union(idle._python_frames(t, marks, loader_only=True)[0]))
        trace.__dict__["_loader_frames"] = out
    return trace.__dict__["_loader_frames"]


def loader_spans(trace) -> dict[int, np.ndarray]:
    """Per thread with step markers (by id), its loader frames as merged intervals (_loader_frames), also those
    between its markers (profile/step_gaps.py); {} where the module docstring leaves the capture alone."""
    if not trace.python_tracer or tf_data(trace):
        return {}
    return {k: v[2] for k, v in _loader_frames(trace).items()}


def unrecorded_loader_ms(xplanes, record: dict | None) -> float | None:
    """Without a thread-CPU record: the ms a step the process's other Python threads ran Python over the captured
    steps (the tracer's frames, not in a wait) — a loader ahead in a thread, whose CPU the capture cannot measure
    (thread_stolen_by_step needs the record: a bare loop's NumPy loader thread read 0.5 % against a truth of 29 %);
    None with a record, on a capture that runs tf.data or has no Python tracer, or where none ran."""
    trace = load_trace(xplanes) if not record else None
    if trace is None or not trace.python_tracer or tf_data(trace) or not trace.markers():
        return None
    marks = trace.markers()
    training, lo, hi = {id(t) for t, _ in marks}, min(m.start for _, m in marks), max(m.end for _, m in marks)
    ran = sum(iv.length(iv.clip(idle.running_python(t), lo, hi)) for t in trace.threads
              if id(t) not in training and len(t))
    return ran / PS_PER_MS / len(marks) if ran > 0 else None


def unrecorded_note(att: dict) -> list[str]:
    """The console's line where unrecorded_loader_ms is 5 % of the step or more (attribution's
    input_loader_threads_unrecorded_ms_per_step), else []."""
    ms, step = att.get("input_loader_threads_unrecorded_ms_per_step"), float(att.get("step_time_ms") or 0.0)
    if not ms or ms < 0.05 * step:
        return []
    return [f"other Python threads ran {ms:.1f} ms a {step:.1f} ms step beside the training thread (a loader ahead in "
            f"a thread?) and the capture holds no record of their CPU: what they took from the step is not in the "
            f"input figure — capture with tfbertperf.jax_steps.StepTimer, which writes the record (threadcpu.json), "
            f"or measure the what-if with its probe=True"]


def _xla_runs(trace, rule=XLA_CPU_RUN) -> list[np.ndarray]:
    """Per thread that has any, the intervals of its events matching `rule` (XLA's CPU runtime by default)."""
    return [iv.from_columns(t.start[m], t.end[m]) for t in trace.threads for m in [t.mask(rule)] if m.any()]


def loader_ms_by_step(xplanes, frames: dict | None = None) -> dict[int, float]:
    """Per step number, the ms the training thread spent in Python loader frames inside that step's marker; {} where
    the module docstring leaves the capture alone.  `frames`: _loader_frames of the capture, where already read."""
    trace = load_trace(xplanes)
    if not trace.python_tracer or tf_data(trace):
        return {}
    out: dict[int, float] = {}
    for _, marks, loader in (frames if frames is not None else _loader_frames(trace)).values():
        for m in marks:
            out[m.step_num] = out.get(m.step_num, 0.0) + iv.length(iv.clip(loader, m.start, m.end)) / PS_PER_MS
    return out


def lock_wait_by_step(xplanes, frames: dict | None = None) -> dict[int, float]:
    """Per step number, the ms the training thread waited for the interpreter lock a loader thread held (module
    docstring): its time in the step outside XLA's run, its wait for XLA's result before that run ended and its own
    waits, while another thread ran Python, outside its loader frames (loader_ms_by_step counts those); with the
    thread-CPU record, all of it scaled by the share of such time the thread was not running (its measured CPU
    taken off); without it only the result wait after XLA's run.  {} where loader_ms_by_step gives nothing, and
    where child processes did the loading (a multiprocessing pool's threads here hand their batches over: their
    lock use is the hand-off's, not a loader thread's to move to processes).  `frames`: as loader_ms_by_step."""
    trace = load_trace(xplanes)
    if not trace.python_tracer or tf_data(trace):
        return {}
    marks = trace.markers()
    mine = {id(t) for t, _ in marks}
    others = [idle.running_python(t) for t in trace.threads if id(t) not in mine and t.mask(is_python_frame).any()]
    runs = _xla_runs(trace)
    if not others or not runs:
        return {}
    running, xla = iv.union(np.concatenate(others)), iv.union(np.concatenate(runs))
    record = threadcpu.read_beside(xplanes[0])
    if record and any(float(c.get("cpu_ms") or 0.0) > 0 for c in record.get("children") or ()):
        return {}  # the loader works in child processes: this process's Python threads only carry its batches
    loader = {k: v[2] for k, v in (frames if frames is not None else _loader_frames(trace)).items()}
    free_ps = env_ps = 0
    held: dict[int, int] = {}
    for t, m in marks:
        ran = iv.clip(xla, m.start, m.end)
        if not len(ran):
            continue
        w, waits = t.mask(RESULT_WAIT), t.mask(idle.THREAD_WAIT.search)
        result = iv.union(iv.from_columns(t.start[w], t.end[w]))
        if record is None:  # no CPU clock: the one place no running of its own explains, after XLA's run
            free = iv.clip(result, int(ran[:, 1].max()), m.end)
        else:
            busy = np.concatenate([ran, iv.clip(result, m.start, int(ran[:, 1].max())),
                                   iv.clip(iv.from_columns(t.start[waits], t.end[waits]), m.start, m.end)])
            free = iv.subtract([(m.start, m.end)], iv.union(busy))
        env = iv.intersect(free, running)
        free_ps, env_ps = free_ps + iv.length(free), env_ps + iv.length(env)
        held[m.step_num] = held.get(m.step_num, 0) + iv.length(iv.subtract(env, loader[id(t)]))
    scale = 1.0
    if record is not None and env_ps:  # the thread cannot have waited longer than it was not running
        span = sum(m.end - m.start for _, m in marks) / 1e12
        cpu = sum(float(r.get("cpu_ms") or 0.0) for r in record.get("threads") or () if r.get("line_id") in
                  {t.id for t, _ in marks}) * span / max(1e-9, float(record.get("seconds") or 0.0))
        scale = min(1.0, max(0.0, free_ps / PS_PER_MS - cpu) / (env_ps / PS_PER_MS))
        # the lock is held as long as the loader runs, and the tracer's frames are part of that run: only the
        # loader threads' CPU without them holds it in the program as it runs unprofiled
        scale *= 1.0 - (_tracer_share(trace, record) or 0.0)
    return {k: v * scale / PS_PER_MS for k, v in held.items()}


def _tracer_share(trace, record: dict) -> float | None:
    """Of the CPU the process's other Python threads used (the loader's, less our own), the share that was the
    Python tracer's cost of the frames it recorded on them (PY_FRAME_COST_US each); None where they used none."""
    lines, training = {t.id: len(t) for t in trace.threads}, {t.id for t, _ in trace.markers()}
    theirs = [(float(r.get("cpu_ms") or 0.0), lines[r["line_id"]]) for r in record.get("threads") or ()
              if r.get("python") and r.get("line_id") in lines and r["line_id"] not in training
              and not str(r["python"]).startswith("tfbertperf")]
    used = sum(c for c, _ in theirs)
    return sum(min(c, n * PY_FRAME_COST_US / 1e3) for c, n in theirs) / used if used > 0 else None


TRACED_LOADER_SHARE = 0.5
"""A loader whose threads' CPU was at least half the Python tracer's cost is another program under the profiler: a
pure-Python loader thread ran 5-10x slower captured (its CPU 54-90 % the tracer's), the step then waited for it, and
that wait, kept as the input's own milliseconds against the unprofiled step, read 56-100 % where the truths were
32-37 % on five of twelve captures (BENCHMARKS.md, issue 29).  Withholding that figure lost more verdicts than it
saved (7 of 12 wrong from the capture alone, 1 with it), so it stands with this caveat.  NumPy loaders' threads:
~1 % the tracer's; a Keras PyDataset's busy Python: ~21 %."""


def traced_loader(xplanes) -> str | None:
    """The caveat on a host capture's input measured against the unprofiled step where the tracer slowed its loader
    (TRACED_LOADER_SHARE), or None (no thread record, no such loader)."""
    record = threadcpu.read_beside(xplanes[0]) if xplanes else None
    share = _tracer_share(load_trace(xplanes), record) if record else None
    if share is None or share < TRACED_LOADER_SHARE:
        return None
    return (f"{share:.0%} of the loader threads' CPU was the Python tracer's (the captured loader ran "
            f"~{1 / max(1e-9, 1 - share):.0f}× slower than unprofiled): the step's wait for it may not be the "
            "unprofiled program's, and this share can read high — measure the what-if (probe=True) or capture "
            "without the Python tracer")


def xla_cpu_ms_by_step(xplanes) -> dict[int, float]:
    """Per step number, the wall time XLA's CPU runtime ran, or a thread waited for its result (RESULT_WAIT), inside
    that step (the union over the threads); {} for a capture that runs tf.data or shows no such run."""
    trace = load_trace(xplanes)
    runs = _xla_runs(trace, _RUN_OR_WAIT)
    if not runs or tf_data(trace):
        return {}
    busy = iv.union(np.concatenate(runs))
    return {m.step_num: iv.length(iv.clip(busy, m.start, m.end)) / PS_PER_MS for _, m in trace.markers()}


def move_to_input(rows: list[dict], xplanes) -> tuple[list[dict], float | None, float | None]:
    """xprof's step rows with each step's loader time and interpreter-lock wait moved from host compute (then other)
    to input and XLA's CPU runtime from other to host compute; the loader's and the lock wait's means a step (None
    where loader_ms_by_step / lock_wait_by_step gave nothing)."""
    trace = load_trace(xplanes)
    frames = _loader_frames(trace) if trace.python_tracer and not tf_data(trace) else {}  # read once, used twice
    loader, xla = loader_ms_by_step(xplanes, frames), xla_cpu_ms_by_step(xplanes)
    held = lock_wait_by_step(xplanes, frames)
    moved = []
    for r in rows:
        n = step_number(r["step"])
        take = min(loader.get(n, 0.0) + held.get(n, 0.0), r["host_compute"] + r["other"])
        from_compute = min(take, r["host_compute"])
        r = {**r, "input": r["input"] + take, "host_compute": r["host_compute"] - from_compute,
             "other": r["other"] - (take - from_compute)}
        run = min(xla.get(n, 0.0), r["other"])  # XLA's CPU runtime: compute xprof filed as other
        from_loader = min(loader.get(n, 0.0), take)
        moved.append(({**r, "host_compute": r["host_compute"] + run, "other": r["other"] - run},
                      from_loader, take - from_loader))
    mean = [sum(m[k] for m in moved) / len(moved) if moved else 0.0 for k in (1, 2)]
    return [m[0] for m in moved], mean[0] if loader else None, mean[1] if held else None


def _pool_share(rows, names: dict[int, str], training: set) -> float:
    """p (module docstring): XLA's intra-op pool's share of the compute's measured CPU (its pool, its client threads,
    the training thread), by the capture's line names (`names`: line id → name); 1 where the record names none."""
    pool = rest = 0.0
    for r in rows:
        name = names.get(r.get("line_id"), "")
        if XLA_POOL.match(name):
            pool += float(r["cpu_ms"])
        elif name.startswith("tf_XLA") or r.get("line_id") in training:
            rest += float(r["cpu_ms"])
    return pool / (pool + rest) if pool + rest > 0 else 1.0


def thread_stolen_by_step(xplanes, record: dict | None) -> tuple[dict[int, float], float | None]:
    """Per step number, the ms of XLA's CPU step the process's other Python threads and its child processes took
    (module docstring), and their measured CPU a step (ms, the tracer's cost taken off); ({}, None) without a
    thread-CPU record, on a capture that runs tf.data, or where neither ran."""
    trace = load_trace(xplanes)
    if not record or tf_data(trace):
        return {}, None
    marks = trace.markers()
    training = {t.id for t, _ in marks}
    rows = [r for r in record.get("threads") or () if r.get("python") and not str(r["python"]).startswith("tfbertperf")
            and r.get("line_id") not in training]
    rows += [{**c, "line_id": None} for c in record.get("children") or () if float(c.get("cpu_ms") or 0.0) > 0]
    runs = _xla_runs(trace)
    if not rows or not runs or not marks:
        return {}, None
    xla = iv.union(np.concatenate(runs))
    lines = {t.id: t for t in trace.threads}
    span = (min(int(t.start.min()) for t in trace.threads if len(t)), max(int(t.end.max()) for t in trace.threads
                                                                          if len(t)))
    active, rates = [], []
    for r in rows:  # each loader thread (or child process): when it ran, and its CPU a picosecond of that
        t = lines.get(r.get("line_id"))
        a = idle.running_python(t) if t is not None and len(t) else iv.EMPTY
        a = a if len(a) else np.array([span], dtype=np.int64)  # no frames recorded (a process): over the capture
        cpu = float(r["cpu_ms"]) - (len(t) if t is not None else 0) * PY_FRAME_COST_US / 1e3
        active.append(a)
        rates.append(max(0.0, cpu) / max(1, iv.length(a)))
    cores = int(record.get("cores") or 1)
    width = min(cores, len(runs))  # W: the threads XLA's CPU runtime ran on (one row of `runs` each)
    p = _pool_share(record.get("threads") or (), {i: t.name for i, t in lines.items()}, training)
    out, cpu_steps = {}, []
    for _, m in marks:
        phase = iv.clip(xla, m.start, m.end)
        overlaps = [iv.length(iv.intersect(a, phase)) for a in active]
        together = iv.length(iv.intersect(iv.union(np.concatenate(active)), phase))
        x_in = sum(o * k for o, k in zip(overlaps, rates))
        k_bar = max(1.0, sum(overlaps) / together) if together else 1.0
        fair = max(0.0, width + k_bar - cores) / (k_bar * cores)
        out[m.step_num] = out.get(m.step_num, 0.0) + x_in * fair * cores * p
        cpu_steps.append(sum(iv.length(iv.clip(a, m.start, m.end)) * k for a, k in zip(active, rates)))
    # the compute cannot have lost more to the loader than its pool's threads waited for a core (their run-queue
    # time, measured, a step): the fair share over-reads a loader that had the cores to itself between XLA's runs
    # (a record without run-queue figures — psutil's clocks, not schedstat — says nothing: no bound then)
    step_ms = sum(m.end - m.start for _, m in marks) / len(marks) / 1e9
    threads = record.get("threads") or ()
    waited = max((float(r.get("runqueue_ms") or 0.0) for r in threads
                  if XLA_POOL.match(lines[r["line_id"]].name if r.get("line_id") in lines else "")), default=None)
    if waited is not None and any(float(r.get("runqueue_ms") or 0.0) > 0 for r in threads) and out \
            and float(record.get("seconds") or 0.0) > 0:
        cap = waited / (float(record["seconds"]) * 1e3) * step_ms
        scale = min(1.0, cap / max(1e-9, float(np.mean(list(out.values())))))
        out = {k: v * scale for k, v in out.items()}
    return out, float(np.mean(cpu_steps))
