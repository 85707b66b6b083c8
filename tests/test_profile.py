"""profile/: finding and converting profiles, the stolen-CPU estimator, attribution, verdict, AU, step timer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tfbertperf.config import load_config
from tfbertperf.errors import UsageError
from tfbertperf.profile import advice, attribution, contention, steptable, verdict, xprof_tools

sys.path.insert(0, str(Path(__file__).parent / "programs"))
from runner import run_program  # noqa: E402


# trains the foreign program's model (tests/programs/stall_loop.py): the tests that use it are marked slow
@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    return run_program(tmp_path_factory.mktemp("profiles"), "stall,memory", steps=30, window="12:26")


def xplanes_of(res, mode):
    return xprof_tools.find_xplanes(res[mode]["logdir"])


@pytest.mark.slow
def test_find_xplanes_accepts_logdir_session_dir_and_file(profiles):
    from_logdir = xplanes_of(profiles, "stall")
    assert len(from_logdir) == 1 and from_logdir[0].name.endswith(".xplane.pb")
    assert xprof_tools.find_xplanes(from_logdir[0].parent) == from_logdir
    assert xprof_tools.find_xplanes(from_logdir[0]) == from_logdir
    assert xprof_tools.find_xplanes([str(from_logdir[0])]) == from_logdir


def test_a_capture_never_stops_in_the_second_an_earlier_session_folder_is_named_by(tmp_path):
    # TF's and JAX's profilers name the session folder by the second the capture stops in: two fits' captures
    # stopped in one second went to one folder, the second written over the first (profile/stepfile.own_second)
    import time

    from tfbertperf.profile import stepfile

    folders = tmp_path / "plugins" / "profile"
    folders.mkdir(parents=True)
    t0 = time.time()
    for f in (time.localtime, time.gmtime):  # the folder a capture stopping now would be written to
        (folders / time.strftime("%Y_%m_%d_%H_%M_%S", f(t0))).mkdir(exist_ok=True)
    stepfile.own_second(tmp_path)
    assert int(time.time()) > int(t0) and time.time() - t0 < 1.5  # waited for the next second, no longer
    t0 = time.time()
    stepfile.own_second(tmp_path / "fresh")  # no folder yet: no wait
    assert time.time() - t0 < 0.1


def test_find_xplanes_picks_the_newest_session_by_default(tmp_path):
    for name in ("2024_01_01_00_00_00", "2025_06_01_00_00_00", "2023_01_01_00_00_00"):
        d = tmp_path / "plugins" / "profile" / name
        d.mkdir(parents=True)
        (d / "h.xplane.pb").write_bytes(b"x")
    assert xprof_tools.find_xplanes(tmp_path)[0].parent.name == "2025_06_01_00_00_00"
    assert xprof_tools.find_xplanes(tmp_path, session="2023_01_01_00_00_00")[0].parent.name == "2023_01_01_00_00_00"


def test_find_xplanes_rejects_non_profiles_with_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    for bad in (tmp_path, tmp_path / "notes.txt", tmp_path / "nope"):
        with pytest.raises(UsageError) as e:
            xprof_tools.find_xplanes(bad)
        assert "\n" not in str(e.value) and str(bad) in str(e.value)


@pytest.mark.slow
def test_convert_returns_parsed_json_and_leaves_the_profile_dir_untouched(profiles):
    xp = xplanes_of(profiles, "stall")
    before = sorted(p.name for p in xp[0].parent.iterdir())
    ipa = xprof_tools.convert(xp, "input_pipeline_analyzer")
    assert isinstance(ipa, list) and any(t.get("cols") for t in ipa)
    trace = xprof_tools.convert(xp, "trace_viewer")
    assert isinstance(trace, dict) and trace["traceEvents"]
    assert isinstance(xprof_tools.convert(xp, "overview_page"), list)
    assert isinstance(xprof_tools.convert(xp, "framework_op_stats"), list)
    assert sorted(p.name for p in xp[0].parent.iterdir()) == before  # no ALL_HOSTS cache written next to it


@pytest.mark.slow
def test_stall_pipeline_steals_cpu_and_memory_feed_does_not(profiles):
    stall = contention.step_contention(xprof_tools.convert(xplanes_of(profiles, "stall"), "trace_viewer"))
    mem = contention.step_contention(xprof_tools.convert(xplanes_of(profiles, "memory"), "trace_viewer"))
    assert stall["cores"] >= 1 and len(stall["steps"]) >= 10
    mean = lambda res, k: sum(s[k] for s in res["steps"].values()) / len(res["steps"])  # noqa: E731
    assert mean(stall, "stolen_ms") > 0.1 * mean(stall, "step_ms")
    assert mean(mem, "stolen_ms") < 0.05 * mean(mem, "step_ms")
    for s in stall["steps"].values():
        assert 0 <= s["stolen_ms"] <= s["compute_phase_ms"] + 1e-6
        assert s["wait_ms"] + s["compute_phase_ms"] == pytest.approx(s["step_ms"])


# One step of 10 ms on 2 cores (two tf_Compute threads): 2 ms blocked in get-next, then 8 ms compute.
_STEP_5 = [
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "tf_data_private_threadpool/1"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": {"name": "tf_Compute/1"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 4, "args": {"name": "tf_Compute/2"}},
    {"ph": "X", "name": "train 5", "pid": 1, "tid": 1, "ts": 0, "dur": 10000,
     "args": {"step_num": "5", "group_id": "0"}},
    {"ph": "X", "name": "IteratorGetNextOp::DoCompute", "pid": 1, "tid": 1, "ts": 0, "dur": 2000},
]


def _synthetic_step(compute_tasks):
    # One input thread busy for 4 ms of the compute phase.
    ev = [
        *_STEP_5,
        {"ph": "X", "name": "ThreadpoolListener::Region", "pid": 1, "tid": 2, "ts": 1000, "dur": 5000},
    ]
    ev += [{"ph": "X", "name": "ThreadpoolListener::Region", "pid": 1, "tid": tid, "ts": ts, "dur": dur}
           for tid, ts, dur in compute_tasks]
    return contention.step_contention({"traceEvents": ev})


def test_fair_share_model_on_a_synthetic_trace():
    # Compute runs on both pool threads at once (width W = 2 = C): the busy input thread is a third runnable
    # thread on 2 cores, compute gets 2/3 of its speed → lost = 1/3 of the 4 ms overlap.
    res = _synthetic_step([(3, 2000, 3000), (4, 2500, 3000), (3, 6000, 3000)])
    assert res["cores"] == 2  # two tf_Compute threads seen
    s = res["steps"][5]
    assert s["wait_ms"] == pytest.approx(2.0) and s["compute_phase_ms"] == pytest.approx(8.0)
    assert s["compute_width"] == 2
    assert s["stolen_ms"] == pytest.approx(4.0 / 3)
    assert s["input_busy_ms"] == pytest.approx(4.0)
    # Compute on one thread at a time (W = 1): the input thread takes the idle core and steals nothing.
    s = _synthetic_step([(3, 2000, 3000), (4, 5000, 3000)])["steps"][5]  # back-to-back, never concurrent
    assert s["compute_width"] == 1 and s["stolen_ms"] == pytest.approx(0.0)


def test_lost_share():
    assert contention.lost_share(0, 2, 2) == 0.0
    assert contention.lost_share(1, 2, 2) == pytest.approx(1 / 3)
    assert contention.lost_share(2, 2, 2) == pytest.approx(1 / 2)
    assert contention.lost_share(2, 4, 8) == 0.0  # cores to spare
    assert contention.lost_share(3, 8, 8) == pytest.approx(3 / 11)


@pytest.mark.slow
def test_attribution_block_has_the_report_schema(profiles):
    doc = attribution.attribute(xplanes_of(profiles, "stall"))
    att = doc["attribution"]
    assert set(doc) >= {"attribution", "verdict", "accelerator_utilization", "hosts"}
    for k in ("source", "steps_profiled", "step_time_ms", "breakdown_ms", "fractions", "input_bound_fraction",
              "input_cost_fraction", "input_ops_us"):
        assert k in att
    assert att["steps_profiled"] >= 10
    # measured, not the remainder: the named categories cover the step; xprof's step is the program's own
    assert att["fractions"]["other"] < 0.5, att["fractions"]
    assert 0.6 < att["step_time_ms"] / profiles["stall"]["step_time_ms"] < 1.6
    assert att["input_cost_fraction"] is None
    assert att["fractions"]["host_compute"] > 0.2  # CPU-only: training compute shows as host compute
    assert isinstance(att["au_pass"], bool) and att["au_threshold"] == 0.9
    # without a probe the verdict rests on the best figure there is, quotes it and follows from it
    from tfbertperf.profile.xprof_attribution import input_share

    share, source = input_share(att)
    assert source != "input_cost_fraction" and f"input costs {share:.0%}" in doc["verdict"]["summary"]
    assert (doc["verdict"]["bottleneck"] == "input") == (share >= 0.20)


@pytest.mark.slow
def test_probe_gives_input_cost_fraction_and_au(profiles):
    xp = xplanes_of(profiles, "stall")
    doc = attribution.attribute(xp, step_time_ms=20.0, compute_only_step_ms=5.0, trace=False,
                                config=load_config(sets=["profile.au_threshold=0.5"]).to_dict())
    assert doc["attribution"]["input_cost_fraction"] == pytest.approx(0.75)
    assert doc["accelerator_utilization"] == pytest.approx(0.25)
    assert doc["attribution"]["au_pass"] is False and doc["attribution"]["au_threshold"] == 0.5
    assert doc["verdict"]["bottleneck"] == "input"  # the probe's 75 % wins over the direct figure
    assert "what-if probe" in doc["verdict"]["summary"]


def _att(**fr):
    fractions = {c: 0.0 for c in steptable.CATEGORIES}
    fractions.update(fr)
    return {"fractions": fractions, "step_time_ms": 10.0,
            "input_bound_fraction": fractions["input"] + fractions["host_to_device"],
            "input_cost_fraction": None, "input_cost_estimate_fraction": None, "input_ops_us": {}}


@pytest.mark.parametrize("fr,expected", [
    ({"input": 0.25, "host_compute": 0.75}, "input"),
    ({"input": 0.05, "host_compute": 0.95}, "compute"),
    ({"input": 0.05, "host_to_device": 0.2, "device_compute": 0.75}, "transfer"),
    ({"input": 0.1, "host_to_device": 0.2, "device_compute": 0.7}, "transfer"),  # copies outweigh the wait
    ({"input": 0.3, "host_to_device": 0.16, "device_compute": 0.54}, "input"),  # the wait outweighs the copies
    ({"input": 0.05, "other": 0.35, "host_compute": 0.6}, "other"),
])
def test_verdict_thresholds(fr, expected):
    att = _att(**fr)
    assert verdict.verdict(att, 0.5)["bottleneck"] == expected


def test_trace_estimate_outranks_the_direct_figure_in_the_verdict():
    att = _att(input=0.05, host_compute=0.95)
    att["input_cost_estimate_fraction"] = verdict.INPUT_BOUND_THRESHOLD + 0.1
    assert verdict.verdict(att, 0.7)["bottleneck"] == "input"


def test_naive_config_advice_names_knob_and_value():
    cfg = load_config(sets=["pipeline.preset=naive", "pipeline.prefetch=0", "pipeline.cycle_length=1",
                            "pipeline.parse_after_batch=false"]).to_dict()
    recs = verdict.verdict(_att(input=0.6, host_compute=0.4), 0.4, config=cfg)["recommendations"]
    text = "\n".join(recs)
    assert "prefetch 0 → autotune" in text
    assert "interleave cycle_length 1 → autotune" in text
    assert "parse after batch" in text


def test_remote_stream_advice_says_stage():
    cfg = load_config(sets=["data.uri=gs://bucket/data", "data.mode=stream"]).to_dict()
    recs = [a["advice"] for a in advice.actions("input", _att(input=0.5), cfg)]
    assert any("stage remote shards" in r and "--set data.mode=stage" in r for r in recs)


def test_step_timer_summary_skips_warmup_and_sums_waits():
    s = attribution.step_timer_summary([100, 10, 10, 20], [90, 1, 1, 10], warmup_steps=1)
    assert s == {"steps": 3, "input_wait_fraction": pytest.approx(12 / 40), "compute_fraction": pytest.approx(28 / 40)}
    assert attribution.step_timer_summary([5.0], [1.0], warmup_steps=3)["steps"] == 0


def test_joined_input_split_moves_our_read_time_from_preprocessing_to_storage_read():
    from tfbertperf.profile.attribution import joined_input_split

    ops = {"storage_read": 100.0, "preprocessing": 5000.0, "enqueue": 50.0, "unclassified": 200.0}
    split = joined_input_split(ops, {"read_ms_per_step": 3.0})  # 3,000 µs of reads, 100 already seen by xprof
    assert split == {"storage_read": 3000.0, "preprocessing": 2100.0, "enqueue": 50.0, "unclassified": 200.0}
    capped = joined_input_split(ops, {"read_ms_per_step": 10.0})  # more than xprof holds: never negative
    assert capped["preprocessing"] == 0.0 and capped["unclassified"] == 0.0
    assert capped["storage_read"] == 5300.0 and joined_input_split(ops, {"read_ms_per_step": 0}) is None


def test_contention_without_task_events_reads_function_runs_and_takes_all_cores_as_width():
    # A capture without thread-pool task events (profile/capture.py): the input thread's busy time is its function
    # execution, and the compute pools show no tasks, so W = C — the same 1/3 loss as with W = 2 seen above.
    ev = [
        *_STEP_5,
        {"ph": "X", "name": "ExecutorState::Process", "pid": 1, "tid": 2, "ts": 1000, "dur": 5000},
        {"ph": "X", "name": "MatMul", "pid": 1, "tid": 3, "ts": 2000, "dur": 3000},
    ]
    s = contention.step_contention({"traceEvents": ev})["steps"][5]
    assert s["compute_width"] == 2
    assert s["stolen_ms"] == pytest.approx(4.0 / 3) and s["input_busy_ms"] == pytest.approx(4.0)


def _pool_task_events(logdir) -> int:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    n = 0
    for path in xprof_tools.find_xplanes(logdir):
        space = xplane_pb2.XSpace()
        space.ParseFromString(Path(path).read_bytes())
        for plane in space.planes:
            names = {k: m.name for k, m in plane.event_metadata.items()}
            n += sum(names.get(e.metadata_id, "").startswith("ThreadpoolListener")
                     for line in plane.lines for e in line.events)
    return n


@pytest.mark.parametrize("threadpool_events", [False, True])
def test_capture_drops_only_the_thread_pool_task_events(tmp_path, threadpool_events):
    # A real capture of a marked tf.data + matmul loop: without pool task events xprof still finds every step
    # and the input pipeline; with them (TF's default) the pool's task regions are there.
    import tensorflow as tf

    from tfbertperf.profile import capture

    ds = tf.data.Dataset.range(64).map(lambda i: tf.random.stateless_normal([64, 256], seed=[i, 0]),
                                       num_parallel_calls=2).prefetch(2)
    w = tf.random.stateless_normal([256, 256], seed=[1, 2])
    step = tf.function(lambda x: tf.reduce_sum(tf.matmul(tf.matmul(x, w), w)))
    it = iter(ds)
    step(next(it))
    state = capture.start(str(tmp_path), tf.profiler.experimental.ProfilerOptions(host_tracer_level=2),
                          threadpool_events=threadpool_events)
    try:
        for i in range(8):
            with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                step(next(it)).numpy()
    finally:
        tf.profiler.experimental.stop()
    assert state == ("on" if threadpool_events else "off")
    rows = steptable.step_rows(xprof_tools.convert(xprof_tools.find_xplanes(tmp_path), "input_pipeline_analyzer"))
    assert len(rows) >= 6
    assert (_pool_task_events(tmp_path) > 0) is threadpool_events


# ---- CPU is CPU, waits are waits (issue 29): stolen time from the input threads' measured CPU

def _measured(line_id_cpu_ms: dict) -> dict:
    """A threadcpu.json record (profile/threadcpu.py) naming the capture's lines by id, over a 50 ms window (the
    CPU of its threads fits 2 cores: core_wait.ceiling reads the compute's share of them)."""
    return {"schema": "tfbertperf.threadcpu/1", "seconds": 0.05, "cores": 2, "clock": "schedstat",
            "threads": [{"tid": 100 + i, "line_id": lid, "name": "python", "cpu_ms": ms, "runqueue_ms": 0.0}
                        for i, (lid, ms) in enumerate(line_id_cpu_ms.items())]}


# the compute's measured CPU: half on a thread the capture records (tf_Compute/2), half on a pool thread it shows
# no event for (line 50: Eigen/OpenMP) — p = 1/2: a fair-share step loses 1/2 ms per input core-millisecond
_HALF_POOL = {2: 5.0, 50: 5.0}


def _sleeping_map_step():
    # step 5: 2 ms blocked in get-next, then an 8 ms compute phase during which the input thread's function run
    # holds a py_function that sleeps for 4.9 ms (a slow lookup): long op wall time, no CPU
    return [*_STEP_5,
            {"ph": "X", "name": "MatMul", "pid": 1, "tid": 3, "ts": 2000, "dur": 8000},
            {"ph": "X", "name": "ExecutorState::Process", "pid": 1, "tid": 2, "ts": 2000, "dur": 5000},
            {"ph": "X", "name": "EagerPyFunc:EagerPyFunc", "pid": 1, "tid": 2, "ts": 2050, "dur": 4900}]


def test_a_sleeping_map_op_is_not_stolen_cpu_when_its_thread_cpu_is_measured():
    from tfbertperf.profile.program_facts import HOST_EVENT_COST_US

    res = contention.step_contention({"traceEvents": _sleeping_map_step()},
                                     thread_cpu=_measured(_HALF_POOL | {1: 0.02}))
    s = res["steps"][5]
    cpu = 0.02 - 2 * HOST_EVENT_COST_US / 1e3  # less the profiler's cost of the thread's 2 recorded events
    assert res["input_cpu_basis"] == "measured" and s["input_cpu_ms"] == pytest.approx(cpu)
    # its CPU, not a third of 5 ms; whole, not × p = 1/2: a py_function's CPU is Python, which holds the
    # interpreter lock the step's own Python waits for (profile/contention.py)
    assert s["stolen_ms"] == pytest.approx(cpu, abs=1e-6)
    assert s["wait_ms"] == pytest.approx(2.0)


def test_a_sleeping_map_op_is_not_stolen_cpu_without_a_clock_either():
    # no threadcpu.json: the py_function's wall time may be a wait, so only the function run around it counts
    res = contention.step_contention({"traceEvents": _sleeping_map_step()})
    assert res["steps"][5]["stolen_ms"] == pytest.approx(0.1 / 3, abs=1e-6)  # main: a third of 5 ms
    assert res["input_cpu_basis"] == "estimated"


def test_measured_input_cpu_counts_whole_when_it_hides_behind_prefetch():
    # a per-example map on the prefetch thread: the trace shows two 0.1 ms scheduling events in the compute
    # phase, the thread's clock says it used 4 ms of CPU there; next to a compute 2 wide on 2 cores, half of it
    # in parallel regions, every input core-millisecond costs the step 0.83 / 2 + 0.28 × 1/2 = 0.555 ms
    ev = [*_STEP_5,
          {"ph": "X", "name": "MatMul", "pid": 1, "tid": 3, "ts": 2000, "dur": 8000},
          {"ph": "X", "name": "MapAndBatchProduce", "pid": 1, "tid": 2, "ts": 3000, "dur": 100},
          {"ph": "X", "name": "ExecutorState::Process", "pid": 1, "tid": 2, "ts": 6000, "dur": 100}]
    s = contention.step_contention({"traceEvents": ev}, thread_cpu=_measured(_HALF_POOL | {1: 4.0}))["steps"][5]
    assert s["input_cpu_ms"] == pytest.approx(4.0, abs=0.01) and s["stolen_ms"] == pytest.approx(2.22, abs=0.01)


def test_input_cpu_spent_while_the_step_waits_is_not_stolen_twice():
    # the same 4 ms of input CPU, all of it while the step is blocked in get-next: the wait already counts it
    ev = [*_STEP_5,
          {"ph": "X", "name": "MatMul", "pid": 1, "tid": 3, "ts": 2000, "dur": 8000},
          {"ph": "X", "name": "ExecutorState::Process", "pid": 1, "tid": 2, "ts": 100, "dur": 1800}]
    s = contention.step_contention({"traceEvents": ev}, thread_cpu=_measured({1: 4.0}))["steps"][5]
    assert s["input_cpu_ms"] == pytest.approx(0.0) and s["stolen_ms"] == pytest.approx(0.0)


def test_get_next_blocking_inside_a_compiled_step_is_the_wait():
    # Keras fit: the step's thread sits in the train_function call, the get-next op blocks on its own thread
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 5, "args": {"name": "tf_data_iterator_get_next/9"}},
          {"ph": "X", "name": "train 5", "pid": 1, "tid": 1, "ts": 0, "dur": 10000,
           "args": {"step_num": "5", "group_id": "0"}},
          {"ph": "X", "name": "multi_step_on_iterator", "pid": 1, "tid": 1, "ts": 10, "dur": 9900},
          {"ph": "X", "name": "IteratorGetNextOp::DoCompute", "pid": 1, "tid": 5, "ts": 100, "dur": 3000}]
    assert contention.step_contention({"traceEvents": ev})["steps"][5]["wait_ms"] == pytest.approx(3.0)


def test_damaged_thread_cpu_record_is_one_line_naming_it(tmp_path):
    from tfbertperf.profile import threadcpu

    (tmp_path / "h.xplane.pb").write_bytes(b"")
    assert threadcpu.read_beside(tmp_path / "h.xplane.pb") is None
    (tmp_path / threadcpu.SIDECAR).write_text("{not json")
    with pytest.raises(UsageError) as e:
        threadcpu.read_beside(tmp_path / "h.xplane.pb")
    assert str(tmp_path / threadcpu.SIDECAR) in str(e.value) and "\n" not in str(e.value)


def test_thread_cpu_record_names_the_captures_input_threads_by_line_id(tmp_path):
    # a real capture of a tf.data map: every tf_data thread line in it is a thread the record measured
    import tensorflow as tf

    from tfbertperf.profile import threadcpu
    from tfbertperf.profile.xspace import read_space

    ds = tf.data.Dataset.range(4000).map(lambda x: tf.reduce_sum(tf.cast(tf.range(x % 50), tf.float32)),
                                         num_parallel_calls=2).batch(50).prefetch(2)
    it = iter(ds)
    next(it)
    tf.profiler.experimental.start(str(tmp_path))
    a = threadcpu.snapshot()
    for _ in range(40):
        next(it)
    b = threadcpu.snapshot()
    tf.profiler.experimental.stop()
    path = threadcpu.write_beside_newest_capture(str(tmp_path), a, b)
    record = threadcpu.read_beside(path)
    xplane = next(Path(path).parent.glob("*.xplane.pb"))
    lines = {ln.id: ln.name for p in read_space(xplane).planes if p.name.startswith("/host:CPU") for ln in p.lines}
    data_lines = {lid for lid, name in lines.items() if name.startswith("tf_data")}
    measured = {r["line_id"] for r in record["threads"]}
    assert data_lines and data_lines <= measured, (lines, record["threads"])
    assert sum(r["cpu_ms"] for r in record["threads"] if r["line_id"] in data_lines) > 0


@pytest.mark.slow
def test_profile_callback_writes_the_threads_cpu_beside_the_capture_and_analyze_reads_it(tmp_path):
    import json

    import keras
    import numpy as np
    import tensorflow as tf

    from tfbertperf.analyze import analyze
    from tfbertperf.keras import ProfileCallback
    from tfbertperf.profile import threadcpu

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    xs = np.random.default_rng(0).standard_normal((512, 64)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((xs, (xs[:, 0] > 0).astype("int64"))).repeat()
    ds = ds.map(lambda x, y: (tf.tanh(x) * 2.0, y)).batch(16).prefetch(2)
    model.fit(ds, steps_per_epoch=30, epochs=1, verbose=0, callbacks=[ProfileCallback(str(tmp_path), "10:25")])
    record = json.loads(next(tmp_path.glob(f"plugins/profile/*/{threadcpu.SIDECAR}")).read_text())
    assert record["schema"] == threadcpu.SIDECAR_SCHEMA and record["seconds"] > 0
    assert any(r["line_id"] is not None for r in record["threads"])
    att = analyze(str(tmp_path))["attribution"]
    assert att["input_cpu_basis"].startswith("measured") and att["input_cpu_ms_per_step"] is not None


@pytest.mark.parametrize("pool_ms, stolen", [(30.0, 2.5), (0.0, 1.66), (10.0, 2.22)])
def test_a_compute_loses_to_the_input_more_the_more_of_it_runs_in_parallel_regions(pool_ms, stolen):
    # the same 4 ms of input CPU in the compute phase; the compute's CPU: pool_ms on pool threads the capture
    # records no event for (oneDNN, Eigen intra-op), 10 ms on its traced inter-op thread.  Each input core-ms costs
    # the core's share (0.83 / C) and a part of a region held up by its preempted part (0.28 × p): 4 × (0.415 +
    # 0.28 p) → p = 0.75: 2.5 ms, p = 0 (no pool): 1.66, p = 0.5: 2.22 (the rule before, 4 × p: 3, 0, 2)
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "tf_data_private_threadpool/11"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": {"name": "tf_Compute/12"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 4, "args": {"name": "tf_Compute/14"}},  # C = 2
          {"ph": "X", "name": "train 5", "pid": 1, "tid": 1, "ts": 0, "dur": 10000,
           "args": {"step_num": "5", "group_id": "0"}},
          {"ph": "X", "name": "IteratorGetNextOp::DoCompute", "pid": 1, "tid": 1, "ts": 0, "dur": 2000},
          {"ph": "X", "name": "MatMul", "pid": 1, "tid": 3, "ts": 2000, "dur": 8000},
          {"ph": "X", "name": "ExecutorState::Process", "pid": 1, "tid": 2, "ts": 3000, "dur": 4000}]
    record = _measured({11: 4.0, 12: 10.0, 13: pool_ms})
    s = contention.step_contention({"traceEvents": ev}, thread_cpu=record)["steps"][5]
    assert s["stolen_ms"] == pytest.approx(stolen, abs=0.01)
    from tfbertperf.profile import threadcpu

    assert threadcpu.pool_share(record, {11, 12}, {11}) == pytest.approx(pool_ms / (pool_ms + 10.0))


def test_a_py_function_threads_cpu_costs_the_step_whole_however_free_the_cores():
    # the same 4 ms of input CPU in the compute phase, on a thread that ran a py_function: Python under the
    # interpreter lock the step's own Python needs, so it costs the step 4 ms even with p = 0 (a compute on the
    # recorded threads, where a C++ map's CPU costs the core's share, 4 × 0.83 / 2 = 1.66 ms)
    def step(op):
        return [*_STEP_5, {"ph": "X", "name": "MatMul", "pid": 1, "tid": 3, "ts": 2000, "dur": 8000},
                {"ph": "X", "name": op, "pid": 1, "tid": 2, "ts": 3000, "dur": 100}]

    no_pool = _measured({2: 5.0, 1: 4.0})  # the compute's CPU all on a recorded thread: p = 0
    py = contention.step_contention({"traceEvents": step("EagerPyFunc:EagerPyFunc")}, thread_cpu=no_pool)["steps"][5]
    cc = contention.step_contention({"traceEvents": step("ParseExampleV2")}, thread_cpu=no_pool)["steps"][5]
    assert py["input_cpu_ms"] == pytest.approx(cc["input_cpu_ms"], abs=1e-6)
    assert py["stolen_ms"] == pytest.approx(py["input_cpu_ms"], abs=1e-6)
    assert cc["stolen_ms"] == pytest.approx(cc["input_cpu_ms"] * 0.415, abs=1e-3)


def test_eigen_pool_threads_the_listener_gave_lines_still_count_as_the_intra_op_pool():
    """A capture made with the threadpool listener on (plain tf.profiler.experimental.start, threadpool_events=True)
    gives Eigen's intra-op threads lines of listener marks; their measured CPU is still the pool's (p), so the input's
    CPU costs the compute: before, those threads counted as recorded ones, p read 0 and the stolen time 0 (the stall
    program read with its thread-CPU record: 12 % against a truth of 49 %)."""
    from tfbertperf.profile import contention

    def meta(tid, name):
        return {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}}

    def trace(eigen_line: bool):
        evs = [meta(1, "python"), meta(2, "tf_data_iterator_get_next/11"), meta(4, "tf_Compute/33"),
               {"ph": "X", "pid": 1, "tid": 1, "name": "train", "ts": 0, "dur": 10_000, "args": {"step_num": 0}},
               {"ph": "X", "pid": 1, "tid": 2, "name": "FunctionRun", "ts": 0, "dur": 10_000},
               {"ph": "X", "pid": 1, "tid": 4, "name": "ExecutorState::Process", "ts": 0, "dur": 10_000}]
        if eigen_line:
            evs += [meta(3, "tf_numa_-1_Eigen/22"),
                    {"ph": "X", "pid": 1, "tid": 3, "name": "ThreadpoolListener::StartRegion", "ts": 100, "dur": 0}]
        return {"traceEvents": evs}

    record = {"pid": 100, "threads": [{"tid": 100, "line_id": 999, "cpu_ms": 1.0},
                                      {"tid": 101, "line_id": 11, "cpu_ms": 5.0},
                                      {"tid": 102, "line_id": 22, "cpu_ms": 15.0},
                                      {"tid": 103, "line_id": 33, "cpu_ms": 2.0}]}
    with_line = contention.step_contention(trace(True), cores=2, thread_cpu=record)["steps"][0]["stolen_ms"]
    without = contention.step_contention(trace(False), cores=2, thread_cpu=record)["steps"][0]["stolen_ms"]
    assert with_line > 1.0 and with_line == pytest.approx(without)
