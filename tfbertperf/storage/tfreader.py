"""TF's own TFRecord reader with our accounting: bytes, requests and busy read time for reads we do not make.

Local shards (and gs:// in native mode) are read by `tf.data.TFRecordDataset`, whose file reads never pass
through our backends.  `counted_tfrecords` keeps TF's reader and counts what it delivers:

* each record is stamped (`tf.timestamp`) as it leaves the reader, in a `scan` (which tf.data does not fuse or
  parallelize), and records are grouped `per_read` at a time — about one reader buffer (`buffer_size` bytes);
* one group = one request: its bytes are the records' payloads plus the 16 bytes of TFRecord framing each (the
  file bytes the reader consumed), its read time the span between its first and last record scaled by
  n / (n − 1) (the batch pulls the group's records back to back, so nothing but reading sits in that span).

These reads happen inline in the pipeline (the parser waits for them): they are blocking read time.
Under op determinism (train.deterministic) TF refuses `tf.timestamp`; the stamp is then Python's clock through a
py_function (tens of µs a record, for a mode that trades speed for repeatability anyway).
"""

from __future__ import annotations

import time

FRAMING_BYTES = 16  # per TFRecord: length (8) + length CRC (4) + data CRC (4)


def counted_tfrecords(filename, metrics, *, per_read: int, buffer_size: int):
    """TFRecordDataset(filename) whose reads are recorded in `metrics` (a StorageMetrics), as described above."""
    import tensorflow as tf

    def _count(nbytes, n, first, last):
        n = int(n)
        span = max(0.0, float(last) - float(first)) * (n / (n - 1) if n > 1 else 1.0)
        end = time.perf_counter() - max(0.0, time.time() - float(last))  # the wall clock → perf_counter
        metrics.record(int(nbytes), span * 1e3, blocking=True, traced=True, end=end)
        return nbytes

    def tally(records, stamps):
        n = tf.size(records, out_type=tf.int64)
        nbytes = tf.reduce_sum(tf.cast(tf.strings.length(records), tf.int64)) + FRAMING_BYTES * n
        done = tf.py_function(_count, [nbytes, n, stamps[0], stamps[-1]], tf.int64)
        with tf.control_dependencies([done]):
            return tf.identity(records)

    from tensorflow.python.framework import config as tf_config  # no public query of op determinism

    if tf_config.is_op_determinism_enabled():
        def stamp():
            return tf.reshape(tf.py_function(time.time, [], tf.float64), [])
    else:
        stamp = tf.timestamp
    ds = tf.data.TFRecordDataset(filename, buffer_size=buffer_size)
    ds = ds.scan(tf.constant(0, tf.int8), lambda s, r: (s, (r, stamp())))
    return ds.batch(max(1, int(per_read))).map(tally).unbatch()
