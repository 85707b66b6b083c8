"""How a compute-only step's time moves within a block after real steps: the T_c a what-if block measures depends
on how long after the switch from the real pipeline it starts timing (issue 29).

For each round: 10 real steps of a tests/programs/keras_fit_shapes.py shape (its tf.data pipeline), then 40 steps
on its cached batches, each timed; printed per round, side by side in one process, are the mean cached step over
steps 2–6, 7–16 and 17–40 after the switch.  The probe (train/probe.py run_block) and the bench's truth
(keras_fit_shapes.Truth) both start timing after 1–3 untimed steps and 3 recent real steps' worth of time, so
both sit in the first two columns; a machine whose later steps run faster gives both a T_c above the long-run one.

    python tools/bench/bench_probe_settle.py --shape tokenize --rounds 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "programs"))

SPANS = ((1, 6), (6, 16), (16, 40))  # step indices after the switch (0 is the first cached step)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="tokenize")
    p.add_argument("--rounds", type=int, default=6)
    a = p.parse_args(argv)
    import keras

    import keras_fit_shapes as shapes

    t0, load0 = time.time(), os.getloadavg()[0]
    keras.utils.set_random_seed(0)
    model, ds = shapes.build(a.shape, 1.0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    truth = shapes.Truth(model, ds, 8)  # traces both sources off the clock
    rows = []
    for k in range(a.rounds):
        real = shapes._timed(truth.step, truth.real, 10 + shapes.SETTLE)
        cached = []
        for _ in range(SPANS[-1][1]):
            s = time.perf_counter()
            float(truth.step(truth.cached)["loss"])
            cached.append((time.perf_counter() - s) * 1e3)
        spans = [statistics.fmean(cached[i:j]) for i, j in SPANS]
        rows.append((statistics.fmean(real), *spans))
        print(f"[bench] round {k + 1}/{a.rounds}", file=sys.stderr, flush=True)
    print(f"\n**{a.shape}: cached steps after 10 real ones, mean ms by position after the switch**\n")
    print("| round | real step T | cached steps 2–6 | 7–16 | 17–40 | (2–6) − (17–40) |")
    print("|---|---|---|---|---|---|")
    for k, (t, s1, s2, s3) in enumerate(rows):
        print(f"| {k + 1} | {t:.2f} | {s1:.2f} | {s2:.2f} | {s3:.2f} | {s1 - s3:+.2f} |")
    d = [r[1] - r[3] for r in rows]
    share = [(r[1] - r[3]) / r[0] for r in rows]
    print(f"\nmean (2–6) − (17–40): {statistics.fmean(d):+.2f} ms (per round {min(d):+.2f} … {max(d):+.2f}), "
          f"{100 * statistics.fmean(share):+.1f} pp of the real step; {time.time() - t0:.0f} s, load "
          f"{load0:.1f} → {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
