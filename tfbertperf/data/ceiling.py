"""The input ceiling: how fast the input pipeline alone delivers batches (no model, no sleep) — the most any device
could get from it.  headroom = ceiling ÷ demand, demand being what the model's compute (the what-if probe's T_c)
or the emulated devices would consume; headroom < 1 means no overlap can hide the input.

The measurement pulls batches of the run's global batch from a fresh pipeline after a warm-up of at least 2
batches and WARMUP_SECONDS (the first batches hold the shard opens, tf.data's thread start-up and autotune's
ramp-up), for at least `seconds` AND at least MIN_BATCHES batches (a 3 s span holds only a handful of large
global batches on slow storage), bounded by MAX_SECONDS_FACTOR × seconds.  The figure is the steady-state
rate: the first SETTLE_FRACTION of the measured batches are dropped (they drain what the buffers — shuffle,
prefetch, read-ahead — filled during the warm-up, and arrive faster than the pipeline can make them), the rest
is cut into WINDOWS consecutive windows, and the ceiling is the median of the windows' rates (a stall caused by
another process in one window does not move it).  `examples_per_sec_span` keeps the plain examples ÷ the whole
measured span.  MB/s: bytes read from storage during the measured span (the backend's counter), or of records
delivered when the backend counts none (record bytes × examples).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

WARMUP_BATCHES = 2  # batches pulled before the clock starts ...
WARMUP_SECONDS = 1.0  # ... and more of them until this long has passed (tf.data's autotuning ramps up: at a global
# batch of 12,000 each batch took ~150 ms, and a warm-up that stopped after 2 "slow" batches read the ceiling
# 22-35 % below what the loop then drew from the same pipeline)
MIN_BATCHES = 30  # measured batches at least (the span goes on past `seconds` until there are this many) ...
MAX_SECONDS_FACTOR = 4.0  # ... but the span stops at this many × `seconds` whatever the count
SETTLE_FRACTION = 0.2  # the first fifth of the measured batches: what the buffers filled during the warm-up
WINDOWS = 5  # the steady part is cut into this many windows; the ceiling is the median of their rates


def _batch_examples(batch) -> int:
    import tensorflow as tf

    first = tf.nest.flatten(batch)[0]
    return int(first.shape[0]) if first.shape.rank else 1


def steady_rate(t0: float, ends: list[float], sizes: list[int]) -> tuple[float, int]:
    """The steady-state examples/s of batches that ended at `ends` (sizes[i] examples each) after a start at t0:
    the first SETTLE_FRACTION of the batches dropped, the median rate of WINDOWS consecutive windows over the rest
    (fewer windows when there are fewer than 2 batches per window; the whole span below 2 batches).  Returns (rate,
    settle batches dropped)."""
    n = len(ends)
    settle = int(n * SETTLE_FRACTION) if n >= 5 else 0
    starts = [t0] + ends[:-1]
    idx = list(range(settle, n))
    windows = max(1, min(WINDOWS, len(idx) // 2))
    rates = []
    for w in range(windows):
        part = idx[w * len(idx) // windows:(w + 1) * len(idx) // windows]
        span = ends[part[-1]] - starts[part[0]]
        if span > 0:
            rates.append(sum(sizes[i] for i in part) / span)
    if not rates:  # every window instant (a clock too coarse): the whole span
        return sum(sizes) / max(ends[-1] - t0, 1e-9), 0
    return statistics.median(rates), settle


def measure_ceiling(dataset: Callable[[], object], seconds: float, *, bytes_read: Callable[[], int] | None = None,
                    record_bytes: float | None = None, clock=time.perf_counter,
                    min_batches: int = MIN_BATCHES) -> dict:
    """Pull batches from `dataset()` (a tf.data.Dataset, repeating) after the warm-up: at least `seconds` and
    `min_batches` batches, at most MAX_SECONDS_FACTOR × `seconds` (module docstring).

    Args:
      dataset: builds a fresh pipeline (the run's dataset_fn with no input context: the run's global batch).
      seconds: the minimum measured span (> 0).
      bytes_read: the storage backend's cumulative bytes-read counter (None or a flat counter: record bytes).
      record_bytes: serialized bytes per example, for MB/s when storage counts nothing.
      min_batches: the minimum number of measured batches.
    Returns:
      {"examples_per_sec" (steady state), "examples_per_sec_span", "mb_per_sec", "seconds" (measured),
       "examples", "batches", "settle_batches", "warmup_seconds", "mb_source": "storage" | "records"}.
    """
    if not seconds > 0:
        raise ValueError(f"ceiling seconds={seconds!r}: must be > 0")
    it = iter(dataset())
    w0 = clock()
    for _ in range(WARMUP_BATCHES):
        next(it)
    while clock() - w0 < WARMUP_SECONDS:
        next(it)
    b0 = bytes_read() if bytes_read else 0
    t0 = clock()
    ends: list[float] = []
    sizes: list[int] = []
    limit = seconds * MAX_SECONDS_FACTOR
    while True:
        sizes.append(_batch_examples(next(it)))
        ends.append(clock())
        elapsed = ends[-1] - t0
        if (elapsed >= seconds and len(ends) >= min_batches) or elapsed >= limit:
            break
    delta = (bytes_read() - b0) if bytes_read else 0
    del it
    source = "storage" if delta > 0 else "records"
    examples = sum(sizes)
    nbytes = delta if delta > 0 else examples * float(record_bytes or 0.0)
    rate, settle = steady_rate(t0, ends, sizes)
    return {"examples_per_sec": round(rate, 3), "examples_per_sec_span": round(examples / elapsed, 3),
            "mb_per_sec": round(nbytes / 1e6 / elapsed, 3), "seconds": round(elapsed, 3), "examples": examples,
            "batches": len(ends), "settle_batches": settle, "warmup_seconds": round(t0 - w0, 3),
            "mb_source": source}


def headroom(ceiling_examples_per_sec: float, demand_examples_per_sec: float | None) -> float | None:
    """ceiling ÷ demand (None when there is no demand figure)."""
    if not demand_examples_per_sec or demand_examples_per_sec <= 0:
        return None
    return round(ceiling_examples_per_sec / demand_examples_per_sec, 4)
