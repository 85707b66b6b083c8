"""The input ceiling (data/ceiling.py): a steady-state rate over enough batches, bounded in time."""

import time

import pytest

from tfbertperf.data.ceiling import MAX_SECONDS_FACTOR, MIN_BATCHES, measure_ceiling, steady_rate


def test_steady_rate_leaves_out_the_buffered_burst_and_one_stall():
    # 40 batches of 32: the first 8 come at once (what the buffers filled during the warm-up), then one every
    # 10 ms (3,200 examples/s) with a 300 ms stall in the middle (another process took the cores).
    ends, t = [], 0.0
    for i in range(40):
        t += 0.0 if i < 8 else (0.31 if i == 24 else 0.01)
        ends.append(t)
    rate, settle = steady_rate(0.0, ends, [32] * 40)
    assert settle == 8 and rate == pytest.approx(3200.0, rel=0.02)
    assert 40 * 32 / ends[-1] < 2500  # the plain span rate, which the stall pulls down by a fifth
    assert steady_rate(0.0, [0.1, 0.2], [32, 32]) == (pytest.approx(320.0), 0)  # too few batches: the span


def _paced(seconds_per_batch: float, batch: int = 16):
    import tensorflow as tf

    def slow(x):
        time.sleep(seconds_per_batch)
        return x

    def make():
        ds = tf.data.Dataset.from_tensors(tf.zeros([batch, 4], tf.int32)).repeat()
        return ds.map(lambda x: tf.py_function(slow, [x], tf.int32)).map(lambda x: tf.ensure_shape(x, [batch, 4]))

    return make


def test_a_real_pipeline_is_measured_over_at_least_min_batches_at_its_pace():
    # 10 ms a batch of 16 (≤ 1,600 examples/s; a loaded machine's sleeps end late, never early); asked for 0.1 s,
    # which holds ~10 batches: the span goes on to MIN_BATCHES.
    c = measure_ceiling(_paced(0.01), 0.1, record_bytes=100)
    assert c["batches"] >= MIN_BATCHES and c["seconds"] >= 0.1 and c["examples"] == 16 * c["batches"]
    assert 500 < c["examples_per_sec"] <= 1600 * 1.05 and c["mb_source"] == "records"
    assert c["mb_per_sec"] == pytest.approx(c["examples"] * 100 / 1e6 / c["seconds"], rel=1e-2)


def test_a_slow_pipeline_stops_at_the_time_bound():
    t0 = time.perf_counter()
    c = measure_ceiling(_paced(0.1), 0.2)  # 30 batches would take 3 s; the bound is 4 × 0.2 s
    assert c["seconds"] >= 0.2 * MAX_SECONDS_FACTOR and c["batches"] < MIN_BATCHES
    assert time.perf_counter() - t0 < 0.2 * MAX_SECONDS_FACTOR + 2.5  # + the warm-up and one batch's slack
    with pytest.raises(ValueError):
        measure_ceiling(_paced(0.01), 0)
