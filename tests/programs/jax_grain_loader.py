"""A user's own JAX loop on the CPU fed by Grain's DataLoader (`grain.python`, the loader JAX's docs point to): a
random-access source of examples, a per-example NumPy transform (noise, masking, a normalisation, ~--ms a batch in
all), batched, in --workers child processes; captured with StepTimer, next to its what-if truth measured in the same
process: T the step on the loader (before and after the capture, its first steps left out while the workers start),
T_c the same jitted step on one cached batch with no loader running — before the loader's iterator starts and after
it is deleted (Grain's workers cannot be paused, and a cached block beside them measured their CPU too: 11-12 ms
against 7-8 alone).  Not alternating: the two halves are printed.
Grain is not among the project's dependencies: `pip install grain` (0.2.18 was used) to run it.

    python tests/programs/jax_grain_loader.py --workers 2 --ms 5 --out /tmp/g

Prints one JSON line: {"loader", "workers", "ms", "truth", "T_ms", "T_c_ms", "halves", "logdir", "step_file",
"load"}.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jax_cpu_loader import SHAPE, make_step, timed  # noqa: E402

ROWS = 4096


class Source:
    """ROWS examples of SHAPE[1] float32 features, random access (Grain's RandomAccessDataSource protocol)."""

    def __init__(self):
        self.x = np.random.default_rng(0).standard_normal((ROWS, SHAPE[1])).astype("float32")

    def __len__(self):
        return ROWS

    def __getitem__(self, i):
        return self.x[i]


def augment(rounds: int):
    import grain.python as gp

    class Augment(gp.RandomMapTransform):
        def random_map(self, x, rng):
            for _ in range(rounds):  # per-example NumPy: noise, masking, a normalisation
                x = (x + rng.normal(0, 0.1, x.shape)) * (rng.random(x.shape) > 0.15)
                x = (x - x.mean()) / (x.std() + 1e-6)
            return x.astype("float32")

    return Augment()


def rounds_for(ms: float) -> int:
    """The per-example rounds that make a SHAPE[0]-example batch take about `ms` here (timed once, best of 3)."""
    rng, x = np.random.default_rng(1), Source().x[0]
    best = min(_time_rounds(x, rng, 20) for _ in range(3)) / 20
    return max(1, round(ms / 1e3 / SHAPE[0] / best))


def _time_rounds(x, rng, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        x = (x + rng.normal(0, 0.1, x.shape)) * (rng.random(x.shape) > 0.15)
        x = (x - x.mean()) / (x.std() + 1e-6)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ms", type=float, default=5.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=8, help="truth: blocks of each kind (half before, half after)")
    ap.add_argument("--block", type=int, default=10)
    a = ap.parse_args()
    try:
        import grain.python as gp
    except ImportError:
        ap.exit(2, "jax_grain_loader.py: Grain is not installed (not a dependency of this project): pip install grain\n")
    import jax.numpy as jnp
    from absl import flags

    from tfbertperf.jax_steps import StepTimer

    flags.FLAGS(sys.argv[:1], known_only=True)  # Grain reads absl flags (as under absl.app.run)

    loader = gp.DataLoader(data_source=Source(), sampler=gp.IndexSampler(ROWS, gp.ShardOptions(0, 1), shuffle=True,
                                                                          num_epochs=None, seed=0),
                           operations=[augment(rounds_for(a.ms)), gp.Batch(SHAPE[0], drop_remainder=True)],
                           worker_count=a.workers)
    step, p = make_step()
    base = Source().x[:SHAPE[0]].copy()
    cached = itertools.repeat(base)
    _, p = timed(step, p, cached, 3)  # compile, off the clock
    T, Tc, halves = [], [], []

    def compute_only():  # input free: no loader running at all (Grain's workers cannot be paused)
        nonlocal p
        c, p = timed(step, p, cached, a.block * a.rounds // 2 + 1)
        Tc.extend(c[1:])
        return statistics.fmean(c[1:])

    def with_loader(n):
        nonlocal p
        r, p = timed(step, p, real, n + 2 * a.workers + 1)  # its first steps: the workers starting, buffers filling
        T.extend(r[2 * a.workers + 1:])
        return statistics.fmean(r[2 * a.workers + 1:])

    tc0 = compute_only()
    real = iter(loader)
    t0 = with_loader(a.block * a.rounds // 2)
    logdir = os.path.join(a.out, f"grain-{a.workers}-{a.ms:g}")
    timer = StepTimer(logdir, profile_steps="20:30", total_steps=a.steps)
    for _ in range(a.steps):
        with timer.step() as s:
            p, loss = step(p, next(real))
            s.result = loss
    timer.close()
    t1 = with_loader(a.block * a.rounds // 2)
    del real  # the iterator's workers stop
    import gc

    gc.collect()
    time.sleep(1.0)
    tc1 = compute_only()
    halves = [1 - tc0 / t0, 1 - tc1 / t1]
    t, tc = statistics.fmean(T), statistics.fmean(Tc)
    print(json.dumps({"loader": "grain", "workers": a.workers, "ms": a.ms, "truth": max(0.0, (t - tc) / t),
                      "T_ms": t, "T_c_ms": tc, "halves": halves, "logdir": logdir, "step_file": str(timer.step_file),
                      "checksum": float(sum(jnp.sum(v) for v in p.values())), "load": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
