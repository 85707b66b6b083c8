"""Synthetic batches shaped like the real feature spec (tests, benchmarks, multi-worker demos).

Not a data set: a small pool of random batches repeated forever, so a model can memorise it (loss falls) and
no storage or parsing is involved. Real data comes from tfbertperf.data.
"""

from __future__ import annotations


def synthetic_batches(task: str, batch_size: int, seq_len: int, max_predictions: int, vocab_size: int,
                      seed: int = 0, pool: int = 4, num_labels: int = 2) -> dict:
    """`pool` batches stacked: {feature: np.ndarray (pool, batch_size, …)} with the google-research dtypes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = pool * batch_size
    valid = rng.integers(seq_len // 2, seq_len + 1, n)  # real tokens per example; the rest is padding
    mask = (np.arange(seq_len)[None, :] < valid[:, None]).astype("int64")
    ids = rng.integers(5, vocab_size, (n, seq_len)) * mask
    segment = ((np.arange(seq_len)[None, :] >= (valid // 2)[:, None]) * mask).astype("int64")
    f = {"input_ids": ids, "input_mask": mask, "segment_ids": segment}
    if task == "pretrain":
        positions = np.sort(rng.integers(1, seq_len // 2, (n, max_predictions)), axis=1)
        f["masked_lm_positions"] = positions
        f["masked_lm_ids"] = np.take_along_axis(ids, positions, axis=1)
        f["masked_lm_weights"] = np.ones((n, max_predictions), "float32")
        f["next_sentence_labels"] = rng.integers(0, 2, (n, 1))
    else:
        f["label_ids"] = rng.integers(0, num_labels, (n,))
    return {k: v.reshape((pool, batch_size) + v.shape[1:]) for k, v in f.items()}


def synthetic_dataset_fn(cfg, vocab_size: int, seed: int = 0, pool: int = 4):
    """dataset_fn(input_context_or_None) -> repeating tf.data.Dataset of global batches for `cfg`."""

    def dataset_fn(_ctx=None):
        import tensorflow as tf

        arrays = synthetic_batches(cfg.model.task, cfg.train.batch_size, cfg.data.seq_len,
                                   cfg.data.max_predictions, vocab_size, seed, pool, cfg.model.num_labels)
        return tf.data.Dataset.from_tensor_slices(arrays).repeat()

    return dataset_fn
