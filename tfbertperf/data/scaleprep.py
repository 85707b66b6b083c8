"""`tfbertperf prepare --corpus FILE|DIR|gs://…|az://…`: pretraining shards from hundreds of MB of text, streaming.

The corpus is google-research/bert's format (one sentence per line, a blank line between documents; a new file
starts a new document).  It is read once, front to back, in *chunks* of whole documents (≈ CHUNK_BYTES of text,
fewer when that would give fewer than data.num_shards shards):
  1. the parent tokenizes a chunk in batches with the in-graph tokenizer (tensorflow-text FastBertTokenizer,
     `vocab.make_tokenizer`: ~11 MB/s on one core here, 15-25× transformers' fast tokenizer on the same vocab,
     and the ids `pipeline.tokenize=inline` recomputes from the text records);
  2. a worker process (no TensorFlow: spawned, numpy only) makes the chunk's instances with
     `pretrain.create_training_instances` — the reference's algorithm and random draws, seeded per chunk — and
     writes its two shards (pre-tokenized and raw text, each encoded a chunk at once in numpy with
     `synthetic_shards.encode_records`) as soon as they are full.  While workers make instances, the parent
     tokenizes the next chunk; at most `workers` + 1 chunks are in memory at any time, whatever the corpus size.
Two differences from the reference's global view, both with the same statistics: the random-next segment B comes
from another document of the same chunk (hundreds of documents), and instances are shuffled within their shard
(tf.data interleaves and shuffles shards when reading).  gs:// and az:// corpora are copied to a local temporary
directory first in ranged reads of 16 MB.  Shards are named `<task>-<i>.part` while written and renamed to
`<task>-<i>-of-<n>.tfrecord` once n is known; manifest.json (written last) lists them.
"""

from __future__ import annotations

import math
import os
import struct
import time
from itertools import chain

import numpy as np

from tfbertperf.errors import UsageError

CHUNK_BYTES = 4_000_000  # text per chunk (one shard pair): ~10k instances per dupe pass at seq 128
DOWNLOAD_BYTES = 16 << 20


# ---- corpus: sources, documents, chunks --------------------------------------------------------------------

def corpus_inputs(spec: str, data_cfg, tmp_dir: str, say) -> list[str]:
    """--corpus FILE | DIR | gs://… | az://… (comma-separated allowed) → local files, in order.  A directory
    gives its regular files (recursively, hidden ones skipped, sorted); a gs:// / az:// prefix its objects
    (hidden names skipped too, in URI order), copied into `tmp_dir`."""
    from tfbertperf.storage.base import split_uri

    out: list[str] = []
    for item in [p.strip() for p in spec.split(",") if p.strip()]:
        scheme = split_uri(item)[0]
        if scheme in ("gs", "az"):
            out += _download(item, data_cfg, tmp_dir, say)
            continue
        path = split_uri(item)[2]
        if os.path.isfile(path):
            out.append(path)
        elif os.path.isdir(path):
            found = sorted(os.path.join(r, f) for r, dirs, files in os.walk(path) for f in files
                           if not f.startswith(".") and "/." not in os.path.relpath(os.path.join(r, f), path))
            if not found:
                raise UsageError(f"--corpus {item}: directory holds no files")
            out += found
        else:
            raise UsageError(f"--corpus {item}: no such file or directory")
    if not out:
        raise UsageError(f"--corpus {spec!r}: no corpus given")
    return out


def _download(uri: str, data_cfg, tmp_dir: str, say) -> list[str]:
    from tfbertperf.redact import redact_text
    from tfbertperf.storage import open_backend

    backend = open_backend(uri, data_cfg)
    objs = [o for o in backend.list(uri) if o.size > 0 and not o.uri.rsplit("/", 1)[-1].startswith(".")]
    if not objs:
        raise UsageError(f"--corpus {redact_text(uri)}: no objects under this prefix")
    paths = []
    for n, o in enumerate(objs):
        local = os.path.join(tmp_dir, f"corpus-{n:05d}-{os.path.basename(o.uri.rstrip('/'))}")
        with open(local, "wb") as f:
            for start in range(0, o.size, DOWNLOAD_BYTES):
                f.write(backend.read_range(o.uri, start, min(DOWNLOAD_BYTES, o.size - start)))
        say(f"corpus: copied {redact_text(o.uri)} ({o.size / 1e6:.1f} MB)")
        paths.append(local)
    return paths


def _lines(paths: list[str], sha=None):
    """(line, bytes consumed so far) over every file; a file end is a document end (yields "").  `sha`: a
    hashlib object fed every byte read."""
    done = 0
    for path in paths:
        try:
            with open(path, "rb") as f:
                for n, raw in enumerate(f, 1):
                    done += len(raw)
                    if sha is not None:
                        sha.update(raw)
                    try:
                        yield raw.decode("utf-8").strip(), done
                    except UnicodeDecodeError:
                        raise UsageError(f"corpus file {path}: line {n} is not UTF-8 text") from None
        except OSError as e:
            raise UsageError(f"corpus file {path}: cannot read ({e.strerror})") from None
        yield "", done


def chunks(paths: list[str], chunk_bytes: int, sha=None):
    """Yield (documents, bytes read so far): whole documents (lists of sentences) of ≈ chunk_bytes of text."""
    docs: list[list[str]] = []
    cur: list[str] = []
    size = 0
    for line, done in _lines(paths, sha):
        if line:
            cur.append(line)
            size += len(line) + 1
            continue
        if cur:
            docs.append(cur)
            cur = []
        if size >= chunk_bytes:
            yield docs, done
            docs, size = [], 0
    if docs:
        yield docs, done


def sample_sentences(paths: list[str], nbytes: int) -> list[str]:
    """The first `nbytes` of sentences of every file in proportion to its size (for learning a vocab)."""
    sizes = [max(1, os.path.getsize(p)) for p in paths]
    out: list[str] = []
    for p, s in zip(paths, sizes):
        budget, got = nbytes * s / sum(sizes), 0
        for line, _ in _lines([p]):
            if got >= budget:
                break
            if line:
                out.append(line)
                got += len(line)
    return out


# ---- records without TensorFlow -----------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    if n < len(_VARINTS):
        return _VARINTS[n]
    return _varint_slow(n)


def _varint_slow(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_VARINTS = [_varint_slow(i) for i in range(1 << 15)]  # ids, positions, lengths: one table look-up each
_NV = len(_VARINTS)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def encode_example(values: dict) -> bytes:
    """{name: bytes | list of float | list of int ≥ 0} → a serialized tf.train.Example, byte-identical to
    features.serialize (deterministic: map entries sorted by key; packed lists)."""
    entries = []
    for k in sorted(values):
        v = values[k]
        if isinstance(v, bytes):
            feat = _field(b"\x0a", _field(b"\x0a", v))
        elif v and isinstance(v[0], float):
            feat = _field(b"\x12", _field(b"\x0a", struct.pack(f"<{len(v)}f", *v)))
        else:
            feat = _field(b"\x1a", _field(b"\x0a", b"".join([_VARINTS[x] if x < _NV else _varint(x) for x in v]))
                          if v else b"")
        entries.append(_field(b"\x0a", _field(b"\x0a", k.encode()) + _field(b"\x12", feat)))
    return _field(b"\x0a", b"".join(entries))


def _write_framed(path: str, pool: bytes, lens: list[int]) -> int:
    from tfbertperf.data.synthetic_shards import _frames

    starts = np.cumsum([0] + lens[:-1]).tolist()
    with open(path, "wb") as f:
        f.write(_frames(pool, starts, lens, range(len(lens))))
        return f.tell()


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
    from tfbertperf.data import pretrain as pre
    from tfbertperf.data.synthetic_shards import encode_records

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
    out = {"index": job["index"], "examples": n, "n_real": sum(len(x.input_ids) for x in insts), "n_masked": 0,
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
    out["bytes"] = _write_framed(job["path"], buf, rec_len.tolist())
    out["record_bytes"] = int(rec_len.sum())
    if job.get("text_path"):
        buf, rec_len = text_records(insts, ex, replace)
        out["text_bytes"] = _write_framed(job["text_path"], buf, rec_len.tolist())
        out["text_record_bytes"] = int(rec_len.sum())
    return out


def text_records(insts: list, ex: dict, replace: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The raw-text records of a chunk's instances (text, token ranges, masking), serialized back to back with
    `encode_records` in numpy, byte-identical to encode_example / features.serialize; (bytes, size of each).
    Record by record with encode_example only if a text or a range reaches 2**21 (a varint of 4 bytes)."""
    from tfbertperf.data.synthetic_shards import encode_records

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


def plan_chunk_bytes(total_bytes: int, num_shards: int) -> int:
    """Text per chunk: CHUNK_BYTES, or less so that the corpus makes at least `num_shards` shards."""
    return max(1, min(CHUNK_BYTES, math.ceil(total_bytes / max(1, num_shards))))


class ChunkProgress:
    """'prepare: chunk i: MB read/total, examples, examples/s, ETA' lines (from bytes read)."""

    def __init__(self, say, total_bytes: int) -> None:
        self.say, self.total, self.t0, self.examples = say, total_bytes, time.perf_counter(), 0

    def __call__(self, res: dict, bytes_read: int, shards_done: int) -> None:
        self.examples += res["examples"]
        secs = time.perf_counter() - self.t0
        frac = min(1.0, bytes_read / max(1, self.total))
        eta = secs * (1 - frac) / frac if frac > 0 else float("nan")
        self.say(f"shard {shards_done} done: {bytes_read / 1e6:.1f}/{self.total / 1e6:.1f} MB of text read, "
                 f"{self.examples} examples, {self.examples / max(secs, 1e-9):.0f} examples/s, ETA {eta:.0f} s")

