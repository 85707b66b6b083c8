"""Captures whose step markers xprof leaves out of its step table, read from the markers (profile/marker_steps.py):
- a user's `model.fit` compiled with `steps_per_execution=k` (k batches per train_function call, in a TensorFlow
  while loop): xprof groups the loop's iterations, and analyze used to stop ("the profile has no step markers xprof
  recognises", exit 2) on a capture ProfileCallback itself had marked; the callback now counts calls, not
  batches, for its window and its probe;
- a capture by Keras' own `TensorBoard(profile_batch=…)`, whose markers are not root events (no `_r=1`)."""

from __future__ import annotations

import glob
import json
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfbertperf.analyze import analyze
from tfbertperf.keras import ProfileCallback
from tfbertperf.profile import marker_steps, xprof_tools
from tfbertperf.profile.steptable import step_rows


def _model(k: int):
    keras.utils.set_random_seed(3)
    m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(2)])
    m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=k)
    return m


def _fit(logdir, k: int, batches: int, window: str, wait_ms: float = 0.0, **cb):
    """A small MLP fit behind a map that (wait_ms > 0) sleeps per batch: input-bound without using the CPU."""
    x = np.random.RandomState(0).normal(size=(512, 32)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16, drop_remainder=True)
    if wait_ms:
        def wait(a):
            time.sleep(wait_ms / 1e3)
            return a
        ds = ds.map(lambda a, b: (tf.ensure_shape(tf.py_function(wait, [a], tf.float32), (16, 32)), b))
    callback = ProfileCallback(str(logdir), profile_steps=window, **cb)
    _model(k).fit(ds, epochs=1, steps_per_epoch=batches, callbacks=[callback], verbose=0)
    return callback


def test_the_window_counts_batches_and_the_markers_calls():
    cb = ProfileCallback("unused", profile_steps="20:40")
    cb.set_model(_model(4))
    cb.on_train_begin()
    assert cb.traced == (4, 11)  # calls 5–9 hold batches 20–39; one call more on each side (traced_steps)
    cb = ProfileCallback("unused", profile_steps="20:40")
    cb.set_model(_model(1))
    cb.on_train_begin()
    assert cb.traced == (19, 41)  # unchanged with one batch a call


@pytest.mark.slow  # a real fit with steps_per_execution=4, profiled and analyzed (~10 s)
def test_a_fit_with_steps_per_execution_is_read_from_its_markers(tmp_path):
    logdir = tmp_path / "logs"
    cb = _fit(logdir, k=4, batches=64, window="16:40", wait_ms=8.0, probe=True)
    doc = json.loads(cb.step_file.read_text())
    assert len(doc["step_time_ms"]) == 16 and doc["profiled_steps"] == [3, 11]  # calls, not batches
    assert doc["batches_per_step"] == 4  # said in the step file, and on analyze's step-file line
    assert all(pos <= 16 for pos, _ in doc["what_if"]["blocks"]) and doc["what_if"]["blocks"]
    xplanes = glob.glob(str(logdir / "plugins" / "profile" / "*" / "*.xplane.pb"))
    assert not step_rows(xprof_tools.convert(xplanes, "input_pipeline_analyzer"))  # xprof's table: empty
    d = analyze(str(logdir))  # before: NoStepsError
    att = d["attribution"]
    assert att["step_table"]["from"] == "markers" and att["step_table"]["batches_per_step"] == 4
    assert att["steps_profiled"] == 6  # calls 4–9 (the capture's first and last left out, as xprof does)
    # 4 batches × 8 ms of sleep a call, against a tiny MLP's compute: the wait is most of each call
    assert att["input_bound_fraction"] > 0.3 and d["verdict"]["bottleneck"] == "input"
    assert att["input_cost_fraction"] is not None  # the probe's what-if, in calls as the markers are


@pytest.mark.slow  # a real fit with one batch a call, profiled (~8 s)
def test_steps_read_from_the_markers_agree_with_xprofs_own_table_where_it_has_one(tmp_path):
    logdir = tmp_path / "logs"
    _fit(logdir, k=1, batches=40, window="10:30", wait_ms=3.0)
    xplanes = glob.glob(str(logdir / "plugins" / "profile" / "*" / "*.xplane.pb"))
    theirs = {int(r["step"].split()[-1]): r for r in step_rows(xprof_tools.convert(xplanes, "input_pipeline_analyzer"))}
    ours, per_step = marker_steps.rows(xprof_tools.convert(xplanes, "trace_viewer"))
    ours = {int(r["step"]): r for r in ours}
    assert len(theirs) >= 15 and set(theirs) <= set(ours) and per_step == 1
    for n, r in theirs.items():
        assert ours[n]["step_time_ms"] == pytest.approx(r["step_time_ms"], abs=0.01)
        assert ours[n]["input"] == pytest.approx(r["input"], abs=0.05)  # the same blocked get-next time
    # host compute: the union of the TF work in the step; xprof's own split puts a few % more in "other"
    step = sum(r["step_time_ms"] for r in theirs.values())
    gap = sum(ours[n]["host_compute"] - r["host_compute"] for n, r in theirs.items())
    assert abs(gap) < 0.1 * step, (gap, step)


@pytest.mark.slow  # a real fit with Keras' own TensorBoard profiler across an epoch's end (~8 s)
def test_a_capture_by_keras_own_tensorboard_callback_is_read_from_its_markers(tmp_path):
    x = np.random.RandomState(0).normal(size=(512, 32)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")

    def wait(a):
        time.sleep(0.008)
        return a
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16, drop_remainder=True)
    ds = ds.map(lambda a, b: (tf.ensure_shape(tf.py_function(wait, [a], tf.float32), (16, 32)), b))
    # batches 10–29 of two 20-batch epochs: Keras numbers its markers 9…19, 0…9 (the batch within its epoch)
    board = keras.callbacks.TensorBoard(str(tmp_path / "tb"), profile_batch=(10, 30))
    _model(1).fit(ds, epochs=2, steps_per_epoch=20, callbacks=[board], verbose=0)
    d = analyze(str(tmp_path / "tb"))  # before: NoStepsError (exit 2 on the command line)
    att = d["attribution"]
    assert att["step_table"]["from"] == "markers" and att["step_table"]["notes"] == [marker_steps.NOT_ROOT]
    assert att["steps_profiled"] == 19  # 21 markers, the first and last left out; none lost to a repeated number
    assert att["input_bound_fraction"] > 0.3 and d["verdict"]["bottleneck"] == "input"  # 8 ms waits (~50–60 % quiet or busy)
