"""The verdict (which resource bounds the step, one line with its numbers) and its advice (profile/advice.py)."""

from __future__ import annotations

import re

from tfbertperf.profile import kernel_programs, unprofiled
from tfbertperf.profile.advice import COMPUTE_BOUND_BUSY, LAUNCH_BOUND_SHARE, actions
from tfbertperf.profile.xprof_attribution import input_share

INPUT_BOUND_THRESHOLD = 0.20
"""Bottleneck "input" when the input share of the step is ≥ 0.20 — the step would be ≥ 20 % shorter with free
input.  The input share is the best figure available: input_cost_fraction (probe) → input_cost_estimate_fraction
(trace) → input_bound_fraction (direct).  xprof itself calls ≥ 20 % "highly input-bound"."""

TRANSFER_BOUND_THRESHOLD = 0.15
"""Bottleneck "transfer" when host→device copies take ≥ 15 % of the step and at least as much as the wait for
input does.  Every input share contains the copies (the direct one adds them; the probe's T_c and the trace
estimate leave them in T), so the wait for input is the share less the copies."""

OTHER_BOUND_THRESHOLD = 0.30
"""Bottleneck "other" when time outside input and compute (xprof's "other": Python/eager overhead, idle;
plus compile and output) is ≥ 30 % of the step."""

AU_THRESHOLD_DEFAULT = 0.90
"""MLPerf Storage's accelerator-utilization pass mark (compute time / total time)."""

HOST_BOUND = ("launch", "other")
"""Idle shares charged to the host's own work, where the profiler's cost lands: judged without it (idle_decision)."""


def profiler_ms(att: dict) -> tuple[float, str] | None:
    """(the profiler's cost per step in ms, "measured" | "estimated") from att["profiler_cost"]: measured
    against our step timer (a negative difference is noise: 0), else the foreign capture's estimate; None when
    neither is known."""
    pc = att.get("profiler_cost") or {}
    if pc.get("added_ms_per_step") is not None:
        return max(0.0, float(pc["added_ms_per_step"])), "measured"
    if pc.get("added_ms_per_step_estimate") is not None:
        return float(pc["added_ms_per_step_estimate"]), "estimated"
    return None


def idle_findings(att: dict) -> tuple[list[tuple[str, float]], dict | None]:
    """([(bottleneck, share), …] past their thresholds, first the bottleneck; discounted) of a device_idle attribution
    (profile/device_attribution.py).  The charged idle shares — input, host→device (transfer), kernel launch or the rest
    (other) — are taken largest first; the first that reaches its threshold (INPUT_BOUND_THRESHOLD,
    TRANSFER_BOUND_THRESHOLD, advice.LAUNCH_BOUND_SHARE, OTHER_BOUND_THRESHOLD) is the bottleneck, compute if none.
    Launch-bound steps are "other" (host-bound: the host issuing work), named in the summary.  The profiler slows the
    host, and a host-bound share (HOST_BOUND) holds that time: it is ranked, and decides only when it still reaches its
    threshold, with the profiler's cost per step P (profiler_ms) out of it and out of the step: (share × step − P) ÷
    (step − P); the others are ranked as captured (P may be an estimate).  When it does not decide, the next finding
    does, and `discounted` says so: {"finding", "share", "share_without_profiler", "profiler_ms", "basis", "threshold"}.
    (A real H200 capture of a Python loader traced frame by frame, tests/fixtures/h200: launch 35 %, ~17 % without P,
    against input 31 %; input-bound, 30 % measured without the profiler.)  With an unprofiled view (att["unprofiled"],
    profile/unprofiled.py) the shares are its fractions, P already out of them; with a measured what-if
    (input_cost_fraction) the input share is that less the host→device share.  Host→device time whose device copies take
    under a tenth of it (transfer.hand_off_ms_per_step) is the loader handing the batch over: in the what-if's input
    whole; without one, in the input's share before its line (an H200 Keras fit, input 19 % + hand-off 6 %, truth 28 %,
    read compute-bound while each had its own line)."""
    fr = (att.get("unprofiled") or {}).get("fractions") or att["fractions"]
    hand_off = (att.get("transfer") or {}).get("hand_off_ms_per_step") is not None  # device_attribution.py
    icf = att.get("input_cost_fraction")  # the what-if, measured (it holds the copies too): beats the idle share
    inp = fr["input"] if icf is None else max(0.0, icf - unprofiled.copies_share(att))
    inp += fr["host_to_device"] if hand_off and icf is None else 0.0  # the loader's hand-off: its input's
    shares = {"input": (inp, INPUT_BOUND_THRESHOLD),
              "transfer": (0.0 if hand_off else fr["host_to_device"], TRANSFER_BOUND_THRESHOLD),
              "launch": (fr["kernel_launch"], LAUNCH_BOUND_SHARE),
              "other": (fr["other"] + fr["compile"] + fr["output"], OTHER_BOUND_THRESHOLD)}
    cost, step = (None if att.get("unprofiled") else profiler_ms(att)), float(att.get("step_time_ms") or 0.0)
    P = cost[0] if cost and 0 < cost[0] < step else 0.0  # out of the host-bound shares and out of the step
    without = {n: max(0.0, s * step - P) / (step - P) if P and n in HOST_BOUND else s for n, (s, _) in shares.items()}
    discounted, found = None, []
    for name in sorted(shares, key=lambda n: -without[n]):
        share, threshold = shares[name]
        if share < threshold:
            continue
        if name == "launch" and att.get("unprofiled") and fr["device_compute"] >= COMPUTE_BOUND_BUSY:
            continue  # compute-bound: the device computes most of the unprofiled step (COMPUTE_BOUND_BUSY)
        if without[name] < threshold:
            discounted = discounted or {"finding": name, "share": share, "share_without_profiler": without[name],
                                        "profiler_ms": cost[0], "basis": cost[1], "threshold": threshold}
            continue
        found.append(("other" if name == "launch" else name, round(without[name], 6)))
    merged: dict[str, float] = {}  # kernel launch beside the rest of the host's own work: one finding, both shares
    for name, share in found:
        merged[name] = round(merged.get(name, 0.0) + share, 6)
    return sorted(merged.items(), key=lambda f: -f[1]), discounted


def idle_decision(att: dict) -> tuple[str, dict | None]:
    """(bottleneck, discounted) of a device_idle attribution: the first of idle_findings, compute when none."""
    found, discounted = idle_findings(att)
    return (found[0][0] if found else "compute"), discounted


ALSO_WORDS = {"input": "input-bound as well: the wait for input takes", "transfer": "transfer-bound as well: "
              "host→device takes", "other": "host-bound as well: the host's own work (kernel launch, other) takes"}
"""A step can have two bottlenecks past their thresholds: a loader in the training thread in front of a
launch-bound step (an H200 JAX loop without the Python tracer: kernel launch 35 %, input 29 %, truth 33 %)."""


def idle_bottleneck(att: dict) -> str:
    return idle_decision(att)[0]  # the bottleneck of a device_idle attribution


def _idle_summary(att: dict, au: float, bottleneck: str, au_threshold: float, discounted: dict | None) -> str:
    fr, tr = att["fractions"], att.get("transfer") or {}
    seen = (att.get("unprofiled") or {}).get("fractions") or fr  # the shares the decision read
    launch_bound = bottleneck == "other" and seen["kernel_launch"] >= seen["other"] + seen["compile"] + seen["output"]
    what = {"input": "input-bound", "compute": "compute-bound", "transfer": "transfer-bound (host→device)",
            "other": "launch-bound (the host issuing work)" if launch_bound else
                     "bound by other host time"}[bottleneck]
    copies = ""
    if tr.get("memory") and fr["host_to_device"] >= 0.005:  # memory set: enough bytes to read a rate from
        copies = (f" at {tr['effective_gb_per_s']:.1f} GB/s, {tr['memory']} memory (pinned "
                  f"{tr['pinned_gb_per_s']:.1f} GB/s, {tr['pinned_basis']})")
    named = ", ".join(f"{k} {v:.1f} ms" for k, v in (att.get("other_named_ms") or {}).items() if v >= 0.05)
    text = (f"{what}: {unprofiled.words(att)}; captured: " if att.get("unprofiled") else f"{what}: ")
    text += (f"of the {att['step_time_ms']:.1f} ms wall-time step ({att['step_source']}), the device "
            f"computes {fr['device_compute']:.0%} and waits on input {fr['input']:.0%}, host→device "
            f"{fr['host_to_device']:.0%}{copies}, kernel launch {fr['kernel_launch']:.0%}, other "
            f"{fr['other'] + fr['compile'] + fr['output']:.0%}{f' ({named})' if named else ''}; AU {au:.0%} "
            f"{'≥' if au >= au_threshold else '<'} {au_threshold:.0%} → {'pass' if au >= au_threshold else 'fail'}")
    if bottleneck == "compute" and au < au_threshold and seen["kernel_launch"] >= LAUNCH_BOUND_SHARE:
        text += f" because kernel launch takes {seen['kernel_launch']:.0%} of the step, not input (the device " \
                f"computes ≥ {COMPUTE_BOUND_BUSY:.0%} of it: compute-bound)"
    text += kernel_programs.variant_words(att)
    if discounted:
        text += f"; {unprofiled.discount_words(discounted)}"
    elif bottleneck in ("other", "input") and not att.get("unprofiled"):
        words = unprofiled.profiler_words(att)
        text += f"; {words}" if words else ""
        cost, step = profiler_ms(att), att["step_time_ms"]
        if bottleneck == "other" and cost and 0 < cost[0] < step:
            share = fr["kernel_launch"] if launch_bound else fr["other"] + fr["compile"] + fr["output"]
            text += (f"; without the profiler's {cost[0]:.1f} ms ({cost[1]}) still "
                     f"~{max(0.0, share * step - cost[0]) / (step - cost[0]):.0%} host-bound")
    for m in att.get("missing") or ():
        text += f"; {m}"
    return text


def verdict(att: dict, au: float, *, config: dict | None = None, storage: dict | None = None,
            au_threshold: float = AU_THRESHOLD_DEFAULT, cpu_flags=None) -> dict:
    """{"bottleneck", "summary", "recommendations"} from an attribution block (thresholds: module constants);
    a device_idle attribution (accelerator captures read from device idle time) by idle_bottleneck."""
    if att.get("source") == "device_idle":
        found, discounted = idle_findings(att)
        bottleneck = found[0][0] if found else "compute"
        acts = actions(bottleneck, att, config, storage, cpu_flags=cpu_flags)
        summary = _idle_summary(att, au, bottleneck, au_threshold, discounted)
        # a second finding past its threshold: named, and its advice after the first's (ALSO_WORDS)
        # a host-bound runner-up only against a measured unprofiled step: from the capture alone the estimate of
        # the profiler's cost is too rough (the H100 stall capture: launch ~20 % without it; compute-bound measured)
        also = [{"bottleneck": b, "share": sh} for b, sh in found[1:]
                if b != bottleneck and (b != "other" or att.get("unprofiled"))][:1]
        for a in also:
            summary += f"; {ALSO_WORDS[a['bottleneck']]} {a['share']:.0%} of the step too"
            acts += [x for x in actions(a["bottleneck"], att, config, storage, cpu_flags=cpu_flags) if x not in acts]
        return {"bottleneck": bottleneck, "summary": summary, "recommendations": [a["advice"] for a in acts],
                "actions": acts, "also": also}
    fr = att["fractions"]
    share, source = input_share(att)
    other = fr["other"] + fr["compile"] + fr["output"]
    h2d = fr["host_to_device"]
    if h2d >= TRANSFER_BOUND_THRESHOLD and h2d >= share - h2d:
        bottleneck = "transfer"
    elif share >= INPUT_BOUND_THRESHOLD:
        bottleneck = "input"
    elif other >= OTHER_BOUND_THRESHOLD:
        bottleneck = "other"
    else:
        bottleneck = "compute"
    label = {"input_cost_fraction": "what-if probe", "input_cost_estimate_fraction": "wait + stolen CPU",
             "input_cost_estimate_unprofiled_fraction": "wait + stolen CPU, the profiler's cost measured out",
             "input_bound_fraction": "blocked wait"}[source]
    if source.startswith("input_cost_estimate") and att.get("input_cpu_basis"):
        # whether the input threads' CPU was read off their clocks or estimated from their busy periods
        label += f", {str(att['input_cpu_basis']).split(':')[0]}"
    what = {"input": "input-bound", "compute": "compute-bound", "transfer": "transfer-bound",
            "other": "bound by other time (Python/eager overhead, idle)"}[bottleneck]
    copies = f", host→device copies {h2d:.0%}" if h2d >= 0.005 else ""
    t = att.get("what_if_step_ms") or att["step_time_ms"]  # the what-if's T: named where the window's step is not it
    moved = source == "input_cost_fraction" and abs(t - att["step_time_ms"]) > unprofiled.SPEED_MOVED * t
    step, of = f"{att['step_time_ms']:.1f} ms step", ""
    if source == "input_cost_estimate_unprofiled_fraction" or moved:  # the blocked wait: of the captured step
        step, of = f"{t:.1f} ms step" if moved else "unprofiled step", f" of the captured {step}"
    summary = (f"{what}: input costs {share:.0%} of the {step} ({label}; blocked wait "
               f"{att['input_bound_fraction']:.0%}{of}{copies}); AU {au:.0%} {'≥' if au >= au_threshold else '<'} "
               f"{au_threshold:.0%} → {'pass' if au >= au_threshold else 'fail'}")
    acts = actions(bottleneck, att, config, storage, cpu_flags=cpu_flags)
    return {"bottleneck": bottleneck, "summary": summary,
            "recommendations": [a["advice"] for a in acts], "actions": acts, "also": []}


HEADROOM_THIN = 1.3
"""Headroom (input ceiling ÷ demand) below 1.3 is a thin margin; below 1.0 input-bound whatever the overlap."""

CPU_IDLE_BELOW = 0.50
"""Input-bound with the CPU busy < 50 % → the pipeline waits on storage.  "Busy" is the run's CPU saturation
(host_utilization.thread_cpu.cpu_saturation_fraction, profile/threadcpu.py: its busiest thread's, or all its
threads', CPU plus run-queue wait ÷ wall) where it is known and the pipeline's threads are the only busy ones
(emulated devices, or a model on a GPU); the whole machine's busy fraction otherwise."""

CPU_SATURATED_FROM = 0.80
"""Input-bound with the CPU busy ≥ 80 % → preprocessing-limited.  With the run's CPU saturation this holds for
a single sequential map that saturates one core of many (the machine reads half busy on 2 cores) and on a shared
machine (other processes' CPU is not the run's; the run's threads waiting for a core count as wanting it)."""

CONTENDED_OWN_SHARE = 0.5
"""A busy CPU of which this run holds less than half (host_utilization.process_cpu_fraction_mean < 0.5 ×
cpu_busy_fraction_mean) is held by other processes; with the run's own threads using < CPU_IDLE_BELOW of what
they could, their CPU saturation is their wait for a core, not their preprocessing."""

READS_IN_FLIGHT_SHARE = 0.50
"""The pipeline waiting on reads for ≥ 50 % of the measured steps' wall time (storage.read_wait_fraction; where a
run has none, storage.read_ms_per_step ÷ the step) says the run waits on reads, not on the CPU — unless the run's
own threads saturate the CPU (then reads are slow because they wait for a core)."""


def _contended(busy: float, own: float, th: dict | None) -> str | None:
    """Words when the host's cores are held by other processes (module constant CONTENDED_OWN_SHARE): this run's
    threads used little CPU (their used saturation, without the run-queue wait, < CPU_IDLE_BELOW) and most of the
    machine's busy CPU is not this run's; None otherwise."""
    if own >= CONTENDED_OWN_SHARE * busy:
        return None
    words = f"; the host is contended: other processes hold {busy - own:.0%} of the CPU"
    if th:
        used = max(float(th.get("busiest_thread_cpu_fraction") or 0.0),
                   float(th.get("process_cores_used") or 0.0) / max(1, int(th.get("cores") or 1)))
        if used >= CPU_IDLE_BELOW:
            return None
        words += (f", this run's threads used {used:.0%} of the CPU (busiest thread "
                  f"{float(th.get('busiest_thread_cpu_fraction') or 0.0):.0%} of a core): the rest of their "
                  f"saturation is waiting for a core")
    return words


def input_cause(host: dict | None, read_share: float | None = None, *, model_on_host: bool = False,
                wait_share: float | None = None) -> tuple[str | None, str]:
    """("storage" | "preprocessing" | "mixed" | None, the numbers as words) from the run's host_utilization
    summary (profile/utilization.py) and, when known, the share of the step its storage reads took.
    `model_on_host`: the real model computes on this host's CPU, so the run's threads are not only the pipeline's.
      With the run's CPU saturation (thread_cpu, pipeline threads only): ≥ CPU_SATURATED_FROM → preprocessing;
        < CPU_IDLE_BELOW or reads ≥ READS_IN_FLIGHT_SHARE of the step → storage; else mixed.
      Otherwise, with the machine's CPU busy: < CPU_IDLE_BELOW or reads dominate → storage; ≥ CPU_SATURATED_FROM
        → preprocessing; else mixed.
      A busy CPU held by other processes (_contended: this run's threads used little of it, and it is not
      most of the machine's busy time) is not this pipeline's preprocessing: its saturation is the run's
      threads waiting for a core.  The words say the host is contended and the cause is what the run waits on:
      reads ≥ READS_IN_FLIGHT_SHARE of the step, or of a blocked wait for input of ≥ 5 % of it (`wait_share`,
      the share blocked in next()) → storage; else mixed (a quiet host would tell preprocessing apart)."""
    if not host or not host.get("samples"):
        return None, ""
    busy, own = float(host["cpu_busy_fraction_mean"]), float(host.get("process_cpu_fraction_mean") or 0.0)
    words = f"CPU {busy:.0%} busy (this run {own:.0%}), iowait {host.get('cpu_iowait_fraction_mean', 0.0):.0%}"
    th = host.get("thread_cpu") or {}
    sat = th.get("cpu_saturation_fraction") if not model_on_host else None
    if sat is not None:
        words += (f", CPU saturation {sat:.0%} (busiest thread wants {th['busiest_thread_wanted_fraction']:.0%} "
                  f"of a core, the run {th['process_cores_wanted']:.1f} of {host.get('cores') or '?'} cores)")
    if read_share is not None:
        words += f", storage reads {read_share:.0%} of the step"
    reads = read_share is not None and read_share >= READS_IN_FLIGHT_SHARE
    saturated = sat >= CPU_SATURATED_FROM if sat is not None else busy >= CPU_SATURATED_FROM
    # a CPU wanted (saturation ≥ CPU_IDLE_BELOW) mostly by waiting for cores other processes hold
    crowded = sat >= CPU_IDLE_BELOW if sat is not None else busy >= CPU_IDLE_BELOW
    contended = _contended(busy, own, {**th, "cores": host.get("cores")} if sat is not None else None) \
        if crowded else None
    if contended:
        of_wait = bool(read_share is not None and (wait_share or 0.0) >= 0.05  # a smaller wait names no cause
                       and read_share >= READS_IN_FLIGHT_SHARE * wait_share)
        if of_wait and not reads:
            contended += f"; reads are {read_share / wait_share:.0%} of its {wait_share:.0%} blocked wait"
        return ("storage" if reads or of_wait else "mixed"), words + contended
    if sat is not None:
        if saturated:
            return "preprocessing", words
        return ("storage" if sat < CPU_IDLE_BELOW or reads else "mixed"), words
    if busy < CPU_IDLE_BELOW or reads:
        return "storage", words
    return ("preprocessing" if saturated else "mixed"), words


_CAUSE_TEXT = {
    "storage": "waiting on storage: the input waits on reads, not on the CPU — read more in parallel (interleave cycle_length, "
               "data.concurrency), prefetch, or stage remote shards to local disk",
    "preprocessing": "preprocessing-limited: the CPU is saturated — parallelize the map (num_parallel_calls), "
                     "vectorize (parse after batch), cache after "
                     "parse, move tokenization/masking offline, or add hosts",
    "mixed": "input-bound with the CPU partly busy: both storage reads and preprocessing count",
}


def refine(doc: dict, *, headroom: float | None, host: dict | None, ceiling: dict | None = None,
           demand: float | None = None, emulation: dict | None = None, read_share: float | None = None,
           model_on_host: bool = False, wait_share: float | None = None) -> dict:
    """The verdict with the run's input ceiling and host utilization read into it:
      * headroom < 1 → bottleneck "input" whatever the overlap (the pipeline alone is slower than the demand);
      * 1 ≤ headroom < HEADROOM_THIN → a "thin margin" note;
      * input-bound → the cause from the CPU and the reads' share of the step (input_cause; `model_on_host`
        passes on): waiting on storage
        or preprocessing-limited, its
        advice first, the other rows reordered to match (profile/advice.py order_for_cause);
      * emulated runs: the summary names the emulated devices and AU (MLPerf Storage) pass/fail.
    Adds "headroom", "input_cause", "notes"."""
    from tfbertperf.profile.advice import order_for_cause

    out = dict(doc)
    notes: list[str] = []
    if headroom is not None and ceiling is not None and demand:
        line = (f"input ceiling {ceiling['examples_per_sec']:.0f} examples/s vs demand {demand:.0f} → "
                f"headroom {headroom:.2f}")
        if headroom < 1.0:
            if out["bottleneck"] != "input":
                out["summary"] = f"input-bound (the pipeline alone cannot feed the demand): {out['summary']}"
            out["bottleneck"] = "input"
            notes.append(line + " < 1: input-bound whatever the overlap")
        elif headroom < HEADROOM_THIN:
            notes.append(line + f" < {HEADROOM_THIN}: thin margin")
        else:
            notes.append(line)
    cause, words = input_cause(host, read_share, model_on_host=model_on_host, wait_share=wait_share)
    if out["bottleneck"] == "input" and cause:
        out["summary"] += f"; {words} → {_CAUSE_TEXT[cause].split(':')[0]}"
        acts = order_for_cause(list(out.get("actions") or []), cause)
        acts.insert(0, {"advice": _CAUSE_TEXT[cause], "set": []})
        out["actions"] = acts
        out["recommendations"] = [a["advice"] for a in acts]
    if emulation and out["bottleneck"] != "input":
        # No model ran: the step is the emulated device's sleep; XLA/precision advice does not apply.
        out["bottleneck"] = "compute"
        out["actions"] = [{"advice": f"the input keeps up with {emulation['accelerators']} emulated "
                                     f"{emulation['device']}: raise emulate.accelerators (tfbertperf run "
                                     "--max-accelerators finds the largest N with AU >= the threshold)", "set": []}]
        out["recommendations"] = [a["advice"] for a in out["actions"]]
        out["summary"] = "compute-bound (emulated device)" + out["summary"][out["summary"].find(":"):]
    if emulation:  # one AU in the line: the emulated devices' (MLPerf Storage), not the trace's T_c / T
        out["summary"] = re.sub(r"; AU \d+% [≥<] \d+% → (pass|fail)", "", out["summary"])
        notes.insert(0, f"emulated {emulation['accelerators']} x {emulation['device']} ({emulation['step_ms']:.1f} ms "
                        f"per step): AU {emulation['au']:.1%} {'≥' if emulation['au_pass'] else '<'} "
                        f"{emulation['au_threshold']:.0%} → {'pass' if emulation['au_pass'] else 'fail'}")
    if notes:
        out["summary"] += "; " + "; ".join(notes)
    out.update({"headroom": headroom, "input_cause": cause if out["bottleneck"] == "input" else None,
                "notes": notes})
    return out
