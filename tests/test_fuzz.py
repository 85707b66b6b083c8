"""Fuzzing (issue 15 item 7): `--set` values, workload YAML files and the TFRecord framing reader, given
anything, either work or raise the documented error — UsageError (one line, exit 2 at the CLI) — never anything
else.  Each property runs a bounded number of examples so that the file takes seconds."""

import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfbertperf.config import load_config
from tfbertperf.config.loading import known_keys
from tfbertperf.errors import UsageError
from tfbertperf.storage.tfrecord import frame, iter_record_batches

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])
KEYS = known_keys()
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
values = st.one_of(text, st.integers().map(str), st.floats(allow_nan=True).map(str),
                   st.sampled_from(["", "autotune", "-1", "0", "1e400", "nan", "inf", "true", "none", "1:2",
                                    "20:10", "0:0", "5:5:5", "gs://", "az://", "s3://x", "://", "\x00", "9" * 40]))


def _works_or_usage_error(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except UsageError as e:
        assert str(e).strip()  # cli_entry prints it as one line (errors.fail joins the whitespace)
        return None


@FAST
@given(key=st.one_of(st.sampled_from(KEYS), text), value=values)
def test_any_set_value_is_accepted_or_one_usage_error(key, value):
    cfg = _works_or_usage_error(load_config, sets=[f"{key}={value}"])
    if cfg is not None:  # accepted: the value is in the config, coerced to the field's type
        section, _, name = key.partition(".")
        assert hasattr(getattr(cfg, section), name)


@FAST
@given(sets=st.lists(st.tuples(st.sampled_from(KEYS), values).map("=".join), max_size=6))
def test_any_combination_of_set_values(sets):
    _works_or_usage_error(load_config, sets=sets)


yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), text)
yaml_docs = st.recursive(yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(text, st.sampled_from(KEYS).map(lambda k: k.split(".")[0]),
                                                           st.sampled_from(KEYS).map(lambda k: k.split(".")[1])),
                                                 inner, max_size=4)), max_leaves=12)


@FAST
@given(doc=yaml_docs)
def test_any_yaml_workload_is_accepted_or_one_usage_error(doc, tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text(yaml.safe_dump(doc))
    _works_or_usage_error(load_config, workload=str(f))


@FAST
@given(raw=st.binary(max_size=200) | text.map(str.encode))
def test_any_bytes_as_a_workload_file(raw, tmp_path):
    f = tmp_path / "w.yaml"
    f.write_bytes(raw)
    _works_or_usage_error(load_config, workload=str(f))


records = st.lists(st.binary(max_size=300), max_size=8)


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


@FAST
@given(recs=records, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=10))
def test_framing_round_trips_across_any_chunking(recs, cuts):
    data = b"".join(frame(r) for r in recs)
    got = [r for batch in iter_record_batches(_chunked(data, cuts), "s.tfrecord") for r in batch]
    assert got == recs


@FAST
@given(recs=records.filter(bool), where=st.integers(min_value=0), bit=st.integers(0, 7),
       cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=5))
def test_any_flipped_bit_is_a_usage_error_naming_the_shard(recs, where, bit, cuts):
    data = bytearray(b"".join(frame(r) for r in recs))
    i = where % len(data)
    data[i] ^= 1 << bit
    with pytest.raises(UsageError, match=r"shard s\.tfrecord: (corrupt|truncated) TFRecord at byte \d+"):
        for _ in iter_record_batches(_chunked(bytes(data), cuts), "s.tfrecord"):
            pass


@FAST
@given(recs=records.filter(bool), keep=st.integers(min_value=0))
def test_any_truncation_is_a_usage_error_naming_the_shard(recs, keep):
    data = b"".join(frame(r) for r in recs)
    cut = data[: keep % len(data)]  # strictly shorter than the shard
    boundaries = {0}
    for r in recs:
        boundaries.add(max(boundaries) + len(frame(r)))
    if len(cut) in boundaries:  # a cut between records is a shorter valid shard
        assert sum(len(b) for b in iter_record_batches([cut], "s.tfrecord")) <= len(recs)
        return
    with pytest.raises(UsageError, match=r"shard s\.tfrecord: truncated TFRecord at byte \d+"):
        for _ in iter_record_batches([cut], "s.tfrecord"):
            pass


@FAST
@given(raw=st.binary(max_size=400), cuts=st.lists(st.integers(min_value=0, max_value=1000), max_size=5))
def test_arbitrary_bytes_are_records_or_a_usage_error(raw, cuts):
    _works_or_usage_error(lambda: [r for b in iter_record_batches(_chunked(raw, cuts), "s.tfrecord") for r in b])


def test_the_alphabet_of_keys_is_the_schema():
    assert "train.checkpoint_every" in KEYS and all(set(k) <= set(string.ascii_lowercase + "_.") for k in KEYS)
