"""Does `run`'s own probe change the pace it measures?  (Issue 29: on a Keras fit, tf.data's autotuned prefetch
grows at each probe block and the probe reads ~20 pp low; BENCHMARKS.md, "the probe and tf.data's autotuned
prefetch".)  Runs the job with and without its probe, alternating, and prints each run's steady step T, the probe's
T_c and input cost, and beside it (unprobed T − T_c) ÷ unprobed T — the what-if against a run the probe did not
pause.

    python tools/bench/bench_run_probe_pace.py --set data.read_bandwidth_mbps=0.15 --set train.batch_size=8
    python tools/bench/bench_run_probe_pace.py --rounds 3 --steps 300 --set data.read_latency_ms=100
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra --set for every run")
    a = p.parse_args(argv)
    from tfbertperf.config import load_config
    from tfbertperf.job import run

    print(f"load at the start {os.getloadavg()[0]:.1f}", flush=True)
    for r in range(a.rounds):
        got = {}
        for probe in ("auto", "0"):
            cfg = load_config(sets=[f"train.steps={a.steps}", f"profile.probe_steps={probe}",
                                    f"run.out={tempfile.mkdtemp(prefix='bench-probe-pace-')}", *a.sets])
            t0 = time.time()
            _, rep = run(cfg, progress=False)
            att = rep.get("attribution") or {}
            got[probe] = (att.get("steady_step_time_ms") or rep["throughput"]["step_time_ms"]["mean"],
                          att.get("compute_only_step_ms"), att.get("input_cost_fraction"), time.time() - t0)
        (T, T_c, icf, s1), (T0, _, _, s0) = got["auto"], got["0"]
        beside = (T0 - T_c) / T0 if T_c else None
        print(f"round {r}: probed T {T:.1f} ms (T_c {T_c if T_c is None else round(T_c, 1)}, input "
              f"{'—' if icf is None else f'{icf:.3f}'}) | unprobed T {T0:.1f} ms | (unprobed T − T_c) / unprobed T "
              f"{'—' if beside is None else f'{beside:.3f}'} | {s1:.0f} + {s0:.0f} s", flush=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
