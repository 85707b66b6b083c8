"""End to end on local disk: prepare → tf.data → tiny BERT → profiled window → xprof attribution → run dir."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfbertperf.config import load_config

ROOT = Path(__file__).resolve().parents[1]
SMALL_DATA = ["data.dupe_factor=1", "data.num_shards=4", "data.vocab_size=2000"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from tfbertperf.data import prepare_data

    d = tmp_path_factory.mktemp("data") / "shards"
    prepare_data(load_config(sets=SMALL_DATA), str(d), progress=False)
    return d


@pytest.fixture(scope="module")
def tuned_run(data_dir, tmp_path_factory):
    from tfbertperf.job import run

    out = tmp_path_factory.mktemp("runs")
    # 40 steps: 5 warm-up, the traced window 7..20, 21 steps outside it; a pipeline that falls behind on a busy
    # machine loses up to 6 of them as probe recovery steps (report/build.py steady_steps) and still leaves the
    # 10 that test_a_long_enough_run_has_no_step_caveats asks for (30 steps left 7 in a CI run, 2026-11-26).
    cfg = load_config(data_uri=str(data_dir),
                      sets=SMALL_DATA + ["train.steps=40", "profile.steps=8:20", "profile.probe_steps=6",
                                         f"run.out={out}"])
    return run(cfg, progress=False)


@pytest.mark.slow
def test_run_directory_has_every_artifact(tuned_run):
    run_dir, report = tuned_run
    for name in ("report.json", "report.md", "config.yaml", "environment.json", "plots/step_breakdown.png"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "tensorboard").rglob("*.xplane.pb"))
    assert list((run_dir / "tensorboard").rglob("events.out.tfevents.*")), "TensorBoard scalars missing"
    assert not list(run_dir.rglob("*.tmp")), "temporary files left behind"
    on_disk = json.loads((run_dir / "report.json").read_text())
    assert on_disk["schema"] == "tfbertperf.report/1"
    assert on_disk["run_id"] == run_dir.name


@pytest.mark.slow
def test_report_follows_the_design_schema(tuned_run):
    _, r = tuned_run
    for key in ("schema", "run_id", "created", "workload", "config", "environment", "model", "training",
                "throughput", "attribution", "step_timer", "accelerator_utilization", "storage", "verdict",
                "artifacts"):
        assert key in r, key
    m = r["model"]
    assert m["size"] == "tiny" and m["task"] == "pretrain" and m["layers"] == 2 and m["hidden"] == 128
    assert m["heads"] == 2 and m["parameters"] > 100_000
    assert r["throughput"]["steps"] == 40 and r["throughput"]["examples_per_sec"] > 0
    assert len(r["training"]["loss_trajectory"]) == 40
    assert r["storage"]["backend"] == "local"
    # the verdict rests on the run's own what-if figure (the probe's), quotes it and follows from it
    share = r["attribution"]["input_cost_fraction"]
    assert f"input costs {share:.0%}" in r["verdict"]["summary"] and "what-if probe" in r["verdict"]["summary"]
    assert (r["verdict"]["bottleneck"] == "input") == (share >= 0.20)
    st = r["step_timer"]
    assert st["steps"] > 0 and 0.0 <= st["input_wait_fraction"] <= 1.0
    # the what-if's interval from the probe's blocks, and whether it straddles the input line (issue 29)
    ci = r["attribution"]["input_cost_ci95"]
    assert ci is None or 0.0 <= ci, ci
    und = r["verdict"]["undecided"]
    assert (und is not None) <= (ci is not None and abs(share - 0.20) < ci), (und, share, ci)
    measured = r["headline"]["input_cost_source"] == "measured what-if"  # not when the probe ran slower than T
    assert r["headline"]["undecided"] == bool(und) and r["headline"]["input_cost_ci95"] == (
        round(ci, 4) if ci is not None and measured else None)


@pytest.mark.slow
def test_report_has_every_key_of_the_schema_documented_in_the_package(tuned_run):
    from test_layout import schema_keys

    _, r = tuned_run
    keys = schema_keys()
    assert keys[""] <= set(r), sorted(keys[""] - set(r))
    for section in ("model", "training", "throughput", "attribution", "step_timer", "storage", "verdict", "artifacts"):
        missing = keys[section] - set(r[section])
        assert not missing, (section, sorted(missing))


@pytest.mark.slow
def test_cpu_run_reports_no_device_planes_and_agrees_with_its_environment(tuned_run):
    # job.py hands attribute() the fingerprint's devices: a CPU run on a CPU machine gets no mismatch warning, no
    # accelerator planes, and the host-side figures (compute on the host, no copies to take out of input).
    _, r = tuned_run
    assert r["devices"] == [] and r["environment"]["devices"]["gpu_count"] == 0
    a = r["attribution"]
    assert a["hardware_warning"] is None and a["compute_on"] == "host"
    assert a["breakdown_ms"]["host_to_device"] == 0.0


@pytest.mark.slow
def test_attribution_covers_the_profiled_window_and_sums_to_one(tuned_run):
    _, r = tuned_run
    a = r["attribution"]
    assert a["source"] == "xprof"
    assert a["steps_profiled"] >= 10
    assert set(a["breakdown_ms"]) >= {"input", "host_to_device", "device_compute", "host_compute", "other"}
    # measured, not the remainder: training on the CPU shows as host compute, and xprof's profiled step is the
    # length our own step timer measured for the steady steps (the window adds the tracer's overhead only)
    assert a["fractions"]["host_compute"] >= 0.5 and a["fractions"]["other"] < 0.25, a["fractions"]
    # (a band of 2× either way: the window is a few steps of a shared machine, and under CI's load it once ran 222 ms
    # a step against the steady steps' 320 ms mean; a unit or remainder mistake is off by far more)
    assert 0.5 < a["step_time_ms"] / a["steady_step_time_ms"] < 2.0, (a["step_time_ms"], a["steady_step_time_ms"])
    assert 0.0 <= a["input_bound_fraction"] <= 1.0
    assert a["input_cost_fraction"] is not None and -1.0 < a["input_cost_fraction"] < 1.0
    assert set(a["input_ops_us"]) >= {"storage_read", "preprocessing", "enqueue"}
    assert a["threadpool_events"] == "off"  # the cheap capture is the default (train/capture.py)
    # the what-if figure is (T − T_c) / T of the two step times it reports, clamped at 0
    T, T_c = a["steady_step_time_ms"], a["compute_only_step_ms"]
    assert abs(T - r["throughput"]["step_time_ms"]["mean"]) < 0.01  # the same steady steps as the throughput
    assert T_c > 0 and abs(a["input_cost_fraction"] - max(0.0, (T - T_c) / T)) < 1e-3


@pytest.mark.slow
def test_xprof_finds_the_same_steps_in_the_runs_xplane(tuned_run):
    from xprof.convert import raw_to_tool_data

    run_dir, r = tuned_run
    xplanes = sorted((run_dir / "tensorboard").rglob("*.xplane.pb"))
    data = raw_to_tool_data.xspace_to_tool_data([str(xplanes[0])], "input_pipeline_analyzer", {})
    data = data[0] if isinstance(data, tuple) else data
    doc = json.loads(data)
    tables = doc if isinstance(doc, list) else [doc]
    step_tables = [t for t in tables if isinstance(t, dict)
                   and any(c.get("id") == "stepnum" for c in t.get("cols", []))]
    assert len(step_tables) == 1
    assert len(step_tables[0]["rows"]) == r["attribution"]["steps_profiled"] >= 10


@pytest.mark.slow
def test_naive_preset_waits_on_input_more_than_tuned(tmp_path):
    from tfbertperf.data import prepare_data
    from tfbertperf.job import run

    # Stated about what the code decides, not about this machine's speed (issue 31: under load, with the real
    # model, the tuned pipeline's CPU work lost the cores to the model and it waited 0.61 of the run against
    # naive's 0.79).  Every read is a fixed 400 ms sleep (data.read_latency_ms) on ~40 shards of about one batch
    # each (a shard is one emulated read: its first READ_BYTES), and the step is an emulated 200 ms sleep
    # (emulate.step_ms): a sleep is never shorter than asked and leaves the cores to the pipeline, so a busy
    # machine cannot make the naive pipeline's reads overlap nor the tuned one's reads fall behind the step.
    # (With real compute a prefetch of a few batches hides one 400 ms read in ten steps, and at 20 ms even
    # sequential reads keep up with tiny BERT here — see BENCHMARKS.md.)
    latency, step = 400.0, 200.0
    sets = ["data.dupe_factor=1", "data.num_shards=40", "data.vocab_size=2000"]
    data = tmp_path / "shards"
    prepare_data(load_config(sets=sets), str(data), progress=False)
    reports = {}
    # tuned's parallelism is pinned (4 files, 4 parallel calls), so that how many reads run at once is this
    # config's, not tf.data's AUTOTUNE's.  (A full-suite run once saw no two reads in flight, first blamed on the
    # machine's load; the cause was an earlier test leaving TF's op determinism on, which makes every interleave
    # with a stateful function serial — tests/conftest.py now fails a test that leaks it.)
    pinned = {"naive": [], "tuned": ["pipeline.cycle_length=4", "pipeline.num_parallel_calls=4"]}
    for preset in ("naive", "tuned"):
        cfg = load_config(data_uri=str(data),
                          sets=sets + pinned[preset] + [f"pipeline.preset={preset}", "train.steps=30",
                                                        "profile.steps=8:20",
                                       f"run.out={tmp_path}", f"data.read_latency_ms={latency:g}",
                                       f"emulate.step_ms={step:g}", "pipeline.shuffle_buffer=64",
                                       "profile.ceiling_seconds=0", "profile.utilization_hz=0"])
        reports[preset] = run(cfg, progress=False)[1]
    naive, tuned = reports["naive"], reports["tuned"]
    assert naive["pipeline"]["cycle_length"] == 1 and naive["config"]["pipeline"]["preset"] == "naive"
    # Reads in flight (summed read time ÷ the time with at least one read in flight): the naive pipeline reads
    # one shard after another, never two at once; the tuned one's interleave opens several shards together (at
    # its start alone cycle_length reads of 400 ms each overlap).
    n_sto, t_sto = naive["storage"], tuned["storage"]
    assert n_sto["read_time_ms"] == pytest.approx(n_sto["busy_read_ms"], abs=1.0)
    assert t_sto["read_time_ms"] - t_sto["busy_read_ms"] >= 2 * latency, t_sto
    # The steady step: naive's holds the emulated step and most of a read that nothing ran ahead of; tuned's is
    # the emulated step alone (its readers deliver ~a batch per 400 / cycle_length ms, well ahead of the step).
    n_p50, t_p50 = naive["throughput"]["step_time_ms"]["p50"], tuned["throughput"]["step_time_ms"]["p50"]
    assert n_p50 >= step + 0.25 * latency > t_p50 >= step, (n_p50, t_p50)
    # ... which the always-on step timer reports as time blocked on input (naive ~0.5 of the run; tuned's share
    # is its first steps and the capture's start: measured 0.54 against 0.20 on a quiet machine).
    assert naive["step_timer"]["input_wait_fraction"] > max(0.25, tuned["step_timer"]["input_wait_fraction"])
    # (not asserted: the slowest step, which varies with where a stall lands; nor the verdict, checked at 200 ms
    # in test_regime.py.)
    assert n_sto["requests"] > 0
    # xprof files the emulated reads (a py_function in a map) under preprocessing; the join with our storage
    # metrics puts them back under storage_read.
    # The reads are put per step the capture spans, as the input-op times are (xprof's totals cover the whole
    # capture, not only the steps of its table: profile/steptable.py).
    att = naive["attribution"]
    assert att["input_ops_capture_steps"] >= att["steps_profiled"]
    assert n_sto["joined_read_ms_per_step"] == pytest.approx(n_sto["joined_read_ms"] / att["input_ops_capture_steps"],
                                                             abs=0.01)
    split, ops = att["input_split_us"], att["input_ops_us"]
    assert split["storage_read"] > ops["storage_read"] and split["storage_read"] >= split["preprocessing"]
    assert abs(sum(split.values()) - sum(ops.values())) < 1.0


@pytest.mark.slow
def test_main_job_cli_prints_the_table_and_writes_the_report(data_dir, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run(
        [sys.executable, "-m", "tfbertperf.run", "--data", str(data_dir), "--set", "train.steps=24",
         "--set", "profile.steps=6:18", "--set", "profile.probe_steps=4", "--set", f"run.out={tmp_path}"],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ms/step" in r.stdout and "verdict:" in r.stdout
    reports = list(tmp_path.glob("*/report.json"))
    assert len(reports) == 1


def _in_profiler_stop(log: str) -> bool:
    """A worker's kept crash log: a fatal signal with the crashing thread's Python stack in TF's profiler stop (the
    known TF crash), read from faulthandler's "Current thread" block."""
    if "Fatal Python error" not in log or "Current thread" not in log:
        return False
    frames = log.split("Current thread", 1)[1].split("\n\n")[0]
    return "profiler_v2.py" in frames and " in stop" in frames


@pytest.mark.slow
def test_two_local_workers_each_get_an_attribution(data_dir, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run(
        [sys.executable, "-m", "tfbertperf.run", "--workers", "2", "--data", str(data_dir),
         "--set", "train.steps=20", "--set", "profile.steps=5:17", "--set", "profile.probe_steps=4",
         "--set", "train.batch_size=8", "--set", "profile.ceiling_seconds=0", "--set", f"run.out={tmp_path}"],
        capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    # a crash under load (CI saw worker 1 die in all three attempts, twice in five runs): its kept logs say why
    logs = [f.read_text(errors="replace") for f in sorted(tmp_path.glob("*/crash-*.log"))]
    if r.returncode != 0 and logs and all(_in_profiler_stop(text) for text in logs):
        pytest.xfail("TF 2.21's multi-worker profiler crash inside tf.profiler.experimental.stop() in every attempt "
                     "(a use-after-free in TraceMeRecorder::Consume: tests/programs/mw_profiler_crash.py)")
    assert r.returncode == 0, r.stderr[-3000:] + "".join(
        f"\n--- crash log\n" + "\n".join(text.splitlines()[-40:]) for text in logs)
    (report_file,) = tmp_path.glob("*/report.json")
    rep = json.loads(report_file.read_text())
    assert rep["training"]["replicas"] == 2 and len(rep["workers"]) == 2
    for w in rep["workers"]:
        assert w["attribution"]["steps_profiled"] >= 10
        assert w["throughput"]["steps"] == 20
        assert abs(sum(w["attribution"]["fractions"].values()) - 1.0) <= 0.01
    assert "worker 1:" in r.stdout


def test_steady_steps_leave_out_probe_recovery_steps_only_when_the_pipeline_is_behind():
    from tfbertperf.data.pipeline import runs_ahead as pipeline_runs_ahead
    from tfbertperf.report.build import steady_steps
    from tfbertperf.train.result import TrainResult

    def result(wait):
        return TrainResult(steps=20, global_batch_size=8, replicas=1, seq_len=32, loss_trajectory=[],
                           final_loss=0.0, step_times_ms=[50.0] * 20, input_wait_ms=[wait] * 20, warmup_steps=2,
                           profile_window=None, tensorboard_dir=None,
                           extra={"probe_recovery_steps": [5, 6, 7, 14, 15]})

    behind, keeping_up = steady_steps(result(10.0)), steady_steps(result(0.1))
    assert behind == [i for i in range(2, 20) if i not in (5, 6, 7, 14, 15)]
    assert keeping_up == list(range(2, 20))  # full buffers when a block starts: nothing was fed for free
    assert pipeline_runs_ahead(load_config()) and not pipeline_runs_ahead(load_config(sets=["pipeline.preset=naive"]))


def _labels(text: str) -> set[str]:
    """The fixed text of the summary's label lines: a line up to its first figure, for the table rows and the
    "name: figure" lines (headline, verdict, advice and paths vary with the run and are left out)."""
    import re

    out = set()
    for line in text.splitlines():
        # caveat lines are printed only when one applies (a loaded machine, a short run): like the verdict, they vary
        if not line.strip() or line.startswith(("BERT-", "verdict:", "caveat:", "  - ", "report:", "TensorBoard:",
                                                "---")):
            continue
        out.add(re.sub(r"\d+", "#", re.split(r"\s{2,}|(?<=:)\s", line, maxsplit=1)[0]))
    return out


@pytest.mark.slow
def test_readme_output_block_has_the_labels_the_code_prints(tuned_run):
    """README's output block (tools/readme_output.py pastes it) may not drift from the code's labels."""
    import contextlib
    import io
    import re

    from tfbertperf.report.console import print_run_summary

    run_dir, report = tuned_run
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_run_summary(run_dir, report)
    ours = _labels(buf.getvalue())
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Reading the output.*?```\n(.*?)```", readme, re.S).group(1)
    theirs = _labels(block)
    assert {"answer:", "category", "host compute", "input-bound, direct (xprof input + h#d share):",
            "input cost, what-if ((T - T_c) / T, probe):", "what this run used:"} <= theirs, theirs
    assert "accelerator utilization" not in block  # a CPU-only run: the CPU is the device (issue 30)
    assert theirs <= ours, sorted(theirs - ours)
    # and every fixed line the code prints is shown (table rows depend on which categories the run had; the
    # storage-joined input split is printed only when our storage layer timed reads, as here but not by default)
    fixed = {x for x in ours if x.endswith(":") or x in ("category", "step time (profiled window, # steps)")}
    fixed.discard("input ops, µs/step, with our storage read time:")
    assert fixed <= theirs, sorted(fixed - theirs)


@pytest.mark.slow
def test_short_runs_scale_warmup_and_probe_and_say_their_figures_rest_on_too_few_steps(data_dir, tmp_path, capsys):
    """Issue 17 finding 2: `train.steps=2` with the default 5 warm-up steps printed examples/s with no caveat,
    and a 3-step run spent most of its time in the default 20-step probe."""
    from tfbertperf.job import run
    from tfbertperf.report.caveats import MIN_STEADY_STEPS
    from tfbertperf.report.console import print_run_summary
    from tfbertperf.train.probe import short_run_budget

    assert short_run_budget(60, 5, 20) == (5, 20), "the default run keeps its budget"
    assert short_run_budget(3, 5, 20) == (1, 1) and short_run_budget(2, 5, 20) == (1, 1)
    assert short_run_budget(6, 5, 20) == (1, 3) and short_run_budget(1, 5, 20)[0] == 0
    assert short_run_budget(6, 5, 0) == (1, 0), "probe off stays off"

    cfg = load_config(data_uri=str(data_dir), sets=SMALL_DATA + ["train.steps=2", "profile.steps=none",
                                                                 f"run.out={tmp_path}"])
    run_dir, r = run(cfg, progress=False)
    tp = r["throughput"]
    assert tp["steps_measured"] == 1 and tp["examples_per_sec"] > 0
    assert r["step_timer"]["steps"] == 1, "warm-up shortened to 1 of the 2 steps"
    cav = r["caveats"]
    assert any("warm-up shortened from 5 to 1" in c for c in cav), cav
    assert any(f"rests on 1 steady step(s) (fewer than {MIN_STEADY_STEPS}" in c for c in cav), cav
    assert any("1 compute-only probe step" in c for c in cav), cav
    assert json.loads((run_dir / "report.json").read_text())["caveats"] == cav
    print_run_summary(run_dir, r)
    assert "caveat: throughput rests on 1 steady step" in capsys.readouterr().out


@pytest.mark.slow
def test_a_long_enough_run_has_no_step_caveats(tuned_run):
    _, r = tuned_run
    assert r["throughput"]["steps_measured"] >= 10
    assert not [c for c in r["caveats"] if "steady step" in c or "warm-up" in c], r["caveats"]


def test_steady_steps_leave_out_the_steps_fed_while_the_capture_was_written():
    # profiled steps 8–11 (traced 7–12), the capture took 120 ms to stop and write before step 13: a pipeline that
    # is behind ran ahead meanwhile and fed the next ceil(120 / 50) = 3 steps from its buffers
    from tfbertperf.report.build import steady_steps
    from tfbertperf.train.result import TrainResult

    def result(wait, stop_ms=120.0):
        return TrainResult(steps=24, global_batch_size=8, replicas=1, seq_len=32, loss_trajectory=[],
                           final_loss=0.0, step_times_ms=[50.0] * 24, input_wait_ms=[wait] * 24, warmup_steps=2,
                           profile_window=(8, 12), tensorboard_dir=None,
                           extra={"probe_recovery_steps": [], "profile_stop_ms": stop_ms})

    outside = [i for i in range(2, 24) if not 8 <= i < 12]
    assert steady_steps(result(10.0)) == [i for i in outside if i not in (13, 14, 15)]
    assert steady_steps(result(0.1)) == outside  # a pipeline that keeps up had full buffers anyway
    assert steady_steps(result(10.0, stop_ms=0.0)) == outside


def test_a_runs_what_if_interval_pairs_each_probe_block_with_the_steady_steps_around_it():
    """report/build.py input_cost_ci95: the run's probe blocks against its steady steps, as a step file's are read
    (profile/stepfile.py): T_c 5 / 7 / 5 / 7 ms against 10 ms steps → 0.4 ± 3.182 × 1.1547 / 2 / 10."""
    from tfbertperf.report.build import input_cost_ci95
    from tfbertperf.train.result import TrainResult

    def result(probe, blocks):
        return TrainResult(steps=60, global_batch_size=8, replicas=1, seq_len=128, loss_trajectory=[],
                           final_loss=0.0, step_times_ms=[10.0] * 60, input_wait_ms=[0.0] * 60, warmup_steps=5,
                           profile_window=(28, 32), tensorboard_dir=None,
                           extra={"probe_step_times_ms": probe, "probe_blocks": blocks})

    blocks = [[10, 2], [22, 2], [40, 2], [50, 2]]
    assert input_cost_ci95(result([5.0, 5.0, 7.0, 7.0, 5.0, 5.0, 7.0, 7.0], blocks)) == pytest.approx(
        3.182 * 1.1547 / 2 / 10, rel=1e-3)
    assert input_cost_ci95(result([6.0] * 8, blocks)) == pytest.approx(0.0)
    assert input_cost_ci95(result([6.0, 6.0], [[60, 2]])) is None  # one block (after the loop): no spread
    assert input_cost_ci95(result([], [])) is None


def test_a_window_that_missed_the_stalls_is_a_caveat():
    """The profiled window is a sample: a pipeline that stalls in bursts (reads throttled to 0.05 MB/s, naive,
    inline tokenization: 5.3 s stalls between ~100 ms steps, measured 2026-11-23) can leave it clean, so xprof read
    1.4 % input where the truth was 54 %.  The report says so when the window's mean step time is ≥ 25 % away
    from the measured steps' (report/caveats.py), in either direction, and stays silent when it is not."""
    from tfbertperf.report.build import steady_steps
    from tfbertperf.report.caveats import window_caveats
    from tfbertperf.train.result import TrainResult

    def result(times):
        return TrainResult(steps=len(times), global_batch_size=8, replicas=1, seq_len=128, loss_trajectory=[],
                           final_loss=0.0, step_times_ms=times, input_wait_ms=[0.0] * len(times), warmup_steps=5,
                           profile_window=(15, 30), tensorboard_dir=None)

    steady = [100.0 + (i % 7) for i in range(60)]  # ±3 % jitter, no stall
    assert window_caveats(result(steady), steady_steps(result(steady))) == []
    stalls = [5300.0 if i in (8, 36, 49) else t for i, t in enumerate(steady)]  # outside steps 15–29
    (line,) = window_caveats(result(stalls), steady_steps(result(stalls)))
    assert "steps 15–29" in line and "is faster than the measured steps" in line and "slowest 5300 ms" in line
    inside = [5300.0 if i == 20 else t for i, t in enumerate(steady)]
    (line,) = window_caveats(result(inside), steady_steps(result(inside)))
    assert "is slower than" in line


@pytest.mark.slow
def test_tracer_settings_tensorflow_ignores_are_caveats_not_silence(data_dir, tmp_path, capsys):
    """TF 2.21's pip build drops every ProfilerOptions value ("python_tracer_level expects an i value."): a run
    that asks for the Python tracer or another host level must say that the capture did not get them."""
    import tensorflow as tf

    from tfbertperf.job import run
    from tfbertperf.profile.capture import has_python_frames, ignored_settings
    from tfbertperf.profile.xprof_tools import find_xplanes
    from tfbertperf.report.console import print_run_summary

    cfg = load_config(data_uri=str(data_dir), sets=SMALL_DATA + [
        "train.steps=12", "profile.steps=4:8", "profile.probe_steps=3", "profile.python_tracer=true",
        "profile.host_tracer_level=3", "profile.ceiling_seconds=0", f"run.out={tmp_path}"])
    run_dir, r = run(cfg, progress=False)
    frames = has_python_frames(find_xplanes(str(run_dir / "tensorboard")))
    if tf.__version__.startswith("2.21."):
        assert not frames, "TF 2.21 was measured to record no Python frame; if it does now, drop TF_DROPS_OPTIONS"
    python_lines = [c for c in r["caveats"] if c.startswith("profile.python_tracer=true did not take effect")]
    assert bool(python_lines) == (not frames), r["caveats"]
    host_lines = [c for c in r["caveats"] if c.startswith("profile.host_tracer_level=3 did not take effect")]
    assert bool(host_lines) == (not frames), r["caveats"]
    assert not any("device_tracer_level" in c for c in r["caveats"]), "the default device level is no caveat"
    assert json.loads((run_dir / "report.json").read_text())["caveats"] == r["caveats"]
    assert all(f"**caveat:** {c}" in (run_dir / "report.md").read_text() for c in python_lines + host_lines)
    print_run_summary(run_dir, r)
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines (issue 30), never cuts them
    assert all(" ".join(f"caveat: {c}".split()) in out for c in python_lines + host_lines)
    # a level no tracer has: a caveat, not a crash
    bad = load_config(data_uri=str(data_dir), sets=SMALL_DATA + ["profile.host_tracer_level=7"])
    lines = ignored_settings(bad.profile, ["host_tracer_level"])
    assert len(lines) == 1 and "profile.host_tracer_level=7 is not a level" in lines[0], lines


@pytest.mark.slow
def test_input_op_figures_are_per_step_of_wall_time_and_analyze_repeats_them(tuned_run):
    """Issue 23 item 4: `analyze` printed "preprocessing 605204 µs/step" on a 169 ms step — xprof's input-op
    times are self times summed over every thread and the whole capture (an async iterator's wait for its buffer
    included).  The per-step figure is per step of wall time (≤ the step); the thread sum is apart, labelled."""
    from tfbertperf.analyze import analyze
    from tfbertperf.profile.trace import load_trace
    from tfbertperf.profile.xprof_attribution import INPUT_OP_PREFIXES
    from tfbertperf.profile.xprof_tools import find_xplanes
    from tfbertperf.report.console import input_ops_lines

    run_dir, r = tuned_run
    a = r["attribution"]
    wall, thread = sum(a["input_ops_us"].values()), sum(a["input_ops_thread_us"].values())
    step_us = a["step_time_ms"] * 1e3
    assert 0 < wall <= step_us, (wall, step_us)
    assert thread >= wall * (1 - 1e-6) and a["input_ops_concurrency"] == pytest.approx(thread / wall, rel=0.01)
    # the thread sum is bounded by the threads that ran input ops, each busy at most the whole step
    trace = load_trace(find_xplanes(str(run_dir / "tensorboard")))
    input_threads = sum(1 for t in trace.threads if any(e.name.startswith(INPUT_OP_PREFIXES) for e in t.events))
    assert thread <= step_us * input_threads, (thread, step_us, input_threads)
    assert a["input_ops_capture_steps"] >= a["steps_profiled"]
    doc = analyze(run_dir)
    for key in ("input_ops_us", "input_ops_thread_us", "input_ops_concurrency"):
        assert doc["attribution"][key] == a[key], key
    lines = input_ops_lines(a)
    assert lines == input_ops_lines(doc["attribution"]) and "µs/step of wall time" in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("target,stops", [(1.0, True), (1e-9, False)])
def test_an_auto_probe_stops_at_its_target_interval_or_runs_every_planned_block(data_dir, tmp_path, monkeypatch,
                                                                                  target, stops):
    # profile.probe_steps=auto, as ProfileCallback's default: blocks of 5 timed steps, stopped once ≥ 4 blocks give
    # an interval within the target (train/loop.py; a loose target stops after 4, an unreachable one never)
    import tfbertperf.train.loop as loop
    from tfbertperf.job import run
    from tfbertperf.train import recovery

    monkeypatch.setattr(loop, "AUTO_CI95", target)
    # every block where planned: under CI's load the recovery rule postponed blocks onto later ones (25 timed steps
    # in 3 blocks), and merged blocks never reach 4; postponement has its own test below
    monkeypatch.setattr(recovery, "ready", lambda *a: True)
    cfg = load_config(data_uri=str(data_dir), sets=SMALL_DATA + [
        "train.steps=100", "profile.steps=90:95", "profile.probe_steps=auto", f"run.out={tmp_path}"])
    assert cfg.profile.probe_steps == "autotune"
    _, r = run(cfg, progress=False)
    s = r["probe_sample"]
    assert s["auto"] is True and s["planned_blocks"] >= 5, s
    assert s["timed_steps"] == 5 * s["blocks_ran"]
    if stops:
        assert s["blocks_ran"] == 4 and s["stopped"].startswith("after 4 blocks: the interval ±"), s
    else:
        assert s["blocks_ran"] == s["planned_blocks"] and s["stopped"] is None, s
    assert r["attribution"]["input_cost_fraction"] is not None and r["attribution"]["input_cost_ci95"] is not None
    assert r["config"]["profile"]["probe_steps"] == "autotune"


@pytest.mark.slow
def test_an_auto_probe_whose_last_block_is_postponed_past_the_loop_still_stops_at_its_target(data_dir, tmp_path,
                                                                                              monkeypatch):
    # On a loaded machine a block's recovery can outlast the loop (train/recovery.py postpone): the block then
    # runs after the last step, and the auto stop is checked there too — CI saw 5 of 5 blocks run at target 1.0
    import tfbertperf.train.loop as loop
    from tfbertperf.job import run
    from tfbertperf.train import recovery

    # the first four blocks run where planned, every later one waits past the loop (under CI's load the real
    # rule also postponed an early block onto a later one, and only three ran in the loop)
    monkeypatch.setattr(recovery, "ready", lambda step_ms, ran, *a: len(ran) < 4)
    monkeypatch.setattr(loop, "AUTO_CI95", 1.0)
    cfg = load_config(data_uri=str(data_dir), sets=SMALL_DATA + [
        "train.steps=100", "profile.steps=90:95", "profile.probe_steps=auto", f"run.out={tmp_path}"])
    _, r = run(cfg, progress=False)
    s = r["probe_sample"]
    assert s["blocks_ran"] == 4 and s["stopped"].startswith("after 4 blocks: the interval ±"), s
    assert s["timed_steps"] == 20 and r["attribution"]["input_cost_fraction"] is not None


def test_probe_steps_takes_auto_and_refuses_a_negative_count():
    assert load_config(sets=["profile.probe_steps=auto"]).profile.probe_steps == "autotune"
    assert load_config(sets=["profile.probe_steps=12"]).profile.probe_steps == 12
    from tfbertperf.errors import UsageError

    with pytest.raises(UsageError, match="profile.probe_steps"):
        load_config(sets=["profile.probe_steps=-3"])
