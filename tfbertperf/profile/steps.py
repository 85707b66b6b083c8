"""Step boundaries in wall time, from a `Trace` (profile/trace.py): what a step is on an accelerator.

With asynchronous dispatch the host's step marker closes long before the device finishes the work it issued,
so neither the marker's own span nor the device's busy time is the step.  Definitions:
  - from host markers (TF `Trace(name, step_num=i, _r=1)`, Keras ProfileCallback, JAX `StepTraceAnnotation`):
    step i runs from its marker's start to the next step's marker start; the last step runs to its marker's end
    or to the end of the last device event that started after its marker did, whichever is later.  The markers
    of the thread that holds the most of them are used (the training loop's thread); a step number marked on
    nested events counts once (the outermost).  A device event launched before its step's marker (a marker
    placed after the dispatch) counts in the step before: the trace does not say which marker launched it.
  - without markers, from XLA module launches: the host's `…Execute (<module>)` events of the module launched
    most often (at least twice); step i runs from launch i to launch i+1 (the last as above).
The result names which was used (`source`), so the report can say it.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from tfbertperf.profile.trace import Trace

_LAUNCH_RE = re.compile(r"Execute \(([\w.\-]+)\)$")
SOURCE_MARKERS = "host step markers"
SOURCE_LAUNCHES = "consecutive launches of XLA module {module}"


@dataclass(frozen=True)
class Step:
    label: str  # the step number from the marker, or the launch's ordinal
    start: int  # picoseconds, profile clock
    end: int

    @property
    def ps(self) -> int:
        return self.end - self.start


def _outermost(events) -> list:
    """Events not nested inside an earlier kept one (same thread, sorted by start)."""
    out = []
    for e in events:
        if out and e.start < out[-1].end and e.end <= out[-1].end:
            continue
        out.append(e)
    return out


def _device_end(trace: Trace, after: int) -> int:
    """End of the last device event (kernel or copy) that started at or after `after`; 0 when none."""
    ends = [int(d.busy[d.busy[:, 0] >= after, 1].max(initial=0)) for d in trace.devices]
    ends += [int(d.copies.end[d.copies.start >= after].max(initial=0)) for d in trace.devices]
    return max(ends, default=0)


def _chain(trace: Trace, starts: list[tuple[str, int, int]]) -> list[Step]:
    steps = []
    for i, (label, start, end) in enumerate(starts):
        stop = starts[i + 1][1] if i + 1 < len(starts) else max(end, _device_end(trace, start))
        if stop > start:
            steps.append(Step(label, start, stop))
    return steps


def step_intervals(trace: Trace) -> tuple[list[Step], str | None]:
    """(steps in time order, source) — source is SOURCE_MARKERS, SOURCE_LAUNCHES with the module's name, or
    None when the capture has neither markers nor a module launched twice (then steps is [])."""
    by_thread = defaultdict(list)
    for thread, ev in trace.markers():
        by_thread[id(thread)].append(ev)
    if by_thread:
        marks = _outermost(max(by_thread.values(), key=len))
        seen, starts = set(), []
        for m in marks:
            if m.step_num in seen:
                continue
            seen.add(m.step_num)
            starts.append((str(m.step_num), m.start, m.end))
        return _chain(trace, starts), SOURCE_MARKERS
    launches = defaultdict(list)
    for thread in trace.threads:
        for ev in _outermost([thread.event(i) for i in np.flatnonzero(thread.mask(_LAUNCH_RE)).tolist()]):
            launches[_LAUNCH_RE.search(ev.name).group(1)].append(ev)
    counts = Counter({k: len(v) for k, v in launches.items()})
    if not counts or counts.most_common(1)[0][1] < 2:
        return [], None
    module = counts.most_common(1)[0][0]
    evs = sorted(launches[module], key=lambda e: e.start)
    return (_chain(trace, [(str(i), e.start, e.end) for i, e in enumerate(evs)]),
            SOURCE_LAUNCHES.format(module=module))
