"""RunConfig: every documented --set key is reachable, and bad keys/types/values are named in one line."""

import pytest

from tfbertperf.config import AUTOTUNE, known_keys, load_config
from tfbertperf.errors import UsageError

# The public contract from shared/DESIGN.md
DESIGN_KEYS = [
    "model.size", "model.task", "data.uri", "data.mode", "data.seq_len", "pipeline.preset",
    "pipeline.cycle_length", "pipeline.num_parallel_calls", "pipeline.prefetch", "pipeline.shuffle_buffer",
    "pipeline.cache", "pipeline.tokenize", "train.batch_size", "train.steps", "train.strategy",
    "train.precision", "train.jit", "train.seed", "train.deterministic", "profile.steps", "run.out",
]


def test_every_design_key_is_settable():
    keys = set(known_keys())
    missing = [k for k in DESIGN_KEYS if k not in keys]
    assert not missing


def test_set_values_are_coerced_to_field_types():
    cfg = load_config(sets=["pipeline.cycle_length=16", "pipeline.prefetch=autotune", "train.jit=true",
                            "train.batch_size=64", "data.read_latency_ms=2.5", "profile.steps=5:15"])
    assert cfg.pipeline.cycle_length == 16
    assert cfg.pipeline.prefetch == AUTOTUNE
    assert cfg.train.jit is True
    assert cfg.train.batch_size == 64
    assert cfg.data.read_latency_ms == 2.5
    assert cfg.profile_window == (5, 15)


def test_default_is_the_embedded_workload():
    cfg = load_config()
    assert cfg.model.size == "tiny" and cfg.model.task == "pretrain"
    assert cfg.uses_default_data()
    start, stop = cfg.profile_window
    assert stop - start >= 10 and stop <= cfg.train.steps


def test_named_workload_loads():
    cfg = load_config("naive")
    assert cfg.workload == "naive" and cfg.pipeline.preset == "naive"


@pytest.mark.parametrize(
    "setting, culprit",
    [
        ("pipeline.bogus=1", "pipeline.bogus"),
        ("nosuch.key=1", "nosuch"),
        ("train.batch_size=big", "train.batch_size"),
        ("train.batch_size=0", "train.batch_size"),
        ("model.size=huge", "model.size"),
        ("train.strategy=everywhere", "train.strategy"),
        ("train.jit=maybe", "train.jit"),
        ("train.remat=sometimes", "train.remat"),
        ("data.verify=crc", "data.verify"),
        ("pipeline.cycle_length=-3", "pipeline.cycle_length"),
        ("profile.steps=50:20", "profile.steps"),
        ("profile.steps=10:500", "profile.steps"),
        ("profile.probe_blocks=0", "profile.probe_blocks"),
        ("profile.probe_blocks=many", "profile.probe_blocks"),
        ("profile.threadpool_events=sometimes", "profile.threadpool_events"),
        ("pipeline.device_prefetch=-1", "pipeline.device_prefetch"),
        ("pipeline.device_prefetch=abc", "pipeline.device_prefetch"),
        ("model.num_labels=-2", "model.num_labels"),
        ("noequals", "noequals"),
    ],
)
def test_bad_settings_name_the_culprit(setting, culprit):
    with pytest.raises(UsageError) as e:
        load_config(sets=[setting])
    msg = str(e.value)
    assert culprit in msg and "\n" not in msg


def test_unknown_uri_scheme_is_rejected():
    with pytest.raises(UsageError, match="s3"):
        load_config(data_uri="s3://bucket/x")


def test_unknown_workload_is_named():
    with pytest.raises(UsageError, match="nope"):
        load_config("nope")


def test_bad_workload_yaml_is_named(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("model: [unclosed\n")
    with pytest.raises(UsageError, match="w.yaml"):
        load_config(str(f))
    f.write_text("train:\n  batch_size: lots\n")
    with pytest.raises(UsageError, match="train.batch_size"):
        load_config(str(f))


def test_default_data_dir_changes_with_prep_knobs():
    a = load_config().resolved_data_uri()
    b = load_config(sets=["data.seq_len=64", "data.max_predictions=10"]).resolved_data_uri()
    assert a != b
    assert load_config().resolved_data_uri() == a


# ---- the profile window follows the run (issue 30) --------------------------------------------------------


@pytest.mark.parametrize("workload", ["default", "naive", "bert_base"])
def test_no_workload_chooses_a_window_for_the_user(workload):
    """The bundled workloads leave profile.steps to follow the run: `--set train.steps=N` alone always loads."""
    for steps in (4, 10, 17, 39):
        cfg = load_config(workload, sets=[f"train.steps={steps}"])
        assert cfg.window_is_auto and cfg.profile_window is not None


@pytest.mark.parametrize("steps", range(4, 301))
def test_an_automatic_window_is_steady_and_inside_the_run(steps):
    """After warm-up (+1: the capture opens a step early), inside the run, 2 to 20 steps long."""
    from tfbertperf.config.schema import warmup_for

    cfg = load_config(sets=[f"train.steps={steps}"])
    start, stop = cfg.profile_window
    assert start >= warmup_for(steps, cfg.train.warmup_steps) + 1
    assert stop <= steps and 2 <= stop - start <= 20


def test_the_default_run_profiles_steps_20_to_39():
    """The 60-step default keeps the window its figures were always measured on (README, BENCHMARKS)."""
    cfg = load_config()
    assert cfg.profile_window == (20, 40)
    assert "profiled steps 20–39" in cfg.window_choice() and "chosen to fit the 60-step run" in cfg.window_choice()


def test_a_short_run_says_which_steps_it_profiles():
    cfg = load_config(sets=["train.steps=10"])
    assert cfg.profile_window == (4, 7)
    assert cfg.window_choice().startswith("profiled steps 4–6 (3 steps; chosen")


def test_a_run_too_short_for_a_window_is_not_an_error_and_says_so():
    cfg = load_config(sets=["train.steps=3"])
    assert cfg.profile_window is None
    assert "too short" in cfg.window_choice() and "profile.steps=START:STOP" in cfg.window_choice()


def test_an_explicit_window_is_the_users_choice():
    cfg = load_config(sets=["train.steps=10", "profile.steps=1:3"])
    assert cfg.profile_window == (1, 3) and not cfg.window_is_auto
    assert cfg.window_choice().endswith("(2 steps; profile.steps)")


def test_only_an_explicit_window_that_cannot_fit_is_an_error():
    load_config(sets=["train.steps=12"])  # auto: fits
    with pytest.raises(UsageError) as e:
        load_config(sets=["train.steps=12", "profile.steps=20:40"])
    msg = str(e.value)
    assert "profile.steps='20:40'" in msg and "train.steps=12" in msg and "\n" not in msg
    assert "profile.steps=4:8" in msg and "auto" in msg  # a window that fits, and the way back to auto


@pytest.mark.parametrize("steps", [8, 14, 30, 60, 200])
def test_the_probes_blocks_stay_out_of_an_automatic_window(steps):
    """probe_plan places the what-if blocks around the window, never inside it nor right before it."""
    from tfbertperf.train.probe import probe_plan, short_run_budget

    cfg = load_config(sets=[f"train.steps={steps}"])
    warmup, probe = short_run_budget(steps, cfg.train.warmup_steps, cfg.profile.probe_steps)
    w0, w1 = cfg.profile_window
    for pos, n in probe_plan(steps, warmup, (w0, w1), probe, cfg.profile.probe_blocks):
        assert pos == steps or pos > w1 or pos + n <= w0
