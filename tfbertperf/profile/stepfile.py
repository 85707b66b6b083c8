"""The step file: every step's wall time of a user's own training, written beside its capture, so that `analyze`
measures what it would otherwise estimate (the profiler's cost, and with the what-if probe, the input's cost).

Where: `<logdir>/plugins/profile/<session>/tfbertperf_steps.json` (STEP_FILE), next to the session's
`<host>.xplane.pb`; written by `tfbertperf.keras.ProfileCallback` (Keras `model.fit`) and by
`tfbertperf.jax_steps.StepTimer` (a JAX loop).  `tfbertperf analyze` finds it there, or takes `--steps FILE`.

Schema "tfbertperf.steps/1" (JSON object; times in milliseconds; step i = the i-th step marker, from 0):
  step_time_ms     [float, …]  wall time of every step in order (marker open → close, the step's result read
                               back), profiled or not.  Required, at least one.
  profiled_steps   [start, stop] | null   the steps inside the capture (stop exclusive); null = none profiled.
  warmup_steps     int ≥ 0     leading steps left out of every mean (tracing, compilation, warm caches).
  excluded_steps   [int, …]    further steps left out of the unprofiled mean: the steps a what-if block ran
                               inside, and the steps right after it (fed from buffers a run-ahead pipeline
                               filled while the block ran, until they are back to its pace: train/recovery.py),
                               and the steps right after the capture stopped (filled while the profiler wrote
                               it: `after_stop`, and with a probe train/recovery.py's rule too).
  what_if          null | {"compute_only_step_ms": [float, …] (the probe's timed steps on one cached batch),
                           "blocks": [[before_step, timed_steps], …],
                           "autotuned_prefetch": [{"iterator": str, …}, …] optional: the tf.data prefetches
                           sizing their own buffer that the fit's dataset runs, under which the figure may read
                           low (profile/autotuned_prefetch.py in_dataset; analyze reports them where its capture
                           shows none, as on Keras' JAX backend)}
  batches_per_step int ≥ 1     optional (1): the batches one step covers — a Keras fit with steps_per_execution=k
                               calls back, and is timed, once per call of k batches.
  written_by       str         which helper wrote it (informational).
  summary          {…}         the figures below as the writer computed them (informational: the reader
                               recomputes them from the lists).

Definitions (`summarize`):
  unprofiled steps: i ≥ warmup_steps, outside profiled_steps, not in excluded_steps.
  unprofiled_step_ms = T: their mean (a throughput figure: a stall that hits one step in N counts).
  profiled_step_ms: the mean of the profiled steps as the helper timed them (the capture's own step, read from the
    trace, is what analyze compares with T).
  compute_only_step_ms = T_c: the mean of what_if.compute_only_step_ms, less interrupted steps: a probe step over
    INTERRUPTED × the median probe step (compute_only_interrupted counts them).  The probe's step is the same work
    on the same cached batch every time, so one that takes several times as long was stopped by something that is
    not its compute (a garbage collection, the OS, a retrace): one 192 ms step among forty of 4.5–6 ms made a
    keras-hub tokenizer fit's T_c 10 ms and its measured input cost 0 % against a truth of 35 % (issue 29).  Real
    steps keep every step: there a slow step can be the input (a shard opened, a stall), which is what T measures.
  input_cost_fraction = (T − T_c) / T, clipped to [0, 1]: how much shorter the step would be with free input —
    with each block paired with the real steps around it in time: T_blocks_ms[k] = the mean of the
    max(n_k, BRACKET_MIN) unprofiled steps right before block k and as many right after it (n_k its timed steps),
    T_c_blocks_ms[k] = the block's mean, and input_cost_fraction = (Σ n_k T_k − Σ n_k T_c,k) ÷ Σ n_k T_k.  On a
    machine whose speed drifts (a shared host, thermal limits) a block is then compared with the stretch it sat
    in, not with the whole run; without block positions, (T − T_c) / T.  Where K ≥ 2 blocks all ran after the
    last step (probe_after_steps: ProfileCallback puts them there under a tf.data prefetch that sizes its own
    buffer, which blocks inside the fit would grow: profile/autotuned_prefetch.py), T_blocks_ms[k] = the mean of
    the k-th of K equal stretches of the unprofiled steps, in order.
  input_cost_ci95 = the half-width of a 95 % interval around input_cost_fraction from the blocks' spread: with
    d_k = T_blocks_ms[k] − T_c_blocks_ms[k] over K ≥ 2 blocks, t(0.975, K − 1) × sd(d) / √K ÷ the mean of
    T_blocks_ms; None with fewer than 2 blocks.  On a noisy machine a 5-step block's T_c scatters by ±10 % (a 4 ms
    cached step read 3.0–4.3 ms on a 2-core VM, issue 29): this says how far the figure can be trusted and
    whether more probe steps are needed.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from tfbertperf.errors import UsageError
from tfbertperf.train.blocks import BRACKET_MIN, _blocks, _ci95, interval  # noqa: F401  (the pairing, in train/)
from tfbertperf.train.probe import INTERRUPTED, uninterrupted  # noqa: F401  (INTERRUPTED: named above)

STEP_FILE = "tfbertperf_steps.json"
SCHEMA = "tfbertperf.steps/1"


@dataclass
class StepSummary:
    """What analyze reads from a step file (module docstring: definitions)."""
    path: str
    unprofiled_step_ms: float | None  # None when every timed step was profiled (or warm-up)
    unprofiled_steps: int
    profiled_step_ms: float | None = None
    profiled_steps: list[int] | None = None
    compute_only_step_ms: float | None = None
    compute_only_steps: int = 0
    compute_only_interrupted: int = 0
    input_cost_fraction: float | None = None
    input_cost_ci95: float | None = None
    T_blocks_ms: list[float] = field(default_factory=list)
    T_c_blocks_ms: list[float] = field(default_factory=list)
    written_by: str = ""
    drift: float | None = None  # |mean after the window − mean before it| ÷ T (≥ 3 unprofiled steps each side)
    batches_per_step: int = 1  # a step (marker) is one call of this many batches (Keras steps_per_execution)
    autotuned_prefetch: list[dict] | None = None  # what_if.autotuned_prefetch (module docstring)
    probe_after_steps: bool = False  # every what-if block ran after the last step (module docstring)

    def as_dict(self) -> dict:
        r = lambda x: None if x is None else round(x, 4)  # noqa: E731
        return {"file": self.path, "written_by": self.written_by,
                "unprofiled_step_ms": r(self.unprofiled_step_ms), "unprofiled_steps": self.unprofiled_steps,
                "profiled_step_ms": r(self.profiled_step_ms), "profiled_steps": self.profiled_steps,
                "compute_only_step_ms": r(self.compute_only_step_ms), "compute_only_steps": self.compute_only_steps,
                "compute_only_interrupted": self.compute_only_interrupted,
                "input_cost_fraction": r(self.input_cost_fraction), "input_cost_ci95": r(self.input_cost_ci95),
                "T_blocks_ms": [round(x, 4) for x in self.T_blocks_ms],
                "T_c_blocks_ms": [round(x, 4) for x in self.T_c_blocks_ms], "drift": r(self.drift),
                "batches_per_step": self.batches_per_step, "autotuned_prefetch": self.autotuned_prefetch,
                "probe_after_steps": self.probe_after_steps}


def _times(where: str, key: str, value) -> list[float]:
    if not isinstance(value, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                              and math.isfinite(x) and x >= 0 for x in value):
        raise UsageError(f"{where}: '{key}' must be a list of step times in milliseconds (finite, ≥ 0)")
    return [float(x) for x in value]


def _window(where: str, value, n: int) -> tuple[int, int] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 2 or not all(isinstance(x, int) for x in value)
            or not 0 <= value[0] < value[1]):
        raise UsageError(f"{where}: 'profiled_steps' must be [start, stop] with 0 ≤ start < stop, or null")
    return value[0], min(value[1], n)


AFTER_STOP_MAX = 8
"""At most this many steps after the capture stopped are left out of T (`after_stop`): a run-ahead pipeline holds a
few batches, not the whole stop's worth (the bench truths leave 8 real steps after a cached block untimed)."""


def after_stop(step_time_ms, window, warmup_steps: int, stop_ms: float) -> list[int]:
    """The steps right after the capture's window that a run-ahead pipeline fed from buffers it filled while the
    profiler stopped and wrote the capture (`stop_ms`): as many as that pause is steps long (the median unprofiled
    step before the window), at most AFTER_STOP_MAX.  Left out of T as the steps after a what-if block are: a
    Keras fit behind a sleeping map ran 19 and 28 ms steps right after a 0.3 s stop against ~100 ms before it, and
    the unprofiled steps around the window then "drifted" 20 % (issue 29)."""
    if not window or stop_ms <= 0:
        return []
    before = [x for i, x in enumerate(step_time_ms) if warmup_steps <= i < window[0]]
    if not before:
        return []
    n = min(AFTER_STOP_MAX, math.ceil(stop_ms / max(statistics.median(before), 1e-6)))
    return list(range(window[1], min(window[1] + n, len(step_time_ms))))


def document(step_time_ms, *, profiled_steps=None, warmup_steps: int = 0, excluded_steps=(), what_if=None,
             written_by: str = "", batches_per_step: int = 1) -> dict:
    """The step file's JSON object (module docstring), with its `summary` filled in."""
    doc = {"schema": SCHEMA, "written_by": written_by, "step_time_ms": [round(float(x), 4) for x in step_time_ms],
           "profiled_steps": list(profiled_steps) if profiled_steps else None, "warmup_steps": int(warmup_steps),
           "excluded_steps": sorted({int(i) for i in excluded_steps}), "what_if": what_if,
           **({"batches_per_step": int(batches_per_step)} if batches_per_step > 1 else {})}
    doc["summary"] = summarize(doc, "(being written)").as_dict() if doc["step_time_ms"] else None
    return doc


def missed_window(window: tuple[int, int] | None, steps: int, who: str, run: str = "fit") -> str | None:
    """What to tell a user whose window began after the run's last step (no capture was made), else None."""
    if window is None or window[0] < steps:
        return None
    return (f"tfbertperf {who}: profile_steps {window[0]}:{window[1]} begins after the {run}'s last step ({steps} "
            f"steps): nothing was captured, the step times are in the step file — give profile_steps a window "
            f"inside the {run}")


def write(path, doc: dict) -> Path:
    """Write a step file atomically (a reader sees the old file or the whole new one)."""
    from tfbertperf.storage.atomic import write_atomic

    if doc.get("summary"):  # the file it is in (document() could not know it: it said "(being written)")
        doc = {**doc, "summary": {**doc["summary"], "file": str(path)}}
    return write_atomic(path, (json.dumps(doc, indent=1) + "\n").encode(), durable=False)


def summarize(doc: dict, where: str) -> StepSummary:
    """The figures of a step file's object (module docstring); UsageError naming `where` when it is malformed."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UsageError(f"{where}: not a step file (expected \"schema\": \"{SCHEMA}\")")
    steps = _times(where, "step_time_ms", doc.get("step_time_ms"))
    window = _window(where, doc.get("profiled_steps"), len(steps))
    warmup = doc.get("warmup_steps", 0)
    excluded = doc.get("excluded_steps") or []
    if not isinstance(warmup, int) or warmup < 0 or not all(isinstance(i, int) for i in excluded):
        raise UsageError(f"{where}: 'warmup_steps' must be an int ≥ 0 and 'excluded_steps' a list of step numbers")
    k = doc.get("batches_per_step", 1)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise UsageError(f"{where}: 'batches_per_step' must be an int ≥ 1 (the batches one step marker covers)")
    out_of_window = (lambda i: True) if window is None else (lambda i: not window[0] <= i < window[1])
    skip = set(excluded)
    unprofiled = [i for i in range(warmup, len(steps)) if out_of_window(i) and i not in skip]
    if not steps:
        raise UsageError(f"{where}: 'step_time_ms' is empty: no step was timed")
    T = statistics.fmean(steps[i] for i in unprofiled) if unprofiled else None  # every step profiled: no T
    s = StepSummary(path=where, unprofiled_step_ms=T, unprofiled_steps=len(unprofiled),
                    written_by=str(doc.get("written_by") or ""), batches_per_step=k)
    if window is not None and window[0] < len(steps):
        s.profiled_steps = list(window)
        s.profiled_step_ms = statistics.fmean(steps[window[0]:window[1]])
        before, after = [steps[i] for i in unprofiled if i < window[0]], [steps[i] for i in unprofiled if i >= window[1]]
        if len(before) >= 3 and len(after) >= 3:
            s.drift = abs(statistics.fmean(after) - statistics.fmean(before)) / T
    wi = doc.get("what_if")
    if wi:
        if not isinstance(wi, dict):
            raise UsageError(f"{where}: 'what_if' must be an object or null")
        probe = _times(where, "what_if.compute_only_step_ms", wi.get("compute_only_step_ms"))
        found = wi.get("autotuned_prefetch")
        if found is not None and not (isinstance(found, list) and all(
                isinstance(f, dict) and isinstance(f.get("iterator"), str) for f in found)):
            raise UsageError(f"{where}: 'what_if.autotuned_prefetch' must be a list of {{\"iterator\": name, …}}")
        s.autotuned_prefetch = [{"autotune_mode": "", **f} for f in found] if found else None
        blocks = wi.get("blocks") or []
        if not isinstance(blocks, list) or not all(isinstance(b, list) and len(b) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in b) for b in blocks):
            raise UsageError(f"{where}: 'what_if.blocks' must be a list of [before_step, timed_steps] int pairs ≥ 0")
        s.probe_after_steps = bool(blocks) and all(b[0] >= len(steps) for b in blocks)
        if probe and T:
            kept = uninterrupted(probe)
            s.compute_only_step_ms = statistics.fmean(probe[j] for j in kept)
            s.compute_only_steps = len(kept)
            s.compute_only_interrupted = len(probe) - len(kept)
            s.T_blocks_ms, s.T_c_blocks_ms, sizes = _blocks(steps, unprofiled, probe, blocks, set(kept))
            if sizes:  # paired in time: each block against the real steps around it
                t = sum(x * n for x, n in zip(s.T_blocks_ms, sizes))
                tc = sum(x * n for x, n in zip(s.T_c_blocks_ms, sizes))
                s.input_cost_fraction = max(0.0, min(1.0, (t - tc) / t)) if t > 0 else None
                s.input_cost_ci95 = _ci95(s.T_blocks_ms, s.T_c_blocks_ms)
            else:
                s.input_cost_fraction = max(0.0, min(1.0, (T - s.compute_only_step_ms) / T))
    return s


def read(path) -> StepSummary:
    """Read and summarize a step file; UsageError (one line naming the file) when it is missing or malformed."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise UsageError(f"--steps {p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{p}: not a readable step file ({type(e).__name__})") from None
    return summarize(doc, str(p))


def sessions(logdir) -> set[str]:
    """The capture session folders under `logdir/plugins/profile` now (a writer lists them before it starts the
    profiler and after it stops it: the new one is the capture's, `session_dir`)."""
    d = Path(logdir) / "plugins" / "profile"
    return {p.name for p in d.iterdir() if p.is_dir()} if d.is_dir() else set()


def session_dir(logdir, before: set[str]) -> Path | None:
    """The session folder a capture added to `logdir` since `before` (sessions()), newest first; None if none."""
    new = sorted(sessions(logdir) - before)
    return Path(logdir) / "plugins" / "profile" / new[-1] if new else None


def own_second(logdir) -> None:
    """Wait, right before a capture stops, until no session folder in `logdir` bears the current second's name.
    TensorFlow's and JAX's profilers name the folder by the second the capture stops in (2026_11_26_15_39_19, local
    time), so a second capture that stopped in the same second as one before it (two short fits with one
    ProfileCallback) was written over the first, whose step file then described the wrong capture."""
    have = sessions(logdir)
    for _ in range(3):
        now = time.time()
        if not have & {time.strftime("%Y_%m_%d_%H_%M_%S", f(now)) for f in (time.localtime, time.gmtime)}:
            return
        time.sleep(1.0 - now % 1.0 + 0.01)


def beside(directory) -> Path | None:
    """The step file in a capture's session directory, or None."""
    f = Path(directory) / STEP_FILE
    return f if f.is_file() else None
