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


def _paced(seconds_per_batch: float, batch: int = 16, done: list | None = None):
    """A pipeline whose every batch sleeps `seconds_per_batch` (a loaded machine's sleeps end late, never early);
    `done` gets the perf_counter time each batch was made: the pipeline's own pace, seen from inside it."""
    import tensorflow as tf

    def slow(x):
        time.sleep(seconds_per_batch)
        if done is not None:
            done.append(time.perf_counter())
        return x

    def make():
        ds = tf.data.Dataset.from_tensors(tf.zeros([batch, 4], tf.int32)).repeat()
        return ds.map(lambda x: tf.py_function(slow, [x], tf.int32)).map(lambda x: tf.ensure_shape(x, [batch, 4]))

    return make


def _recording_clock(readings: list):
    def clock():
        readings.append(time.perf_counter())
        return readings[-1]

    return clock


def test_a_real_pipeline_is_measured_over_at_least_min_batches_at_its_pace():
    # 10 ms a batch of 16 (≤ 1,600 examples/s); asked for 0.1 s, which holds ~10 batches: the span goes on to
    # MIN_BATCHES.  The pace is compared with the pipeline's own, measured beside it (the times its batches were
    # made), not with a fixed figure: on a loaded machine every sleep ends late.
    done = []
    c = measure_ceiling(_paced(0.01, done=done), 0.1, record_bytes=100)
    assert c["batches"] >= MIN_BATCHES and c["seconds"] >= 0.1 and c["examples"] == 16 * c["batches"]
    gaps = sorted(b - a for a, b in zip(done[len(done) // 4:], done[len(done) // 4 + 1:]))  # past the warm-up
    assert 0.9 * 16 / gaps[-1] <= c["examples_per_sec"] <= 1.1 * 16 / gaps[0], (c, gaps[0], gaps[-1])
    assert c["examples_per_sec"] <= 1600 * 1.05 and c["mb_source"] == "records"
    assert c["mb_per_sec"] == pytest.approx(c["examples"] * 100 / 1e6 / c["seconds"], rel=1e-2)


def test_a_slow_pipeline_stops_at_the_time_bound():
    # 30 batches would take 3 s; the bound is 4 × 0.2 s.  Its clock readings show the decision itself: the span
    # ends at the first batch past the bound, short of MIN_BATCHES (not a wall-clock limit on the call, which a
    # loaded machine's warm-up could overrun).
    readings = []
    c = measure_ceiling(_paced(0.1), 0.2, clock=_recording_clock(readings))
    limit = 0.2 * MAX_SECONDS_FACTOR
    assert c["seconds"] >= limit and 2 <= c["batches"] < MIN_BATCHES
    t0, *ends = readings[-(c["batches"] + 1):]  # the span's start, then one reading per batch
    assert ends[-2] - t0 < limit <= ends[-1] - t0 and c["seconds"] == pytest.approx(ends[-1] - t0, abs=1e-3)
    with pytest.raises(ValueError):
        measure_ceiling(_paced(0.01), 0)


def test_a_runs_demand_and_read_share_come_from_the_emulation_or_the_probe_and_the_measured_steps():
    """compose/inputceiling.py's choices, checked in the fast tier (runs use them in test_regime.py): the demand is
    the emulated devices' rate, else the global batch over the probe's T_c; the reads' share is the measured
    steps' read_wait_fraction, else read time per step over the mean step."""
    from tfbertperf.compose.inputceiling import demand_examples_per_sec, input_ceiling, read_share
    from tfbertperf.config import load_config
    from tfbertperf.train.emulated_devices import from_config
    from tfbertperf.train.result import TrainResult

    result = TrainResult(steps=4, global_batch_size=32, replicas=1, seq_len=128, loss_trajectory=[], final_loss=0.0,
                         step_times_ms=[100.0] * 4, input_wait_ms=[0.0] * 4, warmup_steps=1, profile_window=None,
                         tensorboard_dir=None, compute_only_step_ms=80.0)
    emulation = from_config(load_config(sets=["emulate.step_ms=20", "emulate.accelerators=2", "train.batch_size=8"]))
    assert demand_examples_per_sec(result, emulation) == pytest.approx(800.0)
    assert demand_examples_per_sec(result, None) == pytest.approx(400.0)  # 32 examples per 80 ms
    assert read_share({"read_wait_fraction": 0.4, "read_ms_per_step": 90.0}, 100.0) == 0.4
    assert read_share({"read_ms_per_step": 30.0}, 120.0) == pytest.approx(0.25)
    assert read_share({}, 100.0) is None and read_share({"read_ms_per_step": 5.0}, None) is None
    assert input_ceiling(load_config(sets=["profile.ceiling_seconds=0"]), None, None, 0.0, print) is None
