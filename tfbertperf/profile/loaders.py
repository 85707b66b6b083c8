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


# ---- what the loader already runs on (issue 29: advice never asks for what the program already does)
WORKER_THREAD = re.compile(r"\(worker\)$")
"""A thread pool's worker: Python names a `multiprocessing.pool.ThreadPool` thread "Thread-N (worker)", the pool
PyDataset(workers=N) runs `__getitem__` on without use_multiprocessing (with it: child processes)."""

FULL_FROM = 1.0
"""The program fills the machine where its threads and child processes wanted (CPU + run-queue wait, as
loaders.wanted_us counts a loader's) at least the machine's cores over the window: another worker finds no core."""


def workers_reading(record: dict | None) -> dict:
    """attribution.input_loader_workers (SCHEMA.md), from a thread-CPU record written with loaders=True: {"processes":
    child processes that used CPU in the window (None where they ended inside it, a pool stopped at an epoch's end:
    how many is not recorded), "threads": pool worker threads (WORKER_THREAD; alive or ended inside the window, the
    larger: a pool restarted at an epoch's end has the same size), "wanted_cores": the cores' worth of CPU the process
    and its children wanted (used + run-queue wait; the ended ones' CPU) over the window, "cores"}; {} where the
    record has no Python thread names (written without loaders=True) or no window."""
    r = record or {}
    threads, seconds, exited = r.get("threads") or (), float(r.get("seconds") or 0.0), r.get("exited") or {}
    names = [str(t["python"]) for t in threads if t.get("python")]
    if seconds <= 0 or not (names or exited.get("python")):
        return {}
    kids = r.get("children") or ()
    wanted = sum(float(t["cpu_ms"]) + float(t.get("runqueue_ms") or 0.0) for t in (*threads, *kids)) \
        + float(exited.get("cpu_ms") or 0.0)
    alive = sum(c.get("pid") is not None and float(c["cpu_ms"]) > 0 for c in kids)
    ended = any(c.get("pid") is None and float(c["cpu_ms"]) > 0 for c in kids)
    return {"input_loader_workers": {
        "processes": alive or (None if ended else 0),
        "threads": max(sum(bool(WORKER_THREAD.search(n)) for n in names),
                       sum(bool(WORKER_THREAD.search(str(n))) for n in exited.get("python") or ())),
        "wanted_cores": round(wanted / 1e3 / seconds, 3), "cores": r.get("cores")}}


def _full(w: dict) -> bool:
    return bool(w.get("cores")) and w.get("wanted_cores", 0.0) >= FULL_FROM * w["cores"]


def remedies(w: dict | None, blocked: float = 0.0, estimate: float = 0.0) -> dict:
    """The words of the Python-loader advice (advice.py: {computes_remedy}, {waits_remedy}) for the workers the
    program already runs (workers_reading): more of what it has, or what it lacks, never what it does.  More threads
    for a waiting loader only where the step's blocked wait for a batch (`blocked`, of the step) is at least half the
    input's estimated cost (`estimate`): a pool that keeps ahead costs the step its CPU beside it, not its waits
    (tools/bench/bench_python_loader.py, "mixed": a 4 ms read and 1 ms of Python a batch, workers=4 threads 0.99× the
    step rate of workers=2)."""
    w, els = w or {}, _PY_ELSE
    # no counts in the words: a pool Keras restarts at an epoch's end can show its old and new workers in one window
    procs, threads = w.get("processes", 0) != 0, bool(w.get("threads"))  # processes None: some, ended in the window
    cheaper = "make __getitem__ cheaper (NumPy on whole batches, not a Python loop over examples), " + els[3:]
    if procs and _full(w):
        computes = (f"its worker processes and the step fill the machine (the program already wanted "
                    f"{w['wanted_cores']:.1f} of the {w['cores']} cores over the window: another worker finds no free "
                    "core) — " + cheaper + "; or more cores")
    elif procs:
        computes = ("more worker processes than it runs now — raise N in PyDataset(workers=N, use_multiprocessing=True) "
                    "— " + els)
    else:
        computes = ("load them in worker processes — PyDataset(workers=N, use_multiprocessing=True); threads share "
                    "the interpreter lock with the step — " + els)
    if procs:
        waits = ("worker threads in place of its worker processes — PyDataset(workers=N) without "
                 "use_multiprocessing: a waiting loader needs no core of its own, and a process pays to hand each "
                 "batch over — " + els)
    elif threads and blocked >= estimate / 2:
        waits = ("more worker threads than it runs now — raise N in PyDataset(workers=N): a waiting loader needs no "
                 "core — " + els)
    elif threads:
        waits = (f"its worker threads keep ahead of the step (it waits {blocked:.0%} of it for a batch; the rest of "
                 f"the input's {estimate:.0%} is the loader's CPU beside the step, its Python holding the interpreter "
                 "lock the step needs: more threads add none) — " + cheaper)
    else:
        waits = "load them in parallel — PyDataset(workers=N) threads — " + els
    return {"computes_remedy": computes, "waits_remedy": waits}
