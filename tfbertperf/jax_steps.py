"""Step times for a JAX training loop: the step markers xprof needs, a capture of a window of steps, and the step
file `tfbertperf analyze` reads beside it (profile/stepfile.py) — what `tfbertperf.keras.ProfileCallback` does for
Keras, for a loop you write yourself.  Importing this module imports neither JAX nor TensorFlow.

    from tfbertperf.jax_steps import StepTimer

    timer = StepTimer("logs/run1", profile_steps="20:40")
    for i in range(steps):
        with timer.step() as step:
            batch = next(batches)                      # inside the step: its wait for input is the step's
            state, loss = train_step(state, batch)
            step.result = loss                         # waited for (jax.block_until_ready) before the step ends
    timer.close()                                      # writes logs/run1/plugins/profile/<session>/tfbertperf_steps.json
    # then: tfbertperf analyze logs/run1

The measured what-if (`StepTimer(…, probe=True, total_steps=steps)`): call `timer.probe(train_step, state, batch)`
before each step (outside its `with`) and once after the loop; where the plan puts a block it times `train_step` on
a copy of `state` fed `batch` cached on the device (tfbertperf/jax_probe.py), and close() writes T_c beside T, so
`analyze` reports "input cost (measured)" and `timer.what_if` holds it.

Each step runs inside `jax.profiler.StepTraceAnnotation("train", step_num=i)`; `jax.profiler.start_trace(logdir)`
opens before step START and `stop_trace()` closes before step STOP.  A step's wall time runs from entering the
`with` to its result being ready, so the unprofiled steps' mean is the program's step time and analyze measures
the profiler's cost as captured − unprofiled.  JAX writes the capture as `<host>.xplane.pb` (with a
`<host>.trace.json.gz`).  JAX's default options (`jax.profiler.ProfileOptions()`: python_tracer_level 1,
host_tracer_level 2) already record the Python tracer's frames (a Python loader's included); to leave them out,
pass `profiler_options=` a `jax.profiler.ProfileOptions()` with `python_tracer_level = 0`.  xprof leaves a
capture's first and last step out of its step table (possibly incomplete), so the capture runs from step START − 1
to STOP (one step more on each side, as `tfbertperf run` captures: train/probe.py traced_steps) and the step table
shows all of START…STOP − 1; the step file counts those two extra steps as profiled.
Tested with real JAX on the CPU in tests/test_jax_steps.py (JAX 0.10.2).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from tfbertperf.config import parse_window
from tfbertperf.errors import warn_user
from tfbertperf.jax_probe import JaxProbe
from tfbertperf.profile import outside_steps, stepfile, threadcpu
from tfbertperf.train.probe import AUTO_CI95, probe_args, short_run_budget, traced_steps


class _Step:
    result = None  # set it to the step's output: it is waited for before the step's time is taken


class StepTimer:
    """Step markers, a capture of `profile_steps` and every step's wall time, written as a step file by close().

    Args:
      logdir: where the capture goes (`logdir/plugins/profile/<session>/`); the step file is written beside it
        (in `logdir` when no capture was made).
      profile_steps: "START:STOP" or (start, stop): the steps to capture (STOP exclusive); None = no capture.
      warmup_steps: leading steps left out of the unprofiled mean (compilation); at most a quarter of the steps.
      marker: the step marker's name.
      profiler_options: a jax.profiler.ProfileOptions, passed as start_trace(logdir, profiler_options=...);
        None = JAX's defaults (the Python tracer on: module docstring).
      start_trace, stop_trace, annotation, wait: replacements for jax.profiler.start_trace(logdir, **kw),
        jax.profiler.stop_trace(), jax.profiler.StepTraceAnnotation(name, step_num=i) and
        jax.block_until_ready(x) — those four are the defaults, imported on first use.
      probe, probe_steps, probe_blocks, probe_ci95: the measured what-if (tfbertperf/jax_probe.py; call probe()
        before each step), as tfbertperf.keras.ProfileCallback's; total_steps: the run's steps, which the probe
        plans its blocks over (or plan_probe(N) later).
    Attributes:
      step_times_ms: every step's wall time so far, ms.  step_file: the file close() wrote, or None.
      what_if: with probe=True, after close(): T, T_c, the input cost and its 95 % interval (as the callback's).
    """

    def __init__(self, logdir, profile_steps="20:40", warmup_steps: int = 5, marker: str = "train",
                 profiler_options=None, start_trace: Callable | None = None, stop_trace: Callable | None = None,
                 annotation: Callable | None = None, wait: Callable | None = None, *, probe: bool = False,
                 probe_steps: int | str = "auto", probe_blocks: int = 4, probe_ci95: float = AUTO_CI95,
                 total_steps: int | None = None) -> None:
        self.logdir = str(logdir)
        self.window = parse_window(profile_steps, None, label="StepTimer(profile_steps={!r})")
        self.traced = traced_steps(self.window)  # captured: one step more on each side (docstring)
        self.warmup_steps, self.marker, self.options = int(warmup_steps), marker, profiler_options
        self._start, self._stop, self._annotation, self._wait = start_trace, stop_trace, annotation, wait
        self.step_times_ms: list[float] = []
        self.step_file: Path | None = None
        self._profiling = False
        self._profiled: tuple[int, int] | None = None
        self._stop_ms = 0.0
        self._before: set[str] = set()
        self._session: Path | None = None
        self._cpu = None  # the threads' CPU over the capture (threadcpu.json): a profile/outside_steps.py Window
        self.outside_annotation = _trace_annotation  # name → the profiler's plain trace span (outside())
        # the capture's first and last step out of the thread-CPU record (outside_steps.py): not on JAX, whose host
        # analysis (host_loader.py's interpreter-lock rule) reads the record against every marker's time — a
        # Keras-JAX fit read a lock wait that is not there in 3 of 5 runs beside two busy processes (0 of 5 before)
        self.edge_steps_out = False
        self.what_if: dict | None = None
        self.wording = ("StepTimer", "run")  # who speaks in the probe's warnings, and of what (Keras: a fit)
        self.stop_hint = "jax.profiler.stop_trace"  # how the other profiler a capture found running is stopped
        auto, n, ci95 = probe_args(probe_steps, probe_ci95, who="StepTimer")
        self._probe = JaxProbe(auto, n, int(probe_blocks), ci95, wait_each=True) if probe else None
        if probe and total_steps is not None:
            self.plan_probe(int(total_steps))

    # ---- the what-if probe (tfbertperf/jax_probe.py)
    def plan_probe(self, total_steps: int) -> None:
        """Plan the probe's blocks for a run of `total_steps` steps (StepTimer(total_steps=N) does it at once)."""
        self._probe.make_plan(total_steps, self.warmup_steps, self.traced)

    def probe_at_end(self) -> None:
        """Run the probe's blocks after the last step, back to back, not through the steps (JaxProbe.to_end)."""
        if self._probe is not None:
            self._probe.to_end()

    def wants_batch(self) -> bool:
        """Whether the probe would keep a batch handed over now (keep_batch)."""
        return self._probe is not None and self._probe.wants(len(self.step_times_ms))

    def keep_batch(self, batch) -> bool:
        """Hand the probe a batch (kept on the device once, from the last warm-up step on; module docstring)."""
        return self._probe is not None and self._probe.keep(batch, len(self.step_times_ms))

    def probe(self, step_fn: Callable, state, batch=None, last: bool = False) -> None:
        """Call before each step, outside `with timer.step()`, and once after the last: `step_fn(state, batch)` is
        your jitted step and returns the new state first; `state` your state now (or a callable returning it);
        `batch` a batch to cache (the one you are about to train on will do); `last`: this call comes after the
        last step (also one before the planned end).  Where the plan puts a block it runs on a copy of `state`
        (your state is never touched) and its time is no step's (tfbertperf/jax_probe.py)."""
        if self._probe is None or self._probe.plan is None:
            return
        if batch is not None:
            self.keep_batch(batch)
        self._jax()
        i = len(self.step_times_ms)
        self._probe.block(step_fn, state, i, self.step_times_ms,
                          lambda: self.document(**self._probe.record(self.step_times_ms)).get("summary"), self._wait,
                          last=last)

    def steps(self, batches, step_fn: Callable | None = None, state=None):
        """Iterate `batches` (a dataset, an iterator, any iterable) one step per batch, each batch fetched inside its
        step (so the loop's wait for input is the step's): yields (step, batch); set `step.result` as in `step()`.
        With `step_fn` and `state` (as probe()'s) the what-if's blocks run between the steps and the probe keeps its
        batch by itself.  A `break` out of the loop leaves the step it broke from out of the step times."""
        it, probing = iter(batches), step_fn is not None and self._probe is not None
        while True:
            if probing:
                self.probe(step_fn, state)
            timed = _Timed(self)
            step = timed.__enter__()
            try:
                batch = next(it)
            except StopIteration:  # the data's end: no step
                timed.abandon()
                break
            except BaseException:
                timed.abandon()
                raise
            if probing:
                self.keep_batch(batch)
            try:
                yield step, batch
            except BaseException:  # the loop broke (GeneratorExit) or raised: that step is not timed
                timed.abandon()
                raise
            timed.__exit__(None, None, None)
        if probing:
            self.probe(step_fn, state, last=True)

    def _jax(self) -> None:
        if None in (self._start, self._stop, self._annotation, self._wait):
            import jax  # only when a default is needed: tests and other frameworks pass their own

            self._start = self._start or jax.profiler.start_trace
            self._stop = self._stop or jax.profiler.stop_trace
            self._annotation = self._annotation or jax.profiler.StepTraceAnnotation
            self._wait = self._wait or jax.block_until_ready

    def step(self):
        """Context manager for one step (module docstring); set `.result` on what it yields."""
        return _Timed(self)

    def outside(self) -> None:
        """The training steps pause until the next step (an evaluation inside the window, Keras' validation, an
        epoch's end): that span stays out of the thread-CPU record and is marked in the capture
        (profile/outside_steps.py).  Call it where your loop leaves its steps; the next step ends it."""
        if self._profiling and self._cpu is not None:
            self._cpu.open()

    def _begin(self) -> None:
        self._jax()
        if self._profiling and self._cpu is not None:
            self._cpu.close()
        i = len(self.step_times_ms)
        if self.traced and i == self.traced[0] and not self._profiling:
            self._before = stepfile.sessions(self.logdir)
            kw = {"profiler_options": self.options} if self.options is not None else {}
            try:
                self._start(self.logdir, **kw)
                self._profiling = True
                self._cpu = outside_steps.Window(threadcpu.snapshot(loaders=True), self.outside_annotation,
                                                 edges=self.edge_steps_out)
            except RuntimeError as e:  # JAX runs one profile a process: never stop the user's training for it
                if "already" not in str(e):
                    raise
                warn_user(f"tfbertperf StepTimer: another profiler is running at step {i} ({e}): no capture in "
                          f"this run; the step times and the probe go on — stop the other one "
                          f"({self.stop_hint}) or move profile_steps")
                self.traced = None
        if self.traced and i == self.traced[1] and self._profiling:
            self._end_capture()

    def _end_capture(self) -> None:
        t0 = time.perf_counter()
        stepfile.own_second(self.logdir)
        if self._cpu is not None:
            self._cpu.end(threadcpu.snapshot(loaders=True))
        self._stop()
        record = self._cpu.record() if self._cpu is not None else None
        self._stop_ms = (time.perf_counter() - t0) * 1e3  # a prefetching loader runs ahead meanwhile
        self._profiling = False
        self._profiled = (self.traced[0], len(self.step_times_ms))
        self._session = stepfile.session_dir(self.logdir, self._before)
        if record is not None and self._session is not None:  # a loader thread's CPU: profile/host_loader.py
            try:
                threadcpu.write_in(self._session, None, None, record)
            except OSError as e:  # never stop the user's training for it: analyze then says the CPU was not measured
                warn_user(f"tfbertperf StepTimer: no thread-CPU record beside the capture ({e})")

    def document(self, what_if: dict | None = None, excluded_steps=(), warmup_steps: int | None = None,
                 written_by: str = "tfbertperf.jax_steps.StepTimer", batches_per_step: int = 1,
                 autotuned_prefetch: list | None = None) -> dict:
        """The step file's object for the steps so far (profile/stepfile.py): `warmup_steps` None = this timer's,
        at most a quarter of the steps; a what-if probe's record and the steps it excludes, where one ran
        (tfbertperf/keras_jax.py), with the autotuned prefetches of the fit's dataset."""
        if what_if and autotuned_prefetch:
            what_if = {**what_if, "autotuned_prefetch": autotuned_prefetch}
        steps = self.step_times_ms
        warmup = short_run_budget(len(steps), self.warmup_steps, 0)[0] if warmup_steps is None else warmup_steps
        excluded = [*excluded_steps, *stepfile.after_stop(steps, self._profiled, warmup, self._stop_ms)]
        return stepfile.document(steps, profiled_steps=self._profiled, warmup_steps=warmup, excluded_steps=excluded,
                                 what_if=what_if, written_by=written_by, batches_per_step=batches_per_step)

    def close(self, **document) -> Path:
        """Stop a capture still running and write the step file (profile/stepfile.py; `document`: as
        document()'s); returns its path."""
        if self._profiling:
            self._end_capture()
        planned = self._probe is not None and self._probe.plan is not None
        doc = self.document(**{**(self._probe.record(self.step_times_ms) if planned else {}), **document})
        self.step_file = stepfile.write((self._session or Path(self.logdir)) / stepfile.STEP_FILE, doc)
        if (missed := stepfile.missed_window(self.window, len(self.step_times_ms), "StepTimer", "run")) is not None:
            warn_user(missed)
        if planned:
            self.what_if, said = self._probe.result(doc.get("summary"), len(self.step_times_ms), self.traced,
                                                    *self.wording)
            if said:
                warn_user(said)
        elif self._probe is not None:  # asked for, never planned: say why no what-if came
            warn_user("tfbertperf StepTimer(probe=True): no what-if: the probe had no plan — pass total_steps=N "
                      "(or call plan_probe(N) before the loop)")
        return self.step_file


class _Timed:
    def __init__(self, timer: StepTimer) -> None:
        self.timer, self.step = timer, _Step()

    def __enter__(self) -> _Step:
        t = self.timer
        t._begin()
        self.mark = t._annotation(t.marker, step_num=len(t.step_times_ms))
        self.mark.__enter__()
        if t._profiling and t.edge_steps_out and len(t.step_times_ms) == t.traced[1] - 1:  # the capture's last
            t._cpu.open(last_step=True)  # step, which xprof's table leaves out: out of the record, read inside it
        self.t0 = time.perf_counter()
        return self.step

    def abandon(self) -> None:
        """Close the step's marker without waiting for its result or timing it."""
        self.mark.__exit__(None, None, None)

    def __exit__(self, *exc) -> bool:
        t = self.timer
        try:
            if exc[0] is None and self.step.result is not None:
                t._wait(self.step.result)  # the step's device work is part of its time
        finally:
            self.mark.__exit__(*exc)
        if exc[0] is None:
            t.step_times_ms.append((time.perf_counter() - self.t0) * 1e3)
        return False


def _trace_annotation(name: str):
    """A plain (not a step's) trace annotation of JAX's profiler: outside_steps.Window's span."""
    import jax

    return jax.profiler.TraceAnnotation(name)
