"""Classification data sets: a user TSV/CSV (`data.corpus` with model.task=classify) or the built-in pair task
made from the bundled text (data/classify.py reads and builds the rows), written by the same encoder, shard
writer and manifest writer as pretraining data.  Small by nature: made in this process, records contiguous over
data.num_shards shards."""

from __future__ import annotations

import os
import time

from tfbertperf.errors import UsageError


def _rows(cfg, say):
    import tfbertperf.data.classify as cls_mod
    from tfbertperf.data.corpus import DEFAULT_CORPUS, default_corpus_sha256, load_default_corpus

    d = cfg.data
    if d.corpus.strip():
        from tfbertperf.data.prep.source import source_sha256

        rows, labels = cls_mod.read_labeled_files(d.corpus)
        say(f"classify files {d.corpus}: {len(rows)} rows, {len(labels)} labels")
        return rows, labels, "files", ",".join(os.path.basename(p.strip()) for p in d.corpus.split(",") if p.strip()), \
            source_sha256(d.corpus, "", d)
    rows, labels = cls_mod.builtin_pairs(load_default_corpus(), d.dupe_factor, d.seed)
    say(f"built-in pair task {cls_mod.BUILTIN_TASK} from {DEFAULT_CORPUS}: {len(rows)} pairs")
    return rows, labels, cls_mod.BUILTIN_TASK, DEFAULT_CORPUS, default_corpus_sha256()


def prepare_classify(cfg, out_dir: str, progress: bool = True) -> dict:
    """Classification shards + raw-text shards + vocab.txt + manifest.json into local `out_dir`; the manifest."""
    import numpy as np

    import tfbertperf.data.classify as cls_mod
    from tfbertperf.data.manifest import shard_name
    import tfbertperf.data.prep.output as output
    from tfbertperf.data.prep.encode import encode_example, write_records
    from tfbertperf.data.prep.source import with_vocab
    from tfbertperf.data.vocab import choose_vocab, make_tokenizer, special_ids, tokenize_sentences

    d, say, t0 = cfg.data, output.Progress(progress), time.perf_counter()
    rows, labels, source, corpus_desc, corpus_sha = _rows(cfg, say)
    has_b = any(r.text_b for r in rows)
    # Vocab from the distinct texts (the pair task repeats sentences; counts barely matter to WordPiece).
    texts = sorted({t for r in rows for t in (r.text_a, r.text_b) if t})
    vocab, vocab_source = choose_vocab(cfg, texts, say)
    ids = special_ids(vocab)
    tokenized = dict(zip(texts, tokenize_sentences(make_tokenizer(vocab), texts)))
    records, text_records = [], []
    for r in rows:
        feats, a_rng, b_rng = cls_mod.classify_features(
            tokenized[r.text_a], tokenized.get(r.text_b, []), r.label, d.seq_len, ids["[CLS]"], ids["[SEP]"], has_b)
        records.append(encode_example(feats))
        text_records.append(encode_example({"text_a": r.text_a.encode("utf-8"), "text_b": r.text_b.encode("utf-8"),
                                            "a_range": list(a_rng), "b_range": list(b_rng), "label_ids": [r.label]}))
    if len(records) < d.num_shards:
        raise UsageError(f"--set data.num_shards={d.num_shards}: only {len(records)} examples; use fewer shards or "
                         "more data")
    output.start_dir(out_dir)
    n, shards = d.num_shards, {False: [], True: []}
    for text, recs in ((False, records), (True, text_records)):
        for i in range(n):
            part = recs[len(recs) * i // n: len(recs) * (i + 1) // n]
            path = os.path.join(out_dir, shard_name("classify", i, n, text))
            size = write_records(path, b"".join(part), [len(x) for x in part])
            shards[text].append({"path": path, "examples": len(part), "bytes": size})
        shards[text] = output.publish_shards(out_dir, "classify", shards[text], text)
    manifest = output.manifest_common(cfg, vocab, len(records), float(np.mean([len(x) for x in records])),
                                      float(np.mean([len(x) for x in text_records])), shards[False], shards[True])
    manifest.update({
        "corpus": corpus_desc, "corpus_sha256": corpus_sha, "source_sha256": with_vocab(corpus_sha, d.vocab),
        "classify_source": source, "num_labels": len(labels), "labels": labels, "pair": has_b,
        "vocab_source": vocab_source, "prepared_by": "data/prep (labeled rows, in process)",
        "stats": {"label_counts": [sum(1 for r in rows if r.label == i) for i in range(len(labels))]}})
    output.write_dataset_files(out_dir, vocab, manifest)
    say(f"wrote {len(records)} classify examples ({len(labels)} labels) in {n} shards (+ raw-text shards) to "
        f"{out_dir} in {time.perf_counter() - t0:.1f}s")
    return manifest
