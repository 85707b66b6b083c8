"""`prepare_data`: the one entry of data-set preparation — corpus → WordPiece vocab → examples → TFRecord shards
+ vocab.txt + manifest.json, into a local directory, gs:// or az:// (output.py).

Pretraining data comes from any corpus through the same path (source.py reads it, chunked.py makes it), whether
the corpus was named by `data.corpus` (a run's data set, job.ensure_data), by `prepare --corpus`, or left empty
(the bundled text): the same corpus and knobs give the same bytes either way.  Classification data comes from a
user TSV/CSV or the built-in pair task (labeled.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from tfbertperf.errors import UsageError


def prepare_pretrain(cfg, spec: str, out_dir: str, progress: bool = True, workers: int | None = None,
                     text_shards: bool = True, label: str = "corpus file") -> dict:
    """Pretraining shards + vocab.txt + manifest.json for the corpus `spec` ("" = the bundled text) into local
    `out_dir`; returns the manifest.  Knobs: cfg.data (vocab or vocab_size, seq_len, max_predictions, dupe_factor,
    masked_lm_prob, short_seq_prob, seed, num_shards = the most shards: fewer when a chunk reaches CHUNK_BYTES or
    documents are few).  workers: None = chunked.default_workers."""
    import tfbertperf.data.prep.chunked as chunked
    import tfbertperf.data.prep.output as output
    from tfbertperf.data.prep.source import open_corpus, sample_sentences, with_vocab
    from tfbertperf.data.vocab import VOCAB_SAMPLE_BYTES, choose_vocab

    d, say = cfg.data, output.Progress(progress)
    t0 = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="tfbertperf-corpus-")
    try:
        corpus = open_corpus(spec, d, tmp, say, label)
        asked_workers, workers = workers, max(1, workers or chunked.default_workers(corpus.total_bytes))
        where = "in this process" if workers == 1 else f"{workers} worker processes"
        say(f"corpus {corpus.description}: {len(corpus.paths)} file(s), {corpus.total_bytes / 1e6:.1f} MB; {where}")
        vocab, vocab_source = choose_vocab(cfg, lambda: sample_sentences(corpus, VOCAB_SAMPLE_BYTES), say)
        output.start_dir(out_dir)
        results, counts = chunked.make_pretrain(cfg, corpus, vocab, out_dir, say, workers, text_shards,
                                                helper=asked_workers is None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    full = [r for r in results if r["examples"]]
    n_ex = sum(r["examples"] for r in full)
    if not n_ex:
        raise UsageError(f"corpus {corpus.description}: too little text to make a single example")
    shards = output.publish_shards(out_dir, "pretrain", [
        {"path": r["path"], "examples": r["examples"], "bytes": r["bytes"]} for r in full], text=False)
    texts = output.publish_shards(out_dir, "pretrain", [
        {"path": r["text_path"], "examples": r["examples"], "bytes": r["text_bytes"]} for r in full], text=True) \
        if text_shards else []
    corpus_sha = _bundled_sha() if corpus.bundled else counts["sha256"]
    manifest = output.manifest_common(
        cfg, vocab, n_ex, sum(r["record_bytes"] for r in full) / n_ex,
        sum(r["text_record_bytes"] for r in full) / n_ex if text_shards else None, shards, texts)
    manifest.update({
        "corpus": corpus.description, "corpus_sha256": corpus_sha, "corpus_bytes": counts["bytes"],
        "source_sha256": with_vocab(corpus_sha, d.vocab), "num_documents": counts["documents"],
        "num_sentences": counts["sentences"], "num_corpus_tokens": sum(r["tokens"] for r in results),
        "vocab_source": vocab_source, "prepared_by": "data/prep (streamed, chunked)",
        "stats": chunked.pretrain_stats(full)})
    output.write_dataset_files(out_dir, vocab, manifest)
    say(f"wrote {n_ex} pretrain examples in {len(shards)} shards ({'+ raw-text shards, ' if text_shards else ''}"
        f"{sum(s['bytes'] for s in shards + texts) / 1e6:.1f} MB) to {out_dir} in {time.perf_counter() - t0:.1f}s")
    return manifest


def _bundled_sha() -> str:
    from tfbertperf.data.corpus import default_corpus_sha256

    return default_corpus_sha256()


def prepare_data(cfg, out_uri: str | None = None, progress=True, corpus: str | None = None,
                 workers: int | None = None, text_shards: bool = True) -> dict:
    """Build vocab + TFRecord shards + manifest.json for `cfg` (task = cfg.model.task; knobs cfg.data.*).

    Args:
      cfg: RunConfig.
      out_uri: a local path / file:// URI, or gs://… / az://… (written to a local temp dir, then uploaded).
        None = cfg.resolved_data_uri().
      progress: progress lines on stderr.
      corpus: `prepare --corpus FILE|DIR|gs://…|az://…`, else None = data.corpus ("" = the bundled text); both
        go the same way (module docstring).
      workers: worker processes making instances (None: chunked.default_workers, and with one, a helper
        process forked before TensorFlow loads where chunked.can_fork_helper; 1 = in this process only).
      text_shards: also write the raw-text shards (pipeline.tokenize=inline).
    Returns:
      The manifest dict (also written as manifest.json, last).
    Raises:
      UsageError naming the culprit: missing/empty corpus file, bad vocab, bad TSV row, too few examples.
    """
    from tfbertperf.data.prep.output import to_uri

    out_uri = out_uri or cfg.resolved_data_uri()
    if cfg.model.task != "pretrain":
        if corpus:
            raise UsageError(f"prepare --corpus: makes pretraining data; model.task={cfg.model.task!r}")
        from tfbertperf.data.prep.labeled import prepare_classify

        return to_uri(out_uri, cfg.data, lambda local: prepare_classify(cfg, local, progress), progress)
    spec, label = (corpus, "--corpus") if corpus else (cfg.data.corpus, "corpus file")
    return to_uri(out_uri, cfg.data, lambda local: prepare_pretrain(cfg, spec, local, progress, workers,
                                                                    text_shards, label), progress)
