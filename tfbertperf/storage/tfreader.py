"""TF's own TFRecord reader with our accounting: bytes, requests and busy read time for reads we do not make.

Local shards (and gs:// in native mode) are read by `tf.data.TFRecordDataset`, whose file reads never pass
through our backends.  `counted_tfrecords` keeps TF's reader and counts what it delivers:

* records are grouped `per_read` at a time — about one reader buffer (`buffer_size` bytes) — and the first record
  of each group is stamped (perf_counter) as it leaves the reader, in a `scan` (which tf.data does not fuse or
  parallelize);
* one group = one request: its bytes are the records' payloads plus the 16 bytes of TFRecord framing each (the
  file bytes the reader consumed), its read time the span from that stamp to the group's arrival at the tally,
  scaled by n / (n − 1) (the batch pulls the group's records back to back, so little but reading sits in it).

These reads happen inline in the pipeline (the parser waits for them): they are blocking read time.
"""

from __future__ import annotations

import time

FRAMING_BYTES = 16  # per TFRecord: length (8) + length CRC (4) + data CRC (4)


def counted_tfrecords(filename, metrics, *, per_read: int, buffer_size: int):
    """TFRecordDataset(filename) whose reads are recorded in `metrics` (a StorageMetrics), as described above."""
    import tensorflow as tf

    per_read = max(1, int(per_read))

    def _now():
        return time.perf_counter()

    def _count(nbytes, n, first):
        n, end = int(n), time.perf_counter()
        span = max(0.0, end - float(first)) * (n / (n - 1) if n > 1 else 1.0)
        metrics.record(int(nbytes), span * 1e3, blocking=True, traced=True, end=end)
        return nbytes

    def stamp(k, record):
        # the clock is read once per group, as its first record leaves the reader (a py_function, not
        # tf.timestamp: that op is refused under op determinism)
        t = tf.cond(tf.equal(k % per_read, 0), lambda: tf.py_function(_now, [], tf.float64),
                    lambda: tf.constant(0.0, tf.float64))
        return k + 1, (record, t)

    def tally(records, stamps):
        n = tf.size(records, out_type=tf.int64)
        nbytes = tf.reduce_sum(tf.cast(tf.strings.length(records), tf.int64)) + FRAMING_BYTES * n
        done = tf.py_function(_count, [nbytes, n, stamps[0]], tf.int64)
        with tf.control_dependencies([done]):
            return tf.identity(records)

    ds = tf.data.TFRecordDataset(filename, buffer_size=buffer_size)
    ds = ds.scan(tf.constant(0, tf.int64), stamp)
    return ds.batch(per_read).map(tally).unbatch()
