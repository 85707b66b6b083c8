"""A capture window across an epoch's end: fit's validation and the epoch-end callbacks kept out of the thread-CPU
record and out of the time analyze spreads a thread's CPU over (profile/outside_steps.py)."""

from __future__ import annotations

import json

import pytest

from tfbertperf.profile import contention, outside_steps


def _piece(seconds, threads, machine=None, exited=0.0):
    return {"schema": "tfbertperf.threadcpu/1", "seconds": seconds, "cores": 2, "clock": "schedstat", "pid": 1,
            "threads": [{"tid": tid, "line_id": lid, "name": "python", "cpu_ms": cpu, "runqueue_ms": rq}
                        for tid, lid, cpu, rq in threads],
            "children": [{"pid": None, "name": "ended inside the window", "cpu_ms": 1.0, "runqueue_ms": 0.0}],
            "exited": {"cpu_ms": exited, "python": []},
            **({"machine": machine} if machine else {})}


def test_merge_sums_each_threads_cpu_over_the_pieces_and_weights_the_machine_by_their_time():
    a = _piece(0.1, [(1, 11, 50.0, 1.0), (2, 12, 10.0, 2.0)],
               {"busy_cores": 1.0, "other_cores": 0.0, "steal_cores": 0.0, "seconds": 0.1}, exited=3.0)
    # the second piece: thread 2 ended between the pieces, thread 3 is the new epoch's pipeline thread
    b = _piece(0.3, [(1, 11, 30.0, 0.0), (3, 13, 20.0, 4.0)],
               {"busy_cores": 2.0, "other_cores": 0.4, "steal_cores": 0.0, "seconds": 0.3})
    m = outside_steps.merge([a, b], outside_s=0.5, spans=1)
    rows = {r["tid"]: r for r in m["threads"]}
    assert rows[1]["cpu_ms"] == 80.0 and rows[1]["runqueue_ms"] == 1.0
    assert rows[2]["cpu_ms"] == 10.0 and rows[3]["cpu_ms"] == 20.0 and rows[3]["line_id"] == 13
    assert m["seconds"] == pytest.approx(0.4) and m["exited"]["cpu_ms"] == 3.0
    assert m["children"] == [{"pid": None, "name": "ended inside the window", "cpu_ms": 2.0, "runqueue_ms": 0.0}]
    assert m["machine"]["busy_cores"] == pytest.approx(1.75) and m["machine"]["other_cores"] == pytest.approx(0.3)
    assert m["outside_steps"] == {"seconds": 0.5, "spans": 1, "edges": []}
    assert outside_steps.merge([a]) is a  # a window with nothing left out is the plain record
    assert "machine" not in outside_steps.merge([a, _piece(0.1, [])], 0.1, 1)  # a piece without it: no figure


def test_the_console_says_the_window_held_a_validation_and_not_its_edge_steps():
    edges = {"outside_steps": {"seconds": 0.01, "spans": 0, "edges": ["first", "last"]}}
    assert outside_steps.reading(edges) == {} and outside_steps.reading(None) == {}
    held = outside_steps.reading({"outside_steps": {"seconds": 0.34, "spans": 1, "edges": ["first"]}})
    [line] = outside_steps.note(held)
    assert line.startswith("the window held fit's validation or an epoch's end (0.34 s between its steps")
    assert outside_steps.note({}) == []


def test_the_last_batch_of_an_epoch_is_known_from_keras_params():
    assert outside_steps.last_of_epoch({"steps": 16}, 15) and not outside_steps.last_of_epoch({"steps": 16}, 14)
    assert outside_steps.last_of_epoch({"steps": 16}, 17)  # steps_per_execution: the call that ends past it
    assert not outside_steps.last_of_epoch({"steps": None}, 15) and not outside_steps.last_of_epoch({}, 0)


def _trace(outside: bool):
    """Step 5 (0–10 ms, 2 ms blocked in get-next) with one pipeline event in its compute phase, then fit's
    validation (15–35 ms) whose pipeline thread — the same thread id — shows 200 events."""
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "tf_data_private_threadpool/7"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": {"name": "tf_Compute/8"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 4, "args": {"name": "tf_Compute/9"}},
          {"ph": "X", "name": "train 5", "pid": 1, "tid": 1, "ts": 0, "dur": 10000,
           "args": {"step_num": "5", "group_id": "0"}},
          {"ph": "X", "name": "IteratorGetNextOp::DoCompute", "pid": 1, "tid": 1, "ts": 0, "dur": 2000},
          {"ph": "X", "name": "MatMul", "pid": 1, "tid": 3, "ts": 2000, "dur": 8000},
          {"ph": "X", "name": "ExecutorState::Process", "pid": 1, "tid": 2, "ts": 4000, "dur": 100}]
    ev += [{"ph": "X", "name": "ExecutorState::Process", "pid": 1, "tid": 2, "ts": 15000 + 100 * i, "dur": 50}
           for i in range(200)]
    if outside:
        ev.append({"ph": "X", "name": outside_steps.EVENT, "pid": 1, "tid": 1, "ts": 12000, "dur": 25000})
    return {"traceEvents": ev}


def test_a_threads_cpu_is_spread_over_its_activity_inside_the_steps_only():
    # the record holds the window's CPU less the validation (4 ms of the pipeline thread's, all in step 5's compute
    # phase); its 200 validation events must not take the share of that CPU they would without the marked span
    record = {"schema": "tfbertperf.threadcpu/1", "seconds": 0.012, "cores": 2, "clock": "schedstat",
              "threads": [{"tid": 10, "line_id": 7, "name": "python", "cpu_ms": 4.0, "runqueue_ms": 0.0},
                          {"tid": 11, "line_id": 8, "name": "python", "cpu_ms": 8.0, "runqueue_ms": 0.0},
                          {"tid": 12, "line_id": 50, "name": "python", "cpu_ms": 8.0, "runqueue_ms": 0.0}]}
    cost = 201 * 1.7e-3  # the profiler's cost of the thread's recorded events, taken off its CPU
    marked = contention.step_contention(_trace(True), thread_cpu=record)["steps"][5]
    assert marked["input_cpu_ms"] == pytest.approx(4.0 - cost, rel=0.05)
    unmarked = contention.step_contention(_trace(False), thread_cpu=record)["steps"][5]
    assert unmarked["input_cpu_ms"] < 0.1  # before: 100 µs of its 10.1 ms of activity fell in the step


def _model_and_data():
    """A small Keras MLP (TensorFlow backend), compiled, and 4096 examples of 64 features with their labels."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    xs = np.random.default_rng(0).standard_normal((4096, 64)).astype("float32")
    return model, xs, (xs[:, 0] > 0).astype("int64")


@pytest.mark.slow
def test_a_window_across_an_epochs_end_leaves_the_validation_out_of_the_cpu_record(tmp_path):
    import tensorflow as tf

    from tfbertperf.analyze import analyze
    from tfbertperf.keras import ProfileCallback
    from tfbertperf.profile import stepfile, threadcpu, xprof_tools

    model, xs, ys = _model_and_data()
    ds = tf.data.Dataset.from_tensor_slices((xs[:512], ys[:512])).map(lambda x, y: (x * 2.0, y)).batch(32)
    val = tf.data.Dataset.from_tensor_slices((xs, ys)).map(lambda x, y: (tf.tanh(x), y)).batch(32)  # 128 batches
    cb = ProfileCallback(str(tmp_path), "12:20")  # epochs of 16 batches: the window holds epoch 1's end
    model.fit(ds, epochs=2, validation_data=val, verbose=0, callbacks=[cb])
    record = json.loads(next(tmp_path.glob(f"plugins/profile/*/{threadcpu.SIDECAR}")).read_text())
    steps = json.loads(cb.step_file.read_text())
    lo, hi = steps["profiled_steps"]
    captured_s = sum(steps["step_time_ms"][lo:hi]) / 1e3
    out = record["outside_steps"]
    assert out["spans"] == 1 and out["edges"] == ["first", "last"] and out["seconds"] > 0
    # the record spans the captured steps (and the callbacks between them), not the 128 validation batches
    assert record["seconds"] < captured_s + 0.5 * record["outside_steps"]["seconds"], (record["seconds"], captured_s)
    assert sum(r["cpu_ms"] for r in record["threads"]) / 1e3 < 2 * 2 * record["seconds"] + 0.05
    tv = xprof_tools.convert(xprof_tools.find_xplanes(tmp_path), "trace_viewer")
    assert len(outside_steps.spans(tv["traceEvents"])) == 1  # TensorBoard's trace viewer shows the validation's
    att = analyze(str(tmp_path))["attribution"]
    assert att["input_cpu_basis"].startswith("measured") and att["steps_profiled"] >= 6
    assert att["window_outside_steps_s"] == pytest.approx(out["seconds"], rel=0.01)  # and the console says so
    # xprof's input-op figures a step: divided by the steps the capture spans less the validation (8 steps read as
    # 109 with the validation's span in; 14 now: the edge steps and the profiler's start and stop), and the
    # validation's own input ops left out
    assert att["input_ops_capture_steps"] < 3 * att["steps_profiled"], (att["input_ops_capture_steps"], att)
    assert stepfile.STEP_FILE == cb.step_file.name


_JAX_FIT = r"""
import json, sys
import keras, numpy as np
from tfbertperf.keras import ProfileCallback
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
xs = np.random.default_rng(0).standard_normal((4096, 64)).astype("float32")
ys = (xs[:, 0] > 0).astype("int64")
cb = ProfileCallback(sys.argv[1], "12:20")  # epochs of 16 batches: the window holds epoch 1's end
model.fit(xs[:512], ys[:512], batch_size=32, epochs=2, validation_data=(xs, ys), verbose=0, callbacks=[cb])
print(json.dumps({"step_file": str(cb.step_file)}))
"""


@pytest.mark.slow
def test_a_keras_jax_window_across_an_epochs_end_leaves_the_validation_out_too(tmp_path):
    import os
    import subprocess
    import sys

    from tfbertperf.profile import threadcpu, xprof_tools

    proc = subprocess.run([sys.executable, "-c", _JAX_FIT, str(tmp_path)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "jax"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(next(tmp_path.glob(f"plugins/profile/*/{threadcpu.SIDECAR}")).read_text())
    steps = json.loads(next(tmp_path.glob("plugins/profile/*/tfbertperf_steps.json")).read_text())
    lo, hi = steps["profiled_steps"]
    captured_s = sum(steps["step_time_ms"][lo:hi]) / 1e3
    assert record["outside_steps"]["spans"] == 1 and record["outside_steps"]["edges"] == []  # JAX keeps its edges
    # from the epoch's last batch on: Keras-JAX builds the validation's iterator before on_test_begin (75 ms here,
    # where the captured steps took 4 ms)
    assert record["seconds"] < 2 * captured_s + 0.02, (record["seconds"], captured_s)
    tv = xprof_tools.convert(xprof_tools.find_xplanes(tmp_path), "trace_viewer")
    assert len(outside_steps.spans(tv["traceEvents"])) == 1  # jax.profiler's capture holds the span too


@pytest.mark.slow
def test_a_tf_loop_of_your_own_keeps_its_evaluation_out_with_timer_outside(tmp_path):
    import tensorflow as tf

    from tfbertperf.profile import threadcpu, xprof_tools
    from tfbertperf.tf_steps import StepTimer

    w = tf.Variable(tf.random.normal((256, 256)))

    @tf.function
    def step(x):
        return tf.reduce_sum(tf.tanh(x @ w))

    x = tf.random.normal((64, 256))
    timer = StepTimer(str(tmp_path), profile_steps="4:12")
    for i in range(16):
        with timer.step() as s:
            s.result = step(x)
        if i == 7:  # an evaluation inside the window: 0.2 s of CPU on the training thread
            timer.outside()
            t = tf.timestamp()
            while float(tf.timestamp() - t) < 0.2:
                sum(range(20000))
    timer.close()
    record = json.loads(next(tmp_path.glob(f"plugins/profile/*/{threadcpu.SIDECAR}")).read_text())
    out = record["outside_steps"]
    assert out["spans"] == 1 and out["edges"] == ["first", "last"] and out["seconds"] >= 0.2
    assert record["seconds"] < 0.2 and max(r["cpu_ms"] for r in record["threads"]) < 200.0
    tv = xprof_tools.convert(xprof_tools.find_xplanes(tmp_path), "trace_viewer")
    assert len(outside_steps.spans(tv["traceEvents"])) == 1


@pytest.mark.slow
def test_the_captures_first_step_tf_function_tracing_stays_out_of_the_cpu_record(tmp_path):
    import tensorflow as tf

    from tfbertperf.keras import ProfileCallback
    from tfbertperf.profile import threadcpu

    model, xs, ys = _model_and_data()
    ds = tf.data.Dataset.from_tensor_slices((xs[:512], ys[:512])).repeat().batch(32)
    cb = ProfileCallback(str(tmp_path), "0:8")  # captures steps 0–8; xprof's step table and analyze read 1–7
    model.fit(ds, epochs=1, steps_per_epoch=12, verbose=0, callbacks=[cb])
    record = json.loads(next(tmp_path.glob(f"plugins/profile/*/{threadcpu.SIDECAR}")).read_text())
    times = json.loads(cb.step_file.read_text())["step_time_ms"]
    read_s = sum(times[1:8]) / 1e3
    assert times[0] / 1e3 > 4 * read_s  # step 0 traces train_function: most of the capture's time
    assert record["outside_steps"] | {"seconds": 0} == {"seconds": 0, "spans": 0, "edges": ["first", "last"]}
    assert record["seconds"] < 2 * read_s + 0.02, (record, read_s)


def test_the_captures_first_and_last_step_are_out_where_the_record_says_so():
    # steps 4, 5, 6 (10 ms each): the pipeline thread busy through the edge steps 4 and 6 (xprof leaves them out),
    # once in step 5; a record that left the edges out holds only step 5's CPU (3 ms)
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "tf_data_private_threadpool/7"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": {"name": "tf_Compute/8"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 4, "args": {"name": "tf_Compute/9"}}]
    for k, n in enumerate((4, 5, 6)):
        t0 = 10000 * k
        ev += [{"ph": "X", "name": f"train {n}", "pid": 1, "tid": 1, "ts": t0, "dur": 10000,
                "args": {"step_num": str(n), "group_id": str(k)}},
               {"ph": "X", "name": "MatMul", "pid": 1, "tid": 3, "ts": t0 + 100, "dur": 9800},
               {"ph": "X", "name": "ExecutorState::Process", "pid": 1, "tid": 2, "ts": t0 + 2000,
                "dur": 1000 if n == 5 else 8000}]
    record = {"schema": "tfbertperf.threadcpu/1", "seconds": 0.01, "cores": 2, "clock": "schedstat",
              "threads": [{"tid": 10, "line_id": 7, "name": "python", "cpu_ms": 3.0, "runqueue_ms": 0.0}]}
    plain = contention.step_contention({"traceEvents": ev}, thread_cpu=record)["steps"][5]
    edged = dict(record, outside_steps={"seconds": 0.02, "spans": 0, "edges": ["first", "last"]})
    out = contention.step_contention({"traceEvents": ev}, thread_cpu=edged)["steps"][5]
    cost = 3 * 1.7e-3
    assert out["input_cpu_ms"] == pytest.approx(3.0 - cost, rel=0.01)
    assert plain["input_cpu_ms"] == pytest.approx((3.0 - cost) / 17, rel=0.01)  # 1 of its 17 ms of activity
