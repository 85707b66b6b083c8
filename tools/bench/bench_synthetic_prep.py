"""Synthetic pretraining shards: MB/s written to local disk and record sizes, at seq 128 and 512.

    python tools/bench/bench_synthetic_prep.py [--size 500MB] [--out DIR] [--workers N] [--keep] [--sync]

For each seq_len it writes `--size` of shards with tfbertperf.data.prep.synthetic_shards.write_synthetic into a
fresh directory (default: a temporary directory, removed afterwards unless --keep), then prints:
  seq_len, examples, shards, workers, MB written (10^6 bytes, TFRecord framing included), seconds (wall, from
  the call to the manifest on disk; into the page cache unless --sync), MB/s, mean serialized record bytes
  (manifest record_bytes_mean), CPU seconds of the writer processes, and the 1-minute load average
  before/after (the machine may be shared).
Then checks that each first shard parses with the project's feature spec (tf.io.parse_example).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _parse_check(out: str, manifest: dict) -> str:
    try:
        import tensorflow as tf
    except Exception as e:  # noqa: BLE001
        return f"parse check skipped ({type(e).__name__})"
    from tfbertperf.data.features import feature_spec

    spec = feature_spec("pretrain", manifest["seq_len"], manifest["max_predictions"])
    ds = tf.data.TFRecordDataset(os.path.join(out, manifest["shards"][0]["name"])).batch(256).take(1)
    b = tf.io.parse_example(next(iter(ds)), spec)
    return f"parse ok: input_ids {b['input_ids'].shape}, masked_lm_ids {b['masked_lm_ids'].shape}"


def main(argv=None) -> int:
    from tfbertperf.data.prep.synthetic_shards import parse_size, write_synthetic

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="500MB", help="bytes per seq_len (500MB, 2GiB, …)")
    ap.add_argument("--seq-lens", default="128,512")
    ap.add_argument("--out", default=None, help="parent directory (default: a temporary directory)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the written shards")
    ap.add_argument("--sync", action="store_true", help="include os.sync() (data on the device, not page cache)")
    a = ap.parse_args(argv)
    size = parse_size(a.size)
    root = a.out or tempfile.mkdtemp(prefix="bench-synthetic-")
    print(f"cpus {os.cpu_count()}, size {size / 1e6:.0f} MB per seq_len, out {root}")
    print("seq_len  examples  shards  workers      MB   seconds   MB/s  record_B  cpu_s  load(before->after)")
    written = []
    try:
        for seq in (int(s) for s in a.seq_lens.split(",")):
            out = os.path.join(root, f"seq{seq}")
            shutil.rmtree(out, ignore_errors=True)
            load0, cpu0, t0 = os.getloadavg()[0], _children_cpu(), time.perf_counter()
            m = write_synthetic(out, size_bytes=size, seq_len=seq, workers=a.workers)
            if a.sync:
                os.sync()
            dt = time.perf_counter() - t0
            cpu = _children_cpu() - cpu0
            mb = sum(s["bytes"] for s in m["shards"]) / 1e6
            workers = a.workers or min(os.cpu_count() or 1, len(m["shards"]))
            print(f"{seq:7d} {m['num_examples']:9d} {len(m['shards']):7d} {workers:8d} {mb:7.1f} {dt:9.2f} "
                  f"{mb / dt:6.1f} {m['record_bytes_mean']:9.1f} {cpu:6.1f}  {load0:.2f}->{os.getloadavg()[0]:.2f}")
            written.append((out, m))
        for out, m in written:  # after all writes: importing TensorFlow starts threads (workers would spawn)
            print(f"seq {m['seq_len']}: {_parse_check(out, m)}")
    finally:
        for out, _ in written if not a.keep else []:
            shutil.rmtree(out, ignore_errors=True)
        if not a.keep and not a.out:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
