"""The profiler's cost per event on the input threads, measured per capture (profile/eventcost.py), and the stolen
CPU that follows from it (profile/contention.py)."""

from __future__ import annotations

import pytest

from tfbertperf.profile import contention, eventcost
from tfbertperf.profile.program_facts import HOST_EVENT_COST_US


def _per_example_map_step(events: int) -> list[dict]:
    # step 5: 2 ms blocked in get-next, then an 8 ms compute phase beside a per-example map on the prefetch
    # thread (line 1), which the profiler recorded as `events` short scheduling events
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": t, "args": {"name": n}}
          for t, n in ((1, "python"), (2, "tf_data_private_threadpool/1"), (3, "tf_Compute/2"), (4, "tf_Compute/3"))]
    ev += [{"ph": "X", "name": "train 5", "pid": 1, "tid": 1, "ts": 0, "dur": 10000,
            "args": {"step_num": "5", "group_id": "0"}},
           {"ph": "X", "name": "IteratorGetNext", "pid": 1, "tid": 1, "ts": 0, "dur": 2000},
           {"ph": "X", "name": "MatMul", "pid": 1, "tid": 3, "ts": 2000, "dur": 8000}]
    ev += [{"ph": "X", "name": "ParseExampleV2", "pid": 1, "tid": 2, "ts": 2000 + 7 * i, "dur": 1}
           for i in range(events)]
    return ev


def _record(input_ms: float, before: dict | None = None) -> dict:
    # threadcpu.json: the input thread (line 1, tid 101) used input_ms over the one-step window; the compute
    # half on its recorded thread (line 2), half on a pool thread the capture shows no event for (p = 1/2)
    rows = [{"tid": 101, "line_id": 1, "name": "tf_data", "cpu_ms": input_ms, "runqueue_ms": 0.0},
            {"tid": 102, "line_id": 2, "name": "tf_Compute", "cpu_ms": 5.0, "runqueue_ms": 0.0},
            {"tid": 150, "line_id": 50, "name": "python", "cpu_ms": 5.0, "runqueue_ms": 0.0}]
    return {"schema": "tfbertperf.threadcpu/1", "seconds": 0.01, "cores": 2, "clock": "schedstat", "threads": rows,
            **({"before": before} if before else {})}


def test_the_profilers_cost_an_event_is_measured_from_the_steps_before_the_window():
    # 1,000 events in the step; the input thread used 4.0 ms in it and 3.5 ms a step in the 10 steps before the
    # capture: the profiler added 0.5 ms, 0.5 µs an event — not the 1.7 µs estimate, which would leave 2.3 ms
    before = {"steps": 10, "window_steps": 1, "threads": [{"tid": 101, "cpu_ms": 35.0}, {"tid": 102, "cpu_ms": 40.0}]}
    res = contention.step_contention({"traceEvents": _per_example_map_step(1000)},
                                     thread_cpu=_record(4.0, before))
    s = res["steps"][5]
    assert res["profiler_event_cost"] == {"us": pytest.approx(0.5), "basis": "measured"}
    assert s["input_cpu_ms"] == pytest.approx(3.5, abs=0.01)
    # next to a compute 2 wide on 2 cores, half in parallel regions: 1/2 ms a step per input core-millisecond
    assert s["stolen_ms"] == pytest.approx(1.75, abs=0.01)


def test_without_the_span_before_the_window_the_estimate_stays_and_says_so():
    res = contention.step_contention({"traceEvents": _per_example_map_step(1000)}, thread_cpu=_record(4.0))
    assert res["profiler_event_cost"] == {"us": HOST_EVENT_COST_US, "basis": "estimated"}
    assert res["steps"][5]["input_cpu_ms"] == pytest.approx(4.0 - 1000 * HOST_EVENT_COST_US / 1e3, abs=0.01)
    # no measured input thread at all: nothing taken off, nothing to say
    assert contention.step_contention({"traceEvents": _per_example_map_step(10)})["profiler_event_cost"] is None


@pytest.mark.parametrize("before, expected", [
    # the input thread was not alive before the window (a new epoch's iterator): no figure
    ({"steps": 10, "window_steps": 1, "threads": [{"tid": 999, "cpu_ms": 35.0}]}, (HOST_EVENT_COST_US, "estimated")),
    # it used more a step before than in the window: the recording cost nothing measurable, not a negative
    ({"steps": 10, "window_steps": 1, "threads": [{"tid": 101, "cpu_ms": 50.0}]}, (0.0, "measured")),
    # a cold pipeline before (far less CPU a step): clipped at MAX_EVENT_COST_US
    ({"steps": 10, "window_steps": 1, "threads": [{"tid": 101, "cpu_ms": 0.0}]},
     (eventcost.MAX_EVENT_COST_US, "measured")),
    # malformed: the estimate, never a wrong figure
    ({"steps": "ten", "window_steps": 1, "threads": []}, (HOST_EVENT_COST_US, "estimated")),
])
def test_the_measured_cost_where_the_span_before_cannot_give_it(before, expected):
    us, basis = eventcost.per_event_us(_record(4.0, before), {101: (4000.0, 500)})
    assert (us, basis) == (pytest.approx(expected[0]), expected[1])


@pytest.mark.parametrize("traced, warmup, at", [
    ((19, 41), 5, 5),    # ProfileCallback's default 20:40: the 14 steps after the warm-up
    ((40, 51), 5, 29),   # K = the window's length, 11
    ((44, 48), 5, 34),   # a short window: at least MIN_BEFORE_STEPS
    ((12, 20), 5, None),  # 7 steps after the warm-up: too few
    (None, 5, None),
])
def test_the_span_before_the_window(traced, warmup, at):
    assert eventcost.before_at(traced, warmup) == at
