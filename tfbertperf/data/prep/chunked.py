"""The chunked parallel maker of pretraining data, for every corpus (the bundled text, `data.corpus`,
`prepare --corpus`): the corpus is read once, front to back (source.py), in chunks of whole documents of
min(CHUNK_BYTES, corpus bytes ÷ data.num_shards):
  1. this process tokenizes a chunk in one batch with the in-graph tokenizer (tensorflow-text FastBertTokenizer,
     `vocab.make_tokenizer`: ~11 MB/s on one core, and the ids `pipeline.tokenize=inline` recomputes);
  2. a worker process (spawned, numpy only) makes the chunk's instances and writes its shards (instances.py);
     while workers work, this process tokenizes the next chunk; at most `workers` + 1 chunks are in memory,
     whatever the corpus size.  One worker = no worker process: the chunk's job runs here, in turn — and, when
     the number of workers was not asked for, there are two usable cores and TensorFlow is not loaded yet, with
     one helper process forked before it loads (no TensorFlow in it, nothing to import: it starts in ~10 ms
     where a spawned worker takes seconds) that takes a chunk whenever it is free (`_run_with_helper`).
Chunk i's instances are seeded by (data.seed, i), so the bytes do not depend on the number of workers.  Two
differences from the reference's global view, both with the same statistics: the random-next segment B comes
from another document of the same chunk, and instances are shuffled within their shard (tf.data interleaves
and shuffles shards when reading).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

from tfbertperf.data.prep.instances import chunk_job
from tfbertperf.data.prep.source import chunks
from tfbertperf.errors import UsageError

CHUNK_BYTES = 4_000_000  # text per chunk (one shard pair): ~10k instances per dupe pass at seq 128
# One worker per this much text at most.  In this process a chunk's instances and shards take ~0.3 s per MB of text
# here (2-core VM); a pool of spawned workers took 7-12 s before its first chunk came back (bench_prep, 5 MB), so
# below ~32 MB per worker the pool costs more than it saves.
WORKER_MIN_BYTES = 32_000_000


def default_workers(total_bytes: int) -> int:
    """Usable cores, but one per WORKER_MIN_BYTES of text at most (one = in this process)."""
    return max(1, min(len(os.sched_getaffinity(0)), total_bytes // WORKER_MIN_BYTES))


class ChunkProgress:
    """'shard i done: MB read/total, examples, examples/s, ETA' lines (from bytes read)."""

    def __init__(self, say, total_bytes: int) -> None:
        self.say, self.total, self.t0, self.examples = say, total_bytes, time.perf_counter(), 0
        self.read = 0  # the most bytes read at a chunk's end (a helper's chunk may finish after a later one)

    def __call__(self, res: dict, bytes_read: int, shards_done: int) -> None:
        self.examples += res["examples"]
        self.read = bytes_read = max(self.read, bytes_read)
        secs = time.perf_counter() - self.t0
        frac = min(1.0, bytes_read / max(1, self.total))
        eta = secs * (1 - frac) / frac if frac > 0 else float("nan")
        self.say(f"shard {shards_done} done: {bytes_read / 1e6:.1f}/{self.total / 1e6:.1f} MB of text read, "
                 f"{self.examples} examples, {self.examples / max(secs, 1e-9):.0f} examples/s, ETA {eta:.0f} s")


def can_fork_helper(workers: int, total_bytes: int, chunk_bytes: float) -> bool:
    """Whether the one-worker maker gets a forked helper: two usable cores, two chunks at least, and nothing of
    TensorFlow loaded (a fork after TensorFlow's threads exist is unsafe)."""
    return (workers == 1 and len(os.sched_getaffinity(0)) >= 2 and total_bytes > chunk_bytes
            and not any(m == "tensorflow" or m.startswith("tensorflow.") for m in sys.modules))


def make_pretrain(cfg, corpus, vocab: list[str], out_dir: str, say, workers: int,
                  text_shards: bool = True, helper: bool = False) -> tuple[list[dict], dict]:
    """Write the chunks' shards of `corpus` (source.CorpusFiles) into `out_dir` as `pretrain[-text]-chunk-<i>-<pid>`
    files (per process: two runs preparing one data set at once never rename each other's files).  Returns (the
    chunk results in order, with their files' "path" / "text_path", and counts {documents, sentences, bytes,
    sha256}).  helper: one worker may fork a helper process (can_fork_helper), before the tokenizer's runtime loads."""
    d = cfg.data
    chunk_bytes = min(CHUNK_BYTES, corpus.total_bytes / max(1, d.num_shards))
    pool = None
    if helper and can_fork_helper(workers, corpus.total_bytes, chunk_bytes):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(1, mp_context=mp.get_context("fork"))
        pool.submit(int).result()  # forks now, before TensorFlow's runtime loads (a fork pool forks on first use)
        say("1 helper process forked (before TensorFlow loads) makes the instances of a chunk whenever it is free")
    try:
        return _make(cfg, corpus, vocab, out_dir, say, workers, text_shards, pool, chunk_bytes)
    finally:
        if pool:
            pool.shutdown(wait=True, cancel_futures=True)


def _make(cfg, corpus, vocab, out_dir, say, workers, text_shards, pool, chunk_bytes) -> tuple[list[dict], dict]:
    from concurrent.futures.process import BrokenProcessPool

    from tfbertperf.data.eager_runtime import runtime
    from tfbertperf.data.vocab import make_tokenizer, special_ids

    d = cfg.data
    ids, tok, eager = special_ids(vocab), make_tokenizer(vocab), runtime()
    params = dict(seq_len=d.seq_len, dupe_factor=d.dupe_factor, short_seq_prob=d.short_seq_prob,
                  masked_lm_prob=d.masked_lm_prob, max_predictions=d.max_predictions, vocab_size=len(vocab),
                  cls_id=ids["[CLS]"], sep_id=ids["[SEP]"], mask_id=ids["[MASK]"])
    counts, sha = {"documents": 0, "sentences": 0, "bytes": corpus.total_bytes}, hashlib.sha256()
    me = os.getpid()

    def jobs():
        for i, (docs, read) in enumerate(chunks(corpus, chunk_bytes, sha)):
            texts = [s for doc in docs for s in doc]
            rt = tok.tokenize(eager.constant(texts, dtype=eager.string))
            counts["documents"] += len(docs)
            counts["sentences"] += len(texts)
            yield {"index": i, "flat": rt.flat_values.numpy(), "splits": rt.row_splits.numpy(), "texts": texts,
                   "doc_sizes": [len(doc) for doc in docs], "seq_len": d.seq_len,
                   "max_predictions": d.max_predictions,
                   "path": os.path.join(out_dir, f"pretrain-chunk-{i:05d}-{me}.tfrecord"),
                   "text_path": os.path.join(out_dir, f"pretrain-text-chunk-{i:05d}-{me}.tfrecord") if text_shards
                   else None,
                   "instances": dict(params, seed=d.seed * 1_000_003 + i)}, read

    tick = ChunkProgress(say, corpus.total_bytes)
    try:
        results = _run_with_helper(jobs(), pool, tick) if pool else _run(jobs(), workers, tick)
    except OSError as e:
        raise UsageError(f"prepare --out {out_dir}: {e.filename or out_dir}: {e.strerror or e}") from None
    except BrokenProcessPool:
        raise UsageError(f"prepare --out {out_dir}: a worker process died (out of memory or killed); "
                         "--workers 1 prepares in this process alone") from None
    counts["sha256"] = sha.hexdigest()
    return sorted(results, key=lambda r: r["index"]), counts


def _run(jobs, workers: int, tick) -> list[dict]:
    """Run each job: here, in turn (workers == 1), or in `workers` spawned processes with at most workers + 1
    chunks in memory."""
    results: list[dict] = []
    if workers <= 1:
        for job, read in jobs:
            results.append(chunk_job(job))
            tick(results[-1], read, len(results))
        return results
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    pending: dict = {}

    def collect(block: bool) -> None:
        while pending and (block or len(pending) > workers):
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in done:
                results.append(fut.result())
                tick(results[-1], pending.pop(fut), len(results))

    # spawn: the workers start without TensorFlow (fork from a process with TF's threads is unsafe)
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        for job, read in jobs:
            pending[pool.submit(chunk_job, job)] = read
            collect(block=False)  # at most workers + 1 chunks in flight: memory stays bounded
        collect(block=True)
    return results


def _run_with_helper(jobs, pool, tick) -> list[dict]:
    """Each job to the forked helper when it is free, else here; at most two chunks in memory besides the one
    being tokenized."""
    results: list[dict] = []
    pending = None  # (Future, bytes read) of the helper's chunk

    def done(res: dict, read: int) -> None:
        results.append(res)
        tick(res, read, len(results))

    for job, read in jobs:
        if pending is not None and pending[0].done():
            done(pending[0].result(), pending[1])
            pending = None
        if pending is None:
            pending = (pool.submit(chunk_job, job), read)
        else:
            done(chunk_job(job), read)
    if pending is not None:
        done(pending[0].result(), pending[1])
    return results


def pretrain_stats(results: list[dict]) -> dict:
    """The manifest's statistics of the written instances."""
    n = sum(r["examples"] for r in results)
    return {"tokens_per_example_mean": round(sum(r["n_real"] for r in results) / n, 2),
            "masked_per_example_mean": round(sum(r["n_masked"] for r in results) / n, 2),
            "random_next_fraction": round(sum(r["n_random"] for r in results) / n, 4)}

