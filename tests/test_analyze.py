"""`tfbertperf analyze` on profiles written by small foreign TF programs (tests/programs/stall_loop.py).

The programs are plain custom loops with step markers, run in their own interpreter.  Ground truth for the
stall case is measured by the same program: step time with the stall vs. the same model fed from memory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "programs"))
from runner import run_program  # noqa: E402


# The injected stall's strength (stall_loop.py --rounds).  A strong one: on this noisy 2-core machine the what-if
# truth of a single run spreads over ±10 pp (default 12 rounds: 24–49 %); at 24 rounds it stayed ≥ 43 % with
# xprof's figure ≤ 15 %, so "closer than xprof" is decided by the estimate, not by the truth's noise
# (tools/bench/bench_attribution_foreign.py --rounds 24; the contention.py docstring has the figures).
STALL_ROUNDS = 24


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    out = tmp_path_factory.mktemp("profiles")
    return run_program(out, "stall,memory,compute,nomarkers,truth", rounds=STALL_ROUNDS)


def analyze_cli(*args):
    return subprocess.run([sys.executable, "-m", "tfbertperf.analyze", *map(str, args)],
                          capture_output=True, text=True, timeout=180)


def analyze_json(path) -> dict:
    p = analyze_cli(path, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def assert_one_line_exit_2(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("tfbertperf: error: ")
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_input_stall_is_named_input_bound(profiles):
    doc = analyze_json(profiles["stall"]["logdir"])
    assert doc["verdict"]["bottleneck"] == "input"
    assert doc["verdict"]["recommendations"]
    assert doc["attribution"]["steps_profiled"] >= 10


def test_compute_bound_program_is_named_compute_bound(profiles):
    doc = analyze_json(profiles["compute"]["logdir"])
    assert doc["verdict"]["bottleneck"] == "compute", doc["verdict"]
    assert doc["attribution"]["input_cost_estimate_fraction"] < 0.2


def test_stall_estimate_is_closer_to_the_what_if_truth_than_xprofs_figure(profiles):
    # The acceptance criterion.  what-if truth: the same program, stall pipeline vs fed from memory, in
    # alternating unprofiled blocks.  xprof's input share counts only the time the loop stood blocked for a
    # batch; our estimate adds the CPU the busy tf.data threads took from compute (profile/contention.py).
    truth = profiles["truth"]["input_cost_fraction"]
    att = analyze_json(profiles["stall"]["logdir"])["attribution"]
    ours, xprof = att["input_cost_estimate_fraction"], att["input_bound_fraction"]
    assert abs(ours - truth) < abs(xprof - truth), {"truth": truth, "ours": ours, "xprof": xprof}
    assert att["input_cost_fraction"] is None  # no probe in a foreign profile


def test_breakdown_sums_to_step_time_and_fractions_to_one(profiles):
    att = analyze_json(profiles["stall"]["logdir"])["attribution"]
    # measured, not the remainder: xprof's step is the program's own step (its wall clock around each step),
    # and the input category is the program's own time blocked in next()
    own = profiles["stall"]
    assert 0.6 < att["step_time_ms"] / own["step_time_ms"] < 1.6, (att["step_time_ms"], own["step_time_ms"])
    assert abs(att["breakdown_ms"]["input"] - own["input_wait_ms"]) < 0.5 * own["input_wait_ms"] + 1.0
    assert set(att["breakdown_ms"]) == {"input", "host_to_device", "device_compute", "host_compute",
                                        "kernel_launch", "device_to_device", "collectives", "output",
                                        "compile", "other"}
    assert att["source"] == "xprof"
    assert set(att["input_ops_us"]) >= {"storage_read", "preprocessing", "enqueue"}
    assert att["input_ops_us"]["preprocessing"] > 0  # the heavy map shows up as preprocessing


def test_table_output_names_categories_and_verdict(profiles):
    p = analyze_cli(profiles["stall"]["logdir"])
    assert p.returncode == 0, p.stderr
    assert "ms/step" in p.stdout and "input (blocked wait)" in p.stdout and "host compute" in p.stdout
    assert "verdict: input-bound" in p.stdout


def test_several_hosts_give_a_table_per_host_and_combined(profiles, tmp_path):
    (src,) = Path(profiles["memory"]["logdir"]).rglob("*.xplane.pb")
    session = tmp_path / "logdir" / "plugins" / "profile" / "2099_01_01_00_00_00"
    session.mkdir(parents=True)
    shutil.copy(src, session / "worker0.xplane.pb")
    (src2,) = Path(profiles["stall"]["logdir"]).rglob("*.xplane.pb")
    shutil.copy(src2, session / "worker1.xplane.pb")
    p = analyze_cli(tmp_path / "logdir")
    assert p.returncode == 0, p.stderr
    assert "host worker0" in p.stdout and "host worker1" in p.stdout and "combined (2 hosts)" in p.stdout
    doc = analyze_json(tmp_path / "logdir")
    assert set(doc["hosts"]) == {"worker0", "worker1"}
    # the stalled worker is the input-bound one (its pipeline steals CPU more than it blocks the loop)
    h = doc["hosts"]
    assert h["worker1"]["input_cost_estimate_fraction"] > h["worker0"]["input_cost_estimate_fraction"] + 0.1
    assert doc["attribution"]["steps_profiled"] >= 1  # xprof's combined view of both hosts
    assert abs(sum(doc["attribution"]["fractions"].values()) - 1) <= 0.01


def test_session_flag_picks_an_older_session(profiles, tmp_path):
    prof = tmp_path / "plugins" / "profile"
    for name, mode in (("2000_01_01_00_00_00", "stall"), ("2001_01_01_00_00_00", "memory")):
        (src,) = Path(profiles[mode]["logdir"]).rglob("*.xplane.pb")
        (prof / name).mkdir(parents=True)
        shutil.copy(src, prof / name / "vm.xplane.pb")
    newest = analyze_json(tmp_path)
    older = json.loads(analyze_cli(tmp_path, "--session", "2000_01_01_00_00_00", "--json").stdout)
    assert newest["profile"]["session"] == "2001_01_01_00_00_00"
    assert older["profile"]["session"] == "2000_01_01_00_00_00"
    assert older["verdict"]["bottleneck"] == "input" and newest["verdict"]["bottleneck"] == "compute"
    assert_one_line_exit_2(analyze_cli(tmp_path, "--session", "nope"), "--session nope")


def test_xplane_file_path_is_accepted(profiles):
    (src,) = Path(profiles["stall"]["logdir"]).rglob("*.xplane.pb")
    doc = analyze_json(src)
    assert doc["verdict"]["bottleneck"] == "input"


def test_profile_without_step_markers_says_how_to_add_them(profiles):
    p = analyze_cli(profiles["nomarkers"]["logdir"])
    assert_one_line_exit_2(p, 'Trace("train", step_num=', "_r=1", "ProfileCallback")


def test_path_without_profile_exits_2(tmp_path):
    assert_one_line_exit_2(analyze_cli(tmp_path), "no profile found")
    assert_one_line_exit_2(analyze_cli(tmp_path / "missing"), "no such file")


def test_empty_session_exits_2(tmp_path):
    (tmp_path / "plugins" / "profile" / "2024_01_01_00_00_00").mkdir(parents=True)
    assert_one_line_exit_2(analyze_cli(tmp_path), "empty profile session")


def test_corrupt_xplane_exits_2_naming_the_file(tmp_path):
    s = tmp_path / "plugins" / "profile" / "2024_01_01_00_00_00"
    s.mkdir(parents=True)
    (s / "host.xplane.pb").write_bytes(b"\x08\xff\xff not a protobuf" * 50)
    assert_one_line_exit_2(analyze_cli(tmp_path), "host.xplane.pb", "corrupt")
    (s / "host.xplane.pb").write_bytes(b"")
    assert_one_line_exit_2(analyze_cli(tmp_path), "host.xplane.pb", "empty")


def test_validate_needs_one_of_our_run_directories(profiles):
    assert_one_line_exit_2(analyze_cli(profiles["stall"]["logdir"], "--validate"), "--validate", "report.json")


@pytest.mark.slow
def test_validate_reruns_with_the_top_recommendation_and_measures_speedup(tmp_path):
    sets = ["pipeline.preset=naive", "train.steps=12", "profile.steps=3:10", "profile.probe_steps=3",
            "train.batch_size=8", "train.warmup_steps=2", f"run.out={tmp_path}"]
    p = subprocess.run([sys.executable, "-m", "tfbertperf.run", *[x for s in sets for x in ("--set", s)]],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    (run_dir,) = [d for d in tmp_path.iterdir() if (d / "report.json").is_file()]
    doc = analyze_json_args(run_dir, "--validate")
    v = doc["validation"]
    assert v["set"] and v["set"] == doc["verdict"]["actions"][0]["set"]
    assert v["speedup"] == pytest.approx(v["baseline_step_ms"] / v["recommended_step_ms"], rel=1e-3)
    # the figures are the two re-runs' own measurements, as their report.json files on disk say (whether the
    # advice helps is not asserted: on this CPU the top advice was train.jit=true at 0.94x; issue 17 finding 8)
    base = json.loads((Path(v["baseline_run"]) / "report.json").read_text())
    assert v["baseline_step_ms"] == base["throughput"]["step_time_ms"]["p50"] > 0
    rec = json.loads((Path(v["recommended_run"]) / "report.json").read_text())
    key, value = v["set"][0].split("=", 1)
    section, name = key.split(".")
    assert str(rec["config"][section][name]).lower() == value.lower()
    assert v["recommended_step_ms"] == rec["throughput"]["step_time_ms"]["p50"] > 0
    assert str(base["config"][section][name]).lower() != value.lower()  # the baseline ran without it
    assert doc["profile"]["run_report"] is True


def analyze_json_args(*args) -> dict:
    p = analyze_cli(*args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)
