"""A user's own TensorFlow training loop (a Keras model, `tf.GradientTape` in a `tf.function` step, a tf.data
pipeline iterated by hand), measured with `tfbertperf.tf_steps.StepTimer` — and, with --truth, the loop's what-if
truth beside it: (T − T_c) / T from alternating blocks of the same step on the pipeline and on one cached batch,
no profiler, no StepTimer (the method of keras_fit_shapes.py's loop truth).

Inputs:
  wait     a per-example map that waits on a slow lookup (`tf.py_function` around a sleep of --wait-ms), serial
  parse    per-example `tf.io.parse_single_example` of serialized tf.Examples (no parallel calls, prefetch 2)
           in front of an MLP that wants the same cores
  memory   the batches from memory (`cache()` of a few batches, repeated): compute-bound

Prints one JSON line: {"input", "losses", "what_if", "step_file", "truth", "T_ms", "T_c_ms"}.

    python tests/programs/tf_custom_loop.py --input wait --out /tmp/t --steps 80 --probe
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH, FEATURES = 32, 64


def pipeline(kind: str, wait_ms: float) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, FEATURES)).astype("float32")
    y = rng.integers(0, 2, size=4096).astype("int32")
    if kind == "parse":
        def example(i):
            f = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=x[i])),
                 "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y[i])]))}
            return tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()
        spec = {"x": tf.io.FixedLenFeature([FEATURES], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}
        ds = tf.data.Dataset.from_tensor_slices([example(i) for i in range(1024)]).repeat()
        ds = ds.map(lambda s: (lambda e: (e["x"], tf.cast(e["y"], tf.int32)))(tf.io.parse_single_example(s, spec)))
        return ds.batch(BATCH).prefetch(2)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if kind == "wait":
        def slow(a, b):
            def lookup(v):
                time.sleep(wait_ms / 1e3 / BATCH)
                return v
            return tf.py_function(lookup, [a], tf.float32), b
        ds = ds.repeat().map(lambda a, b: (lambda v: (tf.ensure_shape(v[0], [FEATURES]), v[1]))(slow(a, b)))
        return ds.batch(BATCH).prefetch(2)
    return ds.batch(BATCH).take(8).cache().repeat().prefetch(2)


def model_and_step(kind: str):
    keras.utils.set_random_seed(0)
    hidden, layers = {"parse": (512, 3), "memory": (1024, 3)}.get(kind, (256, 2))
    inputs = keras.Input((FEATURES,))
    x = inputs
    for _ in range(layers):
        x = keras.layers.Dense(hidden, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(2)(x))
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(batch):
        xb, yb = batch
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return model, optimizer, train_step


def measured_loop(kind: str, out: str, steps: int, probe: bool, wait_ms: float, window: str | None,
                  style: str = "with") -> dict:
    from tfbertperf.tf_steps import StepTimer

    model, optimizer, train_step = model_and_step(kind)
    if style == "bare":
        return bare_loop(kind, out, steps, wait_ms, window, train_step)
    timer = StepTimer(out, profile_steps=window, probe=probe, total_steps=steps if probe else None)
    state = lambda: [*model.variables, *optimizer.variables]  # noqa: E731 — the slots exist after step 0
    losses = []
    if style == "for":  # the loop as TF users write it: `for batch in dataset`, through StepTimer.steps
        for step, batch in timer.steps(pipeline(kind, wait_ms).take(steps), train_step, state):
            step.result = loss = train_step(batch)
            losses.append(float(loss))
    else:
        batches = iter(pipeline(kind, wait_ms))
        for _ in range(steps):
            timer.probe(train_step, state)  # a block of the what-if, where its plan puts one (nothing without probe)
            with timer.step() as step:
                batch = next(batches)  # inside the step: its wait for input is the step's
                timer.keep_batch(batch)  # the probe caches one batch, once
                step.result = loss = train_step(batch)
            losses.append(float(loss))
        timer.probe(train_step, state, last=True)
    timer.close()
    return {"losses": losses, "what_if": timer.what_if, "step_file": str(timer.step_file)}


def bare_loop(kind: str, out: str, steps: int, wait_ms: float, window: str, train_step) -> dict:
    """No StepTimer: tf.profiler started and stopped around the window (one step more on each side), a Trace
    marker around each step, the batch fetched by the `for` statement outside it (profile/step_gaps.py)."""
    first, stop = (int(v) for v in window.split(":"))
    losses = []
    for i, batch in enumerate(pipeline(kind, wait_ms).take(steps)):
        if i == first - 1:
            tf.profiler.experimental.start(out)
        if i == stop + 1:
            tf.profiler.experimental.stop()
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            losses.append(float(train_step(batch)))
    return {"losses": losses, "what_if": None, "step_file": None}


def truth(kind: str, wait_ms: float, rounds: int, block: int = 20, settle: int = 8) -> dict:
    """(T − T_c) / T from `rounds` alternating blocks on the pipeline and on one cached batch, no profiler: T and T_c
    the mean of their blocks' steps, each block's first `settle` left out (the pipeline refilling after a cached
    block, draining after a real one)."""
    model, optimizer, train_step = model_and_step(kind)
    it = iter(pipeline(kind, wait_ms))
    cached = next(it)
    for _ in range(10):
        train_step(next(it)).numpy()
    real, fed = [], []
    for _ in range(rounds):
        for src, into in ((lambda: next(it), real), (lambda: cached, fed)):
            times = []
            for j in range(block + settle):
                t0 = time.perf_counter()
                train_step(src()).numpy()
                if j >= settle:
                    times.append((time.perf_counter() - t0) * 1e3)
            into += times
    T, Tc = statistics.fmean(real), statistics.fmean(fed)  # the mean step, as the probe's T: a pipeline's slow
    # steps are its cost (a median leaves them out: a per-example parse's truth read 4–10 pp low so)
    return {"truth": (T - Tc) / T, "T_ms": T, "T_c_ms": Tc}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", choices=("wait", "parse", "memory"), default="wait")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--wait-ms", type=float, default=20.0)
    ap.add_argument("--window", default="10:20")
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--style", choices=("with", "for", "bare"), default="with",
                    help="`with timer.step()` around next() and the step, `for step, batch in timer.steps(ds)`, or "
                         "no StepTimer: a bare Trace marker around the step, the batch fetched by `for` outside it")
    ap.add_argument("--deterministic", action="store_true", help="tf.config.experimental.enable_op_determinism()")
    ap.add_argument("--other-profiler", action="store_true", help="a profiler already running when the loop starts")
    ap.add_argument("--truth", type=int, default=0, help="rounds of the truth's alternating blocks (0: none)")
    a = ap.parse_args()
    if a.deterministic:
        tf.config.experimental.enable_op_determinism()
    if a.other_profiler:
        tf.profiler.experimental.start(os.path.join(a.out, "other"))
    result = {"input": a.input, **measured_loop(a.input, a.out, a.steps, a.probe, a.wait_ms,
                                                None if a.window == "none" else a.window, a.style)}
    if a.truth:
        result.update(truth(a.input, a.wait_ms, a.truth))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
