"""What a user's tf.data maps already run (issue 29: the advice asks for what the pipeline lacks, never for what it
does): the capture's map iterators, tuned by tf.data or not, per example or on whole batches (Trace.tfdata_maps),
and the "preprocessing dominates" advice built from them (prefetch_stats.map_remedy).  It said "map
num_parallel_calls → autotune, vectorize (map after batch)" to `batch(32).map(f, num_parallel_calls=AUTOTUNE)`."""

from __future__ import annotations

import numpy as np
import pytest

from tfbertperf.profile.prefetch_stats import map_remedy

MAB = "Iterator::Root::Prefetch::MapAndBatch"
PMAP = "Iterator::Root::Prefetch::ParallelMapV2"


@pytest.mark.parametrize("maps, says, never", [
    (None, ["map num_parallel_calls → autotune", "vectorize (map after batch)", "or preprocess offline"],
     ["already"]),  # our own runs and captures without tf.data: the words as before
    ([{"iterator": MAB, "autotuned": False, "after_batch": False}], ["num_parallel_calls → autotune", "vectorize"],
     ["already"]),
    ([{"iterator": MAB, "autotuned": True, "after_batch": False}],
     ["already run in parallel, tuned by tf.data (MapAndBatch: autotune;", "vectorize (map after batch)",
      "tf.data service"], ["num_parallel_calls → autotune"]),
    ([{"iterator": PMAP, "autotuned": True, "after_batch": True}],
     ["ParallelMapV2: autotune, on whole batches", "cache after parse"], ["num_parallel_calls", "vectorize"]),
    # one map tuned, another not: the knob stays
    ([{"iterator": PMAP, "autotuned": True, "after_batch": True},
      {"iterator": "Iterator::Root::Prefetch::Map", "autotuned": False, "after_batch": False}],
     ["num_parallel_calls → autotune", "vectorize"], ["already"]),
])
def test_the_map_advice_leaves_out_what_the_maps_already_do(maps, says, never):
    words = map_remedy(maps)
    assert all(s in words for s in says) and not any(n in words for n in never), words


@pytest.mark.slow  # three small real fits, each profiled and analyzed (~15 s)
def test_a_fits_maps_are_read_from_its_capture_and_the_advice_follows(tmp_path):
    import keras
    import tensorflow as tf

    from tfbertperf.analyze import analyze
    from tfbertperf.keras import ProfileCallback

    x = np.random.default_rng(0).standard_normal((2048, 32)).astype("float32")
    y = np.arange(2048) % 2

    def heavy(a, b):
        for _ in range(60):
            a = tf.tanh(tf.linalg.matvec(tf.eye(32), a))
        return a, b

    def looked_up(a, b):  # a py_function: stateful, so tf.data does not parallelize it
        return tf.ensure_shape(tf.py_function(lambda v: v * 2.0, [a], tf.float32), a.shape), b

    base = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
    pipelines = {"per_example": base.map(heavy).batch(32).prefetch(2),
                 "batched": base.batch(32).map(heavy, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2),
                 "py_function": base.map(looked_up).batch(32).prefetch(2)}
    read = {}
    for name, ds in pipelines.items():
        inp = keras.Input((32,))
        model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Dense(32, activation="relu")(inp)))
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(ds, steps_per_epoch=40, epochs=1, verbose=0,
                  callbacks=[ProfileCallback(str(tmp_path / name), profile_steps="20:30")])
        read[name] = analyze(str(tmp_path / name))["attribution"]["tfdata_maps"]
    # tf.data's map_parallelization made the plain map(f) parallel and tuned; map_and_batch_fusion fused it
    assert read["per_example"] == [{"iterator": MAB, "autotuned": True, "after_batch": False}], read
    assert read["batched"] == [{"iterator": PMAP, "autotuned": True, "after_batch": True}], read
    assert [m["autotuned"] for m in read["py_function"]] == [False], read
    assert "num_parallel_calls" not in map_remedy(read["batched"]) and "vectorize" not in map_remedy(read["batched"])
    assert "num_parallel_calls → autotune" in map_remedy(read["py_function"])
