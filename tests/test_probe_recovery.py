"""The probe's blocks against a run-ahead pipeline (train/recovery.py, issue 29): the real steps fed from the buffers a
block let the pipeline fill stay out of T until the steps are back to their own pace, however long that takes; the
next block waits for it; and a block's untimed steps go on while the pipeline is still refilling on their cores."""

from __future__ import annotations

import json
import random
import statistics
import time

import numpy as np
import pytest

from tfbertperf.profile import stepfile
from tfbertperf.profile.probe_record import excluded_steps
from tfbertperf.train import recovery
from tfbertperf.train.probe import SETTLE_LONGEST, time_block


def _steady(n, level=6.0, seed=0):
    rng = random.Random(seed)
    return [level * rng.uniform(0.85, 1.25) for _ in range(n)]  # right-skewed, as real step times are


def test_the_steps_a_drained_pipeline_fed_stay_out_of_T_until_back_to_pace():
    # 20 steps at its own pace, a block of 5 before step 20, then 14 steps fed from the buffers at 2.5 ms
    steps = _steady(20) + [2.5] * 14 + _steady(20, seed=1)
    out = excluded_steps([(20, 5)], steps, 3, None, grabbed_at=4)
    assert out == [4, *range(20, 34)]  # the block's 5 steps were all the former rule left out
    doc = stepfile.document(steps, warmup_steps=3, excluded_steps=out,
                            what_if={"compute_only_step_ms": [2.4] * 5, "blocks": [[20, 5]]})
    s = stepfile.summarize(doc, "f")
    assert s.unprofiled_step_ms == pytest.approx(np.mean([x for i, x in enumerate(steps) if i >= 3 and i not in out]),
                                                abs=1e-3)
    assert s.unprofiled_step_ms > 6.0 and s.input_cost_fraction > 0.55


def test_a_reference_half_of_whose_steps_a_bank_fed_still_reads_the_pipelines_pace():
    # the 10 steps after warm-up fed from what the pipeline banked while the probe grabbed its batch (3 ms), then 7 at
    # its own pace (~6 ms), a block before step 20 and 12 more steps from a bank: the median of the 17 clean steps
    # is the bank's 3 ms, and every drained step would be "back" (a Keras fit on TensorFlow read 16-21 pp low so)
    steps = [9.0] * 3 + [3.0] * 10 + _steady(7, seed=4) + [3.0] * 12 + _steady(20, seed=5)
    ref = recovery._reference([steps[i] for i in range(3, 20)])
    assert ref > 5.0 and statistics.median(steps[3:20]) == 3.0
    out, end = recovery.observed(steps, [(20, 5)], 3, None, len(steps))
    assert out == list(range(20, 31)) and end == 31  # back with the run 3.0, 6.6, 6.9 ms (its mean within 20 %)


def test_a_pipeline_that_keeps_up_loses_only_the_blocks_own_steps():
    steps = _steady(80, level=3.0, seed=2)
    out, end = recovery.observed(steps, [(20, 5), (45, 5)], 3, None, len(steps))
    assert out == [*range(20, 25), *range(45, 50)] and end == 50


def test_a_recovery_ends_where_the_next_block_or_the_capture_begins():
    steps = _steady(20) + [2.5] * 30
    out, _ = recovery.observed(steps, [(20, 5), (32, 5)], 0, None, len(steps))
    assert out == list(range(20, 50))  # the first one's recovery runs into the second block, whose runs to the end
    out, _ = recovery.observed(steps, [(20, 5)], 0, (30, 40), len(steps))
    assert set(range(20, 30)) <= set(out) and not set(range(30, 40)) & set(out)  # the capture's steps are its own
    # … and the steps right after the capture, fed while it was written, are a recovery as a block's are
    assert set(range(40, 50)) <= set(out)


def test_a_slow_stretch_before_the_capture_does_not_hold_the_rest_of_the_fit_out_as_a_recovery():
    # a Keras fit (the tf.data guide's map, 140 steps) ran ~3.7 ms steps, 13 at 5.5-10.5 ms (a neighbour's burst) just
    # before the capture, and ~4.8 ms after it: against the slower half of the 20 steps before (8 ms) every later
    # step was "still fed from a bank", the last block went after the loop, paired with the slow stretch, and the
    # what-if read 37 % against a truth of 12 % (issue 29).  The reference is no higher than that of the 80 before.
    steps = _steady(45, level=3.7, seed=6) + [8.0] * 13 + _steady(10, level=3.7, seed=7) + [0.0] * 14 \
        + _steady(40, level=4.8, seed=8)
    out, end = recovery.observed(steps, [(14, 5), (30, 5)], 5, (68, 82), len(steps))
    assert out == [*range(14, 19), *range(30, 35)] and end == 82
    assert recovery.ready(steps[:90], [(14, 5), (30, 5)], 5, (68, 82), 140)
    # … and a drain after the capture is still one: steps at the bank's pace stay out until back
    steps[82:94] = [1.8] * 12
    out, end = recovery.observed(steps, [(14, 5), (30, 5)], 5, (68, 82), len(steps))
    assert set(range(82, 93)) <= set(out) and end == 93  # back with the run 1.8, 4.x, 4.x ms (within 20 %)


def test_steps_that_keep_a_faster_pace_than_a_burst_before_the_first_block_are_the_fits_own_after_40():
    # the burst in the steps between warm-up and the first block: no steps before it to judge it by.  A drain ends
    # (a bank filled in one block's time, the longest seen 25 steps); steps 40 in a row "not back" keep a pace of
    # their own, and are the fit's, not a drain's (6 fits of 6: a block after the loop, 8-46 pp high)
    steps = [9.0] * 5 + [8.0] * 9 + [3.0] * 5 + _steady(100, level=3.7, seed=9)
    out, end = recovery.observed(steps, [(14, 5)], 5, None, len(steps))
    assert out == list(range(14, 19)) and end == 19
    assert not recovery.ready(steps[:50], [(14, 5)], 5, None, 200)  # judged after 40 steps, not before
    assert recovery.ready(steps[:19 + recovery.LEVEL_STEPS + recovery.BRACKET_MIN], [(14, 5)], 5, None, 200)
    # … while a drain of 30 steps is still one
    steps = _steady(20) + [2.5] * 35 + _steady(20, seed=1)
    out, end = recovery.observed(steps, [(20, 5)], 3, None, len(steps))
    assert out == list(range(20, 55)) and end == 55


def test_the_next_block_waits_for_the_recovery_and_five_steps_at_the_pipelines_own_pace():
    steps = _steady(20) + [2.5] * 12 + _steady(30, seed=3)
    seen = [recovery.ready(steps[:k], [(20, 5)], 3, None, 100) for k in range(20, 45)]
    first = seen.index(True) + 20
    assert not any(seen[:first - 20]) and all(seen[first - 20:])
    assert first == 32 + recovery.BRACKET_MIN  # back at step 32, and 5 clean steps since
    assert recovery.ready(_steady(10), [], 3, None, 100) and not recovery.ready(_steady(6), [], 3, None, 100)


def test_a_postponed_block_skips_the_capture_and_its_margin_and_runs_after_the_loop_where_no_step_is_left():
    at = {20: 5, 60: 5}
    assert recovery.postpone(at, 20, 100, None) == 21 and at == {21: 5, 60: 5}
    at = {21: 5}
    assert recovery.postpone(at, 21, 100, (30, 45)) == 46 and at == {46: 5}  # 22 is within 2 blocks of the capture
    at = {99: 5, 100: 3}
    assert recovery.postpone(at, 99, 100, None) == 100 and at == {100: 8}
    at = {59: 5, 60: 5}
    assert recovery.postpone(at, 59, 100, None) == 100 and at == {60: 5, 100: 5}


def _sleeper(times_ms):
    it = iter(times_ms)

    def step():
        time.sleep(next(it, times_ms[-1]) / 1e3)
        return None
    return step


def test_a_block_settles_while_its_steps_run_slower_than_the_earlier_blocks():
    slow_then_fast = [12.0] * 8 + [1.0] * 100  # the pipeline refills on the step's cores (96 ms), then stops
    timed = time_block(_sleeper(slow_then_fast), lambda out: None, 5, 1, settle_ms=20.0, settle_max_steps=60,
                       floor_ms=1.0)
    assert max(timed) < 8.0, timed  # every timed step after the refill
    before = time_block(_sleeper(slow_then_fast), lambda out: None, 5, 1, settle_ms=20.0, settle_max_steps=60)
    assert min(before) > 8.0, before  # without the earlier blocks' pace: the refill's steps timed
    t0 = time.perf_counter()  # a step that never gets back to that pace: at most SETTLE_LONGEST × the settle
    timed = time_block(_sleeper([12.0]), lambda out: None, 3, 1, settle_ms=20.0, settle_max_steps=60, floor_ms=1.0)
    assert len(timed) == 3 and (time.perf_counter() - t0) * 1e3 < SETTLE_LONGEST * 20.0 + 12.0 * 3 + 500
    assert recovery.settled_floor([2.0, 2.2, 2.1, 1.3, 1.4, 1.2], [3, 3]) == pytest.approx(1.3)
    assert recovery.settled_floor([], []) is None


@pytest.mark.slow
def test_a_keras_fit_behind_a_prefetching_loader_is_timed_at_the_loaders_pace(tmp_path):
    """A fit whose map waits 12 ms a batch (no CPU) into a prefetch of 16, against a ~1 ms step: each block lets the
    loader fill ~10 batches, and the 10-15 steps after it ran at the step's pace (12 ms, not 6: under a parallel
    suite the step itself took 2-4 ms, and the drained steps' contrast with a 6 ms loader was too small to hold).  With 5 of them left out T read
    about half the loader's pace; now the steps after each block stay out until back."""
    import keras
    import tensorflow as tf

    from tfbertperf.keras import ProfileCallback

    keras.utils.set_random_seed(3)
    x = np.random.RandomState(0).normal(size=(512, 16)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")
    wait = lambda a, b: (tf.py_function(lambda t: (time.sleep(0.012), t)[1], [a], tf.float32), b)  # noqa: E731
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True).map(wait)
          .map(lambda a, b: (tf.ensure_shape(a, (8, 16)), b)).prefetch(16).repeat())
    # a fixed-size buffer only: with tf.data's injected (autotuned) prefetch after the repeat the blocks would run
    # after the last step instead (profile/autotuned_prefetch.py), and no recovery would be there to test
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    ds = ds.with_options(options)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # warm-up past the first drain: while the first step compiles the loader fills all 16 batches, and the ~20
    # steps after it run from them (under load, at 3 steps of warm-up, every step before the first block did,
    # and they were the pace the blocks' recoveries were judged against: a known limit, docs/own-training.md)
    cb = ProfileCallback(str(tmp_path / "logs"), profile_steps=None, probe=True, warmup_steps=30)
    model.fit(ds, epochs=1, steps_per_epoch=200, callbacks=[cb], verbose=0)
    doc = json.loads(cb.step_file.read_text())
    steps, out = doc["step_time_ms"], set(doc["excluded_steps"])
    blocks = [p for p, _ in doc["what_if"]["blocks"] if p < len(steps)]
    assert blocks
    # (how long the steps after a block ran from the buffers depends on the machine's load: under a parallel
    # suite the drains were 5-7 steps, so the test holds T to the loader's pace, not a drain's length)
    s = stepfile.summarize(doc, "f")
    assert s.unprofiled_step_ms > 0.75 * 12.0, s  # the loader's pace (a busy machine only makes it slower)
    assert s.input_cost_fraction > 0.6, s

