"""A user's own TensorFlow loop measured by tfbertperf.tf_steps.StepTimer against its truth: per run, the measured
what-if (probe=True) and `analyze`'s capture-alone estimate against (T − T_c) / T from alternating blocks of the same
step on the pipeline and on one cached batch, no profiler (tests/programs/tf_custom_loop.py --truth), measured in the
same process after the loop.  Prints one line per run, then per input the mean |error| of each figure, and a
constant guess's (the truths' median over all runs) beside them.

    python tools/bench/bench_tf_custom_loop.py --inputs wait,parse,memory --reps 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "programs" / "tf_custom_loop.py"
INPUTS = ("wait", "parse", "memory")


def one(kind: str, steps: int, rounds: int, wait_ms: float) -> dict:
    from tfbertperf.analyze import analyze

    out = tempfile.mkdtemp(prefix=f"tfloop-{kind}-")
    proc = subprocess.run([sys.executable, str(PROGRAM), "--input", kind, "--out", out, "--steps", str(steps),
                           "--window", "20:40", "--probe", "--truth", str(rounds), "--wait-ms", str(wait_ms)],
                          capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if proc.returncode:
        raise SystemExit(f"{kind}: the program failed: {proc.stderr.strip().splitlines()[-1]}")
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    if not run["what_if"] or run["what_if"].get("input_cost_fraction") is None:  # the probe said why: say it
        said = [ln for ln in proc.stderr.splitlines() if "StepTimer" in ln]
        print(f"{kind}: no what-if: {said[-1].strip() if said else run['what_if']}", flush=True)
        return {}
    rep = analyze(out)
    att = rep["attribution"]
    return {"input": kind, "truth": run["truth"], "T_ms": run["T_ms"], "T_c_ms": run["T_c_ms"],
            "probe": run["what_if"]["input_cost_fraction"], "ci95": run["what_if"]["input_cost_ci95"],
            "alone": att["input_cost_estimate_fraction"], "verdict": rep["verdict"]["bottleneck"],
            "undecided": bool(rep["verdict"].get("undecided"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", default=",".join(INPUTS))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=8, help="the truth's alternating blocks")
    ap.add_argument("--wait-ms", type=float, default=20.0)
    a = ap.parse_args()
    kinds = a.inputs.split(",")
    bad = [k for k in kinds if k not in INPUTS]
    if bad:
        print(f"bench_tf_custom_loop: --inputs {','.join(bad)}: unknown (choose from {', '.join(INPUTS)})",
              file=sys.stderr)
        raise SystemExit(2)
    print(f"load {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for r in range(a.reps):
        for k in kinds:
            row = one(k, a.steps, a.rounds, a.wait_ms)
            if not row:
                continue
            rows.append(row)
            print(f"{k:7s} rep {r}: truth {row['truth']:6.1%} (T {row['T_ms']:.2f} / T_c {row['T_c_ms']:.2f} ms)  "
                  f"probe {row['probe']:6.1%} ± {row['ci95']:.1%} ({row['probe'] - row['truth']:+.1%})  "
                  f"alone {row['alone']:6.1%} ({row['alone'] - row['truth']:+.1%})  verdict {row['verdict']}"
                  f"{' (undecided)' if row['undecided'] else ''}", flush=True)
    guess = statistics.median(x["truth"] for x in rows)
    for k in kinds:
        mine = [x for x in rows if x["input"] == k]
        err = {f: statistics.mean(abs(x[f] - x["truth"]) for x in mine) for f in ("probe", "alone")}
        const = statistics.mean(abs(guess - x["truth"]) for x in mine)
        print(f"{k:7s} mean |error|: probe {err['probe'] * 100:.1f} pp, capture alone {err['alone'] * 100:.1f} pp, "
              f"constant guess ({guess:.1%}) {const * 100:.1f} pp")
    every = {f: statistics.mean(abs(x[f] - x["truth"]) for x in rows) for f in ("probe", "alone")}
    print(f"all     mean |error|: probe {every['probe'] * 100:.1f} pp, capture alone {every['alone'] * 100:.1f} pp, "
          f"constant guess {statistics.mean(abs(guess - x['truth']) for x in rows) * 100:.1f} pp; verdicts "
          f"{sum(x['verdict'] == ('input' if x['truth'] >= 0.2 else 'compute') for x in rows)} of {len(rows)} on the "
          f"truth's side of 20 %")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
