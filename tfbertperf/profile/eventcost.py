"""The profiler's own CPU on the input threads, measured per capture: what each event it records there costs.

The stolen-CPU rule (profile/contention.py) counts the input threads' measured CPU over the capture less what the
profiler itself spent recording their events.  A per-example tf.data map records hundreds of events a step
(`parse_single_example` on a batch of 64: ~550–850), so the cost per event decides much of the input CPU that is
left: at a fixed 1.7 µs (program_facts.HOST_EVENT_COST_US, the median of eager ops on the AMD EPYC host of
issue 22) 0.9–1.3 ms a step was taken off a parse pipeline whose CPU rose by 0.2–0.7 ms under the profiler on
this project's Intel Xeon host, where the same bench reads 0.56–0.59 µs a tf.data event and 0.40 µs an eager
one (tools/bench/bench_python_tracer_cost.py --workloads tfdata_serial,tfdata_parallel,tf; BENCHMARKS.md).  The
cost is the machine's, so ProfileCallback measures it beside each capture:

  before the window it reads the threads' CPU clocks once more, K steps ahead of the capture's first step
  (K = the window's length, at least MIN_BEFORE_STEPS, not reaching into the warm-up, and no probe block in
  between), and threadcpu.json holds {"before": {"steps": K, "window_steps": n, "threads": [{"tid", "cpu_ms"}]}}.
  With X_w the input threads' CPU over the window (n steps), X_b theirs over the K steps before, and E the
  events the capture recorded on them,

      cost per event = (X_w − X_b × n / K) ÷ E,   within [0, MAX_EVENT_COST_US]

  — the input threads' work per step is the same batch work with and without the profiler, so what the window
  adds per step is the recording.  Only threads alive in both spans count (a pipeline made in between, a new
  epoch's iterator, gives no figure).  Without the record (older captures, a capture not made by ProfileCallback,
  a window at the fit's start) the fixed estimate stays, and the result says which was used.  The two spans are
  10–20 steps each: on the parse fit the measured added CPU scattered 0.24–0.74 ms a step over two 10-step
  windows, so a single capture's figure is noisy, unbiased where the fixed one is off by the machine's factor.
"""

from __future__ import annotations

from tfbertperf.profile.program_facts import HOST_EVENT_COST_US

MIN_BEFORE_STEPS = 10  # the span before the window is at least this many steps (or none is recorded)
MAX_EVENT_COST_US = 5.0  # a measured cost above this is not the recording's (a cold pipeline before): clipped


def before_at(window: tuple[int, int] | None, warmup: int) -> int | None:
    """The step at whose start the span before the window begins (module docstring), or None when the window
    leaves no room for MIN_BEFORE_STEPS steps after the warm-up."""
    if not window:
        return None
    at = window[0] - max(MIN_BEFORE_STEPS, window[1] - window[0])
    at = max(at, warmup)
    return at if window[0] - at >= MIN_BEFORE_STEPS else None


def before_record(pre: dict, start: dict, steps: int, window_steps: int) -> dict:
    """The sidecar's "before" object from two threadcpu snapshots (`pre` K = `steps` steps before the capture,
    `start` at its first step): each thread alive at both, its CPU over the span."""
    rows = [{"tid": tid, "cpu_ms": round(max(0.0, cpu - pre["threads"][tid][0]) * 1e3, 3)}
            for tid, (cpu, _) in start["threads"].items() if tid in pre["threads"]]
    return {"steps": int(steps), "window_steps": int(window_steps), "seconds": round(start["t"] - pre["t"], 6),
            "threads": rows}


def per_event_us(record: dict | None, inputs: dict[int, tuple[float, int]]) -> tuple[float, str]:
    """(µs the profiler spent per event it recorded on the input threads, "measured" or "estimated") for a
    threadcpu record and the capture's input threads {tid: (CPU µs over the window, events recorded)}."""
    before = (record or {}).get("before") or {}
    try:
        k, n = int(before["steps"]), int(before["window_steps"])
        then = {int(r["tid"]): float(r["cpu_ms"]) * 1e3 for r in before["threads"]}
    except (KeyError, TypeError, ValueError):
        return HOST_EVENT_COST_US, "estimated"
    both = [tid for tid in inputs if tid in then]
    events = sum(inputs[tid][1] for tid in both)
    if k <= 0 or n <= 0 or not both or events <= 0:
        return HOST_EVENT_COST_US, "estimated"
    added = sum(inputs[tid][0] for tid in both) - sum(then[tid] for tid in both) * n / k
    return min(MAX_EVENT_COST_US, max(0.0, added / events)), "measured"
