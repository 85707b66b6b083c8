"""`prepare --corpus`: the parent's side of corpus-scale preparation (scaleprep.py has the corpus reading, the
worker's job and the record encoding): tokenize chunks, keep the worker processes busy with at most `workers` + 1
chunks in memory, report progress with an ETA, then name the shards and write vocab.txt and manifest.json."""

from __future__ import annotations

import hashlib
import os

from tfbertperf.data.scaleprep import ChunkProgress, chunk_job, chunks, corpus_inputs, plan_chunk_bytes, sample_sentences
from tfbertperf.errors import UsageError


def prepare_corpus(cfg, spec: str, out_dir: str, progress: bool = True, workers: int | None = None,
                   text_shards: bool = True) -> dict:
    """Write pretraining shards + vocab.txt + manifest.json for the corpus `spec` into local `out_dir` (see the
    module docstring); returns the manifest.  Knobs: cfg.data (vocab or vocab_size, seq_len, max_predictions,
    dupe_factor, masked_lm_prob, short_seq_prob, seed, num_shards = the least number of shards)."""
    import multiprocessing as mp
    import shutil
    import tempfile
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    import tensorflow as tf

    from tfbertperf.data import prepare as prep
    from tfbertperf.data.manifest import MANIFEST_FILE
    from tfbertperf.data.vocab import VOCAB_SAMPLE_BYTES, make_tokenizer, special_ids

    if cfg.model.task != "pretrain":
        raise UsageError(f"prepare --corpus: makes pretraining data; model.task={cfg.model.task!r}")
    d, say = cfg.data, prep._Progress(progress)
    workers = max(1, workers or len(os.sched_getaffinity(0)))
    tmp = tempfile.mkdtemp(prefix="tfbertperf-corpus-")
    try:
        paths = corpus_inputs(spec, d, tmp, say)
        total = sum(os.path.getsize(p) for p in paths)
        say(f"corpus {spec}: {len(paths)} file(s), {total / 1e6:.1f} MB; {workers} worker processes")
        vocab, vocab_source = prep._vocab(cfg, lambda: sample_sentences(paths, VOCAB_SAMPLE_BYTES), say)
        ids, tok = special_ids(vocab), make_tokenizer(vocab)
        os.makedirs(out_dir, exist_ok=True)
        if os.path.exists(os.path.join(out_dir, MANIFEST_FILE)):
            os.remove(os.path.join(out_dir, MANIFEST_FILE))
        params = dict(seq_len=d.seq_len, dupe_factor=d.dupe_factor, short_seq_prob=d.short_seq_prob,
                      masked_lm_prob=d.masked_lm_prob, max_predictions=d.max_predictions, vocab_size=len(vocab),
                      cls_id=ids["[CLS]"], sep_id=ids["[SEP]"], mask_id=ids["[MASK]"])
        results, pending, tick = [], {}, ChunkProgress(say, total)
        counts, sha = {"documents": 0, "sentences": 0, "bytes": total}, hashlib.sha256()

        def collect(block: bool) -> None:
            while pending and (block or len(pending) > workers):
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for fut in done:
                    results.append(fut.result())
                    tick(results[-1], pending.pop(fut), len(results))

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            for i, (docs, read) in enumerate(chunks(paths, plan_chunk_bytes(total, d.num_shards), sha)):
                texts = [s for doc in docs for s in doc]
                rt = tok.tokenize(tf.constant(texts, dtype=tf.string))
                counts["documents"] += len(docs)
                counts["sentences"] += len(texts)
                job = {"index": i, "flat": rt.flat_values.numpy(), "splits": rt.row_splits.numpy(), "texts": texts,
                       "doc_sizes": [len(doc) for doc in docs], "seq_len": d.seq_len,
                       "max_predictions": d.max_predictions, "path": os.path.join(out_dir, f"pretrain-{i:05d}.part"),
                       "text_path": os.path.join(out_dir, f"pretrain-text-{i:05d}.part") if text_shards else None,
                       "instances": dict(params, seed=d.seed * 1_000_003 + i)}
                pending[pool.submit(chunk_job, job)] = read
                collect(block=False)  # at most workers + 1 chunks in flight: memory stays bounded
            collect(block=True)
        counts["sha256"] = sha.hexdigest()
    except OSError as e:
        raise UsageError(f"prepare --out {out_dir}: {e.filename or out_dir}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _finish(cfg, out_dir, spec, vocab, vocab_source, results, counts, say)


def _finish(cfg, out_dir, spec, vocab, vocab_source, results, counts, say) -> dict:
    """Rename the shards to their final names, write vocab.txt and manifest.json (last)."""
    import json

    from tfbertperf.data import prepare as prep
    from tfbertperf.data.manifest import MANIFEST_FILE, VOCAB_FILE, shard_name
    from tfbertperf.data.manifest import file_sha256
    from tfbertperf.data.vocab import vocab_text

    results.sort(key=lambda r: r["index"])
    full = [r for r in results if r["examples"]]
    n_ex = sum(r["examples"] for r in full)
    if not n_ex:
        raise UsageError(f"--corpus {spec}: too little text to make a single example")
    shards, text_shards = [], []
    for j, r in enumerate(full):
        for kind, text, out in (("", False, shards), ("text-", True, text_shards))[:2 if r["text_bytes"] else 1]:
            name = shard_name("pretrain", j, len(full), text=text)
            os.replace(os.path.join(out_dir, f"pretrain-{kind}{r['index']:05d}.part"), os.path.join(out_dir, name))
            out.append({"name": name, "examples": r["examples"], "bytes": r["text_bytes" if text else "bytes"],
                        "sha256": file_sha256(os.path.join(out_dir, name))})
    for r in results:  # a chunk too small for a single instance: its files are empty
        for kind in ("", "text-"):
            if not r["examples"] and os.path.exists(os.path.join(out_dir, f"pretrain-{kind}{r['index']:05d}.part")):
                os.remove(os.path.join(out_dir, f"pretrain-{kind}{r['index']:05d}.part"))
    prep._write_atomic(os.path.join(out_dir, VOCAB_FILE), vocab_text(vocab).encode("utf-8"))
    tokens = sum(r["tokens"] for r in results)
    manifest = prep.manifest_common(cfg, vocab, n_ex, sum(r["record_bytes"] for r in full) / n_ex,
                                    sum(r["text_record_bytes"] for r in full) / n_ex, shards, text_shards)
    if not text_shards:
        manifest["text_record_bytes_mean"] = None  # pretokenized only (prepare --corpus --no-text-shards)
    manifest.update({
        "corpus": spec, "corpus_sha256": counts["sha256"], "corpus_bytes": counts["bytes"],
        "num_documents": counts["documents"], "num_sentences": counts["sentences"], "num_corpus_tokens": tokens,
        "vocab_source": vocab_source, "prepared_by": "prepare --corpus (streaming, chunked, parallel)",
        "stats": {"tokens_per_example_mean": round(sum(r["n_real"] for r in full) / n_ex, 2),
                  "masked_per_example_mean": round(sum(r["n_masked"] for r in full) / n_ex, 2),
                  "random_next_fraction": round(sum(r["n_random"] for r in full) / n_ex, 4)}})
    prep._write_atomic(os.path.join(out_dir, MANIFEST_FILE), (json.dumps(manifest, indent=2) + "\n").encode())
    say(f"wrote {n_ex} pretrain examples in {len(full)} shards ({'+ raw-text shards, ' if text_shards else ''}"
        f"{sum(s['bytes'] for s in shards + text_shards) / 1e6:.1f} MB) to {out_dir}")
    return manifest
