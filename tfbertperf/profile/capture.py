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

TensorFlow 2.21's pip build ignores every ProfilerOptions value: `tf.profiler.experimental.start` logs
`session_manager.cc:55] python_tracer_level expects an i value.` for each option (Python ints, NumPy ints,
bools, floats and strings alike) and traces with its defaults — host level 2, device level 1, no Python tracer.
`start` reads that log line from the process's stderr while it runs (and writes it back), so a capture knows which
options TF dropped — when the line is logged at all: our commands set TF_CPP_MIN_LOG_LEVEL=2, which hides TF's
warnings, and then the versions measured to drop the options (TF_DROPS_OPTIONS) stand in.  `ignored_settings`
turns the profile.* settings that asked for something else into caveats, and checks profile.python_tracer
against the capture itself (Python tracer frames are host events named "$…").
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import re
import tempfile
import time

TF_DEFAULT_LEVELS = {"host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 0}
"""What TensorFlow traces with when it drops an option (tsl profiler_session defaults)."""
TF_LEVELS = {"host_tracer_level": (0, 3), "device_tracer_level": (0, 1), "python_tracer_level": (0, 1)}
"""The levels TensorFlow's tracers have (ProfilerOptions docstring)."""
_DROPPED = re.compile(r"(\w+_level) expects an i value")

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
    return start_reading_log(logdir, options, threadpool_events)[0]


@contextlib.contextmanager
def _stderr_copied(lines: list[str]):
    """Run the body with file descriptor 2 going to a temporary file (C++ logging writes there, not through
    sys.stderr), then write what it got back to the real stderr and append its lines to `lines`."""
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 to read: start as usual, nothing read
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            data = tmp.read()
            if data:
                os.write(2, data)
            lines.extend(data.decode("utf-8", "replace").splitlines())


def start_reading_log(logdir: str, options, threadpool_events: bool = False) -> tuple[str, list[str]]:
    """`start`, also returning the ProfilerOptions fields TensorFlow logged as dropped while starting
    (module docstring: "<field> expects an i value")."""
    import tensorflow as tf

    log: list[str] = []
    with _stderr_copied(log):
        tf.profiler.experimental.start(logdir, options=options)
    dropped = sorted({m for line in log for m in _DROPPED.findall(line)})
    return _threadpool_off(threadpool_events), dropped


def _threadpool_off(threadpool_events: bool) -> str:
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


def _asked(profile_cfg) -> dict:
    return {"host_tracer_level": int(profile_cfg.host_tracer_level),
            "device_tracer_level": int(profile_cfg.device_tracer_level),
            "python_tracer_level": int(bool(profile_cfg.python_tracer))}


def _setting(field: str, value: int) -> str:
    return (f"profile.python_tracer={'true' if value else 'false'}" if field == "python_tracer_level"
            else f"profile.{field}={value}")


def has_python_frames(xplanes) -> bool:
    """The capture's host plane holds Python tracer frames (event names "$file.py:line function")."""
    from tfbertperf.profile.columns import digest, is_python_frame

    # the host threads' name tables are the /host:CPU planes' event metadata (read once per analysis)
    return any(t.names.table(is_python_frame).any() for path in xplanes for t in digest(path).threads)


def ignored_settings(profile_cfg, dropped: list[str], xplanes=()) -> list[str]:
    """Caveat lines (report.json `caveats`) for the profile.* tracer settings the capture did not get: a level
    outside what TF's tracer has; a setting other than TF's default on a build that drops ProfilerOptions (TF
    logged "<field> expects an i value." while starting — `dropped`, from start_reading_log — or, with that log
    hidden by TF_CPP_MIN_LOG_LEVEL, a version measured to drop them: TF_DROPS_OPTIONS); the Python tracer asked
    for and no Python frame in the capture (`xplanes`).  [] when every setting took effect."""
    drops = bool(dropped) or tf_version().startswith(TF_DROPS_OPTIONS)
    why = (f"TensorFlow {tf_version()} drops every ProfilerOptions value (it logs '<option> expects an i value.', "
           f"session_manager.cc) and traces with its defaults: host 2, device 1, Python off")
    out = []
    for field, value in _asked(profile_cfg).items():
        lo, hi = TF_LEVELS[field]
        default = TF_DEFAULT_LEVELS[field]
        if not lo <= value <= hi:
            out.append(f"{_setting(field, value)} is not a level TensorFlow's tracer has ({lo}–{hi})"
                       + (f"; {why}" if drops else ""))
        elif field == "python_tracer_level" and value and xplanes and not has_python_frames(xplanes):
            out.append(f"profile.python_tracer=true did not take effect: the capture has no Python frames"
                       + (f" — {why}" if drops else ""))
        elif value != default and drops:
            out.append(f"{_setting(field, value)} did not take effect: {why}")
    return out


TF_DROPS_OPTIONS = ("2.21.",)
"""TensorFlow versions measured to drop every ProfilerOptions value (pip build 2.21.0 here: Python ints, NumPy
ints, bools, floats and strings alike, each logged as "expects an i value"; no Python frame recorded)."""


def tf_version() -> str:
    import tensorflow as tf

    return tf.__version__


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
        self.dropped_options: list[str] = []  # ProfilerOptions fields TF logged as dropped (start_reading_log)
        self.active = False
        self.started_at: float | None = None  # perf_counter when tracing started / stopped (the traced window:
        self.stopped_at: float | None = None  # job.py clips our storage read time to it)

    @classmethod
    def from_config(cls, logdir: str, profile_cfg) -> "Capture":
        return cls(logdir, profiler_options(profile_cfg), threadpool_events=profile_cfg.threadpool_events)

    def start(self) -> str:
        self.threadpool_events_status, self.dropped_options = start_reading_log(
            self.logdir, self.options, threadpool_events=self.threadpool_events)
        self.active = True
        self.started_at = time.perf_counter()
        return self.threadpool_events_status

    def stop(self) -> None:
        """Stop the capture and write the .xplane.pb; a no-op when none is running."""
        if not self.active:
            return
        import tensorflow as tf

        from tfbertperf.profile.stepfile import own_second

        own_second(self.logdir)  # a capture stopping in the second an earlier one in this logdir is named by: wait
        self.active = False
        self.stopped_at = time.perf_counter()
        tf.profiler.experimental.stop()
