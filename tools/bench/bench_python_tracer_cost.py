"""Cost of one event recorded by TensorFlow's profiler with the Python tracer asked for, measured on this machine
(issue 22: the estimate of the profiler's cost in a foreign capture, profile/program_facts.py HOST_EVENT_COST_US).

Each workload runs in alternating rounds, untraced and traced with TF's real profiler
(`tf.profiler.experimental.start(logdir, options=ProfilerOptions(python_tracer_level=1, host_tracer_level=2))`,
stopped after the round, outside the timing).  Cost per event = (traced round − the mean of the untraced rounds
either side) ÷ the host events the capture recorded inside the round's own marker (every `/host:CPU` line,
counted from the xplane with profile/xspace.py, as program_facts.profiler_cost counts a capture's).  Both in wall
time and in the workload thread's CPU time: the recording runs on that thread, and its CPU time leaves out the
waits for a core on a shared machine.  Workloads:
  - python: many small Python calls (a call tree, builtins);
  - numpy:  small NumPy calls from Python (C functions traced as Python events);
  - tf:     small TensorFlow eager ops (their Python API frames and TraceMe events at host_tracer_level 2);
  - tfdata_serial, tfdata_parallel: batches of a tf.data pipeline that parses serialized tf.train.Examples one by
            one (`parse_single_example` in a map, serial / num_parallel_calls=2, batch 64, prefetch 2), iterated
            by the workload thread.  Their events are recorded on tf.data's own threads, so the CPU column is the
            whole process's CPU time (`time.process_time`), not the workload thread's: the cost a per-example map
            pays on its input threads (profile/contention.py subtracts events × HOST_EVENT_COST_US from their
            measured CPU).
Prints, per workload, events per round (of them Python tracer frames), untraced/traced round wall time and the
per-event cost: median [quartiles] (min–max) over the rounds; then all rounds pooled.  TF 2.21 ignores the
options (it logs "python_tracer_level expects an i value") and records no Python frames: the script says so.

    python tools/bench/bench_python_tracer_cost.py                  # markdown table
    python tools/bench/bench_python_tracer_cost.py --rounds 21 --calls 40000
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
MARKER = "tracer_cost_round"


def _leaf(x):
    return x + 1


def _mid(x):
    return _leaf(x) * 2 - _leaf(x - 1)


def py_work(n: int) -> int:
    acc = 0
    for i in range(n):
        acc += _mid(i) + len((i, acc)) + abs(-i)
    return acc


def np_work(n: int) -> float:
    import numpy as np

    a = np.arange(16, dtype=np.float32)
    acc = 0.0
    for _ in range(n // 4):
        acc += float(np.add(a, 1.0).sum()) + float(np.dot(a, a))
    return acc


def tf_work(n: int) -> float:
    import tensorflow as tf

    a = tf.ones((4, 4))
    acc = 0.0
    for _ in range(n // 40):
        acc += float(tf.reduce_sum(tf.matmul(a, a) + 1.0))
    return acc


_PIPELINES: dict = {}


def _tfdata_work(parallel: int | None):
    """A workload iterating a per-example parse pipeline: n // 400 batches of 64 (about as many host events per
    round as the tf workload)."""
    def work(n: int) -> int:
        import numpy as np
        import tensorflow as tf

        if parallel not in _PIPELINES:
            rng = np.random.default_rng(0)
            recs = [tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=rng.standard_normal(256))),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10]))})).SerializeToString()
                for i in range(1024)]
            spec = {"x": tf.io.FixedLenFeature([256], tf.float32), "y": tf.io.FixedLenFeature([1], tf.int64)}
            ds = tf.data.Dataset.from_tensor_slices(recs).repeat().map(
                lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=parallel)
            _PIPELINES[parallel] = iter(ds.batch(64, drop_remainder=True).prefetch(2))
        it = _PIPELINES[parallel]
        return sum(int(next(it)["y"].shape[0]) for _ in range(max(1, n // 400)))
    return work


WORKLOADS = {"python": py_work, "numpy": np_work, "tf": tf_work, "tfdata_serial": _tfdata_work(None),
             "tfdata_parallel": _tfdata_work(2)}


def count_events(logdir: str) -> tuple[int, int]:
    """(host events, of which Python tracer frames — names starting "$") inside the round's marker event, on
    every /host:CPU line (profile/xspace.py)."""
    from tfbertperf.profile.xspace import read_space

    [path] = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    events = []
    lo = hi = None
    for plane in read_space(path).planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            for ev in line.events:
                s = base + ev.offset_ps
                name = plane.event_metadata[ev.metadata_id].name
                events.append((s, name.startswith("$")))
                if name == MARKER:
                    lo, hi = s, s + ev.duration_ps
    if lo is None:
        raise SystemExit(f"{path}: no {MARKER} marker recorded")
    inside = [py for s, py in events if lo < s < hi]  # the marker itself excluded
    return len(inside), sum(inside)


def one_round(tf, fn, n: int, traced: bool, logdir: str | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one round: this thread's CPU, the process's for a tf.data workload."""
    clock = time.process_time if fn.__name__ == "work" else time.thread_time
    if traced:
        opts = tf.profiler.experimental.ProfilerOptions(python_tracer_level=1, host_tracer_level=2)
        tf.profiler.experimental.start(logdir, options=opts)
    with tf.profiler.experimental.Trace(MARKER):
        t0, c0 = time.perf_counter(), clock()
        fn(n)
        secs = time.perf_counter() - t0, clock() - c0
    if traced:
        tf.profiler.experimental.stop()
    return secs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7, help="traced rounds per workload (untraced: one more)")
    p.add_argument("--calls", type=int, default=20000, help="loop iterations of the python workload")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, of: " + ", ".join(WORKLOADS))
    a = p.parse_args(argv)

    import tensorflow as tf

    print(f"| workload | events / round (Python frames) | untraced round (ms) | traced round (ms) | µs per event, wall: median "
          f"[quartiles] (min–max) over {a.rounds} rounds | µs per event, CPU time (the thread's; tfdata: the process's) |")
    print("|---|---|---|---|---|---|")
    pooled, pooled_cpu = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.workloads.split(","):
            if name not in WORKLOADS:
                print(f"--workloads: unknown workload {name!r} (one of {', '.join(WORKLOADS)})", file=sys.stderr)
                return 2
            fn = WORKLOADS[name]
            one_round(tf, fn, a.calls // 4, False, None)  # warm-up: imports, first-call caches
            base = [one_round(tf, fn, a.calls, False, None)]
            traced, costs, cpu_costs, counts, pys = [], [], [], [], []
            for r in range(a.rounds):
                logdir = os.path.join(tmp, f"{name}{r}")
                traced.append(one_round(tf, fn, a.calls, True, logdir))
                base.append(one_round(tf, fn, a.calls, False, None))
                n, py = count_events(logdir)
                counts.append(n)
                pys.append(py)
                if n:
                    for j, out in ((0, costs), (1, cpu_costs)):
                        out.append((traced[-1][j] - (base[-2][j] + base[-1][j]) / 2) / n * 1e6)
            pooled += costs
            pooled_cpu += cpu_costs
            cost = (_spread(costs) if costs else
                    "— (no events recorded)")
            cpu = _spread(cpu_costs) if cpu_costs else "—"
            print(f"| {name} | {statistics.median(counts):,.0f} ({statistics.median(pys):,.0f}) | "
                  f"{statistics.median(b[0] for b in base) * 1e3:.1f} | "
                  f"{statistics.median(t[0] for t in traced) * 1e3:.1f} | {cost} | {cpu} |")
    if pooled:
        print(f"| all rounds pooled | | | | {_spread(pooled)} | {_spread(pooled_cpu)} |")
    if not any(pys):
        print("\nNo Python tracer frames were recorded: this TensorFlow build ignored python_tracer_level (its "
              "profiler logs 'python_tracer_level expects an i value' and runs with its defaults), so the figures "
              "are the cost of the events it does record at its defaults (TraceMe, host_tracer_level 2).")
    print(f"\nCPU: {_cpu()}; Python {sys.version.split()[0]}, TensorFlow {tf.__version__}")
    return 0


def _spread(xs: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(xs, n=4) if len(xs) > 1 else (xs[0], 0, xs[0])
    return f"{statistics.median(xs):.2f} [{q1:.2f}–{q3:.2f}] ({min(xs):.2f}–{max(xs):.2f})"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
