"""A user's own training written by hand, as a user would: a small keras-hub BERT text classifier (`BertBackbone` +
`BertTextClassifier`, 2 layers, hidden 64) on TFRecords of English text they wrote themselves (Python's pydoc topics,
4 shards), read with `interleave` → `parse_single_example` → `shuffle` → `repeat` → `batch` → keras-hub's
`BertTextClassifierPreprocessor` (WordPiece from a vocabulary list, no download) in a map, everything
`tf.data.AUTOTUNE`, `prefetch(AUTOTUNE)` last. It checks `ProfileCallback(probe=True)` and `analyze` against a truth
measured another way: fits without any callback of ours but one that stamps each step's start, real data against the
same fit on one preprocessed batch from memory (`model.fit(Dataset.from_tensors(batch).repeat())`), alternating,
several rounds (each fit's median step; the truth is the median over rounds of (T − T_c) / T, so that a load change
hits both sides of a pair); the probed fit runs in the middle of the rounds.

    python tests/programs/keras_hub_bert_by_hand.py --out /tmp/kh [--rounds 10] [--fit-steps 300]
    python -m tfbertperf analyze /tmp/kh/logs

Prints one JSON line: {"truth", "pairs" (each round's), "T_ms", "T_c_ms", "T_all", "T_c_all", "probe" (the callback's
what_if), "logdir", "load"}. Measured: BENCHMARKS.md, issue 29 "a keras-hub BERT classifier written by hand".
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import string
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import tensorflow as tf  # noqa: E402
from pydoc_data.topics import topics  # noqa: E402

from tfbertperf.keras import ProfileCallback  # noqa: E402

SEQ, BATCH, SHARDS = 64, 32, 4
SETTLE = 8


def write_records(data_dir: str) -> tuple[list[str], list[str]]:
    """Sentences of Python's pydoc topics as tf.train.Examples ("text", "label") in SHARDS TFRecord files; returns
    the files and the vocabulary: special tokens, punctuation and digits, then the text's 3,000 most frequent
    lower-case words (under 2 % of a batch's tokens are [UNK])."""
    text = " ".join(topics.values())
    sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 20 < len(s.strip()) < 400]
    os.makedirs(data_dir, exist_ok=True)
    files = []
    for shard in range(SHARDS):
        files.append(os.path.join(data_dir, f"train-{shard}.tfrecord"))
        with tf.io.TFRecordWriter(files[-1]) as w:
            for s in sents[shard::SHARDS]:
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[s.encode()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[len(s) % 3]))})).SerializeToString())
    counts = collections.Counter(w.lower() for w in re.findall(r"[A-Za-z]+", text))
    words = sorted(counts, key=lambda w: (-counts[w], w))[:3000]
    return files, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.punctuation, *string.digits] + words


def pipeline(files: list[str], vocab: list[str]) -> tf.data.Dataset:
    tok = keras_hub.tokenizers.BertTokenizer(vocabulary=vocab, lowercase=True)
    pre = keras_hub.models.BertTextClassifierPreprocessor(tok, sequence_length=SEQ)

    def parse(r):
        f = tf.io.parse_single_example(r, {"text": tf.io.FixedLenFeature([], tf.string),
                                           "label": tf.io.FixedLenFeature([], tf.int64)})
        return f["text"], f["label"]

    return (tf.data.Dataset.from_tensor_slices(files).shuffle(SHARDS, seed=1)
            .interleave(tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=tf.data.AUTOTUNE)
            .map(parse, num_parallel_calls=tf.data.AUTOTUNE).shuffle(1000, seed=1).repeat().batch(BATCH)
            .map(lambda x, y: pre(x, y), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def compiled_model(vocab_size: int) -> keras.Model:
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(vocabulary_size=vocab_size, num_layers=2, num_heads=2, hidden_dim=64,
                                             intermediate_dim=128, max_sequence_length=SEQ)
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=3, preprocessor=None)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=60, help="steps of each timed fit")
    p.add_argument("--fit-steps", type=int, default=300, help="steps of the probed fit")
    p.add_argument("--window", default="30:50", help="the probed fit's profile_steps")
    a = p.parse_args()
    files, vocab = write_records(os.path.join(a.out, "data"))
    ds = pipeline(files, vocab)
    model = compiled_model(len(vocab))
    model.fit(ds, epochs=1, steps_per_epoch=20, verbose=0)  # compiled, warm
    cached = tf.data.Dataset.from_tensors(next(iter(ds.take(1)))).repeat()

    begins: list[float] = []
    stamp = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda b, logs: begins.append(time.perf_counter()))

    def timed(free: bool) -> float:
        """ms a step: the median interval between consecutive steps' starts of one fit of --steps steps (next()
        runs inside train_function), its first SETTLE steps left out (a new iterator fills its buffers).  The free
        fit iterates the cached batch only: no iterator over the pipeline fills its buffers beside its steps."""
        begins.clear()
        model.fit(cached if free else ds, epochs=1, steps_per_epoch=a.steps, verbose=0, callbacks=[stamp])
        return statistics.median(1e3 * (y - x) for x, y in zip(begins[SETTLE:], begins[SETTLE + 1:]))

    T, Tc = [], []
    for _ in range(a.rounds // 2):
        T.append(timed(False))
        Tc.append(timed(True))
    cb = ProfileCallback(os.path.join(a.out, "logs"), profile_steps=a.window, probe=True)
    model.fit(ds, epochs=1, steps_per_epoch=a.fit_steps, callbacks=[cb], verbose=0)
    for _ in range(a.rounds - a.rounds // 2):
        T.append(timed(False))
        Tc.append(timed(True))
    pairs = [(t - tc) / t for t, tc in zip(T, Tc)]  # each round's pair: a load change hits both
    print(json.dumps({"truth": statistics.median(pairs), "pairs": pairs, "T_ms": statistics.median(T),
                      "T_c_ms": statistics.median(Tc), "T_all": T, "T_c_all": Tc, "probe": cb.what_if,
                      "logdir": os.path.join(a.out, "logs"), "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
