"""A chunk of tokenized documents → its pretraining instances → its shards: the job of one worker process of the
chunked maker (chunked.py), or of the preparing process itself when one worker is asked for.  No TensorFlow.

Instances come from `pretrain.create_training_instances` (the reference's packing, pairing and truncation,
seeded per chunk); masking is done for the whole chunk at once in numpy (`mask_batch`), and both shards (the
pre-tokenized one and, unless not asked for, the raw-text one) are encoded a chunk at once (encode.py).
"""

from __future__ import annotations

from itertools import chain

import numpy as np

import tfbertperf.data.pretrain as pre
from tfbertperf.data.prep.encode import encode_example, encode_records, write_records


def mask_batch(ex: dict, a_lens: np.ndarray, rng: np.random.Generator, masked_lm_prob: float,
               max_predictions: int, vocab_size: int, mask_id: int) -> np.ndarray:
    """google-research/bert's masking for a whole chunk at once, in numpy, in place in `ex` (input_ids [n, L],
    input_mask; sets masked_lm_positions/ids/weights [n, P]); returns the id written at each position.  Same rule
    and statistics as the reference (pretrain._create_masked_lm_predictions), other random draws:
    num_to_predict = min(P, max(1, round(len × prob))) with len counting [CLS]/[SEP] (both rounds are half-to-even),
    at most the number of candidates; the positions a uniform random subset of the non-[CLS]/[SEP] positions,
    sorted; each one [MASK] with p=0.8, kept with p=0.1, a uniformly random id (any id) with p=0.1."""
    ids = ex["input_ids"]
    n, L = ids.shape
    P = max_predictions
    lens = ex["input_mask"].sum(1)
    col = np.arange(L)[None, :]
    cand = (col >= 1) & (col < lens[:, None] - 1) & (col != a_lens[:, None] + 1)
    k = np.minimum(np.minimum(P, np.maximum(1, np.round(lens * masked_lm_prob).astype(np.int64))), cand.sum(1))
    order = np.argsort(np.where(cand, rng.random((n, L)), 2.0), axis=1)[:, :P]
    pos = np.sort(np.where(np.arange(P)[None, :] < k[:, None], order, L), axis=1)
    chosen = pos < L
    pos = np.where(chosen, pos, 0)
    labels = np.where(chosen, ids[np.arange(n)[:, None], pos], 0)
    u, v, rand = rng.random((n, P)), rng.random((n, P)), rng.integers(0, vocab_size, (n, P))
    replace = np.where(chosen, np.where(u < 0.8, mask_id, np.where(v < 0.5, labels, rand)), 0)
    r, c = np.nonzero(chosen)
    ids[r, pos[r, c]] = replace[r, c]
    ex["masked_lm_positions"], ex["masked_lm_ids"] = pos, labels
    ex["masked_lm_weights"] = chosen.astype(np.float32)
    return replace


def chunk_job(job: dict) -> dict:
    """In a worker: a tokenized chunk → instances (the reference's packing, pairing and truncation, seeded per
    chunk) → masking for the whole chunk (mask_batch) → its pre-tokenized shard and, unless job["text_path"] is
    None, its raw-text shard.  Returns the shard sizes and the counts the manifest's statistics are made of.
    Python's cyclic garbage collector is off meanwhile (nothing here makes cycles; its passes over the chunk's
    millions of ids and instances were ~40 % of a 4 MB chunk's time)."""
    import gc

    was_on = gc.isenabled()
    gc.disable()
    try:
        return _chunk_job(job)
    finally:
        if was_on:
            gc.enable()


def _chunk_job(job: dict) -> dict:
    flat, splits, texts = job["flat"].tolist(), job["splits"].tolist(), job["texts"]
    docs, k = [], 0
    for n in job["doc_sizes"]:
        sents = []
        for j in range(k, k + n):
            if splits[j + 1] > splits[j]:  # the reference skips lines that tokenize to nothing
                sents.append(pre.Sentence(flat[splits[j]:splits[j + 1]], texts[j]))
        docs.append(sents)
        k += n
    L, P, params = job["seq_len"], job["max_predictions"], job["instances"]
    insts = pre.create_training_instances(docs, progress=None, mask=False, **params)
    n = len(insts)
    out = {"index": job["index"], "path": job["path"], "text_path": job.get("text_path"), "examples": n,
           "n_real": sum(len(x.input_ids) for x in insts), "n_masked": 0,
           "n_random": sum(x.is_random_next for x in insts), "tokens": len(flat), "bytes": 0, "text_bytes": 0,
           "record_bytes": 0, "text_record_bytes": 0}
    if not n:
        return out
    real = np.arange(L)[None, :] < np.fromiter((len(x.input_ids) for x in insts), np.int64, n)[:, None]
    ex = {key: np.zeros((n, L), np.int64) for key in ("input_ids", "segment_ids")}
    ex["input_mask"] = real.astype(np.int64)
    for key in ("input_ids", "segment_ids"):  # row-major: the instances' lists back to back fill the real slots
        ex[key][real] = np.fromiter(chain.from_iterable(getattr(x, key) for x in insts), np.int64, out["n_real"])
    ex["next_sentence_labels"] = np.array([[int(x.is_random_next)] for x in insts], np.int64)
    a_lens = np.array([x.a_range[1] - x.a_range[0] for x in insts], np.int64)
    replace = mask_batch(ex, a_lens, np.random.default_rng([params["seed"], job["index"]]), params["masked_lm_prob"],
                         P, params["vocab_size"], params["mask_id"])
    out["n_masked"] = int(ex["masked_lm_weights"].sum())
    buf, rec_len, _ = encode_records(ex)
    out["bytes"] = write_records(job["path"], buf, rec_len.tolist())
    out["record_bytes"] = int(rec_len.sum())
    if job.get("text_path"):
        buf, rec_len = text_records(insts, ex, replace)
        out["text_bytes"] = write_records(job["text_path"], buf, rec_len.tolist())
        out["text_record_bytes"] = int(rec_len.sum())
    return out


def text_records(insts: list, ex: dict, replace: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The raw-text records of a chunk's instances (text, token ranges, masking), serialized back to back with
    `encode_records` in numpy, byte-identical to encode_example; (bytes, size of each).
    Record by record with encode_example only if a text or a range reaches 2**21 (a varint of 4 bytes)."""
    def col(strs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        return np.frombuffer(b"".join(strs), np.uint8), np.fromiter(map(len, strs), np.int64, len(strs))

    cols = {"text_a": col([x.text_a.encode() for x in insts]), "text_b": col([x.text_b.encode() for x in insts]),
            "a_range": np.array([x.a_range for x in insts], np.int64).reshape(-1, 2),
            "b_range": np.array([x.b_range for x in insts], np.int64).reshape(-1, 2), "masked_lm_replace": replace,
            **{k: ex[k] for k in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                                  "next_sentence_labels")}}
    try:
        buf, rec_len, _ = encode_records(cols, tuple(sorted(cols)))
        return buf, rec_len
    except ValueError:
        lists = {k: v.tolist() for k, v in cols.items() if not isinstance(v, tuple)}
        text = [encode_example({"text_a": x.text_a.encode(), "text_b": x.text_b.encode(),
                                **{k: v[i] for k, v in lists.items()}}) for i, x in enumerate(insts)]
        return b"".join(text), np.array([len(r) for r in text], np.int64)
