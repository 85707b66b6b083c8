"""What counting local reads costs: TF's TFRecordDataset alone vs the same reader with our accounting
(storage/tfreader.py: a scan stamping each record, a batch per reader buffer, one py_function per batch).

Both read the same shards, whole passes, taking turns (A B A B …) so that a shared VM's drift hits both; each
figure is the median over --reps passes.  Prints records/s of each and the ratio counted / plain.

    python tools/bench/bench_local_counting.py                  # the default data set (prepared on first use)
    python tools/bench/bench_local_counting.py --data DIR --reps 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="", help="a prepared data dir (default: the embedded default data set)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--passes", type=int, default=10, help="passes over the data per timed repetition")
    a = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from tfbertperf.config import load_config
    from tfbertperf.job import Inputs
    from tfbertperf.storage.local import READ_BYTES
    from tfbertperf.storage.tfreader import counted_tfrecords

    cfg = load_config(data_uri=a.data or None)
    inputs = Inputs(cfg, progress=True)
    paths = [str(p) for p in inputs.shard_uris]
    per_read = max(1, READ_BYTES // inputs.record_bytes_hint)
    metrics = inputs.backend.metrics
    files = tf.data.Dataset.from_tensor_slices(paths).repeat(a.passes)

    def plain(f):
        return tf.data.TFRecordDataset(f, buffer_size=READ_BYTES)

    def counted(f):
        return counted_tfrecords(f, metrics, per_read=per_read, buffer_size=READ_BYTES)

    def rate(read) -> float:
        ds = files.interleave(read, cycle_length=tf.data.AUTOTUNE, num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(4096)  # Python's per-element cost would otherwise be all that is measured
        t0, n = time.perf_counter(), 0
        for b in ds:
            n += int(b.shape[0])
        return n / (time.perf_counter() - t0)

    rate(plain), rate(counted)  # warm the page cache and tf.data
    runs = {"plain": [], "counted": []}
    for _ in range(a.reps):
        runs["plain"].append(rate(plain))
        runs["counted"].append(rate(counted))
    p, c = statistics.median(runs["plain"]), statistics.median(runs["counted"])
    size = sum(os.path.getsize(x) for x in paths)
    print(f"data: {len(paths)} shards, {size / 1e6:.2f} MB, {a.passes} passes per repetition, {a.reps} reps")
    print(f"| reader | records/s (median) |\n|---|---|\n| TFRecordDataset | {p:,.0f} |\n"
          f"| TFRecordDataset + our counting | {c:,.0f} |")
    print(f"counted / plain: {c / p:.3f}")
    s = metrics.summary()
    print(f"counted: {s['bytes_read'] / 1e6:.2f} MB in {s['requests']} requests, read {s['read_mb_per_sec']} MB/s "
          f"(bytes / busy read time)")


if __name__ == "__main__":
    main()
