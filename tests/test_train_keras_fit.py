"""`tfbertperf.keras.ProfileCallback`: a plain `model.fit` yields a profile whose steps xprof finds."""

import glob
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfbertperf.config import load_config
from tfbertperf.errors import UsageError
from tfbertperf.keras import ProfileCallback
from tfbertperf.model import build_model
from tfbertperf.data.synthetic import synthetic_batches


def _xprof_steps(logdir):
    from xprof.convert.raw_to_tool_data import xspace_to_tool_data

    xplanes = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    assert xplanes, "no profile captured"
    raw = xspace_to_tool_data(xplanes, "input_pipeline_analyzer", {})
    raw = raw[0] if isinstance(raw, tuple) else raw
    tables = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    rows = next(t for t in tables if t.get("cols") and t["cols"][0]["id"] == "stepnum")["rows"]
    return [int(str(r["c"][0]["v"]).split()[-1]) for r in rows]


@pytest.mark.slow
def test_plain_model_fit_with_profile_callback_gives_xprof_steps_across_epochs(tmp_path):
    cfg = load_config(overrides={"model.task": "classify", "data.seq_len": 32})
    model = build_model(cfg.model, vocab_size=500, seq_len=32)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)})
    arrays = synthetic_batches("classify", 8, 32, 5, 500, pool=15)
    labels = arrays.pop("label_ids")
    ds = tf.data.Dataset.from_tensor_slices((arrays, {"logits": labels}))  # 15 batches per epoch
    callback = ProfileCallback(str(tmp_path), profile_steps="4:26")
    model.fit(ds, epochs=2, callbacks=[callback], verbose=0)

    steps = _xprof_steps(tmp_path)
    # global step numbers, the window crossing the epoch boundary; all 22 of them: the capture runs one step more
    # on each side, which xprof's step table leaves out as possibly incomplete
    assert sorted(steps) == list(range(4, 26)), steps
    assert len(callback.step_times_ms) == 30 and all(t > 0 for t in callback.step_times_ms)


def test_bad_profile_window_is_a_usage_error():
    with pytest.raises(UsageError, match="profile_steps='9:3'"):
        ProfileCallback("unused", profile_steps="9:3")


def test_a_window_after_the_fits_last_step_says_so_and_analyze_names_the_step_file(tmp_path):
    """profile_steps beyond the fit: no capture; the callback warns at the end and analyze says why there is none."""
    from tfbertperf.analyze import analyze

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.zeros((64, 4), "float32")
    with pytest.warns(UserWarning, match=r"profile_steps 200:240 begins after the fit's last step \(8 steps\)"):
        model.fit(x, x[:, :1], batch_size=8, verbose=0, callbacks=[ProfileCallback(str(tmp_path), "200:240")])
    with pytest.raises(UsageError, match=r"a step file \(tfbertperf_steps.json\) but no capture: the profiled window "
                                         r"never ran"):
        analyze(str(tmp_path))
