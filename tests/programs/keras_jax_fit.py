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

On a GPU (the lent device machine: JAX there, Keras carried as a wheel) the same shapes at GPU sizes, e.g.
`--shape compute --batch 1024 --hidden 8192 --examples 131072`: the cached batches are placed on the GPU.
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

FEATURES, CACHED, SETTLE, SETTLE_REAL, SETTLE_MAX = 64, 8, 3, 10, 60
SHAPES = ("arrays", "wait", "numpy", "compute")


class _Loader(keras.utils.PyDataset):
    def __init__(self, x, y, kind: str, batch: int):
        super().__init__()
        self.x, self.y, self.kind, self.batch = x, y, kind, batch
        self.rng = np.random.default_rng(1)

    def __len__(self):
        return len(self.x) // self.batch

    def __getitem__(self, i):
        b = self.batch
        xb, yb = self.x[i * b:(i + 1) * b], self.y[i * b:(i + 1) * b]
        if self.kind == "wait":
            time.sleep(0.002)  # a blocking read: the thread waits, it takes no core
            return xb, yb
        out = np.empty_like(xb)
        for k in range(b):  # per-example augmentation in Python and NumPy: ~2 ms a batch here
            e = xb[k] + self.rng.normal(0, 0.1, FEATURES).astype("float32")
            out[k] = np.where(self.rng.random(FEATURES) < 0.15, 0.0, np.sort(e)[np.argsort(np.argsort(e))])
        return out, yb


def build(shape: str, batch: int = 32, examples: int = 4096, hidden: int | None = None, layers: int | None = None,
          steps_per_execution: int = 1):
    """(model, fit's data as kwargs) for a shape (module docstring); hidden/layers None: the shape's own."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((examples, FEATURES)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    own = (1024, 4) if shape == "compute" else (256, 2)
    hidden, layers = hidden or own[0], layers or own[1]
    inputs = keras.Input((FEATURES,))
    h = inputs
    for _ in range(layers):
        h = keras.layers.Dense(hidden, activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(2)(h))
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=steps_per_execution)
    if shape in ("arrays", "compute"):
        return model, {"x": x, "y": y, "batch_size": batch}
    return model, {"x": _Loader(x, y, shape, batch)}


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


class _StepClock(keras.callbacks.Callback):
    """Each step's wall time in a fit, from the batch's begin to its end as ProfileCallback times it (the logs read
    back to Python every step by Keras' callback list, as with a progress bar); the first SETTLE steps, and more for
    `settle_ms` of wall time (at most SETTLE_MAX), untimed; stops the fit after `n` timed steps."""

    def __init__(self, n: int, settle_ms: float = 0.0) -> None:
        super().__init__()
        self.n, self.settle_ms, self.times, self.j, self.start, self.t0 = n, settle_ms, [], 0, None, 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self.t0 = time.perf_counter()
        self.start = self.start or self.t0

    def on_train_batch_end(self, batch, logs=None):
        t = time.perf_counter()
        if self.j >= SETTLE and ((self.t0 - self.start) * 1e3 >= self.settle_ms or self.j >= SETTLE_MAX):
            self.times.append((t - self.t0) * 1e3)
        self.j += 1
        if len(self.times) >= self.n:
            self.model.stop_training = True


class FitTruth:
    """The what-if truth through `model.fit` itself: alternating short fits on the real data (T) and fits whose steps
    are fed CACHED device batches (T_c: `model.train_function` given them in place of Keras' iterator, which is then
    never read), each step timed by _StepClock — the user's fit as it runs, with its per-step bookkeeping (the state
    stored on the model, the logs read back) in T and in T_c alike, which the bare loop (Truth) leaves out of both."""

    def __init__(self, model, data: dict, batches: list, block: int) -> None:
        self.model, self.data, self.block, self.T, self.Tc = model, data, block, [], []
        self.cached = itertools.cycle(batches)

    def _fit(self, cached: bool, settle_ms: float = 0.0) -> list[float]:
        clock, model = _StepClock(self.block - SETTLE, settle_ms), self.model
        own = model.train_function
        if cached:
            model.train_function = lambda state, iterator: own(state, self.cached)
        try:
            k = model.steps_per_execution  # a step (one call, one tick of the clock) is k batches
            model.fit(**self.data, epochs=1, steps_per_epoch=k * (SETTLE_MAX + self.block), callbacks=[clock],
                      verbose=0)
        finally:
            model.train_function = own
        return clock.times

    def blocks(self, rounds: int) -> None:
        for _ in range(rounds):
            real = self._fit(False)
            self.T += real
            self.Tc += self._fit(True, settle_ms=SETTLE_REAL * statistics.fmean(real))

    result = Truth.result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=SHAPES, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=2, help="epochs of the profiled fit (examples ÷ batch steps each)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--examples", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=None, help="the MLP's width (default: the shape's own)")
    p.add_argument("--layers", type=int, default=None, help="its hidden layers (default: the shape's own)")
    p.add_argument("--steps-per-execution", type=int, default=1, help="Keras' steps_per_execution: a step is k batches")
    p.add_argument("--window", default="60:70", help="its profiled window")
    p.add_argument("--no-python-tracer", action="store_true",
                   help="capture without JAX's Python tracer (ProfileOptions python_tracer_level 0)")
    p.add_argument("--rounds", type=int, default=10, help="truth: blocks of each kind")
    p.add_argument("--block", type=int, default=10, help="truth: steps per block (the first SETTLE not timed)")
    a = p.parse_args()
    from tfbertperf.keras import ProfileCallback

    keras.utils.set_random_seed(0)
    model, data = build(a.shape, a.batch, a.examples, a.hidden, a.layers, a.steps_per_execution)
    model.fit(**data, epochs=1, steps_per_epoch=10, verbose=0)  # compiled before the truth's first block
    truth = Truth(model, data, a.block)
    truth.blocks(a.rounds // 2)
    fit_truth = FitTruth(model, data, [next(truth.real) for _ in range(CACHED)], a.block)
    fit_truth.blocks(a.rounds // 2)
    truth.state = _state(model)  # the truth's fits trained the variables on
    logdir = os.path.join(a.out, a.shape)
    options = None
    if a.no_python_tracer:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
    cb = ProfileCallback(logdir, profile_steps=a.window, probe=True, profiler_options=options)
    model.fit(**data, epochs=a.epochs, callbacks=[cb], verbose=0)
    truth.state = _state(model)  # the fit trained the variables on: go on from there
    truth.blocks(a.rounds - a.rounds // 2)
    fit_truth.blocks(a.rounds - a.rounds // 2)
    half, fit_half = len(truth.T) // 2, len(fit_truth.T) // 2
    share, t, tc = truth.result()
    fit_share, fit_t, fit_tc = fit_truth.result()
    print(json.dumps({"shape": a.shape, "truth": share, "truth_halves": [truth.result(0, half)[0],
                                                                         truth.result(half)[0]],
                      "T_ms": t, "T_c_ms": tc, "fit_truth": fit_share, "fit_T_ms": fit_t, "fit_T_c_ms": fit_tc,
                      "fit_truth_halves": [fit_truth.result(0, fit_half)[0], fit_truth.result(fit_half)[0]],
                      "probe": cb.what_if, "logdir": logdir,
                      "step_file": str(cb.step_file), "load": os.getloadavg()[0],
                      "device": jax.devices()[0].device_kind, "jax": jax.__version__, "keras": keras.__version__,
                      "sizes": {"batch": a.batch, "examples": a.examples, "hidden": a.hidden, "layers": a.layers,
                                "steps_per_execution": a.steps_per_execution}}))


if __name__ == "__main__":
    main()
