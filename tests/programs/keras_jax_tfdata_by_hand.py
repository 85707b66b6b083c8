"""A user's Keras fit on the JAX backend fed by a tf.data pipeline (a per-example map with random noise and
normalisation, no parallel calls, prefetch 2; Keras converts each batch to NumPy and `device_put`s it), written by
hand to check `ProfileCallback(probe=True)` and `analyze` against a truth measured another way: the wall time of
whole `fit` calls (no callback of ours; the slope between a short and a long fit, so that each call's start cancels
out), real data against the same fit whose `train_function` is handed one batch already on the device;
alternating, several rounds.

    python tests/programs/keras_jax_tfdata_by_hand.py --out /tmp/h [--callbacks none|progress]

Found with it (2026-11-26, BENCHMARKS.md, not fixed): the probe read 33-38 % where this truth is 79-80 %.  The
pipeline holds ~5 batches (a 0.3 s pause, then 5 `next()` calls of 0.1-1.3 ms, then 4.4-6 ms each) and makes one
in ~5.3 ms; each probe block (~70 ms: its settle is 10 real steps' time) lets it fill them, and the real steps after
it drain them at ~2-3 ms a step for 8-12 steps — longer than the 15-step gap's 5 recovery steps leave out — so the
fit's real steps ran 2.4-3.4 ms with the probe and 6.3-8 ms without it (a 70 ms sleep at each planned block does
the same), and T was the draining pipeline's step, not the fit's.  Since 2026-11-27 the probe reads the drain in the
step times (tfbertperf/train/recovery.py): 64-72 % against 76-82 % on JAX; on the TensorFlow backend, where the
drained steps run at 0.7-0.8 of the fit's pace, still 19-25 % against 49-53 % (BENCHMARKS.md).  There tf.data's own
autotuned prefetch after the `.repeat()` doubles its buffer with each block (`--no-inject-prefetch` turns it off).
Since 2026-11-27 19:00 the callback, seeing that prefetch in the dataset, runs every block after the last step:
TensorFlow backend −15.8…+0.8 pp (mean |error| 6.0, five runs; 19.8 before), JAX −5.6…−0.1 (2.1; 9.0 before)
(docs/own-training.md, "tf.data's autotuned prefetch").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import sys  # noqa: E402

os.environ["KERAS_BACKEND"] = "tensorflow" if "--backend=tensorflow" in sys.argv else "jax"

import itertools  # noqa: E402

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfbertperf.keras import ProfileCallback  # noqa: E402

N, B, F = 16384, 64, 128


def pipeline(inject_prefetch: bool = True, repeat_first: bool = False, prefetch: int = 2) -> tf.data.Dataset:
    """The per-example map behind prefetch 2 and `.repeat()`: tf.data puts its own autotuned prefetch after the
    repeat (its default `inject_prefetch`) unless `inject_prefetch` is False.  `repeat_first`: `.repeat()` first
    and the pipeline ending in `prefetch(prefetch)` (tf.data.AUTOTUNE: the common tutorial form; nothing injected)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, F)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")

    def noisy(a, b):
        for _ in range(4):
            a = tf.math.l2_normalize(a + tf.random.normal(tf.shape(a), stddev=0.1))
        return a, b

    if repeat_first:
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().map(noisy).batch(B).prefetch(prefetch)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).map(noisy).batch(B).prefetch(2).repeat()
    if not inject_prefetch:
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        ds = ds.with_options(options)
    return ds


def compiled_model() -> keras.Model:
    """The 128 → 512 → 512 → 2 MLP this program (and tools/bench/bench_fit_drain.py) trains, seeded, compiled."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((F,))
    h = keras.layers.Dense(512, activation="relu")(inputs)
    h = keras.layers.Dense(512, activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(2)(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=60, help="steps of each timed fit")
    p.add_argument("--backend", choices=("jax", "tensorflow"), default="jax",
                   help="Keras' backend (write it --backend=tensorflow: it is read before Keras is imported)")
    p.add_argument("--callbacks", choices=("none", "progress"), default="progress",
                   help="the timed fits' callbacks: none (Keras reads the logs back on a thread of its own) or a "
                        "progress-bar-like one (logs read back every step, as with verbose=1 or ProfileCallback)")
    p.add_argument("--no-inject-prefetch", action="store_true",
                   help="turn off tf.data's own autotuned prefetch after the repeat (its inject_prefetch option)")
    a = p.parse_args()
    model = compiled_model()
    ds = pipeline(inject_prefetch=not a.no_inject_prefetch)
    model.fit(ds, epochs=1, steps_per_epoch=20, verbose=0)  # compiled, warm
    own = model.train_function
    tf_backend = a.backend == "tensorflow"
    extra = [] if a.callbacks == "none" else [keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: None)]
    first = next(iter(ds.take(1)))
    cached = iter(tf.data.Dataset.from_tensors(first).repeat()) if tf_backend else jax.device_put(
        tuple(t.numpy() for t in first))

    def wall(free: bool, steps: int) -> float:
        if free:
            model.train_function = ((lambda iterator: own(cached)) if tf_backend else
                                    (lambda state, iterator: own(state, itertools.repeat(cached))))
        try:
            t0 = time.perf_counter()
            model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=extra)
            return (time.perf_counter() - t0) * 1e3
        finally:
            model.train_function = own

    def timed(free: bool) -> float:
        """ms a step: the slope between a fit of `steps` and one of 3× as many (each fit call's own start — a new
        iterator over the pipeline, its buffers empty — cancels out)."""
        short, long = wall(free, a.steps), wall(free, 3 * a.steps)
        return (long - short) / (2 * a.steps)

    T, Tc = [], []
    for _ in range(a.rounds // 2):
        T.append(timed(False))
        Tc.append(timed(True))
    cb = ProfileCallback(a.out, profile_steps="60:72", probe=True)
    model.fit(ds, epochs=2, steps_per_epoch=150, callbacks=[cb], verbose=0)
    for _ in range(a.rounds - a.rounds // 2):
        T.append(timed(False))
        Tc.append(timed(True))
    t, tc = statistics.median(T), statistics.median(Tc)
    print(json.dumps({"truth": (t - tc) / t, "T_ms": t, "T_c_ms": tc, "T_all": T, "T_c_all": Tc,
                      "probe": cb.what_if, "logdir": a.out, "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
