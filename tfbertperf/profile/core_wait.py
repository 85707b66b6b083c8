"""The step's own threads waiting for a core while the input pipeline ran: the loss contention.py's fair-share
rule cannot see on a compute that runs on the threads the capture records.

contention.py counts the input's CPU against the compute in proportion to the compute's share in parallel regions
(p, the pools the capture records no event for).  A Keras model of small ops runs them one after another on the
recorded threads (the training thread, TF's inter-op pool; p ≈ 0.07 for three 256-wide layers), so that rule
counts almost nothing — yet such a step loses time to the input anyway: each op wakes the next thread, and a
wake-up that finds both cores busy (one of them running a per-example map) waits in the run queue.  The thread-CPU
record (profile/threadcpu.py) measures that wait directly: schedstat's run-queue time of every thread over the
window.  Measured by hand (issue 29, a 256-wide MLP behind `map(x * 2)` on 2 cores): the recorded threads' wait
rose from 0.30 to 1.51 ms a step with the map beside them, their voluntary switches from 9 to 32 a step.

Not all of that wait is the input's: the compute's own threads queue behind each other (a compute-bound MLP with no
input at all waits 1.4 ms a step on this VM), and other processes take cores too.  So the recorded threads' wait is
shared out by who held the cores: the input's part is its CPU's share of all the CPU that ran beside the step — the
process's threads (input, recorded, pools) and other processes' (machine_load's other cores).  Per step

    waited = W_rec ÷ window × compute phase × X ÷ (X + K + O)

W_rec the recorded compute threads' run-queue time over the record's window, X the input threads' (and a
generator's loader's) CPU, K the process's other threads' CPU, O other processes' CPU, all over the same window.
X is the CPU as it ran, the profiler's cost on the input threads in it (contention.py's rule takes that cost out):
the waits were measured under the profiler too, behind whatever held the cores then.  The stolen
time of the step is the larger of this and contention.py's rule — the two read the same loss from two sides (the
pools' progress, the recorded threads' waits), and each misses what the other sees — and this part at most the
input's CPU in the step's compute phase (a millisecond of the step for each of its milliseconds, the bound
undecided.py's "input CPU beside the compute" takes).

Measured (BENCHMARKS.md issue 29, "the recorded threads' wait for a core"), on fresh captures against the code before:
that MLP −2.7, −2.6, +0.5 pp from truths of ~20 % (before −16.2, −15.8, −15.2); the own-fit bench's 18 captures
3.2 pp (5.7); a per-example parse in front of a small model +5.5 / +2.9 pp (−6.5 / −6.8).  Without run-queue
figures (psutil's fallback records none) the rule is contention.py's alone.

The Python input's CPU that contention.py counts whole (the interpreter lock) is at most a ceiling the record also
gives: the compute's own CPU.  The process's threads other than the input's ran Y cores' worth of CPU over the
window (compute_cores: the training thread, TF's pools, oneDNN's); without the input they would still run it, on C
cores at best in Y ÷ C of the phase, so the input took at most 1 − Y ÷ C of the phase (ceiling).  Measured (issue
29): a Keras fit behind `Dataset.from_generator` doing 7.2 ms of Python a 9.9 ms step beside 1.08 compute cores on 2
read 73 % against a truth of 42–48 %; capped, 50 %.  Only that part: Y is a bound's only where no input work runs
on the compute's threads, and a tf.data map's ops can (its function on TF's inter-op pool, `tf_Compute`): on the
stall program (a CPU-heavy parallel map before a custom loop) a ceiling on all of the input's CPU read 27 / 32 %
against truths of 40 / 38 % (37 / 36 % without it).
"""

from __future__ import annotations

# contention.py's cost of a core-millisecond of input CPU beside a compute as wide as the cores: FLOOR / C + LOCKSTEP
# × p (per_core_ms).  Fitted (weighted least squares of the cost each capture's truth needed) on 51 captures of six
# own-fit shapes (the guide's map before 256- and 512-wide MLPs, two per-example parses, two keras-hub tokenizers) on
# 2 cores; scored on 15 fresh captures of three shapes held out (BENCHMARKS.md, "a convolution's parallel regions").
FLOOR, LOCKSTEP = 0.83, 0.28


def input_share_of_wait(record: dict | None, traced: set[int], inputs: set[int], children_ms: float = 0.0
                        ) -> tuple[float, float]:
    """(the recorded compute threads' run-queue wait per unit of the record's window (ms ÷ ms), the input's share
    of the CPU that ran in that window) from a thread-CPU record; (0, 0) without one or without run-queue figures.

    `traced`: the line ids of the threads the capture records (the training thread counts by its tid, the
    process id); `inputs`: the line ids of input threads (a generator's loader threads with them);
    `children_ms`: a generator's loader processes' CPU over the window, input the rows do not hold."""
    rows = (record or {}).get("threads") or ()
    seconds = float((record or {}).get("seconds") or 0.0)
    if not rows or seconds <= 0:
        return 0.0, 0.0
    pid = record.get("pid") or min((r.get("tid") or 0 for r in rows), default=None)
    waited, x = 0.0, children_ms
    ran = children_ms + float(((record.get("machine") or {}).get("other_cores") or 0.0)) * seconds * 1e3
    for r in rows:
        lid, cpu = r.get("line_id"), float(r.get("cpu_ms") or 0.0)
        if str(r.get("name", "")).startswith("tfbertperf"):  # our own sampler and snapshots
            continue
        ran += cpu
        if lid is not None and lid in inputs:
            x += cpu
        elif (lid is not None and lid in traced) or r.get("tid") == pid:
            waited += float(r.get("runqueue_ms") or 0.0)
    if waited <= 0 or x <= 0:
        return 0.0, 0.0
    return waited / (seconds * 1e3), x / ran


def per_core_ms(pool: float, cores: int) -> float:
    """The step's milliseconds a millisecond of input CPU costs beside a compute as wide as the `cores`, a share
    `pool` of its CPU in parallel regions (contention.py's p): FLOOR ÷ C — the share of a core the input takes from
    a compute that keeps the cores busy — and LOCKSTEP × p, a parallel region held up by its preempted part
    (contention.py: the costs the truths needed, 0.48–0.85 for p 0.08–0.93, followed p only in part)."""
    return FLOOR / max(1, cores) + LOCKSTEP * pool


def larger(rule_us: float, cpu_in_us: float, waits_us: float) -> tuple[float, float]:
    """(a step's stolen µs, the part of it the waits added to the rule): the larger of the fair-share rule's reading
    and the recorded threads' waits' input share, the latter at most the input's CPU in the phase (module
    docstring)."""
    stolen = max(rule_us, min(cpu_in_us, waits_us))
    return stolen, stolen - rule_us


def with_python(counted_us: float, python_us: float, most_us: float) -> tuple[float, float]:
    """(a step's stolen µs with its Python input's CPU counted whole, at most `most_us` — the rest counted as it
    was —, the ceiling where the step had Python input, else inf) (module docstring)."""
    if python_us <= 0:
        return counted_us, float("inf")
    return max(counted_us, min(counted_us + python_us, most_us)), most_us


def compute_cores(record: dict | None, inputs: set[int]) -> float | None:
    """The CPU the process's threads ran beside the input's (line ids `inputs`; this package's own threads and rows
    the capture has no line for left out), in cores over the record's window; None without a record."""
    rows, seconds = (record or {}).get("threads") or (), float((record or {}).get("seconds") or 0.0)
    if not rows or seconds <= 0:
        return None
    return sum(float(r.get("cpu_ms") or 0.0) for r in rows if r.get("line_id") is not None
               and r["line_id"] not in inputs and not str(r.get("name", "")).startswith("tfbertperf")) / (seconds * 1e3)


def ceiling(phase_us: float, compute_cores: float | None, cores: int) -> float:
    """The most of a compute phase of `phase_us` the input can have taken from it: without the input the compute
    still runs its own CPU, `compute_cores` of the phase's wall time, and that on `cores` cores at best takes
    compute_cores ÷ cores of the phase (module docstring); the whole phase without a record."""
    return float("inf") if compute_cores is None else phase_us * max(0.0, 1.0 - compute_cores / max(1, cores))
