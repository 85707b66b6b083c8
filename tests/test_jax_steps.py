"""tfbertperf.jax_steps.StepTimer with real JAX on the CPU: a jitted 2-layer MLP trained by SGD, its steps marked
and a window of them captured by jax.profiler itself (no stand-ins), the step file written beside the capture, and
`analyze` reading both (the steps found from the `train` markers, the profiler's cost measured).  The JAX loop runs in
its own interpreter (tests/programs/jax_loop.py): a pytest worker that imported JAX would warn at every later fork
(the storage emulators) that JAX's threads may deadlock the child."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfbertperf.analyze import analyze
from tfbertperf.profile import stepfile, unprofiled
from tfbertperf.profile.steps import SOURCE_MARKERS, step_intervals
from tfbertperf.profile.trace import load_trace

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                                reason="JAX is not installed: pip install 'jax>=0.4.30' (in setup.cfg's `test` extra)")

ROOT = Path(__file__).resolve().parents[1]
STEPS, WINDOW = 30, (10, 20)


def _run_loop(logdir, steps: int, window: str, *extra: str) -> dict:
    """tests/programs/jax_loop.py in a fresh interpreter; its JSON line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "programs" / "jax_loop.py"), "--logdir", str(logdir),
                           "--steps", str(steps), "--window", window, *extra],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("{")))


def _capture(session):
    """The session's XSpace: JAX 0.10 writes `<host>.xplane.pb` (and `<host>.trace.json.gz`); a gzipped
    `.xplane.pb.gz` is accepted too, analyze reads both."""
    found = sorted(session.glob("*.xplane.pb")) + sorted(session.glob("*.xplane.pb.gz"))
    assert len(found) == 1, sorted(p.name for p in session.iterdir())
    return found[0]


def _names(xplane) -> set[str]:
    return {t.event(i).name for t in load_trace([xplane]).threads for i in range(len(t.start))}


def test_a_real_jax_loop_is_captured_timed_and_analyzed(tmp_path):
    logdir = tmp_path / "logs"
    out = _run_loop(logdir, STEPS, f"{WINDOW[0]}:{WINDOW[1]}")  # warm-up: the default 5
    losses, times = out["losses"], out["step_times_ms"]
    assert losses[-1] < losses[0] / 10  # it trained

    # the capture, written by jax.profiler.stop_trace into logdir/plugins/profile/<session>/
    sessions = sorted((logdir / "plugins" / "profile").iterdir())
    assert len(sessions) == 1 and sessions[0].is_dir()
    session = sessions[0]
    xplane = _capture(session)
    assert xplane.stat().st_size > 0

    # the step file beside it, one time per step, the window and the warm-up as documented
    step_file = Path(out["step_file"])
    assert step_file == session / stepfile.STEP_FILE and step_file.is_file()
    s = stepfile.read(step_file)
    assert len(times) == STEPS and all(t > 0 for t in times)
    traced = [WINDOW[0] - 1, WINDOW[1] + 1]  # one step more on each side, so xprof shows all of the window's
    assert s.profiled_steps == traced and s.written_by == "tfbertperf.jax_steps.StepTimer"
    doc = json.loads(step_file.read_text())
    assert len(doc["step_time_ms"]) == STEPS
    # warm-up: warmup_steps=5, at most a quarter of the 30 steps (7) — 5; the first step holds the compilation
    # and the steps right after the stop, as many as it took (≤ 8), left out as a run-ahead loader's (stepfile.py)
    after = doc["excluded_steps"]
    assert after == list(range(traced[1], traced[1] + len(after))) and len(after) <= stepfile.AFTER_STOP_MAX
    assert doc["warmup_steps"] == 5 and s.unprofiled_steps == STEPS - 5 - (traced[1] - traced[0]) - len(after)
    steady = sorted(times[5:])
    assert times[0] > 5 * steady[len(steady) // 2]

    # the capture holds the `train` markers 9–20 (the window 10–19 and one step on each side) and the Python
    # tracer's frames: JAX's default ProfileOptions has python_tracer_level 1 (the module docstring says so)
    steps, source = step_intervals(load_trace([xplane]))
    assert source == SOURCE_MARKERS
    assert [int(st.label) for st in steps] == list(range(*traced))
    assert any(n.startswith("$") for n in _names(xplane))

    out = analyze(str(logdir))
    att = out["attribution"]
    assert out["profile"]["xplanes"] == [str(xplane)] and out["profile"]["session"] == session.name
    assert out.get("steps_marked") is not False and att["compute_on"] == "host"
    # xprof's step table from the markers: the capture less its first and last step (possibly incomplete) —
    # exactly the window's steps (train/probe.py traced_steps)
    assert att["steps_profiled"] == WINDOW[1] - WINDOW[0] and att["step_time_ms"] > 0
    assert out["step_file"] is not None and out["step_file"]["file"] == str(step_file)
    assert out["step_file"]["profiled_steps"] == traced
    assert out["step_file"]["unprofiled_steps"] == s.unprofiled_steps
    cost = att["profiler_cost"]
    if "not_measured" in cost:  # this small CPU loop's speed moved around the window (profile/unprofiled.py)
        moved = cost["captured_step_ms"] * (1 + unprofiled.SPEED_MOVED) < cost["unprofiled_step_ms"]
        assert moved or out["step_file"]["drift"] > unprofiled.DRIFT_MAX, cost
        assert "added_ms_per_step" not in cost and att.get("unprofiled") is None
    else:
        assert cost["basis"].startswith("measured")
        assert cost["added_ms_per_step"] == pytest.approx(cost["captured_step_ms"] - cost["unprofiled_step_ms"], abs=2e-3)
    assert cost["unprofiled_step_ms"] == pytest.approx(s.unprofiled_step_ms, abs=1e-3)
    assert cost["captured_step_ms"] == pytest.approx(att["step_time_ms"], abs=1e-3)
    assert out["verdict"]["bottleneck"] and out["verdict"]["summary"]


def test_profiler_options_reach_jax_start_trace(tmp_path):
    # python_tracer_level = 0 turns JAX's default Python tracer off: no Python frames in the capture
    out = _run_loop(tmp_path, 6, "2:5", "--warmup", "1", "--no-python-tracer")
    session = Path(out["step_file"]).parent
    assert session.parent == tmp_path / "plugins" / "profile"
    names = _names(_capture(session))
    assert "train" in names and not any(n.startswith("$") for n in names)
    assert stepfile.read(out["step_file"]).profiled_steps == [1, 6]  # 2:5 and one step on each side


_TO_END = """
import json, jax, jax.numpy as jnp
from tfbertperf.jax_probe import JaxProbe
probe = JaxProbe(auto=False, probe_steps=4, probe_blocks=2, probe_ci95=0.025, wait_each=False)
probe.make_plan(100, 5, None)
assert probe.keep(jnp.ones(4), 4)
probe.to_end()
step = jax.jit(lambda s, b: (s + b.sum(), s))
probe.block(step, jnp.zeros(()), 10, [1.0] * 10, lambda: None, lambda o: jax.block_until_ready(o))  # none inside
probe.block(step, jnp.zeros(()), 40, [1.0] * 40, lambda: None, lambda o: jax.block_until_ready(o), last=True)
print(json.dumps({"ran": probe.ran, "timed": len(probe.step_times_ms)}))
"""


def test_blocks_moved_to_the_end_run_back_to_back_when_the_loop_ends_even_before_its_planned_end():
    """Keras-JAX under an autotuned prefetch (keras_jax.py: JaxProbe.to_end): no block inside the loop, and all of
    them at its last step, also where the fit stopped before the steps it planned (an early stop)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", _TO_END], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"ran": [[40, 2], [40, 2]], "timed": 4}
