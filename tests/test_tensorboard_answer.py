"""TensorBoard carries the answer (issue 30): a run writes its headline, verdict, breakdown and what it used as
text summaries (Text tab) and the per-category ms/step, the profiled step and the input cost as scalars, read back
here with TensorBoard's own event reader."""

import json
from pathlib import Path

import pytest

from tfbertperf.report.headline import headline
from tfbertperf.report.plots import CATEGORY_ORDER

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "reports"


def _read(logdir: Path):
    from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={TENSORS: 0})
    acc.Reload()
    return acc


def _value(acc, tag):
    import tensorflow as tf

    (event,) = acc.Tensors(tag)
    return event.step, tf.make_ndarray(event.tensor_proto)


@pytest.mark.parametrize("name", ["emulated-slow-storage", "data-service"])
def test_the_answer_is_in_the_text_tab_and_the_breakdown_in_scalars(tmp_path, name):
    from tfbertperf.report.tensorboard import write_answer

    report = json.loads((FIXTURES / f"{name}.json").read_text())
    logdir = write_answer(tmp_path, report)
    assert logdir == tmp_path / "tensorboard" / "answer"
    acc = _read(logdir)
    text_tags = set(acc.PluginTagToContent("text"))
    assert {"headline", "verdict", "breakdown", "run_used"} <= text_tags, text_tags
    steps = report["throughput"]["steps"]
    step, line = _value(acc, "headline")
    assert step == steps and line.item().decode() == headline(report)["line"]
    _, verdict = _value(acc, "verdict")
    assert verdict.item().decode().startswith(headline(report)["line"].split(":")[0])
    for r in report["verdict"]["recommendations"][:2]:
        assert r.split(" (")[0][:40] in verdict.item().decode()
    _, table = _value(acc, "breakdown")
    assert "| input (storage + preprocessing wait) |" in table.item().decode()
    scalar_tags = set(acc.PluginTagToContent("scalars"))
    assert {f"breakdown_ms/{c}" for c in CATEGORY_ORDER} <= scalar_tags
    for cat in CATEGORY_ORDER:
        _, v = _value(acc, f"breakdown_ms/{cat}")
        assert float(v) == pytest.approx(report["attribution"]["breakdown_ms"][cat], abs=1e-4)
    _, cost = _value(acc, "input_cost_fraction")
    assert float(cost) == pytest.approx(report["attribution"]["input_cost_fraction"], abs=1e-4)
    _, used = _value(acc, "run_used")
    assert "data service:" in used.item().decode()


def test_an_unprofiled_run_still_writes_its_headline(tmp_path):
    from tfbertperf.report.tensorboard import write_answer

    report = json.loads((FIXTURES / "cpu-tuned.json").read_text())
    report["attribution"] = report["verdict"] = None
    acc = _read(write_answer(tmp_path, report))
    assert "headline" in acc.PluginTagToContent("text")
    assert "breakdown" not in acc.PluginTagToContent("text")
    assert "blocked wait only" in _value(acc, "headline")[1].item().decode()


def test_analyze_writes_a_users_capture_answer_beside_their_runs_with_tensorboard(tmp_path, capsys):
    # a user's own capture (a real H200 JAX loop, tests/fixtures/h200) in their TensorBoard logdir: `analyze LOGDIR
    # --tensorboard` writes the answer as a run of its own (LOGDIR/tfbertperf_answer), read back with TensorBoard's
    # event reader — the same headline the console printed, no "what the run used" (a foreign capture has no config)
    import shutil

    from tfbertperf.analyze import main

    session = tmp_path / "logs" / "plugins" / "profile" / "2026_11_26_10_00_00"
    session.mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "fixtures" / "h200" / "h200-loader.xplane.pb.gz", session / "vm.xplane.pb.gz")
    assert main([str(tmp_path / "logs"), "--tensorboard", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    out = tmp_path / "logs" / "tfbertperf_answer"
    assert doc["tensorboard_answer"] == str(out)
    acc = _read(out)
    assert set(acc.PluginTagToContent("text")) == {"headline", "verdict", "breakdown"}
    step, line = _value(acc, "headline")
    assert line.item().decode() == doc["headline"]["line"] and step == doc["attribution"]["steps_profiled"]
    assert doc["verdict"]["bottleneck"] == "input" and "input" in line.item().decode()
    _, cost = _value(acc, "input_cost_fraction")
    assert float(cost) == pytest.approx(doc["headline"]["input_cost_fraction"], abs=1e-6)


def test_analyze_tensorboard_refuses_a_capture_outside_a_logdir_in_one_line(tmp_path, capsys):
    import shutil

    from tfbertperf.analyze import main

    f = tmp_path / "vm.xplane.pb.gz"
    shutil.copy(Path(__file__).parent / "fixtures" / "h200" / "h200-loader.xplane.pb.gz", f)
    with pytest.raises(SystemExit) as e:
        main([str(f), "--tensorboard"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and str(f) in err and "not inside a TensorBoard" in err
    assert not (tmp_path / "tfbertperf_answer").exists()
