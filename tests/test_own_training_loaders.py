"""A user's own loader that tf.data's knobs do not reach (issue 29: advice for the user's own training): the
batches of a Keras `PyDataset` or a Python generator come through `Dataset.from_generator`, and the advice for an
input-bound step is then the loader's (PyDataset workers, or the input moved into tf.data), not "map
num_parallel_calls → autotune"."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tfbertperf.profile import advice
from tfbertperf.profile.loaders import is_generator as _is_generator

PROGRAM = Path(__file__).parent / "programs" / "keras_pydataset.py"


def _program():
    spec = importlib.util.spec_from_file_location("keras_pydataset", PROGRAM)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _texts(att: dict) -> list[str]:
    return [a["advice"] for a in advice.actions("input", att)]


def test_generator_sources_are_told_from_the_other_iterators():
    assert _is_generator("Iterator::Generator") and _is_generator("Iterator::Root::Prefetch::FlatMap[0]::Generator")
    assert not any(_is_generator(n) for n in ("Iterator::FlatMap", "Iterator::ParallelMapV2", "Generator",
                                              "Iterator::Root::Prefetch", "RandomUniform"))


@pytest.mark.parametrize("generator_us, loader", [(9000.0, True), (5200.0, True), (4000.0, False), (0.0, False),
                                                  (None, False)])
def test_the_loaders_advice_where_a_generator_runs_half_the_input_time(generator_us, loader):
    att = {"input_ops_us": {"storage_read": 0.0, "preprocessing": 10000.0, "enqueue": 0.0, "unclassified": 0.0},
           "input_generator_us": generator_us, "source": "xprof"}
    texts = _texts(att)
    assert ("PyDataset(workers=N)" in texts[0]) is loader
    assert any("num_parallel_calls → autotune" in t for t in texts) is not loader
    assert any(t.startswith("prefetch → autotune") for t in texts) is not loader
    if loader:
        assert f"{min(1.0, generator_us / 10000.0):.0%} of the input ops' time" in texts[0]


@pytest.mark.parametrize("loader_ms, step_ms, which", [(8.7, 11.0, "processes"), (6.7, 9.6, "processes"),
                                                       (0.7, 21.0, "threads"), (0.4, 4.9, "threads")])
def test_a_loader_that_computes_is_sent_to_processes_and_one_that_waits_to_threads(loader_ms, step_ms, which):
    # measured (BENCHMARKS): Python work 1.74× with 2 worker processes and 0.99× with 2 threads (the interpreter
    # lock); a waiting read 5.1× with 4 threads
    att = {"input_ops_us": {"preprocessing": 1000.0}, "input_generator_us": 990.0, "source": "xprof",
           "input_loader_wanted_ms_per_step": loader_ms, "step_time_ms": step_ms}
    first = _texts(att)[0]
    assert f"{loader_ms:.1f} ms of CPU a {step_ms:.1f} ms step" in first and "wanted" in first
    assert ("use_multiprocessing=True" in first and "worker processes" in first) is (which == "processes")
    assert ("PyDataset(workers=N) threads" in first and "mostly wait" in first) is (which == "threads")


@pytest.mark.slow  # two real Keras fits behind 15 ms reads, each profiled and analyzed (~15 s)
def test_a_pydataset_fit_gets_the_loaders_advice_and_a_tf_data_map_keeps_its_own(tmp_path):
    import tensorflow as tf

    from tfbertperf.analyze import analyze
    from tfbertperf.keras import ProfileCallback

    prog = _program()
    prog.run(str(tmp_path / "pyds"), workers=1, read_ms=15.0, steps=50, window="20:35")
    doc = analyze(str(tmp_path / "pyds"))
    att, texts = doc["attribution"], [a["advice"] for a in doc["verdict"]["actions"]]
    assert doc["verdict"]["bottleneck"] == "input", doc["verdict"]["summary"]
    assert att["input_generator_us"] >= advice.PYTHON_LOADER_SHARE * sum(att["input_ops_us"].values())
    assert "PyDataset(workers=N) threads" in texts[0] and not any("num_parallel_calls → autotune" in t for t in texts)
    assert att["input_loader_wanted_ms_per_step"] < 0.5 * att["step_time_ms"]  # a sleeping read: the loader waits

    # the same model and reads as a tf.data map: tf.data's knobs reach them, and its advice stays
    x = np.random.default_rng(0).standard_normal((64 * 8, prog.FEATURES)).astype("float32")
    y = np.arange(64 * 8) % 10

    def read(a):
        __import__("time").sleep(0.015 / 64)  # the same 15 ms a batch, one example at a time
        return a

    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().map(
        lambda a, b: (tf.ensure_shape(tf.py_function(read, [a], tf.float32), (prog.FEATURES,)), b)).batch(64)
    cb = ProfileCallback(str(tmp_path / "map"), profile_steps="20:35")
    prog.model().fit(ds.prefetch(2), steps_per_epoch=50, epochs=1, verbose=0, callbacks=[cb])
    doc = analyze(str(tmp_path / "map"))
    texts = [a["advice"] for a in doc["verdict"]["actions"]]
    assert doc["verdict"]["bottleneck"] == "input" and doc["attribution"]["input_generator_us"] == 0
    assert any("num_parallel_calls → autotune" in t for t in texts) and not any("PyDataset" in t for t in texts)


@pytest.mark.slow  # a real fit whose loader computes in Python on two worker threads (~12 s)
def test_a_pydataset_computing_on_worker_threads_is_input_bound_not_compute_bound(tmp_path):
    # The loader's __getitem__ computes 8 ms in Python on PyDataset(workers=2) threads: they hold the interpreter
    # lock the step needs, and the step ran as slowly as with one worker (BENCHMARKS: what-if 72–73 %).  The
    # capture shows none of that work (no events on those threads); before the loader's CPU was read from the
    # thread record, analyze said "compute-bound, input 7–13 %".
    from tfbertperf.analyze import analyze

    _program().run(str(tmp_path / "threads"), workers=2, read_ms=0.0, cpu_ms=8.0, steps=50, window="15:40")
    doc = analyze(str(tmp_path / "threads"))
    att = doc["attribution"]
    assert doc["verdict"]["bottleneck"] == "input", doc["verdict"]["summary"]
    assert att["input_cpu_basis"].startswith("measured") and (att["input_cost_estimate_fraction"] or 0) >= 0.4
    # its Python computes (~8 ms of CPU a ~10 ms step): worker processes, not threads
    assert "use_multiprocessing=True" in doc["verdict"]["actions"][0]["advice"]
    assert att["input_loader_wanted_ms_per_step"] >= 0.5 * att["step_time_ms"]


# ---- the loader's CPU: Python threads and child processes the capture records no event for


def _record(python_ms=0.0, kids_ms=(), exited=None, own_ms=0.0):
    """A threadcpu.json record: the compute on a recorded thread (line 2), a Keras loader thread (line 70), our
    own sampler thread, child processes, and the threads that ended inside the window."""
    threads = [{"tid": 10, "line_id": 2, "name": "tf_Compute", "cpu_ms": 5.0, "runqueue_ms": 0.0},
               {"tid": 11, "line_id": 70, "name": "python", "cpu_ms": python_ms, "runqueue_ms": 0.0,
                "python": "Thread-2 (worker)"},
               {"tid": 12, "line_id": 71, "name": "python", "cpu_ms": own_ms, "runqueue_ms": 0.0,
                "python": "tfbertperf-utilization"}]
    return {"schema": "tfbertperf.threadcpu/1", "seconds": 0.01, "cores": 2, "clock": "schedstat", "pid": 1,
            "threads": threads, "children": [{"pid": 90 + i, "name": "python", "cpu_ms": ms}
                                             for i, ms in enumerate(kids_ms)],
            **({"exited": exited} if exited is not None else {})}


def test_the_loaders_cpu_is_its_python_threads_children_and_ended_pool_not_ours():
    from tfbertperf.profile.loaders import loader_cpu_us

    assert loader_cpu_us(None) == (0.0, 0.0, set())
    assert loader_cpu_us(_record(3.0, (2.0, 1.5), own_ms=9.0)) == (3000.0, 3500.0, {70})
    ended = {"cpu_ms": 4.0, "python": ["Thread-3 (worker)"]}
    assert loader_cpu_us(_record(3.0, exited=ended))[0] == pytest.approx(7000.0)
    ours = {"cpu_ms": 4.0, "python": ["tfbertperf-threadmap"]}  # only our own thread ended: not the loader's
    assert loader_cpu_us(_record(3.0, exited=ours))[0] == pytest.approx(3000.0)


def _generator_step(source: str):
    # step 5 (10 ms): 2 ms blocked in get-next, then an 8 ms compute phase; the input's own thread shows only the
    # source's 0.1 ms dequeue — the batches are built on threads the capture records no event for
    return {"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "tf_data_iterator_get_next/5"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": {"name": "tf_Compute/2"}},
        {"ph": "X", "name": "train 5", "pid": 1, "tid": 1, "ts": 0, "dur": 10000,
         "args": {"step_num": "5", "group_id": "0"}},
        {"ph": "X", "name": "IteratorGetNextOp::DoCompute", "pid": 1, "tid": 2, "ts": 0, "dur": 2000},
        {"ph": "X", "name": source, "pid": 1, "tid": 2, "ts": 1900, "dur": 100},
        {"ph": "X", "name": "MatMul", "pid": 1, "tid": 3, "ts": 2000, "dur": 8000}]}


def test_a_generator_sources_python_threads_cost_the_step_whole_and_child_processes_their_fair_share():
    from tfbertperf.profile import contention

    # 5 ms of a loader thread's CPU over the 10 ms capture: 4 ms of it in the 8 ms compute phase, whole (the
    # interpreter lock the step's Python waits for), where before the capture read no stolen time at all
    py = contention.step_contention(_generator_step("Iterator::Generator"), thread_cpu=_record(5.0))
    assert py["input_cpu_basis"] == "measured" and py["python_loader"]
    assert py["steps"][5]["input_cpu_ms"] == pytest.approx(4.0) and py["steps"][5]["stolen_ms"] == pytest.approx(4.0)
    assert py["loader_wanted_ms"] == pytest.approx(5.0)  # the loader's CPU a step, all of it: advice.py's "computes"
    # child processes only compete for the cores: the fair-share rule, p = 0 here (the compute on a recorded
    # thread) — their CPU is the input's and takes the core's share, 0.83 / C of it (C = 1: one tf_Compute line)
    kids = contention.step_contention(_generator_step("Iterator::Generator"), thread_cpu=_record(0.0, (5.0,)))
    assert kids["steps"][5]["input_cpu_ms"] == pytest.approx(4.0)
    assert kids["steps"][5]["stolen_ms"] == pytest.approx(4.0 * 0.83)
    assert kids["loader_wanted_ms"] == pytest.approx(5.0)
    # without a from_generator source a Python thread of the process is nobody's input
    other = contention.step_contention(_generator_step("Iterator::TensorSlice"), thread_cpu=_record(5.0))
    assert not other["python_loader"] and other["steps"][5]["stolen_ms"] == 0.0 and other["loader_wanted_ms"] is None


def test_the_cpu_a_loader_wanted_counts_its_run_queue_wait_so_a_busy_machine_does_not_hide_a_computing_loader():
    # 5 ms used + 3 ms waiting for a core on a loader thread, 2 + 1 on a worker process, 1 + 1 on the tf.data thread
    # that ran the generator (line 5), 0.5 on an ended loader thread; our own sampler's 9 ms and the compute's are
    # not the loader's
    from tfbertperf.profile.loaders import wanted_us

    rec = _record(5.0, (2.0,), exited={"cpu_ms": 0.5, "python": ["Thread-4 (worker)"]}, own_ms=9.0)
    rec["threads"][1]["runqueue_ms"] = 3.0
    rec["children"][0]["runqueue_ms"] = 1.0
    rec["threads"].append({"tid": 13, "line_id": 5, "name": "python", "cpu_ms": 1.0, "runqueue_ms": 1.0})
    assert wanted_us(rec, {5}) == pytest.approx((5 + 3 + 2 + 1 + 1 + 1 + 0.5) * 1e3)
    assert wanted_us(rec, set()) == pytest.approx((5 + 3 + 2 + 1 + 0.5) * 1e3) and wanted_us(None, set()) == 0.0


def test_the_record_keeps_the_cpu_of_threads_that_ended_inside_the_window():
    # Keras stops a PyDataset's worker pool once it has queued the epoch's last batches, often inside the window:
    # a thread gone by the stop snapshot is not in it, but the process's CPU clock still holds what it used
    from tfbertperf.profile import threadcpu

    # and likewise a use_multiprocessing pool's processes: once reaped, their whole CPU is the process's children
    # CPU clock (os.times) — less what they had used by the first snapshot
    a = {"t": 0.0, "threads": {1: (1.0, 0.0), 7: (0.5, 0.0)}, "names": {1: "python", 7: "python"},
         "python": {7: "Thread-2 (worker)"}, "children": {40: (2.0, 0.1, "python"), 41: (1.0, 0.0, "python")},
         "process_cpu": 1.5, "children_done": 5.0}
    b = {"t": 0.3, "threads": {1: (1.1, 0.0)}, "names": {1: "python"}, "python": {},
         "children": {41: (1.25, 0.0, "python")}, "process_cpu": 1.8, "children_done": 7.1}
    rec = threadcpu.window_record(a, b)
    assert rec["exited"] == {"cpu_ms": pytest.approx(200.0), "python": ["Thread-2 (worker)"]}
    # child 41 used 250 ms in the window; child 40 had 2.0 s at the start and was reaped with 2.1 s: 100 ms
    assert rec["children"] == [{"pid": 41, "name": "python", "cpu_ms": pytest.approx(250.0), "runqueue_ms": 0.0},
                               {"pid": None, "name": "ended inside the window", "cpu_ms": pytest.approx(100.0)}]


@pytest.mark.parametrize("damage", [{"children": [{"pid": 3, "cpu_ms": "lots"}]}, {"exited": {"cpu_ms": [1]}},
                                    {"children": [{"pid": 3}]}, {"machine": [1]},  # and the machine's other load
                                    {"machine": {"other_cores": "lots", "steal_cores": 0.0}}])
def test_a_damaged_loader_field_in_the_thread_record_is_one_line_naming_the_file(tmp_path, damage):
    import json as _json

    from tfbertperf.errors import UsageError
    from tfbertperf.profile import threadcpu

    (tmp_path / threadcpu.SIDECAR).write_text(_json.dumps({**_record(1.0), **damage}))
    with pytest.raises(UsageError, match="damaged thread-CPU record") as e:
        threadcpu.read_beside(tmp_path / "vm.xplane.pb")
    assert str(tmp_path / threadcpu.SIDECAR) in str(e.value) and "\n" not in str(e.value)


def test_a_measured_input_the_capture_does_not_see_is_not_blamed_on_a_python_hand_off():
    """A Keras-JAX fit fed by tf.data (tests/programs/keras_jax_tfdata_by_hand.py): jax.profiler records none of
    tf.data's threads, so the capture saw 1 % input beside a measured 73 %, and the advice named the training thread's
    0.06 ms Python hand-off ("spends 1% of the step in its own Python loader").  Now it says the capture does not see
    the pipeline and points at the pipeline; without the measured figure the hand-off advice stands."""
    from tfbertperf.profile.advice import actions

    att = {"source": "xprof", "fractions": {"input": 0.011, "host_compute": 0.989}, "step_time_ms": 5.2,
           "input_ops_us": {"storage_read": 0.0, "preprocessing": 0.0, "enqueue": 0.0, "unclassified": 0.0},
           "input_python_loader_ms_per_step": 0.058, "input_cost_fraction": 0.733, "au_compute_only_ratio": 0.226}
    said = " | ".join(a["advice"] for a in actions("input", att))
    assert "the measured what-if puts 73% of the step in input, the capture sees 1%" in said, said
    assert "own Python loader" not in said and "reads dominate" not in said, said
    att.update(input_cost_fraction=0.011, au_compute_only_ratio=None)  # no probe: the capture's own reading
    said = " | ".join(a["advice"] for a in actions("input", att))
    assert "own Python loader" in said and "measured what-if" not in said, said


def test_a_loader_thread_that_takes_cpu_from_the_step_is_not_told_to_load_ahead_in_a_thread():
    """A JAX loop on the CPU whose NumPy loader already runs ahead in a thread (tests/programs/jax_cpu_loader.py
    --thread): the training thread waits 0.4 % of the step, the thread's CPU takes 31 % from XLA's compute.  The
    advice said "load batches ahead of the step, off that thread — a background thread" (done already), and with the
    stolen CPU counted, tf.data's "interleave files in parallel"; now it names the loader thread's CPU."""
    from tfbertperf.profile.advice import actions

    att = {"source": "xprof", "fractions": {"input": 0.004, "host_compute": 0.995}, "step_time_ms": 11.7,
           "input_ops_us": {"storage_read": 0.0, "preprocessing": 0.0, "enqueue": 0.0, "unclassified": 0.0},
           "input_python_loader_ms_per_step": 0.044, "input_stolen_cpu_fraction": 0.31, "cores_seen": 2,
           "input_cost_estimate_fraction": 0.314}
    said = " | ".join(a["advice"] for a in actions("input", att))
    assert said.startswith("a loader runs ahead of the step in a thread or a process (the training thread waits 0% "
                           "of it), and its CPU takes 31% of the step from XLA's compute on the same 2 cores"), said
    assert "off that thread" not in said and "interleave" not in said, said
    att.update(input_stolen_cpu_fraction=0.0, input_cost_estimate_fraction=0.004)  # the loader in the step: as before
    said = " | ".join(a["advice"] for a in actions("input", att))
    assert "own Python loader" in said and "loader runs ahead" not in said, said


def test_a_tensorflow_capture_that_shows_the_pipeline_is_not_told_it_does_not_see_it():
    """A Keras fit on TensorFlow behind keras-hub's tokenizer (tests/programs/keras_fit_shapes.py --shape tokenize):
    the what-if measured 40 %, the capture's blocked wait was 2 % but its estimate with the stolen CPU 49 %, and its
    tf.data ops are in the capture.  The advice said "the capture sees 2 %: … jax.profiler records no tf.data
    threads"; it is tf.data's own advice, and a capture whose estimate is the measured figure's half is not 'unseen'."""
    from tfbertperf.profile.advice import actions

    att = {"source": "xprof", "fractions": {"input": 0.02, "host_compute": 0.955}, "step_time_ms": 8.8,
           "input_ops_us": {"storage_read": 0.0, "preprocessing": 329.8, "enqueue": 0.0, "unclassified": 0.0},
           "input_cost_estimate_fraction": 0.493, "input_cost_fraction": 0.399, "au_compute_only_ratio": 0.601}
    said = " | ".join(a["advice"] for a in actions("input", att))
    assert "jax.profiler" not in said and "capture sees" not in said and "preprocessing dominates" in said, said
    att.update(input_cost_estimate_fraction=0.05, input_cost_fraction=0.6)  # it shows tf.data ops: still not 'unseen'
    assert "jax.profiler" not in " | ".join(a["advice"] for a in actions("input", att))


def test_the_keras_hub_program_tokenizes_real_text_and_trains(tmp_path):
    """tests/programs/keras_hub_bert_by_hand.py, whose figures BENCHMARKS.md reports: its TFRecords hold the pydoc
    text, keras-hub's WordPiece turns it into real ids (a tokenizer built wrong yields a few ids and [UNK]s, as the
    first vocabulary without punctuation did for 35 % of the tokens: the input cost would be a toy's), and the classifier trains on the pipeline."""
    import importlib.util

    import numpy as np

    program = Path(__file__).parent / "programs" / "keras_hub_bert_by_hand.py"
    spec = importlib.util.spec_from_file_location("keras_hub_bert_by_hand", program)
    kh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kh)
    files, vocab = kh.write_records(str(tmp_path / "data"))
    assert len(files) == kh.SHARDS and len(vocab) > 1000
    x, y = next(iter(kh.pipeline(files, vocab)))
    ids = x["token_ids"].numpy()
    assert ids.shape == (kh.BATCH, kh.SEQ) and set(np.unique(y.numpy())) <= {0, 1, 2}
    words = ids[ids > 4]  # past [PAD] [UNK] [CLS] [SEP] [MASK]
    tokens = ids[ids != vocab.index("[PAD]")]
    assert len(np.unique(words)) > 100 and (tokens == vocab.index("[UNK]")).mean() < 0.05, ids[:2]
    model = kh.compiled_model(len(vocab))
    history = model.fit(kh.pipeline(files, vocab), steps_per_epoch=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_a_host_step_waiting_for_the_lock_its_loader_threads_hold_is_told_to_use_processes():
    """A Keras fit on JAX (CPU) fed by PyDataset(workers=2) threads computing 1 ms in Python a batch: the training
    thread waits out their Python after XLA's run to return from convert_to_numpy (host_loader.lock_wait_by_step).
    With that wait counted the advice was tf.data's "interleave files in parallel" (no tf.data in the program), or
    "load batches ahead of the step, off that thread" (its loader is in threads already)."""
    from tfbertperf.profile.advice import actions

    att = {"source": "xprof", "fractions": {"input": 0.178, "host_compute": 0.822}, "step_time_ms": 2.57,
           "breakdown_ms": {"input": 0.457, "host_compute": 2.113},
           "input_ops_us": {"storage_read": 0.0, "preprocessing": 0.0, "enqueue": 0.0, "unclassified": 0.0},
           "input_python_loader_ms_per_step": 0.169, "input_interpreter_held_ms": 0.289,
           "input_stolen_cpu_fraction": 0.082, "cores_seen": 2, "input_cost_estimate_fraction": 0.26}
    said = " | ".join(a["advice"] for a in actions("input", att))
    assert said.startswith("the training thread waits 11% of the step for the interpreter lock its loader thread "
                           "holds"), said
    assert "use_multiprocessing=True" in said.split(" | ")[0]
    assert "interleave" not in said and "own Python loader" not in said, said
    # the threads' measured CPU a step: 6.5 of a 10.3 ms step (8 ms of Python a batch) goes to processes (measured
    # 1.75-2.0x); 0.8 of 2.6 ms (a light loader) stays, made cheaper: processes ran it at 0.49-1.0x the step rate
    att.update(input_cpu_ms_per_step=6.5, step_time_ms=10.3)
    assert "use_multiprocessing=True" in actions("input", att)[0]["advice"]
    att.update(input_cpu_ms_per_step=0.8, step_time_ms=2.6)
    first = actions("input", att)[0]["advice"]
    assert "for light Python (0.8 ms of their CPU a 2.6 ms step): make it release the lock" in first, first
    assert "use_multiprocessing" not in first and "tf.data" in first, first


# ---- what the loader already runs on: the advice asks for more of it, or for what it lacks, never for what it does


def test_what_the_loader_already_runs_on_is_read_from_the_record():
    from tfbertperf.profile.loaders import workers_reading

    assert workers_reading(None) == {} and workers_reading({"threads": [], "seconds": 0.01}) == {}
    w = workers_reading(_record(3.0, (2.0, 1.5)))["input_loader_workers"]
    # 5 + 3 ms of the threads, 3.5 of the children over 10 ms: 1.15 cores wanted of 2
    assert w == {"processes": 2, "threads": 1, "wanted_cores": pytest.approx(1.15), "cores": 2}
    # a pool stopped at an epoch's end inside the window: its threads by their names, its processes uncounted
    ended = {"cpu_ms": 4.0, "python": ["Thread-3 (worker)", "Thread-4 (worker)", "Thread-5 (_handle_workers)"]}
    rec = _record(3.0, exited=ended)
    rec["children"] = [{"pid": None, "name": "ended inside the window", "cpu_ms": 6.0, "runqueue_ms": 0.0}]
    w = workers_reading(rec)["input_loader_workers"]
    assert w["threads"] == 2 and w["processes"] is None and w["wanted_cores"] == pytest.approx(1.8)
    # a record without Python thread names (written without loaders=True) says nothing
    bare = _record(3.0, (2.0,))
    for t in bare["threads"]:
        t.pop("python", None)
    assert workers_reading(bare) == {}


_COMPUTES = {"input_loader_wanted_ms_per_step": 8.0, "step_time_ms": 10.0}
_WAITS = {"input_loader_wanted_ms_per_step": 1.4, "step_time_ms": 4.7}


@pytest.mark.parametrize("loader, workers, blocked, want, never", [
    # computing, its processes fill the machine (bench_python_loader "python": 4 processes 0.88× of 2)
    (_COMPUTES, {"processes": 2, "threads": 0, "wanted_cores": 4.1, "cores": 2}, 0.1, "fill the machine",
     "PyDataset(workers=N, use_multiprocessing=True)"),
    # computing on processes with a core to spare: more of them
    (_COMPUTES, {"processes": 2, "threads": 0, "wanted_cores": 1.2, "cores": 2}, 0.1,
     "more worker processes than it runs now", "load them in worker processes"),
    # computing on threads: processes (the interpreter lock), as before
    (_COMPUTES, {"processes": 0, "threads": 2, "wanted_cores": 1.9, "cores": 2}, 0.1,
     "load them in worker processes", "fill the machine"),
    # waiting on processes: threads in their place ("mixed": threads 1.14–1.4× the processes' step rate)
    (_WAITS, {"processes": 2, "threads": 0, "wanted_cores": 2.2, "cores": 2}, 0.1,
     "worker threads in place of its worker processes", "use_multiprocessing=True)"),
    # waiting on threads that lag: more threads
    (_WAITS, {"processes": 0, "threads": 2, "wanted_cores": 1.0, "cores": 2}, 0.3,
     "more worker threads than it runs now", "PyDataset(workers=N) threads"),
    # waiting on threads that keep ahead: the CPU beside the step ("mixed": 4 threads 0.99× of 2)
    (_WAITS, {"processes": 0, "threads": 2, "wanted_cores": 2.0, "cores": 2}, 0.12,
     "its worker threads keep ahead of the step (it waits 12%", "PyDataset(workers="),
    # nothing recorded about workers: as before
    (_WAITS, None, 0.3, "PyDataset(workers=N) threads", "in place of"),
])
def test_the_loaders_advice_asks_for_what_it_lacks_not_what_it_runs(loader, workers, blocked, want, never):
    att = {"input_ops_us": {"preprocessing": 1000.0}, "input_generator_us": 990.0, "source": "xprof", **loader,
           "fractions": {"input": blocked}, "input_cost_estimate_fraction": 0.31,
           **({"input_loader_workers": workers} if workers else {})}
    first = _texts(att)[0]
    assert want in first and never not in first, first


@pytest.mark.slow  # a real fit whose loader computes in two worker processes (~15 s)
def test_a_pydataset_already_on_worker_processes_is_not_told_to_use_them(tmp_path):
    # it was: "load them in worker processes — PyDataset(workers=N, use_multiprocessing=True)" to a fit that ran
    # PyDataset(workers=2, use_multiprocessing=True)
    from tfbertperf.analyze import analyze

    _program().run(str(tmp_path / "procs"), workers=2, read_ms=0.0, cpu_ms=6.0, steps=50, window="15:40",
                   processes=True)
    doc = analyze(str(tmp_path / "procs"))
    seen = doc["attribution"]["input_loader_workers"]
    assert seen["processes"] in (2, None) and seen["wanted_cores"] > 0, seen
    texts = [a["advice"] for a in doc["verdict"]["actions"]]
    assert not any("load them in worker processes" in t for t in texts), texts
    if doc["verdict"]["bottleneck"] == "input" and "Dataset.from_generator" in texts[0]:
        assert "fill the machine" in texts[0] or "more worker processes than it runs" in texts[0], texts[0]
