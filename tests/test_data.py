"""Data preparation: google-research/bert pretraining examples, vocab/tokenizer, determinism, classify data,
manifest checks and the errors a user sees."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfbertperf.config import load_config
from tfbertperf.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["data.dupe_factor=1", "data.num_shards=4", "data.vocab_size=2000"]
SEQ_LEN, MAX_PRED = 128, 20
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4

# The feature spec of google-research/bert run_pretraining.py, written out here on purpose (not imported from
# the package): the shards must parse with the reference's own spec.
GOOGLE_SPEC = {
    "input_ids": tf.io.FixedLenFeature([SEQ_LEN], tf.int64),
    "input_mask": tf.io.FixedLenFeature([SEQ_LEN], tf.int64),
    "segment_ids": tf.io.FixedLenFeature([SEQ_LEN], tf.int64),
    "masked_lm_positions": tf.io.FixedLenFeature([MAX_PRED], tf.int64),
    "masked_lm_ids": tf.io.FixedLenFeature([MAX_PRED], tf.int64),
    "masked_lm_weights": tf.io.FixedLenFeature([MAX_PRED], tf.float32),
    "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
}


def _prepare(out, sets, progress=False):
    from tfbertperf.data import prepare_data

    return prepare_data(load_config(sets=sets), str(out), progress=progress)


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("pretrain") / "data"
    _prepare(d, SMALL)
    return d


def _read_all(d: Path, manifest: dict, key="shards", spec=GOOGLE_SPEC) -> dict:
    files = [str(d / s["name"]) for s in manifest[key]]
    ds = tf.data.TFRecordDataset(files).batch(4096).map(lambda x: tf.io.parse_example(x, spec))
    parts = list(ds.as_numpy_iterator())
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


@pytest.fixture(scope="module")
def examples(pretrain_dir):
    m = json.loads((pretrain_dir / "manifest.json").read_text())
    return _read_all(pretrain_dir, m)


def test_directory_has_vocab_shards_and_manifest_with_agreed_keys(pretrain_dir):
    m = json.loads((pretrain_dir / "manifest.json").read_text())
    for k in ("schema", "task", "seq_len", "max_predictions", "vocab_size", "vocab_sha256", "vocab_file", "seed",
              "dupe_factor", "num_examples", "record_bytes_mean", "shards"):
        assert k in m, k
    assert m["schema"] == "tfbertperf.manifest/2" and m["task"] == "pretrain" and m["vocab_file"] == "vocab.txt"
    assert [s["name"] for s in m["shards"]] == [f"pretrain-{i:05d}-of-00004.tfrecord" for i in range(4)]
    for s in m["shards"] + m["text_shards"]:
        assert (pretrain_dir / s["name"]).stat().st_size == s["bytes"]
    assert sum(s["examples"] for s in m["shards"]) == m["num_examples"] > 500
    vocab = (pretrain_dir / "vocab.txt").read_text().splitlines()
    assert len(vocab) == m["vocab_size"]
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert not [p for p in os.listdir(pretrain_dir) if ".tmp" in p], "temporary files left behind"


def test_shards_parse_with_google_feature_spec(examples):
    assert examples["input_ids"].shape[1:] == (SEQ_LEN,) and examples["input_ids"].dtype == np.int64
    assert examples["masked_lm_positions"].shape[1:] == (MAX_PRED,)
    assert examples["masked_lm_weights"].dtype == np.float32
    assert examples["next_sentence_labels"].shape[1:] == (1,)


def test_cls_sep_segments_padding_and_mask_are_consistent(examples):
    ids, mask, seg = examples["input_ids"], examples["input_mask"], examples["segment_ids"]
    pos, w = examples["masked_lm_positions"], examples["masked_lm_weights"]
    for i in range(len(ids)):
        n = int(mask[i].sum())
        assert np.all(mask[i, :n] == 1) and np.all(mask[i, n:] == 0), "mask must be 1…1 0…0"
        assert np.all(ids[i, n:] == PAD) and np.all(seg[i, n:] == 0), "padding must be zeros"
        first_b = int(np.argmax(seg[i, :n]))
        assert first_b >= 2 and np.all(seg[i, :first_b] == 0) and np.all(seg[i, first_b:n] == 1)
        masked = set(pos[i, w[i] > 0].tolist())
        assert ids[i, 0] == CLS and ids[i, first_b - 1] == SEP and ids[i, n - 1] == SEP
        assert not masked & {0, first_b - 1, n - 1}, "[CLS]/[SEP] must never be masked"
        unmasked_ids = [ids[i, j] for j in range(n) if j not in masked]
        assert unmasked_ids.count(SEP) == 2 and unmasked_ids.count(CLS) == 1


def test_masking_statistics_match_google_recipe(examples):
    ids, mask = examples["input_ids"], examples["input_mask"]
    pos, lab, w = examples["masked_lm_positions"], examples["masked_lm_ids"], examples["masked_lm_weights"]
    n_tokens = mask.sum(axis=1)
    m = (w > 0).sum(axis=1)
    # Reference: num_to_predict = min(max_predictions, max(1, round(len(tokens) * 0.15))), tokens incl. specials
    expect = np.minimum(MAX_PRED, np.maximum(1, np.round(n_tokens * 0.15).astype(int)))
    assert np.array_equal(m, expect)
    assert 0.13 < m.sum() / (n_tokens - 3).sum() < 0.17, "≈15 % of real tokens masked"
    for i in range(len(ids)):
        k = m[i]
        assert np.all(w[i, :k] == 1.0) and np.all(w[i, k:] == 0.0)
        assert np.all(pos[i, k:] == 0) and np.all(lab[i, k:] == 0)
        assert np.all(np.diff(pos[i, :k]) > 0) and pos[i, k - 1] < n_tokens[i]
    sel = w > 0
    written = np.take_along_axis(ids, pos, axis=1)[sel]
    original = lab[sel]
    frac_mask = np.mean(written == MASK)
    frac_keep = np.mean(written == original)
    frac_random = 1 - frac_mask - frac_keep
    assert abs(frac_mask - 0.8) < 0.02 and abs(frac_keep - 0.1) < 0.02 and abs(frac_random - 0.1) < 0.02, (
        frac_mask, frac_keep, frac_random)
    assert not np.isin(original, [PAD, CLS, SEP, MASK]).any(), "labels are real tokens"


def test_next_sentence_labels_are_about_half_random(examples):
    # Chunks of one sentence are always paired with a random next (as in the reference), hence a little > 0.5.
    frac = examples["next_sentence_labels"].mean()
    assert 0.45 < frac < 0.62, frac


def test_raw_text_records_hold_the_example_text(pretrain_dir):
    """The raw-text shard record i holds the text whose tokens are example i's segment A."""
    from tfbertperf.data.features import text_feature_spec
    from tfbertperf.data.vocab import make_tokenizer

    m = json.loads((pretrain_dir / "manifest.json").read_text())
    text = _read_all(pretrain_dir, m, "text_shards", text_feature_spec("pretrain", MAX_PRED))
    ex = _read_all(pretrain_dir, m)
    vocab = (pretrain_dir / "vocab.txt").read_text().splitlines()
    tok = make_tokenizer(vocab)
    for i in range(0, len(ex["input_ids"]), 97):
        lo, hi = text["a_range"][i]
        a = tok.tokenize([text["text_a"][i]]).to_list()[0][lo:hi]
        got = ex["input_ids"][i, 1:1 + len(a)]
        labels = dict(zip(ex["masked_lm_positions"][i], ex["masked_lm_ids"][i]))
        restored = [labels.get(j + 1, t) for j, t in enumerate(got)]  # undo masking with the labels
        assert restored == a


def test_tokenizer_maps_common_words_to_single_ids(pretrain_dir):
    from tfbertperf.data.vocab import make_tokenizer

    vocab = (pretrain_dir / "vocab.txt").read_text().splitlines()
    tok = make_tokenizer(vocab)
    ids = tok.tokenize(["The Function returns a VALUE."]).to_list()[0]
    assert [vocab[i] for i in ids] == ["the", "function", "returns", "a", "value", "."]
    assert UNK not in ids and len(set(ids)) == 6
    # A word the corpus never had is split into wordpieces, not lost.
    pieces = [vocab[i] for i in tok.tokenize(["functionality"]).to_list()[0]]
    assert "".join(p.removeprefix("##") for p in pieces) == "functionality"


def test_same_seed_gives_identical_bytes_and_other_seed_differs(pretrain_dir, tmp_path):
    m = json.loads((pretrain_dir / "manifest.json").read_text())
    again = _prepare(tmp_path / "again", SMALL)
    assert again == m
    for name in ["vocab.txt", "manifest.json"] + [s["name"] for s in m["shards"] + m["text_shards"]]:
        assert (tmp_path / "again" / name).read_bytes() == (pretrain_dir / name).read_bytes(), name
    # Another seed (same vocab, given as a file: learning is seed-independent) → different examples.
    other = _prepare(tmp_path / "other", SMALL + ["data.seed=7", f"data.vocab={pretrain_dir / 'vocab.txt'}"])
    assert other["vocab_sha256"] == m["vocab_sha256"]
    name = m["shards"][0]["name"]
    assert (tmp_path / "other" / name).read_bytes() != (pretrain_dir / name).read_bytes()


def test_user_corpus_documents_and_dupe_factor(tmp_path):
    corpus = tmp_path / "corpus.txt"
    doc = "\n".join(f"Sentence number {i} talks about storage latency and the input pipeline." for i in range(30))
    corpus.write_text(doc + "\n\n" + doc.replace("storage", "compute") + "\n\n\n" + doc.replace("input", "model"))
    sets = [f"data.corpus={corpus}", "data.num_shards=2", "data.vocab_size=200", "data.seq_len=32",
            "data.max_predictions=5"]
    m1 = _prepare(tmp_path / "d1", sets + ["data.dupe_factor=1"])
    m3 = _prepare(tmp_path / "d3", sets + ["data.dupe_factor=3"])
    assert m1["num_documents"] == 3 and m1["num_sentences"] == 90
    assert m1["corpus"] == "corpus.txt" and m1["seq_len"] == 32
    assert 2.5 < m3["num_examples"] / m1["num_examples"] < 3.5


def test_empty_or_missing_corpus_is_a_usage_error_naming_the_file(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n")
    with pytest.raises(UsageError, match="empty.txt: empty"):
        _prepare(tmp_path / "x", [f"data.corpus={empty}"])
    with pytest.raises(UsageError, match="missing.txt: no such file"):
        _prepare(tmp_path / "x", [f"data.corpus={tmp_path / 'missing.txt'}"])


def test_bad_user_vocab_is_a_usage_error(tmp_path):
    v = tmp_path / "vocab.txt"
    v.write_text("[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
    with pytest.raises(UsageError, match=r"\[PAD\] must be id 0"):
        _prepare(tmp_path / "x", [f"data.vocab={v}"])


def test_prepare_cli_empty_corpus_exits_2_with_one_line(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    r = subprocess.run([sys.executable, "-m", "tfbertperf.prepare", "--out", str(tmp_path / "o"),
                        "--set", f"data.corpus={empty}"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("tfbertperf:")]
    assert err == [f"tfbertperf: error: corpus file {empty}: empty (expected one sentence per line, blank line "
                   "between documents)"]
    assert "Traceback" not in r.stderr


# ---- manifest ---------------------------------------------------------------------------------------------

def _backend():
    from tfbertperf.storage import open_backend

    return open_backend("")


def test_load_manifest_reads_it_through_the_backend(pretrain_dir):
    from tfbertperf.data.manifest import load_manifest

    m = load_manifest(str(pretrain_dir), _backend())
    assert m["uri"] == str(pretrain_dir) and m["num_examples"] > 0


def test_load_manifest_names_what_is_missing_or_broken(pretrain_dir, tmp_path):
    import shutil

    from tfbertperf.data.manifest import load_manifest

    with pytest.raises(UsageError, match=r"data dir .*nowhere: no such directory \(run `tfbertperf prepare"):
        load_manifest(str(tmp_path / "nowhere"), _backend())
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="empty: no manifest.json"):
        load_manifest(str(tmp_path / "empty"), _backend())
    broken = tmp_path / "broken"
    shutil.copytree(pretrain_dir, broken)
    (broken / "manifest.json").write_text("{not json")
    with pytest.raises(UsageError, match=r"manifest.json: not valid JSON \(line 1"):
        load_manifest(str(broken), _backend())
    shutil.copy(pretrain_dir / "manifest.json", broken / "manifest.json")
    (broken / "pretrain-00002-of-00004.tfrecord").unlink()
    with pytest.raises(UsageError, match="shard .*pretrain-00002-of-00004.tfrecord: listed in manifest.json but missing"):
        load_manifest(str(broken), _backend())
    shutil.copy(pretrain_dir / "pretrain-00002-of-00004.tfrecord", broken)
    with open(broken / "pretrain-00001-of-00004.tfrecord", "r+b") as f:
        f.truncate(100)
    with pytest.raises(UsageError, match="pretrain-00001-of-00004.tfrecord: 100 bytes"):
        load_manifest(str(broken), _backend())


# ---- classification data ----------------------------------------------------------------------------------

def test_user_tsv_and_csv_become_classify_records(tmp_path):
    from tfbertperf.data.features import feature_spec

    tsv = tmp_path / "train.tsv"
    tsv.write_text("text\ttext_b\tlabel\n" + "".join(
        f"the pipeline reads shard {i}\tthe model trains step {i}\t{'slow' if i % 3 else 'fast'}\n" for i in range(40)))
    m = _prepare(tmp_path / "c", ["model.task=classify", f"data.corpus={tsv}", "data.num_shards=2",
                                  "data.vocab_size=200", "data.seq_len=16", "data.max_predictions=4"])
    assert m["task"] == "classify" and m["num_labels"] == 2 and m["labels"] == ["fast", "slow"] and m["pair"]
    assert m["num_examples"] == 40 and m["stats"]["label_counts"] == [14, 26]
    ex = _read_all(tmp_path / "c", m, spec=feature_spec("classify", 16, 20))
    assert set(ex) == {"input_ids", "input_mask", "segment_ids", "label_ids"}
    assert ex["label_ids"].shape == (40,) and set(ex["label_ids"].tolist()) == {0, 1}
    assert np.all(ex["input_ids"][:, 0] == CLS) and np.all(ex["segment_ids"].max(axis=1) == 1)
    n = ex["input_mask"].sum(axis=1)
    assert np.all(ex["input_ids"][np.arange(40), n - 1] == SEP)

    csv = tmp_path / "single.csv"
    csv.write_text("".join(f'"text {i}, with a comma",{i % 3}\n' for i in range(30)))
    m2 = _prepare(tmp_path / "s", ["model.task=classify", f"data.corpus={csv}", "data.num_shards=1",
                                   "data.vocab_size=100", "data.seq_len=16", "data.max_predictions=4"])
    assert m2["labels"] == ["0", "1", "2"] and not m2["pair"]
    ex2 = _read_all(tmp_path / "s", m2, spec=feature_spec("classify", 16, 20))
    assert np.all(ex2["segment_ids"] == 0), "single-segment examples have no segment B"


def test_bad_classify_rows_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("good row\t1\nanother\t0\nno label here\n")
    with pytest.raises(UsageError, match=r"bad.tsv:3: expected text,label or text,text_b,label"):
        _prepare(tmp_path / "x", ["model.task=classify", f"data.corpus={bad}"])
    one = tmp_path / "one.tsv"
    one.write_text("a\tx\nb\tx\n")
    with pytest.raises(UsageError, match="only one label"):
        _prepare(tmp_path / "x", ["model.task=classify", f"data.corpus={one}"])


def test_builtin_pair_task_is_balanced_and_pairs_topics_correctly():
    from tfbertperf.data.classify import builtin_pairs
    from tfbertperf.data.corpus import load_default_corpus

    corpus = load_default_corpus()
    group_of = {}
    for d in corpus.documents:
        for s in d.sentences:
            group_of.setdefault(s, set()).add(d.group)
    rows, labels = builtin_pairs(corpus, dupe_factor=1, seed=1)
    assert labels == ["different_topic", "same_topic"] and len(rows) == corpus.num_sentences
    assert 0.45 < np.mean([r.label for r in rows]) < 0.55
    for r in rows[:2000]:
        same = bool(group_of[r.text_a] & group_of[r.text_b])
        # a sentence repeated in two topics may make a "different" pair look same: allow only that
        assert same if r.label == 1 else (not same or len(group_of[r.text_b]) > 1 or len(group_of[r.text_a]) > 1)


@pytest.mark.parametrize("target", [8000, 300])
def test_vocab_learning_equals_tensorflow_text_bert_vocab_from_dataset(target):
    """Our shortcut (stop at the lowest threshold when the corpus cannot reach the target) must not change
    the vocabulary tensorflow-text's own entry point learns."""
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bvd

    from tfbertperf.data.corpus import load_default_corpus
    from tfbertperf.data.vocab import RESERVED_TOKENS, learn_vocab

    sentences = load_default_corpus().all_sentences()[:1500]
    ref = bvd.bert_vocab_from_dataset(
        tf.data.Dataset.from_tensor_slices(sentences).batch(1024), vocab_size=target,
        reserved_tokens=list(RESERVED_TOKENS), bert_tokenizer_params=dict(lower_case=True),
        learn_params=dict(lower_thresh=1))
    assert learn_vocab(sentences, target) == list(ref)


def test_a_learned_vocab_is_kept_and_reused_for_the_same_text_and_size_only(tmp_path, monkeypatch):
    """choose_vocab keeps what it learned under the cache home, keyed by the text, the size and the learner; the
    same text and size load it (the same tokens, no learning), another size or text learns anew, and a damaged
    file is learned again and rewritten."""
    import tfbertperf.data.vocab as vocab
    from tfbertperf.data.corpus import load_default_corpus

    monkeypatch.setenv("TFBERTPERF_CACHE_HOME", str(tmp_path / "home"))
    sentences = load_default_corpus().all_sentences()[:1500]
    learned = []
    real = vocab.learn_vocab
    monkeypatch.setattr(vocab, "learn_vocab", lambda s, n: learned.append(n) or real(s, n))
    said: list[str] = []
    first, _ = vocab.choose_vocab(load_config(sets=["data.vocab_size=300"]), sentences, said.append)
    again, source = vocab.choose_vocab(load_config(sets=["data.vocab_size=300"]), lambda: sentences, said.append)
    assert learned == [300] and again == first == real(sentences, 300) and source == "learned"
    path = vocab.learned_vocab_cache_path(sentences, 300)
    assert path.startswith(str(tmp_path / "home")) and "learned from the same text before" in said[1]
    vocab.choose_vocab(load_config(sets=["data.vocab_size=250"]), sentences, said.append)
    vocab.choose_vocab(load_config(sets=["data.vocab_size=300"]), sentences[:1400], said.append)
    assert learned == [300, 250, 300]
    with open(path, "w") as f:
        f.write("[PAD]\n[PAD]\n")  # damaged: a repeated token
    assert vocab.choose_vocab(load_config(sets=["data.vocab_size=300"]), sentences, said.append)[0] == first
    assert learned == [300, 250, 300, 300] and vocab._cached_vocab(path) == first


def test_failed_prepare_leaves_an_existing_data_dir_usable(pretrain_dir, tmp_path):
    import shutil

    from tfbertperf.data.manifest import load_manifest

    d = tmp_path / "data"
    shutil.copytree(pretrain_dir, d)
    with pytest.raises(UsageError):
        _prepare(d, [f"data.corpus={tmp_path / 'missing.txt'}"])
    assert load_manifest(str(d), _backend())["num_examples"] > 0
    with pytest.raises(UsageError):
        _prepare(tmp_path / "never", [f"data.corpus={tmp_path / 'missing.txt'}"])
    assert not (tmp_path / "never").exists(), "bad input must not leave an empty data dir behind"


def test_an_edited_corpus_is_prepared_again_with_a_line_saying_why(tmp_path, monkeypatch, capsys):
    """Issue 17 finding 1: the default data dir is keyed by the corpus *path*; after the file's contents change
    (2 labels → 3) the next run must re-prepare (and say why), not train on the old examples."""
    from tfbertperf.job import ensure_data
    from tfbertperf.storage import open_backend

    monkeypatch.setenv("TFBERTPERF_DATA_HOME", str(tmp_path / "home"))
    csv = tmp_path / "reviews.csv"
    csv.write_text("".join(f"review number {i} of the product,{'pos' if i % 2 else 'neg'}\n" for i in range(24)))
    cfg = load_config(sets=["model.task=classify", f"data.corpus={csv}", "data.num_shards=2",
                            "data.vocab_size=100", "data.seq_len=16", "data.max_predictions=4"])

    def ensure():
        return ensure_data(cfg, open_backend(cfg.resolved_data_uri(), cfg.data), progress=False)[1]

    assert ensure()["labels"] == ["neg", "pos"]
    assert "first use" in capsys.readouterr().err
    assert ensure()["labels"] == ["neg", "pos"]
    assert "preparing" not in capsys.readouterr().err, "an unchanged corpus is reused"
    csv.write_text("".join(f"review number {i} of the product,{'abc'[i % 3]}\n" for i in range(24)))
    m = ensure()
    assert m["labels"] == ["a", "b", "c"] and m["num_labels"] == 3
    err = capsys.readouterr().err
    assert "preparing" in err and "changed since it was prepared" in err and "reviews.csv" in err
