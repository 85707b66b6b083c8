"""Placement strategies and determinism. Each case runs in a fresh Python process: logical CPU devices,
op determinism and multi-worker collectives are process-global TF state that must be set before TF starts."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tfbertperf.config import load_config
from tfbertperf.train.multiworker import launch_workers

COMMON = """
import json
from tfbertperf.config import load_config
from tfbertperf.errors import UsageError
from tfbertperf.train.loop import train
from tfbertperf.data.synthetic import synthetic_dataset_fn
from tfbertperf.profile.capture import Capture

def cfg(**over):
    base = {"train.steps": 6, "train.batch_size": 8, "data.seq_len": 32, "data.max_predictions": 5,
            "profile.steps": "none", "profile.probe_steps": 0, "train.warmup_steps": 1}
    base.update(over)
    return load_config(overrides=base)

def run(c):
    return train(c, synthetic_dataset_fn(c, 500), 500, None, progress=None)
"""


def _python(body: str, timeout_s: float = 300) -> dict:
    code = COMMON + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_mirrored_on_two_logical_cpus_splits_the_global_batch_and_matches_single_device_losses():
    out = _python("""
        from tfbertperf.train.strategy import split_cpu_devices
        split_cpu_devices(2)
        # dropout off: then the mean loss over 2 replicas x 4 examples equals 1 device x 8 examples
        one = run(cfg(**{"model.dropout": 0.0}))
        two = run(cfg(**{"model.dropout": 0.0, "train.strategy": "mirrored"}))
        try:
            run(cfg(**{"train.strategy": "mirrored", "train.batch_size": 7}))
            err = ""
        except UsageError as e:
            err = str(e)
        print(json.dumps({"one": one.loss_trajectory, "two": two.loss_trajectory, "replicas": two.replicas,
                          "per_replica": two.extra["per_replica_batch_size"], "err": err}))
    """)
    assert out["replicas"] == 2 and out["per_replica"] == 4
    for (_, a), (_, b) in zip(out["one"], out["two"]):
        assert abs(a - b) < 1e-3 * max(1.0, abs(a)), (out["one"], out["two"])
    assert "train.batch_size=7" in out["err"] and "2 replicas" in out["err"]


@pytest.mark.slow
def test_a_mirrored_run_on_two_logical_cpus_is_profiled_and_xprof_finds_its_steps(tmp_path):
    out = _python(f"""
        from tfbertperf.train.strategy import split_cpu_devices
        split_cpu_devices(2)
        from tfbertperf.profile import attribution, xprof_tools
        c = cfg(**{{"train.strategy": "mirrored", "train.steps": 14, "profile.steps": "3:12"}})
        r = train(c, synthetic_dataset_fn(c, 500), 500, {str(tmp_path)!r}, progress=None,
                  capture=Capture.from_config({str(tmp_path)!r}, c.profile))
        doc = attribution.attribute_host(xprof_tools.find_xplanes({str(tmp_path)!r}))
        print(json.dumps({{"replicas": r.replicas, "steps": doc["steps_profiled"],
                          "step_ms": doc["step_time_ms"], "fractions": doc["fractions"],
                          "own_ms": sum(r.step_times_ms[3:12]) / 9}}))
    """)
    assert out["replicas"] == 2 and out["steps"] >= 6
    # xprof's step is the loop's own (its timer over the window's steps), and the compute shows as host compute
    assert 0.6 < out["step_ms"] / out["own_ms"] < 1.6, out
    assert out["fractions"]["host_compute"] >= 0.3, out["fractions"]


@pytest.mark.slow
def test_same_seed_gives_identical_loss_trajectories_and_another_seed_does_not():
    out = _python("""
        a = run(cfg(**{"train.deterministic": True, "train.seed": 7}))
        b = run(cfg(**{"train.deterministic": True, "train.seed": 7}))
        c = run(cfg(**{"train.deterministic": True, "train.seed": 8}))
        print(json.dumps({"a": a.loss_trajectory, "b": b.loss_trajectory, "c": c.loss_trajectory}))
    """)
    assert out["a"] == out["b"]  # bit-identical floats
    assert out["a"] != out["c"]


def _xprof_step_count(logdir) -> int:
    from xprof.convert.raw_to_tool_data import xspace_to_tool_data

    xplanes = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    raw = xspace_to_tool_data(xplanes, "input_pipeline_analyzer", {})
    raw = raw[0] if isinstance(raw, tuple) else raw
    tables = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    return len(next(t for t in tables if t.get("cols") and t["cols"][0]["id"] == "stepnum")["rows"])


@pytest.mark.slow
def test_two_local_workers_finish_the_same_steps_and_each_profile_has_steps(tmp_path):
    cfg = load_config(overrides={
        "train.steps": 20, "train.batch_size": 8, "data.seq_len": 32, "data.max_predictions": 5,
        "profile.steps": "4:18", "profile.probe_steps": 3, "train.warmup_steps": 2, "train.log_every": 10,
    })
    lines = []
    results = launch_workers(cfg, 2, tmp_path, entry="tfbertperf.job:synthetic_worker", timeout_s=400,
                             progress=lines.append, retries=3)
    assert [r["worker_index"] for r in results] == [0, 1]
    for r in results:
        t = r["train"]
        assert t["steps"] == 20 and t["replicas"] == 2 and t["extra"]["per_replica_batch_size"] == 4
        assert t["compute_only_step_ms"] > 0 and t["extra"]["worker_index"] == r["worker_index"]
        assert t["extra"]["num_workers"] == 2
        assert _xprof_step_count(r["tensorboard"]) >= 8
    # the gradient all-reduce makes both workers see the same global loss
    assert results[0]["train"]["loss_trajectory"] == results[1]["train"]["loss_trajectory"]
    assert sum("finished" in line for line in lines) >= 2


def test_a_worker_that_fails_in_python_stops_the_group_with_one_line_naming_it(tmp_path):
    import pytest

    from tfbertperf.train.multiworker import WorkerError

    cfg = load_config(overrides={"train.steps": 2, "profile.steps": "none"})
    with pytest.raises(WorkerError, match=r"worker \d failed \(exit 1\): .*no_such_entry.* log: ") as err:
        launch_workers(cfg, 2, tmp_path, entry="tfbertperf.train.multiworker:no_such_entry", timeout_s=120,
                       progress=None)
    assert "\n" not in str(err.value)
