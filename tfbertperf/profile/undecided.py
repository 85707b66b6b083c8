"""An input-bound verdict the measurement cannot decide: the what-if's 95 % interval straddles the 20 % line.

The what-if probe measures the input cost as (T − T_c) / T with a 95 % interval from the spread of its blocks
(profile/stepfile.py input_cost_ci95).  The verdict compares the figure with INPUT_BOUND_THRESHOLD; where the
interval reaches across that line — 18 % ± 6 pp, 23 % ± 4 pp — the same program measured again may land on the
other side, so the verdict says both bottlenecks and that more probe steps decide between them, and the first
action is to measure longer (a run: more `profile.probe_steps`; a user's fit: a longer fit, where
ProfileCallback's auto probe has room for more blocks).  The bottleneck stays the figure's side of the line (the
report schema's field keeps its four values); `verdict.undecided` says that it is not settled:

  {"between": [bottleneck, the other side's], "input_cost_fraction": the figure the verdict compared,
   "ci95": its half-width, "threshold": 0.20, "probe_steps_to_decide": for a run, the probe steps that would
   narrow the interval to the figure's distance from the line (the interval narrows with the square root of the
   blocks: × (ci95 / distance)²), else None, "longer_by": that ratio}

Without a probe the verdict compares the capture's estimate (blocked wait + stolen CPU, of the captured or the
unprofiled step); its spread over the captured steps gives a 95 % interval too (input_cost_estimate_ci95,
profile/xprof_attribution.py).  Where that straddles the line the verdict is undecided the same way, with
"source": "estimate", and the first action is to measure the what-if: a longer capture narrows the spread but not
the estimate's own error (up to 7–8 pp a shape on own Keras fits, BENCHMARKS.md issue 29: a keras-hub tokenizer
whose truth was 22–27 % read 19.9 % twice, and was called compute-bound).

And without a thread-CPU record, a host JAX capture whose other Python threads ran Python for at least the line's
share of the step (attribution.input_loader_threads_unrecorded_ms_per_step: a loader ahead in a thread) cannot say
what that CPU took from the step: a verdict below the line is undecided, "source": "unrecorded loader threads",
and the first action records it (jax_steps.StepTimer).  A bare JAX loop's NumPy loader thread read 0.3–3.8 %
against truths of 25–29 % and was called compute-bound (BENCHMARKS.md issue 29, "fetches between its
StepTraceAnnotations").  Likewise where the loop spends a fifth of its step or more between its step markers in
work the capture cannot name (attribution.steps_gap_unexplained_ms, profile/step_gaps.py), "source": "gaps between
markers".

And where the capture's estimate sits below the line but the input threads' measured CPU in the compute phase
(attribution.input_cpu_ms_per_step) would put it on or above the line were each of its milliseconds a millisecond of
the step, "source": "input CPU beside the compute".  How much of that CPU the step loses is contention.py's rule (the
share of the compute in parallel regions), which the capture cannot check: a Keras MLP of 256-wide layers behind the
tf.data guide's `map(x * 2)` pipeline runs its small ops one after another on the recorded threads (the pool share
p ≈ 0.07), so the rule counted 0.03–0.12 ms of the pipeline's 0.46–1.2 ms a step, and the capture read 4.5–12 %
against a truth of 27 % (the alternating fits' median: rounds 17–40 %) — called compute-bound.  On the own-fit
bench's per-example parse (truths 16–22 %) the truths needed 0.5–1.2 ms a step for each ms of that CPU.  The first
action is to measure the what-if.

Its mirror: where the estimate reaches the line only by the part the step's recorded threads' waits for a core add to
it (attribution.input_stolen_waits_fraction, profile/core_wait.py) — without them it reads below — the verdict is
undecided, "source": "waits for a core", the first action the same.  The waits' reading brought a small MLP behind
a per-example map from 4–5 % to ~20 % against truths of ~20 %, and a per-example parse in front of another small
model to 22 % against a truth of 17 % (BENCHMARKS.md issue 29, "the recorded threads' wait for a core").
"""

from __future__ import annotations

from tfbertperf.profile.unprofiled import copies_share
from tfbertperf.profile.verdict import INPUT_BOUND_THRESHOLD, verdict
from tfbertperf.profile.xprof_attribution import input_share

MAX_LONGER = 100.0  # "about N× as many probe steps": beyond this, the machine is too noisy to decide it


def longer_by(ci: float, half_width: float) -> float:
    """How many times the blocks (a fit's length, a run's probe steps) narrow an interval of ± `ci` to
    ± `half_width`: the interval narrows with the square root of the blocks; at most MAX_LONGER."""
    return min(MAX_LONGER, (ci / max(half_width, 1e-6)) ** 2)


def as_long(times: float) -> str:
    """"about N×" for a fit or run N times as long: one decimal below 2 ("about 1×" said nothing: 1.2× is a fit
    20 % longer)."""
    return f"about {times:.1f}×" if times < 1.95 else f"about {times:.0f}×"


def probe_share(att: dict) -> float | None:
    """The input share the verdict compared with the line when it was the probe's (None when it was not)."""
    icf = att.get("input_cost_fraction")
    if icf is None:
        return None
    if att.get("source") == "device_idle":  # idle_decision: the what-if less the copies
        return max(0.0, icf - copies_share(att))
    share, source = input_share(att)
    return share if source == "input_cost_fraction" else None


def estimate_share(att: dict) -> tuple[float, float, str] | None:
    """(share, its 95 % half-width, its key) when the verdict compared the capture's estimate (no probe) and the
    capture gave the estimate's spread over its steps (input_cost_estimate_ci95); the unprofiled estimate's
    interval is the same milliseconds' ÷ the unprofiled step.  None otherwise."""
    share, source = input_share(att)
    ci, est = att.get("input_cost_estimate_ci95"), att.get("input_cost_estimate_fraction")
    if ci is None or not est or not source.startswith("input_cost_estimate") or att.get("source") == "device_idle":
        return None
    return share, ci * share / est if source.endswith("unprofiled_fraction") else ci, source


def mark(decided: dict, att: dict, au: float, *, probe_steps: int | None = None, probe_by: str = "",
         **verdict_kw) -> dict:
    """`decided` (verdict()'s dict) with `undecided` set, its summary extended and a first action to measure
    longer, when att's input_cost_ci95 straddles the line (module docstring) — or, without a probe, the capture's
    estimate's interval over its steps does, and the first action is to measure the what-if; else `decided`
    with undecided None."""
    decided = {**decided, "undecided": None}
    unrecorded, step = att.get("input_loader_threads_unrecorded_ms_per_step"), float(att.get("step_time_ms") or 0.0)
    unseen = att.get("input_cost_fraction") is None and decided["bottleneck"] != "input"
    if unseen and unrecorded and unrecorded >= INPUT_BOUND_THRESHOLD * step:
        return _unseen_undecided(decided, att, "unrecorded loader threads", (
            f"other Python threads ran {unrecorded:.1f} ms of the {step:.1f} ms step (a loader ahead in a thread?) and "
            f"the capture has no record of their CPU, which the input figure leaves out"),
            "measure the loader thread's CPU before acting on this verdict: capture with tfbertperf.jax_steps."
            "StepTimer, which records every thread's CPU beside the capture (threadcpu.json), and its probe=True "
            "measures the what-if")
    if unseen and att.get("steps_gap_unexplained_ms"):
        return _unseen_undecided(decided, att, "gaps between markers", (
            f"the loop spends {att['steps_gap_unexplained_ms']:.1f} ms a step between its step markers in work the "
            f"capture cannot name (step_gaps.py), which no figure counts"),
            "mark the whole step before acting on this verdict — its batch's fetch inside the marker "
            "(tfbertperf.tf_steps / jax_steps StepTimer: `timer.steps(...)`; a JAX loop captured with its Python "
            "tracer on) — or measure the what-if (StepTimer's probe=True)")
    beside = beside_share(att) if unseen else None
    if beside and beside[0] < INPUT_BOUND_THRESHOLD <= beside[1]:
        cpu, stolen = att["input_cpu_ms_per_step"], att["input_stolen_cpu_fraction"] * att["step_time_ms"]
        return _unseen_undecided(decided, att, "input CPU beside the compute", (
            f"the input pipeline's threads used {cpu:.2f} ms of CPU a step while the step computed — {beside[1]:.0%} "
            f"of the step if each of those ms cost the step one; the estimate counts {stolen:.2f} ms of them (what "
            f"the compute loses to them is not in the capture)"), _measure_advice(probe_by, (
                f"the capture's estimate {beside[0]:.0%} counts only part of the input's CPU beside the compute")))
    below = waits_share(att) if att.get("input_cost_fraction") is None and decided["bottleneck"] == "input" else None
    if below and below[1] < INPUT_BOUND_THRESHOLD <= below[0]:
        other = verdict({**att, below[2]: att[below[2]] - (below[0] - below[1])}, au, **verdict_kw)["bottleneck"]
        if other != "input":
            return _unseen_undecided(decided, att, "waits for a core", (
                f"the estimate {below[0]:.0%} counts the step's threads' waits for the cores the input held "
                f"(core_wait.py); without them it reads {below[1]:.0%}, and the capture cannot tell which the step "
                f"lost"), _measure_advice(probe_by, "the capture's estimate sits on the line by the waits it "
                                                    "counts"), other=other)
    ci, share, key = att.get("input_cost_ci95"), probe_share(att), "input_cost_fraction"
    if share is None:
        share, ci, key = estimate_share(att) or (None, None, key)
    if ci is None or share is None or abs(share - INPUT_BOUND_THRESHOLD) >= ci:
        return decided
    side = decided["bottleneck"]
    # the figure just across the line (by 0.1 pp), everything else as measured
    moved = att[key] + (INPUT_BOUND_THRESHOLD - share) + (-1e-3 if side == "input" else 1e-3)
    moved = max(0.0, min(1.0, moved))
    other = verdict({**att, key: moved}, au, **verdict_kw)["bottleneck"]
    if other == side:  # the other side of the input line is still this bottleneck (transfer, other)
        return decided
    if key != "input_cost_fraction":
        return _estimate_undecided(decided, share, ci, side, other, loop=probe_by if "StepTimer" in probe_by else "")
    longer = longer_by(ci, abs(share - INPUT_BOUND_THRESHOLD))
    auto = isinstance(probe_steps, str)  # a run with profile.probe_steps=auto: a longer run decides it
    more = None if probe_steps is None or auto else max(probe_steps + 1, int(round(probe_steps * longer)))
    decided["undecided"] = {"between": [side, other], "input_cost_fraction": round(share, 4), "ci95": round(ci, 4),
                            "threshold": INPUT_BOUND_THRESHOLD, "probe_steps_to_decide": more,
                            "longer_by": round(longer, 1)}
    lo, hi = max(0.0, share - ci), min(1.0, share + ci)
    decided["summary"] += (f"; undecided: the what-if's 95% interval {100 * lo:.0f}–{hi:.0%} straddles the "
                           f"{INPUT_BOUND_THRESHOLD:.0%} line between {side} and {other}")
    said = f"{share:.0%} ± {100 * ci:.0f} pp (95%) against the {INPUT_BOUND_THRESHOLD:.0%} line"
    if more is not None:
        advice = (f"measure longer before acting on this verdict — about {more} probe steps would decide {said} "
                  f"(--set profile.probe_steps={more}, in a run long enough to hold them)")
        act = {"advice": advice, "set": [f"profile.probe_steps={more}"]}
    else:
        loop = "StepTimer" in probe_by  # a user's own loop (tfbertperf.jax_steps), not a Keras fit
        advice = (f"measure longer before acting on this verdict — a {'run' if auto else 'loop' if loop else 'fit'} "
                  f"{as_long(longer)} as long gives " + ("the auto probe (profile.probe_steps=auto; train.steps)" if auto
                                                     else "StepTimer's probe (probe=True, total_steps=…)" if loop
                                                     else "ProfileCallback's probe (probe_steps=\"auto\")")
                  + f" the blocks to decide {said}")
        act = {"advice": advice, "set": []}
    decided["actions"] = [act, *(decided.get("actions") or [])]
    decided["recommendations"] = [advice, *(decided.get("recommendations") or [])]
    return decided


def _estimate_undecided(decided: dict, share: float, ci: float, side: str, other: str, loop: str = "") -> dict:
    """An estimate from the capture whose spread over the captured steps straddles the line: the what-if decides
    (a longer capture narrows the spread, not the estimate's bias: BENCHMARKS.md, issue 29).  `loop`: the step
    file's writer where it is a loop's StepTimer (tfbertperf.tf_steps.StepTimer, tfbertperf.jax_steps.StepTimer)."""
    lo, hi = max(0.0, share - ci), min(1.0, share + ci)
    decided["undecided"] = {"between": [side, other], "input_cost_fraction": round(share, 4), "ci95": round(ci, 4),
                            "threshold": INPUT_BOUND_THRESHOLD, "probe_steps_to_decide": None, "longer_by": None,
                            "source": "estimate"}
    decided["summary"] += (f"; undecided: the estimate's 95% interval over the captured steps {100 * lo:.0f}–"
                           f"{hi:.0%} straddles the {INPUT_BOUND_THRESHOLD:.0%} line between {side} and {other}")
    advice = _measure_advice(loop, f"the capture's estimate {share:.0%} ± {100 * ci:.0f} pp (95%, over its steps) "
                                   f"sits on the {INPUT_BOUND_THRESHOLD:.0%} line")
    decided["actions"] = [{"advice": advice, "set": []}, *(decided.get("actions") or [])]
    decided["recommendations"] = [advice, *(decided.get("recommendations") or [])]
    return decided


def beside_share(att: dict) -> tuple[float, float] | None:
    """(the capture's estimate the verdict compared, that share were each ms of the input's measured CPU in the
    compute phase a ms of the step: module docstring); None with a probe, without measured CPU or an estimate."""
    share, source = input_share(att)
    cpu, stolen, est = (att.get(k) for k in ("input_cpu_ms_per_step", "input_stolen_cpu_fraction",
                                              "input_cost_estimate_fraction"))
    step = float(att.get("step_time_ms") or 0.0)
    if not source.startswith("input_cost_estimate") or None in (cpu, stolen) or not est or step <= 0:
        return None
    # the estimate's milliseconds with all that CPU in them, ÷ the step the share is of (captured or unprofiled)
    return share, share + max(0.0, cpu / step - stolen) * share / est


def waits_share(att: dict) -> tuple[float, float, str] | None:
    """(the capture's estimate the verdict compared, the same without the part the recorded threads' waits for a
    core added to it (attribution.input_stolen_waits_fraction, profile/core_wait.py), the estimate's key); None
    with a probe or without that part."""
    share, source = input_share(att)
    waits, est = att.get("input_stolen_waits_fraction"), att.get("input_cost_estimate_fraction")
    if not source.startswith("input_cost_estimate") or not waits or not est:
        return None
    return share, share - waits * share / est, source


def _measure_advice(loop: str, why: str) -> str:
    """The first action where the capture cannot decide: measure the what-if (`loop`: a loop's StepTimer)."""
    # the imperative first: the answer line keeps what follows the colon ("next: run …")
    return ("measure the what-if before acting on this verdict: run "
            + (f"{loop}(probe=True, total_steps=…)" if "StepTimer" in loop else
               "tfbertperf.keras.ProfileCallback(probe=True)")
            + f", which times your steps on one cached batch (a run: profile.probe_steps=auto) — {why}")


def _unseen_undecided(decided: dict, att: dict, source: str, why: str, advice: str, other: str = "input") -> dict:
    """A verdict below the line beside input work the capture cannot count (module docstring) — or above it by the
    waits it counts (`other`: the verdict without them) —: undecided, `why` added to the summary, `advice` the
    first action."""
    share, _ = input_share(att)
    decided["undecided"] = {"between": [decided["bottleneck"], other], "input_cost_fraction": round(share, 4),
                            "ci95": None, "threshold": INPUT_BOUND_THRESHOLD, "probe_steps_to_decide": None,
                            "longer_by": None, "source": source}
    decided["summary"] += f"; undecided: {why}"
    decided["actions"] = [{"advice": advice, "set": []}, *(decided.get("actions") or [])]
    decided["recommendations"] = [advice, *(decided.get("recommendations") or [])]
    return decided
