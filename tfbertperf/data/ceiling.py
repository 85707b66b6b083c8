"""The input ceiling: how fast the input pipeline alone delivers batches (no model, no sleep) — the most any device
could get from it.  headroom = ceiling ÷ demand, demand being what the model's compute (the what-if probe's T_c)
or the emulated devices would consume; headroom < 1 means no overlap can hide the input.

The measurement pulls batches from a fresh pipeline for a bounded time after a warm-up (the first batches hold
the shard opens, tf.data's thread start-up and autotune's first guesses): examples/s, and MB/s of bytes read
from storage during the measured span (the backend's counter) — or of records delivered when the backend counts
none (record bytes × examples).
"""

from __future__ import annotations

import time
from typing import Callable

WARMUP_BATCHES = 2  # batches pulled before the clock starts
WARMUP_SECONDS_MAX = 0.5  # ... and more of them, while they come fast, up to this long


def _batch_examples(batch) -> int:
    import tensorflow as tf

    first = tf.nest.flatten(batch)[0]
    return int(first.shape[0]) if first.shape.rank else 1


def measure_ceiling(dataset: Callable[[], object], seconds: float, *, bytes_read: Callable[[], int] | None = None,
                    record_bytes: float | None = None, clock=time.perf_counter) -> dict:
    """Pull batches from `dataset()` (a tf.data.Dataset, repeating) for `seconds` after the warm-up.

    Args:
      dataset: builds a fresh pipeline (the run's dataset_fn with no input context).
      seconds: the measured span (> 0); the call returns after the first batch that ends past it.
      bytes_read: the storage backend's cumulative bytes-read counter (None or a flat counter: record bytes).
      record_bytes: serialized bytes per example, for MB/s when storage counts nothing.
    Returns:
      {"examples_per_sec", "mb_per_sec", "seconds" (measured), "examples", "batches", "warmup_seconds",
       "mb_source": "storage" | "records"}.
    """
    if not seconds > 0:
        raise ValueError(f"ceiling seconds={seconds!r}: must be > 0")
    it = iter(dataset())
    w0 = clock()
    for _ in range(WARMUP_BATCHES):
        next(it)
    while clock() - w0 < WARMUP_SECONDS_MAX:
        t = clock()
        next(it)
        if clock() - t > WARMUP_SECONDS_MAX / 4:  # a slow pipeline: its warm-up is done after the first batches
            break
    b0 = bytes_read() if bytes_read else 0
    t0 = clock()
    examples = batches = 0
    while True:
        examples += _batch_examples(next(it))
        batches += 1
        elapsed = clock() - t0
        if elapsed >= seconds:
            break
    delta = (bytes_read() - b0) if bytes_read else 0
    source = "storage" if delta > 0 else "records"
    nbytes = delta if delta > 0 else examples * float(record_bytes or 0.0)
    del it
    return {"examples_per_sec": round(examples / elapsed, 3), "mb_per_sec": round(nbytes / 1e6 / elapsed, 3),
            "seconds": round(elapsed, 3), "examples": examples, "batches": batches,
            "warmup_seconds": round(t0 - w0, 3), "mb_source": source}


def headroom(ceiling_examples_per_sec: float, demand_examples_per_sec: float | None) -> float | None:
    """ceiling ÷ demand (None when there is no demand figure)."""
    if not demand_examples_per_sec or demand_examples_per_sec <= 0:
        return None
    return round(ceiling_examples_per_sec / demand_examples_per_sec, 4)
