"""The accelerator regime in real runs (issue 16): emulated devices fed by the real pipeline report `emulation`
with AU, every run reports its input ceiling, headroom and host utilization (plot and TensorBoard scalars), and
the verdict reads them — storage waits with an idle CPU, preprocessing with a busy one.  Bad emulate input is one
line, exit 2."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfbertperf.config import load_config

ROOT = Path(__file__).resolve().parents[1]
FAST = ["train.warmup_steps=2", "profile.probe_steps=0", "train.log_every=5", "profile.utilization_hz=20"]


def _run(tmp_path, *sets):
    from tfbertperf import job

    cfg = load_config(sets=[*FAST, f"run.out={tmp_path}", *sets])
    return job.run(cfg, progress=False)


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("emu"), "emulate.step_ms=20", "emulate.accelerators=2",
                "train.batch_size=8", "train.steps=14", "profile.steps=4:10", "profile.ceiling_seconds=0.5")


@pytest.mark.slow
def test_emulated_run_reports_the_device_au_and_global_batch(emulated):
    run_dir, r = emulated
    e = r["emulation"]
    assert e["device"] == "custom" and e["accelerators"] == 2 and e["step_ms"] == 20.0 and e["source"]
    assert r["training"]["global_batch_size"] == 16 == e["global_batch_size"]
    assert e["demand_examples_per_sec"] == pytest.approx(800.0)
    # AU = emulated compute ÷ wall over the steps after the first: ≤ 1 up to the timer's precision
    assert 0.3 < e["au"] <= 1.001 and e["au_steps"] == 13
    assert e["au_threshold"] == 0.9 and e["au_pass"] == (e["au"] >= 0.9)
    assert r["accelerator_utilization"] == e["au"]
    assert e["overrun_ms_mean"] > -0.05 and e["copy_ms_mean"] > 0  # a step never ends before its deadline
    assert "emulated 2 x custom" in r["verdict"]["summary"]
    # every step waited at least the emulated 20 ms
    assert r["throughput"]["step_time_ms"]["p50"] >= 20.0


@pytest.mark.slow
def test_every_run_reports_input_ceiling_headroom_and_host_utilization(emulated):
    run_dir, r = emulated
    c = r["input_ceiling"]
    assert c["examples_per_sec"] > 0 and c["mb_per_sec"] > 0 and 0.5 <= c["seconds"] < 5
    assert r["headroom"] == pytest.approx(c["examples_per_sec"] / r["demand_examples_per_sec"], rel=1e-3)
    h = r["host_utilization"]
    for k in ("cpu_busy_fraction_mean", "cpu_busy_fraction_p95", "cpu_user_fraction_mean", "cpu_system_fraction_mean",
              "cpu_iowait_fraction_mean", "process_cpu_fraction_mean", "per_core_busy_fraction_mean", "rss_mb_max",
              "disk_read_mb", "net_rx_mb", "gpus"):
        assert k in h, k
    assert h["samples"] >= 5 and h["hz"] >= 10 and h["rss_mb_max"] > 100
    assert {m["name"] for m in h["marks"]} >= {"train_start", "profile_start", "profile_stop", "train_end"}
    assert (run_dir / "plots" / "utilization.png").stat().st_size > 10_000
    assert "plots/utilization.png" in r["artifacts"]["plots"]
    assert list((run_dir / "tensorboard" / "host").glob("events.out.tfevents.*"))
    saved = json.loads((run_dir / "report.json").read_text())
    assert saved["host_utilization"]["samples"] == h["samples"] and saved["emulation"]["au"] == r["emulation"]["au"]


@pytest.mark.slow
def test_slow_storage_is_input_bound_with_an_idle_cpu_and_says_storage(tmp_path):
    # 200 ms per read, naive pipeline, 8 emulated devices demanding 6,400 examples/s: the pipeline cannot keep up.
    _, r = _run(tmp_path, "emulate.step_ms=20", "emulate.accelerators=8", "train.batch_size=16",
                "data.read_latency_ms=200", "pipeline.preset=naive", "train.steps=10", "profile.steps=3:8",
                "profile.ceiling_seconds=1")
    v, h = r["verdict"], r["host_utilization"]
    assert r["headroom"] < 1 and v["bottleneck"] == "input", v["summary"]
    # this run's own CPU share (the shared test machine's other processes count in cpu_busy, not here), and its
    # threads: none of them is CPU-bound (they sleep in the reads; on a loaded machine a wake-up waits for a core)
    assert h["process_cpu_fraction_mean"] < 0.5, h
    assert h["thread_cpu"]["cpu_saturation_fraction"] < 0.8, h["thread_cpu"]
    # named from the reads' share of the step even when other processes keep the shared machine's CPU busy
    assert v["input_cause"] == "storage" and "waiting on storage" in v["summary"], v["summary"]
    assert "headroom" in v["summary"] and r["emulation"]["au_pass"] is False
    # the reads' share is taken over the measured steps (storage.read_wait_fraction), at most the whole span.  On a
    # loaded machine part of a read's wall time is its thread waiting for a core, reported apart
    # (read_core_wait_fraction; 0.477 + the rest under load ~6, issue 31): the two together are the reads' share.
    s = r["storage"]
    assert s["read_wait_fraction"] <= 1.0 and 0.5 <= s["read_wait_fraction"] + s["read_core_wait_fraction"] <= 1.0, s


@pytest.mark.slow
def test_cpu_heavy_inline_preprocessing_is_input_bound_with_a_saturated_cpu_and_says_preprocessing(tmp_path):
    # Inline WordPiece tokenization + masking in tf.data feeding 16 emulated devices at 5 ms (102,400 examples/s,
    # beyond any ceiling here): headroom < 1, so the verdict is input-bound however much the pipeline overlaps;
    # the run's threads want every core (CPU + run-queue wait) over the measured steps, and it says preprocessing.
    # The host figures cover the measured steps only: read over the whole training (setup, tracing, warm-up
    # included) the same run read 0.27-0.65 saturation on a quiet machine, and the warm-up's cold reads made the
    # reads' share of the step 170-721 %, so it said "storage".
    _, r = _run(tmp_path, "pipeline.tokenize=inline", "emulate.step_ms=5", "emulate.accelerators=16",
                "train.batch_size=32", "train.steps=30", "profile.steps=4:10", "profile.ceiling_seconds=1")
    v, h = r["verdict"], r["host_utilization"]
    th = h["thread_cpu"]
    assert v["bottleneck"] == "input" and r["headroom"] < 1, v["summary"]
    assert "headroom" in v["summary"] and "input-bound whatever the overlap" in v["summary"], v["summary"]
    assert r["input_ceiling"]["examples_per_sec"] < r["demand_examples_per_sec"]
    assert h["span"] == "measured steps" and h["samples"] >= 3, h
    assert th["cpu_saturation_fraction"] >= 0.8 and th["process_cores_wanted"] > 1.0, th
    # the interleave's reads run beside the tokenizing map: some read is in flight for 26-59 % of the measured
    # steps on 2 cores (CI read 60 %, before a read's wait for a core was taken out of it), so the reads' share
    # cannot name the cause here; the saturated CPU does, and the words still give the reads' share
    s = r["storage"]
    assert 0.0 <= s["read_core_wait_fraction"] and s["read_wait_fraction"] + s["read_core_wait_fraction"] <= 1.0
    assert s["read_core_wait_ms"] > 0, s  # the reading threads waited for a core: the CPU is saturated
    assert f"storage reads {s['read_wait_fraction']:.0%} of the step" in v["summary"], v["summary"]
    if "the host is contended" in v["summary"]:
        # other processes held most of the CPU (a shared machine, issue 31: 78 % of it): the verdict does not
        # blame this run's preprocessing for a saturation that is mostly waiting for a core (verdict._contended,
        # unit-tested in test_a_cpu_held_by_other_processes_is_not_this_pipelines_preprocessing)
        assert v["input_cause"] in ("mixed", "storage") and "other processes hold" in v["summary"], v["summary"]
    else:
        assert v["input_cause"] == "preprocessing" and "preprocessing-limited" in v["summary"], v["summary"]
    assert f"CPU saturation {th['cpu_saturation_fraction']:.0%}" in v["summary"], v["summary"]


def _cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("sets, culprit", [
    (["emulate.device=a100x"], "emulate.device='a100x'"),
    (["emulate.accelerators=0"], "emulate.accelerators"),
    (["emulate.step_ms=-5"], "emulate.step_ms"),
])
def test_bad_emulate_input_is_one_line_exit_2(sets, culprit, tmp_path):
    r = _cli("tfbertperf.run", *[a for s in sets for a in ("--set", s)], "--set", f"run.out={tmp_path}")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and culprit in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())  # refused before any run directory


def test_unparsable_size_is_one_line_exit_2(tmp_path):
    r = _cli("tfbertperf.prepare", "--synthetic", "--size", "lots", "--out", str(tmp_path / "x"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "lots" in lines[0], r.stderr


def test_max_accelerators_search_finds_the_edge_with_few_runs():
    from tfbertperf.train.maxaccel import search

    calls = []

    def measure(n):  # a pipeline with a 1,000 examples/s ceiling feeding devices that want 100 examples/s each
        calls.append(n)
        return {"au": min(1.0, 1000 / (100 * n)) * 0.995, "examples_per_sec": min(1000.0, 100.0 * n)}

    r = search(measure, 0.9)
    assert r["n"] == 11 and r["au_at_n"] >= 0.9 > r["au_at_n_plus_1"]  # 0.995 × 1000/1100 ≥ 0.9 > 0.995 × 1000/1200
    # failing N run twice (confirm=1), passing N once
    assert all(calls.count(n) == (1 if n <= 11 else 2) for n in set(calls)) and len(calls) <= 13
    assert r["examples_per_sec_at_n"] == 1000.0 and len(r["trials"]) == len(calls)
    assert search(lambda n: {"au": 0.5, "examples_per_sec": 1.0}, 0.9)["n"] == 0
    flaky = iter([0.5, 0.95, 0.95, 0.95, 0.5, 0.5, 0.95, 0.5, 0.5])  # N=1 fails once (a burst), then passes
    r = search(lambda n: {"au": next(flaky), "examples_per_sec": 1.0}, 0.9)
    assert r["n"] >= 1 and r["au_at_n"] == 0.95


@pytest.mark.slow
def test_run_max_accelerators_reports_n_and_the_au_on_both_sides(tmp_path):
    from tfbertperf.accelerator_search import max_accelerators

    cfg = load_config(sets=[*FAST, f"run.out={tmp_path}", "emulate.step_ms=20", "train.batch_size=16",
                            "pipeline.preset=naive", "data.read_latency_ms=20", "train.steps=8",
                            "profile.steps=3:6", "profile.ceiling_seconds=0.5"])
    run_dir, r = max_accelerators(cfg, progress=False, n_max=8)
    m = r["max_accelerators"]
    assert m["trials"] and all(t["pass"] == (t["au"] >= 0.9) for t in m["trials"])
    if m["n"]:
        assert m["au_at_n"] >= 0.9 and m["examples_per_sec_at_n"] > 0
        assert r["emulation"]["accelerators"] == m["n"]
    assert m["n"] == 8 or m["au_at_n_plus_1"] < 0.9
    assert json.loads((run_dir / "report.json").read_text())["max_accelerators"]["n"] == m["n"]


def test_verdict_reads_headroom_and_the_cpu():
    from tfbertperf.profile.verdict import input_cause, refine

    host = lambda busy, own: {"samples": 10, "cpu_busy_fraction_mean": busy, "process_cpu_fraction_mean": own,  # noqa: E731
                              "cpu_iowait_fraction_mean": 0.0}
    assert input_cause(host(0.3, 0.2))[0] == "storage"
    assert input_cause(host(0.95, 0.9))[0] == "preprocessing"
    busy_other = input_cause(host(0.95, 0.1))  # a busy CPU that is not this run's: not its preprocessing
    assert busy_other[0] == "mixed" and "the host is contended: other processes hold 85%" in busy_other[1]
    assert input_cause(host(0.95, 0.1), read_share=0.8)[0] == "storage"  # reads in flight most of the step
    assert input_cause(host(0.65, 0.5), read_share=0.6)[0] == "storage"
    assert input_cause(host(0.65, 0.5))[0] == "mixed"
    assert input_cause(None)[0] is None
    doc = {"bottleneck": "compute", "summary": "compute-bound: input costs 5% of the 10.0 ms step", "actions": [
        {"advice": "prefetch 0 → autotune (--set pipeline.prefetch=autotune)", "set": ["pipeline.prefetch=autotune"]},
        {"advice": "parse after batch (--set pipeline.parse_after_batch=true)", "set": ["pipeline.parse_after_batch=true"]}]}
    ceiling = {"examples_per_sec": 500.0}
    v = refine(doc, headroom=0.5, host=host(0.95, 0.9), ceiling=ceiling, demand=1000.0)
    assert v["bottleneck"] == "input" and v["input_cause"] == "preprocessing" and "whatever the overlap" in v["summary"]
    assert v["actions"][0]["advice"].startswith("preprocessing-limited") and "parse_after_batch" in v["actions"][1]["advice"]
    thin = refine(doc, headroom=1.2, host=host(0.3, 0.2), ceiling=ceiling, demand=416.0)
    assert thin["bottleneck"] == "compute" and "thin margin" in thin["summary"] and thin["input_cause"] is None


def test_verdict_reads_the_runs_cpu_saturation_before_the_machines():
    from tfbertperf.profile.verdict import input_cause

    def host(busy, sat, wanted=1.0):  # the run's threads used what they wanted (no wait for a core)
        return {"samples": 10, "cpu_busy_fraction_mean": busy, "process_cpu_fraction_mean": 0.3, "cores": 2,
                "thread_cpu": {"cpu_saturation_fraction": sat, "busiest_thread_wanted_fraction": sat,
                               "busiest_thread_cpu_fraction": sat, "process_cores_used": wanted,
                               "process_cores_wanted": wanted}}

    # one sequential map saturating one core of two: the machine reads half busy, the run is CPU-bound
    cause, words = input_cause(host(0.5, 0.95))
    assert cause == "preprocessing" and "CPU saturation 95%" in words and "1.0 of 2 cores" in words
    # reads slow because they wait for a core: still preprocessing; reads slow with idle threads: storage
    assert input_cause(host(1.0, 0.95), read_share=1.5)[0] == "preprocessing"
    assert input_cause(host(1.0, 0.3), read_share=0.9)[0] == "storage"  # a machine others keep busy
    assert input_cause(host(1.0, 0.3))[0] == "storage"
    assert input_cause(host(1.0, 0.6))[0] == "mixed"
    # the real model computing on this CPU keeps the threads busy: the machine's figures and the reads decide
    assert input_cause(host(0.3, 0.95), model_on_host=True)[0] == "storage"
    assert input_cause(host(0.95, 0.95), read_share=0.8, model_on_host=True)[0] == "storage"


def test_a_cpu_held_by_other_processes_is_not_this_pipelines_preprocessing():
    """Issue 23 item 3: the scenario's cloud VM read "waiting on storage" on a quiet machine and "preprocessing-
    limited: CPU 90 % busy" at load 3–4 — its threads' run-queue wait (other processes holding the cores) was
    counted as its own CPU saturation."""
    from tfbertperf.profile.verdict import input_cause

    def host(busy, own, used, wanted):  # used / wanted: the busiest thread's CPU / CPU + run-queue wait, ÷ wall
        return {"samples": 10, "cpu_busy_fraction_mean": busy, "process_cpu_fraction_mean": own, "cores": 2,
                "thread_cpu": {"cpu_saturation_fraction": wanted, "busiest_thread_wanted_fraction": wanted,
                               "busiest_thread_cpu_fraction": used, "process_cores_used": used,
                               "process_cores_wanted": wanted * 2}}

    # loaded host (others hold 75 % of the CPU), the run's threads ran 20 % and waited for a core to 90 %
    cause, words = input_cause(host(0.95, 0.2, 0.2, 0.9), read_share=0.7)
    assert cause == "storage" and "the host is contended: other processes hold 75% of the CPU" in words, words
    assert "busiest thread 20% of a core" in words
    cause, words = input_cause(host(0.95, 0.2, 0.2, 0.9), read_share=0.1)  # reads do not explain it either
    assert cause == "mixed" and "contended" in words
    # the same saturation from the run's own work (it used the cores it wanted): preprocessing, no contention
    cause, words = input_cause(host(0.95, 0.9, 0.9, 0.95), read_share=0.7)
    assert cause == "preprocessing" and "contended" not in words
    # others hold the host but this run's threads still used most of a core: its own preprocessing
    assert input_cause(host(0.95, 0.4, 0.7, 0.95))[0] == "preprocessing"
    # a quiet host: the same reads decide as before
    assert input_cause(host(0.3, 0.25, 0.25, 0.3), read_share=0.7)[0] == "storage"
    # the scenario's cloud VM at load 4.4 (its r2 run): CPU 100 % busy, this run 23 %, busiest thread used 20 %
    # of a core and wanted 58 % (saturation 79 %), reads 29 % of the step, blocked 50 % of it: mixed before;
    # reads are most of what it waits on → storage, said with the contention
    cause, words = input_cause(host(1.0, 0.23, 0.2, 0.79), read_share=0.29, wait_share=0.50)
    assert cause == "storage" and "contended" in words and "reads are 58% of its 50% blocked wait" in words, words
    assert input_cause(host(1.0, 0.23, 0.2, 0.79), read_share=0.05, wait_share=0.50)[0] == "mixed"
    # the same figures on a host this run has to itself stay the run's own: preprocessing or not by saturation
    assert input_cause(host(0.8, 0.75, 0.75, 0.79), read_share=0.29, wait_share=0.50)[0] == "mixed"


@pytest.mark.slow
def test_an_emulated_run_counts_its_model_like_the_real_run_and_analyze_repeats_its_figures(emulated):
    """One definition, one source (issue 23, item 4): the emulated run's parameter count is the real model's on the
    same data; `analyze` of its directory gives the run's AU and the same input-op lines; the emulated device's
    wait is device compute, not host compute (item 9)."""
    from tfbertperf.analyze import analyze
    from tfbertperf.model.build import build_model
    from tfbertperf.report.console import input_ops_lines

    run_dir, r = emulated
    cfg = load_config(sets=["train.batch_size=8"])
    vocab = json.loads((Path(cfg.resolved_data_uri()) / "manifest.json").read_text())["vocab_size"]
    real = build_model(cfg.model, vocab, cfg.data.seq_len)
    assert r["model"]["parameters"] == real.count_params() and r["model"]["emulated"] == "custom"
    doc = analyze(run_dir)
    assert doc["accelerator_utilization"] == pytest.approx(r["accelerator_utilization"], abs=1e-6)
    assert input_ops_lines(doc["attribution"]) == input_ops_lines(r["attribution"])
    bd = r["attribution"]["breakdown_ms"]
    assert bd["device_compute"] >= 0.9 * r["emulation"]["step_ms"] and bd["host_compute"] < bd["device_compute"]
    assert doc["attribution"]["breakdown_ms"] == bd
    # the window 4:10 is the 6 steps xprof finds (a capture of exactly 4–9 gave 4: xprof drops its first and last)
    assert r["attribution"]["steps_profiled"] == 6
    # report.md (item 12): the verdict said once, each plot's own alt text, a rounded loss
    md = (run_dir / "report.md").read_text()
    b = r["verdict"]["bottleneck"]
    assert f"**Verdict:** {b}-bound" in md and f"{b}-bound.** {b}-bound" not in md
    assert md.count("![step-time breakdown") == 1 and "![host utilization over the run" in md
    assert re.search(r"final loss \d+\.\d{4}\b", md)


def test_a_cycle_length_above_the_shards_is_what_is_in_force_with_a_caveat():
    """Item 12: cycle_length 16 over 8 shards reads 8 at once; report.json's pipeline says 8 and a caveat why."""
    from tfbertperf.data.pipeline import effective_pipeline
    from tfbertperf.report.build import set_pipeline

    report = {"caveats": []}
    set_pipeline(report, effective_pipeline(load_config(sets=["pipeline.cycle_length=16"]), 8))
    assert report["pipeline"]["cycle_length"] == 8
    assert report["caveats"] == ["pipeline.cycle_length 16 over 8 shard files: 8 files are read at once (one per shard)"]
    report = {"caveats": []}
    set_pipeline(report, effective_pipeline(load_config(sets=["pipeline.cycle_length=4"]), 8))
    assert report["pipeline"]["cycle_length"] == 4 and report["caveats"] == []
