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
