"""The user's own TFRecords (issue 28), without training: what is read from a data.uri (folder, glob, file, comma
list), how the data set is described from its records (task, sizes, vocabulary, labels, GZIP), every bad-data
case as one line with exit 2 and nothing written, the origin on every output, and prepare never writing into a
folder of someone else's TFRecords.  Shards are written by tests/userdata.py as google-research/bert writes them."""

from __future__ import annotations

import hashlib
import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import userdata  # noqa: E402

from tfbertperf.config import load_config  # noqa: E402
from tfbertperf.errors import UsageError  # noqa: E402


def _open(uri: str, *sets: str) -> dict:
    from tfbertperf.data.described import open_data
    from tfbertperf.storage import open_backend

    cfg = load_config(data_uri=uri, sets=list(sets))
    return open_data(cfg, uri, open_backend(uri.split(",")[0], cfg.data))


def _tree_digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def user_set(tmp_path_factory):
    """Two google-research pretraining shards under the user's names, plus what a real folder also holds."""
    d = tmp_path_factory.mktemp("wiki")
    userdata.write_pretrain_set(d)
    (d / "_SUCCESS").write_bytes(b"")
    (d / ".part-r-00001.crc").write_bytes(b"\x00" * 12)
    (d / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    (d / "README.md").write_text("my data\n")
    return d


# ---- what data.uri names ------------------------------------------------------------------------------------
def test_a_folder_is_its_tfrecords_without_markers_vocab_or_notes(user_set):
    m = _open(str(user_set))
    assert sorted(s["name"] for s in m["shards"]) == ["part-r-00001", "wiki_00.tfrecord"]
    assert m["bytes"] == sum((user_set / n).stat().st_size for n in ("part-r-00001", "wiki_00.tfrecord"))
    assert all(Path(s["uri"]).is_file() for s in m["shards"])


def test_a_glob_a_file_and_a_comma_list_name_exactly_those_files(user_set):
    assert [s["name"] for s in _open(f"{user_set}/*.tfrecord")["shards"]] == ["wiki_00.tfrecord"]
    assert [s["name"] for s in _open(f"{user_set}/part-r-*")["shards"]] == ["part-r-00001"]
    assert [s["name"] for s in _open(f"{user_set}/part-r-00001")["shards"]] == ["part-r-00001"]
    both = _open(f"{user_set}/wiki_00.tfrecord, {user_set}/part-r-00001")
    assert sorted(s["name"] for s in both["shards"]) == ["part-r-00001", "wiki_00.tfrecord"]


def test_glob_stars_stay_in_one_folder_and_double_stars_cross_them():
    from tfbertperf.storage.listing import glob_regex

    assert glob_regex("gs://b/x/*.tfrecord").match("gs://b/x/a.tfrecord")
    assert not glob_regex("gs://b/x/*.tfrecord").match("gs://b/x/sub/a.tfrecord")
    assert glob_regex("gs://b/x/**.tfrecord").match("gs://b/x/sub/a.tfrecord")
    assert glob_regex("/d/part-r-0000[0-4]").match("/d/part-r-00003")
    assert not glob_regex("/d/part-r-0000[0-4]").match("/d/part-r-00007")


# ---- described from the records -----------------------------------------------------------------------------
def test_pretraining_features_describe_task_lengths_and_an_inferred_vocabulary(user_set):
    m = _open(str(user_set))
    assert (m["origin"], m["task"], m["seq_len"], m["max_predictions"]) == ("user", "pretrain", 64, 10)
    records = userdata.pretrain_records(192)
    ids = [userdata_ids(r) for r in records]
    assert m["vocab_size"] == max(ids) + 1 and m["vocab_source"].startswith("inferred: the largest id")
    assert m["num_examples"] == 192 and m["checked"] == "all records" and m["compression"] == "none"


def userdata_ids(record: bytes) -> int:
    import tensorflow as tf

    f = tf.train.Example.FromString(record).features.feature
    return max(list(f["input_ids"].int64_list.value) + list(f["masked_lm_ids"].int64_list.value))


def test_the_vocabulary_comes_from_data_vocab_when_given(user_set, tmp_path):
    vocab = tmp_path / "vocab.txt"
    userdata.write_vocab(vocab, 500)
    m = _open(str(user_set), f"data.vocab={vocab}")
    assert m["vocab_size"] == 500 and m["vocab_source"] == f"data.vocab={vocab}"


def test_classification_features_give_the_label_count_from_the_data_or_model_num_labels(tmp_path):
    userdata.write_records(tmp_path / "train.tf_record", userdata.classify_records(60, seq_len=32, num_labels=3))
    m = _open(str(tmp_path))
    assert (m["task"], m["seq_len"], m["num_labels"]) == ("classify", 32, 3)
    assert m["labels_source"].startswith("inferred")
    m5 = _open(str(tmp_path), "model.num_labels=5")
    assert m5["num_labels"] == 5 and m5["labels_source"] == "model.num_labels"


def test_the_run_takes_task_and_sizes_from_the_data_unless_set_to_something_else(tmp_path):
    from tfbertperf.data.described import fit_config

    userdata.write_records(tmp_path / "train.tf_record", userdata.classify_records(20, seq_len=32, num_labels=3))
    m = _open(str(tmp_path))
    cfg = fit_config(load_config(data_uri=str(tmp_path)), m)
    assert (cfg.model.task, cfg.data.seq_len, cfg.model.num_labels) == ("classify", 32, 3)
    with pytest.raises(UsageError, match=r"data.seq_len=256: the data at .* have seq_len 32"):
        fit_config(load_config(data_uri=str(tmp_path), sets=["data.seq_len=256"]), m)


def test_gzip_is_detected_and_the_description_is_the_plain_sets(tmp_path):
    plain, gz = tmp_path / "plain", tmp_path / "gz"
    userdata.write_pretrain_set(plain)
    userdata.write_pretrain_set(gz, gzip=True)
    a, b = _open(str(plain)), _open(str(gz))
    assert b["compression"] == "gzip" and a["compression"] == "none"
    assert {k: a[k] for k in ("task", "seq_len", "max_predictions", "vocab_size", "num_examples")} == \
        {k: b[k] for k in ("task", "seq_len", "max_predictions", "vocab_size", "num_examples")}
    assert _open(str(gz), "data.compression=gzip")["compression"] == "gzip"


def test_a_large_set_is_described_from_a_sample_and_says_so(user_set, monkeypatch):
    import tfbertperf.data.described as described

    monkeypatch.setattr(described, "SCAN_ALL_BYTES", 1000)
    monkeypatch.setattr(described, "SAMPLE_BYTES", 8000)
    m = _open(str(user_set))
    assert m["checked"] == "a sample" and m["num_examples"] is None and 0 < m["records_checked"] < 192
    assert "a sample of" in m["vocab_source"]


def test_the_data_block_names_the_origin_in_the_contracts_words(user_set):
    from tfbertperf.data.origin import data_block

    block = data_block(_open(str(user_set)))
    assert block["summary"].startswith("your data: 2 files, ")
    assert block["summary"].endswith(", google-research pretraining features, no manifest (described from the data)")
    assert {k: block[k] for k in ("origin", "files", "format", "compression", "manifest", "checksums_verified")} == {
        "origin": "user", "files": 2, "format": "google-research pretraining features", "compression": "none",
        "manifest": False, "checksums_verified": False}
    ours = data_block({"origin": None, "corpus": "pydoc_data.topics", "task": "pretrain", "uri": "/x",
                       "shards": [{"name": "a", "bytes": 10}, {"name": "b", "bytes": 5}]}, checksums_verified=True)
    assert ours["summary"] == "prepared by tfbertperf from pydoc_data.topics"
    assert (ours["origin"], ours["files"], ours["bytes"], ours["manifest"]) == ("prepared", 2, 15, True)


# ---- bad data: one line, exit 2, nothing written --------------------------------------------------------------
def _bad_sets(root: Path) -> dict:
    """{case: (data.uri, extra --set, words the one line must hold)}; each folder is written once."""
    good = userdata.pretrain_records(40, seed=3)
    cases = {}

    def folder(name, records_by_file, gzip=False):
        d = root / name
        d.mkdir()
        for fname, recs in records_by_file.items():
            userdata.write_records(d / fname, recs, gzip)
        return d

    bad = list(good)
    bad[5] = userdata.with_feature(bad[5], "masked_lm_weights")
    d = folder("missing", {"wiki_00.tfrecord": good[:20], "part-r-00001": bad})
    cases["missing feature"] = (str(d), [], [f"{d}/part-r-00001: record 5 has no feature 'masked_lm_weights'"])
    bad = list(good)
    bad[3] = userdata.with_feature(bad[3], "input_mask", userdata.float_feature([1.0] * 64))
    d = folder("dtype", {"wiki_00.tfrecord": bad})
    cases["wrong dtype"] = (str(d), [], ["wiki_00.tfrecord: record 3: feature 'input_mask' is a float_list",
                                         "int64_list"])
    bad = list(good)
    bad[7] = userdata.with_feature(bad[7], "input_ids", userdata.int_feature([101] * 32))
    d = folder("length", {"wiki_00.tfrecord": bad})
    cases["varying length"] = (str(d), [], ["record 7: 'input_ids' has 32 values, ", "record 0 has 64"])
    vocab = root / "small-vocab.txt"
    userdata.write_vocab(vocab, 200)
    d = folder("ids", {"wiki_00.tfrecord": good})
    cases["ids >= vocabulary"] = (str(d), [f"data.vocab={vocab}"],
                                  ["wiki_00.tfrecord: record 0:", "≥ the vocabulary size 200", "data.vocab="])
    cases["empty glob"] = (f"{d}/*.tfrecords", [], [f"{d}/*.tfrecords: the glob matches no data file"])
    d = folder("nottf", {"wiki_00.tfrecord": good})
    (d / "shard.bin").write_bytes(b"this is not a tfrecord file at all\n" * 10)
    cases["not a TFRecord"] = (str(d), [], [f"{d}/shard.bin: not a TFRecord file"])
    d = folder("gz", {"wiki_00.tfrecord.gz": good}, gzip=True)
    cases["GZIP read as plain"] = (str(d), ["data.compression=none"],
                                   ["wiki_00.tfrecord.gz: GZIP-compressed", "data.compression=none"])
    d = folder("mixed", {"a.tfrecord": good[:10]})
    userdata.write_records(d / "b.tfrecord", good[10:], gzip=True)
    cases["mixed compression"] = (str(d), [], ["b.tfrecord is GZIP-compressed but shard", "a.tfrecord is not"])
    d = folder("inline", {"wiki_00.tfrecord": good})
    cases["inline on pre-tokenized"] = (str(d), ["pipeline.tokenize=inline"],
                                        ["pipeline.tokenize=inline: needs raw text", "pre-tokenized"])
    cases["verify without checksums"] = (str(d), ["data.verify=sha256"], ["no manifest.json", "no checksums"])
    labels = folder("labels", {"train.tf_record": userdata.classify_records(30, num_labels=4)})
    cases["label >= num_labels"] = (str(labels), ["model.num_labels=2"], ["label_ids is", "outside the 2 labels"])
    cases["no such folder"] = (str(root / "nowhere"), [], [f"{root / 'nowhere'}: no such directory or file"])
    return cases


BAD_CASES = ["missing feature", "wrong dtype", "varying length", "ids >= vocabulary", "empty glob", "not a TFRecord",
             "GZIP read as plain", "mixed compression", "inline on pre-tokenized", "verify without checksums",
             "label >= num_labels", "no such folder"]


@pytest.fixture(scope="module")
def bad_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    return root, _bad_sets(root)


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_user_data_is_one_line_exit_2_and_nothing_written(case, bad_sets, tmp_path, capsys):
    from tfbertperf import run

    root, cases = bad_sets
    uri, sets, words = cases[case]
    before = _tree_digest(root)
    runs = tmp_path / "runs"
    argv = ["--set", f"data.uri={uri}", "--set", f"run.out={runs}"] + [x for s in sets for x in ("--set", s)]
    with pytest.raises(SystemExit) as e:
        run.main(argv)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("tfbertperf: error:")]
    assert e.value.code == 2 and len(err) == 1, err
    for w in words:
        assert w in err[0], (w, err[0])
    assert not runs.exists()  # no run directory, not even the runs root
    assert _tree_digest(root) == before  # nothing written into the user's folders


def test_a_bad_record_met_only_in_training_is_named_by_file_and_index(tmp_path):
    """A record past the checked sample: TensorFlow's parse error becomes the one line naming file and record."""
    import tensorflow as tf

    from tfbertperf.data.features import feature_spec
    from tfbertperf.data.records import data_errors
    from tfbertperf.storage import open_backend

    good = userdata.pretrain_records(30, seed=4)
    userdata.write_records(tmp_path / "wiki_00.tfrecord", good)
    m = _open(str(tmp_path))  # described while sound; the file is then replaced by one with a bad record 23
    bad = list(good)
    bad[23] = userdata.with_feature(bad[23], "next_sentence_labels")
    userdata.write_records(tmp_path / "wiki_00.tfrecord", bad)
    cfg = load_config(data_uri=str(tmp_path))
    with pytest.raises(UsageError) as e:
        with data_errors(m, open_backend(str(tmp_path)), cfg):
            tf.io.parse_example(tf.constant(bad), feature_spec("pretrain", 64, 10))
    assert str(e.value) == (f"shard {tmp_path}/wiki_00.tfrecord: record 23 has no feature 'next_sentence_labels' "
                            "(google-research pretraining features need input_ids, input_mask, segment_ids, "
                            "masked_lm_positions, masked_lm_ids, masked_lm_weights, next_sentence_labels)")


def test_other_tensorflow_errors_pass_through_data_errors(user_set):
    import tensorflow as tf

    from tfbertperf.data.records import data_errors
    from tfbertperf.storage import open_backend

    with pytest.raises(tf.errors.InvalidArgumentError, match="Incompatible shapes|required broadcastable"):
        with data_errors(_open(str(user_set)), open_backend(str(user_set)), load_config()):
            tf.constant([1, 2]) + tf.constant([1, 2, 3])


# ---- the same storage path: damaged records skipped and counted; GZIP read in every reader ------------------
def test_skip_corrupt_reads_past_a_damaged_user_record_and_counts_it(tmp_path):
    from tfbertperf.job import Inputs
    from tfbertperf.storage import open_shards

    records = userdata.pretrain_records(30, seed=5)
    path = tmp_path / "part-r-00000"
    userdata.write_records(path, records)
    raw = bytearray(path.read_bytes())
    raw[12 + 40] ^= 0xFF  # inside record 0's payload: its data CRC no longer checks out
    path.write_bytes(bytes(raw))
    cfg = load_config(data_uri=str(tmp_path), sets=["data.skip_corrupt=true"])
    inputs = Inputs(cfg, progress=False)
    assert inputs.manifest["records_checked"] == 29 and inputs.manifest["records_skipped_at_check"] == 1
    src = open_shards(inputs.shard_uris, inputs.cfg.data, inputs.backend, inputs.record_bytes_hint,
                      compression=inputs.compression)
    got = [r.numpy() for r in src.read(str(path))]
    assert got == records[1:]
    assert inputs.backend.metrics.summary()["records_skipped"] == 1


@pytest.mark.parametrize("mode", ["local", "service"])
def test_gzip_shards_read_back_record_for_record(tmp_path, mode):
    from tfbertperf.data.service import plain_source
    from tfbertperf.job import Inputs
    from tfbertperf.storage import open_shards

    records = userdata.pretrain_records(25, seed=6)
    userdata.write_records(tmp_path / "wiki_00.tfrecord.gz", records, gzip=True)
    inputs = Inputs(load_config(data_uri=str(tmp_path)), progress=False)
    src = open_shards(inputs.shard_uris, inputs.cfg.data, inputs.backend, inputs.record_bytes_hint,
                      compression=inputs.compression)
    if mode == "service":  # the tf.data service's workers read with TF's own reader
        src = plain_source(src)
    assert [r.numpy() for r in src.read(inputs.shard_uris[0])] == records


def test_gzip_stream_parsing_and_its_damage_in_one_line():
    import gzip

    from tfbertperf.storage.tfrecord import gunzip_chunks

    data = gzip.compress(b"a" * 5000) + gzip.compress(b"b" * 7)
    assert b"".join(gunzip_chunks([data[i:i + 11] for i in range(0, len(data), 11)], "x")) == b"a" * 5000 + b"b" * 7
    with pytest.raises(UsageError, match="shard x: truncated GZIP data"):
        b"".join(gunzip_chunks([data[:30]], "x"))
    with pytest.raises(UsageError, match="shard x: damaged GZIP data"):
        b"".join(gunzip_chunks([data[:10] + b"\xff" * 40], "x"))


def test_one_user_file_splits_by_record_over_two_input_pipelines(tmp_path):
    """multi_worker with fewer files than workers: each pipeline takes every other record, none twice."""
    import tensorflow as tf

    from tfbertperf.data.pipeline import build_dataset
    from tfbertperf.job import Inputs
    from tfbertperf.storage import open_shards

    userdata.write_records(tmp_path / "train.tf_record", userdata.classify_records(40, seq_len=16, seed=7))
    inputs = Inputs(load_config(data_uri=str(tmp_path), sets=["train.batch_size=4", "pipeline.deterministic=true",
                                                               "pipeline.shuffle_buffer=0"]), progress=False)
    seen = []
    for pid in (0, 1):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pid, num_replicas_in_sync=2)
        src = open_shards(inputs.shard_uris, inputs.cfg.data, inputs.backend, inputs.record_bytes_hint)
        ds = build_dataset(inputs.cfg, inputs.manifest, src, ctx, training=False)
        seen.append({tuple(row) for b in ds for row in b["input_ids"].numpy().tolist()})
    assert len(seen[0]) == len(seen[1]) == 20 and not seen[0] & seen[1]


# ---- prepare never writes into the user's folder --------------------------------------------------------------
def test_prepare_out_into_a_folder_of_user_tfrecords_refuses_and_leaves_it_byte_identical(user_set, capsys):
    from tfbertperf import prepare

    before = _tree_digest(user_set)
    with pytest.raises(SystemExit) as e:
        prepare.main(["--out", str(user_set), "-q"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("tfbertperf: error:")]
    assert e.value.code == 2 and len(err) == 1
    assert "holds 2 TFRecord file(s) tfbertperf did not write (part-r-00001, wiki_00.tfrecord)" in err[0]
    assert f"--set data.uri={user_set}" in err[0]
    assert _tree_digest(user_set) == before


def test_a_half_written_folder_of_our_own_shards_is_not_foreign(tmp_path):
    from tfbertperf.data.manifest import foreign_tfrecords
    from tfbertperf.storage.local import LocalBackend

    records = userdata.pretrain_records(3)
    for name in ("pretrain-00000-of-00002.tfrecord", "pretrain-text-chunk-00001-123.tfrecord"):
        userdata.write_records(tmp_path / name, records)
    assert foreign_tfrecords(str(tmp_path), LocalBackend()) == []
    userdata.write_records(tmp_path / "wiki_00.tfrecord", records)
    assert foreign_tfrecords(str(tmp_path), LocalBackend()) == [str(tmp_path / "wiki_00.tfrecord")]


# ---- the origin on env, env --diff and compare ----------------------------------------------------------------
def test_env_describes_a_local_user_folder_and_env_diff_says_each_sides_data(user_set, tmp_path):
    from tfbertperf.envinfo import explain, format_diff
    from tfbertperf.data.origin import describe_dataset

    ds = describe_dataset(str(user_set))
    assert ds["origin"] == "user" and ds["summary"].startswith("your data: 2 files")
    assert describe_dataset(str(tmp_path / "nowhere"))["summary"].startswith("not prepared yet")
    assert describe_dataset("gs://b/x/*.tfrecord")["summary"].startswith("not described: remote")
    ours = {"origin": "prepared", "summary": "prepared by tfbertperf from pydoc_data.topics", "files": 8}
    a = {"schema": "tfbertperf.env/1", "data": {"uri": "/x", "scheme": "file", "dataset": ds}}
    b = {"schema": "tfbertperf.env/1", "data": {"uri": "/y", "scheme": "file", "dataset": ours}}
    doc = explain(a, b)
    text = format_diff(doc)
    assert f"A data: {ds['summary']}" in text and f"B data: {ours['summary']}" in text
    origin = [d for d in doc["differences"] if d["name"] == "data.dataset.origin"]
    assert origin and "numerics" in origin[0]["affects"] and "user's own TFRecords" in origin[0]["why"]


def test_compare_shows_each_runs_data_origin(tmp_path):
    from tfbertperf.report.comparison import build_comparison
    from tfbertperf.report.markdown import comparison_markdown

    def rep(summary, eps):
        return {"schema": "tfbertperf.report/1", "throughput": {"examples_per_sec": eps},
                "data": {"origin": "user", "summary": summary}, "environment": {}}

    cells = [{"label": "theirs", "set": [], "runs": [(rep("your data: 2 files, 1.3 MB, …", 10.0), "/r/a")],
              "errors": []},
             {"label": "ours", "set": [], "runs": [(rep("prepared by tfbertperf from pydoc_data.topics", 11.0),
                                                    "/r/b")], "errors": []}]
    doc = build_comparison(tmp_path, cells)
    assert [r["data"] for r in doc["rows"]] == [["your data: 2 files, 1.3 MB, …"],
                                               ["prepared by tfbertperf from pydoc_data.topics"]]
    md = comparison_markdown(doc)
    assert "`/r/a` (your data: 2 files, 1.3 MB, …)" in md and "`/r/b` (prepared by tfbertperf from" in md
    from tfbertperf.report.html import comparison_page

    page = comparison_page(doc, str(tmp_path))
    assert "— your data: 2 files, 1.3 MB, …</li>" in page and "— prepared by tfbertperf from pydoc_data.topics" in page


def test_console_and_report_md_print_the_origin_in_one_line(user_set):
    from tfbertperf.data.origin import data_block
    from tfbertperf.report.console import data_line

    block = data_block(_open(str(user_set)))
    line = data_line({"data": block})
    assert line == (f"data: {block['summary']} at {user_set}; no checksums to verify (sizes from the storage "
                    "listing)")
    assert data_line({}) is None


def test_schema_and_help_document_the_new_key():
    from tfbertperf.config.schema import CHOICES

    assert CHOICES[("data", "compression")] == ("auto", "none", "gzip")
    src = (Path(__file__).resolve().parents[1] / "tfbertperf" / "config" / "schema.py").read_text()
    assert "compression: str = \"auto\"" in src and "detect GZIP" in src
    with pytest.raises(UsageError, match="data.compression='zip': expected one of auto, none, gzip"):
        load_config(sets=["data.compression=zip"])
    random.seed(0)


def test_advice_for_our_damaged_folder_never_sends_prepare_among_the_users_files(tmp_path):
    import json

    from tfbertperf.data.manifest import MANIFEST_SCHEMA, REQUIRED_KEYS, load_manifest
    from tfbertperf.storage.local import LocalBackend

    manifest = {k: 1 for k in REQUIRED_KEYS}
    manifest.update(schema=MANIFEST_SCHEMA, task="pretrain", shards=[{"name": "pretrain-00000-of-00001.tfrecord"}])
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UsageError, match=r"listed in manifest.json but missing \(run `tfbertperf prepare --out"):
        load_manifest(str(tmp_path), LocalBackend())
    userdata.write_records(tmp_path / "wiki_00.tfrecord", userdata.pretrain_records(2))
    with pytest.raises(UsageError) as e:
        load_manifest(str(tmp_path), LocalBackend())
    assert "prepare --out" not in str(e.value) and "TFRecords tfbertperf did not write" in str(e.value)


def test_an_empty_length_feature_is_one_line_not_a_traceback(tmp_path):
    rec = userdata.with_feature(userdata.pretrain_records(1)[0], "masked_lm_positions", userdata.int_feature([]))
    userdata.write_records(tmp_path / "wiki_00.tfrecord", [rec])
    with pytest.raises(UsageError, match=r"record 0: 'masked_lm_positions' holds 0 value\(s\)"):
        _open(str(tmp_path))


def test_an_id_past_an_inferred_vocabulary_met_in_training_names_its_record(tmp_path):
    """The embedding lookup's complaint (a real gather on the CPU) becomes the line naming file and record."""
    import tensorflow as tf

    from tfbertperf.data.records import data_errors
    from tfbertperf.storage import open_backend

    good = userdata.pretrain_records(12, seed=8)
    userdata.write_records(tmp_path / "part-r-00000", good)
    m = _open(str(tmp_path))
    bad = list(good)
    ids = [101] + [m["vocab_size"] + 50] + [104] * 62
    bad[9] = userdata.with_feature(bad[9], "input_ids", userdata.int_feature(ids))
    userdata.write_records(tmp_path / "part-r-00000", bad)
    with pytest.raises(UsageError) as e:
        with data_errors(m, open_backend(str(tmp_path)), load_config(data_uri=str(tmp_path))):
            tf.gather(tf.zeros([m["vocab_size"], 2]), tf.constant([m["vocab_size"] + 50]))
    assert str(e.value).startswith(f"shard {tmp_path}/part-r-00000: record 9: input_ids holds id "
                                   f"{m['vocab_size'] + 50} ≥ the vocabulary size {m['vocab_size']} (inferred: ")
    assert str(e.value).endswith("; name the vocabulary the data were made with: --set data.vocab=PATH/vocab.txt")
