"""The program as it runs without the profiler: a device-idle attribution (profile/device_attribution.py) re-read
against the step measured outside the capture (our step timer, or a user's step file: profile/stepfile.py).

The profiler slows the host, not the device: a kernel runs as long traced or not, and a sleep, a read or a copy
takes its own time, but every host event the profiler records (and CUPTI's work around each launch) lengthens
the host's path to the next launch.  So, with the captured step S, the unprofiled step T (measured) and the
profiler's cost P = S − T:
  * device_compute keeps its milliseconds (busy time per step);
  * each host part (input, host_to_device, kernel_launch, compile, output, other) loses a share of P by what the
    profiler recorded in its idle time (profiler_weights): the training threads' host events there, and on
    kernel_launch the step's kernels, each costing KERNEL_EVENTS events' worth (CUPTI's work per launch); a part
    cut to nothing passes the rest of its share on.  A sleeping loader records one event in milliseconds and keeps
    them; Keras slicing a batch under the Python tracer records hundreds and loses what they cost.  (Keras on JAX
    on an H200 with a step file and no probe: before this rule the input kept its captured milliseconds and read
    16–35 pp high on array and NumPy loaders, 14.7 pp off on average over 22 fresh fits; 3.9 pp with it.)
  * a capture without those counts (an attribution from before them): input, host_to_device, output and compile
    keep theirs (HOST_FIXED), scaled down together only when busy plus them would not fit in T; kernel_launch and
    other (HOST_SLOWED) get what is left of T, in proportion to their captured milliseconds;
  * with the what-if's compute-only step T_c measured (the probe), the view agrees with it: T − T_c is the input's,
    shared by input and host_to_device in proportion to their captured milliseconds, and T_c less the device's busy
    time the rest's (kernel_launch, other, output, compile, likewise) — the parts the profiler slowed are then
    whatever they are (Keras on JAX on an H200: the Python tracer tripled the fit's slicing and `device_put`, and
    the view without T_c read the input 97 % of a step whose what-if measured 41 %);
  * a T longer than S (no measurable cost, or noise) leaves the captured milliseconds as they are; the surplus is
    named `unexplained_ms`;
  * a T longer than S by more than SPEED_MOVED gives no view (`moved`): the profiler cannot speed a program up, so
    its own speed moved between the window and the other steps, and the difference measures nothing.
Fractions are of T; device_busy_fraction = busy ÷ T (capped at 1): the program's AU without the profiler.
"""

from __future__ import annotations

HOST_FIXED = ("input", "host_to_device", "output", "compile")
HOST_SLOWED = ("kernel_launch", "other")
BASIS = ("measured: the capture's device time against the unprofiled step time (profiler cost = captured − "
         "unprofiled step, taken from the host's own work)")


SPEED_MOVED = 0.05
"""The captured step may be up to 5 % shorter than the unprofiled one as noise (−2.7 % seen on an H200 capture);
beyond that the program's speed moved: a Python loader's steps on an H200 ran 22.6 ms in the window against 27–28
ms before it (tests/fixtures/h200, BENCHMARKS.md), and the view built on 27 ms read it launch-bound."""


DRIFT_MAX = 0.10
"""Unprofiled steps after the window more than 10 % faster or slower than those before it: the program's own speed
moved around the capture, and the captured − unprofiled difference is that move as much as the profiler (an H200
loader without the Python tracer: 22.6 ms before, 27.6 ms after, "+4.75 ms" read as the profiler's cost)."""


SLOWER_THAN_EVENTS = 3.5
"""A captured step longer than the unprofiled one by over 3.5× what its recorded host events cost (program_facts.
HOST_EVENT_COST_US each: the profiler's cost on a host capture) and by over SPEED_MOVED of the step: the window ran
slower for a reason of its own, the twin of `moved` (the profiler cannot slow a program by much more than its events
cost).  Chosen on ~40 captures of two own Keras fit programs (2026-11-27 03:20–04:35, BENCHMARKS.md): the measured
cost was −1.3× to 2.3× the events' on all but the two whose estimate against the unprofiled step over-read most (a
keras-hub tokenizer, 78.5 % against a truth of 42 %: 4.8×; a waiting map, 100 % against 96 %: 5.6×).  Scored on
fresh captures: BENCHMARKS.md, "a window slower than its events explain"."""


def slower_than_events(captured_ms: float, unprofiled_ms: float, events_per_step: float | None,
                       event_cost_us: float) -> bool:
    """The window ran slower than the profiler's recorded events explain (SLOWER_THAN_EVENTS; `event_cost_us`:
    program_facts.HOST_EVENT_COST_US, passed in: that module imports this one)."""
    added = captured_ms - unprofiled_ms
    return bool(events_per_step) and added > SPEED_MOVED * unprofiled_ms and \
        added > SLOWER_THAN_EVENTS * events_per_step * event_cost_us / 1e3


def slower_words(captured_ms: float, unprofiled_ms: float, events_per_step: float, steps: str) -> str:
    return (f"not measured: the captured steps ran {captured_ms - unprofiled_ms:.1f} ms a step slower than the {steps} "
            f"({captured_ms:.1f} against {unprofiled_ms:.1f} ms), over {SLOWER_THAN_EVENTS:g}× what the "
            f"{events_per_step:.0f} host events it recorded a step cost: the program's own speed moved between them")


def moved(captured_ms: float, unprofiled_ms: float) -> bool:
    """The program's speed moved between the capture's window and its unprofiled steps (SPEED_MOVED)."""
    return unprofiled_ms > captured_ms * (1 + SPEED_MOVED)


def drifted(drift: float | None) -> str | None:
    """Why the step file cannot measure the profiler's cost (DRIFT_MAX), or None."""
    if drift is None or drift <= DRIFT_MAX:
        return None
    return (f"not measured: the unprofiled steps after the capture's window differ from those before it by "
            f"{drift:.0%} of the step: the program's own speed moved around the capture, so the captured step "
            "against their mean measures that move as much as the profiler")


def not_measured(captured_ms: float, unprofiled_ms: float, steps: str = "unprofiled steps") -> str:
    return (f"not measured: the captured steps ran {1 - captured_ms / unprofiled_ms:.0%} faster than the {steps} "
            f"({captured_ms:.1f} against {unprofiled_ms:.1f} ms): the program's own speed moved between them, and the "
            "profiler cannot speed a program up, so their difference measures nothing")


def view(att: dict, unprofiled_step_ms: float | None, t_c_ms: float | None = None) -> dict | None:
    """The unprofiled view of a device_idle attribution (module docstring), or None without a measured step;
    `t_c_ms` the what-if's measured compute-only step, where a probe ran."""
    if not unprofiled_step_ms or unprofiled_step_ms <= 0 or att.get("source") != "device_idle":
        return None
    if moved(float(att["step_time_ms"]), float(unprofiled_step_ms)):
        return None
    T, S = float(unprofiled_step_ms), float(att["step_time_ms"])
    bd = {k: float(v) for k, v in att["breakdown_ms"].items()}
    busy = min(bd["device_compute"], T)
    fixed = sum(bd[k] for k in HOST_FIXED)
    slowed = sum(bd[k] for k in HOST_SLOWED)
    out = {k: 0.0 for k in bd}
    out["device_compute"] = busy
    room = T - busy
    unexplained = 0.0
    weights = profiler_weights(att)
    if t_c_ms is not None and 0 < t_c_ms <= T:
        _agree_with_what_if(bd, out, T - max(t_c_ms, busy), max(0.0, t_c_ms - busy))
    elif weights and S > T:
        _cost_by_events(bd, out, S - T, weights)
    elif fixed > room:  # the profiler slowed the fixed parts too: they share what is left, the host's own none
        for k in HOST_FIXED:
            out[k] = bd[k] * room / fixed if fixed else 0.0
    else:
        for k in HOST_FIXED:
            out[k] = bd[k]
        left = room - fixed
        share = min(1.0, left / slowed) if slowed > 0 else 0.0
        for k in HOST_SLOWED:
            out[k] = bd[k] * share
        unexplained = max(0.0, left - slowed * share)
        out["other"] += unexplained
    return {
        "step_time_ms": round(T, 4),
        "captured_step_ms": round(S, 4),
        "profiler_ms_per_step": round(max(0.0, S - T), 4),
        "breakdown_ms": {k: round(v, 4) for k, v in out.items()},
        "fractions": {k: round(v / T, 6) for k, v in out.items()},
        "device_busy_fraction": round(busy / T, 6),
        "unexplained_ms": round(unexplained, 4),
        "basis": BASIS,
    }


HOST_PARTS = ("input", "host_to_device", "kernel_launch", "compile", "output", "other")

KERNEL_EVENTS = 6.5
"""What one device kernel costs the host under the profiler (CUPTI's work around each launch), in recorded host
events.  Read from the measured cost of real GPU captures against the events and kernels they hold: the shared H100
BERT-large capture, 14.5 ms a step for 276 host events in its idle time and 2,120 kernels (~6.7 kernel = 1 event at
~1 µs an event); the H200 Keras fixtures (tests/fixtures/h200-keras), 0.3 ms a step for ~40 events and 45 kernels
on the two whose other host work is a wait.  Chosen on those 8 captures (5.5–7 fit them alike); scored on 24 fresh
H200 fits: BENCHMARKS.md, "the profiler's cost shared by what it recorded".  Not a constant of CUPTI: the H200 JAX
loop's compute capture measured 1.1 ms for 529 events and 1,050 kernels (under 1 µs a kernel); it only shares a
measured cost, and where it is off the launch takes too much or too little of it."""


def profiler_weights(att: dict) -> dict | None:
    """Per host part, what the profiler recorded in its idle time (device_attribution host_events_by_part, the
    kernels on kernel_launch at KERNEL_EVENTS each), or None where the attribution has no such count."""
    ev = att.get("host_events_by_part")
    if not ev:
        return None
    w = {k: float(ev.get(k) or 0.0) for k in HOST_PARTS}
    w["kernel_launch"] += KERNEL_EVENTS * float(att.get("kernels_per_step") or 0.0)
    return w if sum(w.values()) > 0 else None


def _cost_by_events(bd: dict, out: dict, cost: float, weights: dict) -> None:
    """Each host part less its share of the profiler's measured cost, by what the profiler recorded there
    (profiler_weights); a part cut to nothing passes the rest of its share to the others, and what the recorded
    parts cannot hold comes off the rest by their milliseconds."""
    left, open_ = cost, [k for k in HOST_PARTS if weights[k] > 0 and bd[k] > 0]
    for k in HOST_PARTS:
        out[k] = bd[k]
    while left > 1e-9:
        if not open_:  # every recorded part is spent: the others, by their milliseconds
            open_ = [k for k in HOST_PARTS if out[k] > 0]
            if not open_:
                return
            weights = {k: out[k] for k in open_}
        total = sum(weights[k] for k in open_)
        cuts = {k: left * weights[k] / total for k in open_}
        full = [k for k in open_ if cuts[k] >= out[k]]
        if not full:
            for k in open_:
                out[k] -= cuts[k]
            return
        for k in full:
            left -= out[k]
            out[k] = 0.0
            open_.remove(k)


WHAT_IF_INPUT = ("input", "host_to_device")
WHAT_IF_REST = ("kernel_launch", "other", "output", "compile")


def _agree_with_what_if(bd: dict, out: dict, input_ms: float, rest_ms: float) -> None:
    """The host parts of the view from the measured what-if (module docstring): `input_ms` = T − T_c shared over
    WHAT_IF_INPUT, `rest_ms` = T_c − busy over WHAT_IF_REST, each in proportion to the captured milliseconds."""
    for parts, ms, default in ((WHAT_IF_INPUT, input_ms, "input"), (WHAT_IF_REST, rest_ms, "other")):
        captured = sum(bd[k] for k in parts)
        for k in parts:
            out[k] = ms * bd[k] / captured if captured > 0 else (ms if k == default else 0.0)


def copies_share(att: dict) -> float:
    """The host→device share a measured what-if's input cost holds as copies (the input's own wait is the rest):
    none where that time is the loader handing the batch over (transfer.hand_off_ms_per_step, device_attribution.py)."""
    if (att.get("transfer") or {}).get("hand_off_ms_per_step") is not None:
        return 0.0
    return ((att.get("unprofiled") or {}).get("fractions") or att["fractions"])["host_to_device"]


def host_estimate(estimate: float | None, captured_ms: float, unprofiled_ms: float | None,
                  events_per_step: float | None = None, event_cost_us: float = 0.0, most: float = 1.0) -> float | None:
    """A host capture's input estimate (blocked wait + the pipeline's CPU taken from the step, a share of the
    captured step) as a share of the unprofiled step: the input's milliseconds kept (HOST_FIXED: a wait, a read
    and the pipeline's measured CPU take their own time), the step's own work less the profiler's cost.  None
    without an estimate or a measured step, or where the program's speed moved (`moved`, `slower_than_events`).
    (Issue 29: on own Keras fits the profiler added 0.1–2.5 ms to a 4–46 ms step, all of it on the step's own side
    of the ledger.)  At most `most`, the captured estimate's ceiling as a share of the step (core_wait.ceiling: the
    compute's own CPU ÷ the cores, a share the profiler's cost does not lower where it runs on the step's thread):
    a Python generator's fit whose capture read 47.8 % at that ceiling read 59.5 % of the unprofiled step with its
    milliseconds kept, against truths of 46–49 %."""
    if estimate is None or not unprofiled_ms or unprofiled_ms <= 0 or not captured_ms or captured_ms <= 0:
        return None
    if moved(captured_ms, unprofiled_ms) or slower_than_events(captured_ms, unprofiled_ms, events_per_step,
                                                               event_cost_us):
        return None
    return min(1.0, max(estimate, most), estimate * captured_ms / unprofiled_ms)


def words(att: dict) -> str:
    """The unprofiled view in one clause for the verdict's summary ("" without one)."""
    u = att.get("unprofiled")
    if not u:
        return ""
    fr = u["fractions"]
    return (f"without the profiler (the {u['step_time_ms']:.1f} ms unprofiled step; the capture added "
            f"{u['profiler_ms_per_step']:.1f} ms a step) the device computes {fr['device_compute']:.0%}, waits on "
            f"input {fr['input']:.0%}, host→device {fr['host_to_device']:.0%}, kernel launch "
            f"{fr['kernel_launch']:.0%}, other {fr['other'] + fr['compile'] + fr['output']:.0%}")


def discount_words(d: dict) -> str:
    """The verdict's clause for a host-bound finding the profiler's cost took below its threshold."""
    what = "while the host dispatched (kernel launch)" if d["finding"] == "launch" else "on other host time"
    how = ("estimated — re-capture without the Python tracer to confirm" if d["basis"] == "estimated" else
           "measured against the unprofiled step timer")
    return (f"not host-bound: device idle {d['share']:.0%} {what}, of which ~{d['profiler_ms']:.1f} ms a step is "
            f"the profiler's own cost ({how}); without it ~{d['share_without_profiler']:.0%} < "
            f"{d['threshold']:.0%}")


def profiler_words(att: dict) -> str:
    """The verdict's clause on the profiler's cost (measured, else the estimate from host events)."""
    pc = att.get("profiler_cost") or {}
    if pc.get("added_ms_per_step") is not None:
        return (f"the capture added {pc['added_ms_per_step']:.1f} ms a step ({pc.get('added_fraction') or 0:.0%} of "
                f"the captured step) over the unprofiled step timer's {pc['unprofiled_step_ms']:.1f} ms")
    if pc.get("host_events_per_step") is not None:
        tracer = "Python tracer on" if pc.get("python_tracer") else "no Python tracer"
        return (f"the profiler slows the host: {pc['host_events_per_step']} host events recorded a step ({tracer}), "
                f"~{pc['added_ms_per_step_estimate']:.1f} ms a step estimated (0.3–2.4× that measured on real GPU "
                "captures) — compare with the program's unprofiled step time before acting on host-bound time")
    return ""


def disagreement(att: dict, sf: dict | None) -> str | None:
    """Why the capture's estimate and the measured what-if differ, where they differ by more than the what-if's 95 %
    interval and 5 pp; None where they agree or either is missing.  The measured figure is the answer (verdict.py);
    the line says what the estimate could not see, so that a user reading both knows which to act on."""
    measured = (sf or {}).get("input_cost_fraction")
    est = att.get("input_cost_estimate_unprofiled_fraction")
    est = att.get("input_cost_estimate_fraction") if est is None else est
    if measured is None or est is None or abs(est - measured) <= max(0.05, (sf or {}).get("input_cost_ci95") or 0):
        return None
    pc, unprof = att.get("profiler_cost") or {}, sf.get("unprofiled_step_ms")
    captured = pc.get("captured_step_ms") or att.get("step_time_ms")
    if captured and unprof and abs(captured - unprof) > SPEED_MOVED * unprof and pc.get("added_ms_per_step") is None:
        why = (f"its {att.get('steps_profiled') or 'captured'} steps ran {captured:.2f} ms against the fit's "
               f"{unprof:.2f} ms: the window is not the fit's usual pace (buffers refilled at a pause, other load)")
    elif not any(v > 0 for v in (att.get("input_ops_us") or {}).values()):
        why = "the capture records none of the pipeline's work (a jax.profiler capture records no tf.data threads)"
    elif not str(att.get("input_cpu_basis") or "").startswith("measured"):
        why = "the capture has no record of its input threads' CPU beside it, so the CPU the pipeline took is modelled"
    else:
        why = (f"it reads {att.get('steps_profiled') or 'the captured'} steps and models what each millisecond of the "
               "pipeline's CPU costs the step (profile/contention.py); the what-if timed the fit with and without "
               "its input")
    return (f"the estimate is {100 * abs(est - measured):.0f} pp {'above' if est > measured else 'below'} the measured "
            f"what-if: {why} — the measured figure is the answer")
