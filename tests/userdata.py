"""TFRecords as the user has them — written here the way google-research/bert writes them, not with our encoder:

* pretraining: create_pretraining_data.py's write_instance_to_example_files (../shared/anchors/google-research-bert):
  input_ids, input_mask, segment_ids padded to max_seq_length; masked_lm_positions, masked_lm_ids padded to
  max_predictions_per_seq with 0, masked_lm_weights 1.0 / 0.0 (a float list); next_sentence_labels [0 or 1];
  tf.train.Example via tf.train.Int64List / FloatList, TFRecordWriter.
* classification: run_classifier.py's file_based_convert_examples_to_features: input_ids, input_mask,
  segment_ids, label_ids [label], is_real_example [1].
"""

from __future__ import annotations

import collections
import random

VOCAB = 400  # ids 0..VOCAB-1; 101 [CLS], 102 [SEP], 103 [MASK] as in BERT's uncased vocab (all < VOCAB)


def _int(values):
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _float(values):
    import tensorflow as tf

    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def pretrain_features(rng: random.Random, seq_len: int, max_pred: int, vocab: int = VOCAB) -> collections.OrderedDict:
    """One instance's features, exactly as write_instance_to_example_files builds them."""
    n = rng.randint(seq_len // 2, seq_len)
    cut = rng.randint(2, n - 2)
    tokens = [101] + [rng.randint(104, vocab - 1) for _ in range(cut - 2)] + [102] + \
        [rng.randint(104, vocab - 1) for _ in range(n - cut - 1)] + [102]
    segment_ids = [0] * cut + [1] * (n - cut)
    k = min(max_pred, max(1, int(round(n * 0.15))))
    positions = sorted(rng.sample([i for i, t in enumerate(tokens) if t not in (101, 102)], k))
    labels = [tokens[p] for p in positions]
    input_ids = list(tokens)
    for p in positions:
        input_ids[p] = 103
    input_mask = [1] * len(input_ids)
    while len(input_ids) < seq_len:
        input_ids.append(0)
        input_mask.append(0)
        segment_ids.append(0)
    masked_lm_positions, masked_lm_ids = list(positions), list(labels)
    masked_lm_weights = [1.0] * len(masked_lm_ids)
    while len(masked_lm_positions) < max_pred:
        masked_lm_positions.append(0)
        masked_lm_ids.append(0)
        masked_lm_weights.append(0.0)
    f = collections.OrderedDict()
    f["input_ids"] = _int(input_ids)
    f["input_mask"] = _int(input_mask)
    f["segment_ids"] = _int(segment_ids)
    f["masked_lm_positions"] = _int(masked_lm_positions)
    f["masked_lm_ids"] = _int(masked_lm_ids)
    f["masked_lm_weights"] = _float(masked_lm_weights)
    f["next_sentence_labels"] = _int([rng.randint(0, 1)])
    return f


def classify_features(rng: random.Random, seq_len: int, num_labels: int, vocab: int = VOCAB) -> collections.OrderedDict:
    """One example's features, exactly as run_classifier.py's file_based_convert_examples_to_features."""
    n = rng.randint(4, seq_len)
    input_ids = [101] + [rng.randint(104, vocab - 1) for _ in range(n - 2)] + [102]
    input_mask = [1] * n
    segment_ids = [0] * n
    while len(input_ids) < seq_len:
        input_ids.append(0)
        input_mask.append(0)
        segment_ids.append(0)
    f = collections.OrderedDict()
    f["input_ids"] = _int(input_ids)
    f["input_mask"] = _int(input_mask)
    f["segment_ids"] = _int(segment_ids)
    f["label_ids"] = _int([rng.randrange(num_labels)])
    f["is_real_example"] = _int([1])
    return f


def serialize(features) -> bytes:
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_records(path, records: list[bytes], gzip: bool = False) -> None:
    import tensorflow as tf

    opts = tf.io.TFRecordOptions(compression_type="GZIP") if gzip else None
    with tf.io.TFRecordWriter(str(path), opts) as w:
        for r in records:
            w.write(r)


def pretrain_records(n: int, seq_len: int = 64, max_pred: int = 10, seed: int = 0, vocab: int = VOCAB) -> list[bytes]:
    rng = random.Random(seed)
    return [serialize(pretrain_features(rng, seq_len, max_pred, vocab)) for _ in range(n)]


def classify_records(n: int, seq_len: int = 32, num_labels: int = 3, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [serialize(classify_features(rng, seq_len, num_labels)) for _ in range(n)]


def write_pretrain_set(folder, names=("wiki_00.tfrecord", "part-r-00001"), per_file: int = 96, seq_len: int = 64,
                       max_pred: int = 10, gzip: bool = False, seed: int = 0) -> list:
    """Pretraining shards under the user's own names (round-robin over the files, as the writer does)."""
    import pathlib

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    records = pretrain_records(per_file * len(names), seq_len, max_pred, seed)
    paths = []
    for k, name in enumerate(names):
        write_records(folder / name, records[k::len(names)], gzip)
        paths.append(folder / name)
    return paths


def with_feature(record: bytes, name: str, feature=None) -> bytes:
    """`record` with feature `name` replaced (or removed when `feature` is None)."""
    import tensorflow as tf

    ex = tf.train.Example.FromString(record)
    if feature is None:
        del ex.features.feature[name]
    else:
        ex.features.feature[name].CopyFrom(feature)
    return ex.SerializeToString()


int_feature, float_feature = _int, _float


def write_vocab(path, size: int) -> None:
    """A vocab.txt of `size` tokens laid out as BERT's: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103."""
    special = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
    with open(path, "w") as f:
        f.write("".join(f"{special.get(i, f't{i}')}\n" for i in range(size)))
