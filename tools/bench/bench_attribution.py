"""Attribution accuracy against ground truth: tiny BERT, injected local read latency, naive and tuned pipelines.

Ground truth per row: the same model and pipeline measured in two *separate runs*, each in its own process —
the real run (mean steady step T, from its report.json) and the same model fed synthetic in-memory batches
(mean steady step T_c) — truth = (T − T_c) / T.  The two processes take turns on the CPU, --turn steps each
(the run that is not on stops itself with SIGSTOP before a step, training or probe alike, outside the step's
timing, and the benchmark wakes it with SIGCONT when the other one stops): this machine's speed drifts by
5–20 % over seconds (a shared VM), and runs one after the other would each measure a different machine.  Each row is the median over --reps
such pairs.  Means, not medians, of steps: a stall that hits one step in five (a slow read shared by five
batches) costs throughput, and a median would not see it.

Columns: our in-run what-if figure (input_cost_fraction, from the compute-only probe blocks inside the real
run), the trace estimate (input_cost_estimate_fraction: blocked wait + stolen CPU) and the direct figures
(input_bound_fraction from xprof, step_timer.input_wait_fraction), each with its error in percentage points.

    python tools/bench/bench_attribution.py                 # 0/5/20/50 ms × naive/tuned, 3 reps, markdown table
    python tools/bench/bench_attribution.py --latencies 0,20 --presets tuned --steps 40 --reps 1
    # levels where input truly costs 10-80 %: inline tokenization, small batches, naive, 50-400 ms reads
    python tools/bench/bench_attribution.py --presets naive --latencies 50,100,200,400 --batch 8 \
        --set pipeline.tokenize=inline
    # emulated devices (T_c known exactly): trace and direct figures scored against exact truth
    python tools/bench/bench_attribution.py --emulate-step-ms 30 --presets naive,tuned --latencies 0,50,200
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# ---- child: one run that stops itself every --turn steps ------------------------------------------------------

def child(role: str, sets: list[str], turn: int, vocab_size: int, out_json: str) -> int:
    from tfbertperf.config import load_config
    from tfbertperf.train import loop

    steps_seen = [0]

    def take_turns(_kind: str) -> None:
        # every `turn` steps, training or probe alike: the first step after a wake-up runs on cold caches
        # (~4 ms slower here), and that must hit the probe's steps at the same rate as the others
        if steps_seen[0] % turn == 0:
            os.kill(os.getpid(), signal.SIGSTOP)  # the benchmark sends SIGCONT when it is our turn again
        steps_seen[0] += 1

    loop.STEP_HOOK = take_turns
    cfg = load_config(sets=sets)
    if role == "real":
        from tfbertperf.job import run

        _run_dir, rep = run(cfg, progress=False)
        att = rep.get("attribution") or {}
        T = att.get("steady_step_time_ms") or rep["throughput"]["step_time_ms"]["mean"]
        T_c = att.get("compute_only_step_ms")
        # the report clamps input_cost_fraction at 0; unclamped here, like the truth it is compared with
        doc = {"T": T, "cost": (T - T_c) / T if T_c else None, "estimate": att.get("input_cost_estimate_fraction"),
               "direct": att.get("input_bound_fraction"),
               "wait": (rep.get("step_timer") or {}).get("input_wait_fraction"),
               "bottleneck": (rep.get("verdict") or {}).get("bottleneck")}
    else:
        from tfbertperf.data.synthetic import synthetic_dataset_fn
        from tfbertperf.report.build import steady_steps

        result = loop.train(cfg, synthetic_dataset_fn(cfg, vocab_size), vocab_size, None, progress=None)
        doc = {"T_c": statistics.fmean(result.step_times_ms[i] for i in steady_steps(result))}
    with open(out_json, "w") as f:
        json.dump(doc, f)
    return 0


# ---- coordinator ---------------------------------------------------------------------------------------------

def take_turns(cmds: list[list[str]]) -> None:
    """Start the commands; once each has stopped itself, wake them one at a time until all have exited."""
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL) for c in cmds]
    alive, failed = [], []
    try:
        for p in procs:
            _, status = os.waitpid(p.pid, os.WUNTRACED)
            (alive if os.WIFSTOPPED(status) else failed).append((p, status))
        while alive:
            for entry in list(alive):
                p = entry[0]
                os.kill(p.pid, signal.SIGCONT)
                _, status = os.waitpid(p.pid, os.WUNTRACED)
                if not os.WIFSTOPPED(status):
                    alive.remove(entry)
                    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                        failed.append((p, status))
    finally:  # interrupted: a stopped child would wait forever (a pending SIGTERM waits for SIGCONT)
        for p, _ in alive:
            p.kill()
    for p, status in failed:
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            for q, _ in alive:
                q.kill()
            raise SystemExit(f"bench_attribution: child {' '.join(p.args[-6:])} failed (status {status})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latencies", default="0,5,20,50", help="data.read_latency_ms values (comma-separated)")
    p.add_argument("--presets", default="naive,tuned")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--window", default="20:40", help="profile.steps")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--probe-steps", type=int, default=20)
    p.add_argument("--turn", type=int, default=10, help="steps per turn of the real and the synthetic run")
    p.add_argument("--reps", type=int, default=3, help="pairs of runs per row (medians of each figure)")
    p.add_argument("--out", default="", help="runs root (default: a temp dir)")
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra --set for every run")
    p.add_argument("--emulate-step-ms", type=float, default=0.0,
                   help="emulated devices (emulate.step_ms): T_c is this exactly, no synthetic run; the probe figure "
                        "is then exact by construction and the trace/direct figures are what is scored")
    p.add_argument("--child", choices=("real", "synthetic"), help=argparse.SUPPRESS)
    p.add_argument("--child-sets", default="", help=argparse.SUPPRESS)
    p.add_argument("--vocab-size", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--json", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the `finally` that kills stopped children
    if a.child:
        return child(a.child, json.loads(a.child_sets), a.turn, a.vocab_size, a.json)

    from tfbertperf.config import load_config
    from tfbertperf.job import ensure_data
    from tfbertperf.storage import open_backend

    out = a.out or tempfile.mkdtemp(prefix="bench-attribution-")
    base = [f"train.steps={a.steps}", f"profile.steps={a.window}", f"train.batch_size={a.batch}",
            f"profile.probe_steps={a.probe_steps}", f"run.out={out}", *a.sets]
    if a.emulate_step_ms:
        base.append(f"emulate.step_ms={a.emulate_step_ms:g}")
    synth_sets = [*base, "profile.steps=none", "profile.probe_steps=0"]
    cfg0 = load_config(sets=base)
    _uri, manifest = ensure_data(cfg0, open_backend(cfg0.resolved_data_uri(), cfg0.data), progress=False)
    vocab_size = int(manifest["vocab_size"])

    def median(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    me = os.path.abspath(__file__)
    rows = []
    t_start = time.time()
    for preset in a.presets.split(","):
        for lat in a.latencies.split(","):
            sets = [*base, f"pipeline.preset={preset}", f"data.read_latency_ms={lat}"]
            print(f"[bench] {preset} latency {lat} ms …", file=sys.stderr, flush=True)
            reps = []
            for k in range(a.reps):
                files = [os.path.join(out, f"{preset}-{lat}-{k}-{r}.json") for r in ("real", "synthetic")]
                cmds = [[sys.executable, me, "--child", role, "--child-sets", json.dumps(s), "--turn", str(a.turn),
                         "--vocab-size", str(vocab_size), "--json", f]
                        for role, s, f in (("real", sets, files[0]), ("synthetic", synth_sets, files[1]))]
                if a.emulate_step_ms:  # T_c known exactly: only the real run
                    take_turns(cmds[:1])
                    real, synth = json.load(open(files[0])), {"T_c": a.emulate_step_ms}
                else:
                    take_turns(cmds)
                    real, synth = (json.load(open(f)) for f in files)
                reps.append({**real, **synth, "truth": (real["T"] - synth["T_c"]) / real["T"]})
                print(f"[bench]   pair {k + 1}: T {real['T']:.1f} ms, T_c {synth['T_c']:.1f} ms, truth "
                      f"{reps[-1]['truth'] * 100:.1f} %, ours {(real['cost'] or 0) * 100:.1f} %",
                      file=sys.stderr, flush=True)
            row = {"preset": preset, "latency_ms": float(lat),
                   **{k: median(r[k] for r in reps) for k in ("T", "T_c", "truth", "cost", "estimate", "direct",
                                                              "wait")},
                   "bottleneck": "/".join(sorted({r["bottleneck"] for r in reps if r["bottleneck"]})),
                   "pairs": [(r["truth"], r["cost"]) for r in reps],
                   "pair_err": {k: median(None if r[k] is None else r[k] - r["truth"] for r in reps)
                                for k in ("cost", "estimate", "direct", "wait")}}
            rows.append(row)

    def cell(v, truth):
        if v is None:
            return "n/a"
        return f"{v * 100:.1f} % ({(v - truth) * 100:+.1f} pp)"

    print("\n| preset | read latency | T ms | T_c ms (synthetic run) | truth (T−T_c)/T | input_cost_fraction (probe) | "
          "input_cost_estimate_fraction (trace) | input_bound_fraction (xprof) | step_timer input_wait_fraction | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['preset']} | {r['latency_ms']:g} ms | {r['T']:.1f} | {r['T_c']:.1f} | {r['truth'] * 100:.1f} % | "
              f"{cell(r['cost'], r['truth'])} | {cell(r['estimate'], r['truth'])} | {cell(r['direct'], r['truth'])} | "
              f"{cell(r['wait'], r['truth'])} | {r['bottleneck']} |")
    scored = [r for r in rows if r["truth"] >= 0.10]
    print(f"\n\nScores (|error| in pp).  'within 3 pp' counts only the {len(scored)} of {len(rows)} levels whose truth "
          "is ≥ 10 % (below that a constant guess scores as well).  Per level: difference of medians (median figure "
          "− median truth) and median of the per-pair errors (figure − truth of the same pair).")
    print("\n| figure | levels ≥ 10 % | within 3 pp (diff. of medians) | max / mean (diff. of medians) | "
          "within 3 pp (median per-pair) | max / mean (median per-pair) |")
    print("|---|---|---|---|---|---|")
    for key, name in (("cost", "input_cost_fraction"), ("estimate", "input_cost_estimate_fraction"),
                      ("direct", "input_bound_fraction"), ("wait", "step_timer input_wait_fraction")):
        dm = [abs(r[key] - r["truth"]) * 100 for r in scored if r[key] is not None]
        pp = [abs(r["pair_err"][key]) * 100 for r in scored if r["pair_err"].get(key) is not None]
        if dm:
            print(f"| {name} | {len(dm)} | {sum(e <= 3.0 for e in dm)}/{len(dm)} | {max(dm):.1f} / "
                  f"{statistics.fmean(dm):.1f} | {sum(e <= 3.0 for e in pp)}/{len(pp)} | "
                  f"{max(pp):.1f} / {statistics.fmean(pp):.1f} |")
    print("\n\nPer pair of runs, truth → input_cost_fraction (error):")
    for r in rows:
        cells = [f"{t * 100:.1f} → {c * 100:.1f} ({(c - t) * 100:+.1f})" for t, c in r["pairs"] if c is not None]
        print(f"- {r['preset']} {r['latency_ms']:g} ms: " + "; ".join(cells))
    print("\ninput_cost_fraction is shown unclamped ((T − T_c) / T; report.json clamps it at 0), like the truth.")
    print(f"\n{len(rows)} rows × {a.reps} pairs of runs in {time.time() - t_start:.0f} s "
          f"(turns of {a.turn} steps); runs under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
