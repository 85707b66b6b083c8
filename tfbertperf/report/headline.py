"""The one line a run opens with — verdict, the one input-cost figure with its source, the one action that matters
most — and the rules every view (console, report.md, TensorBoard) shares when it shows figures: rounding that fits
the noise, no line wider than the console, AU only where a device other than the CPU ran the step and explained
where it seems to disagree with the verdict, and what the run used (data, storage, service, precision …).

All functions read a report dict (report/SCHEMA.md); none measures anything.
"""

from __future__ import annotations

import re
import textwrap

WIDTH = 120  # console lines wrap here (never truncated)

INPUT_SOURCE = {  # report.json attribution key → the words the headline gives its source
    "input_cost_fraction": "measured what-if",
    "input_cost_estimate_unprofiled_fraction": "estimated from the capture, the profiler's cost measured out",
    "input_cost_estimate_fraction": "estimated from the capture",
    "input_bound_fraction": "blocked wait only",
}

CATEGORY_WORDS = {"input": "input wait", "host_to_device": "host → device copies", "kernel_launch": "kernel launch",
                  "device_to_device": "device ↔ device copies", "collectives": "collectives", "output": "output",
                  "compile": "compile", "other": "other / idle time", "host_compute": "host compute"}


def pct(x) -> str:
    """A fraction as a percentage with 2–3 significant digits: 0.178 → "18 %", 0.019 → "1.9 %", 1.0 → "100 %"."""
    if x is None:
        return "n/a"
    v = 100.0 * float(x)
    return f"{v:.0f} %" if abs(v) >= 10 or v == 0 else f"{v:.1f} %"


def sig(x, digits: int = 3) -> str:
    """A figure rounded to `digits` significant digits, thousands separated: 652.15 → "652", 44263.5 → "44,300",
    0.71234 → "0.712"."""
    if x is None:
        return "n/a"
    v = float(x)
    if v == 0:
        return "0"
    from math import floor, log10

    places = digits - 1 - floor(log10(abs(v)))
    r = round(v, places)
    return f"{r:,.{max(0, places)}f}"


def wrap(line: str, indent: str = "  ", width: int = WIDTH) -> list[str]:
    """One logical line as console lines of at most `width` characters; continuation lines indented."""
    if len(line) <= width:
        return [line]
    return textwrap.wrap(line, width=width, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False)


_LONG_DECIMAL = re.compile(r"(?<![\w.])(\d{2,}\.\d+|\d\.\d{3,})(?![\w.])")


def tidy_numbers(text: str) -> str:
    """Decimals in a sentence rounded to 3 significant digits ("headroom 652.15" → "headroom 652")."""
    return _LONG_DECIMAL.sub(lambda m: sig(float(m.group(1))).replace(",", ""), text)


def device_kind(report: dict) -> str:
    """"emulated", "accelerator" (a GPU/TPU ran the step) or "cpu" (the CPU is the device)."""
    if report.get("emulation"):
        return "emulated"
    att = report.get("attribution") or {}
    return "accelerator" if att.get("compute_on") == "accelerator" else "cpu"


def input_figure(report: dict) -> tuple[float | None, str]:
    """(the one input-cost fraction, its source words): the probe's what-if, else the capture's estimate (blocked
    wait + CPU the pipeline took from compute), else the blocked wait (xprof's, or the step timer's whole run)."""
    att = report.get("attribution") or {}
    for key, words in INPUT_SOURCE.items():
        if key == "input_bound_fraction" and (att.get("unprofiled") or {}).get("fractions"):
            fr = att["unprofiled"]["fractions"]  # a device's wait as the program runs without the profiler
            return float(fr["input"]) + float(fr["host_to_device"]), "blocked wait, the profiler's cost measured out"
        if att.get(key) is not None and not (key == "input_cost_fraction" and probe_ran_slower(att)):
            return float(att[key]), words
    st = report.get("step_timer") or {}
    if st.get("input_wait_fraction") is not None:
        return float(st["input_wait_fraction"]), "blocked wait only"
    return None, "blocked wait only"


def probe_ran_slower(att: dict) -> bool:
    """The compute-only probe's step was slower than the pipeline-fed one (report/caveats.py PROBE_SLOWER): the
    what-if then reads 0 % because the machine slowed, and the caveat says so — the answer takes the next figure."""
    from tfbertperf.report.caveats import PROBE_SLOWER

    tc, t = att.get("compute_only_step_ms"), att.get("steady_step_time_ms")
    return bool(tc and t and tc >= (1 + PROBE_SLOWER) * t)


def verdict_words(report: dict) -> str:
    """"input-bound (waiting on storage)", "compute-bound on the CPU", … — the bottleneck in the user's words;
    "undecided: input-bound or compute-bound on the CPU" where the what-if's interval straddles the line
    (profile/undecided.py)."""
    v = report.get("verdict") or {}
    b = v.get("bottleneck")
    if not b:
        return "not profiled"
    und = v.get("undecided")
    if und and len(und.get("between") or ()) == 2:
        one, two = (bottleneck_words(report, {**v, "bottleneck": x}) for x in und["between"])
        return f"undecided: {one} or {two}"
    return bottleneck_words(report, v)


def bottleneck_words(report: dict, v: dict) -> str:
    """The words for verdict `v`'s bottleneck (verdict_words)."""
    b = v.get("bottleneck")
    kind = device_kind(report)
    if b == "input":
        cause = {"storage": "waiting on storage", "preprocessing": "preprocessing: the CPU is saturated",
                 "mixed": "storage reads and preprocessing"}.get(v.get("input_cause") or "")
        return "input-bound" + (f" ({cause})" if cause else "")
    if b == "compute":
        e = report.get("emulation") or {}
        return {"cpu": "compute-bound on the CPU", "accelerator": "compute-bound on the accelerator",
                "emulated": f"compute-bound (emulated {e.get('accelerators')} × {e.get('device')})"}[kind]
    return {"transfer": "transfer-bound (host → device copies)",
            "other": "bound by other time (Python/eager overhead, idle)"}.get(b, f"{b}-bound")


def top_action(report: dict) -> str:
    """The one action that matters most: the verdict's first that names a setting (else its first), its context
    before the colon left out, with the setting that applies it."""
    v = report.get("verdict") or {}
    acts = v.get("actions") or [{"advice": r, "set": []} for r in v.get("recommendations") or []]
    if not acts:
        return ""
    a = next((x for x in acts if x.get("set")), acts[0])  # a setting to try beats a description of the cause
    text = a["advice"]
    head, sep, rest = text.partition(": ")
    if sep and len(head) < 70 and "--set" not in head:  # "compute-bound on CPU: the input keeps up; …"
        text = rest
    sets = a.get("set") or []
    text = re.sub(r"\((--set [^;()]+);[^()]*\)", r"(\1)", text)  # the setting stays; its measured gain is advice's
    if sets and "--set" not in text:
        text += " (" + " ".join(f"--set {s}" for s in sets) + ")"
    return tidy_numbers(text)


def headline(report: dict) -> dict:
    """report.json `headline`: {"line", "verdict", "input_cost_fraction", "input_cost_source", "action"}."""
    share, source = input_figure(report)
    words = verdict_words(report)
    action = top_action(report)
    ci = (report.get("attribution") or {}).get("input_cost_ci95") if source == INPUT_SOURCE.get(
        "input_cost_fraction") else None
    pm = "" if ci is None else f" ± {100 * ci:.0f} pp" if ci >= 0.01 else f" ± {100 * ci:.1f} pp"
    line = f"{words}: input costs {pct(share)}{pm} of the step ({source})"
    if action:
        line += f" — next: {action}"
    return {"line": line, "verdict": (report.get("verdict") or {}).get("bottleneck"), "input_cost_fraction":
            None if share is None else round(share, 4), "input_cost_source": source, "action": action,
            "input_cost_ci95": None if ci is None else round(ci, 4),
            "undecided": bool((report.get("verdict") or {}).get("undecided"))}


def au_explained(report: dict) -> str | None:
    """AU where a device other than the CPU ran the step, explained in place when it seems to contradict the
    verdict; None on a CPU-only run (there T_c / T is 1 − the what-if input cost: the headline's figure)."""
    au = report.get("accelerator_utilization")
    kind = device_kind(report)
    if au is None or kind == "cpu":
        return None
    att = report.get("attribution") or {}
    e = report.get("emulation") or {}
    thr = e.get("au_threshold") or att.get("au_threshold") or \
        ((report.get("config") or {}).get("profile") or {}).get("au_threshold") or 0.9
    passed = au >= thr
    what = ("emulated devices' compute ÷ wall" if kind == "emulated" else "device busy ÷ wall")
    text = f"accelerator utilization ({what}): {pct(au)} {'≥' if passed else '<'} {pct(thr)} → {'pass' if passed else 'fail'}"
    b = (report.get("verdict") or {}).get("bottleneck")
    fr = att.get("fractions") or {}
    if not passed and b != "input":
        idle = {k: fr.get(k, 0.0) for k in CATEGORY_WORDS if k not in ("host_compute",)}
        if kind == "accelerator":
            idle["host_compute"] = fr.get("host_compute", 0.0)
        cat = max(idle, key=idle.get) if idle else None
        if cat and idle[cat] > 0:
            text += f" because {CATEGORY_WORDS[cat]} takes {pct(idle[cat])} of the step"
        else:
            text += " because the devices wait between steps"
        text += f", not input ({b}-bound)"
    elif passed and b == "input":
        text += " though input-bound: the devices stay busy while the step waits longer on input than compute"
    return text


def data_words(report: dict) -> str:
    """Where the data came from: issue 28's report.json data.summary when present, else what the config says."""
    d = report.get("data") or {}
    if d.get("summary"):
        return d["summary"]
    data = (report.get("config") or {}).get("data") or {}
    if not data.get("uri"):
        corpus = data.get("corpus") or "Python's bundled pydoc text"
        return f"prepared by tfbertperf from {corpus}"
    return "prepared by tfbertperf (manifest.json)"


def data_line(report: dict) -> str | None:
    """Where the run's data came from, in one line (report.json `data`; None for a report without it)."""
    d = report.get("data") or {}
    if not d.get("summary"):
        return None
    tail = ("; no checksums to verify (sizes from the storage listing)" if d.get("origin") == "user"
            else "; checksums verified" if d.get("checksums_verified") else "")
    return f"data: {d['summary']} at {d.get('uri')}{tail}"


def service_words(report: dict) -> str:
    """The tf.data service: mode, workers, wait per step, clean shutdown — or "off"."""
    s = report.get("data_service")
    if not s:
        return "off"
    workers = s.get("workers_started")
    parts = [f"{s.get('setting')} ({s.get('processing_mode')})"]
    if workers is not None:
        parts.append(f"{workers} workers" + (f", {s['workers_lost']} lost" if s.get("workers_lost") else ""))
    if s.get("wait_ms_per_step") is not None:
        parts.append(f"wait {sig(s['wait_ms_per_step'])} ms/step")
    sd = s.get("shutdown")
    if sd is not None:
        parts.append("clean shutdown" if sd.get("clean") else f"shutdown NOT clean ({sd})")
    return ", ".join(parts)


def used_lines(report: dict) -> list[str]:
    """What the run used, "name: value" each: data origin, storage, pipeline, data service, emulation, precision,
    strategy, the profiled window."""
    cfg = report.get("config") or {}
    sto = report.get("storage") or {}
    tr = cfg.get("train") or {}
    e = report.get("emulation")
    pipe = report.get("pipeline") or cfg.get("pipeline") or {}
    replicas = (report.get("training") or {}).get("replicas")
    data = cfg.get("data") or {}
    slow = "".join([f", emulated latency {sig(data['read_latency_ms'])} ms per read" if data.get("read_latency_ms")
                    else "", f", reads capped at {sig(data['read_bandwidth_mbps'])} MB/s"
                    if data.get("read_bandwidth_mbps") else ""])
    out = [data_line(report) or f"data: {data_words(report)}",
           f"storage: {sto.get('backend', 'local')}, mode {sto.get('mode', 'local')}{slow}, {sto.get('uri') or '—'}"
           + (" (shard reads in the tf.data service workers)" if sto.get("shard_reads_in") else ""),
           f"pipeline: {pipe.get('preset', 'tuned')} preset; data service: {service_words(report)}",
           f"emulation: {e['accelerators']} × {e['device']}, {sig(e['step_ms'])} ms per step, global batch "
           f"{e.get('global_batch_size')}, demand {sig(e.get('demand_examples_per_sec'))} examples/s" if e else
           "emulation: none (the real model ran)",
           f"precision: {tr.get('precision', 'float32')}" + (", XLA" if tr.get("jit") else "")
           + f"; strategy: {tr.get('strategy', 'default')}" + (f" ({replicas} replica{'s' * (replicas != 1)})"
                                                                 if replicas else "")]
    pw = report.get("profile_window") or {}
    if pw.get("note"):
        out.append(pw["note"].replace("profiled steps", "profile: steps", 1))
    return out


GLOSSARY = [  # (term as the console prints it, definition): report.md's glossary; README's defines the same terms
    ("answer", "the verdict, the one input-cost figure with its source, and the one action that matters most"),
    ("input cost, what-if", "(T − T_c) / T: T is the run's mean step time, T_c the same model's step in the same "
     "run fed one cached in-memory batch (the compute-only probe) — how much faster a step would be with free input; "
     "it counts the CPU the pipeline takes from compute"),
    ("undecided", "the what-if's 95 % interval (± pp, from the spread of the probe's blocks) reaches across the "
     "20 % input-bound line: measured again the program may land on the other side, so both bottlenecks are named "
     "and the first action is to measure longer"),
    ("estimated from the capture", "without a probe: the blocked wait plus the CPU the pipeline's threads took from "
     "compute in the profiled steps; \"the profiler's cost measured out\": the same milliseconds ÷ the step measured "
     "without the profiler (the step times beside a user's capture)"),
    ("input-bound, direct", "xprof's input + host→device share of the profiled step: the time the step waited"),
    ("time blocked in next()", "the always-on step timer: the share of every step after warm-up spent waiting in "
     "next(iterator)"),
    ("blocked wait only", "the answer's source when neither the probe nor the capture's estimate is there"),
    ("accelerator utilization", "on a GPU/TPU the devices' busy time ÷ wall time of the profiled steps; emulated, "
     "the devices' compute ÷ wall (MLPerf Storage); pass at profile.au_threshold (0.90). Not shown where the CPU "
     "is the device: there T_c / T is 1 − the what-if input cost"),
    ("input ceiling, headroom", "the pipeline run alone after training (examples/s), and that ÷ the examples/s "
     "the step demands; below 1 the input cannot keep up whatever the overlap"),
    ("share", "of the mean profiled step time; the categories add up to 100 %"),
]


def glossary_markdown() -> list[str]:
    return ["## Glossary", ""] + [f"- **{term}** — {text}" for term, text in GLOSSARY] + [""]
