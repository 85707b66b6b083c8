"""`ProfileCallback`: make a plain Keras `model.fit` produce a profile that xprof can split into steps, the wall
time of every step beside it, and on request the what-if probe's measured input cost.

Why it is needed: xprof finds steps only from `tf.profiler.experimental.Trace(name, step_num=i, _r=1)` markers
(`_r=1` marks a root step event), and charges input to a step only if the `next(iterator)` call runs inside that
marker. Keras 3's `TensorBoard(profile_batch=…)` emits markers without `_r`: xprof sees 0 steps (analyze reads them)

How it works: a callback cannot wrap `next()`, but Keras 3's TF trainer calls `on_train_batch_begin →
train_function(iterator) → on_train_batch_end`, and `train_function` pulls the batch with `next(iterator)`: the marker
opened in the first and closed in the last holds the fetch, the forward/backward pass and the update of step i.

The step file: at the end of `fit` every step's wall time (the profiled window marked) is written beside the
capture, `<logdir>/plugins/profile/<session>/tfbertperf_steps.json` (profile/stepfile.py), where `analyze` finds it:
the profiler's cost is then measured (captured − unprofiled step), the verdict about the program without it.

The what-if probe (`probe=True`), run's probe (train/probe.py) for your `fit`: T_c is the step on one cached
batch — the real batch of the last warm-up step, `Dataset.from_tensors(batch).repeat()` (on a GPU copied to the
device once, so T_c holds no host→device copy) — fed to the same `model.train_function` in blocks spread through
the steady steps, outside the profiled window; T is the mean of the real steps outside warm-up, the window and the
blocks.  Input cost = (T − T_c) / T.  Around each block the model's, optimizer's and metrics' variables (dropout
seeds, the optimizer's step count and the running loss included) are snapshot and restored, so training goes on
from exactly where it was: the loss trajectory with and without the probe is the same (at a fixed seed with
deterministic ops).  How the batch is taken without changing what trains: at the last warm-up step the callback
pulls that step's batch itself and hands the same batch to the step through a one-element dataset.
What it costs: the timed probe steps (probe_steps="auto": 5 a block, 4 to 20 blocks, until the interval is narrow
enough; docs/own-training.md) and per block the untimed ones before them (at least 1, the first block 2, and
as many as fill SETTLE_REAL_STEPS real steps' worth of time, at most SETTLE_MAX_STEPS: train/probe.py), one more
tracing of the step function (the cached batch's fixed shapes), and per block a snapshot and restore of the state
(a copy in memory; on the CPU a state over 256 MiB goes to a checkpoint in a temporary directory: train/probe.py
Snapshot); the steps right after a block, fed from buffers the pipeline filled meanwhile, are left out of T.  Where
the dataset runs a prefetch that sizes its own buffer (blocks inside the fit would grow it), every block runs after
the last step instead (profile/autotuned_prefetch.py, profile/stepfile.py).  Supported under one replica.

Usage:
    from tfbertperf.keras import ProfileCallback
    model.fit(ds, epochs=…, callbacks=[ProfileCallback("logs/run1", profile_steps="20:40", probe=True)])
    # then: tfbertperf analyze logs/run1   (or TensorBoard → Profile)

With `steps_per_execution=k` one marker spans one `train_function` call of k batches: the step file, the probe
and analyze count calls (xprof's step table is then empty: analyze reads the markers, profile/marker_steps.py).

Beside the capture it writes `threadcpu.json`: each thread's CPU over the window, fit's validation and epoch ends
left out (profile/outside_steps.py), with its capture line id (profile/threadcpu.py): `analyze` counts the input's
measured CPU, not the wall time of its waits (profile/contention.py).  docs/own-training.md: arguments, probe, files.
"""

from __future__ import annotations

import time
from pathlib import Path

import keras
import tensorflow as tf

from tfbertperf.config import parse_window
from tfbertperf.errors import warn_user
from tfbertperf.profile import autotuned_prefetch, capture, outside_steps, stepfile, threadcpu
from tfbertperf.profile.probe_hint import WIDE_CI95, precision_hint  # noqa: F401  (named here before)
from tfbertperf.profile.probe_record import after_fit, auto_stop, excluded_steps, fit_running, unpatch, what_if_record
from tfbertperf.train import recovery
from tfbertperf.train.probe import (AUTO_CI95, SETTLE_MAX_STEPS, Probe, plan_for, probe_args, read_back, settle_ms,
                                    short_run_budget, traced_steps)


class ProfileCallback(keras.callbacks.Callback):
    """Step markers for every training batch, a tf.profiler capture of the `profile_steps` window, every step's wall
    time in a step file beside the capture, and (probe=True) the measured what-if.

    Args:
      logdir: TensorBoard logdir; the profile lands in `logdir/plugins/profile/<session>/<host>.xplane.pb` and
        the step file beside it (`tfbertperf_steps.json`; without a capture, in `logdir`).
      profile_steps: "START:STOP" or (start, stop), global batch numbers counted across epochs, STOP exclusive
        (with steps_per_execution=k the capture holds the calls of k batches that cover them);
        None or "none" = markers and step times only, no capture.  The capture runs one step more on each side
        (START − 1 to STOP: xprof leaves a capture's first and last step out of its step table), so TensorBoard
        and analyze show all of START…STOP − 1; the step file counts the two extra steps as profiled.
      marker: the step marker name (what xprof's step table shows, e.g. "train 12").
      host_tracer_level, python_tracer, device_tracer_level: tf.profiler options (see ProfilerOptions).
      threadpool_events: also record TF's thread-pool task events (intra-op threads in Trace Viewer); off by
        default: they are 3/4 of a trace's events (tfbertperf/profile/capture.py).
      sync: pull the step's loss to the host before closing the marker, so a step's time includes its device
        work even on asynchronous devices (GPU/TPU). Costs one small device→host copy per step.
      probe: run the what-if probe (module docstring): T_c on one cached batch, in `probe_blocks` blocks of
        `probe_steps` timed steps in all, state restored after each.  Needs the number of steps: fit's
        `steps_per_epoch` or a dataset of known length, else `total_steps`.
      probe_steps: "auto" (default): the probe chooses its own sample size — blocks of 5 timed steps, spread
        through the run (train/probe.py auto_plan), until the measured input cost's 95 % interval is
        `probe_ci95` or narrower (after at least 4 blocks), or up to 100 timed steps (20 blocks), or as many
        blocks as the run has room for; a machine whose speed moves from block to block gets more of them, a
        quiet one stops after 4.  An int: that many timed probe steps in all (at most half the run's steps;
        short_run_budget), in `probe_blocks` blocks.
      probe_blocks: with an int probe_steps, the blocks its steps are spread over (1 = one block, after training
        when there are too few steady steps).
      probe_ci95: with probe_steps="auto", the interval's half-width that stops the probe (0.025: ±2.5 pp).
      warmup_steps: leading steps left out of T (tracing, warm caches); at most a quarter of the run.
      total_steps: the run's steps (markers), when Keras cannot know them.
    Attributes:
      step_times_ms: wall time of every training batch (marker open → close, a probe block's time left out), ms.
      step_file: where the step file was written (after fit), or None.
      what_if: {"step_ms": T, "compute_only_step_ms": T_c, "input_cost_fraction", "input_cost_ci95" (the half-width
        of its 95 % interval from the blocks' spread, profile/stepfile.py), "probe_steps" and "probe_blocks" (what
        ran), "stopped" (the auto probe's reason to stop before its plan's end, else None), "after_steps" (the
        blocks all ran after the last step), and where the capture or dataset shows a tf.data prefetch sizing its
        own buffer "autotuned_prefetch" (profile/autotuned_prefetch.py)} after fit with probe=True.
    """

    def __init__(self, logdir: str, profile_steps="20:40", marker: str = "train", host_tracer_level: int = 2,
                 python_tracer: bool = False, device_tracer_level: int = 1, sync: bool = True,
                 threadpool_events: bool = False, probe: bool = False, probe_steps: int | str = "auto",
                 probe_blocks: int = 4, probe_ci95: float = AUTO_CI95, warmup_steps: int = 5,
                 total_steps: int | None = None):
        super().__init__()
        if keras.backend.backend() != "tensorflow":  # tf.profiler records none of another backend's work
            raise ValueError(f"ProfileCallback: Keras runs on {keras.backend.backend()!r} (KERAS_BACKEND); this "
                             f"callback profiles its TensorFlow backend (on JAX, tfbertperf.keras gives keras_jax's)")
        self.logdir = str(logdir)
        self.window = parse_window(profile_steps, None, label="ProfileCallback(profile_steps={!r})")
        self.marker = marker
        self.options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=host_tracer_level, python_tracer_level=int(python_tracer),
            device_tracer_level=device_tracer_level)
        self.sync, self.threadpool_events = sync, threadpool_events
        self.auto, self.probe_steps, self.probe_ci95 = probe_args(probe_steps, probe_ci95)
        self.probe, self.probe_blocks = bool(probe), int(probe_blocks)
        self.warmup_steps, self.total_steps = int(warmup_steps), total_steps
        self._new_fit()

    def _new_fit(self) -> None:
        """Each fit gets its own window, capture, step file and probe (a fine-tuning second fit with the same
        callback reused the first's plan, captured nothing, and rewrote the first capture's step file with both
        fits' steps), as Keras' TensorBoard(profile_batch) profiles each fit."""
        self.traced = traced_steps(self.window)  # captured: one step more on each side (docstring)
        self.step_times_ms: list[float] = []
        self.step_file: Path | None = None
        self.what_if: dict | None = None
        self._step, self._trace, self._t0, self._profiling, self._cpu = 0, None, 0.0, False, None  # _cpu: a Window
        self._profiled, self._stop_ms = None, 0.0  # the steps captured; how long the profiler took to stop and write
        self._sessions_before, self._session = set(), None  # the sessions before the capture, and its own (Path)
        self._plan: list[tuple[int, int]] = []
        self._blocks_at: dict[int, int] = {}  # the plan as step → timed steps (looked up every step)
        self._ran: list[tuple[int, int]] = []  # the blocks that ran: (before_step, timed_steps)
        self._stopped: str | None = None  # probe_steps="auto": why it stopped before its plan's end
        self._warmup, self._batch, self._armed, self._runner = 0, None, False, None  # _runner: a Probe
        self._grabbed_at: int | None = None  # the step whose batch the probe caches
        self._autotuned: list[dict] = []  # the autotuned prefetches its dataset runs (read where the batch is grabbed)
        self._tail: list[int] = []  # … with one: the blocks' sizes, all run after the last step (_after_loop_block)
        self._block_ms, self._train_function = 0.0, None
        self._batches = 1  # batches a marker: the model's steps_per_execution (on_train_begin)

    # ---- the what-if probe (module docstring)
    def _plan_probe(self, epochs: int) -> None:
        calls = -(-(self.params.get("steps") or 0) // self._batches)  # markers an epoch: steps_per_execution
        steps = self.total_steps or (max(0, epochs) * calls)
        if not steps:
            raise ValueError("ProfileCallback(probe=True) needs the number of training steps: pass steps_per_epoch "
                             "to fit (or a dataset of known length), or total_steps=N")
        if self.model.distribute_strategy.num_replicas_in_sync != 1:
            raise ValueError("ProfileCallback(probe=True) supports one replica (the default strategy); got "
                             f"{self.model.distribute_strategy.num_replicas_in_sync} replicas")
        self._warmup, self._plan = plan_for(steps, self.warmup_steps, self.traced, self.auto, self.probe_steps,
                                            self.probe_blocks)
        self._blocks_at, self._total = dict(self._plan), steps
        self._runner = Probe(self._probe_step, self.model.distribute_strategy, [], feed_iterator=True,
                             wait=read_back, wait_each=self.sync)
        self._train_function = self.model.train_function
        self.model.train_function = self._train_with_probe

    def _probe_step(self, source):
        return self._train_function(source)

    def _run_block(self, pos: int, n: int, settle: bool = True) -> None:
        if self.auto and self._stopped is None:
            self._stopped = auto_stop(self._document().get("summary"), self._ran, self.probe_ci95)
        if self._stopped is not None:
            return
        self._ran.append((pos, n))
        # the state is listed now, not at on_train_begin: the optimizer creates its slots at its first step
        self._runner.state = [*self.model.variables, *self.model.optimizer.variables, *self.model.metrics_variables]
        self._runner.run_block(self._batch, n, settle_ms=settle_ms(self.step_times_ms, self._warmup) if settle else 0,
                               settle_max_steps=SETTLE_MAX_STEPS)

    def _train_with_probe(self, iterator):
        """model.train_function with the probe's work at its steps: the batch grabbed at the last warm-up step,
        and a block before the step where the plan puts one (timed apart: `_block_ms`)."""
        if not self._armed:  # a fit this callback is not in (one before stopped by an exception): unpatch, step
            self.model.train_function = self._train_function
            return self._train_function(iterator)
        self._armed = False
        i, blocks = self._step, self._blocks_at
        # not at step 0: the step that follows the grab would trace train_function for the real iterator, and its
        # time (145 ms against 1 ms steps: a 6-step fit read "input 97 %") would count as a real step
        if self._batch is None and i >= max(1, self._warmup - 1) and hasattr(iterator, "get_next_as_optional"):
            # this call's own batches: it trains on them below, in the same order, as it would have; under a
            # tf.distribute strategy (one replica: _plan_probe) its iterator hands out distributed values
            strategy, distributed = self.model.distribute_strategy, not isinstance(iterator, tf.data.Iterator)
            local = (lambda v: tf.nest.map_structure(lambda t: strategy.experimental_local_results(t)[0], v)) \
                if distributed else (lambda v: v)
            batches = []
            for _ in range(self.model.steps_per_execution):
                nxt = iterator.get_next_as_optional()
                if not nxt.has_value():
                    break
                batches.append(local(nxt.get_value()))
            self._batch, self._grabbed_at = (batches or [None])[0], i
            self._autotuned = autotuned_prefetch.in_dataset(iterator)
            if self._autotuned:  # blocks inside the fit would grow its buffer: all after the last step instead
                self._tail = [n for _, n in self._plan]
                self._blocks_at.clear()
            ds = tf.data.Dataset.from_tensors(batches[0]) if batches else None
            for b in batches[1:]:
                ds = ds.concatenate(tf.data.Dataset.from_tensors(b))
            if ds is not None:
                iterator = iter(strategy.distribute_datasets_from_function(lambda ctx: ds)) if distributed else iter(ds)
        if i in blocks and self._batch is not None and not recovery.ready(self.step_times_ms, self._ran, self._warmup,
                                                                          self.traced, self._total):
            recovery.postpone(blocks, i, self._total, self.traced)  # the last block's recovery runs on
        if i in blocks and self._batch is not None:
            t0 = time.perf_counter()
            self._run_block(i, blocks[i])
            self._block_ms = (time.perf_counter() - t0) * 1e3
        return self._train_function(iterator)

    def _after_loop_block(self) -> None:
        """The block planned after the last step (a short fit), or all of them where the dataset sizes a prefetch
        buffer itself (profile/autotuned_prefetch.py): back to back, the pipeline refilled before the first."""
        for k, n in enumerate(self._tail or [self._blocks_at.get(self._step)]):
            if n and self._batch is not None and self._stopped is None:
                self._run_block(self._step, n, settle=k == 0)

    # ---- Keras calls these around each `train_function(iterator)` (next(iterator) runs inside it)
    def on_train_begin(self, logs=None):
        unpatch(self.model)
        if self._profiling:  # a fit stopped by an exception inside the capture: the profiler still ran; write it out
            self._stop()
            self._write_steps()
        self._new_fit()
        # steps_per_execution=k: one train_function call (one marker) runs k batches; profile_steps counts batches
        self._batches = k = max(1, int(getattr(self.model, "steps_per_execution", 1) or 1))
        if self.window and k > 1:
            self.traced = traced_steps((self.window[0] // k, -(-self.window[1] // k)))

    def on_epoch_begin(self, epoch, logs=None):
        # planned here, before the first batch: a resumed fit (fit(…, initial_epoch=2, epochs=4)) runs epochs − epoch
        if self.probe and self._runner is None:
            self._plan_probe((self.params.get("epochs") or 0) - epoch)

    def on_train_batch_begin(self, batch, logs=None):
        self._cpu.close() if self._profiling else None  # back from validation or an epoch's end (outside_steps.py)
        self._armed = True  # the next train_function call is this callback's step (_train_with_probe)
        if self.traced and self._step == self.traced[0] and not self._profiling:
            self._sessions_before = stepfile.sessions(self.logdir)
            try:
                capture.start(self.logdir, self.options, threadpool_events=self.threadpool_events)
            except tf.errors.AlreadyExistsError:  # one profiler a process: never stop the user's training for it
                warn_user(f"tfbertperf ProfileCallback: another profiler is running at step {self._step} (Keras "
                          f"TensorBoard(profile_batch=…), tf.profiler.experimental.start): no capture in this fit; "
                          f"the step times and the probe go on — stop the other one or move profile_steps")
                self.traced = None
            else:
                self._cpu = outside_steps.Window(threadcpu.snapshot(loaders=True), tf.profiler.experimental.Trace)
                self._profiling = True
        if self.traced and self._step == self.traced[1] and self._profiling:
            self._stop()
        self._trace = tf.profiler.experimental.Trace(self.marker, step_num=self._step, _r=1)
        self._trace.__enter__()  # the capture's last step (xprof's table leaves it out): its reading inside it
        self._cpu.open(last_step=True) if self._profiling and self._step == self.traced[1] - 1 else None
        self._block_ms = 0.0
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self.sync and logs and "loss" in logs:
            _ = float(logs["loss"])  # waits for the step to finish on the device
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._trace = None
        self.step_times_ms.append((time.perf_counter() - self._t0) * 1e3 - self._block_ms)
        self._step += 1
        if self._profiling and outside_steps.last_of_epoch(self.params, batch):  # fit's validation and epoch end next
            self._cpu.open()

    def on_train_end(self, logs=None):
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._trace = None
        if self._profiling:
            self._stop()
        if self._runner is not None:
            self.model.train_function = self._train_function  # fit again later: no probe inside it
            self._after_loop_block()
        self._write_steps()

    def on_epoch_end(self, epoch, logs=None):  # fit's validation and the epoch-end callbacks: out of the record
        if self._profiling:
            self._cpu.open()

    def on_test_begin(self, logs=None):  # fit's validation runs evaluate with the same callbacks: out of the record
        self.on_epoch_end(None)
        if not fit_running(self.model):
            warn_user("tfbertperf ProfileCallback profiles fit's training steps; evaluate() and predict() with it "
                      "capture nothing (profile those with tf.profiler.experimental.start/stop)")

    on_predict_begin = on_test_begin

    def _stop(self):
        t0 = time.perf_counter()
        stepfile.own_second(self.logdir)  # else a second fit's capture in the same second is written over the first
        self._cpu.end(threadcpu.snapshot(loaders=True))  # its outside-the-steps event closed first
        tf.profiler.experimental.stop()
        self._profiling = False
        threadcpu.write_beside_newest_capture(self.logdir, None, None, self._cpu.record())
        self._profiled = (self.traced[0], self._step)
        self._session = stepfile.session_dir(self.logdir, self._sessions_before)
        self._stop_ms = (time.perf_counter() - t0) * 1e3  # the pipeline runs ahead meanwhile: stepfile.after_stop

    def _document(self) -> dict:
        """The step file's object for the steps so far (at the end of fit, or at a block: the auto probe's
        interval from the blocks that ran)."""
        what_if, excluded = None, []
        if self._runner is not None:
            excluded = excluded_steps(self._ran, self.step_times_ms, self._warmup, self.traced, self._grabbed_at)
            what_if = what_if_record(self._runner.step_times_ms, self._ran, self.auto, self.probe_ci95,
                                     len(self._plan), self._stopped)
            if what_if and self._autotuned:  # the dataset's (analyze: where the capture shows none)
                what_if["autotuned_prefetch"] = self._autotuned
        warmup = self._warmup if self._runner else short_run_budget(len(self.step_times_ms), self.warmup_steps, 0)[0]
        excluded += stepfile.after_stop(self.step_times_ms, self._profiled, warmup, self._stop_ms)
        return stepfile.document(self.step_times_ms, profiled_steps=self._profiled, warmup_steps=warmup,
                                 excluded_steps=excluded, what_if=what_if, batches_per_step=self._batches,
                                 written_by="tfbertperf.keras.ProfileCallback")

    def _write_steps(self) -> None:
        doc = self._document()
        self.step_file = stepfile.write((self._session or Path(self.logdir)) / stepfile.STEP_FILE, doc)
        if missed := stepfile.missed_window(self.window, self._step * self._batches, "ProfileCallback"):
            warn_user(missed)
        if self._runner is not None:
            self.what_if, said = after_fit(doc.get("summary"), taken=self._batch is not None, ran=self._ran,
                                           stopped=self._stopped, steps=self._step, warmup=self._warmup,
                                           traced=self.traced, probe_steps=self.probe_steps,
                                           target=self.probe_ci95 if self.auto else None)
            if said:
                warn_user(said)
            found = ((autotuned_prefetch.in_capture(self._session) if self._session else []) or self._autotuned) \
                if self.what_if else []
            if found:  # listed; the figure may read low unless the blocks ran after the steps (autotuned_prefetch.py)
                self.what_if["autotuned_prefetch"] = found
                if not self.what_if["after_steps"]:
                    warn_user(autotuned_prefetch.fit_warning(self.what_if, found))

