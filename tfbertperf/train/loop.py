"""The training loop: a custom tf.function step, profiler step markers, an always-on step timer, a profiled
window, TensorBoard scalars and the compute-only what-if probe (train/probe.py).

Linear on purpose (config → strategy → model → data → loop → probe → result), so a reader can check that what
is timed is what a user's own BERT job would spend.

Timing contract (what `step_times_ms` / `input_wait_ms` / `compute_only_step_ms` mean):
  * The loop does not wait for every step: it reads the losses back (`.numpy()`, which waits until the device
    has finished all work queued so far) only at sync points — every `train.log_every` steps, the last step
    of warm-up, the last step before the profiled window opens and the last inside it, the step before each
    probe block and the last of its recovery steps, and the last step (`sync_points`).  In between, the host
    dispatches the next steps while the device still runs earlier ones, as in real training; the losses of
    every step are still all recorded (read at the next sync point, already computed by then).
  * step i's wall time = `next(iterator)` + dispatching the train step, and at a sync point also the wait for
    the device.  The timer reads are back to back (nothing but hooks, the probe and the capture's start/stop
    runs between steps, all outside timing), so the times of the steps between two sync points add up to the
    wall time of that stretch, and T = Σ step time ÷ steps over any stretch bounded by sync points is the true
    mean step time — which is why warm-up, the window and the probe's recovery steps (the stretches
    report/build.py `steady_steps` leaves out) end on sync points.  On an accelerator a single step's figure
    between sync points is its dispatch time and the step at the sync point carries the queued work: per-step
    percentiles mean little there, means over stretches are exact.  On the CPU, TF runs a tf.function call to
    completion before returning, so every step is timed whole as before.
  * input wait = wall time inside `next(iterator)` only (two perf_counter reads around it).
  * the what-if probe's timed steps (mean = T_c): see train/probe.py.  When the caller says the pipeline runs
    ahead, the steps right after each probe block are listed in `extra["probe_recovery_steps"]`.
  * the profiled window: the caller passes a capture (profile/capture.py `Capture`: `start()`, `stop()`), which
    the loop starts before step `profile.steps` START and stops before step STOP.  train/ does not import the
    profile stage; it only drives the object it is given.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable

from tfbertperf.config import AUTOTUNE
from tfbertperf.train.checkpoint import Checkpointer, Restored
from tfbertperf.train.memory import check_step
from tfbertperf.train.optimizer import make_optimizer
from tfbertperf.train.blocks import AUTO_CI95, auto_stop
from tfbertperf.train import recovery
from tfbertperf.train.probe import (SETTLE_MAX_STEPS, Probe, auto_plan, probe_plan, settle_ms, short_run_budget,
                                   traced_steps, uninterrupted)
from tfbertperf.train.result import TrainResult
from tfbertperf.train.step import distribute, make_train_step

# Called as STEP_HOOK("train" | "probe") before every step, outside its timing.  None in normal runs; the
# attribution benchmark (tools/bench/bench_attribution.py) sets it so that two runs in separate processes take
# turns on the CPU, every N steps of either kind.  (On an accelerator, a device working through queued steps
# while the hook pauses would go untimed: pause only at sync points there, or set train.log_every=1.)
STEP_HOOK: Callable[[str], None] | None = None


def sync_points(steps: int, warmup: int, window: tuple[int, int] | None, plan: list[tuple[int, int]],
                log_every: int) -> set[int]:
    """Steps after which the loop waits for the device and reads the losses back (module docstring)."""
    edges = {warmup, steps, *range(max(1, log_every), steps + 1, max(1, log_every))}
    if window:
        edges |= set(window)
    for pos, n in plan:
        edges |= {pos, pos + n}  # before a probe block; after its recovery steps
    return {e - 1 for e in edges if 0 < e <= steps}


def _worker_identity(strategy) -> dict:
    """{"worker_index", "num_workers"} under MultiWorkerMirroredStrategy, else {}."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return {}
    return {"worker_index": int(resolver.task_id),
            "num_workers": len(resolver.cluster_spec().as_dict().get("worker", []))}


def _write_scalars(logdir: str, rows: list[tuple[int, dict]]) -> None:
    """TensorBoard scalars (train/…): written after the loop so the loop itself does no summary I/O."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(os.path.join(logdir, "train"))
    with writer.as_default():
        for step, values in rows:
            for name, value in values.items():
                tf.summary.scalar(name, value, step=step)
    writer.flush()
    writer.close()


def train(
    cfg,
    dataset_fn: Callable,
    vocab_size: int,
    tensorboard_dir: str | None,
    progress: Callable[[str], None] | None = print,
    strategy=None,
    input_runs_ahead: bool = False,
    capture=None,
    run_dir: str | None = None,
    mark: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train BERT for `cfg.train.steps` steps and measure where each step's wall time goes.

    Args:
      cfg: RunConfig (model.*, train.*, profile.*, data.seq_len, data.max_predictions are used).
      dataset_fn: `fn(tf.distribute.InputContext | None) -> tf.data.Dataset` of batched feature dicts of the
        global batch size, repeating forever (see shared/DESIGN.md, data stage).
      vocab_size: tokens in the data's vocabulary.
      tensorboard_dir: logdir for the scalars (`train/`); None = no scalars.
      progress: called with one line every `train.log_every` steps (None = silent).
      strategy: an already-created tf.distribute strategy (multi-worker processes create theirs first);
        None = make it from `cfg.train.strategy`.
      input_runs_ahead: the pipeline has background stages that fill buffers while the probe runs (see
        train/probe.py); its recovery steps are then listed in extra["probe_recovery_steps"].
      capture: the profiled window's capture (`start() -> str`, `stop()`; profile/capture.py `Capture`), started
        before step START and stopped before step STOP of `profile.steps`; None = no profile.
      run_dir: the run directory: checkpoints go to run_dir/checkpoints every `train.checkpoint_every` steps, and
        a run_dir that already holds one resumes from it (train/checkpoint.py); None = no checkpoints.
      mark: called with "measured_start" before the first step after warm-up and "measured_end" after the last
        step (outside the steps' timing): the host sampler snapshots its figures there (tfbertperf/compose/training.py).
    Ctrl-C (KeyboardInterrupt) between steps ends the loop early: the result covers the steps done and says so
    in extra["interrupted_at_step"] (no probe after the loop then); before the first step it propagates.
    Returns:
      TrainResult; times in milliseconds; `extra` holds model (describe), per_replica_batch_size, strategy,
      precision, jit, examples_per_sec (after warm-up), probe_step_times_ms, probe_blocks
      ([[before_step, timed_steps], …]), probe_recovery_steps, profile_stop_ms (how long stopping and writing
      the capture took), threadpool_events (what the capture recorded).
    """
    from tfbertperf.train import strategy as placement

    say = progress or (lambda _line: None)
    # The strategy comes first: MultiWorkerMirroredStrategy must exist before any other TF op runs.
    if strategy is None:
        strategy = placement.make_strategy(cfg.train)
    import tensorflow as tf

    from tfbertperf.model import build_model, describe, parameter_line

    restore = placement.setup_run(cfg.train)
    try:
        replicas = strategy.num_replicas_in_sync
        global_batch = cfg.train.batch_size
        per_replica = placement.per_replica_batch_size(global_batch, replicas)
        seq_len, max_predictions = cfg.data.seq_len, cfg.data.max_predictions
        with strategy.scope():
            model = build_model(cfg.model, vocab_size, seq_len, max_predictions, remat=cfg.train.remat)
            optimizer = make_optimizer(cfg.train, model.trainable_variables)
        info = describe(model)
        say(parameter_line(info))
        step_fn = make_train_step(model, optimizer, strategy, cfg.model.task, jit=cfg.train.jit)
        iterator = iter(distribute(strategy, dataset_fn, global_batch, per_replica))
        check_step(step_fn, iterator, global_batch, model, optimizer, cfg.train.remat, say)  # or exit 2: cannot fit
        ckpt = Checkpointer(run_dir, cfg.train.checkpoint_every, model, optimizer, iterator) if run_dir else None
        resumed = ckpt.restore() if ckpt else Restored()
        start = resumed.step

        steps = cfg.train.steps
        auto = cfg.profile.probe_steps == AUTOTUNE  # blocks until the interval is narrow enough (auto_plan)
        warmup, probe_steps = short_run_budget(steps, cfg.train.warmup_steps, 0 if auto else cfg.profile.probe_steps)
        # a resumed process traces its step again: its own warm-up starts at the resume point
        warmup = min(start + warmup, steps - 1) if start else warmup
        window = cfg.profile_window if capture is not None else None
        if start:
            say(f"resuming at step {start + 1}/{steps} from {ckpt.dir}")
            if window and window[0] < start:
                say(f"profiled window {window[0]}:{window[1]} began before the checkpoint: no profile this time")
                window = None
        timer_on = cfg.profile.step_timer
        step_ms: list[float] = list(resumed.state.get("step_times_ms", []))
        wait_ms: list[float] = list(resumed.state.get("input_wait_ms", []))
        losses: list[tuple[int, float]] = [tuple(x) for x in resumed.state.get("losses", [])]
        accuracy = 0.0
        scalars: list[tuple[int, dict]] = [tuple(x) for x in resumed.state.get("scalars", [])]
        first_batch = None
        clock = time.perf_counter
        traced = traced_steps(window, start)
        plan = auto_plan(steps, warmup, window) if auto else probe_plan(steps, warmup, window, probe_steps,
                                                                          cfg.profile.probe_blocks)
        blocks_at, ran, stopped = dict(plan), [], None  # ran: the blocks that ran; stopped: why auto stopped early
        stop_ms = 0.0  # how long stopping the capture took (the steps after it: report/build.py steady_steps)
        syncs = sync_points(steps, warmup, window, plan, cfg.train.log_every)
        if ckpt and ckpt.every:
            syncs |= {s - 1 for s in range(ckpt.every, steps, ckpt.every)}
        for _ in range(resumed.skip_batches):  # the checkpoint could not hold the iterator: fast-forward
            next(iterator)
        interrupted = None
        pending: list = []  # step outputs dispatched since the last sync point
        probe = Probe(step_fn, strategy, [*model.variables, *optimizer.variables],
                      hook=lambda kind: STEP_HOOK(kind) if STEP_HOOK is not None else None)

        try:
            for i in range(start, steps):
                if STEP_HOOK is not None:
                    STEP_HOOK("train")
                if window and i == traced[1]:
                    t_stop = time.perf_counter()
                    capture.stop()  # the pipeline runs ahead while the capture is written: report/build.py
                    stop_ms = (time.perf_counter() - t_stop) * 1e3
                if input_runs_ahead and i in blocks_at and not recovery.ready(step_ms, ran, warmup, traced, steps):
                    syncs.add(recovery.postpone(blocks_at, i, steps, traced) - 1)  # the last block's recovery runs
                    # on; the device is idle when the moved block starts (sync_points)
                if auto and i in blocks_at and stopped is None:
                    stopped = auto_stop(step_ms, warmup, traced, ran, probe.step_times_ms, input_runs_ahead,
                                        AUTO_CI95)
                if i in blocks_at and first_batch is not None and stopped is None:
                    probe.run_block(first_batch, blocks_at[i], settle_ms=settle_ms(step_ms, warmup),
                                    settle_max_steps=SETTLE_MAX_STEPS)
                    ran.append((i, blocks_at[i]))
                if window and i == traced[0]:  # after a probe block here: the block stays out of the trace
                    capture.start()
                if mark is not None and i == warmup:
                    mark("measured_start")
                t0 = clock()
                # xprof finds a step only from this marker, and counts input only if next() runs inside it.
                with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                    batch = next(iterator)
                    t1 = clock() if timer_on else t0
                    pending.append((i, step_fn(batch)))  # dispatched; the device may still be running it
                    if i in syncs:  # wait for the device: every queued step is finished after this
                        done = [(j, out.numpy().tolist()) for j, out in pending]
                t2 = clock()
                if first_batch is None:
                    first_batch = batch
                step_ms.append((t2 - t0) * 1e3)
                if timer_on:
                    wait_ms.append((t1 - t0) * 1e3)
                if i not in syncs:
                    continue
                pending = []
                for j, (loss, accuracy) in done:
                    losses.append((j, loss))
                    row = {"loss": loss, "step_time_ms": step_ms[j],
                           "examples_per_sec": global_batch * 1e3 / step_ms[j]}
                    row["mlm_accuracy" if cfg.model.task == "pretrain" else "accuracy"] = accuracy
                    scalars.append((j, row))
                if (i + 1) % cfg.train.log_every == 0 or i + 1 == steps:
                    recent = step_ms[max(warmup, i + 1 - cfg.train.log_every): i + 1] or step_ms[-1:]
                    ms = statistics.fmean(recent)
                    say(f"step {i + 1}/{steps}  loss {loss:.4f}  {ms:.1f} ms/step  "
                        f"{global_batch * 1e3 / ms:.1f} examples/s")
                if ckpt and ckpt.due(i + 1, steps):  # a sync point: every loss so far is recorded
                    ckpt.save(i + 1, {"losses": losses, "step_times_ms": step_ms, "input_wait_ms": wait_ms,
                                      "scalars": scalars})
        except KeyboardInterrupt:
            interrupted = len(step_ms)  # steps completed; the one under way when Ctrl-C came is dropped
            if interrupted <= start:
                raise
            for j, out in pending:
                if j < interrupted:
                    losses.append((j, out.numpy().tolist()[0]))
            say(f"interrupted after step {interrupted}/{steps}")
            steps = interrupted
            if window and window[1] > steps:  # a partial window is no profile of the steps it names
                window = None
        if mark is not None:
            mark("measured_end")
        if capture is not None:
            capture.stop()

        # Stop the real pipeline before a probe block after the loop: its prefetch/interleave threads would
        # otherwise keep filling buffers and steal CPU from the compute-only steps.
        del iterator
        if auto and steps in blocks_at and stopped is None:  # a block postponed past the loop is checked too
            stopped = auto_stop(step_ms, warmup, traced, ran, probe.step_times_ms, input_runs_ahead, AUTO_CI95)
        if steps in blocks_at and first_batch is not None and interrupted is None and stopped is None:
            probe.run_block(first_batch, blocks_at[steps])
            ran.append((steps, blocks_at[steps]))
        probe_ms = probe.step_times_ms
        # T_c leaves out interrupted probe steps (a collection, the OS: over 4× the median; profile/stepfile.py),
        # as analyze does for a user's fit
        kept = [probe_ms[j] for j in uninterrupted(probe_ms)] if probe_ms else []
        if probe_ms:
            say(f"compute-only probe: {statistics.fmean(kept):.1f} ms/step mean over {len(kept)} steps "
                f"in {probe.blocks} block(s)" + (f" ({len(probe_ms) - len(kept)} interrupted left out)"
                                                 if len(kept) < len(probe_ms) else ""))
        recovered = (recovery.observed(step_ms, [(p, n) for p, n in ran if p < steps], warmup, traced, steps)[0]
                     if input_runs_ahead else [])

        if tensorboard_dir:
            _write_scalars(tensorboard_dir, scalars)
        timed = step_ms[warmup:]
        examples_per_sec = global_batch * len(timed) / (sum(timed) / 1e3) if timed else 0.0
        key = "mlm_accuracy" if cfg.model.task == "pretrain" else "accuracy"
        return TrainResult(
            steps=steps,
            global_batch_size=global_batch,
            replicas=replicas,
            seq_len=seq_len,
            loss_trajectory=losses,
            final_loss=losses[-1][1],
            step_times_ms=step_ms,
            input_wait_ms=wait_ms,
            warmup_steps=warmup,
            profile_window=window,
            tensorboard_dir=tensorboard_dir,
            compute_only_step_ms=statistics.fmean(kept) if kept else None,
            probe_steps=len(kept),
            metrics={key: accuracy},
            extra={
                "model": info,
                "per_replica_batch_size": per_replica,
                "strategy": cfg.train.strategy,
                "precision": cfg.train.precision,
                "jit": cfg.train.jit,
                "examples_per_sec": examples_per_sec,
                "tokens_per_sec": examples_per_sec * seq_len,
                "probe_step_times_ms": probe_ms,
                "probe_blocks": [[p, n] for p, n in ran],
                "probe_sample": {"auto": auto, "ci95_target": AUTO_CI95 if auto else None,
                                 "planned_blocks": len(plan), "stopped": stopped},
                "probe_recovery_steps": recovered,
                "profile_stop_ms": stop_ms,
                "threadpool_events": getattr(capture, "threadpool_events_status", None),
                "interrupted_at_step": interrupted,
                "resumed_from_step": start or None,
                "checkpoints": ckpt.saved if ckpt else [],
                **_worker_identity(strategy),
            },
        )
    finally:
        if capture is not None:
            try:
                capture.stop()
            except Exception:  # noqa: BLE001 - already failing; don't mask the original error
                pass
        restore()
