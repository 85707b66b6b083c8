"""The hint ProfileCallback gives when its measured what-if is not precise enough to act on: a 95 % interval wider
than WIDE_CI95 (more probe steps, or a longer fit, narrow it), or a figure from a single block (no interval)."""

from __future__ import annotations


WIDE_CI95 = 0.05
"""A measured input cost whose 95 % interval is wider than ±5 pp gets a hint to raise probe_steps."""


def precision_hint(what_if: dict, probe_steps: int, auto_target: float | None = None, who: str = "ProfileCallback",
                   run: str = "fit") -> str | None:
    """The hint for a what-if whose interval is wider than WIDE_CI95, else None: the interval narrows with the
    square root of the probe's blocks, so 4× the probe steps (in 4× the blocks) halve it.  With the auto probe
    (`auto_target`: the interval it aimed at) the run had no room for more blocks: a longer fit gives them.  `who`
    and `run`: the helper and what it measures (StepTimer: "run")."""
    ci = what_if.get("input_cost_ci95")
    if ci is None:  # one block: a figure with no way to say how far it can be trusted (a 3-step fit: 1 real step)
        return (f"tfbertperf {who}: the measured input cost {100 * what_if['input_cost_fraction']:.1f} % "
                f"rests on one probe block, which gives no interval; a {run} with room for two or more gives one")
    if ci <= WIDE_CI95 or (auto_target is not None and ci <= auto_target):
        return None
    if auto_target is not None:
        from tfbertperf.profile.undecided import INPUT_BOUND_THRESHOLD, as_long, longer_by

        def times(half_width: float) -> str:
            return as_long(longer_by(ci, half_width))

        icf = what_if["input_cost_fraction"]
        hint = (f"tfbertperf {who}: the measured input cost {100 * icf:.1f} % is ± {100 * ci:.1f} pp (95 %, "
                f"from the spread of its {what_if.get('probe_blocks')} probe blocks: this machine's speed moves from "
                f"block to block); the {run} had room for no more blocks — a {run} {times(auto_target)} as long would let "
                f"the probe reach ±{100 * auto_target:.1f} pp")
        if abs(icf - INPUT_BOUND_THRESHOLD) < ci:  # the verdict is undecided: say what would decide it (analyze's)
            hint += (f", and one {times(abs(icf - INPUT_BOUND_THRESHOLD))} as long would decide whether the input "
                     f"costs more than {INPUT_BOUND_THRESHOLD:.0%}")
        return hint
    return (f"tfbertperf {who}: the measured input cost {100 * what_if['input_cost_fraction']:.1f} % is "
            f"± {100 * ci:.1f} pp (95 %, from the spread of its probe blocks: this machine's speed moves from block to "
            f"block); probe_steps={4 * probe_steps} and probe_blocks 4× as many (in a run of at least twice as many "
            f"steps) would halve that")
