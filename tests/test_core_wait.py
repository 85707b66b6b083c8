"""The step's recorded threads waiting for a core while the input ran (profile/core_wait.py): a compute of small
ops one after another on the threads the capture records loses steps to a per-example map beside it, more than
contention.py's fair-share rule counts there (the core's share only, the pool share p ≈ 0)."""

from __future__ import annotations

import pytest

from test_own_training import _host_att
from test_profile import _STEP_5

from tfbertperf.profile import contention, core_wait
from tfbertperf.profile.program_facts import HOST_EVENT_COST_US

# step 5 (test_profile's: 2 ms blocked in get-next, then an 8 ms compute phase) on tf_Compute/2 (a line the capture
# records) while the input thread (tf.data's pool, line 1) shows two short events and used 4 ms of CPU
_EVENTS = [*_STEP_5,
           {"ph": "X", "name": "MatMul", "pid": 1, "tid": 4, "ts": 2000, "dur": 8000},
           {"ph": "X", "name": "MapAndBatchProduce", "pid": 1, "tid": 2, "ts": 3000, "dur": 100},
           {"ph": "X", "name": "ExecutorState::Process", "pid": 1, "tid": 2, "ts": 6000, "dur": 100}]
_INPUT_CPU = 4.0 - 2 * HOST_EVENT_COST_US / 1e3  # the rule takes the profiler's cost of its 2 events out
# contention.py's rule alone: f (1/2) × C (2) × (0.83 / C + 0.28 × p), p = 0.4 / 5.4 (the record's pool share)
_RULE = _INPUT_CPU * 0.5 * 2 * (0.83 / 2 + 0.28 * 0.4 / 5.4)


def _record(runqueue_ms: float = 3.0, main_runqueue_ms: float = 1.0, other_cores: float | None = None,
            input_ms: float = 4.0) -> dict:
    """A 10 ms thread-CPU record: the training thread (tid = pid, no line), tf_Compute/2 (recorded) with 5 ms of
    CPU, an untraced pool thread (line 50) with 0.4 ms — p = 0.4 / 5.4 — and the input thread (line 1)."""
    out = {"schema": "tfbertperf.threadcpu/1", "seconds": 0.01, "cores": 2, "clock": "schedstat", "pid": 100,
           "threads": [{"tid": 100, "line_id": None, "name": "python", "cpu_ms": 0.6, "runqueue_ms": main_runqueue_ms},
                       {"tid": 101, "line_id": 2, "name": "tf_Compute", "cpu_ms": 5.0, "runqueue_ms": runqueue_ms},
                       {"tid": 102, "line_id": 50, "name": "tf_numa_0", "cpu_ms": 0.4, "runqueue_ms": 9.0},
                       {"tid": 103, "line_id": 1, "name": "tf_data_privat", "cpu_ms": input_ms, "runqueue_ms": 2.0},
                       {"tid": 104, "line_id": 77, "name": "tfbertperf-sampler", "cpu_ms": 50.0, "runqueue_ms": 50.0}]}
    if other_cores is not None:
        out["machine"] = {"busy_cores": 1.9, "other_cores": other_cores, "steal_cores": 0.0, "seconds": 0.01}
    return out


def _stolen(record: dict) -> float:
    return contention.step_contention({"traceEvents": _EVENTS}, thread_cpu=record)["steps"][5]["stolen_ms"]


def test_the_waits_are_the_recorded_threads_and_the_share_is_the_inputs_cpu():
    # the training thread's 1 ms and tf_Compute's 3 ms over 10 ms; not the untraced pool's 9 ms, not the input's own
    # wait, not our sampler's; the input's 4 ms of the 10 ms that ran (the sampler's left out)
    rate, share = core_wait.input_share_of_wait(_record(), traced={1, 2}, inputs={1})
    assert rate == pytest.approx(0.4) and share == pytest.approx(0.4)
    # other processes' CPU on the cores took their part of the waits: 1 core over 10 ms
    assert core_wait.input_share_of_wait(_record(other_cores=1.0), {1, 2}, {1})[1] == pytest.approx(0.2)
    # a generator's loader processes: input CPU the rows do not hold
    assert core_wait.input_share_of_wait(_record(), {1, 2}, {1}, children_ms=5.0)[1] == pytest.approx(9 / 15)
    assert core_wait.input_share_of_wait(None, {1, 2}, {1}) == (0.0, 0.0)


def test_a_compute_on_the_recorded_threads_loses_what_they_waited_for_the_inputs_cores():
    # the fair-share rule alone: 1.74 ms (_RULE); the recorded threads waited 12 ms of the 10 ms window (two of them),
    # 1.2 of the 8 ms phase, the input's share 0.4 of it = 3.84 ms
    assert _stolen(_record(runqueue_ms=11.0)) == pytest.approx(1.2 * 8.0 * 0.4, abs=1e-3)
    step = contention.step_contention({"traceEvents": _EVENTS}, thread_cpu=_record(runqueue_ms=11.0))["steps"][5]
    assert step["waits_ms"] == pytest.approx(3.84 - _RULE, abs=1e-3)  # what they added
    # other processes held half the cores: their share of the waits is theirs
    assert _stolen(_record(runqueue_ms=11.0, other_cores=1.0)) == pytest.approx(1.2 * 8.0 * 0.2, abs=1e-3)
    assert _stolen(_record()) == pytest.approx(_RULE, abs=1e-3)  # waits of 0.4 × 8 × 0.4 = 1.28 ms: the rule stands


def test_without_waits_or_input_cpu_the_fair_share_rule_stands():
    # p: threadcpu.pool_share reads the lines (the main thread has none)
    assert _stolen(_record(runqueue_ms=0.0, main_runqueue_ms=0.0)) == pytest.approx(_RULE, abs=1e-3)  # psutil: no waits
    assert _stolen(_record(input_ms=0.0)) == pytest.approx(0.0, abs=1e-6)  # the compute queued behind itself only


def test_the_waits_count_at_most_the_inputs_cpu_in_the_phase():
    # 40 ms of waits over a 10 ms window (many recorded threads queued at once): at most a step-ms per input CPU-ms
    assert _stolen(_record(runqueue_ms=39.0)) == pytest.approx(_INPUT_CPU, abs=1e-3)


def _att(estimate: float, waits: float | None) -> dict:
    """A host attribution from a real run's report, no probe (test_own_training's): the capture's estimate and the
    waits' part of it."""
    att = {**_host_att(estimate, None), "step_time_ms": 4.0, "input_cpu_ms_per_step": 0.9,
           "input_stolen_cpu_fraction": 0.15, "input_cpu_basis": "measured: …"}
    return {**att, "input_stolen_waits_fraction": waits} if waits is not None else att


def test_an_estimate_on_the_line_only_by_the_waits_it_counts_is_undecided():
    # a per-example parse before a small model read 22 % with the waits, 10 % without, against a truth of 17 %
    # (BENCHMARKS.md issue 29, "the recorded threads' wait for a core"): input-bound was the waits' word alone
    from tfbertperf.profile import undecided
    from tfbertperf.profile.verdict import verdict

    att = _att(0.22, 0.12)
    v = undecided.mark(verdict(att, 0.8), att, 0.8)
    assert v["bottleneck"] == "input" and v["undecided"]["source"] == "waits for a core", v["undecided"]
    assert v["undecided"]["between"] == ["input", "compute"]
    assert "the estimate 22% counts the step's threads' waits" in v["summary"] and "reads 10%" in v["summary"]
    assert v["actions"][0]["advice"].startswith("measure the what-if before acting on this verdict")
    # of the unprofiled step the same milliseconds scale alike: 26 % with them, 26 − 12 × 26 / 22 = 11.8 % without
    assert undecided.waits_share({**att, "input_cost_estimate_unprofiled_fraction": 0.26})[1] == \
        pytest.approx(0.26 - 0.12 * 0.26 / 0.22, abs=1e-4)
    # above the line without the waits too, or no waits counted, or a probe measured it: decided
    for decided in (_att(0.40, 0.12), _att(0.22, None)):
        assert undecided.mark(verdict(decided, 0.8), decided, 0.8)["undecided"] is None
    probed = {**att, "input_cost_fraction": 0.30, "input_cost_ci95": 0.02}
    assert undecided.mark(verdict(probed, 0.8), probed, 0.8)["undecided"] is None


# the same step beside a Python generator's thread: its py_function events run Python under the interpreter lock
_PY_EVENTS = [*_STEP_5,
              {"ph": "X", "name": "MatMul", "pid": 1, "tid": 4, "ts": 2000, "dur": 8000},
              {"ph": "X", "name": "EagerPyFunc", "pid": 1, "tid": 2, "ts": 2000, "dur": 8000}]


def _python_record(compute_ms: float) -> dict:
    """A 10 ms record: the generator's thread (line 1) ran 7 ms of Python, the compute `compute_ms` on tf_Compute/2
    and an untraced pool thread, half each; no waits for a core."""
    return {"schema": "tfbertperf.threadcpu/1", "seconds": 0.01, "cores": 2, "clock": "schedstat", "pid": 100,
            "threads": [{"tid": 101, "line_id": 2, "name": "tf_Compute", "cpu_ms": compute_ms / 2, "runqueue_ms": 0.0},
                        {"tid": 102, "line_id": 50, "name": "tf_numa_0", "cpu_ms": compute_ms / 2, "runqueue_ms": 0.0},
                        {"tid": 103, "line_id": 1, "name": "tf_data_privat", "cpu_ms": 7.0, "runqueue_ms": 0.0},
                        {"tid": 104, "line_id": 77, "name": "tfbertperf-sampler", "cpu_ms": 50.0, "runqueue_ms": 0.0}]}


def test_a_python_inputs_cpu_counts_at_most_what_the_computes_own_cpu_leaves_of_the_phase():
    steps = lambda compute_ms: contention.step_contention(  # noqa: E731
        {"traceEvents": _PY_EVENTS}, thread_cpu=_python_record(compute_ms))["steps"][5]
    own = 7.0 - HOST_EVENT_COST_US / 1e3  # its CPU less the profiler's cost of its one event
    # a compute of 1.2 cores (12 ms over 10 ms) on 2: without the input it still takes 0.6 of the 8 ms phase, so
    # the input took at most 3.2 ms of it — not its 7 ms "whole" (a Keras fit behind a Python generator read 73 %
    # against a truth of 42–48 %; BENCHMARKS.md issue 29)
    assert steps(12.0)["stolen_ms"] == pytest.approx(8.0 * (1 - 1.2 / 2), abs=1e-3)
    assert steps(12.0)["waits_ms"] == 0.0
    # a small compute (0.2 cores) leaves 7.2 ms of the phase: the lock's rule stands, the input's CPU whole
    assert steps(2.0)["stolen_ms"] == pytest.approx(own, abs=1e-3)
    # a compute as wide as the cores the whole phase: nothing could have been taken from it
    assert steps(20.0)["stolen_ms"] == 0.0
    assert steps(12.0)["ceiling_ms"] == pytest.approx(3.2) and steps(2.0)["ceiling_ms"] == pytest.approx(7.2)


def test_a_tf_data_maps_cpu_is_not_capped_by_the_computes_threads_cpu():
    # the same record, the input a tf.data map (no py_function): its ops may run on TF's inter-op pool, the
    # compute's threads, so their CPU is no bound (the stall program read 27 / 32 % against truths of 40 / 38 %
    # capped); the fair-share rule stands: 7 ms × f (1/2) × C (2) × (0.83 / 2 + 0.28 × p (1/2)) = 3.9 ms, above the
    # "ceiling" 3.2
    step = contention.step_contention({"traceEvents": _EVENTS}, thread_cpu=_python_record(12.0))["steps"][5]
    assert step["stolen_ms"] == pytest.approx((7.0 - 2 * HOST_EVENT_COST_US / 1e3) * 0.555, abs=1e-3)
    assert step["ceiling_ms"] == float("inf")


def test_the_ceiling_reads_the_record():
    # the compute's CPU in cores over the window: not the input's lines, not our own threads, not rows with no line
    record = {**_python_record(12.0), "threads": [*_python_record(12.0)["threads"],
                                                  {"tid": 105, "line_id": None, "name": "python", "cpu_ms": 9.0}]}
    assert core_wait.compute_cores(record, inputs={1}) == pytest.approx(1.2)
    assert core_wait.compute_cores(None, inputs={1}) is None
    assert core_wait.ceiling(8000.0, 1.2, 2) == pytest.approx(3200.0)
    assert core_wait.ceiling(8000.0, None, 2) == float("inf")  # no record: no ceiling
    assert core_wait.ceiling(8000.0, 3.0, 2) == 0.0


def _read_alone(name: str):
    """(the fixture's folder, its truth.json, analyze's estimate from its gzipped capture alone, the CPU measured)."""
    import json
    from pathlib import Path

    from tfbertperf.analyze import analyze

    here = Path(__file__).parent / "fixtures" / name
    att = analyze(str(here / "vm.xplane.pb.gz"))["attribution"]
    assert att["input_cpu_basis"].startswith("measured"), att["input_cpu_basis"]
    return here, json.loads((here / "truth.json").read_text()), att["input_cost_estimate_fraction"]


def test_a_real_capture_behind_a_python_generator_reads_near_its_truth():
    """tests/fixtures/cpu-keras-generator (its README): a Keras fit behind `Dataset.from_generator` doing 7.2 ms of
    Python a 9.9 ms step.  Its thread-CPU record lies beside the gzipped capture (read there, not beside the
    temporary copy analyze unpacks it to), and the input's Python, counted whole before, is at most what the
    compute's own CPU leaves of the step: 74.8 % before against truths of 43.0 / 46.6 % (the what-if 43.4 %)."""
    from tfbertperf.analyze import analyze

    here, truth, est = _read_alone("cpu-keras-generator")
    assert abs(est - truth["truth_loop"]) < 0.08 and abs(est - truth["truth_fit"]) < 0.05, (est, truth)
    # the step file beside it (renamed, so named here): the measured what-if is the figure
    doc = analyze(str(here / "vm.xplane.pb.gz"), steps=str(here / "generator.steps.json"))
    assert doc["attribution"]["input_cost_fraction"] == pytest.approx(truth["what_if"], abs=1e-3)


def test_the_unprofiled_share_stays_under_the_captured_ceiling():
    from tfbertperf.profile.unprofiled import host_estimate

    # a generator's fit: the capture read 47.8 % of a 12.8 ms step at the ceiling; the unprofiled step 10.3 ms.  Its
    # input's milliseconds kept read 59.4 % (truths 46-49 %); the compute's share of the cores is the step's either way
    assert host_estimate(0.478, 12.8, 10.3) == pytest.approx(0.478 * 12.8 / 10.3)
    assert host_estimate(0.478, 12.8, 10.3, most=0.478) == pytest.approx(0.478)
    assert host_estimate(0.30, 12.8, 10.3, most=0.60) == pytest.approx(0.30 * 12.8 / 10.3)  # below it: as before
    assert host_estimate(0.50, 12.8, 10.3, most=0.45) == pytest.approx(0.50)  # never below the captured share


def test_a_convolution_nets_parallel_regions_cost_less_than_lock_step():
    """tests/fixtures/cpu-keras-audio (its README): TensorFlow's simple-audio pipeline (a per-example STFT map on
    AUTOTUNE) before its CNN, 89 % of the compute's CPU in oneDNN's and Eigen's pools (p).  The rule before counted
    each input core-ms at p (lock-step: 0.89 ms) and read 32.0 % against truths of 19.0 / 19.8 %; the truths needed
    ~0.53, and core_wait.per_core_ms counts 0.83 / 2 + 0.28 × 0.89 = 0.66."""
    assert core_wait.per_core_ms(0.89, 2) == pytest.approx(0.664, abs=1e-3)
    assert core_wait.per_core_ms(0.0, 1) == pytest.approx(0.83)  # one core: the core's share is FLOOR itself
    _, truth, est = _read_alone("cpu-keras-audio")
    assert abs(est - truth["truth_loop"]) < 0.06 and abs(est - truth["truth_fit"]) < 0.06, (est, truth)
