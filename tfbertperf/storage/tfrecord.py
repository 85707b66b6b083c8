"""TFRecord framing, parsed in Python for the stream read mode.

A TFRecord file is a sequence of records, each framed as
    uint64 length (little endian) | uint32 masked CRC32C(length bytes) | data[length] | uint32 masked CRC32C(data)
(tensorflow/core/lib/io/record_writer.cc).  The mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2**32.
Both checks are verified, so a corrupt or truncated shard fails loudly, naming the shard and the byte offset.
"""

from __future__ import annotations

import struct
from typing import Iterable, Iterator

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
    """One record with its TFRecord framing (used by tests to write shards byte-for-byte like TF does)."""
    length = struct.pack("<Q", len(record))
    return length + _U32.pack(masked_crc32c(length)) + record + _U32.pack(masked_crc32c(record))


def iter_record_spans(chunks: Iterable[bytes], shard: str) -> Iterator[tuple[bytes, list[int], list[int]]]:
    """Parse a shard delivered as consecutive byte chunks.  For each chunk, yield (buf, starts, lengths): the
    bytes holding that chunk's complete records and where each record's payload sits in them.

    Handing tf.data one buffer plus offsets per chunk (cut into records by `tf.strings.substr` in C++) instead
    of one Python bytes object per record is what lets stream mode keep up with a raw download.  Raises
    UsageError("shard <uri>: …") on a CRC mismatch or a truncated tail.
    """
    crc = google_crc32c.value
    buf = b""
    offset = 0  # byte offset in the shard of buf[0]
    for chunk in chunks:
        buf = buf + chunk if buf else bytes(chunk)
        starts: list[int] = []
        lengths: list[int] = []
        pos = 0
        n = len(buf)
        while n - pos >= HEADER_BYTES:
            length, len_crc = _LEN.unpack_from(buf, pos)
            c = crc(buf[pos : pos + 8])
            if (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF != len_crc:
                raise UsageError(
                    f"shard {shard}: corrupt TFRecord at byte {offset + pos} (length CRC mismatch; not a TFRecord "
                    "file, or damaged)"
                )
            end = pos + HEADER_BYTES + length + FOOTER_BYTES
            if end > n:
                break  # record continues in the next chunk
            c = crc(buf[pos + HEADER_BYTES : end - FOOTER_BYTES])
            if (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF != _U32.unpack_from(buf, end - FOOTER_BYTES)[0]:
                raise UsageError(f"shard {shard}: corrupt TFRecord at byte {offset + pos} (data CRC mismatch)")
            starts.append(pos + HEADER_BYTES)
            lengths.append(length)
            pos = end
        if starts:
            yield buf, starts, lengths
        buf = buf[pos:]
        offset += pos
    if buf:
        raise UsageError(f"shard {shard}: truncated TFRecord at byte {offset} ({len(buf)} trailing bytes)")


def iter_record_batches(chunks: Iterable[bytes], shard: str) -> Iterator[list[bytes]]:
    """Like iter_record_spans, but the records of each chunk as a list of bytes (for Python consumers)."""
    for buf, starts, lengths in iter_record_spans(chunks, shard):
        yield [buf[a : a + n] for a, n in zip(starts, lengths)]
