"""`tfbertperf analyze` on own Keras `model.fit` programs of several input shapes vs their what-if truth
(issue 29, "CPU is CPU, waits are waits"): per program and repetition, the truth and analyze's input cost from
the capture alone, side by side, with per-pair errors.

Programs: tests/programs/keras_fit_rule_shapes.py --shape S (sleep_serial, sleep_parallel, parse, tokenize, compute),
each run once per repetition in a fresh interpreter: first the profiled fit (ProfileCallback, which writes the
threads' CPU beside the capture), then the truth, (T − T_c) / T from alternating unprofiled fit blocks on the
pipeline and on one cached batch, in the same process.
Per pair:
  truth      (T − T_c) / T;
  analyze    input_cost_estimate_fraction of `analyze` on the capture alone (the code on PYTHONPATH), and
             input_cost_estimate_unprofiled_fraction with the step times ProfileCallback wrote beside it;
  baseline   the same figure from another tfbertperf checkout's analyze (--baseline DIR, e.g. /work/main: the
             code before this change, which reads no thread CPU), run on the same capture;
  verdict    analyze's bottleneck; right when it is "input" for truth ≥ 0.20 and not "input" below.

    python tools/bench/bench_analyze_foreign_rules.py --reps 2 --baseline /work/main
    python tools/bench/bench_analyze_foreign_rules.py --shapes parse,sleep_serial --reps 3
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
PROGRAM = ROOT / "tests" / "programs" / "keras_fit_rule_shapes.py"
SHAPES = "sleep_serial,sleep_parallel,parse,tokenize,compute"
INPUT_BOUND = 0.20

_ANALYZE = """
import glob, json, os, sys
from tfbertperf.analyze import analyze
def one(d):
    a = d['attribution']
    return {'estimate': a.get('input_cost_estimate_fraction'), 'blocked': a.get('input_bound_fraction'),
            'stolen': a.get('input_stolen_cpu_fraction'), 'basis': a.get('input_cpu_basis'),
            'unprofiled': a.get('input_cost_estimate_unprofiled_fraction'),
            'bottleneck': d['verdict']['bottleneck'] + (' (undecided)' if d['verdict'].get('undecided') else '')}
times = one(analyze(sys.argv[1]))  # with the step times ProfileCallback wrote beside the capture (no probe here)
files = glob.glob(os.path.join(sys.argv[1], 'plugins', 'profile', '*', 'tfbertperf_steps.json'))
for f in files:
    os.replace(f, f + '.aside')
try:
    alone = one(analyze(sys.argv[1]))  # the capture alone
finally:
    for f in files:
        os.replace(f + '.aside', f)
print(json.dumps({**alone, 'unprofiled': times['unprofiled'], 'bottleneck_times': times['bottleneck']}))
"""


def analyze_with(pythonpath: str, logdir: str) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run([sys.executable, "-c", _ANALYZE, logdir], capture_output=True, text=True, env=env,
                         cwd=tempfile.gettempdir(), timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"analyze ({pythonpath}) failed on {logdir}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--baseline", default="", help="another checkout whose analyze is run on the same captures")
    p.add_argument("--sleep-ms", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=80, help="fit steps of the profiled run")
    p.add_argument("--window", default="30:70", help="its profiled steps START:STOP")
    a = p.parse_args(argv)
    here = str(ROOT)
    rows = []
    t0 = time.time()
    for shape in a.shapes.split(","):
        for k in range(a.reps):
            out = tempfile.mkdtemp(prefix="bench-rules-")
            print(f"[bench] {shape}: repetition {k + 1}/{a.reps} …", file=sys.stderr, flush=True)
            proc = subprocess.run([sys.executable, str(PROGRAM), "--out", out, "--shape", shape,
                                   "--sleep-ms", str(a.sleep_ms), "--steps", str(a.steps), "--window", a.window],
                                  capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": here}, timeout=1200)
            if proc.returncode != 0:
                raise SystemExit(f"{shape}: the program failed: {proc.stderr.strip().splitlines()[-1:]}")
            res = {r["mode"]: r for r in (json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{"))}
            ours = analyze_with(here, res["profiled"]["logdir"])
            base = analyze_with(a.baseline, res["profiled"]["logdir"]) if a.baseline else None
            rows.append({"shape": shape, "rep": k + 1, "truth": res["truth"]["input_cost_fraction"],
                         "T": res["truth"]["step_time_ms"], "T_c": res["truth"]["compute_only_step_ms"],
                         "profiled_ms": res["profiled"]["step_time_ms"], "ours": ours, "base": base,
                         "logdir": res["profiled"]["logdir"],
                         "load": os.getloadavg()[0]})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| program | rep | T / T_c ms (unprofiled) | profiled step ms | truth | capture alone | error | "
          "capture + step times (no probe) | error | verdict alone → with step times | "
          + ("baseline analyze | baseline error | baseline verdict | baseline with step times | "
             if a.baseline else "") + "load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|---|" if a.baseline else "") + "---|")
    errs, base_errs, ms_errs = [], [], []
    # right when its side of the line is the truth's; an undecided verdict names both sides, so it is not wrong
    ok = lambda b, r: ("~" if "undecided" in b else  # noqa: E731
                       "✓" if (b == "input") == (r["truth"] >= INPUT_BOUND) else "✗")
    for r in rows:
        o = r["ours"]
        err = (o["estimate"] or 0.0) - r["truth"]
        # the same estimate against the unprofiled step of the step file ProfileCallback writes (issue 29 part A)
        of_t = o["unprofiled"]
        errs.append(abs(err))
        if of_t is not None:
            ms_errs.append(abs(of_t - r["truth"]))
        line = (f"| {r['shape']} | {r['rep']} | {r['T']:.1f} / {r['T_c']:.1f} | {r['profiled_ms']:.1f} | "
                f"{r['truth']:.0%} | {o['estimate'] or 0:.0%} | {err * 100:+.1f} pp | "
                + ("— | — | " if of_t is None else f"{of_t:.0%} | {(of_t - r['truth']) * 100:+.1f} pp | ")
                + f"{o['bottleneck']} {ok(o['bottleneck'], r)} → {o['bottleneck_times']} "
                f"{ok(o['bottleneck_times'], r)} | ")
        if r["base"]:
            b_err = (r["base"]["estimate"] or 0.0) - r["truth"]
            base_errs.append(abs(b_err))
            b_t = r["base"]["unprofiled"]
            line += (f"{r['base']['estimate'] or 0:.0%} | {b_err * 100:+.1f} pp | {r['base']['bottleneck']} "
                     f"{ok(r['base']['bottleneck'], r)} | "
                     + ("— | " if b_t is None else f"{b_t:.0%} ({(b_t - r['truth']) * 100:+.1f} pp) | "))
        print(line + f"{r['load']:.1f} |")
    for shape in a.shapes.split(","):
        mine = [r for r in rows if r["shape"] == shape]
        alone = [abs((r["ours"]["estimate"] or 0.0) - r["truth"]) for r in mine]
        times = [abs(r["ours"]["unprofiled"] - r["truth"]) for r in mine if r["ours"]["unprofiled"] is not None]
        print(f"\n{shape}: mean |error| capture alone {statistics.fmean(alone) * 100:.1f} pp"
              + (f", with the step times {statistics.fmean(times) * 100:.1f} pp ({len(times)} pairs)" if times else ""),
              end="")
    print(f"\n\nmean |error|: capture alone {statistics.fmean(errs) * 100:.1f} pp"
          + (f", with the step times {statistics.fmean(ms_errs) * 100:.1f} pp" if ms_errs else "")
          + (f", baseline {statistics.fmean(base_errs) * 100:.1f} pp" if base_errs else "")
          + f"; {len(rows)} pairs in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
