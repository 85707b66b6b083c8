"""`ProfileCallback` for Keras on its JAX backend (`KERAS_BACKEND=jax`).

TensorFlow's profiler records none of a JAX backend's work: a Keras fit on JAX captured with the TensorFlow
ProfileCallback held its step markers and nothing else, and `analyze` read it "bound by other time … compile with
XLA" (the step already is XLA).  This callback captures with `jax.profiler` instead and times the steps with
`tfbertperf.jax_steps.StepTimer` — the markers, the window and the step file StepTimer gives a JAX loop you write
yourself, here around each `train_function` call of `fit` — so `tfbertperf analyze LOGDIR` reads it as any JAX
capture (device planes on a GPU, the host's XLA and Python tracer events on the CPU).  `tfbertperf.keras` hands out
this class when Keras runs on JAX, the TensorFlow one otherwise.

Not here: the what-if probe (it swaps the fit's tf.data iterator for a cached batch inside TensorFlow's
train_function): `probe=True` is refused.  With `steps_per_execution=k` a step is one call of k batches and
`profile_steps` still counts batches, as in the TensorFlow callback.
"""

from __future__ import annotations

import keras

from tfbertperf.jax_steps import StepTimer
from tfbertperf.train.probe import traced_steps


class ProfileCallback(keras.callbacks.Callback):
    """Step markers (`jax.profiler.StepTraceAnnotation`), a `jax.profiler` capture of `profile_steps` and every
    step's wall time in a step file beside it (module docstring).

    Args:
      logdir, profile_steps, marker, warmup_steps: as the TensorFlow ProfileCallback's (profile/keras_callback.py).
      sync: wait for the step's loss (jax.block_until_ready) before its time is taken, so the step holds its
        device work.
      profiler_options: a jax.profiler.ProfileOptions (None: JAX's defaults, the Python tracer on).
      probe: must be False on this backend (module docstring).
    Attributes: step_times_ms, step_file, what_if (always None here), timer (the StepTimer).
    """

    def __init__(self, logdir: str, profile_steps="20:40", marker: str = "train", warmup_steps: int = 5,
                 sync: bool = True, probe: bool = False, profiler_options=None, **tensorflow_only):
        super().__init__()
        if probe:
            raise ValueError("ProfileCallback(probe=True): the what-if probe needs Keras' TensorFlow backend (it "
                             "runs TensorFlow's train_function on a cached batch); this Keras runs on JAX — drop "
                             "probe=True, or measure the what-if with KERAS_BACKEND=tensorflow")
        if tensorflow_only:
            raise ValueError(f"ProfileCallback({', '.join(sorted(tensorflow_only))}=…): TensorFlow profiler "
                             f"options; this Keras runs on JAX — pass profiler_options=jax.profiler.ProfileOptions()")
        self._timer_args = dict(logdir=logdir, profile_steps=profile_steps, warmup_steps=warmup_steps, marker=marker,
                                profiler_options=profiler_options)
        self.timer = StepTimer(**self._timer_args)
        self.sync, self.what_if, self._open = bool(sync), None, None

    @property
    def step_times_ms(self) -> list[float]:
        return self.timer.step_times_ms

    @property
    def step_file(self):
        return self.timer.step_file

    def on_train_begin(self, logs=None):
        if self.timer.step_times_ms:  # a second fit: its own window, capture and step file (as the TensorFlow one)
            self.timer = StepTimer(**self._timer_args)
        k = max(1, int(getattr(self.model, "steps_per_execution", 1) or 1))  # one call, one marker: k batches
        if self.timer.window and k > 1:
            self.timer.traced = traced_steps((self.timer.window[0] // k, -(-self.timer.window[1] // k)))

    def on_train_batch_begin(self, batch, logs=None):
        self._open = self.timer.step()
        self._result = self._open.__enter__()

    def on_train_batch_end(self, batch, logs=None):
        if self._open is None:
            return
        if self.sync and logs and "loss" in logs:
            self._result.result = logs["loss"]
        self._open.__exit__(None, None, None)
        self._open = None

    def on_train_end(self, logs=None):
        if self._open is not None:  # a batch that never ended (fit stopped inside it): not a timed step
            self._open.__exit__(RuntimeError, RuntimeError("fit stopped"), None)
            self._open = None
        self.timer.close()
