"""`ProfileCallback`: make a plain Keras `model.fit` produce a profile that xprof can split into steps.

Why it is needed: xprof finds steps only from `tf.profiler.experimental.Trace(name, step_num=i, _r=1)` markers
(`_r=1` marks a root step event), and charges input to a step only if the `next(iterator)` call runs inside that
marker. Keras 3's own `TensorBoard(profile_batch=…)` emits markers without `_r`, so xprof sees 0 steps.

How it works: a callback cannot wrap `next()`, but Keras 3's TF trainer calls
`on_train_batch_begin → train_function(iterator) → on_train_batch_end`, and `train_function` itself pulls the
batch with `next(iterator)`. So the marker is opened in `on_train_batch_begin` and closed in
`on_train_batch_end`: the fetch, the forward/backward pass and the update all fall inside step i.

Usage:
    from tfbertperf.keras import ProfileCallback
    model.fit(ds, epochs=…, callbacks=[ProfileCallback("logs/run1", profile_steps="20:40")])
    # then: tfbertperf analyze logs/run1   (or TensorBoard → Profile)

With `steps_per_execution=k` one marker spans k steps (xprof then reports k-step "steps").

Beside the capture (same session folder) it writes `threadcpu.json`: the CPU each thread of the process used over
the profiled window, with the capture's line id of each thread (profile/threadcpu.py), so that `analyze` counts
the input pipeline's measured CPU, not the wall time of its waits (profile/contention.py).
"""

from __future__ import annotations

import time

import keras
import tensorflow as tf

from tfbertperf.config import parse_window
from tfbertperf.profile import capture, threadcpu


class ProfileCallback(keras.callbacks.Callback):
    """Step markers for every training batch + a tf.profiler capture of the `profile_steps` window.

    Args:
      logdir: TensorBoard logdir; the profile lands in `logdir/plugins/profile/<session>/<host>.xplane.pb`.
      profile_steps: "START:STOP" or (start, stop), global step numbers counted across epochs, STOP exclusive;
        None or "none" = markers only, no capture.
      marker: the step marker name (what xprof's step table shows, e.g. "train 12").
      host_tracer_level, python_tracer, device_tracer_level: tf.profiler options (see ProfilerOptions).
      threadpool_events: also record TF's thread-pool task events (intra-op threads in Trace Viewer); off by
        default: they are 3/4 of a trace's events (tfbertperf/profile/capture.py).
      sync: pull the step's loss to the host before closing the marker, so a step's time includes its device
        work even on asynchronous devices (GPU/TPU). Costs one small device→host copy per step.
    Attributes:
      step_times_ms: wall time of every training batch (marker open → close), in milliseconds.
    """

    def __init__(self, logdir: str, profile_steps="20:40", marker: str = "train", host_tracer_level: int = 2,
                 python_tracer: bool = False, device_tracer_level: int = 1, sync: bool = True,
                 threadpool_events: bool = False):
        super().__init__()
        self.logdir = str(logdir)
        self.window = parse_window(profile_steps, None, label="ProfileCallback(profile_steps={!r})")
        self.marker = marker
        self.options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=host_tracer_level, python_tracer_level=int(python_tracer),
            device_tracer_level=device_tracer_level,
        )
        self.sync = sync
        self.threadpool_events = threadpool_events
        self.step_times_ms: list[float] = []
        self._step = 0
        self._trace = None
        self._t0 = 0.0
        self._profiling = False
        self._cpu_at_start = None

    # Keras calls these around each `train_function(iterator)`; next(iterator) runs inside that function.
    def on_train_batch_begin(self, batch, logs=None):
        if self.window and self._step == self.window[0] and not self._profiling:
            capture.start(self.logdir, self.options, threadpool_events=self.threadpool_events)
            self._cpu_at_start = threadcpu.snapshot()  # the threads' CPU over the window: analyze's input CPU
            self._profiling = True
        if self.window and self._step == self.window[1] and self._profiling:
            self._stop()
        self._trace = tf.profiler.experimental.Trace(self.marker, step_num=self._step, _r=1)
        self._trace.__enter__()
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self.sync and logs and "loss" in logs:
            _ = float(logs["loss"])  # waits for the step to finish on the device
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._trace = None
        self.step_times_ms.append((time.perf_counter() - self._t0) * 1e3)
        self._step += 1

    def on_train_end(self, logs=None):
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._trace = None
        if self._profiling:
            self._stop()

    def _stop(self):
        cpu_at_stop = threadcpu.snapshot()
        tf.profiler.experimental.stop()
        self._profiling = False
        threadcpu.write_beside_newest_capture(self.logdir, self._cpu_at_start, cpu_at_stop)
