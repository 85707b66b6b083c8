"""GB-scale synthetic BERT pretraining shards, fast: the input side of the accelerator regime without a corpus.

Records have the exact google-research/bert pretraining spec (features.feature_spec("pretrain", …)), are encoded
and TFRecord-framed by the one record encoder (encode.py); with vocab.txt
and manifest.json the directory reads like `tfbertperf prepare` output (pre-tokenized shards only).  A record:
  length   p=0.1 uniform in [5, seq_len]; else full (p=0.75, a truncated chunk) or uniform in [seq_len/2,
           seq_len] (a document's end).  [CLS] A [SEP] B [SEP] [PAD]=0 …; A has 1 … len−4 tokens; segment 1 on B.
  ids      log-uniform over ranks from id 999 (Zipf; bert-base-uncased keeps [unused] and characters below):
           mostly 2-byte varints, as real WordPiece ids (vocab < 2000: from id 5).
  masking  min(max_predictions, max(1, round(0.15 len))) sorted non-special positions (not the one after [CLS]):
           80 % [MASK], 10 % kept, 10 % a random id; next_sentence_labels 0/1, p=0.5.
Mean record sizes (serialized; +16 framing bytes on disk), 30,522-token vocab: seq 128 / 20 predictions 812 B,
seq 512 / 76 2,738 B (MLPerf's BERT records: 2,500 B).  Speed: vectorized numpy (≈ 70 MB/s per core); beyond
POOL records a shard draws records from those at random, replacing the id after [CLS] with a fresh 2-byte id
(same size, new CRC): all records differ, sizes and parse cost are unchanged, later records share structure.
One process per core, a shard per task, each written atomically (storage/atomic.py); the same seed gives the
same bytes for any number of workers.  Local directories only: for gs:// or az://, write locally, then
`tfbertperf.storage.upload.upload_dir(local_dir, uri)` (it uploads manifest.json last).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import time
from functools import lru_cache

import numpy as np

from tfbertperf.data.prep.encode import encode_records
from tfbertperf.errors import UsageError
from tfbertperf.storage.atomic import atomic_file
from tfbertperf.storage.tfrecord import frame_records

CLS, SEP, MASK_ID, LOW_ID = 2, 3, 4, 999
CHUNK, POOL = 2048, 8192  # records generated at once; distinct records per shard
GENERATOR = "tfbertperf.data.prep.synthetic_shards/1"  # names the generator in the manifest's source identity
_UNITS = {u + b: f for u, f in (("", 1), ("k", 10**3), ("m", 10**6), ("g", 10**9), ("t", 10**12), ("ki", 2**10),
                                 ("mi", 2**20), ("gi", 2**30), ("ti", 2**40)) for b in ("", "b")}


def parse_size(text) -> int:
    """'2GiB' → 2147483648.  Units (any case, optional space and B): k/M/G/T = powers of 1000, Ki/Mi/Gi/Ti =
    powers of 1024; a plain number is bytes.  UsageError naming the value if unparsable or ≤ 0."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", str(text), re.IGNORECASE)
    n = int(float(m.group(1)) * _UNITS[m.group(2).lower()]) if m and m.group(2).lower() in _UNITS else None
    if n is None or n <= 0:
        raise UsageError(f"size {text!r}: not a size above 0 bytes (examples: 500MB, 2GiB, 1.5G, 1000000)")
    return n


def default_max_predictions(seq_len: int) -> int:
    """20 for seq 128, 76 for 512 (NVIDIA's / MLPerf's), otherwise ceil(0.15 × seq_len)."""
    return 76 if seq_len == 512 else math.ceil(0.15 * seq_len)


@lru_cache(maxsize=4)
def _id_table(vocab_size: int) -> np.ndarray:
    """Inverse CDF of the log-uniform id distribution on 65,536 levels (indexed by a random uint16)."""
    lo, q = (LOW_ID if vocab_size > 2 * LOW_ID else 5), (np.arange(65536) + 0.5) / 65536
    return np.minimum(lo + np.floor((vocab_size - lo + 1) ** q) - 1, vocab_size - 1).astype(np.int32)


def generate(rng: np.random.Generator, n: int, seq_len: int, max_pred: int, vocab_size: int) -> dict:
    """`n` examples: {key: array [n, …]} of the pretraining features (integer ids, float32 weights)."""
    S, P = seq_len, max_pred
    length = np.where(rng.random(n) < 0.1, rng.integers(5, S + 1, n),
                      np.where(rng.random(n) < 0.75, S, rng.integers(S // 2, S + 1, n)))
    sep1 = 2 + (rng.random(n) * (length - 4)).astype(np.int64)  # after A's 1 … length − 4 tokens
    col = np.arange(S)[None, :]
    real = col < length[:, None]
    ids = _id_table(vocab_size)[rng.integers(0, 65536, (n, S), dtype=np.uint16)]
    ids[:, 0] = CLS
    if vocab_size > 2 * LOW_ID:  # the id after [CLS]: a 2-byte varint (replaced when a record is reused)
        ids[:, 1] = rng.integers(LOW_ID, min(vocab_size, 0x4000), n)
    is_sep = (col == sep1[:, None]) | (col == (length - 1)[:, None])
    ids[is_sep], ids[~real] = SEP, 0
    keys = rng.random((n, S), dtype=np.float32)  # mask the k candidates with the smallest random keys
    keys[~real | is_sep], keys[:, :2] = 2.0, 2.0
    pick = np.argpartition(keys, P - 1, axis=1)[:, :P] if P < S else np.argsort(keys, axis=1)[:, :P]
    pick = np.take_along_axis(pick, np.argsort(np.take_along_axis(keys, pick, 1), axis=1), 1)
    k = np.minimum(P, np.maximum(1, np.rint(length * 0.15).astype(np.int64)))
    pos = np.sort(np.where(np.arange(P)[None, :] < k[:, None], pick, S), axis=1)  # chosen ascending, then S
    chosen = pos < S
    pos[~chosen] = 0
    labels = np.where(chosen, np.take_along_axis(ids, pos, 1), 0)
    u = rng.random((n, P), dtype=np.float32)
    r, c = np.nonzero(chosen)
    ids[r, pos[r, c]] = np.where(u < 0.8, MASK_ID, np.where(u < 0.9, labels, rng.integers(0, vocab_size, (n, P))))[r, c]
    return {"input_ids": ids, "input_mask": real.astype(np.int64), "masked_lm_positions": pos,
            "segment_ids": ((col > sep1[:, None]) & real).astype(np.int64), "masked_lm_ids": labels,
            "masked_lm_weights": chosen.astype(np.float32), "next_sentence_labels": rng.integers(0, 2, (n, 1))}


def _write_shard(t: dict) -> dict:
    """Write shard `t` (path, index, examples, seq_len, max_pred, vocab_size, seed) atomically (storage/atomic.py).
    Returns {name, examples, bytes, sha256}."""
    rng = np.random.default_rng([t["seed"], t["index"]])
    reuse, left = t["vocab_size"] > 2 * LOW_ID, t["examples"]
    pool, starts, lens, p1 = [], [], [], []  # distinct records (serialized), where each starts, its size, id at
    with atomic_file(t["path"]) as f:
        while left:
            n = min(CHUNK, left)
            if not reuse or len(starts) < POOL:
                buf, rec_len, ids_at = encode_records(generate(rng, n, t["seq_len"], t["max_pred"],
                                                               t["vocab_size"]))
                first = (np.cumsum(rec_len) - rec_len).tolist()
                f.write(frame_records(buf, first, rec_len.tolist(), range(n)))
                if reuse:
                    base = sum(map(len, pool))
                    starts, lens = starts + [base + s for s in first], lens + rec_len.tolist()
                    pool, p1 = pool + [buf], p1 + (base + ids_at + 1).tolist()  # + 1: after [CLS]
            else:
                pool = b"".join(pool) if isinstance(pool, list) else pool
                ids = rng.integers(LOW_ID, min(t["vocab_size"], 0x4000), n)
                f.write(frame_records(pool, starts, lens, rng.integers(0, len(starts), n).tolist(), p1, ids))
            left -= n
        size = f.tell()
    from tfbertperf.data.manifest import file_sha256

    return {"name": os.path.basename(t["path"]), "examples": t["examples"], "bytes": size,
            "sha256": file_sha256(t["path"])}


def _write_all(tasks: list[dict], workers: int, progress, est_bytes: int) -> list[dict]:
    """Write the shards with `workers` processes.  After each shard: progress({bytes, bytes_total (estimate),
    examples, examples_total, shards_done, shards, seconds, mb_per_s (10^6 B/s), eta_s})."""
    import multiprocessing as mp
    import threading
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() and threading.active_count() == 1
                         else "spawn")  # fork is quickest, but not from a process with threads (TensorFlow's)
    t0, infos, total_ex = time.perf_counter(), [], sum(t["examples"] for t in tasks)
    try:
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            for fut in as_completed([pool.submit(_write_shard, t) for t in tasks]):
                infos.append(fut.result())
                secs = time.perf_counter() - t0
                done, ex = sum(s["bytes"] for s in infos), sum(s["examples"] for s in infos)
                if progress:
                    progress({"bytes": done, "bytes_total": est_bytes, "examples": ex, "examples_total": total_ex,
                              "shards_done": len(infos), "shards": len(tasks), "seconds": secs,
                              "mb_per_s": done / secs / 1e6, "eta_s": (total_ex - ex) * secs / ex})
    except OSError as e:
        raise UsageError(f"synthetic shards: {e.filename or tasks[0]['path']}: {e.strerror or e}") from None
    return sorted(infos, key=lambda s: s["name"])


def write_synthetic(out_dir: str, examples: int | None = None, size_bytes: int | None = None, seq_len: int = 128,
                    max_predictions: int | None = None, shards: int | None = None, vocab_size: int = 30522,
                    workers: int | None = None, progress=None, seed: int = 0) -> dict:
    """Write pretraining shards + vocab.txt + manifest.json (last) to local dir `out_dir` (path or file:// URI,
    created if missing); return the manifest.  How much: `examples` or `size_bytes` (exactly one; bytes on disk,
    framing included, met within ~1 % via a probe batch's mean record size).  None defaults: max_predictions by
    default_max_predictions, shards ~128 MiB each and at least one per worker, workers os.cpu_count() (≤ one per
    shard).  progress: callable(dict) after each shard (see _write_all).  Same seed → same bytes.  Raises
    UsageError naming the bad argument, or the file that could not be written."""
    from tfbertperf.config import RunConfig
    from tfbertperf.data.manifest import shard_name
    from tfbertperf.data.prep.output import manifest_common, start_dir, write_dataset_files
    from tfbertperf.data.vocab import RESERVED_TOKENS
    from tfbertperf.redact import redact_text
    from tfbertperf.storage.base import split_uri

    max_pred = default_max_predictions(seq_len) if max_predictions is None else max_predictions
    if (examples is None) == (size_bytes is None):
        raise UsageError("synthetic shards: give exactly one of examples or size_bytes")
    for name, v, lo, hi in (("examples", examples, 1, None), ("size_bytes", size_bytes, 1, None),
                            ("shards", shards, 1, None), ("workers", workers, 1, None), ("seq_len", seq_len, 8, None),
                            ("max_predictions", max_pred, 1, seq_len), ("vocab_size", vocab_size, 100, 1 << 21)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi and v > hi)):
            raise UsageError(f"synthetic shards: {name}={v!r}: must be an integer in [{lo}, {hi or 'inf'}]")
    scheme, _, local = split_uri(str(out_dir))
    if scheme != "file" or (os.path.exists(local) and not os.path.isdir(local)):
        raise UsageError(f"synthetic shards: {redact_text(str(out_dir))}: not a local directory")
    probe = generate(np.random.default_rng([seed, 2**31]), 1024, seq_len, max_pred, vocab_size)
    per_record = float(encode_records(probe)[1].mean()) + 16  # framed bytes
    examples = examples or max(1, math.ceil(size_bytes / per_record))
    cpus = os.cpu_count() or 1
    shards = shards or min(examples, max(min(cpus, workers or cpus), math.ceil(examples * per_record / 2**27)))
    if shards > examples:
        raise UsageError(f"synthetic shards: shards={shards} but only {examples} examples")
    start_dir(local)
    lo = LOW_ID if vocab_size > 2 * LOW_ID else 5
    vocab = list(RESERVED_TOKENS) + [f"[unused{i}]" for i in range(5, lo)] + [f"tok{i}" for i in range(lo, vocab_size)]
    tasks = [{"path": os.path.join(local, shard_name("pretrain", i, shards)), "index": i, "seed": seed,
              "examples": examples * (i + 1) // shards - examples * i // shards, "seq_len": seq_len,
              "max_pred": max_pred, "vocab_size": vocab_size} for i in range(shards)]
    infos = _write_all(tasks, min(workers or cpus, shards), progress, int(examples * per_record))
    total = sum(s["bytes"] for s in infos)
    knobs = dict(seq_len=seq_len, max_predictions=max_pred, vocab_size=vocab_size, seed=seed, dupe_factor=1,
                 masked_lm_prob=0.15, short_seq_prob=0.1)
    cfg = dataclasses.replace(RunConfig(), data=dataclasses.replace(RunConfig().data, **knobs))
    identity = hashlib.sha256(json.dumps({"generator": GENERATOR, "examples": examples, "shards": shards, **knobs},
                                         sort_keys=True).encode()).hexdigest()  # what these bytes are made from
    manifest = manifest_common(cfg, vocab, examples, (total - 16 * examples) / examples, None, infos, [])
    manifest.update({"tokenizer": "none (synthetic random ids)", "corpus": f"synthetic ({GENERATOR})",
                     "corpus_sha256": identity, "source_sha256": identity, "vocab_source": "synthetic",
                     "prepared_by": "data/prep (synthetic)",
                     "stats": {"distinct_records_per_shard": POOL if lo == LOW_ID else None}})
    return write_dataset_files(local, vocab, manifest)
