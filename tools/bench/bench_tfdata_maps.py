"""A user's Keras fit behind tf.data maps written five ways (issue 29: the advice asks for what the pipeline lacks,
never for what it does): what `tfbertperf analyze` reads of the maps from the capture alone, its first input advice,
and the step rate each way, the configurations taking turns per repetition (each a fresh interpreter).

  map(f)                  a stateless per-example map, no num_parallel_calls: tf.data's map_parallelization makes it
                          parallel and tuned itself (the capture: MapAndBatch, autotune true)
  map(f, AUTOTUNE)        what the advice used to ask of the one above
  batch().map(f, AUTOTUNE)  vectorized: what the advice asks now
  map(py_wait)            a py_function that waits 0.3 ms an example: stateful, left serial (autotune false)
  map(py_wait, AUTOTUNE)  what the advice asks of the one above

Per run: the unprofiled steady step (ProfileCallback's step file), the maps read, and the first advice; per
configuration the step rate against its pair's first, median of the per-rep ratios.

    python tools/bench/bench_tfdata_maps.py --reps 3 [--baseline /tmp/wt-before]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ("map(f)", "map(f, AUTOTUNE)", "batch().map(f, AUTOTUNE)", "map(py_wait)", "map(py_wait, AUTOTUNE)")
PAIRS = {"map(f, AUTOTUNE)": "map(f)", "batch().map(f, AUTOTUNE)": "map(f)", "map(py_wait, AUTOTUNE)": "map(py_wait)"}


def child(config: str, out: str, steps: int) -> None:
    """One fit of `config` with ProfileCallback (window steps/2 … +15); prints {"steady_ms"}."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from tfbertperf.keras import ProfileCallback

    x = np.random.default_rng(0).standard_normal((4096, 64)).astype("float32")
    y = np.arange(4096) % 2

    def f(a, b):  # ~30 small ops an example (or a batch): CPU work tf.data can spread over the cores
        for _ in range(40):
            a = tf.tanh(tf.linalg.matvec(tf.eye(64), a) if a.shape.rank == 1 else tf.matmul(a, tf.eye(64)))
        return a, b

    def py_wait(a, b):
        def wait(v):
            time.sleep(0.0003)
            return v
        return tf.ensure_shape(tf.py_function(wait, [a], tf.float32), a.shape), b

    base = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
    auto = tf.data.AUTOTUNE
    ds = {"map(f)": lambda: base.map(f).batch(32), "map(f, AUTOTUNE)": lambda: base.map(f, auto).batch(32),
          "batch().map(f, AUTOTUNE)": lambda: base.batch(32).map(f, auto),
          "map(py_wait)": lambda: base.map(py_wait).batch(32),
          "map(py_wait, AUTOTUNE)": lambda: base.map(py_wait, auto).batch(32)}[config]().prefetch(2)
    inp = keras.Input((64,))
    model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Dense(128, activation="relu")(inp)))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    cb = ProfileCallback(out, profile_steps=f"{steps // 2}:{steps // 2 + 15}")
    model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[cb])
    print(json.dumps({"steady_ms": json.loads(cb.step_file.read_text())["summary"]["unprofiled_step_ms"]}))


_ANALYZE = """
import json, sys
from tfbertperf.analyze import analyze
d = analyze(sys.argv[1])
v, a = d['verdict'], d['attribution']
first = next((x['advice'] for x in v.get('actions') or () if 'dominates' in x['advice']), '')
print(json.dumps({'bottleneck': v['bottleneck'], 'estimate': a.get('input_cost_estimate_fraction'),
                  'maps': a.get('tfdata_maps'), 'advice': first}))
"""


def _analyze(pythonpath: str, out: str) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_python_loader import _analyze as analyze_in  # one way to run another checkout's analyze

    return analyze_in(pythonpath, out, _ANALYZE)


def _key(advice: str) -> str:
    """The "preprocessing dominates" advice in a few words: what it asks for."""
    if not advice:
        return "—"
    asks = [w for k, w in (("num_parallel_calls → autotune", "autotune"), ("vectorize", "vectorize"),
                           ("tf.data service", "more CPUs")) if k in advice]
    return ("already tuned: " if "already" in advice else "") + " + ".join(asks)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=160, help="fit steps (the window: 15 steps from the middle)")
    p.add_argument("--baseline", default="", help="another checkout whose analyze reads the same captures")
    p.add_argument("--child", nargs=2, metavar=("CONFIG", "OUT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(a.child[0], a.child[1], a.steps)
        return 0
    if a.reps < 1 or a.steps < 40:
        print(f"bench_tfdata_maps: --reps {a.reps} / --steps {a.steps}: need at least 1 and 40", file=sys.stderr)
        return 2
    if a.baseline and not (Path(a.baseline) / "tfbertperf").is_dir():
        print(f"bench_tfdata_maps: --baseline {a.baseline}: no tfbertperf package there", file=sys.stderr)
        return 2
    load0, t0 = os.getloadavg()[0], time.time()
    print("| configuration | rep | unprofiled step ms | rate vs its pair's first | verdict, input (capture) | maps read "
          "| advice | baseline's advice |")
    print("|---|---|---|---|---|---|---|---|")
    ratios: dict = {c: [] for c in PAIRS}
    for rep in range(1, a.reps + 1):
        steady = {}
        for config in CONFIGS:
            out = tempfile.mkdtemp(prefix="bench-tfdata-maps-")
            env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
            res = subprocess.run([sys.executable, __file__, "--steps", str(a.steps), "--child", config, out],
                                 capture_output=True, text=True, env=env, timeout=900)
            if res.returncode != 0:
                raise SystemExit(f"{config} failed: {res.stderr.strip().splitlines()[-1:]}")
            steady[config] = json.loads(res.stdout.strip().splitlines()[-1])["steady_ms"]
            now = _analyze(str(ROOT), out)
            then = _analyze(a.baseline, out) if a.baseline else None
            pair = PAIRS.get(config)
            rate = steady[pair] / steady[config] if pair else 1.0
            if pair:
                ratios[config].append(rate)
            maps = ", ".join(f"{m['iterator'].rsplit('::', 1)[-1]}{' tuned' * m['autotuned']}"
                             f"{' on batches' * m['after_batch']}" for m in now["maps"] or ()) or "—"
            print(f"| {config} | {rep} | {steady[config]:.2f} | {rate:.2f}× | {now['bottleneck']}, "
                  f"{100 * (now['estimate'] or 0):.0f} % | {maps} | {_key(now['advice'])} | "
                  f"{_key(then['advice']) if then else ''} |", flush=True)
    print()
    for config, v in ratios.items():
        print(f"{config}: {statistics.median(v):.2f}× the step rate of {PAIRS[config]} (median of per-rep ratios)")
    print(f"\n{time.time() - t0:.0f} s, load (1 min) {load0:.1f} → {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
