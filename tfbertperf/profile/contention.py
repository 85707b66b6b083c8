"""How much CPU the input pipeline steals from compute, read off a profile's host threads.

xprof's input figure (and wall time blocked in `next()`) only counts the time the training loop *waits* for a
batch.  A prefetching tf.data pipeline also runs *while* the step computes, on the same CPU cores, and every
core-millisecond it takes there stretches the compute phase.  The what-if truth — step time with the pipeline
minus step time fed from memory, (T − T_c) / T — includes both; direct measures miss the second part.

This module reads xprof's trace (the `trace_viewer` tool: every host event with its thread) and, for each
profiled step, replays the compute phase (the step minus its blocked get-next time) against the input
pipeline's busy threads:

  at each instant t of the compute phase, k_in(t) input-pipeline threads are busy (tf.data worker threads
  running a task) on a machine of C cores.  TF's CPU kernels split each op evenly over the intra-op pool (one
  slice per core) and the op ends when its slowest slice ends, so compute advances at the pace of the most
  loaded core: with m = ceil(k_in / C) input threads sharing that core with one compute slice, compute gets
  1 / (1 + m) of it, and the share of compute progress lost is

      lost(t) = m / (1 + m),  m = ceil(k_in(t) / C)          (0 when no input thread is busy)

  The stolen time of a step is ∫ lost(t) dt over its compute phase, and the estimated input cost of the step
  is  blocked get-next time + stolen time.

Why this "lock-step" model and not a fair share of the cores (lost = k_in / (C + k_in)): on an earlier
version of the stall program in tests/programs (a per-example CPU-heavy parallel map in front of an MLP, 2
cores) the what-if truth was 0.60–0.86 of the step over five runs; xprof's input figure said 0.25–0.59, the
fair-share model 0.40–0.73 and the lock-step model 0.46–0.76, the closest of the three in every run.  On the
current program (batched map; `python tools/bench/bench_attribution_foreign.py`) the truth was 0.46–0.48,
xprof 0.07, blocked in next() 0.15–0.16, and this estimate 0.51–0.52.  Blocking work inside tf.data that uses
no CPU (a sleep in a `py_function`, a network wait) is counted as if it used a core, so for such pipelines the
estimate is an upper bound (sleep program: truth 0.78–0.91, estimate 0.89–0.93).

C (cores) is read from the profile itself — TensorFlow sizes its inter-op (`tf_Compute`) and intra-op (Eigen)
pools to the machine's cores, so the number of distinct threads of each pool seen in the trace is a lower bound
on C; os.cpu_count() of the analyzing machine is the fallback when the trace shows neither pool.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict

# Thread-name prefixes (xprof's trace names threads "<pool name>/<id>").
INPUT_THREAD_PREFIXES = ("tf_data",)
COMPUTE_THREAD_PREFIXES = ("tf_Compute", "tf_numa", "Eigen", "tf_inter_op", "tf_intra_op")
# A busy period of a pool thread: one task run by the thread pool.
TASK_EVENT = "ThreadpoolListener::Region"
# Fallback busy markers on tf.data threads that run tasks outside a listened pool (function executions).
INPUT_WORK_EVENTS = ("ExecutorState::Process", "FunctionRun")
# Events on the step's own thread during which the loop is blocked waiting for a batch.
GET_NEXT_EVENT = re.compile(r"^(IteratorGetNext|Iterator::Root$|EagerLocalExecute: IteratorGetNext)")


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _clip(intervals, lo: float, hi: float):
    for a, b in intervals:
        a, b = max(a, lo), min(b, hi)
        if b > a:
            yield a, b


def _subtract(base: list[tuple[float, float]], cut: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Parts of the (sorted, disjoint) `base` intervals not covered by (sorted, disjoint) `cut`."""
    out = []
    for a, b in base:
        cur = a
        for c, d in cut:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return out


def thread_table(trace: dict) -> dict:
    """Map (pid, tid) → thread name, and pid → process name, from a Chrome-trace dict."""
    threads, procs = {}, {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "M":
            continue
        if e.get("name") == "thread_name":
            threads[(e.get("pid"), e.get("tid"))] = e.get("args", {}).get("name", "")
        elif e.get("name") == "process_name":
            procs[e.get("pid")] = e.get("args", {}).get("name", "")
    return {"threads": threads, "processes": procs}


def estimate_cores(trace: dict) -> int:
    """Cores of the profiled machine, as seen from its TF thread pools (see module docstring)."""
    names = thread_table(trace)["threads"].values()
    inter = {n for n in names if n.startswith("tf_Compute")}
    intra = {n for n in names if "Eigen" in n}
    seen = max(len(inter), len(intra))
    return seen if seen > 0 else (os.cpu_count() or 1)


def step_contention(trace: dict, cores: int | None = None) -> dict:
    """Per-step CPU time the input pipeline steals from compute (lock-step model, module docstring).

    Args:
      trace: xprof's `trace_viewer` JSON (dict with traceEvents, timestamps in microseconds).
      cores: C; default estimate_cores(trace).
    Returns:
      {"cores": C, "steps": {step_num: {"step_ms", "wait_ms" (blocked in get-next on the step's thread),
       "compute_phase_ms", "stolen_ms", "input_busy_ms" (union of busy input threads' time × threads, in the
       compute phase)}}}.  Steps are the step-marker events (args step_num) of the host process.
    """
    table = thread_table(trace)
    threads = table["threads"]
    C = int(cores or estimate_cores(trace))
    steps = []  # (step_num, pid, tid, start, end)
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        key = (e.get("pid"), e.get("tid"))
        by_thread[key].append(e)
        args = e.get("args") or {}
        if "step_num" in args and "group_id" in args:
            try:
                steps.append((int(args["step_num"]), key, float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
            except (TypeError, ValueError):
                continue

    input_busy: list[list[tuple[float, float]]] = []
    for key, evs in by_thread.items():
        if not threads.get(key, "").startswith(INPUT_THREAD_PREFIXES):
            continue
        ivs = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in evs if e["name"] == TASK_EVENT]
        if not ivs:
            ivs = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in evs if e["name"] in INPUT_WORK_EVENTS]
        if ivs:
            input_busy.append(_union(ivs))

    out = {}
    for num, key, start, end in sorted(steps):
        waits = _union([
            (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
            for e in by_thread[key]
            if GET_NEXT_EVENT.match(e["name"]) and start <= float(e["ts"]) < end
        ])
        waits = list(_clip(waits, start, end))
        phase = _subtract([(start, end)], waits)
        # Sweep line over the compute phase: +1/-1 at each busy input interval's edges.
        edges = []
        for thread_ivs in input_busy:
            for a, b in _clip(thread_ivs, start, end):
                edges.append((a, 1))
                edges.append((b, -1))
        edges.sort(key=lambda x: (x[0], x[1]))
        k_in = 0
        stolen = busy_in = 0.0
        prev = start
        i = 0
        # lost(t) is constant between consecutive edges; integrate it over the compute phase only.
        points = sorted({start, end, *[a for a, _ in phase], *[b for _, b in phase], *[x[0] for x in edges]})
        for t in points:
            if t > prev and k_in > 0:
                seg = sum(max(0.0, min(b, t) - max(a, prev)) for a, b in phase)
                busy_in += k_in * seg
                m = -(-k_in // C)  # ceil(k_in / C): input threads on the most loaded core
                stolen += m / (1 + m) * seg
            while i < len(edges) and edges[i][0] <= t:
                k_in += edges[i][1]
                i += 1
            prev = t
        wait_us = sum(b - a for a, b in waits)
        out[num] = {
            "step_ms": (end - start) / 1e3,
            "wait_ms": wait_us / 1e3,
            "compute_phase_ms": (end - start - wait_us) / 1e3,
            "stolen_ms": stolen / 1e3,
            "input_busy_ms": busy_in / 1e3,
        }
    return {"cores": C, "steps": out}
