"""The training loop: a custom tf.function step, profiler step markers, an always-on step timer, a profiled
window, TensorBoard scalars and the compute-only what-if probe.

Linear on purpose (config → strategy → model → data → loop → probe → result), so a reader can check that what
is timed is what a user's own BERT job would spend.

Timing contract (what `step_times_ms` / `input_wait_ms` / `compute_only_step_ms` mean):
  * step i's wall time = `next(iterator)` + the train step + pulling that step's loss to the host. Pulling the
    loss makes the step finish before the next timer read, so wall times add up to the run's duration instead
    of hiding work in TF's async dispatch.
  * input wait = wall time inside `next(iterator)` only (two perf_counter reads around it).
  * the what-if probe runs the same step function, under the same strategy, the same way, on
    `Dataset.from_tensors(first real batch).repeat()`, with no profiler running; the mean of its timed steps is
    T_c in "input cost = (T − T_c) / T".  Its steps run in `profile.probe_blocks` blocks spread evenly through
    the steady steps (after warm-up, outside the profiled window), so that T and T_c are sampled side by side
    in time: on a shared or thermally throttled machine the speed of the CPU drifts by several per cent over
    seconds, and a probe run only after the loop would measure a different machine than the loop did.
    Before a block the model's and optimizer's variables are snapshot to host memory and restored after it,
    so the probe's updates (it trains on one cached batch) leave no trace in the run's loss trajectory.
    The first step of each block is not timed (the first block's first two: the cached batch's static shapes
    may retrace the step).  A pipeline with background stages (prefetch, parallel map/interleave, read-ahead)
    keeps filling its buffers while a block runs, so the real steps right after a block can be fed for free;
    when the caller says the pipeline runs ahead, the loop lists those steps (as many as the block timed) in
    `extra["probe_recovery_steps"]`, and the run leaves them out of its steady steps if the pipeline was behind
    (run.steady_steps).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable

from tfbertperf.train import capture
from tfbertperf.train.result import TrainResult

PROBE_WARMUP_STEPS = 2  # first probe block: steps not timed (the first retraces for the cached batch's shapes)
PROBE_SETTLE_STEPS = 1  # later blocks: steps not timed (the pipeline's threads finish the element in hand)
# Called as STEP_HOOK("train" | "probe") before every step, outside its timing.  None in normal runs; the
# attribution benchmark (tools/bench/bench_attribution.py) sets it so that two runs in separate processes take
# turns on the CPU, every N steps of either kind.
STEP_HOOK: Callable[[str], None] | None = None

# Variable names AdamW leaves undecayed (make_optimizer; google-research/bert optimization.py excludes "LayerNorm",
# "layer_norm" and "bias"; our LayerNorms' parameters are gamma and beta).
NO_WEIGHT_DECAY = ["bias", "gamma", "beta"]


def probe_plan(steps: int, warmup: int, window: tuple[int, int] | None, probe_steps: int,
               blocks: int) -> list[tuple[int, int]]:
    """Where the what-if probe runs: [(before_step, timed_steps)], `before_step == steps` meaning after the loop.

    Blocks sit at evenly spaced steady steps (after warm-up + 1, outside the profiled window, whose first step
    would put the block inside the trace, and not within a block's length before it, so that the steps that
    follow a block are not the profiled ones); the probe's steps are shared out among them.  Too few steady steps
    for the blocks, or blocks == 1 → one block after the loop.
    """
    if probe_steps <= 0:
        return []
    blocks = max(1, min(int(blocks), probe_steps))
    w0, w1 = window if window else (steps, steps)
    per = -(-probe_steps // blocks)
    # Not inside the window, and not so close before it that the block's recovery steps are profiled.
    cand = [i for i in range(warmup + 1, steps) if not (w0 - per < i < w1)]
    if blocks == 1 or len(cand) < 2 * blocks:
        return [(steps, probe_steps)]
    at = sorted({cand[int((b + 0.5) * len(cand) / blocks)] for b in range(blocks)})
    base, extra = divmod(probe_steps, len(at))
    return [(pos, base + (1 if k < extra else 0)) for k, pos in enumerate(at)]


def recovery_steps(plan: list[tuple[int, int]], steps: int) -> list[int]:
    """The real steps right after each in-loop probe block that a run-ahead pipeline may have fed from buffers
    filled while the block ran: as many as the block timed (its duration in steps), up to the next block."""
    out: list[int] = []
    starts = [p for p, _ in plan] + [steps]
    for k, (pos, n) in enumerate(plan):
        out.extend(range(pos, min(pos + n, starts[k + 1], steps)))
    return out


def _losses(task: str, num_replicas: int):
    """loss_fn(outputs, batch) -> (loss, accuracy) for one replica.

    pretrain: MLM cross-entropy averaged over masked positions weighted by masked_lm_weights (as in
      google-research/bert: Σ w·ce / (Σ w + 1e-5)) + NSP cross-entropy averaged over the batch;
      accuracy = weighted MLM accuracy.
    classify: cross-entropy over the batch; accuracy = label accuracy.
    Each replica's loss is divided by the replica count so that the all-reduced (summed) gradient is the mean.
    """
    import tensorflow as tf

    def pretrain(out, batch):
        ids = tf.cast(batch["masked_lm_ids"], tf.int32)  # (B, P)
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)  # (B, P)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=out["mlm_logits"])  # (B, P)
        denom = tf.reduce_sum(weights) + 1e-5
        mlm = tf.reduce_sum(ce * weights) / denom
        nsp_labels = tf.reshape(tf.cast(batch["next_sentence_labels"], tf.int32), [-1])  # (B,)
        nsp = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=nsp_labels, logits=out["nsp_logits"])
        )
        hits = tf.cast(tf.equal(tf.argmax(out["mlm_logits"], -1, output_type=tf.int32), ids), tf.float32)
        acc = tf.reduce_sum(hits * weights) / denom
        return (mlm + nsp) / num_replicas, acc

    def classify(out, batch):
        labels = tf.reshape(tf.cast(batch["label_ids"], tf.int32), [-1])  # (B,)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=out["logits"])
        hits = tf.cast(tf.equal(tf.argmax(out["logits"], -1, output_type=tf.int32), labels), tf.float32)
        return tf.reduce_mean(ce) / num_replicas, tf.reduce_mean(hits)

    return pretrain if task == "pretrain" else classify


def make_train_step(model, optimizer, strategy, task: str, jit: bool = False):
    """The compiled train step: batch (global, or distributed PerReplica) -> float32 tensor [loss, accuracy].

    loss is the global mean loss; accuracy the mean over replicas. Gradients are all-reduced by the Keras
    optimizer inside `strategy.run`; mixed_float16 loss scaling is the LossScaleOptimizer's scale_loss/apply.
    """
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    loss_fn = _losses(task, replicas)
    input_names = model.feature_names

    def replica_step(batch):
        inputs = {k: tf.cast(batch[k], tf.int32) for k in input_names}
        with tf.GradientTape() as tape:
            out = model(inputs, training=True)
            loss, acc = loss_fn(out, batch)
            scaled = optimizer.scale_loss(loss)
        variables = model.trainable_variables
        grads = tape.gradient(scaled, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss, acc

    if replicas == 1 and strategy is tf.distribute.get_strategy():
        # Default strategy: no replica machinery, the step itself is the (optionally XLA) function.
        @tf.function(jit_compile=jit)
        def step(batch):
            loss, acc = replica_step(batch)
            return tf.stack([loss, acc])

        return step

    inner = tf.function(replica_step, jit_compile=jit) if jit else replica_step

    @tf.function
    def step(batch):
        loss, acc = strategy.run(inner, args=(batch,))
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
        acc = strategy.reduce(tf.distribute.ReduceOp.MEAN, acc, axis=None)
        return tf.stack([loss, acc])

    return step


def _distribute(strategy, dataset_fn, global_batch: int, per_replica: int):
    """An iterable of batches for `strategy`: the pipeline's own for the default strategy, else one input
    pipeline per worker (`distribute_datasets_from_function`) rebatched to the per-replica size.

    `rebatch(per_replica)` is exact whether `dataset_fn(ctx)` yields global batches (the agreed contract) or
    already per-replica ones: consecutive per-replica slices go to the local replicas in turn.
    """
    import tensorflow as tf

    if strategy is tf.distribute.get_strategy():
        return dataset_fn(None)

    def per_worker(ctx):
        ds = dataset_fn(ctx)
        return ds.rebatch(per_replica, drop_remainder=True) if per_replica != global_batch else ds

    return strategy.distribute_datasets_from_function(per_worker)


def _probe_source(strategy, first_batch):
    """Compute-only input: the first real batch, cached in memory and repeated (same shapes, same placement)."""
    import tensorflow as tf

    if strategy is tf.distribute.get_strategy():
        return tf.data.Dataset.from_tensors(first_batch).repeat()
    local = tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], first_batch)
    return strategy.distribute_datasets_from_function(lambda ctx: tf.data.Dataset.from_tensors(local).repeat())


def make_optimizer(train_cfg, variables):
    """BERT's optimizer: AdamW (weight decay 0.01, epsilon 1e-6) without decay on LayerNorm parameters and biases
    (as google-research/bert's AdamWeightDecayOptimizer), loss-scaled under mixed_float16.  Built up front, so the
    first traced step sees the optimizer's real variables (and loss scale)."""
    import keras

    optimizer = keras.optimizers.AdamW(learning_rate=train_cfg.learning_rate, weight_decay=0.01, epsilon=1e-6)
    optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    if train_cfg.precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(variables)
    return optimizer


def profiler_options(profile_cfg):
    """tf.profiler options from the profile.* settings."""
    import tensorflow as tf

    return tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=profile_cfg.host_tracer_level,
        python_tracer_level=int(profile_cfg.python_tracer),
        device_tracer_level=profile_cfg.device_tracer_level,
    )


def _stop_profiler(strategy) -> None:
    """Stop the capture and write the .xplane.pb (one place, so a multi-worker workaround has a home)."""
    import tensorflow as tf

    tf.profiler.experimental.stop()


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
) -> TrainResult:
    """Train BERT for `cfg.train.steps` steps and measure where each step's wall time goes.

    Args:
      cfg: RunConfig (model.*, train.*, profile.*, data.seq_len, data.max_predictions are used).
      dataset_fn: `fn(tf.distribute.InputContext | None) -> tf.data.Dataset` of batched feature dicts of the
        global batch size, repeating forever (see shared/DESIGN.md, data stage).
      vocab_size: tokens in the data's vocabulary.
      tensorboard_dir: logdir for scalars (`train/`) and the profile (`plugins/profile/…`); None = neither.
      progress: called with one line every `train.log_every` steps (None = silent).
      strategy: an already-created tf.distribute strategy (multi-worker processes create theirs first);
        None = make it from `cfg.train.strategy`.
      input_runs_ahead: the pipeline has background stages that fill buffers while the probe runs (see the
        module docstring); its recovery steps are then listed in extra["probe_recovery_steps"].
    Returns:
      TrainResult; times in milliseconds; `extra` holds model (describe), per_replica_batch_size, strategy,
      precision, jit, examples_per_sec (after warm-up), probe_step_times_ms, probe_blocks
      ([[before_step, timed_steps], …]), probe_recovery_steps.
    """
    from tfbertperf.train import strategy as placement

    say = progress or (lambda _line: None)
    # The strategy comes first: MultiWorkerMirroredStrategy must exist before any other TF op runs.
    if strategy is None:
        strategy = placement.make_strategy(cfg.train)
    import tensorflow as tf

    from tfbertperf.model import build_model, describe, parameter_line

    restore = placement.setup_run(cfg.train)
    profiling = False
    try:
        replicas = strategy.num_replicas_in_sync
        global_batch = cfg.train.batch_size
        per_replica = placement.per_replica_batch_size(global_batch, replicas)
        seq_len, max_predictions = cfg.data.seq_len, cfg.data.max_predictions
        with strategy.scope():
            model = build_model(cfg.model, vocab_size, seq_len, max_predictions)
            optimizer = make_optimizer(cfg.train, model.trainable_variables)
        info = describe(model)
        say(parameter_line(info))
        step_fn = make_train_step(model, optimizer, strategy, cfg.model.task, jit=cfg.train.jit)
        iterator = iter(_distribute(strategy, dataset_fn, global_batch, per_replica))

        steps = cfg.train.steps
        warmup = min(cfg.train.warmup_steps, steps - 1)
        window = cfg.profile_window if tensorboard_dir else None
        timer_on = cfg.profile.step_timer
        step_ms: list[float] = []
        wait_ms: list[float] = []
        losses: list[tuple[int, float]] = []
        accuracy = 0.0
        scalars: list[tuple[int, dict]] = []
        first_batch = None
        clock = time.perf_counter
        plan = probe_plan(steps, warmup, window, cfg.profile.probe_steps, cfg.profile.probe_blocks)
        blocks_at = dict(plan)
        probe_ms: list[float] = []
        probe_state = {"iter": None, "blocks": 0}
        threadpool_events = None  # what the capture recorded of thread-pool tasks (capture.start)

        def probe_block(n_timed: int) -> None:
            """n_timed compute-only steps on the cached first batch; model and optimizer state restored after."""
            if probe_state["iter"] is None:
                probe_state["iter"] = iter(_probe_source(strategy, first_batch))
            untimed = PROBE_WARMUP_STEPS if probe_state["blocks"] == 0 else PROBE_SETTLE_STEPS
            state = [*model.variables, *optimizer.variables]
            saved = [v.numpy() for v in state]
            for j in range(untimed + n_timed):
                if STEP_HOOK is not None:
                    STEP_HOOK("probe")
                t0 = clock()
                step_fn(next(probe_state["iter"])).numpy()
                if j >= untimed:
                    probe_ms.append((clock() - t0) * 1e3)
            for v, x in zip(state, saved):
                v.assign(x)
            probe_state["blocks"] += 1

        for i in range(steps):
            if STEP_HOOK is not None:
                STEP_HOOK("train")
            if window and i == window[0]:
                threadpool_events = capture.start(tensorboard_dir, profiler_options(cfg.profile),
                                                  threadpool_events=cfg.profile.threadpool_events)
                profiling = True
            if window and i == window[1]:
                _stop_profiler(strategy)
                profiling = False
            if i in blocks_at and first_batch is not None:
                probe_block(blocks_at[i])
            t0 = clock()
            # xprof finds a step only from this marker, and counts input only if next() runs inside it.
            with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                batch = next(iterator)
                t1 = clock() if timer_on else t0
                loss, accuracy = step_fn(batch).numpy().tolist()  # host pull: the step is finished here
            t2 = clock()
            if first_batch is None:
                first_batch = batch
            step_ms.append((t2 - t0) * 1e3)
            if timer_on:
                wait_ms.append((t1 - t0) * 1e3)
            losses.append((i, loss))
            row = {"loss": loss, "step_time_ms": step_ms[-1], "examples_per_sec": global_batch / (t2 - t0)}
            if cfg.model.task == "pretrain":
                row["mlm_accuracy"] = accuracy
            else:
                row["accuracy"] = accuracy
            scalars.append((i, row))
            if (i + 1) % cfg.train.log_every == 0 or i + 1 == steps:
                recent = step_ms[max(warmup, i + 1 - cfg.train.log_every): i + 1] or step_ms[-1:]
                ms = statistics.fmean(recent)
                say(f"step {i + 1}/{steps}  loss {loss:.4f}  {ms:.1f} ms/step  {global_batch * 1e3 / ms:.1f} examples/s")
        if profiling:
            _stop_profiler(strategy)
            profiling = False

        # Stop the real pipeline before a probe block after the loop: its prefetch/interleave threads would
        # otherwise keep filling buffers and steal CPU from the compute-only steps.
        del iterator
        if steps in blocks_at and first_batch is not None:
            probe_block(blocks_at[steps])
        if probe_ms:
            say(f"compute-only probe: {statistics.fmean(probe_ms):.1f} ms/step mean over {len(probe_ms)} steps "
                f"in {probe_state['blocks']} block(s)")
        recovery = recovery_steps([(p, n) for p, n in plan if p < steps], steps) if input_runs_ahead else []

        if tensorboard_dir:
            _write_scalars(tensorboard_dir, scalars)
        timed = step_ms[warmup:]
        examples_per_sec = global_batch * len(timed) / (sum(timed) / 1e3)
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
            compute_only_step_ms=statistics.fmean(probe_ms) if probe_ms else None,
            probe_steps=len(probe_ms),
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
                "probe_blocks": [[p, n] for p, n in plan],
                "probe_recovery_steps": recovery,
                "threadpool_events": threadpool_events,
                **_worker_identity(strategy),
            },
        )
    finally:
        if profiling:
            try:
                tf.profiler.experimental.stop()
            except Exception:  # noqa: BLE001 - already failing; don't mask the original error
                pass
        restore()
