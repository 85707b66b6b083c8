"""A user's own Keras `model.fit` fed by a `keras.utils.PyDataset` whose `__getitem__` waits on a slow read (a
sleep: no CPU), profiled with ProfileCallback — the loader tf.data's knobs do not reach (issue 29: advice for the
user's own loader).  Keras brings a PyDataset to tf.data through `Dataset.from_generator`.

    python tests/programs/keras_pydataset.py --out /tmp/pyds --workers 1 [--read-ms 20] [--steps 90]
    python tests/programs/keras_pydataset.py --out /tmp/pyds --workers 2 --processes --read-ms 0 --cpu-ms 8

--cpu-ms makes each __getitem__ also compute in Python for that long (the interpreter lock held: threads do not
help it, processes do). Prints one JSON line: {"workers", "processes", "logdir", "step_ms" (mean step of the
profiled window, ms), "steady_ms" (the step file's unprofiled step, ms), "what_if" (--probe: ProfileCallback's
measured what-if, else null)}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402

FEATURES, BATCH, BATCHES = 256, 64, 64


class SlowReads(keras.utils.PyDataset):
    """BATCHES batches of random features; each __getitem__ first waits `read_ms` (a slow read), then computes
    `cpu_ms` in Python."""

    def __init__(self, read_ms: float, cpu_ms: float = 0.0, **kw):
        super().__init__(**kw)
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((BATCH * BATCHES, FEATURES)).astype("float32")
        self.y = rng.integers(0, 10, BATCH * BATCHES)
        self.read_s, self.cpu_s = read_ms / 1000.0, cpu_ms / 1000.0

    def __len__(self):
        return BATCHES

    def __getitem__(self, i):
        time.sleep(self.read_s)
        end, n = time.thread_time() + self.cpu_s, 0
        while time.thread_time() < end:  # Python work: CPU time of this thread, whatever else runs
            n += 1
        s = (i % BATCHES) * BATCH
        return self.x[s:s + BATCH], self.y[s:s + BATCH]


def model() -> keras.Model:
    keras.utils.set_random_seed(0)
    inp = keras.Input((FEATURES,))
    h = keras.layers.Dense(512, activation="relu")(inp)
    h = keras.layers.Dense(512, activation="relu")(h)
    m = keras.Model(inp, keras.layers.Dense(10)(h))
    m.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def run(out: str, workers: int, read_ms: float = 20.0, steps: int = 90, window: str = "30:60", cpu_ms: float = 0.0,
        processes: bool = False, probe: bool = False) -> dict:
    from tfbertperf.keras import ProfileCallback

    cb = ProfileCallback(out, profile_steps=window, probe=probe)
    epochs = -(-steps // BATCHES)
    model().fit(SlowReads(read_ms, cpu_ms, workers=workers, use_multiprocessing=processes), epochs=epochs, verbose=0,
                callbacks=[cb])
    a, b = (int(v) for v in window.split(":"))
    times = cb.step_times_ms
    # the unprofiled step as the step file has it (the steps after the window and after each probe block, fed
    # from buffers filled meanwhile, left out); this mean of the others where there is none
    steady = (json.loads(cb.step_file.read_text())["summary"].get("unprofiled_step_ms") if cb.step_file else None)
    return {"workers": workers, "processes": processes, "logdir": out, "step_ms": statistics.fmean(times[a:b]),
            "steady_ms": steady or statistics.fmean(times[5:a] + times[b + 8:]),
            "what_if": cb.what_if if probe else None}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--read-ms", type=float, default=20.0)
    p.add_argument("--cpu-ms", type=float, default=0.0)
    p.add_argument("--processes", action="store_true", help="PyDataset(use_multiprocessing=True)")
    p.add_argument("--steps", type=int, default=90)
    p.add_argument("--probe", action="store_true", help="ProfileCallback(probe=True): the measured what-if")
    a = p.parse_args(argv)
    print(json.dumps(run(a.out, a.workers, a.read_ms, a.steps, cpu_ms=a.cpu_ms, processes=a.processes,
                         probe=a.probe)), flush=True)


if __name__ == "__main__":
    main()
