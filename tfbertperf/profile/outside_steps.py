"""A capture window that crosses an epoch's end: fit's validation and the epoch-end callbacks kept out of the
window's thread-CPU record, and marked in the capture.

`ProfileCallback(profile_steps="120:140")` on a fit of 128 batches an epoch captures the end of epoch 1: Keras runs
`evaluate` on `validation_data` and every callback's `on_epoch_end` between batch 127 and batch 128.  The thread-CPU
record (profile/threadcpu.py) spans the window, so the validation's CPU counted as the training's: on a Keras MLP
behind `from_tensor_slices → map → batch → prefetch` with 32 validation batches the window lasted 0.46 s for 22
steps of 4.7 ms, the training thread's 341 ms of validation made the compute read as running on the recorded threads
(profile/contention.py's pool share p 0.2), and the capture alone read the input 4.7 % against a measured what-if
of 15 % (truth 13 %); a window inside the epoch read 12.5 %.

The same goes for the capture's first and last step: xprof leaves them out of its step table (and so does analyze,
profile/marker_steps.py), so the callbacks capture one step more on each side (train/probe.py traced_steps) — and
their CPU counted in the record: a window "0:10" holds step 0, `train_function`'s tracing (674 ms on the training
thread against 6 ms steps), and that fit read the input 2.5–3.3 % where the window 60:80 read 12.5 %.

So while the window is open the callback (both backends' ProfileCallback; on JAX through StepTimer.outside) keeps
the time between epochs out: from the end of an epoch's last batch (`last_of_epoch`; else `on_test_begin` or
`on_epoch_end`, whichever comes first) to the next `on_train_batch_begin`, and (`edges`: TensorFlow's callback and
StepTimer, not JAX's, whose host analysis reads the record against every marker) over the first and last step, it
  - takes a thread-CPU snapshot at each end; the record is the sum of the pieces between (`merge`): each thread's
    CPU and run-queue time, the children's, the exited threads', the seconds, the machine's load weighted by
    seconds, and "outside_steps": {"seconds", "spans", "edges"} (additive: a record without it read as before);
  - between epochs, opens a trace event named EVENT on the training thread over the same span (TensorBoard's trace
    viewer shows it); the edge steps get none (an event around a step marker would nest the step under it, and
    the training thread's analysis reads markers at its top: a JAX loop's memory-fed steps read 14 % input so),
    analyze finds them as xprof does, the first and last marker.  Both are taken out of the time over which
    analyze spreads a thread's measured CPU (`spans`).
The readings run where no analyzed step or gap holds them (inside the marked span, inside the dropped last step's
marker), and the record's line ids are read after the profiler stops (`end`, then `record`).
"""

from __future__ import annotations

from tfbertperf.profile import intervals as iv
from tfbertperf.profile import threadcpu

EVENT = "tfbertperf outside training steps (validation, epoch end)"
FIRST, LAST = "first", "last"  # the record's "edges": the capture's first / last step left out of it


class Window:
    """The thread-CPU record of a capture window less its spans outside the analyzed steps (module docstring)."""

    def __init__(self, start: dict, annotate, edges: bool = True) -> None:
        """`start`: threadcpu.snapshot(loaders=True) at the capture's start, before its first step; `annotate`: name →
        the profiler's trace context manager (tf.profiler.experimental.Trace, jax.profiler.TraceAnnotation).  The
        first step is out already (xprof leaves it out of its step table): the callers `close()` at the next.
        `edges` False: the capture's first and last step stay in (JAX's StepTimer: see jax_steps.py)."""
        self.pieces: list[dict] = []
        self.outside_s, self.spans, self.edges = 0.0, 0, [FIRST] if edges else []
        self._a, self._gap, self._trace, self._annotate = start, start["t"] if edges else None, None, annotate

    def open(self, last_step: bool = False) -> None:
        """The analyzed steps stop here: validation or an epoch's end (marked in the capture with EVENT), or with
        `last_step` the capture's last step (not marked: the capture's own edge, which analyze finds by itself)."""
        if self._gap is None:
            if last_step:
                self.edges.append(LAST)
            else:  # a span between steps: an event there encloses no step marker; the reading inside it (a JAX
                self._trace = self._annotate(EVENT)  # loop's Python frames of /proc reads are no loader's)
                self._trace.__enter__()
            b = threadcpu.snapshot(loaders=True)
            self.pieces.append(threadcpu.window_record(self._a, b))  # its threads' line ids read while they live
            self._gap = b["t"]

    def close(self) -> None:
        """The analyzed steps go on: a new piece starts."""
        if self._gap is not None:
            self._a = threadcpu.snapshot(loaders=True)
            self._end(self._a["t"])

    def _end(self, t: float) -> None:
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._trace, self.spans = None, self.spans + 1
        self.outside_s, self._gap = self.outside_s + t - self._gap, None

    def end(self, stop: dict) -> None:
        """The window ends at the snapshot `stop`, taken before the profiler stops (an open EVENT closed with it)."""
        self._stop = None if self._gap is not None else stop
        if self._gap is not None:  # the window ends outside the steps (its last step, the last validation)
            self._end(stop["t"])

    def record(self) -> dict:
        """The window's record, built after the profiler stopped (reading the threads' line ids takes Python and
        /proc reads the capture would otherwise hold: a Keras-JAX fit read a lock wait from them under load)."""
        last = [threadcpu.window_record(self._a, self._stop)] if self._stop is not None else []
        return merge(self.pieces + last, self.outside_s, self.spans, self.edges)


def last_of_epoch(params: dict, batch: int) -> bool:
    """Whether Keras' `on_train_batch_end(batch)` ends its epoch: the time to the next batch is fit's validation and
    the epoch-end callbacks (Keras builds the validation's iterator before `on_test_begin`: 75 ms on JAX, 35 ms on
    TensorFlow at a first epoch's end).  Unknown where the epoch's steps are (a dataset of unknown length)."""
    steps = (params or {}).get("steps")
    return bool(steps) and batch + 1 >= steps


def merge(pieces: list[dict], outside_s: float = 0.0, spans: int = 0, edges: list | None = None) -> dict:
    """One window record (threadcpu.window_record's schema) summing `pieces`, with "outside_steps" {"seconds",
    "spans" (EVENTs), "edges" (the capture's first / last step left out)} where anything was left out."""
    if len(pieces) == 1 and not spans and not edges:
        return pieces[0]
    out = dict(pieces[-1])
    threads: dict[tuple, dict] = {}
    children: dict[object, dict] = {}
    for p in pieces:
        for r in p["threads"]:
            row = threads.setdefault((r["tid"], r.get("line_id")), {**r, "cpu_ms": 0.0, "runqueue_ms": 0.0})
            row["cpu_ms"] += r["cpu_ms"]
            row["runqueue_ms"] += r["runqueue_ms"]
        for c in p.get("children") or ():
            row = children.setdefault(c["pid"], {**c, "cpu_ms": 0.0, "runqueue_ms": 0.0})
            row["cpu_ms"] += c["cpu_ms"]
            row["runqueue_ms"] += c.get("runqueue_ms", 0.0)
    seconds = sum(p["seconds"] for p in pieces)
    out["threads"] = sorted(({**r, "cpu_ms": round(r["cpu_ms"], 3), "runqueue_ms": round(r["runqueue_ms"], 3)}
                             for r in threads.values()), key=lambda r: -r["cpu_ms"])
    if "children" in out:
        out["children"] = [{**c, "cpu_ms": round(c["cpu_ms"], 3), "runqueue_ms": round(c["runqueue_ms"], 3)}
                           for c in children.values()]
    if all("exited" in p for p in pieces):
        out["exited"] = {"cpu_ms": round(sum(p["exited"]["cpu_ms"] for p in pieces), 3),
                         "python": sorted({n for p in pieces for n in p["exited"]["python"]})}
    out.pop("machine", None)
    if seconds > 0 and all("machine" in p for p in pieces):  # cores' worth over the pieces' time together
        out["machine"] = {k: round(sum(p["machine"][k] * p["seconds"] for p in pieces) / seconds, 3)
                          for k in ("busy_cores", "other_cores", "steal_cores")} | {"seconds": round(seconds, 3)}
        if all("resolution_cores" in p["machine"] for p in pieces):  # each piece's ticks: their errors add up
            out["machine"]["resolution_cores"] = round(sum(p["machine"]["resolution_cores"] * p["seconds"]
                                                           for p in pieces) / seconds, 3)
    out["seconds"] = round(seconds, 6)
    if spans or edges:
        out["outside_steps"] = {"seconds": round(outside_s, 6), "spans": spans, "edges": list(edges or [])}
    return out


def reading(record: dict | None) -> dict:
    """The attribution's key (SCHEMA.md: window_outside_steps_s): the seconds between the window's steps its record
    left out at validation and epoch ends (not its edge steps); {} where none."""
    out = (record or {}).get("outside_steps") or {}
    return {"window_outside_steps_s": float(out["seconds"])} if out.get("spans") else {}


def note(att: dict) -> list[str]:
    """The console's line for a window that held fit's validation or an epoch's end, else []."""
    s = att.get("window_outside_steps_s")
    return [f"the window held fit's validation or an epoch's end ({s:.2f} s between its steps: left out of the "
            f"thread-CPU record, marked in the trace viewer) — the steps next to an epoch's end are not the fit's "
            f"steady ones: a window inside an epoch reads those"] if s else []


def spans(events, record: dict | None = None, steps=(), span=(0.0, 0.0)):
    """The spans a window `record` left out, merged (profile/intervals.py; µs): the EVENT spans among a Chrome
    trace's complete events, and where the record says so the capture's first step (from the capture's `span`
    start to the second step marker's start) and last (from the last marker's start on); `steps`: the step markers
    as (…, start, end) rows sorted by start."""
    out = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events if e.get("name") == EVENT]
    edges = ((record or {}).get("outside_steps") or {}).get("edges") or ()
    if FIRST in edges and len(steps) > 1:
        out.append((span[0], steps[1][-2]))
    if LAST in edges and len(steps) > 1:
        out.append((steps[-1][-2], span[1]))
    return iv.union(out)
