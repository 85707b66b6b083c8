"""TFRecord feature specs (the on-disk contract) and tf.train.Example serialization.

Pre-tokenized records follow google-research/bert exactly:
  pretrain: input_ids, input_mask, segment_ids [seq_len] int64; masked_lm_positions, masked_lm_ids
            [max_predictions] int64; masked_lm_weights [max_predictions] float32; next_sentence_labels [1] int64
  classify: input_ids, input_mask, segment_ids [seq_len] int64; label_ids [] int64 (run_classifier.py's spec)

Raw-text records (for `pipeline.tokenize=inline`) hold what is needed to rebuild the same ids inside tf.data:
  text_a, text_b [] string — the segment texts (whole sentences joined by one space);
  a_range, b_range [2] int64 — [start, stop) token slice of each segment after truncation;
  pretrain adds masked_lm_positions, masked_lm_ids, masked_lm_weights, next_sentence_labels (as above) and
  masked_lm_replace [max_predictions] int64 — the id written into input_ids at each masked position
  ([MASK], a random id, or the original: the 80/10/10 choice made at preparation time);
  classify adds label_ids [] int64.
"""

from __future__ import annotations

PRETRAIN_KEYS = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)
CLASSIFY_KEYS = ("input_ids", "input_mask", "segment_ids", "label_ids")


def feature_spec(task: str, seq_len: int, max_predictions: int) -> dict:
    """`tf.io.parse_example` spec of the pre-tokenized records of `task` (pretrain | classify)."""
    import tensorflow as tf

    spec = {
        "input_ids": tf.io.FixedLenFeature([seq_len], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_len], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_len], tf.int64),
    }
    if task == "pretrain":
        spec.update(
            masked_lm_positions=tf.io.FixedLenFeature([max_predictions], tf.int64),
            masked_lm_ids=tf.io.FixedLenFeature([max_predictions], tf.int64),
            masked_lm_weights=tf.io.FixedLenFeature([max_predictions], tf.float32),
            next_sentence_labels=tf.io.FixedLenFeature([1], tf.int64),
        )
    elif task == "classify":
        spec["label_ids"] = tf.io.FixedLenFeature([], tf.int64)
    else:
        raise ValueError(f"unknown task {task!r}")
    return spec


def text_feature_spec(task: str, max_predictions: int) -> dict:
    """`tf.io.parse_example` spec of the raw-text records (see module docstring)."""
    import tensorflow as tf

    spec = {
        "text_a": tf.io.FixedLenFeature([], tf.string),
        "text_b": tf.io.FixedLenFeature([], tf.string),
        "a_range": tf.io.FixedLenFeature([2], tf.int64),
        "b_range": tf.io.FixedLenFeature([2], tf.int64),
    }
    if task == "pretrain":
        spec.update(
            masked_lm_positions=tf.io.FixedLenFeature([max_predictions], tf.int64),
            masked_lm_ids=tf.io.FixedLenFeature([max_predictions], tf.int64),
            masked_lm_weights=tf.io.FixedLenFeature([max_predictions], tf.float32),
            masked_lm_replace=tf.io.FixedLenFeature([max_predictions], tf.int64),
            next_sentence_labels=tf.io.FixedLenFeature([1], tf.int64),
        )
    else:
        spec["label_ids"] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def feature_spec_summary(task: str, seq_len: int, max_predictions: int) -> dict:
    """{name: [dtype, shape]} of the pre-tokenized records, for the manifest."""
    return {
        k: [v.dtype.name, list(v.shape)] for k, v in feature_spec(task, seq_len, max_predictions).items()
    }


def serialize(values: dict) -> bytes:
    """{name: list of int | list of float | bytes} → serialized tf.train.Example, byte-identical for equal input
    (deterministic map ordering)."""
    from tensorflow.core.example import example_pb2, feature_pb2

    feats = {}
    for k, v in values.items():
        if isinstance(v, bytes):
            feats[k] = feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=[v]))
        elif v and isinstance(v[0], float):
            feats[k] = feature_pb2.Feature(float_list=feature_pb2.FloatList(value=v))
        else:
            feats[k] = feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=v))
    ex = example_pb2.Example(features=feature_pb2.Features(feature=feats))
    return ex.SerializeToString(deterministic=True)
