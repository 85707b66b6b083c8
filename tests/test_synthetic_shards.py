"""Synthetic pretraining shards: read back by the project's own manifest + pipeline and by tf.io.parse_example
with the project's feature spec; values consistent (vocab range, masks, masked positions and weights); record
sizes realistic; byte-identical to TensorFlow's serialization; deterministic across worker counts; parse_size."""

import hashlib
import os

import numpy as np
import pytest
import tensorflow as tf

from tf_serialize import tf_serialize as serialize

from tfbertperf.data.features import PRETRAIN_KEYS, feature_spec, feature_spec_summary
from tfbertperf.data.prep.encode import encode_records
from tfbertperf.data.prep.synthetic_shards import generate, parse_size, write_synthetic
from tfbertperf.errors import UsageError

VOCAB = 30522


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic") / "seq128"
    calls = []
    m = write_synthetic(str(out), examples=2000, shards=2, seq_len=128, workers=2, progress=calls.append)
    return out, m, calls


def _parsed(out, m):
    spec = feature_spec("pretrain", m["seq_len"], m["max_predictions"])
    files = [str(out / s["name"]) for s in m["shards"]]
    return {k: v.numpy() for k, v in tf.io.parse_example(
        next(iter(tf.data.TFRecordDataset(files).batch(100_000))), spec).items()}


def test_manifest_and_the_projects_pipeline_read_it(small):
    from tfbertperf.config import load_config
    from tfbertperf.data.manifest import load_manifest, shard_uris
    from tfbertperf.data.pipeline import build_dataset
    from tfbertperf.storage import open_backend, open_shards

    out, m, _ = small
    assert m["num_examples"] == 2000 and [s["examples"] for s in m["shards"]] == [1000, 1000]
    assert m["features"] == feature_spec_summary("pretrain", 128, 20) and m["max_predictions"] == 20
    assert sorted(os.listdir(out)) == sorted([s["name"] for s in m["shards"]] + ["manifest.json", "vocab.txt"])
    from tfbertperf.data.manifest import file_sha256

    assert [s["sha256"] for s in m["shards"]] == [file_sha256(str(out / s["name"])) for s in m["shards"]]
    cfg = load_config(data_uri=str(out), sets=["train.batch_size=16", "data.vocab_size=30522"])
    backend = open_backend(str(out), cfg.data)
    manifest = load_manifest(str(out), backend)  # checks schema, keys, shard sizes
    uris, hint = shard_uris(cfg, manifest, backend)
    batch = next(iter(build_dataset(cfg, manifest, open_shards(uris, cfg.data, backend, hint))))
    assert batch["input_ids"].shape == (16, 128) and batch["masked_lm_ids"].shape == (16, 20)
    assert batch["masked_lm_weights"].dtype == tf.float32 and batch["next_sentence_labels"].shape == (16, 1)
    from tfbertperf.data.manifest import load_vocab

    assert len(load_vocab(manifest, backend)) == VOCAB  # vocab.txt matches its sha256


def test_values_are_consistent_bert_examples(small):
    out, m, _ = small
    b = _parsed(out, m)
    ids, mask, seg = b["input_ids"], b["input_mask"], b["segment_ids"]
    pos, lab, w = b["masked_lm_positions"], b["masked_lm_ids"], b["masked_lm_weights"]
    assert ids.shape == (2000, 128) and pos.shape == (2000, 20)
    assert ids.min() >= 0 and ids.max() < VOCAB and lab.max() < VOCAB
    length = mask.sum(1)
    assert (mask == (np.arange(128)[None] < length[:, None])).all(), "mask is a prefix of ones"
    assert (ids[:, 0] == 2).all() and (ids[np.arange(2000), length - 1] == 3).all(), "[CLS] … [SEP]"
    assert ((ids == 0) == (mask == 0)).all() and set(np.unique(seg)) == {0, 1} and (seg[mask == 0] == 0).all()
    assert set(np.unique(w)) <= {0.0, 1.0}
    k = w.sum(1).astype(int)
    assert (k >= 1).all() and (k == np.minimum(20, np.maximum(1, np.rint(0.15 * length)))).all()
    real = w > 0
    assert ((pos == 0) == ~real).all() and (lab[~real] == 0).all(), "padding slots are 0 with weight 0"
    rows = np.nonzero(real)
    assert (pos[rows] < length[rows[0]]).all() and (pos[rows] >= 2).all()
    assert all((np.diff(p[r]) > 0).all() for p, r in zip(pos, real)), "positions sorted, distinct"
    masked_tokens = ids[rows[0], pos[rows]]
    assert not np.isin(lab[rows], [0, 2, 3]).any(), "labels are real tokens"
    assert 0.7 < (masked_tokens == 4).mean() < 0.9, "about 80 % [MASK]"
    assert 0.3 < b["next_sentence_labels"].mean() < 0.7


def test_record_sizes_are_realistic(small, tmp_path):
    out, m, _ = small
    assert 700 <= m["record_bytes_mean"] <= 950, m["record_bytes_mean"]  # seq 128 / 20: ~0.8 KB
    assert sum(s["bytes"] for s in m["shards"]) == pytest.approx(2000 * (m["record_bytes_mean"] + 16), abs=100)
    big = write_synthetic(str(tmp_path / "s512"), examples=400, seq_len=512, shards=1, workers=1)
    assert big["max_predictions"] == 76 and 2300 <= big["record_bytes_mean"] <= 3000  # ~2.5 KB


def test_records_match_the_projects_serializer_byte_for_byte():
    ex = generate(np.random.default_rng(3), 50, 128, 20, VOCAB)
    buf, lens, _ = encode_records(ex)
    starts = np.cumsum(lens) - lens
    for i in range(50):
        assert buf[starts[i]:starts[i] + lens[i]] == serialize({k: ex[k][i].tolist() for k in PRETRAIN_KEYS})


def test_reused_records_are_distinct_and_valid_and_output_is_deterministic(tmp_path):
    a = write_synthetic(str(tmp_path / "a"), examples=12000, shards=1, workers=1, seed=7)  # > POOL: reuse
    write_synthetic(str(tmp_path / "b"), examples=12000, shards=1, workers=1, seed=7)
    fa, fb = (tmp_path / d / a["shards"][0]["name"] for d in ("a", "b"))
    assert fa.read_bytes() == fb.read_bytes(), "same seed, same bytes"
    recs = [r.numpy() for r in tf.data.TFRecordDataset(str(fa))]  # TF checks every CRC
    assert len(recs) == 12000 and len({hashlib.sha1(r).digest() for r in recs}) == 12000
    parsed = _parsed(tmp_path / "a", a)
    assert parsed["input_ids"][8192:, 1].min() >= 999 and parsed["input_ids"].max() < VOCAB


def test_size_bytes_workers_progress_and_layout(tmp_path):
    calls = []
    m = write_synthetic(f"file://{tmp_path / 'sz'}", size_bytes=parse_size("3MB"), workers=2, progress=calls.append)
    total = sum(s["bytes"] for s in m["shards"])
    assert abs(total - 3_000_000) / 3_000_000 < 0.02 and len(m["shards"]) == 2
    assert calls and calls[-1]["bytes"] == total and calls[-1]["eta_s"] == 0 and calls[-1]["mb_per_s"] > 0
    one = write_synthetic(str(tmp_path / "one"), size_bytes=3_000_000, workers=1, shards=2)
    assert [s["bytes"] for s in one["shards"]] == [s["bytes"] for s in m["shards"]], "independent of workers"
    assert not [f for f in os.listdir(tmp_path / "sz") if f.startswith(".")]  # no temporaries left


@pytest.mark.parametrize("text,n", [("2GiB", 2 * 2**30), ("500MB", 500_000_000), ("1.5g", 1_500_000_000),
                                    ("1000", 1000), ("64 KiB", 65536), ("3M", 3_000_000)])
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["lots", "2XB", "", "-5MB", "0", "1.2.3G"])
def test_parse_size_rejects_naming_the_value(text):
    with pytest.raises(UsageError, match="size " + repr(text).replace(".", r"\.")):
        parse_size(text)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(), "exactly one"), (dict(examples=10, size_bytes=10), "exactly one"),
    (dict(examples=3, shards=4), "shards=4"), (dict(examples=0), "examples=0"),
    (dict(examples=10, max_predictions=200), "max_predictions=200"), (dict(examples=10, seq_len=4), "seq_len=4"),
])
def test_bad_arguments(tmp_path, kwargs, needle):
    with pytest.raises(UsageError, match=needle):
        write_synthetic(str(tmp_path / "bad"), **kwargs)
    with pytest.raises(UsageError, match="not a local directory"):
        write_synthetic("gs://bucket/x", examples=10)
