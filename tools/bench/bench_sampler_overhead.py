"""Cost of the host utilization sampler (profile/utilization.py) on step time: tiny BERT on the real pipeline, one
run alternating segments of --segment-steps steps with the sampler off and on (started/stopped between segments,
outside step timing, via train/loop.py's STEP_HOOK), as bench_overhead.py does for tracing.  Ratio = median step
of the sampler-on segments ÷ median of the sampler-off segments (each segment's first step dropped).  Also the
direct figure: the sampler thread's own CPU time per second of wall (tick cost × rate) ÷ cores.  Goal ≤ 1.01.

    python tools/bench/bench_sampler_overhead.py                  # 10 Hz, 24 segments of 15 steps
    python tools/bench/bench_sampler_overhead.py --hz 50 --segments 16
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--segments", type=int, default=24, help="segments (even: off, on, off, on, …)")
    p.add_argument("--segment-steps", type=int, default=15)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--hz", type=float, default=10.0)
    p.add_argument("--set", dest="sets", action="append", default=[])
    a = p.parse_args(argv)

    from bench_overhead import make_dataset_fn

    from tfbertperf.config import load_config
    from tfbertperf.profile.utilization import UtilizationSampler
    from tfbertperf.train import loop

    warm = 5
    steps = warm + a.segments * a.segment_steps
    cfg = load_config(sets=[f"train.steps={steps}", f"train.batch_size={a.batch}", f"train.warmup_steps={warm}",
                            "profile.steps=none", "profile.probe_steps=0", "train.log_every=1000", *a.sets])
    dataset_fn, vocab = make_dataset_fn(cfg)
    state = {"i": 0, "s": None}
    costs = []

    def hook(kind):
        if kind != "train":
            return
        i, state["i"] = state["i"], state["i"] + 1
        if i >= warm and (i - warm) % a.segment_steps == 0:
            seg = (i - warm) // a.segment_steps
            if state["s"] is not None:
                s = state["s"].stop()
                costs.append(s.summary()["tick_cost_us_mean"])
                state["s"] = None
            if seg % 2 == 1:
                state["s"] = UtilizationSampler(hz=a.hz).start()

    loop.STEP_HOOK = hook
    try:
        with tempfile.TemporaryDirectory() as tb:
            r = loop.train(cfg, dataset_fn, vocab, tb, progress=None)
    finally:
        loop.STEP_HOOK = None
        if state["s"] is not None:
            state["s"].stop()
    off, on = [], []
    for seg in range(a.segments):
        lo = warm + seg * a.segment_steps
        (on if seg % 2 else off).extend(r.step_times_ms[lo + 1: lo + a.segment_steps])
    m_off, m_on = statistics.median(off), statistics.median(on)
    cost_us = statistics.fmean(costs) if costs else 0.0
    direct = cost_us * 1e-6 * a.hz / (os.cpu_count() or 1)
    print("| sampler | step ms off (median) | step ms on (median) | on ÷ off | sampler CPU per tick | "
          "direct: sampler CPU ÷ machine |")
    print("|---|---|---|---|---|---|")
    print(f"| {a.hz:g} Hz | {m_off:.2f} | {m_on:.2f} | {m_on / m_off:.4f} | {cost_us:.0f} µs | {direct:.2%} |")
    print(f"segments {a.segments} × {a.segment_steps} steps, batch {a.batch}; load {os.getloadavg()[0]:.2f}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
