"""`prepare_data`: corpus → WordPiece vocab → examples → TFRecord shards + vocab.txt + manifest.json.

Output directory layout (local, or uploaded as is to gs:// / az://):
    vocab.txt                                    one token per line, line i = id i ([PAD] = 0)
    <task>-00000-of-00008.tfrecord …             pre-tokenized examples (google-research/bert feature spec)
    <task>-text-00000-of-00008.tfrecord …        the same examples as raw text (for pipeline.tokenize=inline)
    manifest.json                                what was written and how (written last: its presence means
                                                 the directory is complete)
Every file is written under a temporary name and renamed.  For the same config and seed every byte of every
file is identical (the manifest holds no timestamps), which also makes re-uploads skippable.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

from tfbertperf.data import classify as cls_mod
from tfbertperf.data import pretrain as pre_mod
from tfbertperf.data.corpus import DEFAULT_CORPUS, load_corpus, load_default_corpus, source_sha256
from tfbertperf.data.features import feature_spec_summary, serialize
from tfbertperf.data.manifest import MANIFEST_FILE, MANIFEST_SCHEMA, VOCAB_FILE, file_sha256, shard_name
from tfbertperf.data.vocab import (
    learn_vocab,
    load_vocab_file,
    make_tokenizer,
    special_ids,
    tokenize_sentences,
    vocab_sha256,
    vocab_text,
)
from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import split_uri

TOKENIZER_DESCRIPTION = "tensorflow_text.FastBertTokenizer(lower_case_nfd_strip_accents=True, suffix='##')"


class _Progress:
    """'prepare: …' lines on stderr with elapsed seconds (or silence)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = bool(enabled)
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if self.enabled:
            sys.stderr.write(f"prepare: [{time.perf_counter() - self.t0:5.1f}s] {msg}\n")
            sys.stderr.flush()


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _write_shards(out_dir: str, names: list[str], records: list[bytes]) -> list[dict]:
    """Contiguous split of `records` over len(names) TFRecord files; [{name, examples, bytes}]."""
    import tensorflow as tf

    n = len(names)
    shards = []
    for i, name in enumerate(names):
        lo, hi = len(records) * i // n, len(records) * (i + 1) // n
        path = os.path.join(out_dir, name)
        tmp = f"{path}.tmp-{os.getpid()}"
        with tf.io.TFRecordWriter(tmp) as w:
            for r in records[lo:hi]:
                w.write(r)
        os.replace(tmp, path)
        shards.append({"name": name, "examples": hi - lo, "bytes": os.path.getsize(path),
                       "sha256": file_sha256(path)})
    return shards


def _vocab(cfg, sentences, say) -> tuple[list[str], str]:
    """data.vocab, or a vocab learned from `sentences` (a list, or a function returning one)."""
    if cfg.data.vocab:
        tokens = load_vocab_file(cfg.data.vocab)
        say(f"vocab: {len(tokens)} tokens from {cfg.data.vocab}")
        return tokens, os.path.basename(cfg.data.vocab)
    t = time.perf_counter()
    sentences = sentences() if callable(sentences) else sentences
    tokens = learn_vocab(sentences, cfg.data.vocab_size)
    say(f"vocab: learned {len(tokens)} WordPiece tokens (target {cfg.data.vocab_size}) in {time.perf_counter() - t:.1f}s")
    return tokens, "learned"


def _pretrain_records(cfg, say) -> tuple[dict, list[bytes], list[bytes], list[str]]:
    d = cfg.data
    corpus = load_corpus(d.corpus)
    say(f"corpus {corpus.description}: {len(corpus.documents)} documents, {corpus.num_sentences} sentences")
    vocab, vocab_source = _vocab(cfg, corpus.all_sentences(), say)
    ids = special_ids(vocab)
    tok = make_tokenizer(vocab)
    flat = tokenize_sentences(tok, corpus.all_sentences())
    docs, k = [], 0
    for doc in corpus.documents:
        sents = []
        for text in doc.sentences:
            if flat[k]:  # the reference skips lines that tokenize to nothing
                sents.append(pre_mod.Sentence(flat[k], text))
            k += 1
        docs.append(sents)
    num_tokens = sum(len(x) for x in flat)
    say(f"tokenized: {num_tokens} tokens")
    if num_tokens == 0:
        raise UsageError(f"corpus {corpus.description}: no tokens after tokenization")
    instances = pre_mod.create_training_instances(
        docs,
        seq_len=d.seq_len,
        dupe_factor=d.dupe_factor,
        short_seq_prob=d.short_seq_prob,
        masked_lm_prob=d.masked_lm_prob,
        max_predictions=d.max_predictions,
        vocab_size=len(vocab),
        cls_id=ids["[CLS]"],
        sep_id=ids["[SEP]"],
        mask_id=ids["[MASK]"],
        seed=d.seed,
        progress=lambda p, n: say(f"examples: dupe pass {p}/{n}"),
    )
    if not instances:
        raise UsageError(f"corpus {corpus.description}: too little text to make a single example")
    records = [serialize(pre_mod.instance_features(x, d.seq_len, d.max_predictions)) for x in instances]
    text_records = [serialize(pre_mod.instance_text_features(x, d.max_predictions)) for x in instances]
    n_real = sum(len(x.input_ids) for x in instances)
    n_masked = sum(len(x.masked_lm_positions) for x in instances)
    info = {
        "corpus": corpus.description,
        "corpus_sha256": corpus.sha256,
        "num_documents": len(corpus.documents),
        "num_sentences": corpus.num_sentences,
        "num_corpus_tokens": num_tokens,
        "vocab_source": vocab_source,
        "stats": {
            "tokens_per_example_mean": round(n_real / len(instances), 2),
            "masked_per_example_mean": round(n_masked / len(instances), 2),
            "random_next_fraction": round(sum(x.is_random_next for x in instances) / len(instances), 4),
        },
    }
    return info, records, text_records, vocab


def _classify_records(cfg, say) -> tuple[dict, list[bytes], list[bytes], list[str]]:
    d = cfg.data
    if d.corpus.strip():
        rows, labels = cls_mod.read_labeled_files(d.corpus)
        source, corpus_desc = "files", d.corpus
        import hashlib

        h = hashlib.sha256()
        for r in rows:
            h.update(f"{r.text_a}\t{r.text_b}\t{r.label}\n".encode())
        corpus_sha = h.hexdigest()
        say(f"classify files {d.corpus}: {len(rows)} rows, {len(labels)} labels")
    else:
        corpus = load_default_corpus()
        rows, labels = cls_mod.builtin_pairs(corpus, d.dupe_factor, d.seed)
        source, corpus_desc, corpus_sha = cls_mod.BUILTIN_TASK, DEFAULT_CORPUS, corpus.sha256
        say(f"built-in pair task {cls_mod.BUILTIN_TASK} from {DEFAULT_CORPUS}: {len(rows)} pairs")
    has_b = any(r.text_b for r in rows)
    # Vocab from the distinct texts (the pair task repeats sentences; counts barely matter to WordPiece).
    texts = sorted({t for r in rows for t in (r.text_a, r.text_b) if t})
    vocab, vocab_source = _vocab(cfg, texts, say)
    ids = special_ids(vocab)
    tok = make_tokenizer(vocab)
    tokenized = dict(zip(texts, tokenize_sentences(tok, texts)))
    records, text_records = [], []
    for r in rows:
        feats, a_rng, b_rng = cls_mod.classify_features(
            tokenized[r.text_a], tokenized.get(r.text_b, []), r.label, d.seq_len, ids["[CLS]"], ids["[SEP]"], has_b
        )
        records.append(serialize(feats))
        text_records.append(
            serialize(
                {
                    "text_a": r.text_a.encode("utf-8"),
                    "text_b": r.text_b.encode("utf-8"),
                    "a_range": list(a_rng),
                    "b_range": list(b_rng),
                    "label_ids": [r.label],
                }
            )
        )
    info = {
        "corpus": corpus_desc,
        "corpus_sha256": corpus_sha,
        "classify_source": source,
        "num_labels": len(labels),
        "labels": labels,
        "pair": has_b,
        "vocab_source": vocab_source,
        "stats": {"label_counts": [sum(1 for r in rows if r.label == i) for i in range(len(labels))]},
    }
    return info, records, text_records, vocab


def manifest_common(cfg, vocab: list[str], num_examples: int, record_bytes_mean: float,
                    text_record_bytes_mean: float, shards: list[dict], text_shards: list[dict]) -> dict:
    """The manifest's keys every preparation path writes (task, sizes, vocab, tokenizer, knobs, shards)."""
    d, task = cfg.data, cfg.model.task
    return {
        "schema": MANIFEST_SCHEMA,
        "task": task,
        "seq_len": d.seq_len,
        "max_predictions": d.max_predictions,
        "vocab_size": len(vocab),
        "vocab_size_target": d.vocab_size,
        "vocab_sha256": vocab_sha256(vocab),
        "vocab_file": VOCAB_FILE,
        "special_ids": special_ids(vocab),
        "tokenizer": TOKENIZER_DESCRIPTION,
        "seed": d.seed,
        "dupe_factor": d.dupe_factor,
        "masked_lm_prob": d.masked_lm_prob,
        "short_seq_prob": d.short_seq_prob,
        "num_examples": num_examples,
        "record_bytes_mean": round(record_bytes_mean, 1),
        "text_record_bytes_mean": round(text_record_bytes_mean, 1),
        "features": feature_spec_summary(task, d.seq_len, d.max_predictions),
        "shards": shards,
        "text_shards": text_shards,
    }


def prepare_local(cfg, out_dir: str, progress=True) -> dict:
    """Write the data set for `cfg` into local directory `out_dir`; returns the manifest."""
    say = _Progress(progress)
    d = cfg.data
    task = cfg.model.task
    manifest_path = os.path.join(out_dir, MANIFEST_FILE)
    t0 = time.perf_counter()
    if task == "pretrain":
        info, records, text_records, vocab = _pretrain_records(cfg, say)
    else:
        info, records, text_records, vocab = _classify_records(cfg, say)
    if len(records) < d.num_shards:
        raise UsageError(
            f"--set data.num_shards={d.num_shards}: only {len(records)} examples; use fewer shards or more data"
        )
    # Bad input has been caught by now; an old data set stays intact until here.  From here until the new
    # manifest lands the directory is incomplete (no manifest.json), so no reader mixes old and new files.
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(manifest_path):
        os.remove(manifest_path)
    _write_atomic(os.path.join(out_dir, VOCAB_FILE), vocab_text(vocab).encode("utf-8"))
    names = [shard_name(task, i, d.num_shards) for i in range(d.num_shards)]
    text_names = [shard_name(task, i, d.num_shards, text=True) for i in range(d.num_shards)]
    shards = _write_shards(out_dir, names, records)
    text_shards = _write_shards(out_dir, text_names, text_records)
    manifest = {**manifest_common(cfg, vocab, len(records), sum(len(r) for r in records) / len(records),
                                  sum(len(r) for r in text_records) / len(text_records), shards, text_shards),
                **info,
                "source_sha256": source_sha256(d.corpus, d.vocab)}  # what job.ensure_data checks a cached set against
    _write_atomic(manifest_path, (json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode("utf-8"))
    total_mb = sum(s["bytes"] for s in shards + text_shards) / 1e6
    say(
        f"wrote {len(records)} {task} examples in {d.num_shards} shards (+ raw-text shards, {total_mb:.1f} MB) "
        f"to {out_dir} in {time.perf_counter() - t0:.1f}s"
    )
    return manifest


def prepare_data(cfg, out_uri: str | None = None, progress=True, corpus: str | None = None,
                 workers: int | None = None, text_shards: bool = True) -> dict:
    """Build vocab + TFRecord shards + manifest.json for `cfg` (task = cfg.model.task; knobs cfg.data.*).

    Args:
      cfg: RunConfig.
      out_uri: a local path / file:// URI, or gs://… / az://… (written to a local temp dir, then uploaded with
        `tfbertperf.storage.upload.upload_dir`).  None = cfg.resolved_data_uri().
      progress: progress lines on stderr.
      corpus: `prepare --corpus FILE|DIR|gs://…|az://…`: corpus-scale pretraining data, streamed and made in
        `workers` processes (data/corpusprep.py), with raw-text shards unless text_shards=False; None =
        data.corpus / the default corpus, in this process.
    Returns:
      The manifest dict (also written as manifest.json, last).
    Raises:
      UsageError naming the culprit: missing/empty corpus file, bad vocab, bad TSV row, too few examples.
    """
    out_uri = out_uri or cfg.resolved_data_uri()
    scheme, _, path = split_uri(out_uri)

    def build(local_dir: str) -> dict:
        if corpus:
            from tfbertperf.data.corpusprep import prepare_corpus

            return prepare_corpus(cfg, corpus, local_dir, progress, workers, text_shards)
        return prepare_local(cfg, local_dir, progress)

    if scheme == "file":
        if os.path.exists(path) and not os.path.isdir(path):
            raise UsageError(f"--out {path}: exists and is not a directory")
        return build(path)
    if scheme not in ("gs", "az"):
        raise UsageError(f"--out {redact_text(out_uri)}: unknown URI scheme {scheme!r} (use a path, gs:// or az://)")
    from tfbertperf.storage.upload import upload_dir  # the storage stage's uploader (parallel, idempotent)

    tmp = tempfile.mkdtemp(prefix="tfbertperf-prepare-")
    try:
        manifest = build(tmp)
        upload_dir(tmp, out_uri, cfg.data, progress=progress)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest

