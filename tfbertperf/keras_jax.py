"""`ProfileCallback` for Keras on its JAX backend (`KERAS_BACKEND=jax`).

TensorFlow's profiler records none of a JAX backend's work: a Keras fit on JAX captured with the TensorFlow
ProfileCallback held its step markers and nothing else, and `analyze` read it "bound by other time … compile with
XLA" (the step already is XLA).  This callback captures with `jax.profiler` instead and times the steps with
`tfbertperf.jax_steps.StepTimer` — the markers, the window and the step file StepTimer gives a JAX loop you write
yourself, here around each `train_function` call of `fit` — so `tfbertperf analyze LOGDIR` reads it as any JAX
capture (device planes on a GPU, the host's XLA and Python tracer events on the CPU).  `tfbertperf.keras` hands out
this class when Keras runs on JAX, the TensorFlow one otherwise.  With `steps_per_execution=k` a step is one call
of k batches and `profile_steps` still counts batches, as in the TensorFlow callback.

The what-if probe (`probe=True`), as the TensorFlow callback's (same plan, settle, blocks, step file and figures;
tfbertperf/jax_probe.py): at the last warm-up step the call's first batch is taken from Keras' iterator (the step still
trains on it, chained back in front) and put on the device once (`jax.device_put`); before a planned step the
callback syncs the fit's state into the model's variables (`model.jax_state_sync()`, Keras' own way for a callback
to read them), copies it, and runs `model.train_function` on the copy fed the cached batch, timing each step with the
fit's own work after `train_function` that a free input would leave in it: the new state stored through Keras'
attribute tracking (on a scratch layer: assigned to the model outside fit's loop it slows the fit's later steps)
and the logs read back to Python, which Keras' callback list does every step while a callback like this one is in
the fit (on a GPU: a wait for the step and a copy of the loss to the host).  Without them a fit's sub-ms steps on an
H200 read 12–18 pp high (BENCHMARKS.md, Keras on a GPU).  JAX's
state is values, not variables: the fit goes on from its own state, which the probe never touched (the copy is
donated to the probe's steps and dropped), so nothing needs restoring and the loss trajectory is unchanged.
"""

from __future__ import annotations

import itertools

import keras

from tfbertperf.errors import warn_user
from tfbertperf.jax_steps import StepTimer
from tfbertperf.profile import autotuned_prefetch, outside_steps
from tfbertperf.profile.probe_record import fit_running, unpatch
from tfbertperf.train.probe import AUTO_CI95, probe_args, traced_steps

try:  # what Keras' callback list does to the logs every step while a callback like this one is in the fit
    from keras.src.utils.python_utils import pythonify_logs
except ImportError:  # another Keras: its effect — the logs as Python floats, which waits for the step
    def pythonify_logs(logs):
        return {k: float(v) for k, v in (logs or {}).items()}

_STATE_KEYS = ("trainable_variables", "non_trainable_variables", "optimizer_variables", "metrics_variables")


class ProfileCallback(keras.callbacks.Callback):
    """Step markers (`jax.profiler.StepTraceAnnotation`), a `jax.profiler` capture of `profile_steps`, every step's
    wall time in a step file beside it, and with `probe=True` the measured what-if (module docstring).

    Args:
      logdir, profile_steps, marker, warmup_steps, probe, probe_steps, probe_blocks, probe_ci95, total_steps: as
        the TensorFlow ProfileCallback's (profile/keras_callback.py).
      sync: wait for the step's loss (jax.block_until_ready) before its time is taken, so the step holds its
        device work.
      profiler_options: a jax.profiler.ProfileOptions (None: JAX's defaults, the Python tracer on).
    Attributes: step_times_ms, step_file, what_if (after fit with probe=True), timer (the fit's StepTimer).
    """

    def __init__(self, logdir: str, profile_steps="20:40", marker: str = "train", warmup_steps: int = 5,
                 sync: bool = True, probe: bool = False, probe_steps: int | str = "auto", probe_blocks: int = 4,
                 probe_ci95: float = AUTO_CI95, total_steps: int | None = None, profiler_options=None,
                 **tensorflow_only):
        super().__init__()
        if tensorflow_only:
            raise ValueError(f"ProfileCallback({', '.join(sorted(tensorflow_only))}=…): TensorFlow profiler "
                             f"options; this Keras runs on JAX — pass profiler_options=jax.profiler.ProfileOptions()")
        probe_args(probe_steps, probe_ci95)  # a bad one is refused here, not at fit
        self.probe, self.total_steps = bool(probe), total_steps
        self._timer_args = dict(logdir=logdir, profile_steps=profile_steps, warmup_steps=warmup_steps, marker=marker,
                                profiler_options=profiler_options, probe=bool(probe), probe_steps=probe_steps,
                                probe_blocks=probe_blocks, probe_ci95=probe_ci95)
        self.timer = self._new_timer()
        self.sync, self._open, self._train_function, self._armed = bool(sync), None, None, False
        self._scratch, self._scratch_used = None, False

    def _new_timer(self) -> StepTimer:
        timer = StepTimer(**self._timer_args)
        timer.wording = ("ProfileCallback", "fit")
        return timer

    @property
    def step_times_ms(self) -> list[float]:
        return self.timer.step_times_ms

    @property
    def step_file(self):
        return self.timer.step_file

    @property
    def what_if(self) -> dict | None:
        return self.timer.what_if

    def on_train_begin(self, logs=None):
        unpatch(self.model)
        if self.timer._profiling:  # a fit stopped by an exception inside the capture: stop and write it
            self.timer.close()
        if self.timer.step_times_ms:  # a second fit: its own window, capture and step file (as the TensorFlow one)
            self.timer = self._new_timer()
        self._planned, self._autotuned = False, []
        self._batches = k = max(1, int(getattr(self.model, "steps_per_execution", 1) or 1))  # one call: k batches
        if self.timer.window and k > 1:
            self.timer.traced = traced_steps((self.timer.window[0] // k, -(-self.timer.window[1] // k)))

    def on_epoch_end(self, epoch, logs=None):  # fit's validation and the epoch-end callbacks: out of the CPU record
        self.timer.outside()

    def on_test_begin(self, logs=None):  # fit's validation runs evaluate with the same callbacks: silent there
        self.timer.outside()
        if not fit_running(self.model):
            warn_user("tfbertperf ProfileCallback profiles fit's training steps; evaluate() and predict() with it "
                      "capture nothing (profile those with jax.profiler.trace)")

    on_predict_begin = on_test_begin

    # ---- the what-if probe (module docstring)
    def on_epoch_begin(self, epoch, logs=None):
        if not self.probe or self._planned:  # planned at the first epoch this fit runs (initial_epoch)
            return
        if keras.distribution.distribution() is not None:  # the cached batch would sit on one device, not sharded
            raise ValueError("ProfileCallback(probe=True) supports one device; this fit runs under "
                             f"keras.distribution {type(keras.distribution.distribution()).__name__}")
        steps = self.total_steps or max(0, (self.params.get("epochs") or 0) - epoch) * -(
            -(self.params.get("steps") or 0) // self._batches)
        if not steps:
            raise ValueError("ProfileCallback(probe=True) needs the number of training steps: pass steps_per_epoch "
                             "to fit (or data of known length), or total_steps=N")
        self.timer.plan_probe(steps)
        self._planned = True
        self._scratch, self._scratch_used = keras.layers.Layer(name="tfbertperf_probe_scratch"), False
        self._train_function, self.model.train_function = self.model.train_function, self._train_with_probe

    def _train_with_probe(self, state, iterator):
        """model.train_function, handing the probe its first batch at the last warm-up step (module docstring)."""
        if not self._armed:  # a fit this callback is not in (one before stopped by an exception): unpatch, step
            self.model.train_function = self._train_function
            return self._train_function(state, iterator)
        self._armed = False
        if self.timer.wants_batch():
            self._autotuned = autotuned_prefetch.in_dataset(iterator)  # the dataset's, before the chain hides it
            if self._autotuned:  # blocks inside the fit would grow its buffer: all after the last step instead
                self.timer.probe_at_end()
            first = next(iterator)  # the end of the epoch ends the call here as it would have inside it
            iterator = itertools.chain([first], iterator)
            self.timer.keep_batch(first)
        return self._train_function(state, iterator)

    def _probe_step(self, state, batch):  # train_function's (logs, state) as the probe's (state, logs)
        """One compute-only step with the fit's own per-step work after `train_function` (module docstring)."""
        logs, state = self._train_function(state, itertools.repeat(batch))
        self._scratch._jax_state = dict(zip(_STATE_KEYS, state))  # Keras' tracking, as fit stores it on the model
        self._scratch_used = True
        return state, pythonify_logs(logs)  # read back to Python, as the callback list does every step

    def _state(self):
        m = self.model
        m.jax_state_sync()  # the fit's state into the variables (Keras' way for a callback), then read
        return tuple([v.value for v in vs] for vs in (m.trainable_variables, m.non_trainable_variables,
                                                      m.optimizer.variables, m.metrics_variables))

    def _probe_now(self, last: bool = False) -> None:
        """The block planned before this step (`last`: those after the last one) runs; its last state copy is not
        kept past it (after the loop too: else it held a copy of the whole state until the next fit)."""
        self.timer.probe(self._probe_step, self._state, last=last)
        if self._scratch_used:
            self._scratch._jax_state, self._scratch_used = None, False

    # ---- Keras calls these around each `train_function(state, iterator)` (next(iterator) runs inside it)
    def on_train_batch_begin(self, batch, logs=None):
        self._armed = True  # the next train_function call is this callback's step (_train_with_probe)
        if self._train_function is not None:  # a block planned before this step runs first: not the step's time
            self._probe_now()
        self._open = self.timer.step()
        self._result = self._open.__enter__()

    def on_train_batch_end(self, batch, logs=None):
        if self._open is None:
            return
        if self.sync and logs and "loss" in logs:
            self._result.result = logs["loss"]
        self._open.__exit__(None, None, None)
        self._open = None
        if outside_steps.last_of_epoch(self.params, batch):  # fit's validation and the epoch's end come next
            self.timer.outside()

    def on_train_end(self, logs=None):
        if self._open is not None:  # a batch that never ended (fit stopped inside it): not a timed step
            self._open.__exit__(RuntimeError, RuntimeError("fit stopped"), None)
            self._open = None
        if self._train_function is not None:
            self._probe_now(last=True)  # the blocks planned after the last step (a short fit, or moved there)
            self.model.train_function, self._train_function = self._train_function, None  # a later fit: no probe
        self.timer.close(written_by="tfbertperf.keras.ProfileCallback (JAX)", batches_per_step=self._batches,
                         autotuned_prefetch=self._autotuned or None)
        if self.what_if and self._autotuned:  # listed; the figure may read low unless the blocks ran after the steps
            self.what_if["autotuned_prefetch"] = self._autotuned
            if not self.what_if["after_steps"]:
                warn_user(autotuned_prefetch.fit_warning(self.what_if, self._autotuned))
