"""XSpace's protobuf wire format decoded with numpy (xspace.py read_columns, issue 32): varints one at a time and
for many messages at once, a chunk of messages' fields as columns, and a plane's interned strings."""

from __future__ import annotations

import numpy as np

MISSING = np.iinfo(np.int64).min
"""The value of a numeric stat an event does not carry."""


class CorruptXSpace(Exception):
    """The bytes are not a well-formed XSpace (the reason is the message)."""


def _varint(buf, p: int) -> tuple[int, int]:
    """(value, position after it) of one varint at buf[p]."""
    value = shift = 0
    while True:
        try:
            b = buf[p]
        except IndexError:
            raise CorruptXSpace(f"truncated varint at byte {p}") from None
        value |= (b & 0x7F) << shift
        p += 1
        if b < 0x80:
            return value, p
        shift += 7
        if shift > 63:
            raise CorruptXSpace(f"varint too long at byte {p}")


def _field_at(buf, p: int, end: int) -> tuple[int, int, object, int]:
    """(field number, wire type, value — a number, (start, end) of a length-delimited payload, or None for a
    fixed-size one —, position after it) of the one field at buf[p], inside a message ending at `end`."""
    tag, p = _varint(buf, p)
    num, wt = tag >> 3, tag & 7
    if wt == 0:
        value, p = _varint(buf, p)
    elif wt == 2:
        n, p = _varint(buf, p)
        value = (p, p + n)
        p += n
    elif wt == 1:
        value, p = None, p + 8
    elif wt == 5:
        value, p = None, p + 4
    else:
        raise CorruptXSpace(f"wire type {wt} at byte {p}")
    if p > end or num == 0:
        raise CorruptXSpace(f"field {num} runs past its message at byte {p}")
    return num, wt, value, p


def _fields(buf, p: int, end: int):
    """(field number, wire type, value) of each field of the message buf[p:end] (_field_at)."""
    while p < end:
        num, wt, value, p = _field_at(buf, p, end)
        yield num, wt, value


def _nvarint(a: np.ndarray, p: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized varints: (values as int64 — two's complement, as protobuf writes negative int64s — and the
    positions after them) of the varints at positions p of the byte array a; a varint that runs to `limit` (its
    message's end) or past 10 bytes is corrupt."""
    if np.any(p >= limit):
        raise CorruptXSpace("field runs past its message")
    b = a[p]
    more = np.flatnonzero(b >= 0x80)
    value = b.astype(np.int64)
    q = p + 1
    if not more.size:  # the common case: one-byte values (tags, small ids, short lengths)
        return value, q
    value &= 0x7F
    shift = 7
    while more.size:
        if shift > 63 or np.any(q[more] >= limit[more]):
            raise CorruptXSpace("truncated varint")
        b = a[q[more]]
        value[more] |= (b & 0x7F).astype(np.int64) << shift
        q[more] += 1
        more = more[b >= 0x80]
        shift += 7
    return value, q


_HIGH_BITS = np.uint64(0x8080808080808080)
_GROUP_MASKS = [np.uint64(0x7F << (7 * k)) for k in range(8)]


def _nvarint_wide(a: np.ndarray, words: np.ndarray, p: np.ndarray, limit: np.ndarray):
    """_nvarint for fields of several bytes (times in picoseconds: 5-7 bytes): eight bytes read at once per
    varint (`words`: the map viewed as unaligned little-endian uint64 at every byte offset) and the 7-bit groups
    gathered with shifts, instead of one pass per byte.  Varints near the map's end or longer than 8 bytes go to
    _nvarint."""
    slow = p >= len(words)
    w = words[np.where(slow, 0, p)]
    term = ~w & _HIGH_BITS  # bit 7 of every byte that ends a varint
    slow |= term == 0
    low = term & (~term + np.uint64(1))  # the first ending byte's bit 7
    x = w & ((low << np.uint64(1)) - np.uint64(1))  # the bytes up to it (all 8 when it is the last)
    value = np.zeros(len(p), dtype=np.uint64)
    for k, m in enumerate(_GROUP_MASKS):
        value |= (x >> np.uint64(k)) & m
    nbytes = (np.log2(low.astype(np.float64) + 1.0).astype(np.int64) + 1) // 8  # low = 2^(8k+7) → k + 1 bytes
    q = p + nbytes
    value = value.view(np.int64)
    if slow.any():
        i = np.flatnonzero(slow)
        value[i], q[i] = _nvarint(a, p[i], limit[i])
    if np.any(q > limit):
        raise CorruptXSpace("truncated varint")
    return value, q


def _decode_messages(a: np.ndarray, start: np.ndarray, end: np.ndarray, varints: tuple, nested: int | None):
    """Decode many small messages at once.  Returns ({field: (indices, uint64 values)} for the varint fields in
    `varints`, (indices, payload starts, payload ends) of the length-delimited field `nested`, {field: (indices,
    payload starts, ends)} of the other length-delimited fields, {field: (indices, positions)} of fixed64 fields).
    Fields repeat in any order; the last of a repeated scalar wins, as in protobuf."""
    out = {f: ([], []) for f in varints}
    sub_i, sub_s, sub_e = [], [], []
    lens: dict = {}
    fixed: dict = {}
    idx = np.flatnonzero(start < end)
    pos = start.copy()
    while idx.size:
        p, lim = pos[idx], end[idx]
        tag, p = _nvarint(a, p, lim)
        num, wt = tag >> 3, tag & 7
        if np.any((num == 0) | (wt == 3) | (wt == 4) | (wt > 5)):
            raise CorruptXSpace("bad field tag")
        m = wt == 0
        if m.any():
            v, q = _nvarint(a, p[m], lim[m])
            p[m] = q
            for f in varints:
                k = num[m] == f
                if k.any():
                    out[f][0].append(idx[m][k])
                    out[f][1].append(v[k])
        m = wt == 2
        if m.any():
            n, q = _nvarint(a, p[m], lim[m])
            qe = q + n
            p[m] = qe
            for f in np.unique(num[m]).tolist():
                k = num[m] == f
                dest = (sub_i, sub_s, sub_e) if f == nested else lens.setdefault(f, ([], [], []))
                dest[0].append(idx[m][k])
                dest[1].append(q[k])
                dest[2].append(qe[k])
        for w, width in ((1, 8), (5, 4)):
            m = wt == w
            if m.any():
                fixed.setdefault(w, ([], [], []))
                fixed[w][0].append(idx[m])
                fixed[w][1].append(p[m])
                fixed[w][2].append(num[m])
                p[m] += width
        if np.any(p > lim):
            raise CorruptXSpace("field runs past its message")
        pos[idx] = p
        idx = idx[p < lim]

    def cat(parts, dtype=np.int64):
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    varint_out = {f: (cat(i), cat(v)) for f, (i, v) in out.items()}
    sub = (cat(sub_i), cat(sub_s), cat(sub_e))
    lens_out = {f: tuple(cat(x) for x in v) for f, v in lens.items()}
    fixed_out = {w: tuple(cat(x) for x in v) for w, v in fixed.items()}
    return varint_out, sub, lens_out, fixed_out


def _last(n: int, idx: np.ndarray, values: np.ndarray, fill, dtype) -> np.ndarray:
    col = np.full(n, fill, dtype=dtype)
    col[idx] = values  # a repeated field: numpy assigns in order, so the last one wins, as protobuf's parser does
    return col


class _Strings:
    """A plane's interned string stat values: ref_value → the stat metadata's name, str_value → the text."""

    def __init__(self, stat_names: dict):
        self.values: list[str] = []
        self.codes: dict[str, int] = {}
        self.stat_names = stat_names

    def code(self, text: str) -> int:
        c = self.codes.get(text)
        if c is None:
            c = self.codes[text] = len(self.values)
            self.values.append(text)
        return c
