"""tfbertperf.tf_steps.StepTimer on a user's own TensorFlow loop (a Keras model, `tf.GradientTape` in a
`tf.function` step, a tf.data pipeline iterated by hand: tests/programs/tf_custom_loop.py), each run in a process of
its own (one profiler a process): the capture, the step file and the what-if `analyze` reads, the training unchanged
by the probe, and a second profiler already running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = Path(__file__).resolve().parent / "programs" / "tf_custom_loop.py"
pytestmark = pytest.mark.slow  # trains end to end


def _loop(out: Path, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(PROGRAM), "--out", str(out), *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


@pytest.mark.parametrize("style", ["with", "for"])
def test_a_waiting_pipeline_in_a_custom_loop_is_captured_timed_probed_and_read_input_bound(style, tmp_path):
    """A serial map waiting 20 ms a batch in front of a ~1 ms step: the probe and the capture say input — the loop
    written with `with timer.step()` around next() and the step, or as `for step, batch in timer.steps(dataset)`."""
    from tfbertperf.analyze import analyze

    run = _loop(tmp_path / "logs", "--input", "wait", "--steps", "60", "--window", "10:20", "--probe", "--style", style)
    what_if = run["what_if"]
    assert what_if["input_cost_fraction"] > 0.7 and what_if["probe_blocks"] >= 2, what_if
    doc = json.loads(Path(run["step_file"]).read_text())
    assert doc["written_by"] == "tfbertperf.tf_steps.StepTimer" and len(doc["what_if"]["compute_only_step_ms"]) >= 10
    assert (Path(run["step_file"]).parent / "threadcpu.json").is_file()  # the input threads' CPU
    out = analyze(str(tmp_path / "logs"))
    att = out["attribution"]
    # the window's ten steps from the `train` markers (the capture runs one more on each side)
    assert att["steps_profiled"] == 10, att.get("steps_profiled")
    assert att["input_cost_fraction"] == pytest.approx(what_if["input_cost_fraction"], abs=1e-3)
    assert out["step_file"]["written_by"] == "tfbertperf.tf_steps.StepTimer"
    assert att["profiler_cost"] and out["verdict"]["bottleneck"] == "input"
    # the capture alone says it too: the loop's blocked wait for its next batch
    assert att["input_cost_estimate_fraction"] > 0.5


def test_the_probe_leaves_the_losses_of_a_custom_loop_as_they_were(tmp_path):
    """The variables the step updates, saved before each block and restored after it: same losses, bit for bit."""
    args = ("--input", "memory", "--steps", "60", "--window", "none", "--deterministic")
    plain = _loop(tmp_path / "plain", *args)
    probed = _loop(tmp_path / "probed", *args, "--probe", "--style", "for")  # the probe inside timer.steps()
    assert probed["what_if"] and probed["what_if"]["probe_blocks"] >= 2, probed["what_if"]
    assert probed["losses"] == plain["losses"]
    assert len(set(plain["losses"])) > 10  # the model trains: a constant loss would pass trivially


def test_a_profiler_already_running_costs_the_capture_not_the_loop(tmp_path):
    run = _loop(tmp_path / "logs", "--input", "memory", "--steps", "30", "--window", "10:20", "--other-profiler")
    assert "another profiler is running at step 9" in run["stderr"]
    assert "tf.profiler.experimental.stop" in run["stderr"]
    doc = json.loads(Path(run["step_file"]).read_text())
    assert len(doc["step_time_ms"]) == 30 and not doc.get("profiled_steps")


def test_a_bare_loop_that_fetches_its_batch_outside_the_marker_reads_input_bound(tmp_path):
    """No StepTimer: `for i, batch in enumerate(ds): with Trace("train", step_num=i, _r=1): train_step(batch)` —
    the 20 ms wait falls between the markers; read as compute-bound at ~4 % before profile/step_gaps.py."""
    from tfbertperf.analyze import analyze

    _loop(tmp_path / "logs", "--input", "wait", "--steps", "30", "--window", "10:20", "--style", "bare")
    out = analyze(str(tmp_path / "logs"))
    att = out["attribution"]
    assert out["verdict"]["bottleneck"] == "input" and att["input_cost_estimate_fraction"] > 0.6, att
    assert att["step_time_ms"] > 15  # the step from one marker's start to the next: the 20 ms fetch inside
    assert att["steps_widened_ms"] > 15
