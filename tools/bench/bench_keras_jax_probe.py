"""The Keras-JAX `ProfileCallback(probe=True)` (tfbertperf/keras_jax.py) on a user's own fits against the what-if
truth measured in the same process (tests/programs/keras_jax_fit.py): per shape and repetition, the truth, the
measured what-if with its 95 % interval, `analyze`'s capture-alone estimate and its verdicts, with per-pair errors.
Two truths: through `model.fit` itself (the fit's per-step bookkeeping in T and T_c: what the user's fit would
gain; the errors are against it) and a bare `train_function` loop (beside it).

    python tools/bench/bench_keras_jax_probe.py --reps 3
    python tools/bench/bench_keras_jax_probe.py --from DIR   # fits run elsewhere (tools/bench/keras_jax_gpu.sh)
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
        e = errs.setdefault(label, {"probe": [], "bare": [], "alone": [], "times": [], "in_ci": 0, "n": 0})
        e["n"] += 1
        if icf is not None:
            e["probe"].append(abs(icf - truth))
            e["bare"].append(abs(icf - r["truth"]))
            e["in_ci"] += ci is not None and abs(icf - truth) <= ci
        for k in ("alone", "times"):
            if now[k] is not None:
                e[k].append(abs(now[k] - truth))
        right = (now["bottleneck"] == "input") == (truth >= INPUT_BOUND)
        halves = " / ".join(pct(h) for h in r.get("fit_truth_halves", r["truth_halves"]))
        interval = f" ± {100 * ci:.1f}" if ci is not None else ""
        fit_t = f"{r['fit_T_ms']:.2f} / {r['fit_T_c_ms']:.2f}" if "fit_T_ms" in r else "—"
        rows.append(f"| {label} | {rep} | {pct(truth)} ({fit_t}) | {halves} | {pct(r['truth'])} ({r['T_ms']:.2f} / "
                    f"{r['T_c_ms']:.2f}) | {pct(icf)}{interval} ({err(icf, truth)}), {w.get('probe_blocks')} blocks "
                    f"({w.get('step_ms')} / {w.get('compute_only_step_ms')}) | {pct(now['alone'])} "
                    f"({err(now['alone'], truth)}) | {pct(now['times'])} ({err(now['times'], truth)}) | "
                    f"{now['bottleneck']} {'✓' if right else '✗'} | {r['load']:.1f} |")
    print(f"device: {device}" + (f" (fits from {a.source})" if a.source else ""))
    print("| fit | rep | truth through fit (T / T_c ms) | its halves | bare-loop truth (T / T_c ms) | measured what-if "
          "(T / T_c ms) | capture alone | capture + step file | verdict alone | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    for label, e in errs.items():
        print(f"{label}: measured what-if mean |error| {100 * statistics.fmean(e['probe'] or [float('nan')]):.1f} pp "
              f"(truth inside its interval {e['in_ci']} of {e['n']}; against the bare loop "
              f"{100 * statistics.fmean(e['bare'] or [float('nan')]):.1f} pp); capture alone "
              f"{100 * statistics.fmean(e['alone'] or [float('nan')]):.1f} pp, with the step file "
              f"{100 * statistics.fmean(e['times'] or [float('nan')]):.1f} pp")
    print(f"\n{len(rows)} fits in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
