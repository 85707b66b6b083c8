"""A user's own training, measured (issue 29 items 1, 2, 6): the step file beside a capture (profile/stepfile.py),
`analyze` reading it (the profiler's cost measured, the verdict about the program without the profiler, the
what-if's input cost), gzipped captures read as they are, and the JAX helper that writes the same file."""

from __future__ import annotations

import contextlib
import gzip
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tfbertperf.analyze import analyze
from tfbertperf.errors import UsageError
from tfbertperf.profile import stepfile, threadcpu

from profile_fixtures import H100, synthetic_xspace

needs_h100 = pytest.mark.skipif(not H100.is_dir(), reason=f"H100 captures not found at {H100}")


def _launch_heavy_capture(folder, busy_us=6_500, steps=4, step_us=10_000):
    """`steps` steps of 10 ms under the profiler: the device computes `busy_us`, the rest it waits for the host
    launching (cuLaunchKernel on the training thread) — launch-bound as captured."""
    host, dev = {"python3": []}, {"Stream #1(Compute)": []}
    for i in range(steps):
        t = step_us * i
        host["python3"] += [("train", t, step_us - 100, {"step_num": i, "_r": 1}),
                            ("cuLaunchKernel", t, step_us - busy_us, {})]
        dev["Stream #1(Compute)"].append(("fusion", t + step_us - busy_us, busy_us - 100, {"hlo_module": "jit_step"}))
    folder.mkdir(parents=True, exist_ok=True)
    return synthetic_xspace(folder / "host.xplane.pb", host, dev)


def test_profiled_steps_40pct_slower_than_unprofiled_read_as_the_program_without_the_profiler(tmp_path):
    # Failure shape 3: the profiler made each step 40 % slower (10 ms captured, 7.14 ms without it), all of it
    # in the host's launch path.  Captured, the device waits 35 % of the step on launches: launch-bound.
    session = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    capture = _launch_heavy_capture(session)
    captured = analyze(str(capture))
    assert captured["verdict"]["bottleneck"] == "other" and captured["step_file"] is None
    assert captured["attribution"]["profiler_cost"]["basis"].startswith("estimate")
    unprofiled = 10.0 / 1.4
    doc = stepfile.document([12.0] + [unprofiled] * 20 + [10.0] * 4 + [unprofiled] * 5,
                            profiled_steps=(21, 25), warmup_steps=1, written_by="test")
    stepfile.write(session / stepfile.STEP_FILE, doc)
    measured = analyze(str(tmp_path))  # the logdir: the step file is found beside the capture
    att = measured["attribution"]
    assert measured["step_file"]["unprofiled_step_ms"] == pytest.approx(unprofiled, abs=1e-3)
    assert att["profiler_cost"]["added_ms_per_step"] == pytest.approx(10.0 - unprofiled, abs=0.05)
    assert att["profiler_cost"]["basis"].startswith("measured")
    # without the profiler: busy 6.4 of 7.14 ms; the launch wait left is ~9 % < the 15 % launch threshold: the
    # profiler's cost comes off the launch, where it recorded the events and the kernel (0.1 ms idle recorded none)
    assert att["unprofiled"]["device_busy_fraction"] == pytest.approx(6.4 / unprofiled, abs=0.01)
    launch = att["breakdown_ms"]["kernel_launch"] - (att["step_time_ms"] - unprofiled)
    assert att["unprofiled"]["fractions"]["kernel_launch"] == pytest.approx(launch / unprofiled, abs=0.005)
    assert att["unprofiled"]["breakdown_ms"]["other"] == pytest.approx(att["breakdown_ms"]["other"], abs=1e-3)
    assert measured["verdict"]["bottleneck"] == "compute"
    assert measured["accelerator_utilization"] == pytest.approx(6.4 / unprofiled, abs=0.01)
    added = att["profiler_cost"]["added_ms_per_step"]
    assert f"without the profiler (the 7.1 ms unprofiled step; the capture added {added:.1f} ms a step)" in \
        measured["verdict"]["summary"]
    assert not any("batch size" in r for r in measured["verdict"]["recommendations"])


def test_a_launch_wait_the_profiler_does_not_explain_stays_launch_bound(tmp_path):
    capture = _launch_heavy_capture(tmp_path / "s", busy_us=5_000)
    steps = tmp_path / "steps.json"
    stepfile.write(steps, stepfile.document([9.5] * 10, written_by="test"))  # the profiler added only 0.5 ms
    doc = analyze(str(capture), steps=str(steps))
    assert doc["verdict"]["bottleneck"] == "other"
    assert doc["attribution"]["unprofiled"]["fractions"]["kernel_launch"] == pytest.approx(4.5 / 9.5, abs=0.01)


def test_gzipped_capture_is_read_as_it_is_with_its_step_file_beside_it(tmp_path):
    plain = _launch_heavy_capture(tmp_path / "work")
    session = tmp_path / "shared"
    session.mkdir()
    gz = session / "host.xplane.pb.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    stepfile.write(session / stepfile.STEP_FILE, stepfile.document([10 / 1.4] * 8))
    doc = analyze(str(gz))
    assert doc["profile"]["xplanes"] == [str(gz)] and doc["profile"]["session"] == "shared"
    assert doc["step_file"]["file"] == str(session / stepfile.STEP_FILE)
    assert doc["verdict"]["bottleneck"] == "compute"


def test_a_gz_that_is_not_gzip_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "host.xplane.pb.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(UsageError, match=r"host\.xplane\.pb\.gz: not a readable gzip file"):
        analyze(str(bad))


@pytest.mark.parametrize("content,match", [
    ("{", "not a readable step file"),
    ('{"schema": "other"}', "not a step file"),
    ('{"schema": "tfbertperf.steps/1", "step_time_ms": [1, -2]}', "'step_time_ms' must be a list"),
    ('{"schema": "tfbertperf.steps/1", "step_time_ms": [1, 2], "profiled_steps": [3, 1]}', "'profiled_steps'"),
    ('{"schema": "tfbertperf.steps/1", "step_time_ms": [1, 2], "batches_per_step": 0}', "'batches_per_step' must"),
    ('{"schema": "tfbertperf.steps/1", "step_time_ms": [1, 2], "what_if": {"compute_only_step_ms": [1], '
     '"autotuned_prefetch": [{"iterator": 3}]}}', "'what_if.autotuned_prefetch' must be a list"),
    ('{"schema": "tfbertperf.steps/1", "step_time_ms": [1, 2], "what_if": {"compute_only_step_ms": [1], '
     '"blocks": [["a", 1]]}}', "'what_if.blocks' must be a list of"),
])
def test_a_bad_step_file_is_refused_in_one_line_naming_it(tmp_path, content, match):
    f = tmp_path / "steps.json"
    f.write_text(content)
    with pytest.raises(UsageError, match=match) as e:
        stepfile.read(f)
    assert "\n" not in str(e.value)


def test_a_step_of_k_batches_says_so_in_the_step_file_and_on_the_console():
    # steps_per_execution=k: the callbacks time one call of k batches; "0.67 ms/step" read as per batch was k× off
    from tfbertperf.report.console import measured_lines

    doc = stepfile.document([4.0] * 12, warmup_steps=2, batches_per_step=4)
    assert doc["batches_per_step"] == 4 and doc["summary"]["batches_per_step"] == 4
    assert "batches_per_step" not in stepfile.document([4.0] * 12)  # the schema as before where k = 1
    line = measured_lines({"step_file": doc["summary"] | {"file": "f.json"}})[0]
    assert line.endswith("4.00 ms/step (a step: one call of 4 batches)"), line


def test_step_file_summary_leaves_out_warmup_window_and_probe_steps_and_measures_the_what_if():
    times = [50.0, 11.0, 10.0, 9.0, 99.0, 1.0, 10.0, 30.0, 30.0, 12.0, 8.0]
    doc = stepfile.document(times, profiled_steps=(7, 9), warmup_steps=1, excluded_steps=[4, 5],
                            what_if={"compute_only_step_ms": [6.0, 6.0, 4.0, 4.0], "blocks": [[4, 2], [9, 2]]})
    s = stepfile.summarize(doc, "t")
    assert s.unprofiled_steps == 6 and s.unprofiled_step_ms == pytest.approx(10.0)  # 11 10 9 10 12 8
    assert s.profiled_step_ms == pytest.approx(30.0) and s.compute_only_step_ms == pytest.approx(5.0)
    assert s.input_cost_fraction == pytest.approx(0.5)
    assert s.T_blocks_ms == [pytest.approx(10.0), pytest.approx(10.0)] and s.T_c_blocks_ms == [6.0, 4.0]
    assert doc["summary"]["input_cost_fraction"] == pytest.approx(0.5)


def test_the_what_if_compares_a_block_with_the_real_steps_around_it_on_a_drifting_machine():
    # the machine is twice as slow for the first 20 steps; the one probe block ran then, at half the step
    times = [20.0] * 20 + [10.0] * 20
    doc = stepfile.document(times, excluded_steps=[10, 11, 12, 13],
                            what_if={"compute_only_step_ms": [10.0] * 4, "blocks": [[10, 4]]})
    s = stepfile.summarize(doc, "t")
    assert s.unprofiled_step_ms == pytest.approx((16 * 20 + 20 * 10) / 36)  # the run's step: all unprofiled
    assert s.T_blocks_ms == [pytest.approx(20.0)] and s.input_cost_fraction == pytest.approx(0.5)


def test_an_interrupted_compute_only_step_is_left_out_of_t_c_but_a_slow_real_step_counts():
    # the tokenizer fit of issue 29: one probe step of 192 ms among ~5 ms ones (a collection, not the step's
    # compute) made T_c 10 ms and the measured input cost 0 %; a slow *real* step is input and stays in T
    times = [8.0] * 10 + [80.0] + [8.0] * 19
    probe = [5.0, 5.0, 192.0, 5.0, 5.0, 5.0]
    doc = stepfile.document(times, excluded_steps=[20, 21, 22], what_if={"compute_only_step_ms": probe,
                                                                        "blocks": [[5, 3], [20, 3]]})
    s = stepfile.summarize(doc, "t")
    assert s.compute_only_interrupted == 1 and s.compute_only_steps == 5 and s.compute_only_step_ms == 5.0
    assert s.T_c_blocks_ms == [5.0, 5.0]
    assert s.unprofiled_step_ms == pytest.approx((26 * 8.0 + 80.0) / 27)  # the 80 ms real step counts
    t = [statistics.fmean(x) for x in ([8.0] * 5 + [8.0] * 5, [8.0] * 5 + [8.0] * 5)]
    assert s.T_blocks_ms == t and s.input_cost_fraction == pytest.approx(3 / 8)
    assert s.as_dict()["compute_only_interrupted"] == 1
    # within 4× of the median: kept (a slower probe block is a slower machine, not an interruption)
    s = stepfile.summarize(stepfile.document(times, what_if={"compute_only_step_ms": [5.0, 5.0, 19.0]}), "t")
    assert s.compute_only_interrupted == 0 and s.compute_only_step_ms == pytest.approx(29 / 3)
    # a clock too coarse for the step (most probe steps timed at 0 ms): nothing to judge by, every step kept
    s = stepfile.summarize(stepfile.document(times, what_if={"compute_only_step_ms": [0.0, 0.0, 1.0]}), "t")
    assert s.compute_only_interrupted == 0 and s.compute_only_step_ms == pytest.approx(1 / 3)


def test_the_measured_input_cost_carries_a_95_percent_interval_from_its_blocks_spread():
    # four blocks, each paired with 5 real steps of 10 ms on each side; T_c 5 / 7 / 5 / 7 ms: d = 5, 3, 5, 3 ms,
    # sd 1.1547, t(0.975, 3) = 3.182 → 3.182 × 1.1547 / 2 / 10 = 0.1837 around a cost of 0.4
    times = [10.0] * 60
    blocks = [[10, 2], [22, 2], [34, 2], [46, 2]]
    doc = stepfile.document(times, excluded_steps=[10, 11, 22, 23, 34, 35, 46, 47],
                            what_if={"compute_only_step_ms": [5.0, 5.0, 7.0, 7.0, 5.0, 5.0, 7.0, 7.0],
                                     "blocks": blocks})
    s = stepfile.summarize(doc, "t")
    assert s.input_cost_fraction == pytest.approx(0.4)
    assert s.input_cost_ci95 == pytest.approx(3.182 * 1.1547 / 2 / 10, rel=1e-3)
    assert s.as_dict()["input_cost_ci95"] == pytest.approx(s.input_cost_ci95, abs=1e-4)
    # steady blocks: a narrow interval; one block: none
    steady = stepfile.document(times, excluded_steps=[10, 11, 22, 23, 34, 35, 46, 47],
                               what_if={"compute_only_step_ms": [6.0] * 8, "blocks": blocks})
    assert stepfile.summarize(steady, "t").input_cost_ci95 == pytest.approx(0.0)
    one = stepfile.document(times, excluded_steps=[10, 11], what_if={"compute_only_step_ms": [6.0, 6.0],
                                                                     "blocks": [[10, 2]]})
    assert stepfile.summarize(one, "t").input_cost_ci95 is None


def test_blocks_all_after_the_last_step_pair_each_with_its_stretch_of_the_fit_in_order():
    # 40 steps, warm-up 2: the 38 real steps in two stretches of 19 (10 ms, then 20 ms); two blocks after the loop,
    # T_c 4 and 6 ms: T_blocks 10 and 20, d = 6 and 14 → cost (30 − 10) / 30, interval t(0.975, 1) × sd / √2 / 15
    times = [50.0, 50.0] + [10.0] * 19 + [20.0] * 19
    doc = stepfile.document(times, warmup_steps=2, what_if={"compute_only_step_ms": [4.0, 4.0, 6.0, 6.0],
                                                            "blocks": [[40, 2], [40, 2]]})
    s = stepfile.summarize(doc, "t")
    assert s.probe_after_steps and s.T_blocks_ms == [10.0, 20.0] and s.T_c_blocks_ms == [4.0, 6.0]
    assert s.input_cost_fraction == pytest.approx(20 / 30)
    assert s.input_cost_ci95 == pytest.approx(12.706 * statistics.stdev([6.0, 14.0]) / 2 ** 0.5 / 15)
    # one of them inside the fit: each against the steps around it, as ever
    inside = stepfile.summarize(stepfile.document(times, warmup_steps=2, excluded_steps=[21], what_if={
        "compute_only_step_ms": [4.0, 4.0, 6.0, 6.0], "blocks": [[21, 2], [40, 2]]}), "t")
    assert not inside.probe_after_steps and inside.T_blocks_ms[0] == pytest.approx(15.0)  # 5 steps each side


def test_a_wide_interval_gets_a_hint_to_raise_the_probe_steps():
    from tfbertperf.profile.keras_callback import precision_hint

    hint = precision_hint({"input_cost_fraction": 0.105, "input_cost_ci95": 0.093}, 40)
    assert "10.5 % is ± 9.3 pp" in hint and "probe_steps=160" in hint and "\n" not in hint
    assert precision_hint({"input_cost_fraction": 0.105, "input_cost_ci95": 0.034}, 120) is None
    one = precision_hint({"input_cost_fraction": 0.105, "input_cost_ci95": None}, 20)  # one block: no interval
    assert "one probe block" in one and "10.5 %" in one
    # the auto probe ran every block the fit had room for: a longer fit, by the square of the interval's ratio
    auto = {"input_cost_fraction": 0.105, "input_cost_ci95": 0.093, "probe_blocks": 7}
    hint = precision_hint(auto, 0, 0.025)
    assert "from the spread of its 7 probe blocks" in hint and "a fit about 14× as long" in hint, hint
    assert "±2.5 pp" in hint and "probe_steps=" not in hint and "decide" not in hint  # 10.5 ± 9.3: below 20 %
    # straddling the 20 % line: the hint also says what would decide the verdict, as analyze's advice does
    straddles = precision_hint({**auto, "input_cost_fraction": 0.39, "input_cost_ci95": 0.256}, 0, 0.025)
    assert "a fit about 100× as long would let the probe reach ±2.5 pp" in straddles
    assert "one about 1.8× as long would decide whether the input costs more than 20%" in straddles, straddles
    near = precision_hint({**auto, "input_cost_fraction": 0.134, "input_cost_ci95": 0.071}, 0, 0.025)
    assert "one about 1.2× as long would decide" in near, near  # it said "about 1×", as if the fit sufficed
    assert precision_hint({**auto, "input_cost_ci95": 0.06}, 0, 0.1) is None  # the target it was given was met
    loop = precision_hint(auto, 0, 0.025, "StepTimer", "run")  # a JAX loop's probe: no "fit", no "ProfileCallback"
    assert loop.startswith("tfbertperf StepTimer:") and "the run had room" in loop and " fit" not in loop, loop


def test_every_step_profiled_leaves_the_profiler_cost_estimated(tmp_path):
    capture = _launch_heavy_capture(tmp_path / "s")
    steps = tmp_path / "steps.json"
    stepfile.write(steps, stepfile.document([10.0] * 4, profiled_steps=(0, 4)))
    doc = analyze(str(capture), steps=str(steps))
    assert doc["step_file"]["unprofiled_step_ms"] is None
    assert doc["attribution"]["profiler_cost"]["basis"].startswith("estimate")


@needs_h100
def test_h100_compute_capture_with_its_unprofiled_steps_measures_the_profilers_cost():
    truth = json.loads((H100 / "truth.json").read_text())["regimes"]["compute"]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        steps = Path(d) / "steps.json"
        stepfile.write(steps, stepfile.document(truth["T_blocks_ms"], written_by="truth.json"))
        doc = analyze(str(H100 / "h100-compute.xplane.pb.gz"), steps=str(steps))
    att = doc["attribution"]
    T = sum(truth["T_blocks_ms"]) / 3
    assert att["profiler_cost"]["added_ms_per_step"] == pytest.approx(att["step_time_ms"] - T, abs=0.01)
    assert att["profiler_cost"]["added_ms_per_step"] > 10  # the estimate from host events said ~6 ms
    # device busy ÷ the unprofiled step: ~29 of 36 ms
    assert doc["accelerator_utilization"] == pytest.approx(att["breakdown_ms"]["device_compute"] / T, abs=0.005)
    assert 0.75 < doc["accelerator_utilization"] < 0.85
    # busy ~29 of the 36 ms the program takes without the profiler: compute-bound, no launch advice (issue 29)
    assert doc["verdict"]["bottleneck"] == "compute", doc["verdict"]["summary"]
    assert not any("launch" in r or "batch size" in r for r in doc["verdict"]["recommendations"])
    assert "without the profiler (the 36.1 ms unprofiled step" in doc["verdict"]["summary"]
    assert "because kernel launch takes 21%" in doc["verdict"]["summary"]
    # the answer analyze opens with names the program as it runs without the profiler, and no launch advice
    from tfbertperf.report.headline import headline

    h = headline(doc)
    assert h["line"].startswith("compute-bound on the accelerator: input costs ") and "launch" not in h["line"]


@needs_h100
@pytest.mark.parametrize("regime,bottleneck", [("stall", "input"), ("h2d", "transfer")])
def test_h100_bound_captures_keep_their_verdict_with_their_unprofiled_steps(tmp_path, regime, bottleneck):
    truth = json.loads((H100 / "truth.json").read_text())["regimes"][regime]
    steps = tmp_path / "steps.json"
    stepfile.write(steps, stepfile.document(truth["T_blocks_ms"]))
    doc = analyze(str(H100 / f"h100-{regime}.xplane.pb.gz"), steps=str(steps))
    assert doc["verdict"]["bottleneck"] == bottleneck
    share = doc["attribution"]["unprofiled"]["fractions"]["input" if regime == "stall" else "host_to_device"]
    assert abs(share - truth["input_fraction"]) <= 0.10


def test_analyze_cli_takes_steps_and_prints_the_measured_cost(tmp_path):
    capture = _launch_heavy_capture(tmp_path / "s")
    steps = tmp_path / "steps.json"
    stepfile.write(steps, stepfile.document([10 / 1.4] * 8))
    out = subprocess.run([sys.executable, "-m", "tfbertperf.analyze", str(capture), "--steps", str(steps)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "profiler cost (measured): +2.83 ms a step" in out.stdout  # the 9.97 ms captured step − 7.14 ms
    # the console opens with the one answer, as a run's does (issue 30): verdict, input-cost figure and its source
    first = out.stdout.splitlines()[0]
    assert first.startswith("answer: ") and "of the step (" in first and len(first) <= 120
    missing = subprocess.run([sys.executable, "-m", "tfbertperf.analyze", str(capture), "--steps",
                              str(tmp_path / "nope.json")], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nope.json: no such file" in missing.stderr


def test_jax_step_timer_writes_the_step_file_beside_its_capture_without_jax(tmp_path):
    # jax.profiler's three calls and block_until_ready are replaced by plain callables that do what they do to
    # the file system and the clock (a capture folder with an XSpace in it), so this runs without JAX;
    # tests/test_jax_steps.py runs StepTimer with the real jax.profiler on a jitted loop.
    import time

    from tfbertperf.jax_steps import StepTimer

    calls = []

    def start_trace(logdir, **kw):
        calls.append(("start", kw))

    def stop_trace():
        calls.append(("stop",))
        _launch_heavy_capture(tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00")

    class Annotation:
        def __init__(self, name, step_num):
            calls.append(("step", name, step_num))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    waited = []
    timer = StepTimer(tmp_path / "logs", profile_steps="3:5", warmup_steps=1, start_trace=start_trace,
                      stop_trace=stop_trace, annotation=Annotation, wait=waited.append, profiler_options="opts")
    for i in range(8):
        with timer.step() as step:
            time.sleep(0.002)
            step.result = i
    path = timer.close()
    # "3:5" is captured from step 2 to step 5 inclusive: one step more on each side, which xprof's step table drops
    assert calls[:3] == [("step", "train", 0), ("step", "train", 1), ("start", {"profiler_options": "opts"})]
    assert ("stop",) in calls and calls.index(("stop",)) == calls.index(("step", "train", 6)) - 1
    assert waited == list(range(8)) and len(timer.step_times_ms) == 8 and min(timer.step_times_ms) >= 2.0
    assert path == tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00" / stepfile.STEP_FILE
    s = stepfile.read(path)
    # 8 − warm-up 1 − profiled 4, less the steps right after the stop as long as it took (stepfile.after_stop)
    after = stepfile.after_stop(timer.step_times_ms, (2, 6), 1, timer._stop_ms)
    assert json.loads(path.read_text())["excluded_steps"] == after and all(i >= 6 for i in after)
    assert s.profiled_steps == [2, 6] and s.unprofiled_steps == 3 - len(after)
    assert analyze(str(tmp_path / "logs"))["step_file"]["file"] == str(path)
    # beside it, the threads' CPU over the window (a loader thread's or process's: profile/host_loader.py)
    record = threadcpu.read_beside(path.parent / "vm.xplane.pb")
    assert record and record["threads"] and "children" in record, record


def test_a_step_timer_that_cannot_write_its_thread_cpu_record_goes_on_and_says_so(tmp_path, monkeypatch):
    from tfbertperf.jax_steps import StepTimer

    session = tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"

    def refuse(*a):
        raise OSError("disk full")

    monkeypatch.setattr(threadcpu, "write_in", refuse)
    timer = StepTimer(tmp_path / "logs", profile_steps="2:4", warmup_steps=1, start_trace=lambda logdir, **kw: None,
                      stop_trace=lambda: _launch_heavy_capture(session), annotation=lambda n, step_num: _NullMark(),
                      wait=lambda x: None)
    with pytest.warns(UserWarning, match=r"no thread-CPU record beside the capture \(disk full\)"):
        for i in range(6):
            with timer.step() as step:
                step.result = i
    assert timer.close() == session / stepfile.STEP_FILE and len(timer.step_times_ms) == 6  # training went on


class _NullMark:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_step_timer_probe_says_why_no_what_if_came_and_refuses_a_bad_option(tmp_path):
    from tfbertperf.jax_steps import StepTimer

    # probe=True without total_steps had no plan: the step file came without a what-if and nothing said why
    timer = StepTimer(tmp_path / "logs", profile_steps=None, probe=True, wait=lambda x: None,
                      annotation=lambda name, step_num: contextlib.nullcontext())
    for i in range(6):
        timer.probe(lambda s, b: (s, 0.0), {"w": 0.0}, i)  # never planned: a no-op
        with timer.step():
            pass
    with pytest.warns(UserWarning, match="no what-if: the probe had no plan — pass total_steps=N"):
        timer.close()
    assert timer.what_if is None
    with pytest.raises(ValueError, match=r"^StepTimer\(probe_steps=-1\): expected"):
        StepTimer(tmp_path / "logs", probe=True, probe_steps=-1)


def test_step_timer_goes_on_without_a_capture_when_another_profile_runs(tmp_path):
    # JAX runs one profile a process (a loop stopped inside its capture left one running): start_trace raised out
    # of the user's training loop
    from tfbertperf.jax_steps import StepTimer

    def start_trace(logdir, **kw):
        raise RuntimeError("Profile has already been started. Only one profile may be run at a time.")

    timer = StepTimer(tmp_path / "logs", profile_steps="2:4", start_trace=start_trace, stop_trace=lambda: None,
                      annotation=lambda name, step_num: contextlib.nullcontext(), wait=lambda x: None)
    with pytest.warns(UserWarning, match="another profiler is running at step 1"):
        for _ in range(6):
            with timer.step():
                pass
    assert timer.close() == tmp_path / "logs" / stepfile.STEP_FILE and len(timer.step_times_ms) == 6


def test_importing_the_jax_helper_imports_neither_jax_nor_tensorflow():
    code = "import sys, tfbertperf.jax_steps; print(sorted(m for m in ('jax', 'tensorflow') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_analyze_says_which_input_cost_is_measured_and_which_estimated():
    from tfbertperf.report.console import measured_lines

    doc = stepfile.document([10.0] * 20, excluded_steps=[10, 11],
                            what_if={"compute_only_step_ms": [6.0, 6.0], "blocks": [[10, 2]]})
    summary = stepfile.summarize(doc, "steps.json").as_dict()
    lines = measured_lines({"step_file": summary, "attribution": {
        "input_cost_estimate_fraction": 0.25,
        "profiler_cost": {"added_ms_per_step": 1.0, "added_fraction": 0.09, "captured_step_ms": 11.0}}})
    assert lines[0] == "step file steps.json: 18 unprofiled steps, 10.00 ms/step"
    assert lines[1].startswith("profiler cost (measured): +1.00 ms a step")
    assert lines[2].startswith("input cost (measured): 40.0 %")
    assert lines[3] == "input cost (estimated from the capture alone): 25.0 %"
    alone = measured_lines({"step_file": None, "attribution": {"profiler_cost": {"added_ms_per_step_estimate": 6.0}}})
    assert alone == ["profiler cost: ~6.0 ms a step, estimated (no step file beside the capture: "
                     "tfbertperf.keras.ProfileCallback or tfbertperf.jax_steps write one)"]


def test_analyze_says_why_the_estimate_and_the_measured_what_if_differ():
    """A user's fit checked by hand (tests/programs/keras_fit_by_hand.py): measured 73 % ± 9, the capture alone 38 %,
    and the console gave the two with no word on which to believe or why; the verdict said "73 % of the 2.3 ms
    step" where the what-if's step was the fit's 4.0 ms (the window ran 43 % faster than the fit)."""
    from tfbertperf.profile import unprofiled
    from tfbertperf.report.console import measured_lines

    sf = {"input_cost_fraction": 0.73, "input_cost_ci95": 0.087, "unprofiled_step_ms": 4.02}
    att = {"input_cost_estimate_fraction": 0.383, "steps_profiled": 20, "step_time_ms": 2.31,
           "input_cpu_basis": "measured: the input threads' CPU clocks", "input_ops_us": {"preprocessing": 1201.0},
           "profiler_cost": {"captured_step_ms": 2.31, "unprofiled_step_ms": 4.02, "not_measured": "…"}}
    why = unprofiled.disagreement(att, sf)
    assert why.startswith("the estimate is 35 pp below the measured what-if: its 20 steps ran 2.31 ms against the "
                          "fit's 4.02 ms") and why.endswith("the measured figure is the answer"), why
    # the window at the fit's pace: the reason is the estimate's model; without a thread-CPU record, that
    att["profiler_cost"] = {"captured_step_ms": 4.1, "added_ms_per_step": 0.08}
    assert "models what each millisecond of the pipeline's CPU costs" in unprofiled.disagreement(att, sf)
    att["input_cpu_basis"] = "estimated: busy periods"
    assert "no record of its input threads' CPU" in unprofiled.disagreement({**att, "input_ops_us": {"x": 5.0}}, sf)
    # a Keras-JAX fit fed by tf.data: jax.profiler records none of the pipeline (keras_jax_tfdata_by_hand.py)
    assert "records none of the pipeline's work" in unprofiled.disagreement({**att, "input_ops_us": {"x": 0.0}}, sf)
    # within the what-if's interval (or 5 pp): nothing to explain; no measured figure: nothing either
    assert unprofiled.disagreement({**att, "input_cost_estimate_fraction": 0.66}, sf) is None
    assert unprofiled.disagreement(att, {**sf, "input_cost_fraction": None}) is None
    assert measured_lines({"step_file": {**sf, "file": "s.json", "unprofiled_steps": 380, "compute_only_step_ms": 1.1,
                                         "compute_only_steps": 100, "T_c_blocks_ms": [1.1] * 20},
                           "attribution": att})[-1].startswith("  the estimate is 35 pp below")


def test_the_verdict_names_the_step_the_what_if_timed_where_the_window_ran_at_another_pace():
    from tfbertperf.profile.verdict import verdict

    att = {"fractions": {"input": 0.38, "host_compute": 0.57, "host_to_device": 0.0, "other": 0.05, "compile": 0.0,
                         "output": 0.0, "device_compute": 0.0, "kernel_launch": 0.0},
           "input_bound_fraction": 0.38, "input_cost_fraction": 0.73, "au_compute_only_ratio": 0.27,
           "step_time_ms": 2.31, "what_if_step_ms": 4.02, "source": "xprof",
           "input_ops_us": {"preprocessing": 1201.0}}
    said = verdict(att, 0.27)["summary"]
    assert said.startswith("input-bound: input costs 73% of the 4.0 ms step (what-if probe; blocked wait 38% of the "
                           "captured 2.3 ms step)"), said
    att["what_if_step_ms"] = 2.35  # the window at the fit's pace: one step named
    assert "73% of the 2.3 ms step (what-if probe; blocked wait 38%)" in verdict(att, 0.27)["summary"]


def _what_if_capture(tmp_path, compute_only, written_by=""):
    """A compute-heavy capture (the device busy 9.5 of each 10 ms step) with a step file beside it: 60 steps of
    10 ms, four what-if blocks of two steps with the given compute-only step times.  (On the launch-heavy capture
    launch-bound wins either side of the input line: decided, profile/undecided.py.)"""
    capture = _launch_heavy_capture(tmp_path / "cap", busy_us=9_500)
    blocks = [[10, 2], [22, 2], [34, 2], [46, 2]]
    doc = stepfile.document([10.0] * 60, excluded_steps=[10, 11, 22, 23, 34, 35, 46, 47],
                            what_if={"compute_only_step_ms": compute_only, "blocks": blocks}, written_by=written_by)
    stepfile.write(tmp_path / "steps.json", doc)
    return analyze(str(capture), steps=str(tmp_path / "steps.json"))


def test_a_what_if_whose_interval_straddles_the_input_line_is_undecided(tmp_path):
    """18 % ± 7 pp: measured again, the same program may land either side of the 20 % line.  The verdict keeps the
    figure's side as its bottleneck but says it is undecided, the headline names both, and the first action is
    to measure longer (profile/undecided.py)."""
    from tfbertperf.report.headline import headline

    # d = 2.2, 1.4, 2.2, 1.4 ms against T = 10 ms: 0.18 ± 3.182 × 0.4619 / 2 / 10 = 0.0735
    doc = _what_if_capture(tmp_path, [7.8, 7.8, 8.6, 8.6, 7.8, 7.8, 8.6, 8.6])
    att, v = doc["attribution"], doc["verdict"]
    assert att["input_cost_fraction"] == pytest.approx(0.18, abs=1e-3)
    assert att["input_cost_ci95"] == pytest.approx(0.0735, abs=1e-3)
    und = v["undecided"]
    assert und and v["bottleneck"] in und["between"] and "input" in und["between"] and und["between"][0] != "input"
    assert und["probe_steps_to_decide"] is None and und["longer_by"] == pytest.approx((0.0735 / 0.02) ** 2, rel=0.05)
    assert "undecided: the what-if's 95% interval 11–25% straddles the 20% line" in v["summary"]
    assert v["actions"][0]["advice"] == (
        "measure longer before acting on this verdict — a fit about 14× as long gives ProfileCallback's probe "
        "(probe_steps=\"auto\") the blocks to decide 18% ± 7 pp (95%) against the 20% line")
    h = headline(doc)
    assert h["line"].startswith("undecided: ") and " or input-bound" in h["line"], h["line"]
    assert "input costs 18 % ± 7 pp of the step (measured what-if)" in h["line"] and h["undecided"]
    assert "next: measure longer before acting on this verdict — a fit about 14× as long" in h["line"]


def test_an_undecided_what_if_near_its_decision_says_how_much_longer_to_a_decimal(tmp_path):
    # 26 % ± 7 pp: a fit 1.5× as long decides it; analyze said "a fit about 1× as long", as if the fit sufficed
    doc = _what_if_capture(tmp_path, [7.0, 7.0, 7.8, 7.8, 7.0, 7.0, 7.8, 7.8])
    assert doc["attribution"]["input_cost_fraction"] == pytest.approx(0.26, abs=1e-3)
    assert doc["verdict"]["undecided"]["longer_by"] == pytest.approx(1.5, abs=0.05)
    assert "a fit about 1.5× as long gives ProfileCallback's probe" in doc["verdict"]["actions"][0]["advice"]


def test_an_undecided_what_if_from_a_jax_loop_names_steptimers_probe_not_a_keras_fit(tmp_path):
    # a JAX loop's step file (tfbertperf.jax_steps.StepTimer) was told "a fit … gives ProfileCallback's probe"
    doc = _what_if_capture(tmp_path, [7.0, 7.0, 7.8, 7.8, 7.0, 7.0, 7.8, 7.8],
                           written_by="tfbertperf.jax_steps.StepTimer")
    said = doc["verdict"]["actions"][0]["advice"]
    assert "a loop about 1.5× as long gives StepTimer's probe (probe=True, total_steps=…)" in said
    assert "ProfileCallback" not in said and "fit" not in said


def test_a_narrow_what_if_decides_and_a_run_is_told_how_many_probe_steps_would_decide(tmp_path):
    from tfbertperf.profile import undecided

    doc = _what_if_capture(tmp_path, [8.2] * 8)  # every block the same: ± 0
    assert doc["verdict"]["undecided"] is None and doc["attribution"]["input_cost_ci95"] == pytest.approx(0.0)
    assert not doc["verdict"]["actions"] or not doc["verdict"]["actions"][0]["advice"].startswith("measure longer")
    # a run (its config names the probe's steps): the steps that would narrow ± 7 pp to the 2 pp to the line
    att = {**doc["attribution"], "input_cost_ci95": 0.07}
    marked = undecided.mark(doc["verdict"], att, 0.5, probe_steps=20, config={"profile": {"probe_steps": 20}})
    assert marked["undecided"]["probe_steps_to_decide"] == round(20 * (0.07 / 0.02) ** 2)
    assert marked["actions"][0]["set"] == [f"profile.probe_steps={round(20 * (0.07 / 0.02) ** 2)}"]
    # a run with the auto probe (profile.probe_steps=auto): a longer run decides it, not a step count
    auto = undecided.mark(doc["verdict"], att, 0.5, probe_steps="autotune",
                          config={"profile": {"probe_steps": "autotune"}})
    assert auto["undecided"]["probe_steps_to_decide"] is None and auto["actions"][0]["set"] == []
    assert "a run about 12× as long gives the auto probe (profile.probe_steps=auto; train.steps)" in \
        auto["recommendations"][0]
    # far from the line: decided whatever the interval
    far = {**att, "input_cost_fraction": 0.6, "input_cost_ci95": 0.1}
    assert undecided.mark(doc["verdict"], far, 0.5, probe_steps=20)["undecided"] is None


def test_a_host_estimate_keeps_the_inputs_ms_and_takes_the_profilers_cost_out_of_the_step():
    from tfbertperf.profile.unprofiled import host_estimate

    # 91 % of a 47.8 ms captured step is input (43.5 ms); without the profiler the step is 45.3 ms: 96 %
    assert host_estimate(0.91, 47.8, 45.3) == pytest.approx(0.91 * 47.8 / 45.3)
    assert host_estimate(0.98, 50.0, 40.0) == 1.0  # never more than the step
    assert host_estimate(0.30, 10.0, 10.4) == pytest.approx(0.30 * 10.0 / 10.4)  # T a little longer: noise, kept
    assert host_estimate(0.30, 10.0, 11.0) is None  # 10 % longer unprofiled: the program's speed moved
    assert host_estimate(None, 10.0, 9.0) is None and host_estimate(0.3, 10.0, None) is None
    assert host_estimate(0.3, 10.0, 0.0) is None


def test_the_steps_a_run_ahead_pipeline_fed_while_the_capture_stopped_are_left_out_of_t():
    # ~100 ms steps; the profiler took 0.3 s to stop and write the capture after step 29, and the pipeline ran
    # ahead meanwhile: the 3 steps after the window ran from its buffers (19, 28, 60 ms)
    times = [380.0] + [100.0] * 28 + [105.0] * 10 + [19.0, 28.0, 60.0] + [100.0] * 9
    window = (29, 39)
    assert stepfile.after_stop(times, window, 1, 300.0) == [39, 40, 41]
    assert stepfile.after_stop(times, window, 1, 5_000.0) == list(range(39, 39 + stepfile.AFTER_STOP_MAX))
    assert stepfile.after_stop(times, window, 1, 0.0) == [] and stepfile.after_stop(times, None, 1, 300.0) == []
    kept = stepfile.summarize(stepfile.document(times, profiled_steps=window, warmup_steps=1,
                                                excluded_steps=stepfile.after_stop(times, window, 1, 300.0)), "t")
    all_in = stepfile.summarize(stepfile.document(times, profiled_steps=window, warmup_steps=1), "t")
    assert kept.unprofiled_step_ms == pytest.approx(100.0) and kept.drift == pytest.approx(0.0)
    assert all_in.unprofiled_step_ms < 96.0 and all_in.drift > 0.10  # the fast steps read as the program's speed


def _host_att(estimate, ci, unprofiled=None):
    """A host (CPU) attribution from a real run's report with no probe: the capture's estimate and its spread."""
    att = json.loads((Path(__file__).parent / "fixtures" / "reports" / "cpu-tuned.json").read_text())["attribution"]
    return {**att, "input_cost_fraction": None, "input_cost_ci95": None, "input_cost_estimate_fraction": estimate,
            "input_cost_estimate_ci95": ci, "input_cost_estimate_unprofiled_fraction": unprofiled}


def test_an_estimate_whose_spread_over_the_captured_steps_straddles_the_line_is_undecided():
    """A keras-hub tokenizer fit whose truth was 22–27 % read 19.9 % from the capture alone (BENCHMARKS.md, issue
    29): called compute-bound.  Its steps spread ± 2.5 pp: undecided, and the first action measures the what-if."""
    from tfbertperf.profile import undecided
    from tfbertperf.profile.verdict import verdict

    att = _host_att(0.199, 0.025)
    v = undecided.mark(verdict(att, 0.8), att, 0.8)
    assert v["bottleneck"] == "compute" and v["undecided"]["between"] == ["compute", "input"]
    assert v["undecided"]["source"] == "estimate" and v["undecided"]["ci95"] == pytest.approx(0.025)
    assert "estimate's 95% interval over the captured steps 17–22% straddles the 20% line" in v["summary"]
    assert v["actions"][0]["advice"].startswith("measure the what-if before acting on this verdict")
    assert "ProfileCallback(probe=True)" in v["actions"][0]["advice"]
    for by in ("tfbertperf.tf_steps.StepTimer", "tfbertperf.jax_steps.StepTimer"):  # a loop: its own timer's probe
        said = undecided.mark(verdict(att, 0.8), att, 0.8, probe_by=by)["actions"][0]["advice"]
        assert f"{by}(probe=True, total_steps=…)" in said and "ProfileCallback" not in said, said
    far = _host_att(0.12, 0.025)  # 12 % ± 2.5: decided
    assert undecided.mark(verdict(far, 0.8), far, 0.8)["undecided"] is None
    # against the unprofiled step the same ms are 21.9 %, their interval scaled alike (± 2.75 pp): still undecided
    unp = _host_att(0.199, 0.025, unprofiled=0.219)
    u = undecided.mark(verdict(unp, 0.8), unp, 0.8)
    assert u["bottleneck"] == "input" and u["undecided"]["ci95"] == pytest.approx(0.025 * 0.219 / 0.199, abs=1e-4)
    # a probe decides instead, with its own interval
    probed = {**att, "input_cost_fraction": 0.30, "input_cost_ci95": 0.02}
    assert undecided.mark(verdict(probed, 0.8), probed, 0.8)["undecided"] is None


def test_loader_threads_the_capture_has_no_cpu_record_of_leave_a_verdict_below_the_line_undecided():
    # a bare JAX loop's loader thread: the capture sees its Python run, not what its CPU took from the step
    from tfbertperf.profile import undecided
    from tfbertperf.profile.verdict import verdict

    att = _host_att(0.004, None)
    step = att["step_time_ms"]
    quiet = {**att, "input_loader_threads_unrecorded_ms_per_step": 0.1 * step}  # under the line's share: decided
    assert undecided.mark(verdict(quiet, 0.8), quiet, 0.8)["undecided"] is None
    busy = {**att, "input_loader_threads_unrecorded_ms_per_step": 0.58 * step}
    v = undecided.mark(verdict(busy, 0.8), busy, 0.8)
    assert v["bottleneck"] == "compute" and v["undecided"]["between"] == ["compute", "input"], v["undecided"]
    assert v["undecided"]["source"] == "unrecorded loader threads" and "no record of their CPU" in v["summary"]
    assert v["actions"][0]["advice"].startswith("measure the loader thread's CPU") and "jax_steps.StepTimer" in \
        v["actions"][0]["advice"]
    probed = {**busy, "input_cost_fraction": 0.05, "input_cost_ci95": 0.01}  # a what-if measured it: decided
    assert undecided.mark(verdict(probed, 0.8), probed, 0.8)["undecided"] is None
    # likewise a loop that spends a fifth of its step or more between its markers in work the capture cannot name
    gaps = {**att, "steps_gap_unexplained_ms": 0.5 * step}
    g = undecided.mark(verdict(gaps, 0.8), gaps, 0.8)
    assert g["undecided"]["source"] == "gaps between markers" and "between its step markers" in g["summary"], g
    assert g["actions"][0]["advice"].startswith("mark the whole step before acting on this verdict"), g["actions"]


def test_an_estimate_below_the_line_that_leaves_most_of_the_inputs_cpu_out_is_undecided():
    """A Keras MLP behind the tf.data guide's map (tests/test_input_cpu_beside.py, a real fit) read 4.5–12 % from the
    capture against a truth of 27 %: the pipeline's 0.46–1.2 ms of CPU a step beside a compute on the recorded
    threads, of which the rule counted 0.03–0.12 ms (profile/undecided.py)."""
    from tfbertperf.profile import undecided
    from tfbertperf.profile.verdict import verdict

    att = {**_host_att(0.059, None), "step_time_ms": 1.6, "input_cpu_ms_per_step": 0.80,
           "input_stolen_cpu_fraction": 0.036, "input_cpu_basis": "measured: …"}
    v = undecided.mark(verdict(att, 0.8), att, 0.8)
    assert v["bottleneck"] == "compute" and v["undecided"]["source"] == "input CPU beside the compute", v["undecided"]
    assert v["undecided"]["between"] == ["compute", "input"]
    # 0.059 + (0.80 / 1.6 − 0.036) = 52 % were each ms of that CPU a ms of the step
    assert "used 0.80 ms of CPU a step while the step computed — 52% of the step" in v["summary"], v["summary"]
    assert v["actions"][0]["advice"].startswith("measure the what-if before acting on this verdict")
    by = "tfbertperf.tf_steps.StepTimer"
    assert f"{by}(probe=True" in undecided.mark(verdict(att, 0.8), att, 0.8, probe_by=by)["actions"][0]["advice"]
    # of the unprofiled step the same milliseconds scale alike: 5.9 → 7 % and 52 → 62 %
    assert undecided.beside_share({**att, "input_cost_estimate_unprofiled_fraction": 0.07})[1] == \
        pytest.approx(0.07 + 0.464 * 0.07 / 0.059, abs=1e-3)
    # little CPU beside the compute: all of it is still under the line, decided
    small = {**att, "input_cpu_ms_per_step": 0.15}
    assert undecided.mark(verdict(small, 0.8), small, 0.8)["undecided"] is None
    # a probe measured it, or no record of the input's CPU: this rule says nothing
    probed = {**att, "input_cost_fraction": 0.27, "input_cost_ci95": 0.02}
    assert (undecided.mark(verdict(probed, 0.8), probed, 0.8)["undecided"] or {}).get("source") != \
        "input CPU beside the compute"
    bare = {**att, "input_cpu_ms_per_step": None}
    assert undecided.mark(verdict(bare, 0.8), bare, 0.8)["undecided"] is None


def test_the_estimates_interval_is_students_t_over_the_steps():
    from tfbertperf.train.blocks import mean_ci95

    assert mean_ci95([0.2]) is None
    assert mean_ci95([0.1, 0.3]) == pytest.approx(12.706 * statistics.stdev([0.1, 0.3]) / 2 ** 0.5)
    assert mean_ci95([0.2] * 40) == 0.0


def test_a_step_timer_window_after_the_last_step_says_so(tmp_path):
    from tfbertperf.jax_steps import StepTimer

    timer = StepTimer(tmp_path / "logs", profile_steps="20:40", start_trace=lambda *a, **k: None,
                      stop_trace=lambda: None, annotation=lambda name, step_num: contextlib.nullcontext(),
                      wait=lambda x: None)
    for _ in range(6):
        with timer.step():
            pass
    with pytest.warns(UserWarning, match=r"StepTimer: profile_steps 20:40 begins after the run's last step \(6 "):
        timer.close()


def test_step_timer_steps_fetches_each_batch_inside_its_step_and_leaves_a_broken_step_out(tmp_path):
    from tfbertperf.jax_steps import StepTimer

    marks = []

    @contextlib.contextmanager
    def annotation(name, step_num):
        marks.append(("open", step_num))
        yield
        marks.append(("close", step_num))

    def batches():
        for i in range(5):
            marks.append(("fetch", i))
            yield i

    timer = StepTimer(tmp_path / "logs", profile_steps=None, start_trace=lambda *a, **k: None,
                      stop_trace=lambda: None, annotation=annotation, wait=lambda x: None)
    assert [b for _, b in timer.steps(batches())] == [0, 1, 2, 3, 4]
    assert len(timer.step_times_ms) == 5 and marks[:3] == [("open", 0), ("fetch", 0), ("close", 0)]
    assert marks[-2:] == [("open", 5), ("close", 5)]  # the data's end: a marker opened, closed, no step
    for _, b in timer.steps(batches()):
        if b == 2:
            break
    assert len(timer.step_times_ms) == 5 + 2  # the step it broke from is not timed
