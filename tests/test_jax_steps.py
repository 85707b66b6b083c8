"""tfbertperf.jax_steps.StepTimer with real JAX on the CPU: a jitted 2-layer MLP trained by SGD, its steps marked
and a window of them captured by jax.profiler itself (no stand-ins), the step file written beside the capture, and
`analyze` reading both (the steps found from the `train` markers, the profiler's cost measured)."""

from __future__ import annotations

import json

import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed: pip install 'jax>=0.4.30' (in setup.cfg's `test` extra)")

import jax.numpy as jnp  # noqa: E402

from tfbertperf.analyze import analyze  # noqa: E402
from tfbertperf.jax_steps import StepTimer  # noqa: E402
from tfbertperf.profile import stepfile  # noqa: E402
from tfbertperf.profile.steps import SOURCE_MARKERS, step_intervals  # noqa: E402
from tfbertperf.profile.trace import load_trace  # noqa: E402

STEPS, WINDOW = 30, (10, 20)


def _problem():
    """A jitted SGD step of a 2-layer MLP on a random regression problem, its parameters and batch."""
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(k1, (256, 32))
    y = x @ jax.random.normal(k2, (32, 1))
    params = {"w1": jax.random.normal(k3, (32, 64)) * 0.1, "b1": jnp.zeros(64), "w2": jnp.zeros((64, 1))}

    def loss_fn(p, x, y):
        return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)

    @jax.jit
    def train_step(p, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree_util.tree_map(lambda a, g: a - 0.05 * g, p, grads), loss

    return train_step, params, (x, y)


def _train(timer: StepTimer, steps: int) -> list[float]:
    train_step, params, (x, y) = _problem()
    losses = []
    for _ in range(steps):
        with timer.step() as step:
            params, loss = train_step(params, x, y)
            step.result = loss  # waited for with jax.block_until_ready before the step's time is taken
        losses.append(float(loss))
    timer.close()
    return losses


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
    timer = StepTimer(logdir, profile_steps=f"{WINDOW[0]}:{WINDOW[1]}")  # warm-up: the default 5
    losses = _train(timer, STEPS)
    assert losses[-1] < losses[0] / 10  # it trained

    # the capture, written by jax.profiler.stop_trace into logdir/plugins/profile/<session>/
    sessions = sorted((logdir / "plugins" / "profile").iterdir())
    assert len(sessions) == 1 and sessions[0].is_dir()
    session = sessions[0]
    xplane = _capture(session)
    assert xplane.stat().st_size > 0

    # the step file beside it, one time per step, the window and the warm-up as documented
    assert timer.step_file == session / stepfile.STEP_FILE and timer.step_file.is_file()
    s = stepfile.read(timer.step_file)
    assert len(timer.step_times_ms) == STEPS and all(t > 0 for t in timer.step_times_ms)
    traced = [WINDOW[0] - 1, WINDOW[1] + 1]  # one step more on each side, so xprof shows all of the window's
    assert s.profiled_steps == traced and s.written_by == "tfbertperf.jax_steps.StepTimer"
    doc = json.loads(timer.step_file.read_text())
    assert len(doc["step_time_ms"]) == STEPS
    # warm-up: warmup_steps=5, at most a quarter of the 30 steps (7) — 5; the first step holds the compilation
    assert doc["warmup_steps"] == 5 and s.unprofiled_steps == STEPS - 5 - (traced[1] - traced[0])
    steady = sorted(timer.step_times_ms[5:])
    assert timer.step_times_ms[0] > 5 * steady[len(steady) // 2]

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
    assert out["step_file"] is not None and out["step_file"]["file"] == str(timer.step_file)
    assert out["step_file"]["profiled_steps"] == traced
    assert out["step_file"]["unprofiled_steps"] == s.unprofiled_steps
    cost = att["profiler_cost"]
    assert cost["basis"].startswith("measured")
    assert cost["unprofiled_step_ms"] == pytest.approx(s.unprofiled_step_ms, abs=1e-3)
    assert cost["captured_step_ms"] == pytest.approx(att["step_time_ms"], abs=1e-3)
    assert out["verdict"]["bottleneck"] and out["verdict"]["summary"]


def test_profiler_options_reach_jax_start_trace(tmp_path):
    # python_tracer_level = 0 turns JAX's default Python tracer off: no Python frames in the capture
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    timer = StepTimer(tmp_path, profile_steps="2:5", warmup_steps=1, profiler_options=options)
    _train(timer, 6)
    session = timer.step_file.parent
    assert session.parent == tmp_path / "plugins" / "profile"
    names = _names(_capture(session))
    assert "train" in names and not any(n.startswith("$") for n in names)
    assert stepfile.read(timer.step_file).profiled_steps == [1, 6]  # 2:5 and one step on each side
