"""TFRecord framing, parsed in Python for the stream read mode.

A TFRecord file is a sequence of records, each framed as
    uint64 length (little endian) | uint32 masked CRC32C(length bytes) | data[length] | uint32 masked CRC32C(data)
(tensorflow/core/lib/io/record_writer.cc).  The mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2**32.
Both checks are verified, so a corrupt or truncated shard fails loudly, naming the shard and the byte offset.
"""

from __future__ import annotations

import struct
from typing import Callable, Iterable, Iterator

import google_crc32c

from tfbertperf.errors import UsageError

HEADER_BYTES = 12  # length (8) + length CRC (4)
FOOTER_BYTES = 4  # data CRC
_MASK_DELTA = 0xA282EAD8
_LEN = struct.Struct("<QI")
_U32 = struct.Struct("<I")


def masked_crc32c(data: bytes) -> int:
    """The CRC32C of `data`, masked as TFRecord stores it."""
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    """One record with its TFRecord framing, byte-for-byte as TF writes it."""
    return frame_records(record, [0], [len(record)], [0])


_HEADERS: dict[int, bytes] = {}  # TFRecord header by record length


def _frame_header(n: int) -> bytes:  # uint64 length, masked CRC32C of those 8 bytes
    return struct.pack("<Q", n) + struct.pack("<I", masked_crc32c(struct.pack("<Q", n)))


def frame_records(pool: bytes, starts: list, lens: list, which, p1: list | None = None, ids=None) -> bytes:
    """The one TFRecord framing of every writer: records `which` of `pool` (record j = pool[starts[j]:
    starts[j] + lens[j]]), framed back to back; with `ids` (numpy, < 2**14), record i gets the 2-byte varint of
    ids[i] at offset p1[j] (synthetic shards reuse records with a fresh id; data/prep/synthetic_shards.py)."""
    import numpy as np

    patch = None if ids is None else np.stack([(ids & 0x7F) | 0x80, ids >> 7], 1).astype(np.uint8).tobytes()
    out, crc, pack = [], google_crc32c.value, struct.Struct("<I").pack
    for i, j in enumerate(which):
        s, e = starts[j], starts[j] + lens[j]
        rec = pool[s:e] if patch is None else pool[s:p1[j]] + patch[2 * i:2 * i + 2] + pool[p1[j] + 2:e]
        c, h = crc(rec), _HEADERS.get(len(rec)) or _HEADERS.setdefault(len(rec), _frame_header(len(rec)))
        out += (h, rec, pack((((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF))
    return b"".join(out)


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _resync(buf: bytes, pos: int) -> int | None:
    """The first position after `pos` where a frame header's length CRC checks out (a damaged length field loses
    the frame boundary), or None when `buf` holds none (the caller keeps the last HEADER_BYTES - 1 bytes)."""
    crc = google_crc32c.value
    for p in range(pos + 1, len(buf) - HEADER_BYTES + 1):
        if _masked(crc(buf[p : p + 8])) == _U32.unpack_from(buf, p + 8)[0]:
            return p
    return None


def iter_record_spans(chunks: Iterable[bytes], shard: str, on_corrupt: Callable[[int, str], None] | None = None
                      ) -> Iterator[tuple[bytes, list[int], list[int]]]:
    """Parse a shard delivered as consecutive byte chunks.  For each chunk, yield (buf, starts, lengths): the
    bytes holding that chunk's complete records and where each record's payload sits in them.

    Handing tf.data one buffer plus offsets per chunk (cut into records by `tf.strings.substr` in C++) instead
    of one Python bytes object per record is what lets stream mode keep up with a raw download.  Raises
    UsageError("shard <uri>: …") on a CRC mismatch or a truncated tail — unless `on_corrupt(offset, why)` is
    given: then the damaged frame is skipped and reported through it (a data CRC mismatch skips that one record;
    a length CRC mismatch skips to the next position where a frame header checks out; a truncated tail ends the
    shard), and parsing goes on.
    """
    crc = google_crc32c.value
    buf = b""
    offset = 0  # byte offset in the shard of buf[0]
    resyncing = False
    for chunk in chunks:
        buf = buf + chunk if buf else bytes(chunk)
        starts: list[int] = []
        lengths: list[int] = []
        pos = 0
        n = len(buf)
        while n - pos >= HEADER_BYTES:
            length, len_crc = _LEN.unpack_from(buf, pos)
            if _masked(crc(buf[pos : pos + 8])) != len_crc:
                why = "length CRC mismatch; not a TFRecord file, or damaged"
                if on_corrupt is None:
                    raise UsageError(f"shard {shard}: corrupt TFRecord at byte {offset + pos} ({why})")
                if not resyncing:
                    on_corrupt(offset + pos, why)
                nxt = _resync(buf, pos)
                resyncing = nxt is None
                pos = nxt if nxt is not None else n - HEADER_BYTES + 1
                continue
            resyncing = False
            end = pos + HEADER_BYTES + length + FOOTER_BYTES
            if end > n:
                break  # record continues in the next chunk
            if _masked(crc(buf[pos + HEADER_BYTES : end - FOOTER_BYTES])) != _U32.unpack_from(buf, end - FOOTER_BYTES)[0]:
                if on_corrupt is None:
                    raise UsageError(f"shard {shard}: corrupt TFRecord at byte {offset + pos} (data CRC mismatch)")
                on_corrupt(offset + pos, "data CRC mismatch")
                pos = end
                continue
            starts.append(pos + HEADER_BYTES)
            lengths.append(length)
            pos = end
        if starts:
            yield buf, starts, lengths
        buf = buf[pos:]
        offset += pos
    if buf:
        why = f"{len(buf)} trailing bytes"
        if on_corrupt is None:
            raise UsageError(f"shard {shard}: truncated TFRecord at byte {offset} ({why})")
        if not resyncing:
            on_corrupt(offset, f"truncated, {why}")


def iter_record_batches(chunks: Iterable[bytes], shard: str, on_corrupt=None) -> Iterator[list[bytes]]:
    """Like iter_record_spans, but the records of each chunk as a list of bytes (for Python consumers)."""
    for buf, starts, lengths in iter_record_spans(chunks, shard, on_corrupt):
        yield [buf[a : a + n] for a, n in zip(starts, lengths)]


# ---- GZIP-compressed TFRecord files (TFRecordOptions(compression_type="GZIP")) ---------------------------------
GZIP_MAGIC = b"\x1f\x8b"
COMPRESSION_TYPES = {"none": "", "gzip": "GZIP"}  # data.compression → tf.data.TFRecordDataset's compression_type


def gunzip_chunks(chunks: Iterable[bytes], shard: str) -> Iterator[bytes]:
    """The decompressed bytes of a GZIP file delivered as consecutive chunks (concatenated members too, as
    `cat a.gz b.gz` makes).  Damaged or truncated GZIP data raises UsageError("shard <uri>: …")."""
    import zlib

    d = zlib.decompressobj(wbits=31)
    in_member = False  # bytes of a member were fed and its end not seen yet
    try:
        for chunk in chunks:
            data = bytes(chunk)
            while data:
                in_member = True
                out = d.decompress(data)
                if out:
                    yield out
                if d.eof:  # a member ended; whatever follows is the next member
                    data, in_member = d.unused_data, False
                    d = zlib.decompressobj(wbits=31)
                else:
                    data = b""
    except zlib.error as e:
        raise UsageError(f"shard {shard}: damaged GZIP data ({e})") from None
    if in_member:
        raise UsageError(f"shard {shard}: truncated GZIP data (the compressed stream ends early)")


def head_kind(head: bytes) -> str | None:
    """What the first bytes of a file are: "gzip" (the GZIP magic), "tfrecord" (a frame header whose length CRC
    checks out, or an empty file), or None (neither: not a TFRecord file)."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if not head:
        return "tfrecord"
    if len(head) < HEADER_BYTES:
        return None
    return "tfrecord" if _masked(google_crc32c.value(head[:8])) == _U32.unpack_from(head, 8)[0] else None
