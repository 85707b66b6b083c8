"""What the read clock's core-wait reading costs: TF's reader counted as before e97fbf1 (its parent 007f8fc: a
perf_counter clock and tally per group) vs as now (the same, plus the reading thread's run-queue wait from
/proc/thread-self/schedstat at both ends, storage/base.py thread_core_wait).

Both read the same local shards through a 2-way parallel interleave, 10 passes per timing, in rounds whose order
alternates (A B, B A, …) so a shared VM's drift hits both; prints each one's median records/s and the per-round
ratios new / old.

    python tools/bench/bench_core_wait_clock.py                 # the default data set (prepared on first use)
    python tools/bench/bench_core_wait_clock.py --data DIR --rounds 9
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
BEFORE = "007f8fc"


def _old_module():
    src = subprocess.run(["git", "-C", ROOT, "show", f"{BEFORE}:tfbertperf/storage/tfreader.py"],
                         capture_output=True, text=True, check=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "tfreader_before.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("tfreader_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="", help="a prepared data dir (default: the embedded default data set)")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from tfbertperf.storage import tfreader
    from tfbertperf.storage.base import StorageMetrics

    from tfbertperf.config import load_config
    from tfbertperf.job import Inputs

    files = [str(p) for p in Inputs(load_config(data_uri=a.data or None), progress=True).shard_uris]
    old = _old_module()

    def rate(mod) -> float:
        m = StorageMetrics()
        ds = tf.data.Dataset.from_tensor_slices(files).interleave(
            lambda f: mod.counted_record_batches(f, m, per_read=320, buffer_size=256 * 1024),
            cycle_length=2, num_parallel_calls=2).unbatch().batch(4096)
        t, n = time.perf_counter(), 0
        for _ in range(10):
            for x in ds:
                n += int(x.shape[0])
        return n / (time.perf_counter() - t)

    res = {"before": [], "now": []}
    pair = (("before", old), ("now", tfreader))
    for r in range(a.rounds):
        for name, mod in (pair if r % 2 == 0 else pair[::-1]):
            res[name].append(rate(mod))
        print(f"round {r + 1}/{a.rounds}", file=sys.stderr, flush=True)
    b, n = statistics.median(res["before"]), statistics.median(res["now"])
    print(f"{len(files)} shards; records/s, median of {a.rounds}: before ({BEFORE}) {b:,.0f}, now {n:,.0f}, "
          f"now / before {n / b:.3f}")
    print("per-round now / before:", ", ".join(f"{y / x:.3f}" for x, y in zip(res["before"], res["now"])))


if __name__ == "__main__":
    main()
