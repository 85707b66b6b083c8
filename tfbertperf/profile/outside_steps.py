"""A capture window that crosses an epoch's end: fit's validation and the epoch-end callbacks kept out of the
window's thread-CPU record, and marked in the capture.

`ProfileCallback(profile_steps="120:140")` on a fit of 128 batches an epoch captures the end of epoch 1: Keras runs
`evaluate` on `validation_data` and every callback's `on_epoch_end` between batch 127 and batch 128.  The thread-CPU
record (profile/threadcpu.py) spans the window, so the validation's CPU counted as the training's: on a Keras MLP
behind `from_tensor_slices → map → batch → prefetch` with 32 validation batches the window lasted 0.46 s for 22
steps of 4.7 ms, the training thread's 341 ms of validation made the compute read as running on the recorded threads
(profile/contention.py's pool share p 0.2), and the capture alone read the input 4.7 % against a measured what-if
of 15 % (truth 13 %); a window inside the epoch read 12.5 %.

So while the window is open the callback (both backends' ProfileCallback; on JAX through StepTimer.outside) keeps
the time between epochs out: from the end of an epoch's last batch (`last_of_epoch`; else `on_test_begin` or
`on_epoch_end`, whichever comes first) to the next `on_train_batch_begin`, it
  - takes a thread-CPU snapshot at each end; the record is the sum of the pieces between (`merge`): each thread's
    CPU and run-queue time, the children's, the exited threads', the seconds, the machine's load weighted by
    seconds, and "outside_steps": {"seconds", "spans"} (additive: a record without it read as before);
  - opens a trace event named EVENT on the training thread over the same span (TensorBoard's trace viewer shows
    it), which analyze takes out of the time over which it spreads a thread's measured CPU (`spans`).
"""

from __future__ import annotations

from tfbertperf.profile import intervals as iv
from tfbertperf.profile import threadcpu

EVENT = "tfbertperf outside training steps (validation, epoch end)"


class Window:
    """The thread-CPU record of a capture window less its spans outside the training steps (module docstring)."""

    def __init__(self, start: dict, annotate) -> None:
        """`start`: threadcpu.snapshot(loaders=True) at the capture's start; `annotate`: name → the profiler's trace
        context manager (tf.profiler.experimental.Trace, jax.profiler.TraceAnnotation)."""
        self.pieces: list[dict] = []
        self.outside_s, self.spans = 0.0, 0
        self._a, self._gap, self._trace, self._annotate = start, None, None, annotate

    def open(self) -> None:
        """The training steps stop here (validation, an epoch's end): close the piece since the last step."""
        if self._trace is None:
            b = threadcpu.snapshot(loaders=True)
            self.pieces.append(threadcpu.window_record(self._a, b))  # its threads' line ids read while they live
            self._gap, self._trace = b["t"], self._annotate(EVENT)
            self._trace.__enter__()

    def close(self) -> None:
        """The training steps go on: a new piece starts."""
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._a, self._trace = threadcpu.snapshot(loaders=True), None
            self.outside_s, self.spans = self.outside_s + self._a["t"] - self._gap, self.spans + 1

    def record(self, stop: dict) -> dict:
        """The window's record up to the snapshot `stop` (taken before the profiler stops)."""
        if self._trace is not None:  # the window ends outside the steps (after the last epoch's validation)
            self._trace.__exit__(None, None, None)
            self._trace = None
            self.outside_s, self.spans = self.outside_s + stop["t"] - self._gap, self.spans + 1
        else:
            self.pieces.append(threadcpu.window_record(self._a, stop))
        return merge(self.pieces, self.outside_s, self.spans)


def last_of_epoch(params: dict, batch: int) -> bool:
    """Whether Keras' `on_train_batch_end(batch)` ends its epoch: the time to the next batch is fit's validation and
    the epoch-end callbacks (Keras builds the validation's iterator before `on_test_begin`: 75 ms on JAX, 35 ms on
    TensorFlow at a first epoch's end).  Unknown where the epoch's steps are (a dataset of unknown length)."""
    steps = (params or {}).get("steps")
    return bool(steps) and batch + 1 >= steps


def merge(pieces: list[dict], outside_s: float = 0.0, spans: int = 0) -> dict:
    """One window record (threadcpu.window_record's schema) summing `pieces`, with "outside_steps" where `spans`."""
    if len(pieces) == 1 and not spans:
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
    out["seconds"] = round(seconds, 6)
    if spans:
        out["outside_steps"] = {"seconds": round(outside_s, 6), "spans": spans}
    return out


def spans(events):
    """The EVENT spans among a Chrome trace's complete events, merged (profile/intervals.py; µs)."""
    return iv.union([(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
                     if e.get("name") == EVENT])
