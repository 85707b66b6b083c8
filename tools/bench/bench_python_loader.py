"""A user's Keras fit on a `PyDataset` (issue 29, the loader tf.data's knobs do not reach): what `tfbertperf
analyze` says from the capture alone, and what following its advice measures.  Prints a markdown table.

Program: tests/programs/keras_pydataset.py (an MLP fed by a PyDataset whose __getitem__ waits READ ms, a slow read,
and then computes CPU ms in Python), each configuration a fresh interpreter, the configurations taking turns per
repetition so that a load change hits them alike:
  reads   --read-ms 20: workers=1 (the loader as written) vs workers=4 threads (the advice for waiting reads)
  python  --read-ms 0 --cpu-ms 8: workers=1 vs workers=2 threads vs workers=2 processes (the advice for CPU-heavy
          __getitem__: threads share the interpreter lock)
  mixed   --read-ms 4 --cpu-ms 1: workers=2 threads vs workers=2 processes (a read, then a little Python: the
          loader keeps ahead, and on threads the step waits for the interpreter lock they hold)
--backend jax runs the fits on Keras' JAX backend (KERAS_BACKEND=jax: PyDataset without tf.data, XLA on the CPU).
Per run: the unprofiled steady step (ProfileCallback's step times), the measured what-if (ProfileCallback(probe=True)
in the same fit: the truth), and analyze's verdict, input estimate and first advice from the capture alone (the
step file moved aside); per configuration the speed-up over workers=1, the median over repetitions of the per-pair
ratio.

    python tools/bench/bench_python_loader.py --reps 3 [--baseline /tmp/wt-before]
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
PROGRAM = ROOT / "tests" / "programs" / "keras_pydataset.py"
CASES = {
    "reads": (["--read-ms", "20"], [("workers=1", ["--workers", "1"]), ("workers=4 threads", ["--workers", "4"]),
                                    ("workers=8 threads", ["--workers", "8"])]),
    "python": (["--read-ms", "0", "--cpu-ms", "8"],
               [("workers=1", ["--workers", "1"]), ("workers=2 threads", ["--workers", "2"]),
                ("workers=2 processes", ["--workers", "2", "--processes"]),
                ("workers=4 processes", ["--workers", "4", "--processes"])]),
    "mixed": (["--read-ms", "4", "--cpu-ms", "1"],
              [("workers=2 threads", ["--workers", "2"]), ("workers=2 processes", ["--workers", "2", "--processes"]),
               ("workers=4 threads", ["--workers", "4"])]),
}


_ANALYZE = """
import glob, json, os, sys
from tfbertperf.analyze import analyze
files = glob.glob(os.path.join(sys.argv[1], 'plugins', 'profile', '*', 'tfbertperf_steps.json'))
for f in files:  # the capture alone: the probe's step file aside
    os.replace(f, f + '.aside')
try:
    d = analyze(sys.argv[1])
finally:
    for f in files:
        os.replace(f + '.aside', f)
v = d['verdict']
print(json.dumps({'estimate': d['attribution'].get('input_cost_estimate_fraction'),
                  'bottleneck': v['bottleneck'] + (' (undecided)' if v.get('undecided') else ''),
                  'first': (v.get('actions') or [{}])[0].get('advice', ''),
                  'workers': d['attribution'].get('input_loader_workers') or {}}))
"""


def _analyze(pythonpath: str, out: str, script: str = _ANALYZE) -> dict:
    """analyze on the capture alone, with the tfbertperf on `pythonpath` (this tree, or --baseline's): `script`'s last
    line of JSON (bench_tfdata_maps.py passes its own)."""
    env = {**os.environ, "PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, "-c", script, out], capture_output=True, text=True, env=env,
                         cwd=tempfile.gettempdir(), timeout=600)
    if res.returncode != 0:
        raise SystemExit(f"analyze ({pythonpath}) failed on {out}: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _key(first: str) -> str:
    """The first advice in a few words (the table's column)."""
    return ("loader: no free core (cheaper, tf.data, offline)" if "fill the machine" in first else
            "loader: more processes" if "more worker processes" in first else
            "loader: threads, not processes" if "in place of its" in first else
            "loader: more threads" if "more worker threads" in first else
            "loader: threads keep ahead (cheaper, tf.data, offline)" if "keep ahead" in first else
            "loader: worker processes" if "worker processes" in first else
            "loader: worker threads" if "PyDataset(workers=N) threads" in first else
            "loader (processes or threads)" if "PyDataset(workers=N)" in first else
            "tf.data map" if "num_parallel_calls" in first else first[:40])


def _run(args: list[str], out: str, steps: int, baseline: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": BACKEND[0]}
    res = subprocess.run([sys.executable, str(PROGRAM), "--out", out, "--probe", "--steps", str(steps), *args],
                         capture_output=True, text=True, env=env, timeout=900)
    if res.returncode != 0:
        raise SystemExit(f"{PROGRAM.name} {' '.join(args)} failed: {res.stderr.strip().splitlines()[-1:]}")
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    now = _analyze(str(ROOT), out)
    then = _analyze(baseline, out) if baseline else None
    key = _key(now["first"])
    seen = now.get("workers") or {}  # what the record saw the loader run on, and the program's demand for cores
    if seen:
        key += (f" ({seen['processes']} proc, {seen['threads']} threads seen; wanted {seen['wanted_cores']:.1f} of "
                f"{seen['cores']} cores)")
    w = rec.get("what_if") or {}
    return {**rec, "bottleneck": now["bottleneck"], "estimate": now["estimate"], "advice": key,
            "truth": w.get("input_cost_fraction"), "truth_ci": w.get("input_cost_ci95"),
            "before": (f"{then['bottleneck']}, {100 * (then['estimate'] or 0):.0f} %, {_key(then['first'])}"
                       if then else "")}


BACKEND = ["tensorflow"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--steps", type=int, default=250, help="fit steps (the probe's blocks need a few hundred)")
    p.add_argument("--baseline", default="", help="another checkout whose analyze reads the same captures")
    p.add_argument("--backend", choices=("tensorflow", "jax"), default="tensorflow", help="Keras' backend")
    a = p.parse_args(argv)
    if any(c not in CASES for c in a.cases.split(",")):  # one line, before any fit runs
        print(f"bench_python_loader: --cases {a.cases!r}: expected a comma-separated list of {', '.join(CASES)}",
              file=sys.stderr)
        return 2
    BACKEND[0] = a.backend
    load0 = os.getloadavg()[0]
    t0 = time.time()
    print("| case | configuration | rep | unprofiled step ms | speed-up vs workers=1 (this rep) | what-if input "
          "(truth) | capture alone: input | error | verdict | first advice | baseline: verdict, input |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    summary, errors = [], []
    for case in a.cases.split(","):
        common, configs = CASES[case]
        ratios: dict[str, list[float]] = {name: [] for name, _ in configs}
        for rep in range(1, a.reps + 1):
            base = None
            for name, extra in configs:
                out = tempfile.mkdtemp(prefix=f"bench-pyloader-{case}-")
                r = _run(common + extra, out, a.steps, a.baseline)
                base = r["steady_ms"] if base is None else base
                ratios[name].append(base / r["steady_ms"])
                t, e = r["truth"], r["estimate"]
                err = f"{100 * (e - t):+.1f} pp" if t is not None and e is not None else "—"
                errors += [(f"{case}, {name}", t, e)] if t is not None and e is not None else []
                truth = f"{100 * t:.0f} % ± {100 * (r['truth_ci'] or 0):.0f}" if t is not None else "—"
                print(f"| {case} | {name} | {rep} | {r['steady_ms']:.2f} | {base / r['steady_ms']:.2f}× | {truth} | "
                      f"{100 * (e or 0):.0f} % | {err} | {r['bottleneck']} | {r['advice']} | {r['before']} |",
                      flush=True)
        summary += [(case, name, statistics.median(v)) for name, v in ratios.items() if name != "workers=1"]
    print()
    for case, name, ratio in summary:
        print(f"{case}: {name} {ratio:.2f}× the workers=1 step rate (median of per-rep ratios)")
    for key in dict.fromkeys(k for k, _, _ in errors):
        errs = [abs(e - t) for k, t, e in errors if k == key]
        print(f"{key}: capture alone vs its what-if, mean |error| {100 * statistics.fmean(errs):.1f} pp over "
              f"{len(errs)}")
    if errors:  # an honest score: against a constant guess of the truths' mean
        guess = statistics.fmean(t for _, t, _ in errors)
        print(f"all: mean |error| {100 * statistics.fmean(abs(e - t) for _, t, e in errors):.1f} pp; a constant "
              f"guess ({100 * guess:.1f} %) {100 * statistics.fmean(abs(t - guess) for _, t, _ in errors):.1f} pp")
    print(f"\n{time.time() - t0:.0f} s, load (1 min) {load0:.1f} → {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
