"""How repeatable the input ceiling is: the same pipeline's ceiling (data/ceiling.py, as every run measures it)
measured --reps times back to back in one process, for each of --seconds, on local synthetic shards.  Prints each
figure and the spread (max − min) ÷ median — the scatter any "achieved vs ceiling" comparison inherits.

    python tools/bench/bench_ceiling_repeat.py --n 512 --seconds 3,8 --reps 4    # tuned, global batch 32 × 512
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="24MB")
    ap.add_argument("--n", type=int, default=512, help="emulated devices: global batch 32 × n")
    ap.add_argument("--preset", default="tuned")
    ap.add_argument("--seconds", default="3,8")
    ap.add_argument("--reps", type=int, default=4)
    a = ap.parse_args(argv)

    import bench_accelerators as b
    from tfbertperf.data.prep.synthetic_shards import parse_size, write_synthetic

    local = os.path.join(tempfile.mkdtemp(prefix="bench-ceil-"), "syn")
    write_synthetic(local, size_bytes=parse_size(a.size), seq_len=128, shards=16)
    sets = b.A100 + ["data.read_latency_ms=0", f"pipeline.preset={a.preset}", f"train.batch_size={32 * a.n}"]
    for s in (float(x) for x in a.seconds.split(",")):
        got = [b.ceiling(local, sets, s)["examples_per_sec"] for _ in range(a.reps)]
        print(f"N={a.n} ({a.preset}), ceiling over {s:g} s: {' / '.join(f'{x:,.0f}' for x in got)}  spread "
              f"{(max(got) - min(got)) / statistics.median(got):.0%}  load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
