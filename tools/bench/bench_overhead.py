"""Cost of measuring: profiled (traced) step time ÷ untraced, and step timer on ÷ off — tiny BERT, real pipeline.

- traced ÷ untraced, same run: the run alternates segments of --segment-steps steps — untraced, traced with the
  default capture (TF's thread-pool task events off, tfbertperf/profile/capture.py), untraced, traced with TF's full
  capture (`profile.threadpool_events=true`), … — starting and stopping the profiler between segments, outside
  step timing.  Ratio = median step time of a kind of traced segment ÷ median of the untraced segments (the first
  step of every segment dropped: profiler start/stop).  Interleaving at about a second keeps the machine's drift
  (other tenants, 5–20 % over seconds on a shared VM) out of the ratio; one window per run, as a run profiles,
  gave single-run ratios from 0.87 to 1.19 here.  Goal ≤ 1.03 for the default capture.
- step timer on ÷ off: what the timer adds per step is one extra perf_counter() read and one list append
  (train/loop.py); that cost is timed directly over 10^5 repetitions and divided by the run's median step:
  ratio = 1 + timer cost / step time.  Goal ≤ 1.01.  As a cross-check, the same training is also run
  alternately with `profile.step_timer` true and false (no profile), several pairs in one process; on a busy
  shared machine that ratio is dominated by other processes' load and is shown, not used.

    python tools/bench/bench_overhead.py                    # prints a markdown table
    python tools/bench/bench_overhead.py --pairs 2 --segments 8 --set profile.host_tracer_level=1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def make_dataset_fn(cfg):
    """The run's own pipeline: storage backend → shard source → tf.data (as tfbertperf.run does)."""
    from tfbertperf.data.pipeline import build_dataset
    from tfbertperf.job import ensure_data
    from tfbertperf.storage import open_backend, open_shards

    backend = open_backend(cfg.resolved_data_uri(), cfg.data)
    uri, manifest = ensure_data(cfg, backend, progress=False)
    shards = [backend.join(uri, s["name"]) for s in manifest["shards"]]

    def dataset_fn(_ctx=None):
        source = open_shards(shards, cfg.data, backend, record_bytes_hint=int(manifest.get("record_bytes_mean", 2048)))
        return build_dataset(cfg, manifest, source)

    return dataset_fn, int(manifest["vocab_size"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="steps of each step timer run")
    p.add_argument("--segments", type=int, default=48, help="segments of the traced ÷ untraced run (a multiple of 4)")
    p.add_argument("--segment-steps", type=int, default=20, help="steps per segment (the default profile window is 20)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--pairs", type=int, default=3, help="step timer on/off pairs")
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra --set for every run")
    a = p.parse_args(argv)

    import tensorflow as tf

    from tfbertperf.config import load_config
    from tfbertperf.profile import capture
    from tfbertperf.train import loop
    from tfbertperf.train.loop import train

    base = [f"train.steps={a.steps}", f"train.batch_size={a.batch}", "profile.probe_steps=0", *a.sets]
    t0 = time.time()
    quiet = lambda m: None  # noqa: E731

    # 1. traced ÷ untraced, same run: segments U, default capture, U, full capture, … (module docstring)
    kinds = ["untraced", "default", "untraced", "full"] * max(1, a.segments // 4)
    seg = a.segment_steps
    cfg = load_config(sets=[*base, f"train.steps={5 + len(kinds) * seg}", "train.warmup_steps=5", "profile.steps=none"])
    dataset_fn, vocab = make_dataset_fn(cfg)
    options = capture.profiler_options(cfg.profile)
    state = {"i": 0, "profiling": False, "seen": {}}

    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tb:
        def hook(kind):
            i, state["i"] = state["i"], state["i"] + 1
            if i < 5 or (i - 5) % seg:
                return
            if state["profiling"]:
                tf.profiler.experimental.stop()
                state["profiling"] = False
            k = kinds[(i - 5) // seg]
            if k != "untraced":
                state["seen"][k] = capture.start(tb, options, threadpool_events=(k == "full"))
                state["profiling"] = True
                print(f"[bench] segment {(i - 5) // seg + 1}/{len(kinds)}: {k} capture …", file=sys.stderr, flush=True)

        loop.STEP_HOOK = hook
        try:
            r = train(cfg, dataset_fn, vocab, None, progress=quiet)
        finally:
            loop.STEP_HOOK = None
            if state["profiling"]:
                tf.profiler.experimental.stop()
    by_kind = {k: [] for k in ("untraced", "default", "full")}
    per_segment = []  # (kind, median ms) in run order
    for n, k in enumerate(kinds):
        times = r.step_times_ms[5 + n * seg + 1:5 + (n + 1) * seg]  # first step of the segment dropped
        by_kind[k].extend(times)
        per_segment.append((k, statistics.median(times)))
    untraced_ms = statistics.median(by_kind["untraced"])
    traced = {}
    for k in ("default", "full"):
        # each traced segment against the mean of its two untraced neighbours: the spread of the ratio
        pairs = [m / statistics.fmean([per_segment[n - 1][1], per_segment[n + 1][1] if n + 1 < len(per_segment)
                                       else per_segment[n - 1][1]])
                 for n, (kk, m) in enumerate(per_segment) if kk == k]
        traced[k] = (statistics.median(by_kind[k]) / untraced_ms, statistics.median(by_kind[k]), pairs)

    # 2. step timer on ÷ off, alternating runs
    ratios = []
    meds = {True: [], False: []}
    for k in range(a.pairs):
        for on in ((True, False) if k % 2 == 0 else (False, True)):  # alternate the order against drift
            c = load_config(sets=[*base, "profile.steps=none", f"profile.step_timer={str(on).lower()}"])
            print(f"[bench] step timer {'on' if on else 'off'} (pair {k + 1}/{a.pairs}) …", file=sys.stderr, flush=True)
            rr = train(c, dataset_fn, vocab, None, progress=quiet)
            meds[on].append(statistics.median(rr.step_times_ms[rr.warmup_steps:]))
        ratios.append(meds[True][-1] / meds[False][-1])
    runs_ratio = statistics.median(ratios)
    # direct cost of the timer's extra work per step
    clock, sink = time.perf_counter, []
    n = 100_000
    t = clock()
    for _ in range(n):
        t1 = clock()
        sink.append((t1 - t) * 1e3)
    timer_cost_ms = (clock() - t) * 1e3 / n
    timer_ratio = 1.0 + timer_cost_ms / untraced_ms

    print("\n| measure | numerator ms/step | denominator ms/step | ratio | goal |")
    print("|---|---|---|---|---|")
    n_unt = len(by_kind["untraced"])
    for k, label, goal in (("default", "default capture (thread-pool task events off)", "≤ 1.03"),
                           ("full", "TF's full capture (`profile.threadpool_events=true`)", "—")):
        ratio, ms, pairs = traced[k]
        q = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else [pairs[0]] * 3
        print(f"| traced ÷ untraced, {label}: {len(by_kind[k])} vs {n_unt} steps in {len(pairs)} + "
              f"{kinds.count('untraced')} alternating segments (capture: {state['seen'].get(k)}); segment ÷ its "
              f"neighbours: quartiles {q[0]:.3f} / {q[1]:.3f} / {q[2]:.3f} | {ms:.1f} | {untraced_ms:.1f} | "
              f"{ratio:.3f} | {goal} |")
    print(f"| step timer on ÷ off (timer cost {timer_cost_ms * 1e6:.0f} ns/step ÷ median step) | "
          f"{untraced_ms + timer_cost_ms:.4f} | {untraced_ms:.4f} | {timer_ratio:.6f} | ≤ 1.01 |")
    print(f"| cross-check: step timer on ÷ off, {a.pairs} alternating runs (per-pair ratios "
          f"{', '.join(f'{x:.3f}' for x in ratios)}; load-dominated) | {statistics.median(meds[True]):.1f} | "
          f"{statistics.median(meds[False]):.1f} | {runs_ratio:.3f} | — |")
    print(f"\nBERT-{cfg.model.size}, batch {a.batch}; traced ÷ untraced: one run of {len(kinds)} segments × {seg} "
          f"steps; step timer: {a.steps} steps per run; {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
