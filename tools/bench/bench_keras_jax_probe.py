"""The Keras-JAX `ProfileCallback(probe=True)` (tfbertperf/keras_jax.py) on a user's own fits against the what-if
truth measured in the same process (tests/programs/keras_jax_fit.py): per shape and repetition, the truth, the
measured what-if with its 95 % interval, `analyze`'s capture-alone estimate and its verdicts, with per-pair errors.
Two truths: through `model.fit` itself (the fit's per-step bookkeeping in T and T_c: what the user's fit would
gain; the errors are against it) and a bare `train_function` loop (beside it).

    python tools/bench/bench_keras_jax_probe.py --reps 3
    python tools/bench/bench_keras_jax_probe.py --from DIR   # fits run elsewhere (tools/bench/keras_jax_gpu.sh)
    python tools/bench/bench_keras_jax_probe.py --from DIR --baseline /tmp/wt_before   # and the code before

Besides the measured what-if: the capture alone (its step file moved aside), the capture with its step file
(the what-if in it), and the capture with the step file of a fit without the probe (ProfileCallback's default: the
step times alone; the what-if taken out of the file), each against the truth through fit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = Path(HERE).parents[1]

from bench_jax_cpu_loader import INPUT_BOUND, analyze_with, err, pct  # noqa: E402

SHAPES = ("arrays", "wait", "numpy", "compute")


_NO_PROBE = """
import glob, json, os, sys
from tfbertperf.analyze import analyze
files = glob.glob(os.path.join(sys.argv[1], 'plugins', 'profile', '*', 'tfbertperf_steps.json'))
for f in files:
    os.replace(f, f + '.whole')
    sf = json.load(open(f + '.whole'))
    sf.pop('what_if', None)
    sf['summary'] = {k: v for k, v in sf['summary'].items() if not k.startswith(('compute_only', 'input_cost', 'T_'))}
    json.dump(sf, open(f, 'w'))
try:
    d = analyze(sys.argv[1])
finally:
    for f in files:
        os.replace(f + '.whole', f)
att = d['attribution']
fr = (att.get('unprofiled') or {}).get('fractions')  # an accelerator's view; a host capture's estimate else
times = att.get('input_cost_estimate_unprofiled_fraction') if fr is None else fr['input'] + fr['host_to_device']
named = [d['verdict']['bottleneck']] + [a['bottleneck'] for a in d['verdict'].get('also') or []]
print(json.dumps({'times': times, 'bottleneck': '+'.join(named)}))
"""


def _no_probe(pythonpath: str, logdir: str) -> dict:
    """The capture read with its step file as a fit without the probe writes it (module docstring)."""
    proc = subprocess.run([sys.executable, "-c", _NO_PROBE, logdir], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "2"},
                          cwd=tempfile.gettempdir())
    if proc.returncode:
        return {"times": None, "bottleneck": "error: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:60]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fits_from(folder: Path, out: Path):
    """(label, rep, result) of each fit that tools/bench/keras_jax_gpu.sh left in `folder`, its captures unpacked
    under `out` (the logdir it names, /tmp/kj/<config>/r<rep>/<shape> there, moved to `out`)."""
    for tgz in sorted(folder.glob("*.tgz")):
        with tarfile.open(tgz) as t:
            t.extractall(out, filter="data")
    for line in (folder / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        fit = r["fit"]
        fit["logdir"] = str(out / r["config"] / f"r{r['rep']}" / fit["shape"])
        yield r["config"], r["rep"], fit


def _live_fits(a, out: Path):
    for rep in range(1, a.reps + 1):
        for shape in a.shapes.split(","):
            print(f"[bench] {shape}: repetition {rep}/{a.reps} …", file=sys.stderr, flush=True)
            proc = subprocess.run([sys.executable, str(ROOT / "tests" / "programs" / "keras_jax_fit.py"), "--shape",
                                   shape, "--out", str(out / f"r{rep}"), "--epochs", str(a.epochs)],
                                  capture_output=True, text=True, timeout=900, cwd=tempfile.gettempdir(),
                                  env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"})
            if proc.returncode:
                raise SystemExit(f"keras_jax_fit.py --shape {shape}: {proc.stderr.strip()[-2000:]}")
            yield shape, rep, json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--epochs", type=int, default=2, help="epochs of each profiled fit (128 steps each)")
    p.add_argument("--from", dest="source", default="", help="a folder of fits run elsewhere (results.jsonl and "
                   "<config>.tgz from tools/bench/keras_jax_gpu.sh): score those, run none")
    p.add_argument("--baseline", default="", help="another checkout (the code before): the step file without the "
                   "probe read by it too")
    a = p.parse_args(argv)
    t0, out = time.time(), Path(tempfile.mkdtemp(prefix="bench-kerasjax-"))
    if a.source and (Path(a.source) / "all.tgz").is_file():  # keras_jax_gpu.sh's one archive of everything
        try:
            with tarfile.open(Path(a.source) / "all.tgz", "r:gz") as t:
                t.extractall(out / "from", filter="data")
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            print(f"bench_keras_jax_probe: --from {a.source}: all.tgz is not a readable archive "
                  f"({' '.join(str(e).split())})", file=sys.stderr)
            return 2
        a.source = str(out / "from")
    if a.source and not (Path(a.source) / "results.jsonl").is_file():
        print(f"bench_keras_jax_probe: --from {a.source}: no results.jsonl there", file=sys.stderr)
        return 2
    fits = _fits_from(Path(a.source), out) if a.source else _live_fits(a, out)
    rows, errs, device = [], {}, None
    for label, rep, r in fits:
        device = r.get("device", device)
        truth = r.get("fit_truth", r["truth"])
        w = r["probe"] or {}
        icf, ci = w.get("input_cost_fraction"), w.get("input_cost_ci95")
        now = analyze_with(str(ROOT), r["logdir"])
        bare, before = _no_probe(str(ROOT), r["logdir"]), _no_probe(a.baseline, r["logdir"]) if a.baseline else {}
        e = errs.setdefault(label, {"probe": [], "bare": [], "alone": [], "times": [], "in_ci": 0, "n": 0,
                                    "no_probe": [], "no_probe_before": [], "no_probe_verdict": 0})
        e["n"] += 1
        if icf is not None:
            e["probe"].append(abs(icf - truth))
            e["bare"].append(abs(icf - r["truth"]))
            e["in_ci"] += ci is not None and abs(icf - truth) <= ci
        for k in ("alone", "times"):
            if now[k] is not None:
                e[k].append(abs(now[k] - truth))
        for k, got in (("no_probe", bare), ("no_probe_before", before)):
            if got.get("times") is not None:
                e[k].append(abs(got["times"] - truth))
        e["no_probe_verdict"] += ("input" in bare["bottleneck"]) == (truth >= INPUT_BOUND)
        right = (now["bottleneck"] == "input") == (truth >= INPUT_BOUND)
        halves = " / ".join(pct(h) for h in r.get("fit_truth_halves", r["truth_halves"]))
        interval = f" ± {100 * ci:.1f}" if ci is not None else ""
        fit_t = f"{r['fit_T_ms']:.2f} / {r['fit_T_c_ms']:.2f}" if "fit_T_ms" in r else "—"
        rows.append(f"| {label} | {rep} | {pct(truth)} ({fit_t}) | {halves} | {pct(r['truth'])} ({r['T_ms']:.2f} / "
                    f"{r['T_c_ms']:.2f}) | {pct(icf)}{interval} ({err(icf, truth)}), {w.get('probe_blocks')} blocks "
                    f"({w.get('step_ms')} / {w.get('compute_only_step_ms')}) | {pct(now['alone'])} "
                    f"({err(now['alone'], truth)}) | {pct(now['times'])} ({err(now['times'], truth)}) | "
                    f"{pct(bare['times'])} ({err(bare['times'], truth)}) {bare['bottleneck']}"
                    + (f"; before {pct(before['times'])} ({err(before['times'], truth)}) {before['bottleneck']}"
                       if a.baseline else "") +
                    f" | {now['bottleneck']} {'✓' if right else '✗'} | {r['load']:.1f} |")
    print(f"device: {device}" + (f" (fits from {a.source})" if a.source else ""))
    print("| fit | rep | truth through fit (T / T_c ms) | its halves | bare-loop truth (T / T_c ms) | measured what-if "
          "(T / T_c ms) | capture alone | capture + step file | step file without the probe | verdict alone | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    for label, e in errs.items():
        print(f"{label}: measured what-if mean |error| {100 * statistics.fmean(e['probe'] or [float('nan')]):.1f} pp "
              f"(truth inside its interval {e['in_ci']} of {e['n']}; against the bare loop "
              f"{100 * statistics.fmean(e['bare'] or [float('nan')]):.1f} pp); capture alone "
              f"{100 * statistics.fmean(e['alone'] or [float('nan')]):.1f} pp, with the step file "
              f"{100 * statistics.fmean(e['times'] or [float('nan')]):.1f} pp; the step file without the probe "
              f"{100 * statistics.fmean(e['no_probe'] or [float('nan')]):.1f} pp (input named, first or beside, "
              f"where the truth is input-bound {e['no_probe_verdict']} of {e['n']})"
              + (f", before {100 * statistics.fmean(e['no_probe_before'] or [float('nan')]):.1f} pp"
                 if a.baseline else ""))
    every = [x for e in errs.values() for x in e["no_probe"]]
    was = [x for e in errs.values() for x in e["no_probe_before"]]
    if every:
        print(f"all fits, the step file without the probe: mean |error| {100 * statistics.fmean(every):.1f} pp "
              f"over {len(every)}" + (f", before {100 * statistics.fmean(was):.1f} pp over {len(was)}" if was else ""))
    print(f"\n{len(rows)} fits in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
