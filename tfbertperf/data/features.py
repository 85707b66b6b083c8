"""TFRecord feature specs (the on-disk contract); records are written by data/prep/encode.py.

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


def feature_shapes(task: str, seq_len: int, max_predictions: int) -> dict:
    """{name: (dtype name, shape)} of the pre-tokenized records of `task` (pretrain | classify); no TensorFlow."""
    shapes = {"input_ids": ("int64", [seq_len]), "input_mask": ("int64", [seq_len]), "segment_ids": ("int64", [seq_len])}
    if task == "pretrain":
        shapes.update(masked_lm_positions=("int64", [max_predictions]), masked_lm_ids=("int64", [max_predictions]),
                      masked_lm_weights=("float32", [max_predictions]), next_sentence_labels=("int64", [1]))
    elif task == "classify":
        shapes["label_ids"] = ("int64", [])
    else:
        raise ValueError(f"unknown task {task!r}")
    return shapes


def feature_spec(task: str, seq_len: int, max_predictions: int) -> dict:
    """`tf.io.parse_example` spec of the pre-tokenized records of `task` (pretrain | classify)."""
    import tensorflow as tf

    return {k: tf.io.FixedLenFeature(shape, getattr(tf, dtype))
            for k, (dtype, shape) in feature_shapes(task, seq_len, max_predictions).items()}


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
    return {k: [dtype, list(shape)] for k, (dtype, shape) in feature_shapes(task, seq_len, max_predictions).items()}
