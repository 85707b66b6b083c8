"""A small foreign TF program (not BERT, not ours) that writes a profile with step markers.

It is what a user's own custom training loop looks like: a Keras MLP, a tf.data pipeline, and each step inside
`tf.profiler.experimental.Trace("train", step_num=i, _r=1)` with `next(iterator)` inside the block.

Modes (the input pipeline in front of the same model):
  stall    a CPU-heavy map in the pipeline (runs in parallel, with prefetch): the input pipeline is the
           bottleneck and also steals CPU from the model's compute — the case direct measures underestimate.
  sleep    a `tf.py_function` sleep per batch (blocks without using CPU).
  compute  a cheap pipeline in front of a larger model: compute-bound.
  memory   the stall mode's model fed `Dataset.from_tensors(batch).repeat()`: the compute-only truth T_c.
  compute_memory  the compute mode's model fed from memory (its T_c).
  nomarkers  like stall, profiled, but without step markers (for the "how to add markers" error).
  truth    no profile: the stall mode's what-if truth from alternating stall / memory blocks (what_if_truth).
  sleep_truth  the same for the sleep mode (sleep pipeline vs the same model fed from memory).

Prints one JSON line per mode: {"mode", "logdir", "step_time_ms" (mean over the measured steps),
"input_wait_ms" (mean wall time blocked in next()), "steps"}; the truths {"mode", "step_time_ms",
"compute_only_step_ms", "input_cost_fraction", "machine" (the other processes' CPU beside them:
tfbertperf/profile/machine_load.py)}.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

FEATURES = 256
BATCH = 64


def make_model(hidden: int, layers: int) -> tf.keras.Model:
    inputs = tf.keras.Input((FEATURES,))
    x = inputs
    for _ in range(layers):
        x = tf.keras.layers.Dense(hidden, activation="relu")(x)
    outputs = tf.keras.layers.Dense(10)(x)
    return tf.keras.Model(inputs, outputs)


def heavy_map(x, y, rounds: int):
    # CPU work a real pipeline might do per batch (decode/augment), vectorized over the batch so the profiler
    # records few, large ops (tracing thousands of tiny ops would itself inflate the input pipeline's cost):
    # `rounds` batched 64×64 matmuls on an outer product of each example's first 64 features.
    head = x[:, :64]
    m = head[:, :, None] * head[:, None, :]  # (B, 64, 64)
    for _ in range(rounds):
        m = tf.tanh(tf.matmul(m, m) * 0.01 + m)
    return tf.concat([tf.reduce_mean(m, axis=-1), x[:, 64:]], axis=-1), y


def sleep_batch(x, y, sleep_ms: float):
    def _sleep(a):
        time.sleep(sleep_ms / 1000.0)
        return a

    x = tf.py_function(_sleep, [x], tf.float32)
    x.set_shape((None, FEATURES))
    return x, y


def make_dataset(mode: str, rounds: int, sleep_ms: float) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((4096, FEATURES)).astype("float32")
    ys = rng.integers(0, 10, size=(4096,)).astype("int64")
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).repeat()
    if mode in ("stall", "nomarkers"):
        # Fixed parallelism and buffer (not AUTOTUNE) so the stall is the same from run to run.
        ds = ds.batch(BATCH, drop_remainder=True)
        ds = ds.map(lambda x, y: heavy_map(x, y, rounds), num_parallel_calls=2)
    elif mode == "sleep":
        ds = ds.batch(BATCH, drop_remainder=True).map(lambda x, y: sleep_batch(x, y, sleep_ms))
    else:
        ds = ds.batch(BATCH, drop_remainder=True)
    if mode in ("memory", "compute_memory"):
        batch = next(iter(ds))
        ds = tf.data.Dataset.from_tensors(batch).repeat()
    return ds.prefetch(2)


def make_step(hidden: int, layers: int):
    """A seeded model and its compiled SGD train step: `step(x, y) -> loss`."""
    tf.keras.utils.set_random_seed(0)
    model = make_model(hidden, layers)
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def run(mode: str, logdir: str, steps: int, window: tuple[int, int], rounds: int, sleep_ms: float,
        hidden: int, layers: int, record_cpu: bool = False) -> dict:
    from tfbertperf.profile import threadcpu

    step = make_step(hidden, layers)

    it = iter(make_dataset(mode, rounds, sleep_ms))
    step_ms, wait_ms = [], []
    start, stop = window
    for i in range(steps):
        if i == start:
            tf.profiler.experimental.start(logdir)
            cpu_at_start = threadcpu.snapshot(loaders=True) if record_cpu else None
        t0 = time.perf_counter()
        if mode == "nomarkers":
            x, y = next(it)
            t1 = time.perf_counter()
            step(x, y).numpy()
        else:
            with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                x, y = next(it)
                t1 = time.perf_counter()
                step(x, y).numpy()
        t2 = time.perf_counter()
        if i == stop - 1:
            cpu_at_stop = threadcpu.snapshot(loaders=True) if record_cpu else None
            tf.profiler.experimental.stop()
            if record_cpu:  # the threads' CPU over the window, beside the capture (what ProfileCallback writes)
                threadcpu.write_beside_newest_capture(logdir, cpu_at_start, cpu_at_stop)
        if i >= start:  # measure the same steps the profile holds, plus the rest after warm-up
            step_ms.append((t2 - t0) * 1e3)
            wait_ms.append((t1 - t0) * 1e3)
    return {
        "mode": mode,
        "logdir": logdir,
        "steps": len(step_ms),
        "step_time_ms": float(np.mean(step_ms)),
        "input_wait_ms": float(np.mean(wait_ms)),
    }


def what_if_truth(rounds: int, hidden: int, layers: int, blocks: int = 8, block_steps: int = 20, settle: int = 8,
                  pipeline: str = "stall", sleep_ms: float = 0.0) -> dict:
    """Input cost truth (T − T_c) / T with paired measurements: blocks of steps fed by the `pipeline` (stall or
    sleep) alternate with blocks fed from memory, in one process, so a load change on a shared machine hits both.
    The first `settle` steps of each block are dropped: during a memory block the stall pipeline refills its
    buffers in the background (prefetch + the parallel map's in-flight calls, ~4 batches), and a stall block
    starts by draining them — with a heavy stall the first ~5 steps of a block are much faster than the steady
    state (seen at --rounds 24: ~7.5 ms, then ~11 ms), so 8-step blocks dropping 3 steps under-measured T.
    T and T_c are medians of the remaining step times."""
    from tfbertperf.profile import machine_load

    step = make_step(hidden, layers)
    at = {"machine": machine_load.snapshot(), "process_cpu": time.process_time()}  # other processes beside it
    its = {"stall": iter(make_dataset(pipeline, rounds, sleep_ms)), "memory": iter(make_dataset("memory", rounds, 0.0))}
    times = {"stall": [], "memory": []}
    for b in range(blocks + 1):  # block 0 of each kind: warm-up (tracing)
        for kind in ("stall", "memory"):
            it = its[kind]
            for i in range(block_steps):
                t0 = time.perf_counter()
                x, y = next(it)
                step(x, y).numpy()
                if b > 0 and i >= settle:
                    times[kind].append((time.perf_counter() - t0) * 1e3)
    T, T_c = float(np.median(times["stall"])), float(np.median(times["memory"]))
    machine = machine_load.window(at, {"machine": machine_load.snapshot(), "process_cpu": time.process_time()}, 0.0)
    return {"mode": "truth" if pipeline == "stall" else f"{pipeline}_truth", "step_time_ms": T,
            "compute_only_step_ms": T_c, "input_cost_fraction": (T - T_c) / T, **machine}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory; each mode writes a logdir OUT/<mode>")
    p.add_argument("--modes", default="stall,memory,compute")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--window", default="10:25", help="profiled steps START:STOP")
    p.add_argument("--rounds", type=int, default=12, help="stall: batched matmul rounds per batch")
    p.add_argument("--sleep-ms", type=float, default=30.0)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--threadcpu", action="store_true", help="write the threads' CPU beside each capture "
                   "(threadcpu.json, as ProfileCallback does): analyze reads the input's measured CPU")
    a = p.parse_args(argv)
    start, stop = (int(v) for v in a.window.split(":"))
    for mode in a.modes.split(","):
        if mode in ("truth", "sleep_truth"):
            pipeline = "stall" if mode == "truth" else "sleep"
            print(json.dumps(what_if_truth(a.rounds, a.hidden, a.layers, pipeline=pipeline, sleep_ms=a.sleep_ms)),
                  flush=True)
            continue
        big = mode.startswith("compute")
        hidden, layers = (a.hidden * 3 // 2, a.layers + 1) if big else (a.hidden, a.layers)
        res = run(mode, os.path.join(a.out, mode), a.steps, (start, stop), a.rounds, a.sleep_ms, hidden, layers,
                  a.threadcpu)
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
