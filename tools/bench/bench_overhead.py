"""Cost of measuring: profiled (traced) step time ÷ untraced, and step timer on ÷ off — tiny BERT, real pipeline.

- traced ÷ untraced, same run: median step time inside the profiled window (its first and last step dropped:
  profiler start/stop) ÷ median of the steady steps outside it; the median over --traced-runs runs.  Goal ≤ 1.03.
  Measured for the default capture (TF's thread-pool task events off, tfbertperf/train/capture.py) and, in
  alternating runs, for TF's full capture (`profile.threadpool_events=true`).
- step timer on ÷ off: what the timer adds per step is one extra perf_counter() read and one list append
  (train/loop.py); that cost is timed directly over 10^5 repetitions and divided by the run's median step:
  ratio = 1 + timer cost / step time.  Goal ≤ 1.01.  As a cross-check, the same training is also run
  alternately with `profile.step_timer` true and false (no profile), several pairs in one process; on a busy
  shared machine that ratio is dominated by other processes' load and is shown, not used.

    python tools/bench/bench_overhead.py                    # prints a markdown table
    python tools/bench/bench_overhead.py --pairs 2 --steps 40 --set profile.host_tracer_level=1
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
    from tfbertperf.run import ensure_data
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
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--window", default="20:45", help="profile.steps for the traced run")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--pairs", type=int, default=3, help="step timer on/off pairs")
    p.add_argument("--traced-runs", type=int, default=7, help="traced runs (median of their traced ÷ untraced)")
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra --set for every run")
    a = p.parse_args(argv)

    from tfbertperf.config import load_config
    from tfbertperf.train.loop import train

    base = [f"train.steps={a.steps}", f"train.batch_size={a.batch}", "profile.probe_steps=0", *a.sets]
    t0 = time.time()
    quiet = lambda m: None  # noqa: E731

    # 1. traced ÷ untraced, same run (several runs: a burst of other load during the window moves one run's ratio).
    #    The default capture (thread-pool task events off) and TF's full one (on) alternate, run by run.
    cfg = load_config(sets=[*base, f"profile.steps={a.window}"])
    dataset_fn, vocab = make_dataset_fn(cfg)
    start, stop = cfg.profile_window
    variants = {False: [], True: []}  # threadpool_events → [(ratio, inside median, outside median)]
    for k in range(a.traced_runs):
        for tp in ((False, True) if k % 2 == 0 else (True, False)):
            c = load_config(sets=[*base, f"profile.steps={a.window}", f"profile.threadpool_events={str(tp).lower()}"])
            with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tb:
                print(f"[bench] traced run {k + 1}/{a.traced_runs}, thread-pool events {'on' if tp else 'off'} …",
                      file=sys.stderr, flush=True)
                r = train(c, dataset_fn, vocab, tb, progress=quiet)
            inside = [r.step_times_ms[i] for i in range(start + 1, stop - 1)]
            outside = [r.step_times_ms[i] for i in range(r.warmup_steps, len(r.step_times_ms))
                       if not start <= i < stop]
            variants[tp].append((statistics.median(inside) / statistics.median(outside), statistics.median(inside),
                                 statistics.median(outside)))
    traced = variants[False]
    traced_ratio, inside_ms, outside_ms = sorted(traced)[len(traced) // 2]

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
    timer_ratio = 1.0 + timer_cost_ms / outside_ms

    print("\n| measure | numerator ms/step | denominator ms/step | ratio | goal |")
    print("|---|---|---|---|---|")
    for tp, label, goal in ((False, "default capture", "≤ 1.03"), (True, "with thread-pool task events", "—")):
        runs = variants[tp]
        ratio, ins, outs = sorted(runs)[len(runs) // 2]
        print(f"| traced ÷ untraced, {label} (same run, {len(inside)} vs {len(outside)} steps; median of {len(runs)} "
              f"runs: {', '.join(f'{x[0]:.3f}' for x in runs)}) | {ins:.1f} | {outs:.1f} | {ratio:.3f} | {goal} |")
    print(f"| step timer on ÷ off (timer cost {timer_cost_ms * 1e6:.0f} ns/step ÷ median step) | "
          f"{outside_ms + timer_cost_ms:.4f} | {outside_ms:.4f} | {timer_ratio:.6f} | ≤ 1.01 |")
    print(f"| cross-check: step timer on ÷ off, {a.pairs} alternating runs (per-pair ratios "
          f"{', '.join(f'{x:.3f}' for x in ratios)}; load-dominated) | {statistics.median(meds[True]):.1f} | "
          f"{statistics.median(meds[False]):.1f} | {runs_ratio:.3f} | — |")
    print(f"\nBERT-{cfg.model.size}, batch {a.batch}, {a.steps} steps per run; {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
