"""A foreign program of another shape: text classification with tokenization in a map.

Raw sentences (from Python's bundled pydoc topics) are lower-cased, stripped of punctuation, split on whitespace,
word 1-3-grams and character 4-grams hashed into a 20,000-bucket vocabulary, padded/truncated to 256 ids — all in a `map` over single examples
(num_parallel_calls=2), then batched and prefetched — in front of a small embedding + 1-D conv + pooling
classifier.  Modes and output: tests/programs/harness.py.

    python tests/programs/text_tokenize.py --out /tmp/txt
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

from harness import keras_step, main  # noqa: E402

SEQ, BATCH, BUCKETS = 256, 64, 20000


def sentences() -> list[str]:
    from pydoc_data.topics import topics

    text = " ".join(topics.values())
    words = text.split()
    return [" ".join(words[i:i + 80]) for i in range(0, len(words) - 80, 37)][:4096]


def tokenize(s, label):
    s = tf.strings.lower(s)
    s = tf.strings.regex_replace(s, r"[^a-z0-9 ]", " ")
    toks = tf.strings.split(s)
    grams = tf.strings.ngrams(toks, (1, 3), separator=" ")  # words, bigrams and trigrams (features a bag model uses)
    chars = tf.strings.ngrams(tf.strings.unicode_split(s, "UTF-8"), 4, separator="")  # char 4-grams
    ids = tf.concat([tf.strings.to_hash_bucket_fast(grams, BUCKETS),
                     tf.strings.to_hash_bucket_fast(chars, BUCKETS)], 0)[:SEQ]
    ids = tf.pad(ids, [[0, SEQ - tf.shape(ids)[0]]])
    ids.set_shape((SEQ,))
    return ids, label


def make_dataset(kind: str) -> tf.data.Dataset:
    xs = sentences()
    ys = [len(x) % 2 for x in xs]
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).repeat().map(tokenize, num_parallel_calls=2)
    ds = ds.batch(BATCH, drop_remainder=True)
    if kind == "memory":
        ds = tf.data.Dataset.from_tensors(next(iter(ds))).repeat()
    return ds.prefetch(2)


def make_step():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([
        tf.keras.Input((SEQ,), dtype="int64"), tf.keras.layers.Embedding(BUCKETS, 32),
        tf.keras.layers.Conv1D(64, 5, activation="relu"), tf.keras.layers.GlobalMaxPooling1D(),
        tf.keras.layers.Dense(2)])
    return keras_step(tf, model)


if __name__ == "__main__":
    main(tf, make_dataset, make_step, __doc__)
