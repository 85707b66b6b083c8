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

  A single run's truth scatters by ±10 pp here (other load); the bias stays within ±4 pp and changes sign with the
  stall's strength.  Alternatives, replayed on such profiles (4 repetitions a strength, mean signed error):
  - the "lock-step" model (lost = m / (1 + m), m = ceil(k_in / C)) overshot: +5 / +12 / +2 pp.
  - counting the compute's demand instant by instant (k_c(t) busy compute threads; steal only while
    k_c(t) + k_in(t) > C) undershot at every strength: −8 / −10 / −12 pp (−7 / −6 / −6 with k_c capped at C).
    (An input thread that takes a core in the compute's short gaps holds it past the gap: W is per step.)
  On a per-example stall map (thousands of tiny input ops) it undershot: truth 0.60–0.86, estimate 0.40–0.73.

Measured CPU (issue 29: CPU is CPU, waits are waits).  Busy wall time is not CPU: a `py_function` that sleeps or
a read blocked on a socket keeps an input thread "busy" while it takes no core, and a pipeline whose work the
trace shows few events for (a per-example map the profiler records as thousands of short scheduling events) uses
far more CPU than its events span.  So where the capture has the input threads' own CPU clocks — the
`threadcpu.json` ProfileCallback writes beside it (profile/threadcpu.py: each thread's CPU over the capture
window from the kernel's per-thread counters, matched to the capture's host lines by thread id) — the stolen time
comes from that CPU and not from wall time:

  each input thread's measured CPU is spread over the capture in proportion to its activity (the union of its
  events; evenly over the capture where it shows none), the part falling in a step's compute phase is the
  input CPU X that competed with the compute (less the profiler's own cost on the thread: its recorded events ×
  program_facts.HOST_EVENT_COST_US, which a per-example map pays hundreds of times a step), and with k̄ the mean number of input threads active in the
  phase (≥ 1), the fair-share loss per core-millisecond the input threads used is f = (W + k̄ − C) / (k̄ × C), at
  least 0: while k input threads run beside a compute W wide on C cores, they use k·C/(W+k) cores and the
  compute loses 1 − C/(W+k) of its progress.  How much of that loss reaches the step depends on how the compute
  runs.  Work in parallel regions (oneDNN's threads, Eigen's intra-op pool: an op split in parts that all must
  finish) can be held up whole by a preempted part (the lock-step limit: a millisecond a core-millisecond); a
  compute that keeps the cores busy and balances its work loses the core's share, 1/C; work on the threads the
  capture records (small ops one after another, each waiting on the last) leaves cores idle that the input fills.
  So  stolen = X × f × C × (FLOOR / C + LOCKSTEP × p)  (core_wait.per_core_ms), p the share of the compute's
  measured CPU on threads the capture records no event for (those pools).  The cost per core-millisecond the
  truths needed (issue 29, tests/programs/keras_fit_shapes.py, keras_fit_rule_shapes.py, stall_loop.py) was
  0.48–0.85 over p 0.08–0.93, and p told it only in part: MLPs with big matmuls needed ~p (0.76–0.85 at p ≈ 0.77),
  2-D convolution nets at p 0.88–0.93 0.49–0.68.  The rule before, X × f × C × p, read the guide's JPEG and audio
  CNNs 6 and 15 pp high; with FLOOR, LOCKSTEP fitted on parses and tokenizers they read +0 and +6 on fresh captures,
  and the stall program's MLP 5–10 pp low (4 before; BENCHMARKS.md, "a convolution's parallel
  regions", and its foreign-program row).  A compute nearly all on the recorded threads loses more where the cores are contended one op at a
  time: their wait for a core counts instead where larger (profile/core_wait.py).

Python input work holds the interpreter lock.  A `tf.py_function` / `numpy_function` body runs Python, and the step's
own thread (the training loop, Keras' callbacks, the function call) waits for the same lock: however many cores are
free, the two serialize.  So the measured CPU of an input thread that ran Python function ops, in the compute phase,
costs the step whole, whatever p (a Keras fit behind a 4-way parallel map whose py_function sleeps: 1.7–2.2 ms a ms,
where p ≈ 0 counted nothing), at most what the compute's own CPU leaves of the phase (core_wait.ceiling: a Python
generator's 7.2 ms a 9.9 ms step beside 1.08 compute cores on 2 read 73 % against 42–48 %; capped, 50 %).  A
from_generator source's own loader (a PyDataset's threads and processes): profile/loaders.py.

Without measured CPU (no threadcpu.json, or threads the record cannot name) busy periods stand in as below, but
the wall time of Python function ops on input threads (`EagerPyFunc`, `PyFunc`, which may as well wait as compute)
is not counted as CPU — the estimate then says so (`input_cpu_basis`).

Without thread-pool task events (profile.threadpool_events off, our default) input threads are busy in their
function executions (`ExecutorState::Process`, `FunctionRun`) and W = C.  C: the most distinct threads of TF's
inter-op or intra-op pool in the trace, else os.cpu_count().
"""

from __future__ import annotations

import os
import re
from collections import defaultdict

from tfbertperf.profile import intervals as iv
from tfbertperf.profile import core_wait, loaders, outside_steps, threadcpu
from tfbertperf.profile.devices import _union  # one interval merge for device planes and host threads
from tfbertperf.profile.program_facts import HOST_EVENT_COST_US

# Thread-name prefixes (xprof's trace names threads "<pool name>/<id>").
INPUT_THREAD_PREFIXES = ("tf_data",)
COMPUTE_THREAD_PREFIXES = ("tf_Compute", "tf_numa", "Eigen", "tf_inter_op", "tf_intra_op")
# A busy period of a pool thread: one task run by the thread pool.
TASK_EVENT = "ThreadpoolListener::Region"
# Fallback busy markers on tf.data threads that run tasks outside a listened pool (function executions).
INPUT_WORK_EVENTS = ("ExecutorState::Process", "FunctionRun")
# Python function ops: their wall time may be a wait (a sleep, a blocking read), so it is not CPU without a clock.
PY_FUNC_EVENT = re.compile(r"(^|:)(EagerPyFunc|PyFunc|PyFuncStateless)\b")
# Events on the step's own thread during which the loop is blocked waiting for a batch.
GET_NEXT_EVENT = re.compile(r"^(IteratorGetNext|Iterator::Root$|EagerLocalExecute: IteratorGetNext)")
GET_NEXT_OP = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")  # latter: Keras' loop


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
            waits = _union([_span(e) for e in evs if PY_FUNC_EVENT.search(e["name"])])
            ivs = _subtract(_union(ivs), waits) if len(waits) else _union(ivs)
            out.append(ivs) if len(ivs) else None
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


def marked(found: list) -> list:
    """The steps, (step_num, thread key, start, end), of marker candidates (…, grouped by xprof): the grouped ones; all
    where xprof grouped none (profile/marker_steps.py), renumbered in time order where their numbers repeat (Keras'
    TensorBoard(profile_batch) numbers a batch within its epoch)."""
    steps = sorted((s[:4] for s in found if s[4] or not any(x[4] for x in found)), key=lambda s: s[2])
    return steps if len({s[0] for s in steps}) == len(steps) else [(i, *s[1:]) for i, s in enumerate(steps)]


def step_contention(trace: dict, cores: int | None = None, thread_cpu: dict | None = None) -> dict:
    """Per-step CPU time the input pipeline steals from compute (fair-share model, module docstring).

    Args:
      trace: xprof's `trace_viewer` JSON (dict with traceEvents, timestamps in microseconds).
      cores: C; default estimate_cores(trace).
      thread_cpu: the threadcpu.json record beside the capture (profile/threadcpu.py), or None: with it the
        stolen time of the input threads it names comes from their measured CPU (module docstring).
    Returns:
      {"cores": C, "input_cpu_basis": "measured" | "estimated" (the busy-period model; py_function wall not
       counted), "measured_threads": input threads whose CPU was measured, "python_loader": a from_generator
       source's own loader CPU counted (profile/loaders.py), "loader_wanted_ms": the CPU that loader wanted a step
       (loaders.wanted_us; None without a from_generator source or a record), "steps": {step_num: {"step_ms",
       "wait_ms" (blocked in get-next on the step's thread), "compute_phase_ms", "stolen_ms" ("waits_ms" of it: what
       the recorded threads' waits for a core added to the fair-share rule, core_wait.py; its Python input's part at
       most "ceiling_ms", inf without Python input), "input_busy_ms" (union of busy input threads' time × threads,
       in the compute phase), "input_cpu_ms" (measured input CPU in the compute phase; None when estimated),
       "compute_width" (W)}}}.
       Steps are the step-marker events (args step_num) of the host process.
    """
    threads = thread_table(trace)["threads"]
    C = int(cores or estimate_cores(trace))
    steps = []  # (step_num, pid, tid, start, end)
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        key = (e.get("pid"), e.get("tid"))
        by_thread[key].append(e)
        args = e.get("args") or {}
        if "step_num" in args and str(args["step_num"]).lstrip("-").isdigit():
            steps.append((int(args["step_num"]), key, *_span(e), "group_id" in args))
    steps = marked(steps)

    # input threads whose CPU threadcpu.json measured: their CPU spread over their activity (less outside_steps.py's)
    span = [min((_span(e)[0] for evs in by_thread.values() for e in evs), default=0.0),
            max((_span(e)[1] for evs in by_thread.values() for e in evs), default=0.0)]
    outside = outside_steps.spans((e for evs in by_thread.values() for e in evs), thread_cpu, steps, span)
    cpu_us = threadcpu.measured_cpu_us(thread_cpu)
    measured = {}  # thread key → (activity intervals, CPU µs)
    measured_ids = []
    for key, evs in by_thread.items():
        name = threads.get(key, "")
        if is_input_thread(name) and threadcpu.line_id(name) in cpu_us:
            # less the profiler's own cost on that thread: each event it recorded there took ~1.7 µs of its CPU
            own = max(0.0, cpu_us[threadcpu.line_id(name)] - len(evs) * HOST_EVENT_COST_US)
            python = any(PY_FUNC_EVENT.search(e["name"]) for e in evs)  # runs Python under the interpreter lock
            measured[key] = (_subtract(_union([_span(e) for e in evs]), outside), own, python)
            measured_ids.append(threadcpu.line_id(name))
    # a from_generator source's own loader (profile/loaders.py): its unrecorded threads and processes are input too
    generator = any(loaders.is_generator(e["name"]) for evs in by_thread.values() for e in evs)
    loader_py, loader_kids, loader_ids = loaders.loader_cpu_us(thread_cpu) if generator else (0.0, 0.0, set())
    traced = {threadcpu.line_id(n) for n in threads.values() if "Eigen" not in n} - {None}  # Eigen: the intra-op pool
    inputs = {*measured_ids, *loader_ids}  # line ids: the input threads and a generator's loader threads
    pool, compute_cores = threadcpu.pool_share(thread_cpu, traced, inputs), core_wait.compute_cores(thread_cpu, inputs)
    rq_rate, rq_share = core_wait.input_share_of_wait(thread_cpu, traced, inputs, loader_kids / 1e3)
    span = max(1.0, span[1] - span[0] - iv.length(iv.clip(outside, *span)))  # the record leaves those out too
    input_busy = _busy_threads({k: v for k, v in by_thread.items() if k not in measured}, threads,
                               is_input_thread, INPUT_WORK_EVENTS)
    compute_busy = _busy_threads(by_thread, threads, is_compute_thread)

    # get-next spans of each step-marker thread, read once (not once per step), and the get-next op on any
    # thread: inside a compiled step (Keras fit's train_function) the op blocks on a tf_data_iterator_get_next
    # thread while the step's own thread waits in the function call
    anywhere = [_span(e) for evs in by_thread.values() for e in evs if e["name"] in GET_NEXT_OP]
    get_next = {key: [_span(e) for e in by_thread[key] if GET_NEXT_EVENT.match(e["name"])] + anywhere
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
                edges += [(a, 1), (b, -1)]
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
        cpu_in, queued, most = None, 0.0, float("inf")
        if measured or loader_py or loader_kids:
            # the loader's threads and processes show no events: their CPU spread evenly over the capture
            part = iv.length(phase) / span
            cpu_in, active, cpu_py = (loader_py + loader_kids) * part, loader_kids * part, loader_py * part
            for activity, cpu, python in measured.values():
                total = iv.length(activity)
                share = iv.length(iv.intersect(activity, phase)) / total if total > 0 else \
                    iv.length(phase) / span
                cpu_in += cpu * share
                cpu_py += cpu * share if python else 0.0
                active += iv.length(iv.intersect(activity, phase))
            k_bar = max(1.0, active / max(1e-9, iv.length(phase)))
            fair = max(0.0, width + k_bar - C) / (k_bar * C)
            # a py_function thread's CPU holds the interpreter lock the step's own Python waits for: whole, at most
            # what the compute's own CPU leaves of the phase (core_wait.ceiling; "ceiling_ms" where there was Python)
            stolen, most = core_wait.with_python(stolen + (cpu_in - cpu_py) * fair * C
                                                 * core_wait.per_core_ms(pool, C), cpu_py,
                                                 core_wait.ceiling(iv.length(phase), compute_cores, C))
            stolen, queued = core_wait.larger(stolen, cpu_in, rq_rate * iv.length(phase) * rq_share)
        wait_us = sum(b - a for a, b in waits)
        out[num] = {
            "step_ms": (end - start) / 1e3,
            "wait_ms": wait_us / 1e3,
            "compute_phase_ms": (end - start - wait_us) / 1e3,
            "stolen_ms": stolen / 1e3, "waits_ms": queued / 1e3, "ceiling_ms": most / 1e3,
            "input_busy_ms": busy_in / 1e3,
            "input_cpu_ms": None if cpu_in is None else cpu_in / 1e3,
            "compute_width": width,
        }
    loader = bool(loader_py or loader_kids)
    # the CPU the loader wanted a step, its generator's tf.data threads with it (advice.py: processes or threads)
    own = loaders.wanted_us(thread_cpu, {threadcpu.line_id(threads.get(k, "")) for k, v in measured.items() if v[2]})
    return {"cores": C, "input_cpu_basis": "measured" if measured or loader else "estimated",
            "measured_threads": len(measured), "python_loader": loader, "steps": out,
            "loader_wanted_ms": own / 1e3 / len(out) if generator and thread_cpu and out else None}
