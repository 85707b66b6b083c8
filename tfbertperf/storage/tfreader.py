"""TF's own TFRecord reader with our accounting: bytes, requests and busy read time for reads we do not make.

Local shards (and gs:// in native mode) are read by `tf.data.TFRecordDataset`, whose file reads never pass
through our backends.  `counted_tfrecords` keeps TF's reader and counts what it delivers:

* records are grouped `per_read` at a time — about one reader buffer (`buffer_size` bytes) — and the clock is
  read just before each group is pulled (a zip whose first input is a clock: zip pulls its inputs in order);
* one group = one request: its bytes are the records' payloads plus the 16 bytes of TFRecord framing each (the
  file bytes the reader consumed), its read time the span from that clock reading to the group's tally (the
  batch pulls the group's records back to back, so nothing but reading sits in it).
* the reading thread's wait for a core over that span (storage/base.py thread_core_wait: clock and tally run on
  the interleave's thread, one after the other) is recorded apart: on a saturated CPU a page-cache read lasts
  as long as its thread waits for a core, which is the CPU's doing, not the disk's.

Cost: two py_functions per group (~256 KiB) and a batch/unbatch; tools/bench/bench_local_counting.py measures
it against the bare reader, tools/bench/bench_core_wait_clock.py the core-wait reading against the reader without.

These reads happen inline in the pipeline (the parser waits for them): they are blocking read time.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from tfbertperf.storage.base import thread_core_wait

FRAMING_BYTES = 16  # per TFRecord: length (8) + length CRC (4) + data CRC (4)


def counted_record_batches(filename, metrics, *, per_read: int, buffer_size: int, compression_type: str = ""):
    """TFRecordDataset(filename) in groups of `per_read` records (1-D string tensors), each group's read recorded
    in `metrics` (a StorageMetrics) as described above.  `compression_type` "GZIP": the bytes counted are the
    records' as decompressed (TF's reader does not say how many compressed bytes it read)."""
    import tensorflow as tf

    def _now():
        wait = thread_core_wait()
        return np.array([time.perf_counter(), -1.0 if wait is None else wait, threading.get_native_id()])

    def _count(nbytes, first):
        end = time.perf_counter()
        t0, wait0, tid = (float(x) for x in first.numpy())
        wait = thread_core_wait() if int(tid) == threading.get_native_id() and wait0 >= 0 else None
        metrics.record(int(nbytes), max(0.0, end - t0) * 1e3, blocking=True, traced=True, end=end,
                       core_wait_ms=None if wait is None else (wait - wait0) * 1e3)
        return nbytes

    def tally(start, records):
        n = tf.size(records, out_type=tf.int64)
        nbytes = tf.reduce_sum(tf.cast(tf.strings.length(records), tf.int64)) + FRAMING_BYTES * n
        done = tf.py_function(_count, [nbytes, start], tf.int64)
        with tf.control_dependencies([done]):
            return tf.identity(records)

    # zip pulls its inputs in order: the clock is read, then the batch pulls its records back to back, so the
    # span from that reading to the tally is the group's read (a py_function, not tf.timestamp: that op is
    # refused under op determinism)
    clock = tf.data.Dataset.from_tensors(0).repeat().map(lambda _: tf.py_function(_now, [], tf.float64))
    groups = tf.data.TFRecordDataset(filename, compression_type=compression_type,
                                     buffer_size=buffer_size).batch(max(1, int(per_read)))
    return tf.data.Dataset.zip((clock, groups)).map(tally)


def counted_tfrecords(filename, metrics, *, per_read: int, buffer_size: int, compression_type: str = ""):
    """The same, one record per element."""
    return counted_record_batches(filename, metrics, per_read=per_read, buffer_size=buffer_size,
                                  compression_type=compression_type).unbatch()
