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


_ANALYZE = ("import json, sys; from tfbertperf.analyze import analyze; r = analyze(sys.argv[1]); "
            "print(json.dumps({'alone': r['attribution']['input_cost_estimate_fraction'], "
            "'verdict': r['verdict']['bottleneck'], 'undecided': bool(r['verdict'].get('undecided'))}))")


def _analyze(pythonpath: str, out: str) -> dict:
    """analyze's capture-alone figure and verdict, with the tfbertperf on `pythonpath` (this tree, or --baseline's)."""
    res = subprocess.run([sys.executable, "-c", _ANALYZE, out], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "2"},
                         cwd=tempfile.gettempdir())
    if res.returncode:
        raise SystemExit(f"analyze ({pythonpath}) failed on {out}: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def one(kind: str, steps: int, rounds: int, wait_ms: float, style: str, baseline: str) -> dict:
    out = tempfile.mkdtemp(prefix=f"tfloop-{kind}-")
    probe = style != "bare"  # a bare loop has no StepTimer: no what-if, the capture alone
    proc = subprocess.run([sys.executable, str(PROGRAM), "--input", kind, "--out", out, "--steps", str(steps),
                           "--window", "20:40", "--truth", str(rounds), "--wait-ms", str(wait_ms), "--style", style,
                           *(["--probe"] if probe else [])],
                          capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if proc.returncode:
        raise SystemExit(f"{kind}: the program failed: {proc.stderr.strip().splitlines()[-1]}")
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    if probe and (not run["what_if"] or run["what_if"].get("input_cost_fraction") is None):  # it said why: say it
        said = [ln for ln in proc.stderr.splitlines() if "StepTimer" in ln]
        print(f"{kind}: no what-if: {said[-1].strip() if said else run['what_if']}", flush=True)
        return {}
    now = _analyze(str(ROOT), out)
    return {"input": kind, "truth": run["truth"], "T_ms": run["T_ms"], "T_c_ms": run["T_c_ms"],
            "probe": run["what_if"]["input_cost_fraction"] if probe else None,
            "ci95": run["what_if"]["input_cost_ci95"] if probe else None, **now,
            "before": _analyze(baseline, out) if baseline else None}


def _line(k: str, r: int, row: dict) -> str:
    probe = (f"probe {row['probe']:6.1%} ± {row['ci95']:.1%} ({row['probe'] - row['truth']:+.1%})  "
             if row["probe"] is not None else "")
    before = (f"  before: alone {row['before']['alone']:6.1%} ({row['before']['alone'] - row['truth']:+.1%}) "
              f"verdict {row['before']['verdict']}" if row["before"] else "")
    return (f"{k:7s} rep {r}: truth {row['truth']:6.1%} (T {row['T_ms']:.2f} / T_c {row['T_c_ms']:.2f} ms)  {probe}"
            f"alone {row['alone']:6.1%} ({row['alone'] - row['truth']:+.1%})  verdict {row['verdict']}"
            f"{' (undecided)' if row['undecided'] else ''}{before}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", default=",".join(INPUTS))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=8, help="the truth's alternating blocks")
    ap.add_argument("--wait-ms", type=float, default=20.0)
    ap.add_argument("--style", choices=("with", "for", "bare"), default="with",
                    help="how the loop is written (tests/programs/tf_custom_loop.py --style); bare: no probe")
    ap.add_argument("--baseline", default="", help="another checkout whose analyze reads the same captures")
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
            row = one(k, a.steps, a.rounds, a.wait_ms, a.style, a.baseline)
            if not row:
                continue
            rows.append(row)
            print(_line(k, r, row), flush=True)
    guess = statistics.median(x["truth"] for x in rows)
    figures = [f for f in ("probe", "alone") if rows and rows[0][f] is not None]

    def err(rs, f):
        return statistics.mean(abs((x[f] if f != "before" else x["before"]["alone"]) - x["truth"]) for x in rs)

    if rows and rows[0]["before"]:
        figures.append("before")
    for k, mine in [*((k, [x for x in rows if x["input"] == k]) for k in kinds), ("all", rows)]:
        if not mine:
            continue
        said = ", ".join(f"{f if f != 'alone' else 'capture alone'} {err(mine, f) * 100:.1f} pp" for f in figures)
        right = [sum((y["verdict"] if y else "") == ("input" if x["truth"] >= 0.2 else "compute") for x in mine
                     for y in [x if f == "now" else x["before"]]) for f in ("now", "before")]
        print(f"{k:7s} mean |error|: {said}, constant guess ({guess:.1%}) "
              f"{statistics.mean(abs(guess - x['truth']) for x in mine) * 100:.1f} pp; verdicts {right[0]} of "
              f"{len(mine)} on the truth's side of 20 %" + (f" (before: {right[1]})" if "before" in figures else ""))
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
