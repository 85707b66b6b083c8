"""How long a user's Keras fit runs ahead of its pipeline after a pause as long as a probe block: the steps after a
60 ms pause against the steps before it, on each Keras backend (issue 29's open limit, docs/own-training.md).

The fit is tests/programs/keras_jax_tfdata_by_hand.py's (a per-example map with random noise, no parallel calls,
prefetch 2, in front of a 128 → 512 → 512 → 2 MLP): one `model.fit` of 400 steps with a callback that sleeps at
steps 100, 200 and 300 (what a probe block's ~60 ms of cached steps does to the real pipeline: it keeps filling its
buffers).  Per pause and backend: the median step in the 40 steps before it, in steps 1–20, 21–40 and 41–80 after
it, their ratio to the steps before, and the drain (the steps after the pause until an 8-step median is back
within 15 % of the steps before).  A ratio under 1 far past the pause is steps fed from buffers filled during it:
a probe whose blocks come closer than the drain times the drain, not the fit.

    python tools/bench/bench_fit_drain.py [--backends tensorflow,jax] [--pause-ms 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAUSES = (100, 200, 300)

CHILD = r"""
import json, os, sys, time
sys.argv = [sys.argv[0], "--backend=" + os.environ["KERAS_BACKEND"]]
sys.path.insert(0, os.path.join(%(root)r, "tests", "programs"))
import keras
from keras_jax_tfdata_by_hand import compiled_model, pipeline
model, ds = compiled_model(), pipeline()
model.fit(ds, epochs=1, steps_per_epoch=20, verbose=0)
ends = []
class Pause(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        ends.append(time.perf_counter())
        if batch in %(pauses)r:
            time.sleep(%(pause)f)
model.fit(ds, epochs=1, steps_per_epoch=400, verbose=0, callbacks=[Pause()])
print(json.dumps([(b - a) * 1e3 for a, b in zip(ends, ends[1:])]))
"""


def drain(steps: list[float], pause: int, before: float) -> int:
    """Steps after the pause until an 8-step median is back within 15 % of `before` (the window's first step)."""
    for k in range(pause + 1, len(steps) - 8):
        if statistics.median(steps[k:k + 8]) >= 0.85 * before:
            return k - pause - 1
    return len(steps) - pause - 1


def _backends(value: str) -> list[str]:
    names = value.split(",")
    bad = [n for n in names if n not in ("tensorflow", "jax")]
    if bad:
        raise argparse.ArgumentTypeError(f"{bad[0]!r} is not a Keras backend this bench runs (tensorflow, jax)")
    return names


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="tensorflow,jax", type=_backends, help="comma-separated: tensorflow, jax")
    p.add_argument("--pause-ms", type=float, default=60.0)
    a = p.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}", flush=True)
    for backend in a.backends:
        code = CHILD % {"root": str(ROOT), "pauses": PAUSES, "pause": a.pause_ms / 1e3}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                             env={**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"})
        if out.returncode != 0:
            sys.exit(f"{backend}: the fit failed: {out.stderr.strip().splitlines()[-1:]}")
        steps = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{backend}: median step before a {a.pause_ms:.0f} ms pause, and after it (÷ before)")
        for at in PAUSES:
            before = statistics.median(steps[at - 40:at])
            parts = [statistics.median(steps[at + lo:at + hi]) for lo, hi in ((1, 21), (21, 41), (41, 81))]
            print(f"  pause at step {at}: before {before:.2f} ms | 1–20 {parts[0]:.2f} ({parts[0] / before:.2f}) | "
                  f"21–40 {parts[1]:.2f} ({parts[1] / before:.2f}) | 41–80 {parts[2]:.2f} ({parts[2] / before:.2f})"
                  f" | drain {drain(steps, at, before)} steps", flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
