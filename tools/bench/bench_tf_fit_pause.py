"""What a pause does to a Keras fit on the TensorFlow backend fed by tf.data (issue 29, the probe's TensorFlow gap):
the fit of tests/programs/keras_jax_tfdata_by_hand.py (a per-example map, batch, prefetch 2, `.repeat()`, an MLP),
its real steps timed by a callback, in one process, the variants alternating.

    python tools/bench/bench_tf_fit_pause.py --experiment probe     # plain fit / ProfileCallback / probe=True
    python tools/bench/bench_tf_fit_pause.py --experiment pauses    # every 40 steps: nothing / a sleep / a snapshot
                                                                    #   and restore / 15 cached steps
    python tools/bench/bench_tf_fit_pause.py --experiment options   # the probe against a plain fit, tf.data's
                                                                    #   default / inject_prefetch off / autotune off
                                                                    #   / a prefetch(2) after the repeat
                                                                    #   (--variants: also repeat first, then
                                                                    #   prefetch(2) or prefetch(AUTOTUNE))
    python tools/bench/bench_tf_fit_pause.py --experiment options --rounds 4 --references median,upper \
        --variants default,repeat_first_2,repeat_first_autotune     # the recovery's reference rules side by side
    python tools/bench/bench_tf_fit_pause.py --experiment deep      # plain fits with a deeper prefetch at the end

Each line: the variant, the median and mean real step (ms, after 10 steps) and 20- or 30-step medians through the
fit, or for the probe its T, T_c and input cost beside the plain fit's (plain − T_c) / plain, and the error.  Results:
BENCHMARKS.md, "the pause is what speeds the real steps".
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["KERAS_BACKEND"] = "tensorflow"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "programs"))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_jax_tfdata_by_hand import compiled_model, pipeline  # noqa: E402
from tfbertperf.keras import ProfileCallback  # noqa: E402
from tfbertperf.train import recovery  # noqa: E402
from tfbertperf.train.probe import Snapshot  # noqa: E402

EVERY = 40  # steps between pauses (--experiment pauses)


class Timer(keras.callbacks.Callback):
    """Each real step's wall time; with `pause` one of "sleep", "snapshot", "block" done every EVERY steps (its own
    time left out)."""

    def __init__(self, pause: str = "none", cached=None):
        super().__init__()
        self.pause, self.cached = pause, cached

    def on_train_begin(self, logs=None):
        self.t, self.last = [], time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.t.append((now - self.last) * 1e3)
        if batch % EVERY == 10 and self.pause != "none":
            if self.pause == "sleep":
                time.sleep(0.06)
            else:
                m = self.model
                saved = Snapshot([*m.variables, *m.optimizer.variables, *m.metrics_variables])
                if self.pause == "block":
                    for _ in range(15):
                        out = m.train_function(self.cached)
                    tf.nest.map_structure(lambda v: v.numpy(), out)
                saved.restore()
        self.last = time.perf_counter()


def _line(name: str, t: list[float], width: int) -> str:
    return (f"{name:14s} median {statistics.median(t[10:]):.2f}  mean {statistics.fmean(t[10:]):.2f} ms | "
            + " ".join(f"{statistics.median(t[i:i + width]):.1f}" for i in range(0, len(t), width)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--experiment", choices=("probe", "pauses", "options", "deep"), required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--references", default="current",
                   help="--experiment options: the recovery's reference rules to alternate, comma-separated: "
                        "current (train/recovery.py as it is), median (the median of the clean steps: the rule "
                        "before 2026-11-27 13:00), upper (the median of their slower half: today's)")
    p.add_argument("--placements", default="current",
                   help="--experiment options: where the probe's blocks go, comma-separated: current (as the "
                        "callback decides: after the last step under an autotuned prefetch), inside (through the "
                        "fit, as before 2026-11-27 19:00: the callback's look at the dataset patched out)")
    p.add_argument("--plain-after", action="store_true",
                   help="--experiment options: a plain fit after each probed one too; the truth from both plain fits")
    p.add_argument("--variants", default="default,no_inject,no_autotune,prefetch_end",
                   help="--experiment options: which (also repeat_first_2, repeat_first_autotune: `.repeat()` first "
                        "and the pipeline ending in prefetch(2) / prefetch(tf.data.AUTOTUNE))")
    a = p.parse_args(argv)
    known = {"default", "no_inject", "no_autotune", "prefetch_end", "repeat_first_2", "repeat_first_autotune"}
    if not set(a.variants.split(",")) <= known:
        p.error(f"--variants {a.variants}: unknown {', '.join(sorted(set(a.variants.split(',')) - known))} "
                f"(one of {', '.join(sorted(known))})")
    refs, places = a.references.split(","), a.placements.split(",")
    if not set(places) <= {"current", "inside"}:
        p.error(f"--placements {a.placements}: expected current and/or inside")
    if not set(refs) <= set(REFERENCES):
        p.error(f"--references {a.references}: unknown {', '.join(sorted(set(refs) - set(REFERENCES)))} "
                f"(one of {', '.join(REFERENCES)})")
    model, base = compiled_model(), pipeline()
    model.fit(base, epochs=1, steps_per_epoch=20, verbose=0)  # compiled, warm
    cached = iter(tf.data.Dataset.from_tensors(next(iter(base.take(1)))).repeat())
    no_inject = pipeline(inject_prefetch=False)
    no_autotune = base.with_options(_options(autotune=False))
    print(f"load at the start {os.getloadavg()[0]:.1f}", flush=True)
    for r in range(a.rounds):
        if a.experiment == "probe":
            for name in ("plain", "callback", "probe"):
                if name == "plain":
                    tm = Timer()
                    model.fit(base, epochs=1, steps_per_epoch=a.steps, verbose=0, callbacks=[tm])
                    print(_line(f"{name} {r}", tm.t, 20), flush=True)
                    continue
                cb = ProfileCallback(tempfile.mkdtemp(prefix="bench-pause-"), profile_steps=None,
                                     probe=name == "probe")
                model.fit(base, epochs=1, steps_per_epoch=a.steps, verbose=0, callbacks=[cb])
                w = cb.what_if or {}
                print(_line(f"{name} {r}", cb.step_times_ms, 20)
                      + (f" | probe {w['input_cost_fraction']:.3f}" if w else ""), flush=True)
        elif a.experiment == "pauses":
            for pause in ("none", "sleep", "snapshot", "block"):
                tm = Timer(pause, cached)
                model.fit(base, epochs=1, steps_per_epoch=a.steps, verbose=0, callbacks=[tm])
                print(_line(f"{pause} {r}", tm.t, 20), flush=True)
        elif a.experiment == "options":
            variants = {"default": base, "no_inject": no_inject, "no_autotune": no_autotune,
                        "prefetch_end": base.prefetch(2), "repeat_first_2": pipeline(repeat_first=True),
                        "repeat_first_autotune": pipeline(repeat_first=True, prefetch=tf.data.AUTOTUNE)}
            for name, ds in ((v, variants[v]) for v in a.variants.split(",")):
                for ref, place in ((ref, place) for ref in refs for place in places):
                    tm = Timer()
                    model.fit(ds, epochs=1, steps_per_epoch=a.steps, verbose=0, callbacks=[tm])
                    plains = [statistics.fmean(tm.t[10:])]
                    with _reference(ref), _placement(place):
                        cb = ProfileCallback(tempfile.mkdtemp(prefix="bench-pause-"), profile_steps=None,
                                             probe=True)
                        model.fit(ds, epochs=1, steps_per_epoch=a.steps, verbose=0, callbacks=[cb])
                    if a.plain_after:
                        tm = Timer()
                        model.fit(ds, epochs=1, steps_per_epoch=a.steps, verbose=0, callbacks=[tm])
                        plains.append(statistics.fmean(tm.t[10:]))
                    w, plain = cb.what_if, statistics.fmean(plains)
                    truth = (plain - w['compute_only_step_ms']) / plain
                    where = "after" if w.get("after_steps") else "inside"
                    print(f"{name:21s} {r} {ref:7s} {where:6s} plain {'/'.join(f'{x:.2f}' for x in plains)} ms | "
                          f"probe T {w['step_ms']:.2f} T_c "
                          f"{w['compute_only_step_ms']:.2f} input {w['input_cost_fraction']:.3f} ± "
                          f"{w['input_cost_ci95'] or 0:.3f} | (plain − T_c) / plain {truth:.3f} | error "
                          f"{100 * (w['input_cost_fraction'] - truth):+.1f} pp, {len(cb._ran)} blocks", flush=True)
        else:
            for name, ds in (("default", base), ("no_inject", no_inject), ("prefetch32", base.prefetch(32)),
                             ("prefetch2", base.prefetch(2))):
                tm = Timer()
                model.fit(ds, epochs=1, steps_per_epoch=a.steps, verbose=0, callbacks=[tm])
                print(_line(f"{name} {r}", tm.t, 30), flush=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    return 0


REFERENCES = {"current": None, "median": statistics.median, "upper": recovery._reference}  # upper: today's rule


@contextlib.contextmanager
def _reference(name: str):
    """train/recovery.py's reference rule for the fits inside (`current`: as it is)."""
    saved = recovery._reference
    recovery._reference = REFERENCES[name] or saved
    try:
        yield
    finally:
        recovery._reference = saved


@contextlib.contextmanager
def _placement(name: str):
    """`inside`: the callback's look at the dataset patched out, so its blocks run through the fit."""
    from tfbertperf.profile import keras_callback

    saved = keras_callback.autotuned_prefetch
    if name == "inside":
        keras_callback.autotuned_prefetch = type("NoLook", (), {"in_dataset": staticmethod(lambda it: []),
                                                               "in_capture": staticmethod(lambda s: [])})
    try:
        yield
    finally:
        keras_callback.autotuned_prefetch = saved


def _options(autotune: bool) -> tf.data.Options:
    o = tf.data.Options()
    o.autotune.enabled = autotune
    return o


if __name__ == "__main__":
    raise SystemExit(main())
