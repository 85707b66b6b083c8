"""Synthetic batches shaped like the real feature spec (tests, benchmarks, multi-worker demos).

Not a data set: a small pool of random batches repeated forever, so a model can memorise it (loss falls) and
no storage or parsing is involved.  Keys, shapes and dtypes are those of a pipeline element
(data/pipeline.py `element_spec`).  Real data comes from the rest of tfbertperf.data.
"""

from __future__ import annotations

from tfbertperf.config.schema import DEFAULT_NUM_LABELS


def synthetic_batches(task: str, batch_size: int, seq_len: int, max_predictions: int, vocab_size: int,
                      seed: int = 0, pool: int = 4, num_labels: int = 2) -> dict:
    """`pool` batches stacked: {feature: np.ndarray (pool, batch_size, …)} with the pipeline's dtypes.

    Rows hold [CLS] A [SEP] B [SEP] with a random real length in [seq_len/2, seq_len] and padding after it;
    pretraining rows mask `max_predictions` sorted positions in the first half, with masked_lm_ids the original
    tokens there.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    n = pool * batch_size
    valid = rng.integers(seq_len // 2, seq_len + 1, n)  # real tokens per example; the rest is padding
    mask = (np.arange(seq_len)[None, :] < valid[:, None]).astype("int32")
    ids = (rng.integers(5, vocab_size, (n, seq_len)) * mask).astype("int32")
    ids[:, 0] = 2  # [CLS]
    ids[np.arange(n), valid - 1] = 3  # [SEP] at the end of the real tokens
    segment = ((np.arange(seq_len)[None, :] >= (valid // 2)[:, None]) * mask).astype("int32")
    f = {"input_ids": ids, "input_mask": mask, "segment_ids": segment}
    if task == "pretrain":
        positions = np.sort(rng.integers(1, seq_len // 2, (n, max_predictions)), axis=1).astype("int32")
        f["masked_lm_positions"] = positions
        f["masked_lm_ids"] = np.take_along_axis(ids, positions, axis=1)
        f["masked_lm_weights"] = np.ones((n, max_predictions), "float32")
        f["next_sentence_labels"] = rng.integers(0, 2, (n, 1)).astype("int32")
    else:
        f["label_ids"] = rng.integers(0, num_labels, (n,)).astype("int32")
    return {k: v.reshape((pool, batch_size) + v.shape[1:]) for k, v in f.items()}


def synthetic_batch(task: str, batch_size: int, seq_len: int, max_predictions: int, vocab_size: int,
                    num_labels: int = 2, seed: int = 0) -> dict:
    """One batch of numpy arrays with the pipeline's keys, shapes and dtypes (model tests and benchmarks)."""
    pool = synthetic_batches(task, batch_size, seq_len, max_predictions, vocab_size, seed, 1, num_labels)
    return {k: v[0] for k, v in pool.items()}


def synthetic_dataset_fn(cfg, vocab_size: int, seed: int = 0, pool: int = 4):
    """dataset_fn(input_context_or_None) -> repeating tf.data.Dataset of global batches for `cfg`."""

    def dataset_fn(_ctx=None):
        import tensorflow as tf

        arrays = synthetic_batches(cfg.model.task, cfg.train.batch_size, cfg.data.seq_len,
                                   cfg.data.max_predictions, vocab_size, seed, pool,
                                   cfg.model.num_labels or DEFAULT_NUM_LABELS)
        return tf.data.Dataset.from_tensor_slices(arrays).repeat()

    return dataset_fn
