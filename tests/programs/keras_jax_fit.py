"""A user's own Keras `model.fit` on the JAX backend, in one of several input shapes, profiled with the Keras-JAX
`ProfileCallback(probe=True)` (tfbertperf/keras_jax.py), next to the what-if truth measured in the same process
(tools/bench/bench_keras_jax_probe.py).

Shapes (all on this host's CPU; the data on the training thread, as Keras on JAX runs it without workers):
  arrays   NumPy arrays passed to fit: Keras slices (and shuffles) them per batch, in front of a small MLP
  wait     a PyDataset whose __getitem__ waits 2 ms (a read from slow storage), small MLP
  numpy    a PyDataset whose __getitem__ computes ~2 ms of NumPy (per-example noise and masking), small MLP
  compute  NumPy arrays in front of a wide MLP: compute-bound

Truth (no profiler, no ProfileCallback): (T − T_c) / T in a bare loop of `model.train_function(state, iterator)`
(the call fit makes), alternating blocks on Keras' own epoch iterator over the same data (T) and on CACHED of its
batches placed on the device (T_c), each block's first SETTLE steps untimed and the cached ones after 10 real
steps' worth of time (the probe's settle); half the blocks before and half after the profiled fit.  Prints one
JSON line: {"shape", "truth", "truth_halves", "T_ms", "T_c_ms", "probe": callback.what_if, "logdir", "step_file"}.

    python tests/programs/keras_jax_fit.py --shape arrays --out /tmp/x
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import time

os.environ["KERAS_BACKEND"] = "jax"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

BATCH, FEATURES, CACHED, SETTLE, SETTLE_REAL, SETTLE_MAX = 32, 64, 8, 3, 10, 60
SHAPES = ("arrays", "wait", "numpy", "compute")


class _Loader(keras.utils.PyDataset):
    def __init__(self, x, y, kind: str):
        super().__init__()
        self.x, self.y, self.kind = x, y, kind
        self.rng = np.random.default_rng(1)

    def __len__(self):
        return len(self.x) // BATCH

    def __getitem__(self, i):
        xb, yb = self.x[i * BATCH:(i + 1) * BATCH], self.y[i * BATCH:(i + 1) * BATCH]
        if self.kind == "wait":
            time.sleep(0.002)  # a blocking read: the thread waits, it takes no core
            return xb, yb
        out = np.empty_like(xb)
        for k in range(BATCH):  # per-example augmentation in Python and NumPy: ~2 ms a batch here
            e = xb[k] + self.rng.normal(0, 0.1, FEATURES).astype("float32")
            out[k] = np.where(self.rng.random(FEATURES) < 0.15, 0.0, np.sort(e)[np.argsort(np.argsort(e))])
        return out, yb


def build(shape: str):
    """(model, fit's data as kwargs) for a shape (module docstring)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, FEATURES)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    hidden, layers = (1024, 4) if shape == "compute" else (256, 2)
    inputs = keras.Input((FEATURES,))
    h = inputs
    for _ in range(layers):
        h = keras.layers.Dense(hidden, activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(2)(h))
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if shape in ("arrays", "compute"):
        return model, {"x": x, "y": y, "batch_size": BATCH}
    return model, {"x": _Loader(x, y, shape)}


def _state(model):
    model.jax_state_sync()
    return tuple(jax.tree.map(lambda a: jnp.array(a, copy=True), [v.value for v in vs]) for vs in
                 (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
                  model.metrics_variables))


class Truth:
    """Alternating blocks through `model.train_function` on Keras' epoch iterator and on cached device batches."""

    def __init__(self, model, data: dict, block: int) -> None:
        from keras.src.backend.jax.trainer import JAXEpochIterator

        model.make_train_function()
        self.model, self.block, self.T, self.Tc = model, block, [], []
        self.state = _state(model)
        ei = JAXEpochIterator(**data, steps_per_epoch=None, shuffle=True, steps_per_execution=1)

        def forever():
            while True:
                ei.reset()
                for _, _, it in ei:
                    try:
                        yield next(it)
                    except StopIteration:
                        break
        self.real = forever()
        self.cached = itertools.cycle([jax.device_put(next(self.real)) for _ in range(CACHED)])
        self._timed(self.real, SETTLE + 2)  # compilation for both sources, off the clock
        self._timed(self.cached, SETTLE + 2)

    def _timed(self, source, n: int, settle_ms: float = 0.0) -> list[float]:
        out, start, j = [], time.perf_counter(), 0
        while len(out) < n - SETTLE:
            t0 = time.perf_counter()
            logs, self.state = self.model.train_function(self.state, source)
            jax.block_until_ready(logs["loss"])
            if j >= SETTLE and ((t0 - start) * 1e3 >= settle_ms or j >= SETTLE_MAX):
                out.append((time.perf_counter() - t0) * 1e3)
            j += 1
        return out

    def blocks(self, rounds: int) -> None:
        for _ in range(rounds):
            real = self._timed(self.real, self.block)
            self.T += real
            self.Tc += self._timed(self.cached, self.block, settle_ms=SETTLE_REAL * statistics.fmean(real))

    def result(self, lo: int = 0, hi: int | None = None) -> tuple[float, float, float]:
        t, tc = statistics.fmean(self.T[lo:hi]), statistics.fmean(self.Tc[lo:hi])
        return max(0.0, (t - tc) / t), t, tc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=SHAPES, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=2, help="epochs of the profiled fit (128 steps each)")
    p.add_argument("--window", default="60:70", help="its profiled window")
    p.add_argument("--rounds", type=int, default=10, help="truth: blocks of each kind")
    p.add_argument("--block", type=int, default=10, help="truth: steps per block (the first SETTLE not timed)")
    a = p.parse_args()
    from tfbertperf.keras import ProfileCallback

    keras.utils.set_random_seed(0)
    model, data = build(a.shape)
    model.fit(**data, epochs=1, steps_per_epoch=10, verbose=0)  # compiled before the truth's first block
    truth = Truth(model, data, a.block)
    truth.blocks(a.rounds // 2)
    logdir = os.path.join(a.out, a.shape)
    cb = ProfileCallback(logdir, profile_steps=a.window, probe=True)
    model.fit(**data, epochs=a.epochs, callbacks=[cb], verbose=0)
    truth.state = _state(model)  # the fit trained the variables on: go on from there
    truth.blocks(a.rounds - a.rounds // 2)
    half = len(truth.T) // 2
    share, t, tc = truth.result()
    print(json.dumps({"shape": a.shape, "truth": share, "truth_halves": [truth.result(0, half)[0],
                                                                         truth.result(half)[0]],
                      "T_ms": t, "T_c_ms": tc, "probe": cb.what_if, "logdir": logdir,
                      "step_file": str(cb.step_file), "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
