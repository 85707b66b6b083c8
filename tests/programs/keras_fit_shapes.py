"""A user's own Keras `model.fit`, in one of several input shapes, profiled with `ProfileCallback(probe=True)`, next
to the what-if truth measured in the same process (issue 29's targets; tools/bench/bench_attribution_foreign.py).

Shapes (the input pipeline in front of a small Keras model, all on this host's CPU):
  wait_serial    a per-example map that waits on a slow lookup (`tf.py_function` around a sleep), no parallel calls
  wait_parallel  the same map with num_parallel_calls=4
  parse          per-example `tf.io.parse_single_example` of serialized tf.Examples (no parallel calls, prefetch 2)
                 in front of an MLP that wants the same cores
  tokenize       keras-hub's BertTextClassifierPreprocessor (WordPiece from a vocabulary list) mapped per example
                 over English sentences (Python's pydoc topics), embedding + pooling classifier
  compute        batches from memory in front of a wider MLP: compute-bound
  map            (not in the benchmark's default list) tf.data's guide shape: `from_tensor_slices → map(x * 2) → batch →
                 prefetch(2)` of examples in memory, in front of the parse shape's MLP — the per-example work is
                 tf.data's own
  map_small      (not in the default list) the same pipeline before three 256-wide layers: small ops one after another
                 on the threads the capture records (profile/undecided.py, "input CPU beside the compute")
  jpeg           (not in the default list) the tf.data guide's image pipeline: JPEG bytes decoded, padded, randomly
                 cropped, flipped and brightened in `map(num_parallel_calls=AUTOTUNE)`, shuffled, `prefetch(AUTOTUNE)`,
                 in front of a small CNN (oneDNN's parallel regions: the pool share p ≈ 0.9)
  audio          (not in the default list) TensorFlow's simple-audio tutorial: per-example `tf.signal.stft` of
                 one-second 16 kHz waveforms (tones and noise) to log-mel spectrograms in
                 `map(num_parallel_calls=AUTOTUNE)`, `prefetch(AUTOTUNE)`, before its CNN (Resizing, Conv2D ×2,
                 Dense 128)
  textcnn        (not in the default list) Keras' text-classification-from-scratch example: a `TextVectorization`
                 layer mapped over batches of raw English (Python's pydoc topics, several sentences an example),
                 `prefetch(10)`, before its Embedding + Conv1D ×2 + Dense model
  generator      (not in the default list) a Python generator behind `Dataset.from_generator`: per example a regex word
                 split, a vocabulary lookup and bigram hashing in Python (the interpreter lock held), batched and
                 prefetched, in front of an embedding + 3×512 MLP that wants both cores (profile/core_wait.py ceiling)

With --epoch-steps N the profiled fit runs epochs of N steps (`steps_per_epoch`, the dataset repeating: one
iterator, as the truth's) with `validation_data` of --validation-batches batches after each, so a --window across
N holds fit's validation and epoch end (profile/outside_steps.py).
With --burst STEP:MS two processes spin beside the fit for MS ms from its step STEP: a neighbour's burst on a shared
machine, a slow stretch that is not the program's (train/recovery.py's reference).

Truth (no profiler, no ProfileCallback), measured two ways, each half before and half after the profiled fit:
"truth" in a bare loop of `model.train_function` (below) and "fit_truth" inside `model.fit` (FitTruth).
Loop truth: (T − T_c) / T, T the step on the real pipeline and T_c the same step fed the
same batches from memory (CACHED of the pipeline's batches, `Dataset.from_tensor_slices(batches).repeat()`), in
alternating blocks through `model.train_function` (the step `fit` runs), each block's first SETTLE steps left out;
half the blocks before and half after `model.fit` with ProfileCallback(probe=True) on the real pipeline.  Prints one JSON line:
{"shape", "truth", "T_ms", "T_c_ms", "fit_truth", "fit_T_ms", "fit_T_c_ms", "probe": callback.what_if, "logdir",
"step_file"}.

    python tests/programs/keras_fit_shapes.py --shape parse --out /tmp/x
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH, FEATURES, CACHED, SETTLE = 32, 64, 8, 3
# the cached steps are timed once the real pipeline has refilled, as the probe times them (train/probe.py
# SETTLE_REAL_STEPS, SETTLE_MAX_STEPS; tools/bench/bench_probe_settle.py: why)
SETTLE_REAL, SETTLE_MAX = 10, 60
RECOVER = 8  # real steps left untimed after a cached block (prefetch 2, a map up to 4 wide, one batch in the making)
SHAPES = ("wait_serial", "wait_parallel", "parse", "tokenize", "compute")
EXTRA_SHAPES = ("map", "map_small", "generator", "jpeg", "audio", "textcnn")


def _mlp(inputs, x, hidden: int, layers: int) -> keras.Model:
    for _ in range(layers):
        x = keras.layers.Dense(hidden, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(2)(x))


def _examples(n: int):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, FEATURES)).astype("float32"), rng.integers(0, 2, size=n).astype("int32")


def build(shape: str, wait_ms: float):
    """(model, dataset of (x, y) batches repeating forever) for a shape (module docstring)."""
    if shape == "tokenize":
        return _tokenize()
    if shape == "generator":
        return _generator()
    if shape == "jpeg":
        return _jpeg()
    if shape == "audio":
        return _audio()
    if shape == "textcnn":
        return _textcnn()
    xs, ys = _examples(2048)
    inputs = keras.Input((FEATURES,))
    if shape == "parse":
        records = [tf.train.Example(features=tf.train.Features(feature={
            **{f"f{k}": tf.train.Feature(float_list=tf.train.FloatList(value=x[k * 8:(k + 1) * 8])) for k in range(8)},
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)]))})).SerializeToString()
            for x, y in zip(xs, ys)]
        spec = {**{f"f{k}": tf.io.FixedLenFeature((8,), tf.float32) for k in range(8)},
                "label": tf.io.FixedLenFeature((), tf.int64)}

        def parse(r):
            f = tf.io.parse_single_example(r, spec)
            return tf.concat([f[f"f{k}"] for k in range(8)], 0), tf.cast(f["label"], tf.int32)

        ds = tf.data.Dataset.from_tensor_slices(records).repeat().map(parse).batch(BATCH, drop_remainder=True)
        return _mlp(inputs, inputs, 512, 3), ds.prefetch(2)
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).repeat()
    if shape.startswith("map"):
        ds = ds.map(lambda x, y: (x * 2.0, y)).batch(BATCH, drop_remainder=True)
        return _mlp(inputs, inputs, 256 if shape == "map_small" else 512, 3), ds.prefetch(2)
    if shape.startswith("wait"):
        def lookup(x):
            time.sleep(wait_ms / 1e3)  # a blocking lookup: the thread waits, it takes no core
            return x

        def slow(x, y):
            x = tf.py_function(lookup, [x], tf.float32)
            x.set_shape((FEATURES,))
            return x, y

        ds = ds.map(slow, num_parallel_calls=4 if shape == "wait_parallel" else None)
        return _mlp(inputs, inputs, 256, 2), ds.batch(BATCH, drop_remainder=True).prefetch(2)
    return _mlp(inputs, inputs, 1024, 4), ds.batch(BATCH, drop_remainder=True).prefetch(2)


def _english() -> tuple[str, list[str]]:
    """Python's pydoc topics (real English, always present): the whole text, and its sentences shuffled once — the
    topics run from prose to code listings, so in their own order a batch's cost depends on where the iterator is,
    and T measured at one place would not be T at another."""
    import pydoc_data.topics as topics

    text = " ".join(topics.topics.values())
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s) > 20]
    np.random.default_rng(0).shuffle(sentences)
    return text, sentences


def _tokenize():
    from collections import Counter

    import keras_hub

    text, sentences = _english()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [w for w, _ in Counter(re.findall(r"[a-z]+", text.lower()))
                                                               .most_common(4000)]
    pre = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer=keras_hub.models.BertTokenizer(vocabulary=vocab, lowercase=True), sequence_length=128)
    labels = np.arange(len(sentences)) % 2
    ds = tf.data.Dataset.from_tensor_slices((sentences, labels.astype("int32"))).repeat()
    ds = ds.map(lambda s, y: (pre(s)["token_ids"], y)).batch(BATCH, drop_remainder=True).prefetch(2)
    inputs = keras.Input((128,), dtype="int32")
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(len(vocab), 128)(inputs))
    return _mlp(inputs, x, 512, 2), ds


def _jpeg():
    rng, size = np.random.default_rng(0), 96
    # smooth synthetic photos (low-frequency noise, upsampled), JPEG-encoded as a dataset on disk would hold them
    small = rng.integers(0, 255, (512, 12, 12, 3)).astype("uint8")
    jpegs = [tf.io.encode_jpeg(im, quality=90).numpy()
             for im in tf.cast(tf.image.resize(small, (size, size), method="bicubic"), tf.uint8)]

    def augment(b, label):
        im = tf.io.decode_jpeg(b, channels=3)
        im = tf.image.random_crop(tf.image.resize_with_crop_or_pad(im, size + 8, size + 8), (size, size, 3))
        im = tf.image.random_flip_left_right(im)
        return tf.image.random_brightness(tf.image.convert_image_dtype(im, tf.float32), 0.2), label

    ds = (tf.data.Dataset.from_tensor_slices((jpegs, rng.integers(0, 2, 512).astype("int32"))).repeat().shuffle(256)
          .map(augment, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH, drop_remainder=True)
          .prefetch(tf.data.AUTOTUNE))
    model = keras.Sequential([keras.Input((size, size, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
                              keras.layers.MaxPooling2D(), keras.layers.Conv2D(32, 3, activation="relu"),
                              keras.layers.MaxPooling2D(), keras.layers.Conv2D(32, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])
    return model, ds


def _audio():
    rng, rate = np.random.default_rng(0), 16000
    t = np.arange(rate) / rate
    # tones at random pitches with harmonics and noise: one second of "speech-like" audio each
    waves = np.stack([np.sin(2 * np.pi * f * t) + 0.3 * np.sin(4 * np.pi * f * t) + 0.2 * rng.standard_normal(rate)
                      for f in rng.uniform(100, 2000, 256)]).astype("float32")
    mel = tf.signal.linear_to_mel_weight_matrix(64, 257, rate, 20.0, 7600.0)

    def spectrogram(w, label):
        s = tf.abs(tf.signal.stft(w, frame_length=400, frame_step=160, fft_length=512))
        return tf.math.log(tf.tensordot(s, mel, 1) + 1e-6)[..., tf.newaxis], label

    ds = (tf.data.Dataset.from_tensor_slices((waves, rng.integers(0, 2, 256).astype("int32"))).repeat()
          .map(spectrogram, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH, drop_remainder=True)
          .prefetch(tf.data.AUTOTUNE))
    model = keras.Sequential([keras.Input((98, 64, 1)), keras.layers.Resizing(32, 32), keras.layers.Normalization(),
                              keras.layers.Conv2D(32, 3, activation="relu"),
                              keras.layers.Conv2D(64, 3, activation="relu"),
                              keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                              keras.layers.Dense(128, activation="relu"), keras.layers.Dense(2)])
    return model, ds


def _textcnn():
    _, sentences = _english()
    docs = [" ".join(sentences[i:i + 20]) for i in range(0, len(sentences) - 20, 20)]
    vectorize = keras.layers.TextVectorization(max_tokens=20000, output_sequence_length=256)
    vectorize.adapt(docs)
    ds = (tf.data.Dataset.from_tensor_slices((docs, (np.arange(len(docs)) % 2).astype("int32"))).repeat()
          .batch(BATCH, drop_remainder=True).map(lambda x, y: (vectorize(tf.expand_dims(x, -1)), y)).prefetch(10))
    inputs = keras.Input((256,), dtype="int64")
    x = keras.layers.Embedding(20000, 128)(inputs)
    x = keras.layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = keras.layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = keras.layers.Dense(128, activation="relu")(keras.layers.GlobalMaxPooling1D()(x))
    return keras.Model(inputs, keras.layers.Dense(2)(x)), ds


def _generator():
    text, sentences = _english()
    vocab: dict[str, int] = {}
    for w in re.findall(r"[a-z]+", text.lower()):
        vocab.setdefault(w, len(vocab) + 1)
    length, size = 64, 5000

    def encode(s: str) -> np.ndarray:
        ids = [vocab.get(w, 0) % size for w in re.findall(r"[a-z]+", s.lower())][:length]
        pairs = [hash((a, b)) % size for a, b in zip(ids, ids[1:])][:length]
        return np.array(ids + [0] * (length - len(ids)) + pairs + [0] * (length - len(pairs)), np.int32)

    def examples():
        i = 0
        while True:
            yield encode(sentences[i % len(sentences)]), np.int32(i % 2)
            i += 1

    ds = tf.data.Dataset.from_generator(examples, output_signature=(tf.TensorSpec((2 * length,), tf.int32),
                                                                    tf.TensorSpec((), tf.int32)))
    inputs = keras.Input((2 * length,), dtype="int32")
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(size, 64)(inputs))
    return _mlp(inputs, x, 512, 3), ds.batch(BATCH, drop_remainder=True).prefetch(2)


def _timed(step, source, n: int, settle_ms: float = 0.0, untimed: int = SETTLE) -> list[float]:
    """n − SETTLE timed steps, after `untimed` untimed ones and at least settle_ms of wall time (as the probe does:
    train/probe.py run_block, SETTLE_REAL_STEPS)."""
    out, start, j = [], time.perf_counter(), 0
    while len(out) < n - SETTLE:
        t0 = time.perf_counter()
        logs = step(source)
        float(logs["loss"])
        if j >= untimed and ((t0 - start) * 1e3 >= settle_ms or j >= SETTLE_MAX):
            out.append((time.perf_counter() - t0) * 1e3)
        j += 1
    return out


class Truth:
    """Alternating unprofiled blocks on the real pipeline and on CACHED of its batches (module docstring); call
    `blocks(n)` before and after the profiled fit, so that both halves of a shared machine's drift are in it."""

    def __init__(self, model, ds, block: int) -> None:
        model.make_train_function()
        self.step, self.block, self.T, self.Tc = model.train_function, block, [], []
        self.real = iter(ds)
        batches = [next(self.real) for _ in range(CACHED)]
        stacked = tf.nest.map_structure(lambda *b: tf.stack(b), *batches)
        self.cached = iter(tf.data.Dataset.from_tensor_slices(stacked).repeat())
        _timed(self.step, self.real, SETTLE + 2)  # tracing for both sources, off the clock
        _timed(self.step, self.cached, SETTLE + 2)

    def blocks(self, rounds: int) -> None:
        for _ in range(rounds):
            # the first real steps after a cached block are fed from the buffers the pipeline filled during it
            # (up to SETTLE_MAX steps long): left out, as FitTruth and the probe leave their recovery steps out
            real = _timed(self.step, self.real, self.block, untimed=RECOVER)
            self.T += real
            # the real pipeline refills its buffers while the cached steps start: wait as the probe does
            self.Tc += _timed(self.step, self.cached, self.block, settle_ms=SETTLE_REAL * statistics.fmean(real))

    def result(self, lo: int = 0, hi: int | None = None) -> tuple[float, float, float]:
        """(input cost, T, T_c) over the timed steps lo:hi of each kind (all by default)."""
        t, tc = statistics.fmean(self.T[lo:hi]), statistics.fmean(self.Tc[lo:hi])
        return max(0.0, (t - tc) / t), t, tc


class FitTruth(keras.callbacks.Callback):
    """The truth measured inside `model.fit` (the loop the user runs): fit's own steps on the pipeline timed as
    ProfileCallback times them (batch begin → end, loss read back), and every 3 × block steps a block of `block`
    steps on the CACHED batches run from on_train_batch_begin (SETTLE untimed, and 3 recent steps' worth of time),
    the block's length of real steps after it left out of T (fed from buffers filled meanwhile).  Steps inside
    fit ran ~0.1 ms slower on cached batches than the same steps in a bare train_function loop, while real steps
    did not (issue 29): this truth answers "my fit with free input"."""

    def __init__(self, truth: "Truth", warm: int = 5) -> None:
        super().__init__()
        self.truth, self.warm, self.T, self.Tc = truth, warm, [], []
        self._i, self._skip_until, self._t0 = 0, 0, 0.0

    def on_train_batch_begin(self, batch, logs=None):
        b = self.truth.block
        if self._i >= self.warm and (self._i - self.warm) % (3 * b) == 2 * b and self.T:
            self.Tc += _timed(self.truth.step, self.truth.cached, b,
                              settle_ms=SETTLE_REAL * statistics.fmean(self.T[-5:]))
            self._skip_until = self._i + b
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        float(logs["loss"])
        if self._i >= self.warm and self._i >= self._skip_until:
            self.T.append((time.perf_counter() - self._t0) * 1e3)
        self._i += 1

    def run(self, model, ds, rounds: int) -> None:
        calls = self.warm + rounds * 3 * self.truth.block  # fit's steps_per_epoch counts batches: k a call
        model.fit(ds, epochs=1, steps_per_epoch=calls * model.steps_per_execution, callbacks=[self], verbose=0)

    def result(self) -> tuple[float, float, float]:
        t, tc = statistics.fmean(self.T), statistics.fmean(self.Tc)
        return max(0.0, (t - tc) / t), t, tc


class Burst(keras.callbacks.Callback):
    """A neighbour's burst beside the fit: at step `step` two processes spin on the cores for `ms` milliseconds each,
    then exit — the slow stretch a shared machine puts into a fit now and then.  Started through a shell that exits
    at once, so that they are not the program's children (whose CPU the thread-CPU record counts as its loaders')."""

    def __init__(self, step: int, ms: float):
        super().__init__()
        self.step, self.ms, self.seen = step, ms, 0

    @classmethod
    def parse(cls, value: str) -> list:
        if not value:
            return []
        try:
            step, ms = value.split(":")
            b = cls(int(step), float(ms))
        except ValueError:
            b = None
        if b is None or b.step < 0 or b.ms <= 0:  # one line, exit 2 (the project's bad-input rule)
            import sys

            print(f"keras_fit_shapes: --burst {value}: expected STEP:MS, a step ≥ 0 and milliseconds > 0",
                  file=sys.stderr)
            sys.exit(2)
        return [b]

    def on_train_batch_begin(self, batch, logs=None):
        if self.seen == self.step:
            import shlex
            import subprocess
            import sys

            spin = f"import time\nt = time.perf_counter() + {self.ms / 1e3}\nwhile time.perf_counter() < t: pass"
            one = f"{shlex.quote(sys.executable)} -S -c {shlex.quote(spin)} &"
            subprocess.run(["sh", "-c", f"{one} {one}"], check=True)
        self.seen += 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=SHAPES + EXTRA_SHAPES, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--wait-ms", type=float, default=1.0, help="wait_*: the lookup's wait per example")
    # Many short blocks on both sides: on a shared 2-core host the speed drifts within seconds (issue 29 bench).
    p.add_argument("--steps", type=int, default=140, help="steps of the profiled fit")
    p.add_argument("--window", default="70:80", help="its profiled window")
    p.add_argument("--probe-steps", default="auto", help="ProfileCallback probe_steps (\"auto\" or a count)")
    p.add_argument("--probe-blocks", type=int, default=8, help="ProfileCallback probe_blocks (with a count)")
    p.add_argument("--rounds", type=int, default=10, help="truth: blocks of each kind")
    p.add_argument("--block", type=int, default=8, help="truth: steps per block (the first SETTLE not timed)")
    p.add_argument("--steps-per-execution", type=int, default=1,
                   help="Keras compile(steps_per_execution=k): a step, a truth step and a probe step are one call of k "
                        "batches (--steps and --window still count batches)")
    p.add_argument("--epoch-steps", type=int, default=0, help="the profiled fit's steps_per_epoch (0: one epoch), "
                   "validation after each")
    p.add_argument("--validation-batches", type=int, default=32, help="with --epoch-steps: validation_data's batches")
    p.add_argument("--burst", default="", help="STEP:MS — a neighbour's burst: two processes spin for MS ms from the "
                   "fit's step STEP (a slow stretch that is not the program's: train/recovery.py)")
    a = p.parse_args()
    burst = Burst.parse(a.burst)
    if a.epoch_steps < 0 or a.validation_batches < 1:
        p.error(f"--epoch-steps {a.epoch_steps} / --validation-batches {a.validation_batches}: expected 0 or more / "
                f"1 or more")
    from tfbertperf.keras import ProfileCallback

    keras.utils.set_random_seed(0)
    model, ds = build(a.shape, a.wait_ms)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=a.steps_per_execution)
    truth = Truth(model, ds, a.block)
    fit_truth = FitTruth(truth)
    truth.blocks(a.rounds - a.rounds // 2)
    fit_truth.run(model, ds, a.rounds - a.rounds // 2)
    logdir = os.path.join(a.out, a.shape)
    cb = ProfileCallback(logdir, profile_steps=a.window, probe=True,
                         probe_steps=a.probe_steps if a.probe_steps == "auto" else int(a.probe_steps),
                         probe_blocks=a.probe_blocks)
    if a.epoch_steps:  # validation batches of the pipeline's own, cached (a held-out set in memory)
        val = tf.data.Dataset.from_tensor_slices(
            tf.nest.map_structure(lambda *b: tf.stack(b), *ds.take(a.validation_batches))).prefetch(2)
        model.fit(ds, epochs=-(-a.steps // a.epoch_steps), steps_per_epoch=a.epoch_steps, validation_data=val,
                  callbacks=[cb, *burst], verbose=0)
    else:
        model.fit(ds, epochs=1, steps_per_epoch=a.steps, callbacks=[cb, *burst], verbose=0)
    half = len(truth.T)
    truth.blocks(a.rounds // 2)
    fit_truth.run(model, ds, a.rounds // 2)
    fit_cost, fit_t, fit_tc = fit_truth.result()
    cost, t, tc = truth.result()
    halves = [truth.result(0, half)[0], truth.result(half)[0]]  # before and after the fit: how steady the truth is
    print(json.dumps({"shape": a.shape, "truth": cost, "truth_halves": halves, "T_ms": t, "T_c_ms": tc,
                      "fit_truth": fit_cost, "fit_T_ms": fit_t, "fit_T_c_ms": fit_tc,
                      "probe": cb.what_if,
                      "logdir": logdir, "step_file": str(cb.step_file), "load": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
