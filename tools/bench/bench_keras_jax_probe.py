"""The Keras-JAX `ProfileCallback(probe=True)` (tfbertperf/keras_jax.py) on a user's own fits against the what-if
truth measured in the same process (tests/programs/keras_jax_fit.py): per shape and repetition, the truth, the
measured what-if with its 95 % interval, `analyze`'s capture-alone estimate and its verdicts, with per-pair errors.

    python tools/bench/bench_keras_jax_probe.py --reps 3
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = Path(HERE).parents[1]

from bench_jax_cpu_loader import INPUT_BOUND, analyze_with, err, pct  # noqa: E402

SHAPES = ("arrays", "wait", "numpy", "compute")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--epochs", type=int, default=2, help="epochs of each profiled fit (128 steps each)")
    a = p.parse_args(argv)
    t0, out = time.time(), Path(tempfile.mkdtemp(prefix="bench-kerasjax-"))
    rows, errs = [], {}
    for rep in range(1, a.reps + 1):
        for shape in a.shapes.split(","):
            print(f"[bench] {shape}: repetition {rep}/{a.reps} …", file=sys.stderr, flush=True)
            proc = subprocess.run([sys.executable, str(ROOT / "tests" / "programs" / "keras_jax_fit.py"), "--shape",
                                   shape, "--out", str(out / f"r{rep}"), "--epochs", str(a.epochs)],
                                  capture_output=True, text=True, timeout=900, cwd=tempfile.gettempdir(),
                                  env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"})
            if proc.returncode:
                print(proc.stderr[-2000:], file=sys.stderr)
                return 1
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            truth, w = r["truth"], r["probe"] or {}
            icf, ci = w.get("input_cost_fraction"), w.get("input_cost_ci95")
            now = analyze_with(str(ROOT), r["logdir"])
            e = errs.setdefault(shape, {"probe": [], "alone": [], "times": [], "in_ci": 0, "n": 0})
            e["n"] += 1
            if icf is not None:
                e["probe"].append(abs(icf - truth))
                e["in_ci"] += ci is not None and abs(icf - truth) <= ci
            for k in ("alone", "times"):
                if now[k] is not None:
                    e[k].append(abs(now[k] - truth))
            right = (now["bottleneck"] == "input") == (truth >= INPUT_BOUND)
            halves = " / ".join(pct(h) for h in r["truth_halves"])
            interval = f" ± {100 * ci:.1f}" if ci is not None else ""
            rows.append(f"| {shape} | {rep} | {pct(truth)} ({r['T_ms']:.2f} / {r['T_c_ms']:.2f}) | {halves} | "
                        f"{pct(icf)}{interval} ({err(icf, truth)}), {w.get('probe_blocks')} blocks "
                        f"({w.get('step_ms')} / {w.get('compute_only_step_ms')}) | {pct(now['alone'])} "
                        f"({err(now['alone'], truth)}) | {pct(now['times'])} ({err(now['times'], truth)}) | {now['bottleneck']} {'✓' if right else '✗'} | "
                        f"{r['load']:.1f} |")
    print("| shape | rep | truth (T / T_c ms) | truth before / after the fit | measured what-if (T / T_c ms) | "
          "capture alone | capture + step file | verdict alone | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    for shape, e in errs.items():
        print(f"{shape}: measured what-if mean |error| {100 * statistics.fmean(e['probe'] or [float('nan')]):.1f} pp "
              f"(truth inside its interval {e['in_ci']} of {e['n']}); capture alone "
              f"{100 * statistics.fmean(e['alone'] or [float('nan')]):.1f} pp, with the step file "
              f"{100 * statistics.fmean(e['times'] or [float('nan')]):.1f} pp")
    print(f"\n{len(rows)} fits in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
