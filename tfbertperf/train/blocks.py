"""The what-if's blocks paired with the real steps around them, and the 95 % interval that pairing gives
(profile/stepfile.py's definitions: input_cost_fraction, input_cost_ci95).  In train/ so that `run`'s own loop can
stop its auto probe on it (profile.probe_steps=auto) as ProfileCallback does; the step file reads it from here."""

from __future__ import annotations

import math
import statistics

from tfbertperf.train import recovery
from tfbertperf.train.recovery import BRACKET_MIN  # real steps at least on each side of a block it is compared with
from tfbertperf.train.probe import AUTO_CI95, AUTO_MIN_BLOCKS, uninterrupted  # noqa: F401 (AUTO_*: callers)

# t(0.975, k) for k = 1..30 degrees of freedom; 1.96 beyond
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def mean_ci95(values: list[float]) -> float | None:
    """Half-width of the 95 % interval of the mean of `values` (Student's t); None with fewer than 2."""
    k = len(values)
    if k < 2:
        return None
    return (_T975[k - 2] if k - 1 <= len(_T975) else 1.96) * statistics.stdev(values) / math.sqrt(k)


def _ci95(T: list[float], Tc: list[float]) -> float | None:
    """Half-width of the 95 % interval of the input cost from the per-block differences (module docstring)."""
    if len(T) < 2 or len(T) != len(Tc):
        return None
    mean_t = statistics.fmean(T)
    return mean_ci95([a - b for a, b in zip(T, Tc)]) / mean_t if mean_t > 0 else None


def interval(steps: list[float], real: list[int], probe: list[float], blocks) -> float | None:
    """input_cost_ci95 (module docstring) for any loop's lists: `steps` every step's wall time, `real` the indices
    of those that count for T (run's steady steps: report/build.py), `probe` the probe's timed steps, `blocks`
    [[before_step, timed_steps], …]; None with fewer than 2 blocks or blocks that do not account for `probe`."""
    if not probe:
        return None
    T, Tc, _ = _blocks(steps, list(real), probe, [list(b) for b in blocks or ()], set(uninterrupted(probe)))
    return _ci95(T, Tc)


def _blocks(steps, unprofiled, probe, blocks, kept: set[int]) -> tuple[list[float], list[float], list[int]]:
    """Per what-if block: T over the unprofiled steps that bracket it, T_c over its timed steps that were not
    interrupted (`kept`), and that count of them (module docstring); ([], [], []) when the blocks do not account
    for the probe's steps.  Where K ≥ 2 blocks all ran after the loop (ProfileCallback under an autotuned
    prefetch: profile/autotuned_prefetch.py) no real step follows them: block k is paired with the k-th of K
    equal stretches of the unprofiled steps, in order, so that the interval holds the real steps' spread too."""
    at = [int(b[0]) for b in blocks if isinstance(b, list) and len(b) == 2]
    sizes = [int(b[1]) for b in blocks if isinstance(b, list) and len(b) == 2]
    if not at or sum(sizes) != len(probe):
        return [], [], []
    T, Tc, n_used, k = [], [], [], 0
    tail = len(at) >= 2 and min(at) >= len(steps)  # every block after the loop: K stretches of the real steps
    for b, (pos, n) in enumerate(zip(at, sizes)):
        m = max(n, BRACKET_MIN)
        near = unprofiled[b * len(unprofiled) // len(at):(b + 1) * len(unprofiled) // len(at)] if tail else \
            [i for i in unprofiled if i < pos][-m:] + [i for i in unprofiled if i >= pos][:m]
        mine = [probe[j] for j in range(k, k + n) if j in kept]
        if mine and near:
            T.append(statistics.fmean(steps[i] for i in near))
            Tc.append(statistics.fmean(mine))
            n_used.append(len(mine))
        k += n
    return T, Tc, n_used


def running_interval(step_ms: list[float], warmup: int, traced: tuple[int, int] | None, ran: list[tuple[int, int]],
                     probe_ms: list[float], runs_ahead: bool) -> float | None:
    """The interval of a run's blocks so far (`ran`, [(before_step, timed_steps)]), each against the steady steps
    timed so far around it: after warm-up, outside the capture (`traced`), and, when the pipeline runs ahead, not
    a block's recovery steps (report/build.py steady_steps, as the report pairs them at the end)."""
    out = set(recovery.observed(step_ms, ran, warmup, traced, len(step_ms))[0]) if runs_ahead else set()
    lo, hi = traced or (len(step_ms), len(step_ms))
    real = [i for i in range(warmup, len(step_ms)) if not lo <= i < hi and i not in out]
    return interval(step_ms, real, probe_ms, [list(b) for b in ran])


def auto_stop(step_ms, warmup: int, traced, ran, probe_ms, runs_ahead: bool, target: float) -> str | None:
    """Why an auto probe stops before its next block (`stop_reason`, as the callback's), or None to run it —
    checked before every block, one postponed past the loop's last step too."""
    if len(ran) < AUTO_MIN_BLOCKS:
        return None
    return stop_reason(len(ran), running_interval(step_ms, warmup, traced, ran, probe_ms, runs_ahead), target)


def stop_reason(blocks: int, ci: float | None, target: float) -> str | None:
    """Why the auto probe stops before its next block: its interval is `target` or narrower after at least
    AUTO_MIN_BLOCKS blocks (run's loop here, ProfileCallback and StepTimer by profile/probe_record.py); else None."""
    if blocks >= AUTO_MIN_BLOCKS and ci is not None and ci <= target:
        return f"after {blocks} blocks: the interval ±{100 * ci:.1f} pp ≤ ±{100 * target:.1f}"
    return None
