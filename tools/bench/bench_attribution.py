"""Attribution accuracy against ground truth: tiny BERT, injected local read latency, naive and tuned pipelines.

Ground truth per row (median over --reps alternated repetitions): the real run's mean step time T (report.json throughput mean, steady steps) and, measured right
before it in a separate run in the same process, the same model fed synthetic in-memory batches (T_c, mean);
truth = (T − T_c) / T.  Means, not medians: a stall that hits one step in five (a slow read shared by five batches)
costs throughput, and a median would not see it.  Columns: our in-run what-if figure (input_cost_fraction, from the compute-only probe),
the trace estimate (input_cost_estimate_fraction: blocked wait + stolen CPU), and the direct figures
(input_bound_fraction from xprof, step_timer.input_wait_fraction), each with its error in percentage points.

    python tools/bench/bench_attribution.py                 # 0/5/20/50 ms × naive/tuned, 3 reps, markdown table
    python tools/bench/bench_attribution.py --latencies 0,20 --presets tuned --steps 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def compute_only_ms(cfg, vocab_size: int) -> float:
    """T_c: the same model and batch fed synthetic in-memory batches, no profile, no probe (mean steady step)."""
    from tfbertperf.run import steady_steps
    from tfbertperf.train.loop import train
    from tfbertperf.train.synthetic import synthetic_dataset_fn

    result = train(cfg, synthetic_dataset_fn(cfg, vocab_size), vocab_size, None, progress=lambda m: None)
    idx = steady_steps(result)
    return statistics.fmean(result.step_times_ms[i] for i in idx)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latencies", default="0,5,20,50", help="data.read_latency_ms values (comma-separated)")
    p.add_argument("--presets", default="naive,tuned")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--window", default="15:30", help="profile.steps")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--probe-steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=3, help="repetitions per row (medians of each figure)")
    p.add_argument("--out", default="", help="runs root (default: a temp dir)")
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra --set for every run")
    a = p.parse_args(argv)

    from tfbertperf.config import load_config
    from tfbertperf.data.manifest import load_manifest
    from tfbertperf.run import run
    from tfbertperf.storage import open_backend

    out = a.out or tempfile.mkdtemp(prefix="bench-attribution-")
    base = [f"train.steps={a.steps}", f"profile.steps={a.window}", f"train.batch_size={a.batch}",
            f"profile.probe_steps={a.probe_steps}", f"run.out={out}", *a.sets]
    rows = []
    t_start = time.time()
    vocab_size = None
    def median(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    synth_cfg = load_config(sets=[*base, "profile.steps=none", "profile.probe_steps=0"])
    for preset in a.presets.split(","):
        for lat in a.latencies.split(","):
            cfg = load_config(sets=[*base, f"pipeline.preset={preset}", f"data.read_latency_ms={lat}"])
            print(f"[bench] {preset} latency {lat} ms …", file=sys.stderr, flush=True)
            reps = []
            for rep_i in range(a.reps):
                # alternate synthetic and real runs so that a burst of load hits both sides alike
                if vocab_size is None:  # the first real run prepares the data; its vocab sizes the synthetic run
                    run_dir, rep = run(cfg, progress=False)
                    backend = open_backend(cfg.resolved_data_uri(), cfg.data)
                    vocab_size = int(load_manifest(cfg.resolved_data_uri(), backend)["vocab_size"])
                    t_c = compute_only_ms(synth_cfg, vocab_size)
                else:
                    t_c = compute_only_ms(synth_cfg, vocab_size)
                    run_dir, rep = run(cfg, progress=False)
                att = rep.get("attribution") or {}
                reps.append({
                    "T": rep["throughput"]["step_time_ms"]["mean"], "T_c": t_c,  # means of steady steps, like T_c
                    "cost": att.get("input_cost_fraction"), "estimate": att.get("input_cost_estimate_fraction"),
                    "direct": att.get("input_bound_fraction"),
                    "wait": (rep.get("step_timer") or {}).get("input_wait_fraction"),
                    "bottleneck": (rep.get("verdict") or {}).get("bottleneck"),
                })
            T = median(r["T"] for r in reps)
            t_c = median(r["T_c"] for r in reps)
            truth = (T - t_c) / T
            rows.append({"preset": preset, "latency_ms": float(lat), "T": T, "T_c": t_c, "truth": truth,
                         **{k: median(r[k] for r in reps) for k in ("cost", "estimate", "direct", "wait")},
                         "bottleneck": "/".join(sorted({r["bottleneck"] for r in reps if r["bottleneck"]}))})
            print(f"[bench]   T {T:.1f} ms, T_c {t_c:.1f} ms, truth {truth:.3f}", file=sys.stderr, flush=True)

    def cell(v, truth):
        if v is None:
            return "n/a"
        return f"{v * 100:.1f} % ({(v - truth) * 100:+.1f} pp)"

    print("\n| preset | read latency | T ms | T_c ms (synthetic run) | truth (T−T_c)/T | input_cost_fraction (probe) | "
          "input_cost_estimate_fraction (trace) | input_bound_fraction (xprof) | step_timer input_wait_fraction | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['preset']} | {r['latency_ms']:g} ms | {r['T']:.1f} | {r['T_c']:.1f} | {r['truth'] * 100:.1f} % | "
              f"{cell(r['cost'], r['truth'])} | {cell(r['estimate'], r['truth'])} | {cell(r['direct'], r['truth'])} | "
              f"{cell(r['wait'], r['truth'])} | {r['bottleneck']} |")
    for key, name in (("cost", "input_cost_fraction"), ("estimate", "input_cost_estimate_fraction"),
                      ("direct", "input_bound_fraction"), ("wait", "step_timer input_wait_fraction")):
        errs = [abs(r[key] - r["truth"]) * 100 for r in rows if r[key] is not None]
        if errs:
            print(f"\n{name}: max |error| {max(errs):.1f} pp, mean |error| {statistics.fmean(errs):.1f} pp", end="")
    print(f"\n\n{len(rows)} runs in {time.time() - t_start:.0f} s; runs under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
