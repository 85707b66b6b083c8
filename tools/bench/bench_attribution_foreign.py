"""`tfbertperf analyze` on a foreign program's profile vs the what-if truth (issue 4's "must show").

Programs (--programs, comma-separated; each reported on its own):
  stall  tests/programs/stall_loop.py: a Keras MLP custom loop with step markers, fed by a tf.data pipeline with
         a CPU-heavy parallel map (the "stall") — the program the contention model was chosen on;
  image  tests/programs/image_augment.py: a small CNN, per-image augmentation in a parallel map + prefetch;
  text   tests/programs/text_tokenize.py: an embedding + conv text classifier, tokenization in a map.
image and text were written and measured before any change to the attribution model (issue 16).
  fit:SHAPE  tests/programs/keras_fit_shapes.py: a user's own Keras `model.fit` (SHAPE: wait_serial, wait_parallel,
         parse, tokenize, compute; `fit` = all five; map, map_small, generator, jpeg, audio, textcnn besides) with
         ProfileCallback(probe=True) — reported as truth, the callback's measured what-if (the step file) and
         analyze's estimate from the capture alone (the step file moved aside), with both verdicts, the load, and the
         truth's two halves (measured before and after the fit: how far the truth itself moves on this machine)
         (issue 29); the truth is measured twice, in a bare loop of model.train_function and inside model.fit
         (keras_fit_shapes.FitTruth), errors shown against both.
Per repetition, in a fresh interpreter:
  truth  = (T − T_c) / T, stall pipeline vs the same model fed from memory, alternating unprofiled blocks;
  xprof  = xprof's own input share of the profiled step (attribution.input_bound_fraction);
  next() = wall time the program measured blocked in next(iterator) ÷ its step time;
  ours   = analyze's input_cost_estimate_fraction (blocked wait + CPU the pipeline stole from compute), from the
           capture alone; stall also with the threads' CPU record beside it (stall_loop.py --threadcpu: "measured")
           and the other processes' CPU on the program's cores over the window (profile/machine_load.py).
--busy N runs N busy processes (a Python loop each) beside every repetition: a machine that is not the program's.
--burst STEP:MS (fit shapes) puts a neighbour's burst of MS ms into each fit from its step STEP.

    python tools/bench/bench_attribution_foreign.py            # 3 repetitions of each program, markdown tables
    python tools/bench/bench_attribution_foreign.py --programs image,text --reps 3
    python tools/bench/bench_attribution_foreign.py --reps 5 --rounds 24     # a stronger stall
    python tools/bench/bench_attribution_foreign.py --sleep-ms 8   # the sleep pipeline (no CPU used: upper bound)
    python tools/bench/bench_attribution_foreign.py --programs stall --rounds 24 --busy 2   # beside 2 busy processes
    python tools/bench/bench_attribution_foreign.py --programs fit --reps 3   # the five Keras fit shapes
    python tools/bench/bench_attribution_foreign.py --programs fit:parse,fit:tokenize --reps 3 \
        --fit-steps 300 --probe-steps 120 --probe-blocks 24 --truth-rounds 24   # more samples: below this VM's noise
    python tools/bench/bench_attribution_foreign.py --programs fit:map,fit:parse --epoch-steps 75   # the window
        # (70:80) holds an epoch's end: validation_data's 32 batches (profile/outside_steps.py)
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "programs"))


FIT_SHAPES = ["fit:wait_serial", "fit:wait_parallel", "fit:parse", "fit:tokenize", "fit:compute"]


def _analyze_fit(logdir: str, step_file: str) -> tuple[dict, dict, dict]:
    """analyze with the step file (measured), with its step times only (what ProfileCallback writes without the
    probe: the what-if taken out of a copy) and with it moved aside (the capture alone)."""
    import json
    import os

    from tfbertperf.analyze import analyze

    measured = analyze(logdir)
    times_only = step_file + ".times.json"
    with open(step_file) as f:
        doc = json.load(f)
    with open(times_only, "w") as f:
        json.dump({**doc, "what_if": None, "summary": {}}, f)
    aside = step_file + ".aside"
    os.replace(step_file, aside)
    try:
        times = analyze(logdir, steps=times_only)
        alone = analyze(logdir)
    finally:
        os.replace(aside, step_file)
    return measured, times, alone


def own_fit(programs: list[str], reps: int, fit_args: list[str] | None = None) -> int:
    """The Keras fit shapes, each repetition in a fresh interpreter, per-pair errors against the truth."""
    import json
    import os
    import subprocess

    rows = []
    for k in range(reps):  # round-robin: every shape sees the same stretch of a shared machine's load
        for program in programs:
            shape = program.split(":", 1)[1]
            out = tempfile.mkdtemp(prefix="bench-fit-")
            print(f"[bench] fit {shape}: repetition {k + 1}/{reps} …", file=sys.stderr, flush=True)
            proc = subprocess.run([sys.executable, str(ROOT / "tests" / "programs" / "keras_fit_shapes.py"),
                                   "--shape", shape, "--out", out, *(fit_args or [])], capture_output=True,
                                  text=True, check=True)
            res = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("{")))
            measured, times, alone = _analyze_fit(res["logdir"], res["step_file"])
            rows.append({"shape": shape, "truth": res["truth"], "halves": res["truth_halves"],
                         "probe": res["probe"]["input_cost_fraction"], "ci": res["probe"].get("input_cost_ci95"),
                         "blocks": res["probe"].get("probe_blocks"),
                         "undecided": bool(measured["verdict"].get("undecided")),
                         "estimate": alone["attribution"]["input_cost_estimate_fraction"],
                         "times": times["attribution"].get("input_cost_estimate_unprofiled_fraction"),
                         "v_alone": alone["verdict"]["bottleneck"] + (" (undecided)" if alone["verdict"].get(
                             "undecided") else ""), "v_measured": measured["verdict"]["bottleneck"],
                         "v_times": times["verdict"]["bottleneck"] + (" (undecided)" if times["verdict"].get(
                             "undecided") else ""),
                         "load": res["load"], "T": res["T_ms"], "Tc": res["T_c_ms"],
                         "pT": res["probe"]["step_ms"], "pTc": res["probe"]["compute_only_step_ms"],
                         "cost": (measured["attribution"].get("profiler_cost") or {}).get("added_ms_per_step"),
                         "fit_truth": res["fit_truth"], "fT": res["fit_T_ms"], "fTc": res["fit_T_c_ms"],
                         "logdir": res["logdir"]})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # each pair as it comes (its capture kept)
    print("\n**own Keras fit (ProfileCallback(probe=True)), per repetition** — errors against the truth in the "
          "train_function loop / the truth inside fit\n")
    print("| shape | rep | truth, loop (T / T_c ms) | loop truth before / after the fit | truth in fit (T / T_c ms) | "
          "measured what-if (T / T_c ms) | capture alone | capture + step times (no probe) | verdict alone → step "
          "times → with the what-if | profiler cost ms/step | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        pct = lambda v: "—" if v is None else (f"{v * 100:.1f} % ({(v - r['truth']) * 100:+.1f} / "  # noqa: E731
                                               f"{(v - r['fit_truth']) * 100:+.1f} pp)")
        cost = "—" if r["cost"] is None else f"{r['cost']:+.2f}"
        ci = "" if r["ci"] is None else f" ± {r['ci'] * 100:.1f}, {r['blocks']} blocks"
        print(f"| {r['shape']} | {i // len(programs) + 1} | {r['truth'] * 100:.1f} % ({r['T']:.1f} / {r['Tc']:.1f}) | "
              f"{r['halves'][0] * 100:.0f} / {r['halves'][1] * 100:.0f} % | {r['fit_truth'] * 100:.1f} % "
              f"({r['fT']:.1f} / {r['fTc']:.1f}) | {pct(r['probe'])}{ci} ({r['pT']:.1f} / {r['pTc']:.1f}) | "
              f"{pct(r['estimate'])} | {pct(r['times'])} | {r['v_alone']} → {r['v_times']} → "
              f"{r['v_measured']}{' (undecided)' if r['undecided'] else ''} | "
              f"{cost} | {r['load']:.1f} |")
    for program in programs:
        shape = program.split(":", 1)[1]
        mine = [r for r in rows if r["shape"] == shape]
        for key, name in (("probe", "measured what-if"), ("estimate", "capture alone"),
                          ("times", "capture + step times")):
            for truth, tname in (("truth", "loop truth"), ("fit_truth", "truth in fit")):
                err = [abs(r[key] - r[truth]) for r in mine if r[key] is not None]
                if err:
                    print(f"\n{shape} {name} vs {tname}: mean |error| {statistics.fmean(err) * 100:.1f} pp, max "
                          f"{max(err) * 100:.1f} pp over {len(err)}", end="")
    with_ci = [r for r in rows if r["ci"] is not None]
    if with_ci:  # an honest interval holds the truth about 95 % of the time
        inside = sum(abs(r["probe"] - r["truth"]) <= r["ci"] for r in with_ci)
        print(f"\n\nthe loop truth inside the what-if's 95 % interval: {inside} of {len(with_ci)}; probe blocks "
              f"{statistics.fmean(r['blocks'] for r in with_ci):.1f} on average "
              f"({min(r['blocks'] for r in with_ci)}–{max(r['blocks'] for r in with_ci)})", end="")
    spread = [abs(r["halves"][0] - r["halves"][1]) for r in rows]
    print(f"\n\nthe truth's own spread (|before − after the fit|, the noise floor at this load): mean "
          f"{statistics.fmean(spread) * 100:.1f} pp, max {max(spread) * 100:.1f} pp")
    return len(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--programs", default="stall,image,text")
    p.add_argument("--rounds", type=int, default=0, help="stall strength (stall_loop.py --rounds; 0 = its default)")
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="instead of the CPU-heavy map, a per-batch sleep of this many ms (stall_loop.py's sleep mode)")
    p.add_argument("--probe-steps", default="",
                   help="fit shapes: ProfileCallback probe_steps (\"\" = keras_fit_shapes.py's default, \"auto\")")
    p.add_argument("--probe-blocks", type=int, default=0,
                   help="fit shapes: probe_blocks with a count of probe steps (0 = its default, 8)")
    p.add_argument("--fit-steps", type=int, default=0, help="fit shapes: steps of the profiled fit (0 = 140; the "
                   "probe times at most half of them)")
    p.add_argument("--truth-rounds", type=int, default=0,
                   help="fit shapes: truth blocks of each kind (0 = its default, 10)")
    p.add_argument("--steps-per-execution", type=int, default=0,
                   help="fit shapes: Keras compile(steps_per_execution=k) (0 = 1); --fit-steps still counts batches")
    p.add_argument("--busy", type=int, default=0, help="busy processes beside every repetition (0: none)")
    p.add_argument("--epoch-steps", type=int, default=0, help="fit shapes: epochs of this many steps, validation_data "
                   "after each (keras_fit_shapes.py); 75 puts epoch 1's end inside the window 70:80")
    p.add_argument("--burst", default="", help="fit shapes: STEP:MS, a neighbour's burst of two spinning processes "
                   "for MS ms from the fit's step STEP (keras_fit_shapes.py)")
    a = p.parse_args(argv)
    for flag, v in (("--busy", a.busy), ("--epoch-steps", a.epoch_steps)):
        if v < 0:  # one line, exit 2 (the project's bad-input rule), before any program runs
            print(f"bench_attribution_foreign: {flag} {v}: expected a count of "
                  f"{'busy processes' if flag == '--busy' else 'steps an epoch'}, 0 or more", file=sys.stderr)
            return 2
    if a.burst and not re.fullmatch(r"\d+:\d*\.?\d+", a.burst):
        print(f"bench_attribution_foreign: --burst {a.burst}: expected STEP:MS (a step, milliseconds)", file=sys.stderr)
        return 2
    import subprocess

    t0 = time.time()
    spin = "import time\nwhile True: time.time()"  # beside the program, not its child: other processes' CPU
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(a.busy)]
    try:
        total = _programs(a)
    finally:
        for b in busy:
            b.kill()
    print(f"\n\n{total} repetitions in {time.time() - t0:.0f} s")
    return 0


def _programs(a) -> int:
    import subprocess

    from tfbertperf.analyze import analyze

    total = 0
    programs = [x for p in a.programs.split(",") for x in (FIT_SHAPES if p == "fit" else [p])]
    fits = [p for p in programs if p.startswith("fit:")]
    if fits:
        fit_args = [x for flag, v in (("--probe-steps", a.probe_steps), ("--probe-blocks", a.probe_blocks),
                                      ("--rounds", a.truth_rounds), ("--steps", a.fit_steps),
                                      ("--steps-per-execution", a.steps_per_execution),
                                      ("--epoch-steps", a.epoch_steps), ("--burst", a.burst)) if v
                    for x in (flag, str(v))]
        total += own_fit(fits, a.reps, fit_args)
    for program in (p for p in programs if not p.startswith("fit:")):
        rows = []
        for k in range(a.reps):
            out = Path(tempfile.mkdtemp(prefix="bench-foreign-"))
            if program == "stall":
                mode, truth = ("sleep", "sleep_truth") if a.sleep_ms else ("stall", "truth")
                cmd = [sys.executable, str(ROOT / "tests" / "programs" / "stall_loop.py"), "--out", str(out),
                       "--modes", f"{mode},{truth}", "--steps", "40", "--window", "20:35", "--threadcpu"]
                if a.rounds:
                    cmd += ["--rounds", str(a.rounds)]
                if a.sleep_ms:
                    cmd += ["--sleep-ms", str(a.sleep_ms)]
            else:
                mode, truth = "profiled", "truth"
                script = {"image": "image_augment.py", "text": "text_tokenize.py"}[program]
                cmd = [sys.executable, str(ROOT / "tests" / "programs" / script), "--out", str(out)]
            print(f"[bench] {program}: repetition {k + 1}/{a.reps} …", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
            import json

            res = {r["mode"]: r for r in (json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{"))}
            att = analyze(res[mode]["logdir"])["attribution"]
            records = list(Path(res[mode]["logdir"]).rglob("threadcpu.json"))
            for f in records:  # the capture alone: what a plain tf.profiler capture holds
                f.rename(f.with_suffix(".aside"))
            alone = analyze(res[mode]["logdir"])["attribution"] if records else att
            rows.append({
                "truth": res[truth]["input_cost_fraction"],
                "xprof": att["input_bound_fraction"],
                "next": res[mode]["input_wait_ms"] / res[mode]["step_time_ms"],
                "ours": alone["input_cost_estimate_fraction"],
                **({"measured": att["input_cost_estimate_fraction"]} if records else {}),
                "others": att.get("machine_other_cores"),
            })
        total += len(rows)
        keys = ["xprof", "next", "ours", *(["measured"] if "measured" in rows[0] else [])]
        print(f"\n**{program}**{f' beside {a.busy} busy processes' if a.busy else ''}\n")
        print("| rep | what-if truth | xprof input share | blocked in next() | analyze estimate (wait + stolen CPU) |"
              + (" … with the threads' CPU record | other processes' cores (record) |" if len(keys) > 3 else ""))
        print("|---|---|---|---|---|" + ("---|---|" if len(keys) > 3 else ""))
        for i, r in enumerate(rows, 1):
            cells = [f"{r[k] * 100:.1f} % ({(r[k] - r['truth']) * 100:+.1f} pp)" for k in keys]
            cells += [] if len(keys) == 3 else ["—" if r["others"] is None else f"{r['others']:.2f}"]
            print(f"| {i} | {r['truth'] * 100:.1f} % | " + " | ".join(cells) + " |")
        for k, name in zip(keys, ("xprof", "next()", "analyze", "analyze, measured CPU")):
            err = [r[k] - r["truth"] for r in rows]
            print(f"\n{program} {name}: mean |error| {statistics.fmean(abs(e) for e in err) * 100:.1f} pp, "
                  f"mean error {statistics.fmean(err) * 100:+.1f} pp, median error "
                  f"{statistics.median(err) * 100:+.1f} pp", end="")
        for k in keys[2:]:
            closer = sum(abs(r[k] - r["truth"]) < abs(r["xprof"] - r["truth"]) for r in rows)
            print(f"\n{program}: analyze ({'capture alone' if k == 'ours' else 'measured CPU'}) closer to the truth "
                  f"than xprof in {closer}/{len(rows)} repetitions", end="")
        print()
    return total


if __name__ == "__main__":
    sys.exit(main())
