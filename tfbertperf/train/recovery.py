"""When a run-ahead pipeline is back to its own pace after a probe block: observed in the real steps, not assumed.

While a what-if block runs (its settle and timed steps, tens of ms) nothing takes the real pipeline's batches, and a
pipeline with buffers (prefetch, a parallel map, read-ahead) fills them.  The real steps after the block are then
fed from those buffers, faster than the pipeline makes batches, until they are drained — and the probe must not
take those steps for the fit's own.  `recovery_steps` (train/probe.py) left out as many steps as the block timed
(5 in the auto probe).  A Keras fit on JAX fed by tf.data (tests/programs/keras_jax_tfdata_by_hand.py: prefetch 2
after a serial map, ~6 batches held, one made in ~5.5 ms against a 1.3 ms step) ran its real steps at 2.3-3 ms for
~15 steps after each block, so with the auto probe's blocks 15 steps apart the fit never ran at its own pace
between them: every step was a drained one, T read 2.4-3.7 ms against the 6.2 ms of a fit without the probe, and
the probe read 33-45 % input where the fit would gain 79 % (BENCHMARKS.md, checked by hand).

So the recovery is read from the steps themselves: after each block (and after the capture, which stops the loop
while it is written), the real steps are left out from the block on, at least as many as it timed, until a run of
RECOVERY_RUN steps is back to within RECOVERY_TOL of the reference — the median of the slower half of the last
REFERENCE_STEPS clean steps before the block (after warm-up, outside the capture and every earlier recovery), or
the same figure of the EARLIER_STEPS clean steps before those where it is lower (`_reference`).  A step that is not back
within RECOVERY_TOL stays out; a recovery is cut where the next block or the capture starts.  And the next block
waits (`ready`) until the last one's recovery has ended and BRACKET_MIN clean steps have run after it, so that
each block is compared with steps at the pipeline's own pace on both sides (profile/stepfile.py's pairing).

A drain ends: the bank was filled in one block's time (the longest seen here ran 25 steps).  Steps that stay "not
back" for LEVEL_STEPS in a row keep a pace of their own — the reference was a slow stretch (a neighbour's burst
between warm-up and the first block, with no steps before it to judge it by) — and count as the fit's: without
that, six fits of six with such a burst ran one of their two or three blocks after the last step and read 8–46 pp
high (BENCHMARKS.md, "a neighbour's burst").

What it cannot see: a pipeline only slightly behind (an input cost under RECOVERY_TOL) drains its buffers over many
steps at a pace within the tolerance of its own; then the steps fed from them count, and T reads low by at most
that input cost times the share of such steps.  Such counted steps also become clean steps; the next reference
moves down with them only where they are over half of its steps (`_reference`).  On Keras' TensorFlow backend the
steps fed from a bank run at 0.7-0.8 of the fit's pace, close to RECOVERY_TOL, and tf.data's own autotuned prefetch
doubles its buffer with each block: the by-hand program (tests/programs/keras_jax_tfdata_by_hand.py
--backend=tensorflow) read 19-25 % against 49-53 % with the median reference, 33 % against 47 % with the slower
half — so under such a prefetch ProfileCallback runs its blocks after the last step, where no recovery is needed
(profile/autotuned_prefetch.py; docs/own-training.md).  And the steps before the first block are the first reference:
a deep prefetch that filled while the first step compiled feeds them all where the warm-up is shorter than its
drain.
"""

from __future__ import annotations

import statistics

RECOVERY_TOL = 0.2  # a step back to its own pace: within 20 % of the reference (a 3-step mean of steady steps on
# the 2-core VM varies by ±17 %; steps fed from buffers ran at 0.4-0.5 of the reference)
RECOVERY_RUN = 3  # … judged on the mean of this many steps in a row
REFERENCE_STEPS = 20  # the reference: from at most this many clean steps before the block (`_reference`)
LEVEL_STEPS = 40  # … steps not back for this long keep a pace of their own: no recovery (`observed`)
EARLIER_STEPS = 80  # … and no higher than the same figure of as many as this before those (`_reference`)
BRACKET_MIN = 5  # real steps at least on each side of a block that it is compared with (train/blocks.py), and the
# clean steps a block waits for after the last recovery


def _events(ran, traced, total: int):
    """[(first step, floor steps)] in order: each in-loop block (its step and as many more as it timed), and the
    end of the capture (the steps after it, none at least)."""
    ev = [(int(p), int(n)) for p, n in ran if p < total]
    if traced and traced[1] < total:
        ev.append((int(traced[1]), 0))
    return sorted(ev)


def _back(step_ms, start: int, stop: int, ref: float | None) -> int:
    """The first step from `start` (< stop) whose run of RECOVERY_RUN steps before `stop` is back within
    RECOVERY_TOL of `ref`; `stop` if none is."""
    if ref is None:
        return start
    for j in range(start, stop):
        run = step_ms[j:min(j + RECOVERY_RUN, stop)]
        if statistics.fmean(run) >= (1 - RECOVERY_TOL) * ref:
            return j
    return stop


def _last_clean(p: int, warmup: int, lo: int, hi: int, out: set[int], most: int = REFERENCE_STEPS) -> list[int]:
    """The last `most` clean steps before step p, newest first, found backwards (a check at every postponed step of
    a long fit must not scan it from the start: in the TensorFlow callback it runs inside the timed step)."""
    clean: list[int] = []
    for i in range(p - 1, warmup - 1, -1):
        if len(clean) == most:
            break
        if not lo <= i < hi and i not in out:
            clean.append(i)
    return clean


def _reference(clean_ms: list[float], earlier_ms: list[float] = ()) -> float:
    """The fit's own pace before a block: the median of the slower half of its clean steps (their 75th percentile).

    Not the median of them all: a reference that steps fed from a bank count in drifts down to the bank's pace, and
    then every drained step is "back".  That happened wherever the banks outlast the gap between blocks — the steps
    between warm-up and the first block fed from what the pipeline banked while the probe grabbed its batch, and
    tf.data's autotuned prefetch (profile/autotuned_prefetch.py) growing at each block: on a Keras fit on the
    TensorFlow backend whose pipeline ends in `.repeat()` (tf.data injects such a prefetch after it) the median
    read the input cost 16–32 pp low against a plain fit beside it in 11 pairs of 11, the slower half −5.1…+7.9 pp
    in 9 of 15 and 15–29 pp low in 6 (tools/bench/bench_tf_fit_pause.py --experiment options --references
    median,upper; BENCHMARKS.md, "the recovery's reference").  With up to half the clean steps fed from a bank
    the slower half is still the pipeline's pace; on a fit with nothing to drain it sits a little above the median
    (steady steps are right-skewed), inside RECOVERY_TOL: own Keras fits of five shapes and `run`'s own probe read
    as before.

    And no higher than the same figure of the clean steps before those (`earlier_ms`, at least 10 of them): a slow
    stretch of over a quarter of the recent steps (a neighbour's burst on a shared machine) is otherwise the slower
    half itself, and every later step at the fit's own pace reads as one still fed from a bank.  A Keras fit of the
    tf.data guide's map ran 13 steps at 5.5–10.5 ms among ~3.7 ms ones just before its capture: against an 8 ms
    reference all 58 steps after the capture stayed out, the last block went after the loop, paired with the slow
    stretch, and its what-if read 37 % ± 41 against a truth of 12 % (issue 29; BENCHMARKS.md, "a neighbour's
    burst").  A drain runs below both figures; a pipeline that sped up is judged against the recent steps."""
    slower_half = lambda xs: statistics.median(sorted(xs)[len(xs) // 2:])  # noqa: E731
    ref = slower_half(clean_ms)
    return min(ref, slower_half(earlier_ms)) if len(earlier_ms) >= REFERENCE_STEPS // 2 else ref


def observed(step_ms, ran, warmup: int, traced, total: int, final: bool = True) -> tuple[list[int], int | None]:
    """(the recovery steps of the events so far, where the last one's recovery ended or None while it is still
    under way): module docstring.  `step_ms` the steps timed so far; `ran` the blocks [(before_step, timed)];
    `traced` the capture's (start, stop) or None; `total` the run's steps; `final`: no more steps will come (a
    recovery still under way at the last step ends there)."""
    lo, hi = traced if traced else (total, total)
    now = len(step_ms)
    ev = [(p, n) for p, n in _events(ran, traced, total) if p <= now]
    out: set[int] = set()
    end: int | None = warmup
    for k, (p, n) in enumerate(ev):
        nxt = min([q for q, _ in ev[k + 1:]] + [total] + ([lo] if p < lo else []))
        clean = _last_clean(p, warmup, lo, hi, out, REFERENCE_STEPS + EARLIER_STEPS)
        ref = _reference([step_ms[i] for i in clean[:REFERENCE_STEPS]], [step_ms[i] for i in clean[REFERENCE_STEPS:]]) \
            if len(clean) >= RECOVERY_RUN else None
        start = min(p + n, nxt)
        stop = min(nxt, now)
        end = _back(step_ms, start, stop, ref)
        if end - start >= LEVEL_STEPS:  # not a drain: a pace the steps keep (a slow stretch was the reference)
            end = start
        if not final and stop < nxt and end > stop - RECOVERY_RUN:  # not back yet, or judged on too few steps
            out.update(range(p, stop))
            return sorted(out), None
        out.update(range(p, end))
    return sorted(i for i in out if i < now), end


def ready(step_ms, ran, warmup: int, traced, total: int) -> bool:
    """Whether a block may run before the next step: the last recovery has ended and BRACKET_MIN clean steps
    (outside the capture) have run since."""
    out, end = observed(step_ms, ran, warmup, traced, total, final=False)
    if end is None:
        return False
    lo, hi = traced if traced else (total, total)
    skip = set(out)
    return sum(1 for i in range(end, len(step_ms)) if not lo <= i < hi and i not in skip) >= BRACKET_MIN


def postpone(blocks_at: dict, step: int, total: int, traced) -> int | None:
    """Move the block planned before `step` to the next step it may run at (not within twice its length before
    the capture nor inside it: train/probe.py probe_plan) — after the loop where no step is left or another block
    is planned there (its timed steps join a block there: a short fit keeps its probe); returns where it went."""
    n = blocks_at.pop(step)
    j = step + 1
    if traced and traced[0] - 2 * n < j <= traced[1]:
        j = traced[1] + 1
    if j >= total or j in blocks_at:
        j = total
    blocks_at[j] = blocks_at.get(j, 0) + n
    return j


SETTLE_TOL = 0.15  # a block's untimed steps go on while their pace is over 15 % slower than the earlier blocks'


def settled_floor(probe_ms: list[float], sizes: list[int]) -> float | None:
    """The pace of the compute-only step once nothing refills: the lowest median of the blocks so far (`sizes`
    their timed steps, in order, accounting for `probe_ms`); None before the first block."""
    out, k = [], 0
    for n in sizes:
        if probe_ms[k:k + n]:
            out.append(statistics.median(probe_ms[k:k + n]))
        k += n
    return min(out) if out else None


def still_refilling(untimed_ms: list[float], floor_ms: float | None) -> bool:
    """Whether a block's last RECOVERY_RUN untimed steps (or all, if fewer) ran over SETTLE_TOL slower than
    `floor_ms`: the pipeline is still refilling its buffers on the cores they want (after a long drain; the
    settle of 10 real steps' time was over while it refilled, and those blocks timed 1.8-2.6 ms steps where the
    first ones, before any drain, timed 1.25-1.30 — the truth's 1.3)."""
    if floor_ms is None or not untimed_ms:
        return False
    return statistics.fmean(untimed_ms[-RECOVERY_RUN:]) > (1 + SETTLE_TOL) * floor_ms
