"""How much CPU the input pipeline steals from compute, read off a profile's host threads.

xprof's input figure (and wall time blocked in `next()`) only counts the time the training loop *waits* for a
batch.  A prefetching tf.data pipeline also runs *while* the step computes, on the same CPU cores, and every
core-millisecond it takes there stretches the compute phase.  The what-if truth — step time with the pipeline
minus step time fed from memory, (T − T_c) / T — includes both; direct measures miss the second part.

This module reads xprof's trace (the `trace_viewer` tool: every host event with its thread) and, for each
profiled step, replays the compute phase (the step minus its blocked get-next time) against the input
pipeline's busy threads:

  at each instant t of the compute phase, k_in(t) input-pipeline threads are busy (tf.data threads running a
  task) on a machine of C cores, next to a compute W threads wide — W is the most TF compute-pool threads
  (tf_Compute inter-op, Eigen intra-op) busy at one instant in the step, at least 1 (the step's own thread),
  at most C; a CPU-bound TF model splits each op over its intra-op pool of C threads, so W = C.  The OS
  scheduler gives every runnable thread an equal share of the cores, and an op's work is balanced over its
  pool's threads (Eigen cuts an op into many blocks, threads migrate between cores), so when the W + k_in
  threads oversubscribe the cores compute runs at C / (W + k_in) of its own speed and loses

      lost(t) = 1 − C / (W + k_in(t))   when W + k_in(t) > C,   else 0

  (W = C: lost = k_in / (C + k_in) — one busy input thread on 2 cores costs compute a third).  The stolen time
  of a step is ∫ lost(t) dt over its compute phase, and the estimated input cost of the step is
  blocked get-next time + stolen time.

Why this model, measured on a noisy shared 2-core VM with tests/programs/stall_loop.py (a Keras MLP custom loop
behind a batched CPU-heavy parallel map; `python tools/bench/bench_attribution_foreign.py --reps 5 --rounds R`,
truth from 8 alternating unprofiled blocks of 20 steps, settle 8), in % of the step, range over the repetitions
and mean |error| (mean signed error) against the truth:

    stall R   truth       xprof            blocked in next()   this estimate
    4         18–28       1.5–8  18.6 pp   8–15   11.8 pp      15–24  4.7 pp (−3.7)
    12        29–49       3–6    30.6 pp   12–14  23.4 pp      33–43  6.2 pp (+2.6)
    24        43–53       4–15   37.7 pp   10–18  32.9 pp      46–56  5.2 pp (+3.6)

  The truth of a single run scatters by ±10 pp on this machine (other load), so a single run's error is mostly
  the truth's noise; the bias stays within ±4 pp and changes sign with the stall's strength.  Alternatives,
  replayed on the same kind of profiles (4 repetitions per strength, R = 4 / 12 / 24, mean signed error):
  - the former "lock-step" model (an op ends when its slowest slice ends and nothing rebalances: with
    m = ceil(k_in / C) input threads on the most loaded core, lost = m / (1 + m)) overshot: +5 / +12 / +2 pp
    (earlier runs at R = 12: +14..+18 pp).  It only differs from this one when k_in is not a multiple of C.
  - counting the compute's demand instant by instant (k_c(t) busy compute threads; steal only while
    k_c(t) + k_in(t) > C) undershot at every strength: −8 / −10 / −12 pp (−7 / −6 / −6 with k_c capped at C).
    The compute's gaps between pool tasks last tens to hundreds of µs, less than a scheduler time slice: an
    input thread that takes a core in a gap holds it past the gap.  At the time scale of an op a CPU-bound
    model needs all its W cores, so W is taken per step (the compute's width), not per instant.
  On an earlier version of the stall program (a per-example map: thousands of tiny input ops) this fair-share
  share undershot (truth 0.60–0.86, estimate 0.40–0.73, lock-step 0.46–0.76; that truth came from the 8-step
  blocks that read low under a heavy stall, see stall_loop.what_if_truth): for pipelines of many tiny ops the
  estimate may read low.

Caveats.  Blocking work inside tf.data that uses no CPU (a sleep in a `py_function`, a network wait) is counted
as if it used a core, so for such pipelines the estimate is an upper bound: with an 8 ms sleep per batch
(`--sleep-ms 8`, 3 repetitions) the truth was 38–48 %, xprof 27–39 %, this estimate 52–59 % (+13 pp mean).
Equal shares assume equal scheduling weights (no nice levels, cgroup CPU quotas or pinned threads), and a
thread preempted in the middle of a task still counts as busy.

Without thread-pool task events (a capture with profile.threadpool_events off, our default: they are 3/4 of a
trace, train/capture.py) the busy periods of input threads are their function executions (`ExecutorState::Process`,
`FunctionRun`) and W is taken to be C.  Replayed on traces with the events (tiny BERT tuned and naive with 5 ms
reads, the stall program above at --rounds 12), dropping them moved the stolen time by 0.01–0.12 ms a step.

C (cores) is read from the profile itself — TensorFlow sizes its inter-op (`tf_Compute`) and intra-op (Eigen)
pools to the machine's cores, so the number of distinct threads of each pool seen in the trace is a lower bound
on C; os.cpu_count() of the analyzing machine is the fallback when the trace shows neither pool.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict

from tfbertperf.profile.devices import _union  # one interval merge for device planes and host threads

# Thread-name prefixes (xprof's trace names threads "<pool name>/<id>").
INPUT_THREAD_PREFIXES = ("tf_data",)
COMPUTE_THREAD_PREFIXES = ("tf_Compute", "tf_numa", "Eigen", "tf_inter_op", "tf_intra_op")
# A busy period of a pool thread: one task run by the thread pool.
TASK_EVENT = "ThreadpoolListener::Region"
# Fallback busy markers on tf.data threads that run tasks outside a listened pool (function executions).
INPUT_WORK_EVENTS = ("ExecutorState::Process", "FunctionRun")
# Events on the step's own thread during which the loop is blocked waiting for a batch.
GET_NEXT_EVENT = re.compile(r"^(IteratorGetNext|Iterator::Root$|EagerLocalExecute: IteratorGetNext)")


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


def is_input_thread(name: str) -> bool:
    return name.startswith(INPUT_THREAD_PREFIXES)


def is_compute_thread(name: str) -> bool:
    return not is_input_thread(name) and (name.startswith(COMPUTE_THREAD_PREFIXES) or "Eigen" in name)


def _span(e: dict) -> tuple[float, float]:
    """A complete ("X") trace event's (start, end) in µs."""
    return float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))


def _busy_threads(by_thread: dict, threads: dict, keep, fallback_events: tuple = ()) -> list:
    """For each thread whose name passes `keep`: the union of its busy intervals — its pool tasks (TASK_EVENT),
    or its `fallback_events` when it shows no pool task."""
    out = []
    for key, evs in by_thread.items():
        if not keep(threads.get(key, "")):
            continue
        ivs = [_span(e) for e in evs if e["name"] == TASK_EVENT]
        ivs = ivs or [_span(e) for e in evs if e["name"] in fallback_events]
        if ivs:
            out.append(_union(ivs))
    return out


def _peak(per_thread: list, lo: float, hi: float) -> int:
    """Most threads of `per_thread` busy at one instant within [lo, hi)."""
    edges = sorted((x, d) for ivs in per_thread for a, b in _clip(ivs, lo, hi) for x, d in ((a, 1), (b, -1)))
    k = peak = 0
    for _, d in edges:  # at equal times -1 sorts first: back-to-back tasks are not concurrent
        k += d
        peak = max(peak, k)
    return peak


def lost_share(k_in: int, width: int, cores: int) -> float:
    """Share of compute progress lost while `k_in` input threads are busy next to a compute `width` threads wide
    on `cores` cores (fair share of oversubscribed cores, module docstring)."""
    if k_in <= 0 or width + k_in <= cores:
        return 0.0
    return 1.0 - cores / (width + k_in)


def step_contention(trace: dict, cores: int | None = None) -> dict:
    """Per-step CPU time the input pipeline steals from compute (fair-share model, module docstring).

    Args:
      trace: xprof's `trace_viewer` JSON (dict with traceEvents, timestamps in microseconds).
      cores: C; default estimate_cores(trace).
    Returns:
      {"cores": C, "steps": {step_num: {"step_ms", "wait_ms" (blocked in get-next on the step's thread),
       "compute_phase_ms", "stolen_ms", "input_busy_ms" (union of busy input threads' time × threads, in the
       compute phase), "compute_width" (W: threads the compute runs on, ≤ C)}}}.  Steps are the step-marker
       events (args step_num) of the host process.
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
                steps.append((int(args["step_num"]), key, *_span(e)))
            except (TypeError, ValueError):
                continue

    input_busy = _busy_threads(by_thread, threads, is_input_thread, INPUT_WORK_EVENTS)
    compute_busy = _busy_threads(by_thread, threads, is_compute_thread)

    # get-next spans of each step-marker thread, read once (not once per step)
    get_next = {key: [_span(e) for e in by_thread[key] if GET_NEXT_EVENT.match(e["name"])]
                for key in {k for _, k, _, _ in steps}}
    out = {}
    for num, key, start, end in sorted(steps):
        waits = _union([(a, b) for a, b in get_next[key] if start <= a < end])
        waits = list(_clip(waits, start, end))
        phase = _subtract([(start, end)], waits)
        # W: the compute's width — the most pool threads it ran on at once in this step (the step's own thread
        # when no pool thread shows), at most C.  A capture without thread-pool task events (our default,
        # train/capture.py) shows no pool thread at all: then W = C, the width of a CPU-bound TF compute.
        width = min(C, max(1, _peak(compute_busy, start, end))) if compute_busy else C
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
                stolen += lost_share(k_in, width, C) * seg
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
            "compute_width": width,
        }
    return {"cores": C, "steps": out}
