"""`tfbertperf analyze` on runs of a user's own JAX loop recorded on a GPU (tests/programs/jax_gpu_user.py: each run
a folder with truth.json and one StepTimer logdir per regime), against the truth the same process measured without
the profiler: per capture, input + host→device from the capture alone (its step file moved aside) and with the
step file, and the verdict (input named first where the truth is ≥ 20 %, else not), beside the code before.

    python tools/bench/bench_jax_loop_runs.py DIR … [--baseline /tmp/wt_before]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench_jax_cpu_loader import INPUT_BOUND, analyze_with, err, pct

ROOT = Path(__file__).resolve().parents[2]


def _captures(run: Path):
    """(label, logdir, truth) per regime of one run; a regime without its own truth (loader_notrace) has the
    loader's."""
    doc = json.loads((run / "truth.json").read_text())
    regimes = doc["regimes"]
    for name, v in regimes.items():
        base = v if "input_fraction" in v else regimes.get("loader", {})
        if (run / name).is_dir() and "input_fraction" in base:
            yield f"{run.name} {name}", str(run / name), base["input_fraction"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="folders jax_gpu_user.py wrote (--out)")
    p.add_argument("--baseline", default="", help="another checkout (the code before) read the same captures")
    a = p.parse_args(argv)
    for run in a.runs:
        if not (Path(run) / "truth.json").is_file():
            print(f"bench_jax_loop_runs: {run}: no truth.json there (a jax_gpu_user.py --out folder)", file=sys.stderr)
            return 2
        try:
            json.loads((Path(run) / "truth.json").read_text())["regimes"].items()
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            print(f"bench_jax_loop_runs: {run}/truth.json: not a jax_gpu_user.py truth file "
                  f"({' '.join(str(e).split())[:80]})", file=sys.stderr)
            return 2
    codes = [("now", str(ROOT))] + ([("before", a.baseline)] if a.baseline else [])
    errs = {(c, k): [] for c, _ in codes for k in ("alone", "times")}
    right = {c: 0 for c, _ in codes}
    print("| capture | truth | " + " | ".join(f"{c}: alone, with the step file, verdict" for c, _ in codes) + " |")
    print("|---|---|" + "---|" * len(codes))
    n = 0
    for run in a.runs:
        for label, logdir, truth in _captures(Path(run)):
            n += 1
            cells = []
            for c, path in codes:
                r = analyze_with(path, logdir)
                for k in ("alone", "times"):
                    if r[k] is not None:
                        errs[(c, k)].append(abs(r[k] - truth))
                ok = (r["bottleneck"] == "input") == (truth >= INPUT_BOUND)
                right[c] += ok
                cells.append(f"{pct(r['alone'])} ({err(r['alone'], truth)}), {pct(r['times'])} "
                             f"({err(r['times'], truth)}), {r['bottleneck']} {'✓' if ok else '✗'}")
            print(f"| {label} | {pct(truth)} | " + " | ".join(cells) + " |")
    print()
    for c, _ in codes:
        m = {k: statistics.fmean(errs[(c, k)]) * 100 if errs[(c, k)] else float("nan") for k in ("alone", "times")}
        print(f"{c}: mean |error| capture alone {m['alone']:.1f} pp, with the step file {m['times']:.1f} pp "
              f"({len(errs[(c, 'times')])} with a view); verdicts alone right {right[c]} of {n}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
