"""A tf.data prefetch that sizes its own buffer, read from the capture or the dataset: ProfileCallback then runs its
probe's blocks after the fit's last step, and a what-if measured with blocks inside such a fit is marked possibly
low (tfbertperf/profile/autotuned_prefetch.py; issue 29, BENCHMARKS.md "the probe and tf.data's autotuned
prefetch": with `prefetch(tf.data.AUTOTUNE)` blocks inside the fit read 18–26 pp low, a fixed `prefetch(2)` within
7 pp)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from profile_fixtures import synthetic_xspace
from tfbertperf.profile import autotuned_prefetch
from tfbertperf.profile.trace import load_trace

PROGRAMS = Path(__file__).resolve().parent / "programs"


def _prefetch_events(t0: float, autotune: str, limit: int, name="Iterator::Root::Prefetch"):
    return (name, t0, 20.0, {"autotune": autotune, "autotune_mode": "legacy", "buffer_limit": limit,
                             "buffered_elements": 0})


def test_the_capture_names_each_autotuned_prefetch_with_its_largest_buffer(tmp_path):
    host = {"tf_data_iterator_get_next/1": [_prefetch_events(10, "true", 2), _prefetch_events(100, "true", 8),
                                            _prefetch_events(200, "true", 4)],
            "tf_data_iterator_resource/2": [_prefetch_events(50, "false", 2, "Iterator::Root::Prefetch::Map::Prefetch"),
                                            # a map with num_parallel_calls=AUTOTUNE: autotuned, not a prefetch
                                            ("Iterator::Root::Prefetch::ParallelMapV2", 55, 5.0, {"autotune": "true"}),
                                            ("Iterator::Root::Prefetch::Map::TensorSlice", 60, 1.0, {})],
            "python3": [("train", 0, 300, {"step_num": 1, "_r": 1})]}
    trace = load_trace([synthetic_xspace(tmp_path / "p.xplane.pb", host)])
    assert trace.autotuned_prefetch() == [{"iterator": "Iterator::Root::Prefetch", "autotune_mode": "legacy",
                                          "buffer_limit_max": 8}]
    none = load_trace([synthetic_xspace(tmp_path / "q.xplane.pb", {"python3": host["python3"],
                                                                    "t/2": host["tf_data_iterator_resource/2"]})])
    assert none.autotuned_prefetch() == []


def test_a_prefetch_that_fed_no_training_step_is_not_listed(tmp_path):
    # a fit's validation dataset, evaluated between two captured steps: its injected prefetch feeds no step
    host = {"tf_data_iterator_get_next/1": [_prefetch_events(10, "false", 2), _prefetch_events(110, "false", 2)],
            "tf_data_iterator_get_next/2": [_prefetch_events(60, "true", 1), _prefetch_events(70, "true", 1)],
            "python3": [("train", 0, 50, {"step_num": 24, "_r": 1}), ("train", 100, 50, {"step_num": 25, "_r": 1})]}
    assert load_trace([synthetic_xspace(tmp_path / "v.xplane.pb", host)]).autotuned_prefetch() == []
    # … the same events inside a step are listed, and a capture with no step markers lists them all
    inside = {**host, "python3": [("train", 0, 150, {"step_num": 24, "_r": 1})]}
    unmarked = {k: v for k, v in host.items() if k != "python3"}
    for h, name in ((inside, "i"), (unmarked, "u")):
        assert load_trace([synthetic_xspace(tmp_path / f"{name}.xplane.pb", h)]).autotuned_prefetch() == [
            {"iterator": "Iterator::Root::Prefetch", "autotune_mode": "legacy", "buffer_limit_max": 1}]


def test_stats_of_unexpected_types_read_as_absent_not_as_an_error(tmp_path):
    # a writer that puts the flag as a number and the limit as text: nothing is listed or the limit is unknown
    host = {"t/1": [("Iterator::Root::Prefetch", 10, 5.0, {"autotune": 1, "buffer_limit": "many"})],
            "t/2": [("Iterator::Root::Prefetch::Map::Prefetch", 20, 5.0, {"autotune": "true", "buffer_limit": "x"})],
            "python3": [("train", 0, 300, {"step_num": 1, "_r": 1})]}
    trace = load_trace([synthetic_xspace(tmp_path / "odd.xplane.pb", host)])
    assert trace.autotuned_prefetch() == [{"iterator": "Iterator::Root::Prefetch::Map::Prefetch", "autotune_mode": "",
                                          "buffer_limit_max": 0}]


FOUND = [{"iterator": "Iterator::Root::Prefetch", "autotune_mode": "legacy", "buffer_limit_max": 2}]


def _decided(bottleneck: str, undecided=None):
    acts = [{"advice": "measure longer before acting on this verdict — a fit about 2× as long …", "set": []}] \
        if undecided else []
    acts.append({"advice": "preprocessing dominates: …", "set": []})
    return {"bottleneck": bottleneck, "summary": "compute-bound: input costs 12%", "actions": acts,
            "recommendations": [a["advice"] for a in acts], "also": [], "undecided": undecided}


def test_a_probe_figure_below_the_line_is_undecided_and_the_fix_comes_first():
    out = autotuned_prefetch.mark(_decided("compute"), {"autotuned_prefetch": FOUND, "input_cost_fraction": 0.12,
                                                        "input_cost_ci95": 0.03}, 0.20)
    assert out["undecided"]["between"] == ["compute", "input"] and out["undecided"]["source"] == "autotuned_prefetch"
    assert "may read low" in out["summary"] and "Iterator::Root::Prefetch (legacy autotune)" in out["summary"]
    assert "inject_prefetch = False" in out["actions"][0]["advice"] and "prefetch(2)" in out["recommendations"][0]
    assert out["actions"][1]["advice"].startswith("preprocessing")


def test_a_probe_figure_above_the_line_stays_input_bound_with_the_bound_said():
    out = autotuned_prefetch.mark(_decided("input"), {"autotuned_prefetch": FOUND, "input_cost_fraction": 0.31,
                                                      "input_cost_ci95": 0.03}, 0.20)
    assert out["undecided"] is None and "the what-if 31% may read low" in out["summary"]
    assert [a["advice"] for a in out["actions"]] == ["preprocessing dominates: …"]


def test_a_straddling_interval_gets_the_fix_in_place_of_measuring_longer():
    und = {"between": ["input", "compute"], "input_cost_fraction": 0.24, "ci95": 0.08, "threshold": 0.2,
           "probe_steps_to_decide": None, "longer_by": 2.0}
    out = autotuned_prefetch.mark(_decided("input", und), {"autotuned_prefetch": FOUND, "input_cost_fraction": 0.24,
                                                          "input_cost_ci95": 0.08}, 0.20)
    assert out["undecided"]["between"] == ["input", "compute"] and out["undecided"]["source"] == "autotuned_prefetch"
    assert out["undecided"]["longer_by"] is None
    assert not any(a["advice"].startswith("measure longer") for a in out["actions"])
    assert out["actions"][0]["advice"].startswith("measure again before acting on this verdict")


@pytest.mark.parametrize("att", [{"autotuned_prefetch": FOUND, "input_cost_fraction": None},
                                 {"autotuned_prefetch": None, "input_cost_fraction": 0.12},
                                 # the probe's blocks all ran after the last step: no block grew the buffer
                                 {"autotuned_prefetch": FOUND, "input_cost_fraction": 0.12,
                                  "what_if_after_steps": True}])
def test_without_a_probe_or_without_such_a_prefetch_the_verdict_is_unchanged(att):
    decided = _decided("compute")
    assert autotuned_prefetch.mark(decided, att, 0.20) is decided


_FIT = """
import json, os, sys, tempfile
os.environ["KERAS_BACKEND"] = "tensorflow"
sys.path.insert(0, sys.argv[1])
import tensorflow as tf
from keras_jax_tfdata_by_hand import compiled_model, pipeline
from tfbertperf.keras import ProfileCallback
ds = pipeline(repeat_first=True, prefetch=tf.data.AUTOTUNE if sys.argv[2] == "autotune" else 2)
# validation between epochs on a dataset tf.data gives a prefetch of its own (it ends in take: injected)
val = pipeline(repeat_first=True, prefetch=2).take(4) if sys.argv[2] == "validation" else None
if sys.argv[2] in ("fixed", "validation"):
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    ds = ds.with_options(options)
if sys.argv[2] == "inject":  # tf.data's defaults: prefetch(2), then .repeat(), and an autotuned prefetch injected
    ds = pipeline()
probe = sys.argv[4] == "probe"
cb = ProfileCallback(sys.argv[3], profile_steps=None if "nocapture" in sys.argv else "12:16", probe=probe,
                     probe_steps=8 if probe else "auto", probe_blocks=2)
import keras
assert keras.backend.backend() == "tensorflow"
steps = 60 if probe else 30
compiled_model().fit(ds, epochs=2 if val else 1, steps_per_epoch=steps // 2 if val else steps, verbose=0,
                     callbacks=[cb], validation_data=val)
print(json.dumps(cb.what_if))
"""


def _fit(variant: str, logdir: Path, probe: bool = False, capture: bool = True):
    import subprocess

    # --backend=tensorflow: the by-hand program sets KERAS_BACKEND from it when imported (else to jax)
    proc = subprocess.run([sys.executable, "-c", _FIT, str(PROGRAMS), variant, str(logdir),
                           "probe" if probe else "no", *([] if capture else ["nocapture"]), "--backend=tensorflow"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.mark.parametrize("variant", ["autotune", "fixed", "validation"])
def test_a_real_fit_shows_its_autotuned_prefetch_in_the_report(variant, tmp_path):
    """… and only the training dataset's: "validation" is the fixed pipeline with `validation_data=` between two
    epochs of 15 steps, inside the captured window 12:16."""
    from tfbertperf.analyze import analyze

    logdir = tmp_path / "logs"
    _fit(variant, logdir)
    att = analyze(str(logdir))["attribution"]
    if variant == "autotune":
        assert att["autotuned_prefetch"] and att["autotuned_prefetch"][0]["autotune_mode"] == "legacy"
        assert att["autotuned_prefetch"][0]["iterator"].startswith("Iterator::Root::Prefetch")
    else:
        assert att["autotuned_prefetch"] is None


def test_a_probed_fit_under_an_autotuned_prefetch_runs_its_blocks_after_the_steps(tmp_path):
    """Blocks inside the fit would grow the prefetch's buffer and feed the real steps between them (the figure read
    18–30 pp low so): every block runs after the last step, and the figure is not called possibly low."""
    import json

    from tfbertperf.analyze import analyze

    proc = _fit("autotune", tmp_path / "logs", probe=True)
    what_if = json.loads(proc.stdout.strip().splitlines()[-1])
    assert what_if["input_cost_fraction"] is not None, proc.stderr[-2000:]
    assert what_if["autotuned_prefetch"][0]["iterator"].startswith("Iterator::Root::Prefetch")
    assert what_if["after_steps"] is True and what_if["probe_blocks"] == 2 and "may read low" not in proc.stderr
    steps = json.loads(next((tmp_path / "logs").rglob("tfbertperf_steps.json")).read_text())
    assert steps["what_if"]["blocks"] == [[60, 4], [60, 4]] and len(steps["step_time_ms"]) == 60
    doc = analyze(str(tmp_path / "logs"))
    assert doc["attribution"]["input_cost_fraction"] is not None and doc["attribution"]["what_if_after_steps"]
    assert "may read low" not in doc["verdict"]["summary"] and doc["step_file"]["probe_after_steps"]
    from tfbertperf.report.console import measured_lines

    said = " ".join(measured_lines(doc))
    assert "each probe block against its stretch of the fit's steps, all run after its last step" in said
    # its pipeline already ends in an autotuned prefetch: no advice to add one
    assert not any("prefetch → autotune at the end" in r for r in doc["verdict"]["recommendations"])


@pytest.mark.parametrize("variant", ["autotune", "inject", "fixed"])
def test_a_probed_fit_with_no_capture_reads_its_autotuned_prefetch_from_the_dataset(variant, tmp_path):
    import json

    proc = _fit(variant, tmp_path / "logs", probe=True, capture=False)
    what_if = json.loads(proc.stdout.strip().splitlines()[-1])
    assert what_if["input_cost_fraction"] is not None, proc.stderr[-2000:]
    assert "may read low" not in proc.stderr
    if variant == "fixed":  # prefetch(2) at the end, nothing injected: the blocks run through the fit
        assert "autotuned_prefetch" not in what_if and what_if["after_steps"] is False
        return
    name = {"autotune": "prefetch(tf.data.AUTOTUNE) at the end"}.get(variant, "the prefetch tf.data injects at the end")
    assert [f["iterator"] for f in what_if["autotuned_prefetch"]] == [name] and what_if["after_steps"] is True


_PIPELINES = """
import json, sys, tempfile
from pathlib import Path
import numpy as np, keras, tensorflow as tf
from tfbertperf.keras import ProfileCallback
from tfbertperf.profile import autotuned_prefetch
x, y = np.random.rand(256, 8).astype("float32"), np.random.rand(256, 1).astype("float32")
base = lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat()
off = tf.data.Options()
off.experimental_optimization.inject_prefetch = False
pipelines = {
    "repeat last": lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(16).prefetch(2).repeat(),
    "a stateless map last": lambda: base().batch(16).map(lambda a, b: (a * 2, b)),
    "a stateful map last": lambda: base().batch(16).map(lambda a, b: (a + tf.random.uniform(tf.shape(a)), b)),
    "a parallel map last": lambda: base().batch(16).map(lambda a, b: (a * 2, b), num_parallel_calls=tf.data.AUTOTUNE),
    "prefetch(2) last": lambda: base().batch(16).prefetch(2),
    "prefetch(AUTOTUNE) before batch": lambda: base().prefetch(tf.data.AUTOTUNE).batch(16),
    "inject_prefetch off": lambda: base().batch(16).with_options(off),
    "cache, then repeat": lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(16).cache().repeat(),
}
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
model.compile("sgd", "mse")
out = {}
for name, make in pipelines.items():
    logdir = tempfile.mkdtemp(dir=sys.argv[1])
    model.fit(make(), epochs=1, steps_per_epoch=8, verbose=0, callbacks=[ProfileCallback(logdir, profile_steps="2:5")])
    captured = autotuned_prefetch.in_capture(next(Path(logdir).glob("plugins/profile/*")))
    out[name] = [len(captured), len(autotuned_prefetch.in_dataset(iter(make())))]
print(json.dumps(out))
"""


def test_the_dataset_names_as_many_autotuned_prefetches_as_its_capture_shows(tmp_path):
    """in_dataset reproduces tf.data's own rewrite (the injected prefetch): checked against real captures."""
    import json
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _PIPELINES, str(tmp_path)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"repeat last": [1, 1], "a stateless map last": [0, 0], "a stateful map last": [1, 1],
                    "a parallel map last": [0, 0], "prefetch(2) last": [0, 0],
                    "prefetch(AUTOTUNE) before batch": [2, 2], "inject_prefetch off": [0, 0],
                    "cache, then repeat": [1, 1]}


def test_an_iterator_that_is_no_tf_data_iterator_names_none():
    assert autotuned_prefetch.in_dataset(iter([1, 2])) == [] and autotuned_prefetch.in_dataset(None) == []


_JAX_FIT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from keras_jax_tfdata_by_hand import compiled_model, pipeline  # KERAS_BACKEND=jax (its own default)
import keras
from tfbertperf.keras import ProfileCallback
assert keras.backend.backend() == "jax"
cb = ProfileCallback(sys.argv[3], profile_steps=sys.argv[4] if sys.argv[4:] else None, probe=True, probe_steps=8,
                     probe_blocks=2)
compiled_model().fit(pipeline(inject_prefetch=sys.argv[2] == "inject"), epochs=1, steps_per_epoch=60, verbose=0,
                     callbacks=[cb])
print(json.dumps({**cb.what_if, "scratch_kept": cb._scratch._jax_state is not None}))  # the probe's state copy
"""


def _jax_fit(variant: str, logdir: Path, *window: str):
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _JAX_FIT, str(PROGRAMS), variant, str(logdir), *window],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "jax"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.mark.parametrize("variant", ["inject", "fixed"])
def test_a_probed_keras_jax_fit_reads_its_autotuned_prefetch_from_the_dataset(variant, tmp_path):
    """jax.profiler records no tf.data events, so only the dataset can tell (the adapter's generator holds it)."""
    import json

    proc = _jax_fit(variant, tmp_path / "logs")
    what_if = json.loads(proc.stdout.strip().splitlines()[-1])
    assert what_if["input_cost_fraction"] is not None, proc.stderr[-2000:]
    assert "may read low" not in proc.stderr
    if variant == "fixed":  # prefetch(2), then .repeat(), inject_prefetch off: the blocks run through the fit
        assert "autotuned_prefetch" not in what_if and what_if["after_steps"] is False
    else:  # … else all after the last step (JaxProbe.to_end)
        assert [f["iterator"] for f in what_if["autotuned_prefetch"]] == ["the prefetch tf.data injects at the end"]
        assert what_if["after_steps"] is True and what_if["probe_blocks"] == 2
    assert what_if["scratch_kept"] is False  # the last block's state copy let go, after the loop too


def test_analyze_reads_a_keras_jax_fits_autotuned_prefetch_from_its_step_file(tmp_path):
    """The capture of a Keras-JAX fit holds no tf.data events: the step file carries what the callback read from the
    dataset, and analyze lists it; the blocks ran after the steps, so the what-if is not called possibly low."""
    import json

    from tfbertperf.analyze import analyze

    _jax_fit("inject", tmp_path / "logs", "12:16")
    steps = json.loads(next((tmp_path / "logs").rglob("tfbertperf_steps.json")).read_text())
    injected = "the prefetch tf.data injects at the end"
    assert [f["iterator"] for f in steps["what_if"]["autotuned_prefetch"]] == [injected]
    doc = analyze(str(tmp_path / "logs"))
    found = doc["attribution"]["autotuned_prefetch"]
    assert found == [{"iterator": injected, "autotune_mode": "", "buffer_limit_max": None, "in": "dataset"}]
    assert doc["step_file"]["autotuned_prefetch"] == found
    assert doc["attribution"]["input_cost_fraction"] is not None
    assert doc["attribution"]["what_if_after_steps"] and "may read low" not in doc["verdict"]["summary"]
    # the input is where the capture does not look: the advice is about the pipeline, less the prefetch it has
    advice = " ".join(doc["verdict"]["recommendations"])
    assert "look at the pipeline itself" in advice and "prefetch(AUTOTUNE)" not in advice
