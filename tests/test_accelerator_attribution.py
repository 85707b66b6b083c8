"""Accelerator-correct attribution (issue 12) on real GPU captures (../shared/fixtures/profiles, facts in its
README): device planes in `analyze`, host→device copies as their own category, device-only summaries for
unmarked captures, AU and advice per hardware, the hardware cross-check, TPU step tables, and the loop that
no longer waits for the device every step."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tfbertperf.config import load_config
from tfbertperf.profile import advice, attribution, steptable, xprof_tools
from tfbertperf.profile.accelerator_facts import classify_device, classify_gpu

from profile_fixtures import ATTENTION, FIXTURES, GEMM, MANGLED, V100
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"profile fixtures not found at {FIXTURES}")


def analyze_cli(*args):
    return subprocess.run([sys.executable, "-m", "tfbertperf.analyze", *map(str, args)],
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def v100_doc():
    p = analyze_cli(V100, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


# ---- the V100 capture (TF, MirroredStrategy, 8 GPUs of which 3 appear active)

@needs_fixtures
def test_v100_devices_in_analyze_json_match_the_readme_facts(v100_doc):
    by = {d["name"]: d for d in v100_doc["devices"]}
    assert list(by) == [f"/device:GPU:{i}" for i in range(8)]
    for d in v100_doc["devices"]:
        assert {"name", "kind", "busy_ms", "memcpy_ms", "h2d_ms", "d2h_ms", "window_ms", "busy_fraction"} <= set(d)
    for name, busy, memcpy in (("/device:GPU:4", 14.825, 0.198), ("/device:GPU:6", 14.865, 0.239)):
        assert by[name]["busy_ms"] == pytest.approx(busy, rel=0.01)
        assert by[name]["memcpy_ms"] == pytest.approx(memcpy, rel=0.01)
        assert by[name]["h2d_ms"] > 0
    assert sum(1 for d in v100_doc["devices"] if d["events"]) == 3


@needs_fixtures
def test_v100_host_to_device_is_measured_and_taken_out_of_xprofs_categories(v100_doc):
    att = v100_doc["attribution"]
    raw = steptable.step_rows(xprof_tools.convert([V100], "input_pipeline_analyzer"))
    assert len(raw) == 1 and raw[0]["host_to_device"] == 0  # xprof's generic table has no H2D column
    bd, tr = att["breakdown_ms"], att["transfer"]
    assert bd["host_to_device"] > 0 and tr["steps_matched"] == 1
    # the exposed copies of step 0 on the slowest device (GPU:4 0.0225 ms; 0.0511 ms in flight on GPU:6)
    assert bd["host_to_device"] == pytest.approx(0.0225, abs=0.0005)
    assert tr["inflight_ms_per_step"] == pytest.approx(0.0511, abs=0.0005)
    # moved, never made up: what host_to_device gained, xprof's input / device compute / other lost
    for cat in steptable.TRANSFER_SOURCES:
        assert bd[cat] == pytest.approx(raw[0][cat] - tr["taken_from_ms"][cat], abs=1e-3)
    assert sum(tr["taken_from_ms"].values()) == pytest.approx(bd["host_to_device"], abs=1e-3)
    assert raw[0]["input"] == 0 and tr["taken_from_ms"]["input"] == 0  # nothing in input to take it from here
    assert abs(sum(att["fractions"].values()) - 1) <= 0.01
    assert abs(sum(bd.values()) - att["step_time_ms"]) < 1e-3


@needs_fixtures
def test_v100_accelerator_semantics(v100_doc):
    att = v100_doc["attribution"]
    assert att["hardware_type"] == "GPU" and att["compute_on"] == "accelerator"
    # no stolen-CPU term on a GPU: busy tf.data threads do not slow its kernels
    assert att["input_cost_estimate_fraction"] is None and att["input_stolen_cpu_fraction"] is None
    # AU = busy of the devices that ran kernels inside their steps ÷ (2 devices × the 21.31 ms step)
    au = (14.825 + 14.865) / (2 * 21.3104)
    assert v100_doc["accelerator_utilization"] == pytest.approx(au, rel=0.01)
    assert att["device_busy_fraction"] == v100_doc["accelerator_utilization"]
    assert att["accelerator"]["compute_capability"] == "7.0"
    assert att["accelerator"]["recommended_precision"] == "mixed_float16"
    assert att["hardware_warning"] is None  # a foreign file: no environment to check against
    assert v100_doc["verdict"]["bottleneck"] == "other"  # xprof: 30.2 % "All others"


@needs_fixtures
def test_v100_console_names_the_idle_gpus():
    p = analyze_cli(V100)
    assert p.returncode == 0, p.stderr
    assert "3 of 8 GPUs active: GPU:1, GPU:4, GPU:6; 5 idle: GPU:0, GPU:2, GPU:3, GPU:5, GPU:7" in p.stdout
    assert "host→device" in p.stdout and "device busy ÷ wall" in p.stdout
    assert "--set" not in p.stdout  # advice for a foreign program names no tfbertperf knobs


@needs_fixtures
def test_v100_probe_figure_is_kept_beside_the_device_au():
    doc = attribution.attribute([V100], step_time_ms=21.3104, compute_only_step_ms=15.0)
    att = doc["attribution"]
    assert att["au_compute_only_ratio"] == pytest.approx(15.0 / 21.3104, rel=1e-4)
    assert att["input_cost_fraction"] == pytest.approx(1 - 15.0 / 21.3104, rel=1e-4)
    assert doc["accelerator_utilization"] == att["device_busy_fraction"]
    assert doc["devices"] and doc["devices"][4]["name"] == "/device:GPU:4"


# ---- the MI300X JAX captures (no TF step markers) and the mangled file

@needs_fixtures
@pytest.mark.parametrize("path, busy, window", [(GEMM, 3.475, 9.456), (ATTENTION, 3.846, 32.563)])
def test_unmarked_jax_capture_gives_the_device_summary_and_one_line(path, busy, window):
    p = analyze_cli(path, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["steps_marked"] is False and doc["attribution"] is None
    gpu0 = doc["devices"][0]
    assert gpu0["name"] == "/device:GPU:0" and len(doc["devices"]) == 8
    assert gpu0["busy_ms"] == pytest.approx(busy, rel=0.01) and gpu0["window_ms"] == pytest.approx(window, rel=0.01)
    assert gpu0["memcpy_ms"] == 0
    assert doc["device_summary"].startswith("1 of 8 GPUs active: GPU:0; 7 idle")
    assert doc["device_busy_fraction"] == pytest.approx(busy / window, abs=0.002)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "steps were not marked" in lines[0]
    assert 'Trace("train", step_num=' in lines[0] and "jax.profiler.StepTraceAnnotation" in lines[0]
    console = analyze_cli(path)
    assert console.returncode == 0 and "1 of 8 GPUs active: GPU:0" in console.stdout
    assert len(console.stderr.strip().splitlines()) == 1


@needs_fixtures
@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_mangled_file_is_one_line_exit_2(extra):
    p = analyze_cli(MANGLED, *extra)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfbertperf: error: ") and "damaged" in lines[0]


# ---- host→device moving rules and TPU tables (hand-built rows in xprof's shapes: tests of our mapping)

def _row(step="5", **ms):
    row = {"step": step, **{c: 0.0 for c in steptable.CATEGORIES}, **ms}
    row["step_time_ms"] = sum(row[c] for c in steptable.CATEGORIES)
    return row


def test_move_transfer_takes_from_input_then_device_compute_then_other():
    rows = [_row("train 5", input=2.0, device_compute=5.0, other=1.0), _row("6", input=0.5, device_compute=0.2,
                                                                            other=3.0), _row("7", input=1.0)]
    moved = steptable.move_transfer(rows, {"5": 1.5, "6": 1.0})
    assert rows[0]["input"] == 0.5 and rows[0]["host_to_device"] == 1.5 and rows[0]["device_compute"] == 5.0
    assert rows[1]["input"] == 0 and rows[1]["device_compute"] == 0 and rows[1]["other"] == pytest.approx(2.7)
    assert rows[2]["host_to_device"] == 0  # no device step 7: nothing measured, nothing moved
    for r in rows:
        assert sum(r[c] for c in steptable.CATEGORIES) == pytest.approx(r["step_time_ms"])
    assert moved["steps_matched"] == 2 and moved["moved_ms"] == pytest.approx(2.5)
    assert moved["taken_from_ms"] == pytest.approx({"input": 2.0, "device_compute": 0.2, "other": 0.3})
    tpu = [_row("1", host_to_device=0.4, input=1.0)]  # the table has its own transfer column: left alone
    steptable.move_transfer(tpu, {"1": 0.9})
    assert tpu[0]["host_to_device"] == 0.4 and tpu[0]["input"] == 1.0


def test_tpu_step_table_is_mapped_onto_our_categories():
    # The TPU table as xprof's GenerateTpuInputPipelineAnalysisDataTable writes it (gviz JSON).
    ids = ["stepnum", "tcComputeTimeMs", "scv0ComputeTimeMs", "scv0InfeedTimeMs", "tcInfeedTimeMs", "tcOutfeedTimeMs",
           "tcIdleTimeMs", "hostTransferTimeMs", "tooltip", "infeedPercentAverage", "infeedPercentMin",
           "infeedPercentMax"]
    values = ["3", 80.0, 4.0, 1.0, 6.0, 2.0, 5.0, 2.0, "step 3: …", 7.0, 6.0, 8.0]
    table = {"cols": [{"id": i, "type": "number"} for i in ids], "rows": [{"c": [{"v": v} for v in values]}],
             "p": {"hardware_type": "TPU"}}
    (row,) = steptable.step_rows([{"cols": [], "rows": []}, table])
    assert row["step"] == "3" and row["step_time_ms"] == pytest.approx(100.0)
    assert (row["device_compute"], row["input"], row["output"], row["other"], row["host_to_device"]) == (
        84.0, 7.0, 2.0, 5.0, 2.0)
    step_ms, bd = steptable.breakdown([row])
    assert step_ms == pytest.approx(100.0) and sum(bd.values()) == pytest.approx(100.0)
    assert steptable.table_meta([table])["hardware_type"] == "TPU"


# ---- advice per hardware, and the cross-check with the environment

def _att(hardware_type, accelerator=None, **fr):
    fractions = {c: 0.0 for c in steptable.CATEGORIES}
    fractions.update(fr or {"device_compute": 0.95, "input": 0.05})
    return {"fractions": fractions, "step_time_ms": 10.0, "input_bound_fraction": fractions["input"],
            "input_cost_fraction": None, "input_cost_estimate_fraction": None, "input_ops_us": {},
            "hardware_type": hardware_type, "accelerator": accelerator}


OURS = load_config(sets=["train.precision=float32"]).to_dict()


def _texts(att, config=None, bottleneck="compute"):
    return [a["advice"] for a in advice.actions(bottleneck, att, config)]


def test_cpu_gets_no_mixed_precision():
    texts = _texts(_att("CPU_ONLY", host_compute=0.95, input=0.05), OURS)
    assert not any("mixed_" in t for t in texts) and any("compute-bound on CPU" in t for t in texts)


@pytest.mark.parametrize("facts, policy", [
    (classify_device("GPU", None, None, "7.0"), "mixed_float16"),           # the V100 fixture's plane stats
    (classify_gpu("Tesla T4"), "mixed_float16"),
    (classify_gpu("NVIDIA A100-SXM4-80GB"), "mixed_bfloat16"),
    (classify_device("GPU", None, None, "8.0"), "mixed_bfloat16"),
])
def test_gpu_precision_advice_follows_the_compute_capability(facts, policy):
    other = "mixed_bfloat16" if policy == "mixed_float16" else "mixed_float16"
    ours = _texts(_att("GPU", facts), OURS)
    assert any(f"--set train.precision={policy}" in t for t in ours) and not any(other in t for t in ours)
    foreign = _texts(_att("GPU", facts))
    assert any(f'set_global_policy("{policy}")' in t for t in foreign) and not any("--set" in t for t in foreign)
    assert any("jit_compile=True" in t for t in foreign)


def test_tpu_gets_bfloat16_with_or_without_plane_facts():
    for facts in (None, classify_device("TPU")):
        ours = advice.actions("compute", _att("TPU", facts), OURS)
        assert any(a["set"] == ["train.precision=mixed_bfloat16"] for a in ours)


def test_launch_bound_steps_get_batch_size_and_steps_per_execution_advice():
    att = _att("GPU", classify_gpu("NVIDIA A100"), device_compute=0.6, kernel_launch=0.3, input=0.1)
    ours = advice.actions("compute", att, load_config(sets=["train.batch_size=16"]).to_dict())
    assert ours[0]["set"] == ["train.batch_size=32", "train.jit=true"] and "30%" in ours[0]["advice"]
    assert "steps_per_execution" in _texts(att)[0]
    assert not any("kernel launches" in t for t in _texts(_att("GPU", classify_gpu("NVIDIA A100"))))


@pytest.fixture(scope="module")
def cpu_run_dir(tmp_path_factory):
    """A marked CPU-only capture laid out as one of our run directories, whose report.json lists an A100."""
    import tensorflow as tf

    run = tmp_path_factory.mktemp("run")
    ds = tf.data.Dataset.range(64).map(lambda i: tf.random.stateless_normal([32, 128], seed=[i, 0])).prefetch(2)
    w = tf.random.stateless_normal([128, 128], seed=[1, 2])
    step = tf.function(lambda x: tf.reduce_sum(tf.matmul(tf.matmul(x, w), w)))
    it = iter(ds)
    step(next(it))
    tf.profiler.experimental.start(str(run / "tensorboard"))
    try:
        for i in range(6):
            with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                step(next(it)).numpy()
    finally:
        tf.profiler.experimental.stop()
    a100 = {"physical": ["/physical_device:CPU:0", "/physical_device:GPU:0"],
            "gpus": [{"name": "/physical_device:GPU:0", "device_name": "NVIDIA A100-SXM4-80GB",
                      "compute_capability": "8.0"}]}
    (run / "report.json").write_text(json.dumps({"environment": {"devices": a100}}))
    return run


def test_cupti_failure_is_warned_on_the_console_and_stored(cpu_run_dir):
    p = analyze_cli(cpu_run_dir, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    att = doc["attribution"]
    assert att["hardware_type"] == "CPU_ONLY" and att["compute_on"] == "host" and doc["devices"] == []
    assert "CUPTI" in att["hardware_warning"] and "NVIDIA A100-SXM4-80GB" in att["hardware_warning"]
    assert att["input_cost_estimate_fraction"] is not None  # on the host the stolen-CPU term applies
    assert att["transfer"] is None and att["device_busy_fraction"] is None
    console = analyze_cli(cpu_run_dir)
    assert console.returncode == 0 and f"warning: {att['hardware_warning']}" in console.stdout
    assert "GPUs active" not in console.stdout  # no device table for a host-only profile


# ---- the loop's sync points (train/loop.py)

def test_sync_points_close_every_stretch_the_report_measures():
    from tfbertperf.train.loop import sync_points

    s = sync_points(40, warmup=3, window=(10, 20), plan=[(25, 4)], log_every=8)
    assert s == {2, 7, 9, 15, 19, 23, 24, 28, 31, 39}
    assert sync_points(5, 1, None, [], 100) == {0, 4}


@pytest.mark.slow
def test_deferred_sync_keeps_every_loss_and_the_timer(tmp_path):
    from tfbertperf.data.synthetic import synthetic_dataset_fn
    from tfbertperf.train.loop import train

    def run(log_every):
        cfg = load_config(overrides={"train.steps": 10, "train.batch_size": 8, "data.seq_len": 32,
                                     "data.max_predictions": 5, "profile.steps": "none", "profile.probe_steps": 0,
                                     "train.warmup_steps": 2, "train.deterministic": True,
                                     "train.log_every": log_every})
        return train(cfg, synthetic_dataset_fn(cfg, 600), 600, None, progress=None)

    every, deferred = run(1), run(4)
    from tensorflow.python.framework import config as tf_config

    assert not tf_config.is_op_determinism_enabled()  # the run put the process-global setting back
    assert [j for j, _ in deferred.loss_trajectory] == list(range(10))
    assert [v for _, v in deferred.loss_trajectory] == [v for _, v in every.loss_trajectory]
    assert len(deferred.step_times_ms) == 10 and all(t > 0 for t in deferred.step_times_ms)
    assert all(0 <= w <= s for w, s in zip(deferred.input_wait_ms, deferred.step_times_ms))


BF16_CPU = {"avx512f": True, "avx512_bf16": True, "amx_bf16": False}
PLAIN_CPU = {"avx512f": True, "avx512_bf16": False, "amx_bf16": False, "amx_tile": False}


@pytest.mark.parametrize("bottleneck", ["compute", "input", "other"])
def test_cpu_advice_knows_float16_is_slow_there_and_bfloat16_needs_the_units(bottleneck):
    """Issue 17 finding 8: mixed_float16 on this CPU was 1.45× slower with no warning and only jit advised
    (0.88× measured).  Now: float16 on a CPU → advice back to float32 whatever the bottleneck, never advised;
    bfloat16 advised only with AVX512-BF16/AMX in the run's flags; jit not advised for compute-bound CPUs."""
    att = _att("CPU_ONLY", host_compute=0.95, input=0.05)
    fp16 = load_config(sets=["train.precision=mixed_float16"]).to_dict()
    for flags in (None, PLAIN_CPU, BF16_CPU):
        acts = advice.actions(bottleneck, att, fp16, cpu_flags=flags)
        assert acts[0]["set"] == ["train.precision=float32"], acts
        assert not any("train.precision=mixed_float16" in s for a in acts for s in a["set"])
    bf16 = load_config(sets=["train.precision=mixed_bfloat16"]).to_dict()
    assert advice.actions(bottleneck, att, bf16, cpu_flags=PLAIN_CPU)[0]["set"] == ["train.precision=float32"]
    assert not any(a["set"] == ["train.precision=float32"]
                   for a in advice.actions(bottleneck, att, bf16, cpu_flags=BF16_CPU))
    if bottleneck == "compute":
        with_units = advice.actions("compute", att, OURS, cpu_flags=BF16_CPU)
        assert any(a["set"] == ["train.precision=mixed_bfloat16"] for a in with_units)
        for flags in (None, PLAIN_CPU):
            assert not any("mixed_" in t for t in _texts_flags(att, flags))
        assert not any("train.jit=true" in s for a in with_units for s in a["set"])
    if bottleneck == "other":  # per-step overhead on a CPU: a bigger batch, not XLA (0.88× here)
        acts = advice.actions("other", att, OURS, cpu_flags=PLAIN_CPU)
        assert [a["set"] for a in acts] == [["train.batch_size=64"]], acts
        gpu = advice.actions("other", _att("GPU", None, device_compute=0.5, input=0.05), OURS)
        assert any("train.jit=true" in s for a in gpu for s in a["set"])


def _texts_flags(att, flags):
    return [a["advice"] for a in advice.actions("compute", att, OURS, cpu_flags=flags)]


def test_float16_on_a_cpu_run_is_a_report_caveat():
    from tfbertperf.report.caveats import precision_caveats

    env = {"devices": {"gpu_count": 0, "tpu_count": 0}, "cpu": {"flags": PLAIN_CPU}}
    (line,) = precision_caveats(load_config(sets=["train.precision=mixed_float16"]), env)
    assert "mixed_float16 on a CPU" in line
    assert precision_caveats(load_config(sets=["train.precision=mixed_bfloat16"]), env)
    bf16_env = {**env, "cpu": {"flags": BF16_CPU}}
    assert precision_caveats(load_config(sets=["train.precision=mixed_bfloat16"]), bf16_env) == []
    gpu_env = {"devices": {"gpu_count": 1}, "cpu": {"flags": PLAIN_CPU}}
    assert precision_caveats(load_config(sets=["train.precision=mixed_float16"]), gpu_env) == []
