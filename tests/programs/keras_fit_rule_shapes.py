"""Foreign Keras `model.fit` programs of several input shapes, profiled with ProfileCallback, with their what-if
truth — the programs issue 29 judges `tfbertperf analyze` on (tools/bench/bench_analyze_foreign_rules.py).

Shapes (--shape; each the same small Keras MLP classifier unless said, fed by tf.data):
  sleep_serial    a map whose `tf.py_function` waits SLEEP ms per example (a slow lookup: no CPU used), serial
                  (no num_parallel_calls), batch, prefetch 2;
  sleep_parallel  the same wait with num_parallel_calls=4;
  parse           serialized tf.train.Examples parsed one by one (`parse_single_example`, no parallel calls), batch,
                  prefetch 2: the parse competes with the model for the same cores;
  tokenize        raw sentences through keras-hub's BertTextClassifierPreprocessor (WordPiece from a vocabulary
                  list, no download) in a map (num_parallel_calls=2), prefetch 2, in front of an embedding model;
  compute         a cheap pipeline (batch of in-memory tensors, prefetch) in front of a larger MLP.
Modes (--modes, comma-separated; one JSON line each on stdout):
  profiled  model.fit over --steps steps with ProfileCallback(profile_steps=--window) → OUT/<shape>/profiled;
            {"mode", "logdir", "step_time_ms" (mean of the window's steps)};
  truth     no profiler: fit blocks on the pipeline alternate with fit blocks on one cached batch
            (`Dataset.from_tensors(batch).repeat()`), in one process; step time = time between consecutive
            on_train_batch_begin calls (next() runs inside train_function), the first SETTLE of each block
            dropped, a block's median; {"mode", "step_time_ms" (T), "compute_only_step_ms" (T_c): medians over
            the blocks, "input_cost_fraction": the median over adjacent block pairs of (T − T_c) / T, so that a
            load change on a shared machine hits both figures of a pair}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

FEATURES, BATCH, SEQ = 256, 64, 64
SETTLE = 6


def _mlp(hidden: int, layers: int, dtype="float32") -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((FEATURES,), dtype=dtype)
    x = inputs
    for _ in range(layers):
        x = keras.layers.Dense(hidden, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(10)(x))
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _features(n=4096):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((n, FEATURES)).astype("float32"), rng.integers(0, 10, size=(n,)).astype("int64"))


def _sleep_map(sleep_ms: float):
    def wait(x):
        time.sleep(sleep_ms / 1000.0)  # a slow lookup: the thread blocks, no CPU
        return x

    def f(x, y):
        x = tf.py_function(wait, [x], tf.float32)
        x.set_shape((FEATURES,))
        return x, y

    return f


def _serialized():
    xs, ys = _features(2048)
    out = []
    for x, y in zip(xs, ys):
        ex = tf.train.Example(features=tf.train.Features(feature={
            "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
            "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)]))}))
        out.append(ex.SerializeToString())
    return out


SPEC = {"x": tf.io.FixedLenFeature([FEATURES], tf.float32), "y": tf.io.FixedLenFeature([1], tf.int64)}


def _parse(rec):
    ex = tf.io.parse_single_example(rec, SPEC)
    return ex["x"], ex["y"][0]


def _vocabulary() -> list[str]:
    from collections import Counter

    from pydoc_data.topics import topics

    words = Counter(w for t in topics.values() for w in t.lower().split() if w.isalpha())
    chars = sorted({c for w in words for c in w})
    return (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
            + [w for w, _ in words.most_common(3000) if len(w) > 1])


def _sentences() -> list[str]:
    from pydoc_data.topics import topics

    words = " ".join(topics.values()).split()
    return [" ".join(words[i:i + 60]) for i in range(0, len(words) - 60, 29)][:4096]


def make(shape: str, sleep_ms: float):
    """(model, the pipeline's dataset) for one shape."""
    if shape == "tokenize":
        import keras_hub

        tok = keras_hub.models.BertTokenizer(vocabulary=_vocabulary(), lowercase=True)
        pre = keras_hub.models.BertTextClassifierPreprocessor(tok, sequence_length=SEQ)
        xs = _sentences()
        ys = np.array([len(s) % 2 for s in xs], dtype="int64")
        ds = tf.data.Dataset.from_tensor_slices((xs, ys)).repeat().batch(BATCH, drop_remainder=True)
        ds = ds.map(lambda x, y: (pre(x)["token_ids"], y), num_parallel_calls=2)
        keras.utils.set_random_seed(0)
        inputs = keras.Input((SEQ,), dtype="int32")
        h = keras.layers.Embedding(len(_vocabulary()), 64)(inputs)
        h = keras.layers.Flatten()(h)
        h = keras.layers.Dense(512, activation="relu")(h)
        model = keras.Model(inputs, keras.layers.Dense(2)(h))
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model, ds.prefetch(2)
    if shape == "parse":
        ds = tf.data.Dataset.from_tensor_slices(_serialized()).repeat().map(_parse)
        return _mlp(512, 3), ds.batch(BATCH, drop_remainder=True).prefetch(2)
    ds = tf.data.Dataset.from_tensor_slices(_features()).repeat()
    if shape == "sleep_serial":
        ds = ds.map(_sleep_map(sleep_ms))
    elif shape == "sleep_parallel":
        ds = ds.map(_sleep_map(sleep_ms), num_parallel_calls=4)
    elif shape != "compute":
        raise SystemExit(f"--shape {shape!r}: one of sleep_serial, sleep_parallel, parse, tokenize, compute")
    model = _mlp(1024, 4) if shape == "compute" else _mlp(512, 3)
    return model, ds.batch(BATCH, drop_remainder=True).prefetch(2)


class _BeginTimes(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.t = []

    def on_train_batch_begin(self, batch, logs=None):
        self.t.append(time.perf_counter())

    def on_train_end(self, logs=None):
        self.t.append(time.perf_counter())


def truth(shape: str, sleep_ms: float, blocks: int = 10, block_steps: int = 14) -> dict:
    model, ds = make(shape, sleep_ms)
    mem = tf.data.Dataset.from_tensors(next(iter(ds))).repeat()
    pairs = []  # (T, T_c) of adjacent blocks: a load change on a shared machine hits both of a pair
    for b in range(blocks + 1):  # block 0 of each kind: warm-up (tracing)
        med = {}
        for kind, feed in (("pipeline", ds), ("memory", mem)):
            cb = _BeginTimes()
            model.fit(feed, steps_per_epoch=block_steps, epochs=1, verbose=0, callbacks=[cb])
            med[kind] = float(np.median([(b2 - a) * 1e3 for a, b2 in zip(cb.t[SETTLE:-2], cb.t[SETTLE + 1:-1])]))
        if b > 0:
            pairs.append((med["pipeline"], med["memory"]))
    T, T_c = (float(np.median([p[i] for p in pairs])) for i in (0, 1))
    return {"mode": "truth", "shape": shape, "step_time_ms": T, "compute_only_step_ms": T_c,
            "input_cost_fraction": float(np.median([(t - c) / t for t, c in pairs]))}


def profiled(shape: str, sleep_ms: float, logdir: str, steps: int, window: str) -> dict:
    from tfbertperf.keras import ProfileCallback

    model, ds = make(shape, sleep_ms)
    cb = ProfileCallback(logdir, profile_steps=window)
    model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[cb])
    a, b = (int(v) for v in window.split(":"))
    return {"mode": "profiled", "shape": shape, "logdir": logdir,
            "step_time_ms": float(np.mean(cb.step_times_ms[a:b]))}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--shape", required=True)
    p.add_argument("--modes", default="profiled,truth")
    p.add_argument("--steps", type=int, default=45)
    p.add_argument("--window", default="25:40")
    p.add_argument("--sleep-ms", type=float, default=1.0, help="sleep shapes: wait per example, ms")
    a = p.parse_args(argv)
    for mode in a.modes.split(","):
        if mode == "truth":
            res = truth(a.shape, a.sleep_ms)
        elif mode == "profiled":
            res = profiled(a.shape, a.sleep_ms, os.path.join(a.out, a.shape, "profiled"), a.steps, a.window)
        else:
            raise SystemExit(f"--modes: unknown mode {mode!r} (profiled, truth)")
        print(json.dumps(res), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
