"""Step times, a capture and the measured what-if for a TensorFlow training loop you write yourself (a
`tf.function` step with `tf.GradientTape`, not `model.fit`) — what `tfbertperf.keras.ProfileCallback` does for a
fit and `tfbertperf.jax_steps.StepTimer` for a JAX loop, with the same step file beside the capture.

    from tfbertperf.tf_steps import StepTimer

    timer = StepTimer("logs/run1", profile_steps="20:40", probe=True, total_steps=steps)
    state = lambda: [*model.variables, *optimizer.variables]   # what train_step updates
    batches = iter(dataset)
    for i in range(steps):
        timer.probe(train_step, state)                 # a block of the what-if, where its plan puts one
        with timer.step() as step:
            batch = next(batches)                      # inside the step: its wait for input is the step's
            timer.keep_batch(batch)                    # the probe caches one batch, once
            step.result = train_step(batch)            # read back (.numpy()) before the step's time is taken
    timer.probe(train_step, state, last=True)
    timer.close()                          # writes logs/run1/plugins/profile/<session>/tfbertperf_steps.json
    # then: tfbertperf analyze logs/run1

or, as a `for batch in dataset` loop (each batch fetched inside its step, the probe's blocks between the steps):

    for step, batch in timer.steps(dataset.take(steps), train_step, state):
        step.result = train_step(batch)
    timer.close()

Each step runs inside `tf.profiler.experimental.Trace("train", step_num=i, _r=1)` (the marker xprof's step table
and `analyze` read, ProfileCallback's); the capture starts with ProfileCallback's options (host tracer level 2,
no Python tracer) one step before START and stops at STOP (jax_steps.py: xprof leaves a capture's first and last
step out).  `threadcpu.json` goes beside it (the input threads' CPU: profile/contention.py).  Fetch the batch
inside the step: a `next(batches)` before the `with` leaves the loop's wait for its pipeline out of every figure.
Without probe=True, `probe()` and `keep_batch()` do nothing.

The what-if (`probe=True`): where the plan puts a block (jax_probe.py, train/probe.py: ProfileCallback's plan,
settle and blocks) the probe saves the variables you list (`state`: a list of variables, a `tf.Module` / Keras
model, or a callable returning either — the optimizer's slots exist only after its first step, so list them at the
call, not before the loop), times your `step_fn(batch)` on one batch cached on the device (a GPU's memory when
there is one, so T_c holds no host→device copy), and puts the variables back (train/probe.py Snapshot), so the loop
goes on from exactly where it was: with every variable the step updates listed (model, optimizer, metrics, a
`tf.random.Generator`'s state) and deterministic ops, the losses with and without the probe are the same, bit for
bit (tests/test_tf_steps.py).  The global seed's op-level generators (`tf.random.uniform` without a Generator,
dropout with a fixed seed) are not variables: their draws after a block differ.
"""

from __future__ import annotations

from typing import Callable

from tfbertperf.jax_probe import JaxProbe
from tfbertperf.jax_steps import StepTimer as _StepTimer
from tfbertperf.train import recovery
from tfbertperf.train.probe import (AUTO_CI95, PROBE_SETTLE_STEPS, PROBE_WARMUP_STEPS, SETTLE_MAX_STEPS, Snapshot,
                                    probe_args, read_back, time_block)


def _variables(state) -> list:
    """The variables a block saves and restores: a list of them, a module's (`.variables`), or a callable's."""
    state = state() if callable(state) and not hasattr(state, "variables") else state
    return list(state.variables) if hasattr(state, "variables") else list(state)


class TfProbe(JaxProbe):
    """JaxProbe's plan and record; a block runs the loop's own step on the variables themselves, saved before and
    restored after it (module docstring)."""

    def place(self, batch):
        import tensorflow as tf

        gpus = tf.config.list_logical_devices("GPU")
        if not gpus:  # nothing to copy on a CPU-only host: the tensors as they are
            return tf.nest.map_structure(tf.convert_to_tensor, batch)
        with tf.device(gpus[0].name):  # one copy now; every probe step then reads device memory
            return tf.nest.map_structure(tf.identity, batch)

    def timed(self, step_fn: Callable, state, n: int, wait: Callable, settle: float) -> list[float]:
        saved = Snapshot(_variables(state))
        feed = self.batch
        try:  # an interrupt inside the block must not leave the probe's updates in the model
            return time_block(lambda: step_fn(feed), wait, n, PROBE_WARMUP_STEPS if not self.ran else
                              PROBE_SETTLE_STEPS, settle, SETTLE_MAX_STEPS, self.wait_each,
                              floor_ms=recovery.settled_floor(self.step_times_ms, [k for _, k in self.ran]))
        finally:
            saved.restore()


class StepTimer(_StepTimer):
    """Step markers, a capture of `profile_steps` and every step's wall time for a TensorFlow loop, written as a
    step file by close() (module docstring); the measured what-if with probe=True.

    Args: as tfbertperf.jax_steps.StepTimer's (logdir, profile_steps, warmup_steps, marker, probe, probe_steps,
      probe_blocks, probe_ci95, total_steps), and ProfileCallback's capture settings: host_tracer_level,
      python_tracer, device_tracer_level, threadpool_events.
    Use: `timer.probe(step_fn, state)` before each step and once after the last (`last=True`): `step_fn(batch)`
      your step, `state` the variables it updates; `timer.keep_batch(batch)` in the step (module docstring).
    """

    def __init__(self, logdir, profile_steps="20:40", warmup_steps: int = 5, marker: str = "train",
                 host_tracer_level: int = 2, python_tracer: bool = False, device_tracer_level: int = 1,
                 threadpool_events: bool = False, *, probe: bool = False, probe_steps: int | str = "auto",
                 probe_blocks: int = 4, probe_ci95: float = AUTO_CI95, total_steps: int | None = None) -> None:
        import tensorflow as tf

        from tfbertperf.profile import capture

        options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=host_tracer_level,
                                                           python_tracer_level=int(python_tracer),
                                                           device_tracer_level=device_tracer_level)

        def start(logdir, **_):
            try:
                capture.start(logdir, options, threadpool_events=threadpool_events)
            except tf.errors.AlreadyExistsError as e:  # StepTimer goes on without a capture, and says so
                raise RuntimeError(f"a profiler is already running: {e.message}") from None

        super().__init__(logdir, profile_steps, warmup_steps, marker, None, start, tf.profiler.experimental.stop,
                         lambda name, step_num: tf.profiler.experimental.Trace(name, step_num=step_num, _r=1),
                         read_back, probe=False)
        self.stop_hint = "tf.profiler.experimental.stop, or Keras' TensorBoard(profile_batch=…)"
        self.outside_annotation = tf.profiler.experimental.Trace
        self.edge_steps_out = True  # a TensorFlow loop's capture: contention.py reads the record as the steps'
        if probe:
            auto, n, ci95 = probe_args(probe_steps, probe_ci95, who="StepTimer")
            self._probe = TfProbe(auto, n, int(probe_blocks), ci95, wait_each=True)
            if total_steps is not None:
                self.plan_probe(int(total_steps))

    def document(self, *args, written_by: str = "tfbertperf.tf_steps.StepTimer", **kw) -> dict:
        return super().document(*args, written_by=written_by, **kw)
