"""A user's Keras fit written by hand, as a user would: a per-example map (`x + tf.random.normal(…)`,
`l2_normalize`; no parallel calls, batch 64, prefetch 2) in front of a small MLP (128 → 256 → 2) whose compute runs on
the threads the capture records (p = 0 in profile/contention.py's stolen-CPU rule), profiled with
`ProfileCallback(probe=True)`, then an `evaluate()` with the same callback.  Prints the measured what-if and whether
evaluate said it captures nothing; `python -m tfbertperf analyze LOGDIR` then gives the capture's own estimate
(BENCHMARKS.md, issue 29 "A user's fit written by hand": what-if 70–71 % ± 8, the capture alone 44–57 %).

    python tests/programs/keras_fit_by_hand.py /tmp/hand/logs [--steps 300] [--window 300:320]
"""

from __future__ import annotations

import argparse
import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfbertperf.keras import ProfileCallback  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("logdir")
    p.add_argument("--steps", type=int, default=300, help="steps an epoch (two epochs)")
    p.add_argument("--window", default="300:320", help="ProfileCallback profile_steps")
    a = p.parse_args(argv)
    x = np.random.default_rng(1).standard_normal((4096, 128)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")

    def augment(a, b):
        return tf.nn.l2_normalize(a + tf.random.normal(tf.shape(a), stddev=0.1), 0), b

    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().map(augment).batch(64).prefetch(2)
    model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    cb = ProfileCallback(a.logdir, profile_steps=a.window, probe=True)
    model.fit(ds, steps_per_epoch=a.steps, epochs=2, validation_data=ds.take(5), callbacks=[cb], verbose=0)
    w = cb.what_if or {}
    print("what-if:", {k: w.get(k) for k in ("input_cost_fraction", "input_cost_ci95", "probe_blocks")})
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        model.evaluate(ds.take(3), callbacks=[cb], verbose=0)
    print("evaluate said it captures nothing:", any("capture nothing" in str(m.message) for m in said))


if __name__ == "__main__":
    main()
