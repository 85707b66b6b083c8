"""`tfbertperf analyze` on a user's own JAX loop on the CPU whose Python loader runs on the training thread
(tests/programs/jax_cpu_loader.py, StepTimer's capture) against the loop's what-if truth, side by side with the code
before (profile/host_loader.py): per loader and repetition, the truth, the capture's input figure (alone, and with
the step file StepTimer writes beside it) and the verdict, with per-pair errors.

    python tools/bench/bench_jax_cpu_loader.py --reps 3 --baseline /tmp/wt_before
    python tools/bench/bench_jax_cpu_loader.py --thread --cases numpy:3,numpy:8,wait:8,python:3,none:0 --reps 2
    python tools/bench/bench_jax_cpu_loader.py --bare --reps 3 --baseline /tmp/wt_before   # the fetch between markers

--thread: the loader runs ahead in a thread of its own (the program's --thread; profile/host_loader.py reads the
thread's CPU from StepTimer's thread-CPU record); --process: in a child process (its CPU from the same
record).  The last line scores a constant guess (the captures' mean truth)
the same way: a rule that does not beat it says nothing.
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
CASES = (("wait", 5.0), ("wait", 1.0), ("numpy", 5.0), ("none", 0.0))
INPUT_BOUND = 0.20

_ANALYZE = """
import glob, json, os, sys
from tfbertperf.analyze import analyze
def one(d):  # a host capture's what-if estimate; a GPU capture's input and host→device shares of the step
    a, u = d['attribution'], d['attribution'].get('unprofiled') or {}
    gpu = lambda fr: fr['input'] + fr['host_to_device'] if fr else None
    alone, times = a.get('input_cost_estimate_fraction'), a.get('input_cost_estimate_unprofiled_fraction')
    und = ' (undecided)' if d['verdict'].get('undecided') else ''
    return {'alone': gpu(a.get('fractions')) if alone is None else alone, 'bottleneck': d['verdict']['bottleneck'] + und,
            'times': gpu(u.get('fractions')) if times is None else times}
with_times = one(analyze(sys.argv[1]))
files = glob.glob(os.path.join(sys.argv[1], 'plugins', 'profile', '*', 'tfbertperf_steps.json'))
for f in files:
    os.replace(f, f + '.aside')
try:
    alone = one(analyze(sys.argv[1]))
finally:
    for f in files:
        os.replace(f + '.aside', f)
print(json.dumps({'alone': alone['alone'], 'times': with_times['times'], 'bottleneck': alone['bottleneck']}))
"""


def analyze_with(pythonpath: str, logdir: str) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-c", _ANALYZE, logdir], capture_output=True, text=True, env=env,
                          cwd=tempfile.gettempdir(), timeout=600)  # not a checkout's root: PYTHONPATH decides
    if proc.returncode:
        line = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"alone": None, "times": None, "bottleneck": f"error: {line[:60]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def err(x, truth) -> str:
    return "—" if x is None else f"{100 * (x - truth):+.1f} pp"


def _refuse(why: str) -> int:
    print(f"bench_jax_cpu_loader: {why}", file=sys.stderr)  # one line, exit 2 (the project's bad-input rule)
    return 2


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--baseline", default="", help="another checkout (the code before) to analyze the same captures")
    p.add_argument("--probe", action="store_true", help="the loops run StepTimer(probe=True): its what-if beside")
    p.add_argument("--thread", action="store_true", help="the loader runs ahead in a background thread")
    p.add_argument("--process", action="store_true", help="the loader runs ahead in a child process")
    p.add_argument("--no-python-tracer", action="store_true", help="capture without JAX's Python tracer")
    p.add_argument("--bare", action="store_true", help="no StepTimer: StepTraceAnnotation around the step only, the "
                   "batch fetched between the markers (the program's --bare)")
    p.add_argument("--cases", default="", help="LOADER:MS,… (default: " + ",".join(f"{k}:{m:g}" for k, m in CASES) + ")")
    a = p.parse_args(argv)
    try:
        cases = [(k, float(m)) for k, m in (c.split(":") for c in a.cases.split(","))] if a.cases else CASES
        if not all(k in ("wait", "numpy", "python", "none") and m >= 0 for k, m in cases):
            raise ValueError(a.cases)
    except ValueError:
        return _refuse(f"--cases {a.cases!r}: expected LOADER:MS,… with LOADER one of wait, numpy, python, none")
    if a.thread and a.process:
        return _refuse("--thread and --process: the loader runs in one of them")
    if a.bare and a.probe:
        return _refuse("--bare and --probe: the probe is StepTimer's, and a bare loop has none")
    t0, out = time.time(), Path(tempfile.mkdtemp(prefix="bench-jaxcpu-"))
    rows, errs, probe_errs, pairs = [], {}, {}, []
    for rep in range(1, a.reps + 1):
        for kind, ms in cases:
            print(f"[bench] {kind} {ms:g} ms: repetition {rep}/{a.reps} …", file=sys.stderr, flush=True)
            proc = subprocess.run([sys.executable, str(ROOT / "tests" / "programs" / "jax_cpu_loader.py"),
                                   "--loader", kind, "--ms", str(ms), "--out", str(out / f"r{rep}"),
                                   *(["--probe"] if a.probe else []), *(["--thread"] if a.thread else []),
                                   *(["--process"] if a.process else []),
                                   *(["--no-python-tracer"] if a.no_python_tracer else []),
                                   *(["--bare"] if a.bare else [])],
                                  capture_output=True, text=True, timeout=900,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
            if proc.returncode:
                print(proc.stderr[-2000:], file=sys.stderr)
                return 1
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            now = analyze_with(str(ROOT), r["logdir"])
            before = analyze_with(a.baseline, r["logdir"]) if a.baseline else None
            truth = r["truth"]
            right = now["bottleneck"].startswith("input") == (truth >= INPUT_BOUND)
            key = (f"{kind} {ms:g} ms" + (" (thread)" if a.thread else " (process)" if a.process else "")
                   + (", no tracer" if a.no_python_tracer else "") + (", fetched between markers" if a.bare else ""))
            if now["alone"] is not None:
                errs.setdefault(key, []).append(abs(now["alone"] - truth))
                pairs.append((truth, now["alone"]))
            w = r.get("probe") or {}
            if w.get("input_cost_fraction") is not None:
                probe_errs.setdefault(key, []).append(abs(w["input_cost_fraction"] - truth))
            measured = (f"{pct(w.get('input_cost_fraction'))} ± {100 * (w.get('input_cost_ci95') or 0):.1f} "
                        f"({err(w.get('input_cost_fraction'), truth)}) | ") if a.probe else ""
            halves = " / ".join(pct(h) for h in r["halves"])
            rows.append(f"| {key} | {rep} | {pct(truth)} ({r['T_ms']:.1f} / {r['T_c_ms']:.1f}) | {halves} | "
                        + measured + f"{pct(now['alone'])} ({err(now['alone'], truth)}) | {pct(now['times'])} "
                        f"({err(now['times'], truth)}) | {now['bottleneck']} {'✓' if right else '✗'} | "
                        + (f"{pct(before['alone'])} ({err(before['alone'], truth)}), {before['bottleneck']} | "
                           if before else "") + f"{r['load']:.1f} |")
    print("| loader | rep | truth (T / T_c ms) | truth before / after the capture | " + ("measured what-if | " if a.probe
          else "") + "capture alone | capture + step file | verdict | " + ("code before: capture alone, verdict | " if
                                                                            a.baseline else "") + "load |")
    print("|---|---|---|---|---|---|---|" + ("---|" if a.probe else "") + ("---|" if a.baseline else "") + "---|")
    print("\n".join(rows))
    print()
    for key, e in errs.items():
        print(f"{key}: capture alone, mean |error| {100 * statistics.fmean(e):.1f} pp, max {100 * max(e):.1f} pp "
              f"over {len(e)}")
    for key, e in probe_errs.items():
        print(f"{key}: measured what-if (StepTimer probe), mean |error| {100 * statistics.fmean(e):.1f} pp, max "
              f"{100 * max(e):.1f} pp over {len(e)}")
    if pairs:
        guess = statistics.fmean(t for t, _ in pairs)
        print(f"all: capture alone mean |error| {100 * statistics.fmean(abs(e - t) for t, e in pairs):.1f} pp; a "
              f"constant guess ({100 * guess:.1f} %) {100 * statistics.fmean(abs(guess - t) for t, _ in pairs):.1f} pp")
    print(f"\n{len(rows)} captures in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
