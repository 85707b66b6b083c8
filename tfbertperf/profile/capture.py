"""Start a tf.profiler capture, by default without TF's thread-pool task events (3/4 of a trace's events).

What a capture records, counted in one profiled window of tiny BERT (batch 16, 2 cores, TF 2.21): about 10,600
host events a step.  About 7,900 of them come from the thread-pool listener that `CreateHostTracer` always starts
next to the TraceMe recorder (xla/tsl/profiler/backends/cpu/threadpool_listener.cc): three events (schedule,
region start, region stop) for every closure a TF thread pool runs — mostly the blocks Eigen cuts each op into on
the intra-op pool.  Without them the window's .xplane.pb is 2.6 MB instead of 6.7 MB and attributing it takes
0.8 s instead of 5 s.  Their cost to the traced steps themselves is small and within this VM's noise: traced ÷
untraced 1.012–1.020 without them, 1.017–1.051 with them (tools/bench/bench_overhead.py, BENCHMARKS.md).

What those events give: `ThreadpoolListener::Region` spans on the intra-op (Eigen) threads, which are otherwise
blank in Trace Viewer, and the flow arrows from a task's scheduling to its run.  xprof's step table, input
pipeline analysis, op statistics and tf.data statistics come from other events and are the same without them;
our contention estimate (profile/contention.py) then reads function executions and takes the compute width to be
all cores (replayed on the same traces with and without the events: stolen time within 0.12 ms a step).
`profile.threadpool_events=true` keeps them.

The listener's switch is not part of ProfilerOptions.  TF exports it from libtensorflow_framework
(`tsl::profiler::threadpool_listener::Deactivate()`), and the profiler session turns it on in `start`, so
switching it off right after `start` keeps the TraceMe events and drops only the pool's.  When the symbol is
missing (another TF build) the capture keeps the events and says so.
"""

from __future__ import annotations

import ctypes
import glob
import os
import time

# Itanium-mangled names of tsl::profiler::threadpool_listener::{Deactivate,IsEnabled}().
_DEACTIVATE = "_ZN3tsl8profiler19threadpool_listener10DeactivateEv"
_IS_ENABLED = "_ZN3tsl8profiler19threadpool_listener9IsEnabledEv"

_switch = None  # cached (deactivate, is_enabled) or False when TF does not export them


def _listener_switch():
    global _switch
    if _switch is None:
        _switch = False
        import tensorflow as tf

        for path in sorted(glob.glob(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_framework.so*"))):
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                deactivate, is_enabled = getattr(lib, _DEACTIVATE), getattr(lib, _IS_ENABLED)
            except (OSError, AttributeError):
                continue
            deactivate.restype, deactivate.argtypes = None, []
            is_enabled.restype, is_enabled.argtypes = ctypes.c_bool, []
            _switch = (deactivate, is_enabled)
            break
    return _switch


def start(logdir: str, options, threadpool_events: bool = False) -> str:
    """tf.profiler.experimental.start(logdir, options), then drop the thread-pool listener unless asked for.

    Returns what the capture records of thread-pool tasks: "on" (asked for), "off", or "on (not switchable)"
    when this TF build does not export the listener's switch.
    """
    import tensorflow as tf

    tf.profiler.experimental.start(logdir, options=options)
    if threadpool_events:
        return "on"
    switch = _listener_switch()
    if not switch:
        return "on (not switchable)"
    deactivate, is_enabled = switch
    deactivate()
    return "off" if not is_enabled() else "on (not switchable)"


def profiler_options(profile_cfg):
    """tf.profiler options from the profile.* settings (RunConfig.profile)."""
    import tensorflow as tf

    return tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=profile_cfg.host_tracer_level,
        python_tracer_level=int(profile_cfg.python_tracer),
        device_tracer_level=profile_cfg.device_tracer_level,
    )


class Capture:
    """One profiled window, driven by the training loop (train/ knows only `start()` and `stop()`).

    Args:
      logdir: TensorBoard logdir; the profile lands in `logdir/plugins/profile/<session>/<host>.xplane.pb`.
      options: tf.profiler.experimental.ProfilerOptions (see profiler_options).
      threadpool_events: keep TF's thread-pool task events (module docstring).
    Attributes:
      threadpool_events_status: what `start` returned ("on", "off", "on (not switchable)"), None before.
    """

    def __init__(self, logdir: str, options, threadpool_events: bool = False) -> None:
        self.logdir, self.options, self.threadpool_events = str(logdir), options, threadpool_events
        self.threadpool_events_status: str | None = None
        self.active = False
        self.started_at: float | None = None  # perf_counter when tracing started / stopped (the traced window:
        self.stopped_at: float | None = None  # job.py clips our storage read time to it)

    @classmethod
    def from_config(cls, logdir: str, profile_cfg) -> "Capture":
        return cls(logdir, profiler_options(profile_cfg), threadpool_events=profile_cfg.threadpool_events)

    def start(self) -> str:
        self.threadpool_events_status = start(self.logdir, self.options, threadpool_events=self.threadpool_events)
        self.active = True
        self.started_at = time.perf_counter()
        return self.threadpool_events_status

    def stop(self) -> None:
        """Stop the capture and write the .xplane.pb; a no-op when none is running."""
        if not self.active:
            return
        import tensorflow as tf

        self.active = False
        self.stopped_at = time.perf_counter()
        tf.profiler.experimental.stop()
