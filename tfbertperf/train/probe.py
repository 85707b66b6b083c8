"""The compute-only what-if probe: where its blocks go, what they feed the step, and how state is restored.

T_c in "input cost = (T − T_c) / T" is the mean of the probe's timed steps: the same step function, under the
same strategy, run the same way on `Dataset.from_tensors(first real batch).repeat()`, with no profiler running.
Its steps run in `profile.probe_blocks` blocks spread evenly through the steady steps (after warm-up, outside the
profiled window), so that T and T_c are sampled side by side in time: on a shared or thermally throttled machine
the speed of the CPU drifts by several per cent over seconds, and a probe run only after the loop would measure a
different machine than the loop did.  Before a block the model's and optimizer's variables are snapshot (on the
device or in memory, or to a checkpoint on local disk for a host-resident state over 256 MiB: `Snapshot`) and restored after it, so the probe's updates (it trains on one cached batch) leave no trace in the run's
loss trajectory.  The first step of each block is not timed (the first block's first two: the cached batch's
static shapes may retrace the step), nor are the steps run until 10 recent real steps' worth of time has passed
(SETTLE_REAL_STEPS, at most SETTLE_MAX_STEPS: the pipeline refills its buffers meanwhile, on the probe's cores).
A pipeline with background stages (prefetch, parallel map/interleave, read-ahead) keeps filling its buffers while a block runs, so the real steps right after a block can be fed for
free until they are drained; train/recovery.py finds them in the step times, and the run leaves them out of its
steady steps if the pipeline was behind (report/build.py `steady_steps`).

What T_c excludes: the host→device copy.  The direct figures count copies as transfer (profile/steptable.py), so
the probe feeds a batch that already sits on the device: under a tf.distribute strategy the distributed
iterator puts each replica's slice on its device ahead of the step (as before); under the default strategy
the first batch is copied once to the default compute device (`tf.identity` under `tf.device("/GPU:0")`) and
the same device tensors are fed every step.  On a host without GPUs the cached batch is what it always was,
`Dataset.from_tensors(batch).repeat()` on the CPU: there is nothing to copy, so this is a no-op on CPU.
Timing: each probe step is timed from its dispatch to its return, and the block's last step also waits for
the device (reads its output back), so the block's times add up to its wall time and T_c (their mean) is
block time ÷ steps, as the loop's T is (train/loop.py); the untimed steps before them each wait for the device.
"""

from __future__ import annotations

import itertools
import time
from typing import Callable

from tfbertperf.config.schema import warmup_for
from tfbertperf.train.recovery import settled_floor, still_refilling

PROBE_WARMUP_STEPS = 2  # first probe block: steps not timed (the first retraces for the cached batch's shapes)
PROBE_SETTLE_STEPS = 1  # later blocks: steps not timed (the pipeline's threads finish the element in hand)
PROBE_SHARE = 2  # the probe times at most 1/2 as many steps as the run has
INTERRUPTED = 4.0  # a probe step over this many times the median one was interrupted (profile/stepfile.py)

SETTLE_REAL_STEPS = 10
"""A probe block times its steps only after as much wall time as 10 recent real steps (at most SETTLE_MAX_STEPS
untimed steps): the time an input-bound pipeline takes to refill its buffers on the cores the probe's steps want
(Probe.run_block; run's loop and tfbertperf.keras.ProfileCallback alike).  After 10 real steps of a keras-hub
tokenizer fit, cached steps 2–6 ran +0.64 ms slower than steps 17–40 (8 rounds of 8, +0.09…+1.21 ms; 6.9 pp of
the real step), a per-example parse's +0.09 ms (tools/bench/bench_probe_settle.py): with the former 3 steps'
worth of time the probe's timed steps sat in that stretch and read the input cost low (issue 29)."""

SETTLE_LONGEST = 6  # … and while the pipeline is seen refilling (train/recovery.py), up to 6× as long as it ran and
REFILL_MAX_STEPS = 240  # … this many untimed steps: a tf.data fit on Keras-JAX still refilled 55 ms into its blocks

SETTLE_MAX_STEPS = 60
"""At most this many untimed steps a block: a pipeline that waits (a sleep, a socket) takes long real steps, and
its refill takes no core from the cached step anyway."""


def settle_ms(step_ms: list[float], warmup: int) -> float:
    """The settle time of a probe block: SETTLE_REAL_STEPS × the mean of the last 5 real steps after warm-up."""
    recent = step_ms[max(warmup, len(step_ms) - 5):]
    return SETTLE_REAL_STEPS * sum(recent) / len(recent) if recent else 0.0


def uninterrupted(probe: list[float]) -> list[int]:
    """Indices of the probe's (compute-only) steps that were not interrupted: at most INTERRUPTED × the median
    step.  The probe's step is the same work on the same cached batch every time; one several times as long was
    stopped by something else (a garbage collection, the OS, a retrace) — profile/stepfile.py's definitions."""
    import statistics

    median = statistics.median(probe)
    if median <= 0:  # steps timed at 0 ms (a coarse clock): no scale to judge an interruption by
        return list(range(len(probe)))
    return [j for j, x in enumerate(probe) if x <= INTERRUPTED * median]


def short_run_budget(steps: int, warmup_steps: int, probe_steps: int) -> tuple[int, int]:
    """(warm-up steps, probe timed steps) for a run of `steps` steps, scaled down for short runs.

    Warm-up drops the first steps (graph tracing, allocator and autotuner warm-up): `train.warmup_steps`, but
    at most a quarter of the run so that three quarters are measured, and at least 1 (the first step traces the
    graph) unless the run has a single step.  The probe times `profile.probe_steps`, but at most half as many
    steps as the run has (and at least 1 when it is on): with the default 20 a 3-step BERT-base run spent 260 s
    of 367 in the probe (issue 17).  report/caveats.py says when the figures then rest on too few steps.
    """
    warmup = warmup_for(steps, warmup_steps)
    probe = 0 if probe_steps <= 0 else max(1, min(int(probe_steps), steps // PROBE_SHARE))
    return warmup, probe


def traced_steps(window: tuple[int, int] | None, first: int = 0) -> tuple[int, int] | None:
    """(start, stop) of the capture for the profiled window [w0, w1): one step more on each side (from `first`,
    the first step this process runs), because xprof leaves a capture's first and last step out of its step
    table as possibly incomplete — a capture of exactly steps 20–39 gave 18 steps (21–38); this one gives the
    window's 20.  A window that ends at the run's last step keeps its last step out (19 of 20)."""
    return None if window is None else (max(first, window[0] - 1), window[1] + 1)


def probe_plan(steps: int, warmup: int, window: tuple[int, int] | None, probe_steps: int,
               blocks: int) -> list[tuple[int, int]]:
    """Where the what-if probe runs: [(before_step, timed_steps)], `before_step == steps` meaning after the loop.

    Blocks sit at evenly spaced steady steps (after warm-up + 1, outside the profiled window, whose first step
    would put the block inside the trace, and not within two blocks' length before it, so that the steps that
    follow a block, fed from the buffers it let the pipeline fill, are not the profiled ones); the probe's steps
    are shared out among them.  Too few steady steps
    for the blocks, or blocks == 1 → one block after the loop.
    """
    if probe_steps <= 0:
        return []
    blocks = max(1, min(int(blocks), probe_steps))
    w0, w1 = window if window else (steps, steps)
    per = -(-probe_steps // blocks)
    # Not inside the window, and not so close before it that the steps the buffers it filled feed are profiled: a
    # block's length for its recovery steps and as many again (with a block's settle of 10 real steps' worth of
    # time a 4-wide waiting map and prefetch 2 refill completely; a block 5 steps before the window left its
    # captured steps waiting less, and the capture alone read a waiting fit 10–15 pp low, issue 29).
    # (A block at w1 would run inside the trace: it stops one step later, traced_steps.)
    cand = [i for i in range(warmup + 1, steps) if not (w0 - 2 * per < i <= w1)]
    if blocks == 1 or len(cand) < 2 * blocks:
        return [(steps, probe_steps)]
    at = sorted({cand[int((b + 0.5) * len(cand) / blocks)] for b in range(blocks)})
    base, extra = divmod(probe_steps, len(at))
    return [(pos, base + (1 if k < extra else 0)) for k, pos in enumerate(at)]


AUTO_BLOCK_STEPS = 5  # probe_steps="auto": timed steps per block
AUTO_SPACING = 3  # … blocks at least 3 blocks' length apart: the block, its recovery steps, as many clean ones
AUTO_MIN_BLOCKS = 4  # … blocks run before the interval may stop it (t(0.975, 3) = 3.18: a quiet machine stops)
AUTO_MAX_STEPS = 100  # … timed steps at most, however long the run: 20 blocks, each costing about 15 real
# steps' time at worst (its settle and 5 steps) — 300 steps' time on a noisy machine; 18 blocks held the noisy shapes
# within 1–2 pp on the 2-core VM (BENCHMARKS, issue 29)
AUTO_CI95 = 0.025  # … stop once the measured input cost's 95 % interval is ±2.5 pp or narrower


def auto_plan(steps: int, warmup: int, window: tuple[int, int] | None) -> list[tuple[int, int]]:
    """The most blocks probe_steps="auto" may run: blocks of AUTO_BLOCK_STEPS timed steps, evenly spaced at least
    AUTO_SPACING blocks' length apart through the steady steps (so that each block keeps real steps on both sides
    to be compared with, beyond its recovery steps), up to AUTO_MAX_STEPS timed steps in all.  The caller stops
    early, at a block, once the blocks before it give an interval of AUTO_CI95 or narrower
    (profile/keras_callback.py); a run with room for fewer than AUTO_MIN_BLOCKS gets probe_plan's 20 steps in 4
    blocks, scaled down for a short run (short_run_budget)."""
    w0, w1 = window if window else (steps, steps)
    room = sum(1 for i in range(warmup + 1, steps) if not (w0 - 2 * AUTO_BLOCK_STEPS < i <= w1))
    blocks = min(room // (AUTO_SPACING * AUTO_BLOCK_STEPS), AUTO_MAX_STEPS // AUTO_BLOCK_STEPS)
    if blocks < AUTO_MIN_BLOCKS:
        return probe_plan(steps, warmup, window, short_run_budget(steps, warmup, 20)[1], 4)
    return probe_plan(steps, warmup, window, blocks * AUTO_BLOCK_STEPS, blocks)


def plan_for(steps: int, warmup_steps: int, traced: tuple[int, int] | None, auto: bool, probe_steps: int,
             blocks: int) -> tuple[int, list[tuple[int, int]]]:
    """(warm-up, plan) of a user's fit's probe (tfbertperf.keras's ProfileCallback, either backend): auto_plan, or
    `probe_steps` timed steps in `blocks` blocks (probe_plan), for a fit of `steps` steps captured over `traced`."""
    warmup, n = short_run_budget(steps, warmup_steps, probe_steps)
    return warmup, (auto_plan(steps, warmup, traced) if auto else probe_plan(steps, warmup, traced, n, blocks))


def probe_args(probe_steps, probe_ci95, who: str = "ProfileCallback") -> tuple[bool, int, float]:
    """(auto, probe_steps, probe_ci95) of `who`'s arguments, or a one-line ValueError naming the bad one."""
    auto = probe_steps == "auto"
    if not auto and (isinstance(probe_steps, bool) or not isinstance(probe_steps, int) or probe_steps < 0):
        raise ValueError(f"{who}(probe_steps={probe_steps!r}): expected \"auto\" or an int ≥ 0")
    if not (isinstance(probe_ci95, (int, float)) and 0 < probe_ci95 < 1):
        raise ValueError(f"{who}(probe_ci95={probe_ci95!r}): expected a fraction between 0 and 1")
    return auto, 0 if auto else int(probe_steps), float(probe_ci95)


def probe_source(strategy, first_batch):
    """Compute-only input: the first real batch, cached on the compute device and repeated (same shapes; module
    docstring: where it is placed).  Returns an iterable of batches."""
    import tensorflow as tf

    if strategy is tf.distribute.get_strategy():
        gpus = tf.config.list_logical_devices("GPU")
        if not gpus:  # nothing to copy on a CPU-only host: the same source as ever
            return tf.data.Dataset.from_tensors(first_batch).repeat()
        with tf.device(gpus[0].name):  # one copy now; every probe step then reads device memory
            cached = tf.nest.map_structure(tf.identity, first_batch)
        return itertools.repeat(cached)
    local = tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], first_batch)
    return strategy.distribute_datasets_from_function(lambda ctx: tf.data.Dataset.from_tensors(local).repeat())


def read_back(out) -> None:
    """Wait for a step's outputs: every tensor among them (a Keras step's logs too) read to the host."""
    import tensorflow as tf

    for t in tf.nest.flatten(out):
        if hasattr(t, "numpy"):
            t.numpy()


class Probe:
    """Runs the probe's blocks: `run_block(n)` times n compute-only steps; `step_times_ms` collects them.

    Args:
      step_fn: the run's compiled train step (batch → tensor [loss, accuracy]); with feed_iterator, a step that
        takes the cached source's iterator and pulls its own batch (Keras' `model.train_function`).
      strategy: the run's tf.distribute strategy.
      state: the variables to snapshot and restore around a block (model + optimizer, and whatever else the
        step updates: Keras' metric variables).
      hook: called as hook("probe") before every probe step, outside its timing (loop.STEP_HOOK).
      wait: blocks until a step's output is on the host (default: `out.numpy()`).
      wait_each: wait for every timed step, not only the block's last — for a loop that waits every step too
        (tfbertperf.keras.ProfileCallback with sync), so that T and T_c time the same thing.
    """

    def __init__(self, step_fn, strategy, state: list, hook: Callable[[str], None] | None = None, *,
                 feed_iterator: bool = False, wait: Callable = read_back, wait_each: bool = False) -> None:
        self.step_fn, self.strategy, self.state, self.hook = step_fn, strategy, state, hook
        self.feed_iterator, self.wait, self.wait_each = feed_iterator, wait, wait_each
        self.step_times_ms: list[float] = []
        self.blocks, self.sizes = 0, []  # blocks run, and each one's timed steps
        self._iter = None

    def run_block(self, first_batch, n_timed: int, settle_ms: float = 0.0, settle_max_steps: int = 10**9) -> None:
        """n_timed timed compute-only steps, after the untimed ones (PROBE_WARMUP_STEPS in the first block,
        PROBE_SETTLE_STEPS in later ones) and for at least `settle_ms` of wall time: an input-bound pipeline
        refills its buffers (prefetch, parallel map) when a block starts, on the cores the block's steps want, for
        about as long as it takes to produce those batches.  The first block too: where the cached batch's shapes
        need no new trace its two untimed steps are over in two steps' time, and its timed steps read 0.5–1.5 ms
        high on a 5 ms keras-hub tokenizer fit while the pipeline refilled (issue 29).  `settle_max_steps` caps the
        untimed steps that `settle_ms` adds (a waiting pipeline's long real steps against a short cached one)."""
        if self._iter is None:
            self._iter = iter(probe_source(self.strategy, first_batch))
        saved = Snapshot(self.state)
        try:  # an interrupt inside the block (Ctrl-C in a notebook) must not leave the probe's updates in the model
            self.step_times_ms += time_block(lambda: self.step_fn(self._iter if self.feed_iterator else
                                                                  next(self._iter)),
                                             self.wait, n_timed, PROBE_WARMUP_STEPS if self.blocks == 0 else
                                             PROBE_SETTLE_STEPS, settle_ms, settle_max_steps, self.wait_each, self.hook,
                                             settled_floor(self.step_times_ms, self.sizes))
            self.sizes.append(n_timed)
        finally:
            saved.restore()
        self.blocks += 1


def time_block(step: Callable[[], object], wait: Callable, n_timed: int, untimed: int, settle_ms: float = 0.0,
               settle_max_steps: int = 10**9, wait_each: bool = False, hook: Callable[[str], None] | None = None,
               floor_ms: float | None = None) -> list[float]:
    """One probe block's timed steps, ms (Probe.run_block's docstring; the Keras-JAX callback's block too): `step()`
    runs one compute-only step and returns its output, `wait(out)` blocks until it is done; `untimed` steps first,
    and more for `settle_ms` of wall time (at most `settle_max_steps`), then `n_timed` timed ones.  The untimed
    steps and the block's last wait, and every step with `wait_each`, so that the times add up to the block's.
    With `floor_ms` (the earlier blocks' pace: train/recovery.py settled_floor) the untimed steps also go on, up to
    REFILL_MAX_STEPS and SETTLE_LONGEST × as long as the settle ran, while the last of them run slower than it
    (still_refilling)."""
    start, j, times, untimed_ms, settled_ms = time.perf_counter(), 0, [], [], None
    while len(times) < n_timed:
        if hook is not None:
            hook("probe")
        t0 = time.perf_counter()
        elapsed = (t0 - start) * 1e3
        settling = j < untimed or (j < settle_max_steps and elapsed < settle_ms)
        if not settling:  # the settle is over: how long it ran bounds the refill's extension
            settled_ms = elapsed if settled_ms is None else settled_ms
            settling = (j < REFILL_MAX_STEPS and elapsed < SETTLE_LONGEST * settled_ms
                        and still_refilling(untimed_ms, floor_ms))
        out = step()
        if settling or len(times) == n_timed - 1 or wait_each:  # untimed steps and the block's end wait
            wait(out)
        (untimed_ms if settling else times).append((time.perf_counter() - t0) * 1e3)
        j += 1
    return times


HOST_COPY_BYTES = 256 * 2**20
"""Host-resident state up to this size, and up to an eighth of the memory available, is snapshot by copies in
memory, not a checkpoint on disk (`Snapshot`)."""


def fits_in_memory(nbytes: int) -> bool:
    """A second copy of `nbytes` of host state is small enough to keep in memory while a probe block runs."""
    from tfbertperf.train.memory import available_bytes

    return nbytes <= min(HOST_COPY_BYTES, available_bytes() // 8)


def state_bytes(state: list) -> int:
    """Bytes held by the variables in `state` (their shapes and dtypes; nothing is read)."""
    from tfbertperf.train.memory import variable_bytes

    return sum(variable_bytes(v) for v in state)


class Snapshot:
    """The model's and optimizer's variables, saved before a probe block and put back after it, without a second
    copy of a large state in host memory while the block's steps run (their activations are the run's memory peak;
    a host copy on top made BERT-base peak at 9.2 GB and left BERT-large no room on a 24 GB machine):

      * state on an accelerator (a variable on a GPU/TPU): device-resident copies (`tf.identity` on each
        variable's device), restored with `assign` — nothing crosses to the host;
      * state in host memory up to HOST_COPY_BYTES and an eighth of the available memory (a user's small Keras
        model, a tiny BERT): copies in memory the same way.  Writing a checkpoint slowed the steps of the next ~100 ms by 0.3–0.4 ms each on a 2-core
        VM (the page cache and writeback of the file compete with the step): a 3.4 ms cached step read 3.7–3.9
        ms right after a checkpoint, 3.5 ms after in-memory copies, 30 interleaved blocks of each (issue 29) —
        so the probe's T_c read high and the input cost low by 7–16 pp on the small Keras fits;
      * larger state in host memory (CPU-only BERT-base and up): a TF checkpoint of the variables in a temporary
        directory, read back into them one variable at a time and deleted.  There a step takes a second or more,
        and the disturbance is lost in it.
    """

    def __init__(self, state: list) -> None:
        import tensorflow as tf

        self.state = state
        devices = [str(getattr(getattr(v, "value", v), "device", "") or "") for v in state]  # Keras 3: v.value
        self.on_device = any(("GPU" in d.upper() or "TPU" in d.upper()) for d in devices)
        self.in_memory = self.on_device or fits_in_memory(state_bytes(state))
        self.copies, self.dir = None, None
        if self.in_memory:
            copies = []
            for v, dev in zip(state, devices):
                with tf.device(dev):
                    copies.append(tf.identity(v))
            self.copies = copies
            return
        import os
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="tfbertperf-probe-state-")
        self.ckpt = tf.train.Checkpoint(**{f"v{i}": v for i, v in enumerate(state)})
        self.path = self.ckpt.write(os.path.join(self.dir, "state"))

    def restore(self) -> None:
        if self.in_memory:
            for v, x in zip(self.state, self.copies):
                v.assign(x)
            self.copies = None
            return
        import shutil

        import tensorflow as tf

        try:
            # One variable at a time from the file: `Checkpoint.read` kept a restored copy of every variable
            # alive after the restore (+1.1 GB for BERT-base's state, +3.7 GB for BERT-large's; issue 17).
            reader = tf.train.load_checkpoint(self.path)
            for i, v in enumerate(self.state):
                v.assign(reader.get_tensor(f"v{i}/.ATTRIBUTES/VARIABLE_VALUE"))
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
