"""Issue 29: the verdict `analyze` gives from a capture alone (no probe), on captures kept from an own-fit bench, by
the code now and by a baseline worktree side by side — the same captures read twice, so the difference is the code.

Input: the JSON lines tools/bench/bench_attribution_foreign.py prints to stderr for each fit pair (shape, the truth
in the train_function loop, the truth inside fit, the capture's logdir).  Each capture is analyzed with its step file
moved aside (the capture alone) in a fresh interpreter per code (PYTHONPATH: this tree, or --baseline's).  A verdict
is scored against both truths: "right" where its side of the 20 % line is the truths' side, "undecided" where the
verdict says so (its first action: measure the what-if), "wrong" otherwise; a capture whose two truths fall on both
sides of the line counts any verdict as right ("either").  Beside them, a constant "compute-bound".

    python tools/bench/bench_attribution_foreign.py --programs fit:map_small,fit:map,fit:parse --reps 2 2> pairs.err
    python tools/bench/bench_verdicts_kept.py pairs.err --baseline /tmp/wt-before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINE = 0.20
READ = r"""
import json, os, sys
from pathlib import Path
from tfbertperf.analyze import analyze
logdir = sys.argv[1]
files = sorted(Path(logdir).glob("plugins/profile/*/tfbertperf_steps.json"))
for f in files:
    os.replace(f, str(f) + ".kept")
try:
    doc = analyze(logdir)
finally:
    for f in files:
        os.replace(str(f) + ".kept", f)
v, a = doc["verdict"], doc["attribution"]
print(json.dumps({"bottleneck": v["bottleneck"], "undecided": (v.get("undecided") or {}).get("source", "what-if")
                  if v.get("undecided") else None, "estimate": a.get("input_cost_estimate_fraction")}))
"""


def read(logdir: str, tree: Path) -> dict | None:
    """The capture's verdict alone by the code in `tree`; None (said in one line) where analyze refused it."""
    env = {**os.environ, "PYTHONPATH": str(tree), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", READ, logdir], capture_output=True, text=True, env=env, cwd="/")
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"[bench] {logdir}: not read by {tree} ({said})", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def score(verdict: dict, truths: list[float]) -> str:
    sides = {t >= LINE for t in truths}
    if verdict["undecided"]:
        return "undecided"
    if len(sides) > 1:
        return "right (either)"
    return "right" if (verdict["bottleneck"] == "input") == sides.pop() else "wrong"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pairs", nargs="+", help="files of bench_attribution_foreign.py's JSON lines (its stderr)")
    p.add_argument("--baseline", help="a worktree of the code to compare with (e.g. `git worktree add DIR REV`)")
    a = p.parse_args(argv)
    if a.baseline and not (Path(a.baseline) / "tfbertperf").is_dir():
        print(f"bench_verdicts_kept: --baseline {a.baseline}: no tfbertperf package there", file=sys.stderr)
        return 2
    rows = []
    for name in a.pairs:
        try:
            lines = Path(name).read_text().splitlines()
        except OSError as e:
            print(f"bench_verdicts_kept: {name}: {e.strerror}", file=sys.stderr)
            return 2
        rows += [json.loads(x) for x in lines if x.startswith('{"shape"')]
    if not rows:
        print(f"bench_verdicts_kept: {', '.join(a.pairs)}: no fit pairs (JSON lines with a shape)", file=sys.stderr)
        return 2
    trees = [("now", ROOT)] + ([("before", Path(a.baseline))] if a.baseline else [])
    tally = {name: {} for name, _ in trees} | {"constant compute": {}}
    print("| shape | truth loop / fit | estimate now | " + " | ".join(f"verdict {n}" for n, _ in trees) + " |")
    print("|---|---|---|" + "---|" * len(trees))
    for r in rows:
        if not Path(r["logdir"]).is_dir():
            print(f"[bench] {r['logdir']}: gone, left out", file=sys.stderr)
            continue
        truths = [r["truth"], r["fit_truth"]]
        cells = []
        est = None
        for name, tree in trees:
            v = read(r["logdir"], tree) or {"bottleneck": "unread", "undecided": None, "estimate": None}
            s = score(v, truths) if v["bottleneck"] != "unread" else "unread"
            tally[name][s] = tally[name].get(s, 0) + 1
            cells.append(f"{v['bottleneck']}{' (undecided: ' + v['undecided'] + ')' if v['undecided'] else ''} — {s}"
                         + (f" ({100 * v['estimate']:.1f} %)" if name != "now" and v["estimate"] is not None else ""))
            est = v["estimate"] if name == "now" else est
        c = score({"bottleneck": "compute", "undecided": None}, truths)
        tally["constant compute"][c] = tally["constant compute"].get(c, 0) + 1
        print(f"| {r['shape']} | {100 * r['truth']:.1f} / {100 * r['fit_truth']:.1f} % | "
              f"{'—' if est is None else f'{100 * est:.1f} %'} | " + " | ".join(cells) + " |", flush=True)
    print()
    for name, t in tally.items():
        print(f"{name}: " + ", ".join(f"{k} {n}" for k, n in sorted(t.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
