"""The training loop with emulated accelerators (train/emulated_devices.py): every step takes the real global batch
from the real tf.data pipeline, hands it to a compiled step that takes every tensor of it (the copy to the step happens,
host→device where there is a device), and then waits the emulated device's step time — a sleep, no CPU — as DLIO
and MLPerf Storage do.  Everything around the step is as in train/loop.py: the `train` step marker xprof finds,
the always-on step timer, the profiled window driven through the caller's capture, TensorBoard scalars.

Timing of one step i (what `step_times_ms` / `input_wait_ms` mean here):
  t0 → next(iterator) → t1 (input wait) → the copy step, read back → t2 → sleep until t1 + step_ms → t3.
  step_times_ms[i] = t3 − t0; input_wait_ms[i] = t1 − t0.  The copy is inside the device's step time, as it is
  in the published sequences/s the profiles come from (end-to-end training steps, input copy included); a copy
  longer than step_ms shows as a step longer than step_ms.  T_c (compute_only_step_ms) is step_ms: no probe.
  The global batch is emulate.accelerators × train.batch_size: the caller's dataset_fn must yield batches of
  that size (tfbertperf.job builds it so).

AU (report.json emulation.au) is computed as DLIO does for MLPerf Storage (argonne-lcf/dlio_benchmark,
utils/statscounter.py: compute = the time measured around the emulated computation, AU = Σ compute ÷ total
time): Σ(t3 − t1) ÷ Σ(t3 − t0) over the steps after the first.  A sleep that ends late on a loaded machine
(emulation.overrun_ms_mean) is the emulated device's time, not the input's; emulation.au_nominal divides
step_ms × steps by the wall instead.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Callable

from tfbertperf.train.emulated_devices import Emulation, au, au_from_steps, emulated_step
from tfbertperf.train.probe import traced_steps
from tfbertperf.train.result import TrainResult
from tfbertperf.train.step import distribute


def make_copy_step(strategy):
    """A compiled step that takes every tensor of the batch and returns one float32 scalar; under a distribution
    strategy, per replica then summed.  With an accelerator it reduces every tensor (the batch must be where the
    step runs: the reduction runs on the device, so each tensor is copied there).  On a host with none it reads one
    element of each: the batch is already where the step runs, and a full pass costs host CPU that no device step
    spends (at a global batch of 12,800: ~30 ms of the 2 cores here, taken from the pipeline being measured)."""
    import tensorflow as tf

    full = bool(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))

    def replica(batch):
        if full:
            return tf.add_n([tf.reduce_sum(tf.cast(t, tf.float32)) for t in tf.nest.flatten(batch)])
        return tf.add_n([tf.reduce_sum(tf.cast(tf.reshape(t, [-1])[:1], tf.float32)) for t in tf.nest.flatten(batch)])

    if strategy is tf.distribute.get_strategy():
        return tf.function(replica)

    @tf.function
    def step(batch):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=(batch,)), axis=None)

    return step


def _model_info(cfg, emulation: Emulation, vocab_size: int | None) -> dict:
    """report.json `model` for an emulated run: the model the device emulates (no Keras model is built), counted
    as the real run counts it (model/bert.py describe: the data's vocabulary, the task head), so that the same
    model and data give one parameter count with or without emulate.*."""
    from tfbertperf.model.bert import describe

    return {**describe(cfg.model, vocab_size), "emulated": emulation.device}


def train_emulated(cfg, emulation: Emulation, dataset_fn: Callable, tensorboard_dir: str | None,
                   progress: Callable[[str], None] | None = print, strategy=None, capture=None,
                   step_hook: Callable[[str], None] | None = None,
                   mark: Callable[[str], None] | None = None, vocab_size: int | None = None) -> TrainResult:
    """Run `cfg.train.steps` emulated steps (module docstring).  Args as train.loop.train, plus the resolved
    `emulation`; `step_hook("train")` is called before every step outside its timing (benchmarks); `mark` as in
    train.loop.train ("measured_start" before the first step after warm-up, "measured_end" after the last);
    `vocab_size`: the data's (the model block's parameter count).  Returns a
    TrainResult whose loss trajectory is empty (no model runs) and whose extra holds "emulation" (the block for
    report.json, with au) and examples_per_sec."""
    import tensorflow as tf

    from tfbertperf.train import strategy as placement

    from tfbertperf.train import loop

    step_hook = step_hook or loop.STEP_HOOK  # the benchmarks' turn-taking hook applies here too
    say = progress or (lambda _line: None)
    strategy = strategy or placement.make_strategy(cfg.train)
    restore = placement.setup_run(cfg.train)
    try:
        global_batch, replicas = emulation.global_batch_size, strategy.num_replicas_in_sync
        per_replica = placement.per_replica_batch_size(global_batch, replicas)
        say(f"emulated {emulation.accelerators} x {emulation.device}: {emulation.step_ms:.2f} ms per step, "
            f"global batch {global_batch}, demand {emulation.demand_examples_per_sec:.1f} examples/s")
        copy_step = make_copy_step(strategy)
        iterator = iter(distribute(strategy, dataset_fn, global_batch, per_replica))
        steps = cfg.train.steps
        warmup = min(cfg.train.warmup_steps, steps - 1)
        window = cfg.profile_window if capture is not None else None
        step_ms: list[float] = []
        wait_ms: list[float] = []
        copy_ms: list[float] = []
        over_ms: list[float] = []  # how late each emulated step ended (a loaded machine wakes sleepers late)
        scalars: list[tuple[int, dict]] = []
        clock = time.perf_counter
        traced = traced_steps(window)  # one step more on each side: xprof drops a capture's first and last
        edges = {traced[0]: "start", traced[1]: "stop"} if window else {}
        for i in range(steps):
            step_hook and step_hook("train")
            if i in edges:  # the profiled window opens / closes before this step
                getattr(capture, edges[i])()
            if mark is not None and i == warmup:
                mark("measured_start")
            t0 = clock()
            with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                batch = next(iterator)
                t1 = clock()
                copy_step(batch).numpy()  # the batch is in the step; wait for it
                t2 = clock()
                with tf.profiler.experimental.Trace("emulated_compute"):
                    emulated_step(emulation.step_ms, start=t1)
            t3 = clock()
            step_ms.append((t3 - t0) * 1e3)
            wait_ms.append((t1 - t0) * 1e3)
            copy_ms.append((t2 - t1) * 1e3)
            over_ms.append((t3 - t1) * 1e3 - emulation.step_ms)
            scalars.append((i, {"step_time_ms": step_ms[-1], "input_wait_ms": wait_ms[-1],
                                "examples_per_sec": global_batch * 1e3 / step_ms[-1]}))
            if (i + 1) % cfg.train.log_every == 0 or i + 1 == steps:
                ms = statistics.fmean(step_ms[max(warmup, i + 1 - cfg.train.log_every): i + 1] or step_ms[-1:])
                say(f"step {i + 1}/{steps}  {ms:.1f} ms/step  {global_batch * 1e3 / ms:.1f} examples/s  "
                    f"AU {emulation.step_ms / ms:.0%}")
        if mark is not None:
            mark("measured_end")
        if capture is not None:
            capture.stop()
        del iterator
        if tensorboard_dir:
            loop._write_scalars(tensorboard_dir, scalars)
        timed = step_ms[warmup:]
        examples_per_sec = global_batch * len(timed) / (sum(timed) / 1e3)
        block = {k: v for k, v in emulation.to_report().items()}
        # AU as DLIO computes it for MLPerf Storage: the measured compute (the emulated step, from the batch's
        # arrival to the end of its wait) ÷ wall, steps after the first; a late wake-up is compute, not input.
        busy = [s - w for s, w in zip(step_ms, wait_ms)]
        block["au"] = round(au(sum(busy[1:]), sum(step_ms[1:])), 6)
        block["au_nominal"] = round(au_from_steps(step_ms, emulation.step_ms), 6)  # step_ms × steps ÷ wall
        block["au_steps"] = max(0, len(step_ms) - 1)
        block["copy_ms_mean"] = round(statistics.fmean(copy_ms[1:] or copy_ms), 4)
        block["overrun_ms_mean"] = round(statistics.fmean(over_ms[1:] or over_ms), 4)
        return TrainResult(
            steps=steps, global_batch_size=global_batch, replicas=replicas, seq_len=cfg.data.seq_len,
            loss_trajectory=[], final_loss=0.0, step_times_ms=step_ms, input_wait_ms=wait_ms,
            warmup_steps=warmup, profile_window=window, tensorboard_dir=tensorboard_dir,
            compute_only_step_ms=emulation.step_ms, probe_steps=0, metrics={},
            extra={"model": _model_info(cfg, emulation, vocab_size),
                   "per_replica_batch_size": per_replica, "strategy": cfg.train.strategy,
                   "precision": emulation.precision, "jit": False, "examples_per_sec": examples_per_sec,
                   "tokens_per_sec": examples_per_sec * cfg.data.seq_len, "probe_step_times_ms": [],
                   "probe_blocks": [], "probe_recovery_steps": [],
                   "threadpool_events": getattr(capture, "threadpool_events_status", None),
                   "emulation": block},
        )
    finally:
        with contextlib.suppress(Exception):  # already failing: a stop error must not mask the original one
            capture is not None and capture.stop()
        restore()
