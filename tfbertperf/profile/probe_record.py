"""What a user's fit's what-if probe records, for either backend's ProfileCallback (profile/keras_callback.py on
TensorFlow, tfbertperf/keras_jax.py on JAX): the step file's `what_if` and excluded steps, the auto probe's rule to
stop, and the `what_if` attribute and warnings the callback leaves after fit (profile/stepfile.py's definitions);
`unpatch`, which takes a stale probe wrapper off a model's train_function; and `fit_running`, which tells fit's
validation from a user's evaluate()."""

from __future__ import annotations

import sys

from tfbertperf.profile.probe_hint import precision_hint
from tfbertperf.train import recovery
from tfbertperf.train.blocks import stop_reason


def excluded_steps(ran: list[tuple[int, int]], step_ms: list[float], warmup: int, traced,
                   grabbed_at: int | None) -> list[int]:
    """The real steps left out of T for the probe: each in-loop block's step and its recovery steps (fed from the
    buffers a run-ahead pipeline filled meanwhile, until the steps are back to their own pace: train/recovery.py),
    and the step whose batch the probe took."""
    in_loop = [(p, n) for p, n in ran if p < len(step_ms)]
    out = recovery.observed(step_ms, in_loop, warmup, traced, len(step_ms))[0]
    return sorted({*out, *(p for p, _ in in_loop), *([grabbed_at] if grabbed_at is not None else [])})


def what_if_record(probe_ms: list[float], ran: list[tuple[int, int]], auto: bool, ci95_target: float,
                   planned: int, stopped: str | None) -> dict:
    """The step file's `what_if` object: the probe's timed steps, its blocks and how its sample was chosen."""
    return {"compute_only_step_ms": [round(x, 4) for x in probe_ms], "blocks": [[p, n] for p, n in ran],
            "sample": ({"auto": True, "ci95_target": ci95_target, "planned_blocks": planned, "stopped": stopped}
                       if auto else {"auto": False})}


def auto_stop(summary: dict | None, ran: list, target: float) -> str | None:
    """Why the auto probe stops before its next block (its interval is `target` or narrower after at least
    AUTO_MIN_BLOCKS blocks), else None; `summary` is the step file's for the steps so far."""
    return stop_reason(len(ran), (summary or {}).get("input_cost_ci95"), target)


def after_fit(summary: dict | None, *, taken: bool, ran: list, stopped: str | None, steps: int, warmup: int,
              traced, probe_steps: int, target: float | None, who: str = "ProfileCallback",
              run: str = "fit") -> tuple[dict | None, str | None]:
    """(the callback's `what_if` attribute or None, the warning to give or None) once fit has ended: the measured
    figure with its interval and sample, a hint where it is too wide to act on, or why no figure came."""
    s = summary or {}
    if s.get("input_cost_fraction") is None:
        why = ("no batch was taken" if not taken else "no probe block ran" if not ran else
               "no real step was left to compare with (outside warm-up, the capture and the blocks)")
        return None, (f"tfbertperf {who}(probe=True): no what-if: {why} in this {run}'s {steps} steps "
                      f"(warm-up {warmup}, capture {traced})")
    what_if = {"step_ms": s["unprofiled_step_ms"], "compute_only_step_ms": s["compute_only_step_ms"],
               "input_cost_fraction": s["input_cost_fraction"], "input_cost_ci95": s.get("input_cost_ci95"),
               "probe_steps": s["compute_only_steps"] + s["compute_only_interrupted"], "probe_blocks": len(ran),
               "stopped": stopped, "after_steps": bool(s.get("probe_after_steps"))}
    return what_if, precision_hint(what_if, probe_steps, target, who, run)


def unpatch(model) -> None:
    """Put the model's own train_function back where a fit stopped by an exception (Ctrl-C in a notebook) never
    reached on_train_end and left a probe's wrapper on it: the next fit's probe would have wrapped the wrapper."""
    fn = getattr(model, "train_function", None)
    while getattr(getattr(fn, "__self__", None), "_train_function", None) is not None and \
            getattr(fn, "__name__", "") == "_train_with_probe":
        fn = fn.__self__._train_function
    model.train_function = fn


def fit_running(model) -> bool:
    """True when `model.fit` is on this thread's call stack: fit's validation runs evaluate() with fit's callbacks (no
    warning there), a user's evaluate() or predict() does not — also after a fit that an exception (Ctrl-C) stopped
    before its on_train_end, which a flag set in on_train_begin would still call running."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "fit" and frame.f_locals.get("self") is model:
            return True
        frame = frame.f_back
    return False
