"""prepare --corpus (data/prep/: source.py, chunked.py, instances.py): corpus-scale pretraining data in worker processes.
The records are google-research/bert's feature spec byte for byte, the instances are those of the reference
algorithm (pretrain.create_training_instances) per chunk, the masking statistics are unchanged, and the corpus
may be a file, a directory, or an az:// prefix (Azurite)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tf_serialize import tf_serialize as serialize

from tfbertperf.config import load_config

ROOT = Path(__file__).resolve().parents[1]
SETS = ["data.seq_len=64", "data.max_predictions=10", "data.dupe_factor=2", "data.num_shards=3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A directory with two corpus files (~150 KB, the default corpus' documents) and the vocab prepare learns."""
    from tfbertperf.data.corpus import load_default_corpus
    from tfbertperf.data.vocab import learn_vocab, vocab_text

    docs = load_default_corpus().documents
    d = tmp_path_factory.mktemp("corpus")
    (d / "texts").mkdir()
    for n, part in enumerate((docs[:150], docs[150:300])):
        (d / "texts" / f"part{n}.txt").write_text("".join("\n".join(x.sentences) + "\n\n" for x in part))
    (d / "texts" / ".hidden").write_text("not corpus\n")
    vocab = learn_vocab([s for x in docs[:300] for s in x.sentences], 2000)
    (d / "vocab.txt").write_text(vocab_text(vocab))
    return d


def test_records_are_byte_identical_to_tf_serialization():
    from tfbertperf.data.prep.encode import encode_example

    values = {"text_a": "Grüße, 中文 😀".encode(), "text_b": b"", "a_range": [0, 70000], "b_range": [3, 127],
              "masked_lm_weights": [1.0, 0.5, 0.0], "masked_lm_ids": [5, 40000, 2**40], "label_ids": [],
              "next_sentence_labels": [1]}
    assert encode_example(values) == serialize(values)


def test_text_records_in_numpy_equal_record_by_record_encoding():
    """instances.text_records (a chunk at once, numpy) = encode_example per record, byte for byte, also with
    multi-byte UTF-8, empty text_b, 2- and 3-byte varints, and a text of 2**21 bytes (its record-by-record
    fallback)."""
    from types import SimpleNamespace

    from tfbertperf.data.prep.encode import encode_example
    from tfbertperf.data.prep.instances import text_records

    rng = np.random.default_rng(3)
    n, P = 300, 7
    insts = [SimpleNamespace(text_a="Grüße 中文 😀 " * int(rng.integers(3000)), text_b="b" * i if i % 5 else "",
                             a_range=(int(rng.integers(0, 200)), int(rng.integers(0, 70000))), b_range=(i, 2 * i),
                             is_random_next=bool(i % 2)) for i in range(n)]
    ex = {"masked_lm_positions": rng.integers(0, 128, (n, P)), "masked_lm_ids": rng.integers(0, 40000, (n, P)),
          "masked_lm_weights": (rng.random((n, P)) < 0.7).astype(np.float32),
          "next_sentence_labels": np.array([[i % 2] for i in range(n)], np.int64)}
    replace = rng.integers(0, 40000, (n, P))

    def one_by_one(insts):
        cols = {k: v.tolist() for k, v in ex.items()}
        return [encode_example({"text_a": x.text_a.encode(), "text_b": x.text_b.encode(), "a_range": list(x.a_range),
                                "b_range": list(x.b_range), "masked_lm_replace": replace[i].tolist(),
                                **{k: v[i] for k, v in cols.items()}}) for i, x in enumerate(insts)]

    for case in ("numpy", "fallback"):
        if case == "fallback":
            insts[7].text_a = "x" * (1 << 21)
        want = one_by_one(insts)
        buf, lens = text_records(insts, ex, replace)
        assert buf == b"".join(want) and lens.tolist() == [len(r) for r in want]


def test_chunk_job_writes_the_reference_instances_in_the_feature_spec(corpus, tmp_path):
    """A worker's shard holds the instances pretrain.create_training_instances makes of the chunk with the same
    seed (packing, pairing, truncation), masked by the reference's rule (mask_batch: the count per example is
    exactly the reference's, positions uniform over the non-special ones, 80/10/10), serialized byte for byte as
    TensorFlow serializes it; the text shard carries the same masking."""
    import tensorflow as tf

    from tfbertperf.data import pretrain as pre
    from tfbertperf.data.features import feature_spec, text_feature_spec
    from tfbertperf.data.prep.instances import chunk_job
    from tfbertperf.data.prep.source import CorpusFiles, chunks
    from tfbertperf.data.vocab import load_vocab_file, make_tokenizer, special_ids

    vocab = load_vocab_file(str(corpus / "vocab.txt"))
    tok, ids = make_tokenizer(vocab), special_ids(vocab)
    part0 = str(corpus / "texts" / "part0.txt")
    docs, read = next(chunks(CorpusFiles([part0], [part0], "part0.txt", os.path.getsize(part0), False), 60_000))
    assert 60_000 <= read < os.path.getsize(corpus / "texts" / "part0.txt") and all(docs)
    texts = [s for d in docs for s in d]
    rt = tok.tokenize(tf.constant(texts))
    params = dict(seq_len=64, dupe_factor=3, short_seq_prob=0.1, masked_lm_prob=0.15, max_predictions=10,
                  vocab_size=len(vocab), cls_id=ids["[CLS]"], sep_id=ids["[SEP]"], mask_id=ids["[MASK]"], seed=7)
    job = {"index": 0, "flat": rt.flat_values.numpy(), "splits": rt.row_splits.numpy(), "texts": texts,
           "doc_sizes": [len(d) for d in docs], "seq_len": 64, "max_predictions": 10,
           "path": str(tmp_path / "a.part"), "text_path": str(tmp_path / "b.part"), "instances": params}
    res = chunk_job(job)
    ragged = rt.to_list()
    ref_docs, k = [], 0
    for d in docs:
        ref_docs.append([pre.Sentence(ragged[j], texts[j]) for j in range(k, k + len(d)) if ragged[j]])
        k += len(d)
    want = pre.create_training_instances(ref_docs, mask=False, **params)
    raw = [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "a.part"))]
    assert res["examples"] == len(want) == len(raw) > 500 and res["bytes"] == os.path.getsize(tmp_path / "a.part")
    got = {k: v.numpy() for k, v in tf.io.parse_example(raw, feature_spec("pretrain", 64, 10)).items()}
    raw_text = [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "b.part"))]
    txt = {k: v.numpy() for k, v in tf.io.parse_example(raw_text, text_feature_spec("pretrain", 10)).items()}
    kinds = {"mask": 0, "kept": 0, "random": 0}
    for i, x in enumerate(want):
        n, m = len(x.input_ids), int(got["masked_lm_weights"][i].sum())
        assert m == min(10, max(1, int(round(n * 0.15))))  # the reference's count, exactly
        pos = got["masked_lm_positions"][i][:m]
        assert list(pos) == sorted(set(pos)) and not {0, x.a_range[1] - x.a_range[0] + 1, n - 1} & set(pos)
        assert list(got["masked_lm_ids"][i][:m]) == [x.input_ids[p] for p in pos]  # labels = the original ids
        unmasked = np.ones(64, bool)
        unmasked[pos] = False
        assert np.array_equal(got["input_ids"][i][unmasked], np.array(pre.pad(x.input_ids, 64))[unmasked])
        assert list(got["segment_ids"][i][:n]) == x.segment_ids and got["next_sentence_labels"][i][0] == x.is_random_next
        assert list(txt["masked_lm_replace"][i][:m]) == list(got["input_ids"][i][pos])
        assert txt["text_a"][i].decode() == x.text_a and list(txt["a_range"][i]) == list(x.a_range)
        for p, orig in zip(pos, got["masked_lm_ids"][i][:m]):
            w = got["input_ids"][i][p]
            kinds["mask" if w == ids["[MASK]"] else "kept" if w == orig else "random"] += 1
        values = {k: [float(v) for v in got[k][i]] if k == "masked_lm_weights" else [int(v) for v in got[k][i]]
                  for k in got}
        assert raw[i] == serialize(values)
        text_values = {k: [float(v) for v in txt[k][i]] if k == "masked_lm_weights" else
                       txt[k][i] if k.startswith("text_") else [int(v) for v in txt[k][i]] for k in txt}
        assert text_values["text_b"].decode() == x.text_b and raw_text[i] == serialize(text_values)
    total = sum(kinds.values())
    assert total > 5000 and 0.77 < kinds["mask"] / total < 0.83 and 0.07 < kinds["kept"] / total < 0.13


def test_prepare_corpus_directory_in_worker_processes(corpus, tmp_path):
    """The CLI on a directory: shards in the feature spec, statistics as the in-process path's, progress with
    ETA, and the pipeline reads the result."""
    import tensorflow as tf

    from tfbertperf.data.corpus import load_default_corpus
    from tfbertperf.data.features import feature_spec, text_feature_spec
    from tfbertperf.data.vocab import vocab_sha256

    out = tmp_path / "out"
    sets = [x for s in SETS + [f"data.vocab={corpus / 'vocab.txt'}"] for x in ("--set", s)]
    r = subprocess.run([sys.executable, "-m", "tfbertperf.prepare", "--corpus", str(corpus / "texts"), "--out",
                        str(out), "--workers", "2", *sets], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 worker processes" in r.stderr and "ETA" in r.stderr and "examples/s" in r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert len(m["shards"]) == len(m["text_shards"]) >= 3 and m["num_examples"] > 500
    assert m["vocab_sha256"] == vocab_sha256((corpus / "vocab.txt").read_text().splitlines())
    assert m["num_documents"] == len(load_default_corpus().documents[:300]) and m["corpus_bytes"] == sum(
        os.path.getsize(corpus / "texts" / f"part{n}.txt") for n in (0, 1))
    assert not list(out.glob("*chunk*")) and not list(out.glob(".*"))  # chunk files renamed, no temporaries
    from tfbertperf.data.manifest import file_sha256

    for sh in m["shards"] + m["text_shards"]:  # each shard's sha256, taken after its final rename
        assert sh["sha256"] == file_sha256(str(out / sh["name"])), sh["name"]
    s = m["stats"]
    # google-research/bert's statistics: ~15 % of tokens masked (at most max_predictions), half random-next
    assert 0.13 <= s["masked_per_example_mean"] / s["tokens_per_example_mean"] <= 0.17
    assert 0.4 <= s["random_next_fraction"] <= 0.6 and s["tokens_per_example_mean"] > 40
    n = 0
    for sh, tsh in zip(m["shards"], m["text_shards"]):
        ds = tf.data.TFRecordDataset(str(out / sh["name"])).batch(1000)
        for batch in ds.map(lambda x: tf.io.parse_example(x, feature_spec("pretrain", 64, 10))):
            n += len(batch["input_ids"])
            w = batch["masked_lm_weights"].numpy()
            assert np.all(w.sum(1) >= 1) and np.all(batch["input_ids"].numpy()[:, 0] == m["special_ids"]["[CLS]"])
        text = tf.data.TFRecordDataset(str(out / tsh["name"])).batch(1000)
        assert sum(len(b["text_a"]) for b in text.map(lambda x: tf.io.parse_example(
            x, text_feature_spec("pretrain", 10)))) == sh["examples"]
    assert n == m["num_examples"] == sum(sh["examples"] for sh in m["shards"])


def test_prepare_corpus_from_az_prefix(corpus, tmp_path, azure_env):
    from tfbertperf.data import prepare_data
    from tfbertperf.storage.upload import upload_dir

    upload_dir(str(corpus / "texts"), "az://tfbertperf-test/corpus", progress=False)
    cfg = load_config(sets=SETS + [f"data.vocab={corpus / 'vocab.txt'}"])
    m = prepare_data(cfg, str(tmp_path / "az"), progress=False, corpus="az://tfbertperf-test/corpus", workers=1)
    local = prepare_data(cfg, str(tmp_path / "local"), progress=False, corpus=str(corpus / "texts"), workers=1)
    assert m["num_examples"] == local["num_examples"] and m["shards"] == local["shards"]
    assert m["corpus_sha256"] == local["corpus_sha256"]
    for sh in m["shards"]:  # the same bytes: the corpus, chunking and seeds do not depend on where it came from
        assert (tmp_path / "az" / sh["name"]).read_bytes() == (tmp_path / "local" / sh["name"]).read_bytes()


@pytest.mark.parametrize("args, culprit", [
    (["--corpus", "/no/such/corpus.txt"], "--corpus /no/such/corpus.txt: no such file or directory"),
    (["--workers", "2"], "--workers 2: must be >= 1 and goes with --corpus"),
])
def test_bad_corpus_is_one_line_exit_2(args, culprit, tmp_path):
    r = subprocess.run([sys.executable, "-m", "tfbertperf.prepare", "--out", str(tmp_path / "o"), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3"))
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tfbertperf: error:")]
    assert r.returncode == 2 and len(lines) == 1 and culprit in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
