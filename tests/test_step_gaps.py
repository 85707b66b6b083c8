"""A loop that fetches its batch between its step markers (`for batch in dataset:` with the marker around the step
only): each step widened to the next marker's start where the gap holds the loop's get-next
(tfbertperf/profile/step_gaps.py)."""

from __future__ import annotations

import pytest

from profile_fixtures import synthetic_xspace
from tfbertperf.profile import step_gaps


def _loop(tmp_path, fetch_us: float, name="IteratorGetNextOp::DoCompute"):
    events = []
    for i in range(4):  # a 2 ms step, then the next batch's fetch before the next marker
        t0 = i * (2000 + fetch_us + 100)
        events.append(("train", t0, 2000, {"step_num": i, "_r": 1}))
        if fetch_us:
            events.append((name, t0 + 2050, fetch_us, {}))
    return [synthetic_xspace(tmp_path / "p.xplane.pb", {"python3": events})]


def _rows():
    return [{"step": f"step {i}", "step_time_ms": 2.0, "input": 0.0, "host_compute": 1.9, "other": 0.1}
            for i in (1, 2)]


def test_a_fetch_between_the_markers_widens_each_step_by_its_gap_and_counts_the_wait_as_input(tmp_path):
    gaps = step_gaps.gaps_by_step(_loop(tmp_path, 30_000))
    assert sorted(gaps) == [0, 1, 2] and gaps[1] == pytest.approx((30.1, 30.0))
    rows, added, fetched = step_gaps.widen(_rows(), _loop(tmp_path, 30_000))
    assert added == pytest.approx(30.1) and fetched == pytest.approx(30.0)
    assert rows[0]["step_time_ms"] == pytest.approx(32.1) and rows[0]["input"] == pytest.approx(30.0)
    assert rows[0]["other"] == pytest.approx(0.2) and rows[0]["host_compute"] == 1.9


def test_gaps_without_the_loops_fetch_leave_the_steps_as_they_were(tmp_path):
    # Keras' callbacks between ProfileCallback's markers, or a fetch on another thread: no widening
    rows = _rows()
    assert step_gaps.widen(rows, _loop(tmp_path, 0)) == (rows, 0.0, 0.0)
    assert step_gaps.widen(rows, _loop(tmp_path, 3_000, name="SomethingElse")) == (rows, 0.0, 0.0)


def test_the_console_says_the_steps_were_widened_and_how_to_mark_the_fetch():
    assert step_gaps.note({}) == [] and step_gaps.note({"steps_widened_ms": 0.0}) == []
    [line] = step_gaps.note({"steps_widened_ms": 30.1})
    assert "fetches its batches between its step markers (30.10 ms a step)" in line and "timer.steps(" in line
    assert "tf_steps.StepTimer" in line  # a TensorFlow loop's; a Python loader's capture (JAX) names JAX's
    [line] = step_gaps.note({"steps_widened_ms": 6.5, "input_python_loader_ms_per_step": 6.4})
    assert "tfbertperf.jax_steps.StepTimer: `for batch in timer.steps(loader, step, state)`" in line, line


def test_wide_gaps_between_markers_that_hold_no_fetch_the_capture_can_name_are_said(tmp_path):
    # a loop whose fetch the capture cannot see (a JAX loader captured without the Python tracer): 3.1 ms of each
    # 5.1 ms step outside the markers, counted by no figure — said, not guessed; narrow gaps (Keras' own callbacks
    # between its markers) are not
    att = step_gaps.keys(0.0, _loop(tmp_path, 3_000, name="SomethingElse"))
    assert att == {"steps_gap_unexplained_ms": pytest.approx(3.1)}
    [line] = step_gaps.note({**att, "step_time_ms": 2.0})
    assert "3.10 ms a step between its step markers" in line and "no figure here counts it" in line, line
    assert step_gaps.keys(0.0, _loop(tmp_path, 0)) == {} and step_gaps.keys(0.0, None) == {}
    assert step_gaps.keys(30.1, _loop(tmp_path, 30_000)) == {"steps_widened_ms": 30.1}  # widened: said so instead


def test_a_gap_that_holds_fits_validation_counts_only_up_to_it(tmp_path):
    # the fetch of step 1's gap, then fit's validation (profile/outside_steps.py marks it) before step 2's marker:
    # the step is widened by its gap up to the validation, not by the validation's 80 ms
    from tfbertperf.profile import outside_steps

    events = []
    for i in range(4):
        t0 = i * 10_000 + (80_000 if i >= 2 else 0)
        events.append(("train", t0, 2000, {"step_num": i, "_r": 1}))
        events.append(("IteratorGetNextOp::DoCompute", t0 + 2050, 3000, {}))
    events.append((outside_steps.EVENT, 10_000 + 6000, 83_000, {}))
    xplanes = [synthetic_xspace(tmp_path / "p.xplane.pb", {"python3": events})]
    gaps = step_gaps.gaps_by_step(xplanes)
    assert gaps[1] == pytest.approx((4.0, 3.0)) and gaps[0] == pytest.approx((8.0, 3.0))
