"""Issue 29: the measured what-if (ProfileCallback(probe=True)'s step file) re-read from fits kept by an own-fit bench,
by the code now and by a baseline worktree side by side — the same step times read twice, so the difference is the
code that pairs the probe's blocks with the real steps (train/blocks.py, profile/stepfile.py).

Input: the JSON lines tools/bench/bench_attribution_foreign.py prints to stderr for each fit pair (shape, the truth in
the train_function loop, the truth inside fit, the capture's logdir; the step file sits beside the capture).  Each
step file is read in a fresh interpreter per code (PYTHONPATH: this tree, or --baseline's).  Per pair: the measured
input cost and its 95 % interval, the error against both truths; per code: the mean |error| per shape and over all,
the truths inside the interval, and a constant guess at the mean loop truth beside them.

    python tools/bench/bench_attribution_foreign.py --programs fit:parse,fit:tokenize --reps 3 2> pairs.err
    python tools/bench/bench_whatif_kept.py pairs.err --baseline /tmp/wt-before [--recovery]

With --recovery the steps left out of T as a probe block's recovery (train/recovery.py) are found again by each
code from the fit's own step times, the blocks where they ran: a change to that rule read on the same fits (where
it would also have moved the blocks, the fit as it ran says less than a fresh run: --ran).

With --ran CODE:FILE,FILE… (repeated) the fits are not re-read: each file's pairs are scored as their own run
measured them — for a change that moves where the probe's blocks run, fits run by each code in turn (e.g.
`PYTHONPATH=<worktree> python tools/bench/bench_attribution_foreign.py … 2> before_1.err`, then the same with this
tree, alternating) — with the blocks that ran after the fit's last step counted beside.

    python tools/bench/bench_whatif_kept.py --ran before:before_1.err,before_2.err --ran now:now_1.err,now_2.err
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READ = r"""
import json, sys
from pathlib import Path
from tfbertperf.profile import stepfile
from tfbertperf.train import recovery
mode, logdirs = sys.argv[1], sys.argv[2:]
given = json.loads(sys.stdin.read()) if mode == "with" else None
out = []
for k, logdir in enumerate(logdirs):
    f = sorted(Path(logdir).glob("plugins/profile/*/tfbertperf_steps.json"))
    if not f:
        out.append(None)
        continue
    doc = json.loads(f[-1].read_text())
    if mode == "recovery":  # this code's recovery steps, from the fit's own step times and blocks as they ran
        steps, w = doc["step_time_ms"], doc.get("profiled_steps")
        ran = [tuple(b) for b in (doc.get("what_if") or {}).get("blocks") or [] if b[0] < len(steps)]
        traced = (w[0] - 1, w[1] + 1) if w else None
        out.append(recovery.observed(steps, ran, doc.get("warmup_steps", 0), traced, len(steps))[0])
        continue
    if given is not None:
        doc["excluded_steps"] = given[k]
    s = stepfile.summarize(doc, str(f[-1]))
    out.append({"cost": s.input_cost_fraction, "ci": s.input_cost_ci95, "T": s.unprofiled_step_ms,
                "Tc": s.compute_only_step_ms})
print(json.dumps(out))
"""


def read(logdirs: list[str], tree: Path, mode: str = "read", given=None) -> list:
    """Each kept fit's measured what-if by the code in `tree` (None where it has no step file); mode "recovery":
    the recovery steps that code finds in each; "with": the what-if with `given` excluded steps per fit."""
    env = {**os.environ, "PYTHONPATH": str(tree), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", READ, mode, *logdirs], capture_output=True, text=True, env=env,
                          cwd="/", input=json.dumps(given))
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"bench_whatif_kept: the step files not read by {tree} ({said})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def with_recovery(logdirs: list[str], trees: list) -> dict:
    """--recovery: each code's what-if with its own recovery rule applied to the fits' step times, the blocks as
    they ran (the steps the writer left out for other reasons — the batch the probe took, the capture's stop — kept
    out for both)."""
    rec = {name: read(logdirs, tree, "recovery") for name, tree in trees}
    given = {name: [] for name, _ in trees}
    for k, logdir in enumerate(logdirs):
        f = sorted(Path(logdir).glob("plugins/profile/*/tfbertperf_steps.json"))
        written = set(json.loads(f[-1].read_text()).get("excluded_steps") or []) if f else set()
        base = written - set().union(*(set(rec[name][k] or []) for name, _ in trees))
        for name, _ in trees:
            given[name].append(sorted(base | set(rec[name][k] or [])))
    return {name: read(logdirs, tree, "with", given[name]) for name, tree in trees}


def _pairs(names: list[str], who: str) -> list[dict] | None:
    rows = []
    for name in names:
        try:
            rows += [json.loads(x) for x in Path(name).read_text().splitlines() if x.startswith('{"shape"')]
        except OSError as e:
            print(f"bench_whatif_kept: {who} {name}: {e.strerror}", file=sys.stderr)
            return None
    return rows


def ran(specs: list[str]) -> int:
    """--ran: each code's fits as they measured themselves (module docstring)."""
    codes = {}
    for spec in specs:
        code, _, files = spec.partition(":")
        rows = _pairs(files.split(","), f"--ran {spec}:") if code and files else None
        if not rows:
            if rows is not None or not (code and files):
                print(f"bench_whatif_kept: --ran {spec}: expected CODE:FILE[,FILE…] of fit pairs", file=sys.stderr)
            return 2
        codes[code] = rows
    print("| code | shape | truth loop / fit | measured what-if ± interval (error vs loop / fit, pp) | "
          "blocks (after the last step) | verdict with it |")
    print("|---|---|---|---|---|---|")
    for code, rows in codes.items():
        for r in rows:
            f = sorted(Path(r["logdir"]).glob("plugins/profile/*/tfbertperf_steps.json"))
            doc = json.loads(f[-1].read_text()) if f else {}
            blocks = (doc.get("what_if") or {}).get("blocks") or []
            after = sum(b[0] >= len(doc.get("step_time_ms") or ()) for b in blocks)
            r["after"] = after if f else None
            ci = "" if r["ci"] is None else f" ± {100 * r['ci']:.1f}"
            print(f"| {code} | {r['shape']} | {100 * r['truth']:.1f} / {100 * r['fit_truth']:.1f} % | "
                  f"{100 * r['probe']:.1f} %{ci} ({100 * (r['probe'] - r['truth']):+.1f} / "
                  f"{100 * (r['probe'] - r['fit_truth']):+.1f}) | {len(blocks)} ({'—' if not f else after}) | "
                  f"{r['v_measured']}{' (undecided)' if r['undecided'] else ''} |")
    print()
    for code, rows in codes.items():
        for t in ("truth", "fit_truth"):
            err = [abs(r["probe"] - r[t]) for r in rows]
            inside = sum(r["ci"] is not None and abs(r["probe"] - r[t]) <= r["ci"] for r in rows)
            print(f"{code}, against the {'loop' if t == 'truth' else 'fit'} truth: mean |error| "
                  f"{100 * statistics.fmean(err):.1f} pp over {len(err)} (max {100 * max(err):.1f}), within 3 pp "
                  f"{sum(e <= 0.03 for e in err)}, within 5 pp {sum(e <= 0.05 for e in err)}, inside the interval "
                  f"{inside}")
        print(f"{code}: fits with a block after the last step {sum(bool(r['after']) for r in rows)} of {len(rows)}")
    allr = [r for rows in codes.values() for r in rows]
    mean_truth = statistics.fmean(r["truth"] for r in allr)
    print(f"a constant guess at the mean loop truth ({100 * mean_truth:.1f} %): "
          f"{100 * statistics.fmean(abs(mean_truth - r['truth']) for r in allr):.1f} pp")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pairs", nargs="*", help="files of bench_attribution_foreign.py's JSON lines (its stderr)")
    p.add_argument("--baseline", help="a worktree of the code to compare with (e.g. `git worktree add DIR REV`)")
    p.add_argument("--recovery", action="store_true",
                   help="with --baseline: each code's recovery rule applied to the fits' own step times (blocks as "
                        "they ran), not the steps the writer left out")
    p.add_argument("--ran", action="append", default=[], metavar="CODE:FILE[,FILE…]",
                   help="score each code's fits as they ran (module docstring); repeatable")
    a = p.parse_args(argv)
    if a.ran:
        return ran(a.ran)
    if not a.pairs:
        print("bench_whatif_kept: no files of fit pairs given (or --ran CODE:FILE…)", file=sys.stderr)
        return 2
    if a.recovery and not a.baseline:
        print("bench_whatif_kept: --recovery compares two codes: give --baseline", file=sys.stderr)
        return 2
    if a.baseline and not (Path(a.baseline) / "tfbertperf").is_dir():
        print(f"bench_whatif_kept: --baseline {a.baseline}: no tfbertperf package there", file=sys.stderr)
        return 2
    rows = _pairs(a.pairs, "")
    if rows is None:
        return 2
    rows = [r for r in rows if Path(r["logdir"]).is_dir() or print(f"[bench] {r['logdir']}: gone", file=sys.stderr)]
    if not rows:
        print(f"bench_whatif_kept: {', '.join(a.pairs)}: no kept fit pairs (JSON lines with a shape)", file=sys.stderr)
        return 2
    trees = [("now", ROOT)] + ([("before", Path(a.baseline))] if a.baseline else [])
    got = with_recovery([r["logdir"] for r in rows], trees) if a.recovery else \
        {name: read([r["logdir"] for r in rows], tree) for name, tree in trees}
    pp = lambda v, t: f"{100 * v:.1f} % ({100 * (v - t):+.1f})"  # noqa: E731
    print("| shape | truth loop / fit | " + " | ".join(f"what-if {n} ± interval (error vs loop, pp)" for n, _ in trees)
          + " |")
    print("|---|---|" + "---|" * len(trees))
    for i, r in enumerate(rows):
        cells = []
        for name, _ in trees:
            w = got[name][i]
            cells.append("—" if not w or w["cost"] is None else
                         pp(w["cost"], r["truth"]) + ("" if w["ci"] is None else f" ± {100 * w['ci']:.1f}"))
        print(f"| {r['shape']} | {100 * r['truth']:.1f} / {100 * r['fit_truth']:.1f} % | " + " | ".join(cells) + " |")
    mean_truth = statistics.fmean(r["truth"] for r in rows)
    print()
    for shape in dict.fromkeys(r["shape"] for r in rows):
        idx = [i for i, r in enumerate(rows) if r["shape"] == shape]
        parts = []
        for name, _ in trees:
            err = [abs(got[name][i]["cost"] - rows[i][t]) for i in idx for t in ("truth", "fit_truth")
                   if got[name][i] and got[name][i]["cost"] is not None]
            parts.append(f"{name} {100 * statistics.fmean(err[0::2]):.1f} / {100 * statistics.fmean(err[1::2]):.1f}"
                         if err else f"{name} —")
        print(f"{shape}: mean |error| loop / fit truth: " + ", ".join(parts))
    for name, _ in trees:
        ok = [i for i in range(len(rows)) if got[name][i] and got[name][i]["cost"] is not None]
        for t in ("truth", "fit_truth"):
            err = [abs(got[name][i]["cost"] - rows[i][t]) for i in ok]
            inside = sum(got[name][i]["ci"] is not None and abs(got[name][i]["cost"] - rows[i][t]) <= got[name][i]["ci"]
                         for i in ok)
            print(f"{name}, against the {'loop' if t == 'truth' else 'fit'} truth: mean |error| "
                  f"{100 * statistics.fmean(err):.1f} pp over {len(err)}, within 3 pp {sum(e <= 0.03 for e in err)}, "
                  f"inside the interval {inside}")
    const = [abs(mean_truth - r["truth"]) for r in rows]
    print(f"a constant guess at the mean loop truth ({100 * mean_truth:.1f} %): {100 * statistics.fmean(const):.1f} pp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
