"""The program's own Python loader, where the capture shows its batches come from Python (issue 29: analyze right
on programs nobody here wrote).

Keras brings a `keras.utils.PyDataset` (and a Python generator) to tf.data through `Dataset.from_generator`: the
capture's input ops then hold an `Iterator::…Generator` source, and the batches are built by the user's
`__getitem__`, on the training process's Python threads (PyDataset(workers=N): a thread pool and an enqueuer
thread) or in child processes (use_multiprocessing=True).  The capture records no event for either, so their CPU
reaches `analyze` only through ProfileCallback's thread-CPU record (profile/threadcpu.py, snapshot(loaders=True):
the process's Python threads by name, its child processes' CPU).  How it costs the step (profile/contention.py):
  - a loader thread runs Python, holding the interpreter lock the step's own Python waits for: its CPU costs the
    step whole, as a `py_function`'s does;
  - a child process competes for the cores only: its CPU is the input's like a tf.data thread's (fair share of
    the oversubscribed cores, the pool share p).
Measured (tools/bench/bench_python_loader.py, BENCHMARKS.md): a PyDataset whose __getitem__ computes 8 ms in
Python, with workers=2 threads, ran as slowly as with one worker and read "compute-bound, input 7–13 %" where its
what-if measured 72–75 %; with 2 worker processes "compute-bound" at 13–18 % or undecided at 21–24 % where the
what-if measured 45–57 %.  Now: input-bound, 62–71 % and 34–41 % (the processes' fair share reads them low).
Python threads are the loader's only where the capture has a from_generator source: elsewhere a Python thread of
the process (a logger, a metrics exporter) is nobody's input.
"""

from __future__ import annotations

import re

GENERATOR = re.compile(r"^Iterator::(.*::)?Generator")
"""A `Dataset.from_generator` source's iterator event (trace viewer: "Iterator::Generator"; xprof's op table:
"Iterator::Root::Prefetch::FlatMap[0]::Generator")."""


def is_generator(name: str) -> bool:
    return bool(GENERATOR.match(name))


def _ours(name) -> bool:
    return str(name).startswith("tfbertperf")  # this package's own threads (the sampler, the thread map)


def _rows(record: dict | None, generator_lines: set[int]):
    """(kind, CPU ms, run-queue ms, line id) of the loader's parts in a threadcpu record: "python" its Python
    threads but ours (and the tf.data threads in `generator_lines`, kind "generator"), "child" its child
    processes, "exited" the threads that ended inside the window where Python threads were among them."""
    for r in (record or {}).get("threads") or ():
        if r.get("python") and not _ours(r["python"]):
            yield "python", float(r["cpu_ms"]), float(r.get("runqueue_ms") or 0.0), r.get("line_id")
        elif r.get("line_id") in generator_lines:
            yield "generator", float(r["cpu_ms"]), float(r.get("runqueue_ms") or 0.0), r.get("line_id")
    for c in (record or {}).get("children") or ():
        yield "child", float(c["cpu_ms"]), float(c.get("runqueue_ms") or 0.0), None
    exited = (record or {}).get("exited") or {}
    if any(not _ours(n) for n in exited.get("python") or ()):  # a loader pool that ended inside the window
        yield "exited", float(exited.get("cpu_ms") or 0.0), 0.0, None


def loader_cpu_us(record: dict | None) -> tuple[float, float, set[int]]:
    """(CPU µs of the process's Python threads but the main one and tfbertperf's own — with the CPU of the threads
    that ended inside the window where Python threads were among them —, CPU µs of its child processes, the Python
    threads' line ids) over the capture window, from a threadcpu SIDECAR record written with loaders=True; (0, 0,
    ∅) without one."""
    rows = list(_rows(record, set()))
    py = sum(cpu for kind, cpu, _, _ in rows if kind in ("python", "exited")) * 1e3
    kids = sum(cpu for kind, cpu, _, _ in rows if kind == "child") * 1e3
    return py, kids, {int(lid) for kind, _, _, lid in rows if kind == "python" and lid is not None}


def wanted_us(record: dict | None, generator_lines: set[int]) -> float:
    """The CPU the loader wanted over the window (µs): CPU used + run-queue wait of its Python threads (but the main
    one and ours), of its child processes, and of the tf.data threads that ran its generator (`generator_lines`: a
    PyDataset without workers), with the CPU of its threads and processes that ended inside the window.  Wanted, not
    only used: on a busy machine a computing loader waits for a core as long as it runs, a waiting loader does
    neither, so the two stay apart however loaded the machine (advice.py: worker processes or threads)."""
    return sum(cpu + rq for _, cpu, rq, _ in _rows(record, generator_lines)) * 1e3


# ---- the advice table's tests for a Python loader (profile/advice.py)
PYTHON_LOADER_SHARE = 0.5
"""The batches come from Python where a `from_generator` source (Keras' PyDataset, a generator) runs ≥ half the
input ops' wall time: tf.data's knobs do not reach the work.  Measured (issue 29, BENCHMARKS.md): a PyDataset waiting
20 ms ran 4.8–5.2× faster with workers=4 threads; one computing 8 ms in Python 1.5–1.8× with 2 processes."""


def _python_loader(c: dict) -> bool:
    return c["pyloader"] >= PYTHON_LOADER_SHARE


LOADER_COMPUTES_SHARE = 0.5
"""A Python loader computes where the CPU it wanted a step (used + run-queue wait of its threads, processes, its
generator's tf.data thread: loaders.wanted_us; a busy machine does not make it a waiting one) is ≥ half the step:
worker processes help, threads do not (1.5–1.8×, ~1.0×); below it threads help (a waiting read: 4.8–5.2×)."""

_PY_SOURCE = "the batches come from Python (a Keras PyDataset, a generator, Dataset.from_generator: {pyloader:.0%} " \
             "of the input ops' time)"
_PY_ELSE = "or build the input in tf.data (map(num_parallel_calls=AUTOTUNE), prefetch), or prepare the batches offline"


def _loader_computes(c: dict) -> bool:
    return c["loader_ms"] is not None and c["loader_ms"] >= LOADER_COMPUTES_SHARE * c["step_ms"]


def _loader_waits(c: dict) -> bool:
    return c["loader_ms"] is not None and not _loader_computes(c)


def _generator_share(att: dict) -> float:
    """The share of the input ops' wall time a from_generator source ran (attribution.input_generator_us), ≤ 1."""
    total = sum((att.get("input_ops_us") or {}).values())
    return min(1.0, float(att.get("input_generator_us") or 0.0) / total) if total > 0 else 0.0


def _no_input_ops(c: dict) -> bool:
    """The capture recorded no tf.data input op: its input is the program's own loader, or work it does not see."""
    return not any(v > 0 for v in c["ops"].values())


def _loader_not_tfdata(c: dict) -> bool:
    """A device-idle reading whose input wait is the program's own loader: tf.data ran no input ops."""
    return c["idle"] and _no_input_ops(c)


def _lock_held(c: dict) -> bool:
    """Most of the input wait is for the interpreter lock a loader thread holds (idle.py on a device's idle time,
    host_loader.lock_wait_by_step on a host capture), and tf.data ran no input ops."""
    return _no_input_ops(c) and c["held"] >= c["input"] / 2 > 0


def _lock_light(c: dict) -> bool:
    """_lock_held, by loader threads whose measured CPU a step (tracer cost out) is under LOADER_COMPUTES_SHARE of the
    step: worker processes did not pay there (Keras-JAX PyDataset threads at 0.30-0.35 of the step, moved to
    processes: 0.49-1.0x the step rate; at 0.63: 1.75-2.0x, BENCHMARKS.md issue 29)."""
    return _lock_held(c) and c["input_cpu"] is not None and c["input_cpu"] < LOADER_COMPUTES_SHARE * c["step_ms"]


def _host_loader(c: dict) -> bool:  # a host capture whose input is the thread's own Python loader (host_loader.py)
    return bool(c["pyframes"]) and not c["idle"] and _no_input_ops(c) and not _unseen(c) \
        and not _loader_thread(c) and not _lock_held(c)


def _loader_thread(c: dict) -> bool:
    """A host capture without tf.data whose input is mostly the CPU a loader thread took from XLA's compute
    (host_loader.thread_stolen_by_step), not the training thread's wait: its batches are already made ahead and off
    that thread (a loop so advised read "load batches ahead … a background thread" again)."""
    return not c["idle"] and _no_input_ops(c) and c["stolen"] >= max(c["input"], 0.05)


def _unseen(c: dict) -> bool:
    """The measured what-if puts ≥ 20 % of the step in input and the capture sees under half of it: the input's
    work runs where the capture does not record it (a Keras-JAX fit fed by tf.data: jax.profiler records none of
    tf.data's threads; it read 1 % beside a measured 73 %, and the advice blamed a 0.06 ms Python hand-off).  Only
    where it recorded no tf.data input op: a TensorFlow capture that shows the pipeline is judged by its own rows."""
    return (c["measured"] or 0.0) >= 0.2 and c["seen"] < c["measured"] / 2 and _no_input_ops(c)
