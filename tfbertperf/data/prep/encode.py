"""The one record encoder of every data-set writer, and its TFRecord framing (no TensorFlow: worker processes
and the synthetic generator use it too).

Records are serialized tf.train.Examples byte-identical to TensorFlow's deterministic serialization (map
entries sorted by key, packed lists): `encode_records` encodes a whole batch of examples held as numpy arrays at
once; `encode_example` one example held as Python values (a value of 2**21 or more, rare text, labels).  The
framing is TFRecord's (storage/tfrecord.py reads it back): uint64 length | masked CRC32C of it | data | masked
CRC32C of the data (storage/tfrecord.py frames and reads it).
"""
from __future__ import annotations

import struct
from functools import lru_cache

import numpy as np

from tfbertperf.data.features import PRETRAIN_KEYS
from tfbertperf.storage.atomic import atomic_file
from tfbertperf.storage.tfrecord import frame_records

KEYS = tuple(sorted(PRETRAIN_KEYS))  # the pretraining features in the order serialization writes them


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
    TensorFlow's deterministic serialization (map entries sorted by key; packed lists)."""
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


@lru_cache(maxsize=8)
def _varint_tables(size: int) -> tuple[np.ndarray, np.ndarray]:
    """For v < size: v's varint as a little-endian uint32 (≤ 3 bytes used), and a uint32 whose bytes are 1 where
    the varint has a byte (viewed as 4 bools: the compress mask)."""
    v = np.arange(size, dtype=np.uint32)
    b1, b2 = (v >= 0x80).astype(np.uint32), (v >= 0x4000).astype(np.uint32)
    word = (v & 0x7F) | (b1 << 7) | ((((v >> 7) & 0x7F) | (b2 << 7)) << 8) | ((v >> 14) << 16)
    return word.astype("<u4"), (np.uint32(1) | (b1 << 8) | (b2 << 16)).astype("<u4")


def _vbytes(x) -> tuple[np.ndarray, np.ndarray]:
    """Varints (values in [0, 2**21)) of each row of `x` [n, m], concatenated: (flat uint8, bytes per row)."""
    x = np.asarray(x).reshape(len(x), -1)
    hi = int(x.max()) if x.size else 0
    if hi < 0x80:  # one byte each: 0/1 features, short positions, most lengths
        return x.astype(np.uint8).ravel(), np.full(len(x), x.shape[1], np.int64)
    if hi >= 1 << 21 or int(x.min()) < 0:
        raise ValueError("varint value out of [0, 2**21)")
    word, mask = _varint_tables(max(1 << 15, 1 << hi.bit_length()))
    m = mask[x]
    nb = m.view(np.uint8).reshape(x.shape + (4,)).sum(axis=(1, 2), dtype=np.int64)
    return np.compress(m.view(np.bool_).ravel(), word[x].view(np.uint8).ravel()), nb


def encode_records(ex: dict, keys=KEYS) -> tuple[bytes, np.ndarray, np.ndarray | None]:
    """Examples (as from `generate`; `keys`: the features, sorted) → (the serialized tf.train.Examples back to
    back, the size of each, the offset of each record's input_ids payload in those bytes, None without
    input_ids).  A feature is an int array [n, m] (values in [0, 2**21)), a float32 array [n, m], or a tuple
    (flat uint8, bytes per record) for one bytes value per record.  Records are byte-identical to
    TensorFlow's deterministic serialization.  A map entry: 0x0a len(entry) | 0x0a len(key) key | 0x12 len(Feature) | tag len(List) |
    0x0a len(payload) payload, with tag 0x1a (Int64List, packed varints), 0x12 (FloatList, float32) or 0x0a
    (BytesList).  ValueError when a value or a length is 2**21 or more."""
    first, vlen = ex[keys[0]], lambda x: 1 + (x >= 0x80) + (x >= 0x4000)  # bytes of each varint
    n = len(first[1] if isinstance(first, tuple) else first)
    pieces: list[tuple] = []  # ("c", constant bytes) or ("v", flat uint8, bytes per record)
    body, ids_flat, ids_at = np.zeros(n, np.int64), None, None
    for key in keys:
        a, kb = ex[key], key.encode()
        if isinstance(a, tuple):
            (flat, plen), tag = a, b"\x0a"
        elif a.dtype == np.float32:
            flat, plen, tag = np.frombuffer(a.astype("<f4").tobytes(), np.uint8), np.full(n, 4 * a.shape[1]), b"\x12"
        else:
            (flat, plen), tag = _vbytes(a), b"\x1a"
        ids_flat = flat if key == "input_ids" else ids_flat
        lm = 1 + vlen(plen) + plen
        fl = 1 + vlen(lm) + lm
        el = 2 + len(kb) + 1 + vlen(fl) + fl  # len(key) < 128: one byte
        body += 1 + vlen(el) + el
        for p in (b"\x0a", el, b"\x0a" + bytes([len(kb)]) + kb + b"\x12", fl, tag, lm, b"\x0a", plen, (flat, plen)):
            if isinstance(p, np.ndarray):  # a length: one constant for fixed-size features, else varints
                p = _vbytes(p[:1, None])[0].tobytes() if p.min() == p.max() else _vbytes(p[:, None])
            if isinstance(p, bytes):
                pieces.append(("c", pieces.pop()[1] + p) if pieces and pieces[-1][0] == "c" else ("c", p))
            else:
                pieces.append(("v", *p))
    pieces[:0] = [("c", b"\x0a"), ("v", *_vbytes(body[:, None]))]
    rec_len = sum(p[2] if p[0] == "v" else len(p[1]) for p in pieces)
    out = np.empty(int(rec_len.sum()), np.uint8)
    idx = np.int32 if len(out) < 2**31 else np.int64
    at = (np.cumsum(rec_len) - rec_len).astype(idx)
    for p in pieces:
        if p[0] == "c":
            out[at[:, None] + np.arange(len(p[1]), dtype=idx)] = np.frombuffer(p[1], np.uint8)
            at = at + len(p[1])
        else:
            ids_at = at if p[1] is ids_flat else ids_at
            out[np.repeat((at - np.cumsum(p[2]) + p[2]).astype(idx), p[2]) + np.arange(len(p[1]), dtype=idx)] = p[1]
            at = at + p[2].astype(idx)
    return out.tobytes(), rec_len, None if ids_at is None else ids_at.astype(np.int64)


def write_records(path: str, buf: bytes, lens: list[int], durable: bool = True) -> int:
    """Write the records serialized back to back in `buf` (sizes `lens`) as a TFRecord file, atomically
    (storage/atomic.py); returns the file's size in bytes."""
    starts = np.cumsum([0] + lens[:-1]).tolist() if lens else []
    with atomic_file(path, durable) as f:
        f.write(frame_records(buf, starts, lens, range(len(lens))))
        return f.tell()
