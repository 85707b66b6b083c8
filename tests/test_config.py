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
