"""Console views: the table a run prints, analyze's per-host tables, and the lines around them."""

from __future__ import annotations

import re

from tfbertperf.profile import host_loader, machine_load, outside_steps, step_gaps
from tfbertperf.report.headline import (au_explained, data_line, headline, input_figure, pct, probe_ran_slower, sig,
                                       tidy_numbers, used_lines, verdict_words, wrap)
from tfbertperf.report.plots import CATEGORY_ORDER

LABELS = {
    "input": "input (storage + preprocessing wait)", "host_to_device": "host → device transfer",
    "device_compute": "device compute", "host_compute": "host compute", "kernel_launch": "kernel launch",
    "device_to_device": "device ↔ device", "collectives": "collectives", "output": "output", "compile": "compile",
    "other": "other / idle",
}


def _pct(x) -> str:
    return f"{pct(x):>7}"


def attribution_table(report: dict) -> str:
    """The breakdown (category, ms/step, % of the profiled step), then the other figures, each once (README and
    report.md glossary): the input figures, AU where a device other than the CPU ran the step, the input ops."""
    att = report.get("attribution") or {}
    bd = att.get("breakdown_ms") or {}
    fr = att.get("fractions") or {}
    head = f"{'category':<40} {'ms/step':>9} {'share':>8}"
    lines = [head, "-" * len(head)]
    for cat in CATEGORY_ORDER:
        ms = float(bd.get(cat, 0.0))
        if ms <= 0.0 and cat not in ("input", "device_compute", "host_compute", "other"):
            continue
        lines.append(f"{LABELS.get(cat, cat):<40} {ms:9.2f} {_pct(fr.get(cat, 0.0)):>8}")
    lines.append("-" * len(head))
    lines.append(f"{'step time (profiled window, ' + str(att.get('steps_profiled', 0)) + ' steps)':<40} "
                 f"{float(att.get('step_time_ms', 0.0)):9.2f} {_pct(1.0):>8}")
    lines.append("")
    lines.append(f"input cost, what-if ((T - T_c) / T, probe):     {_pct(att.get('input_cost_fraction'))}"
                 + ("   (the probe ran slower than training: see the caveat)" if probe_ran_slower(att) else ""))
    if att.get("input_cost_fraction") is None and att.get("input_cost_estimate_fraction") is not None:
        lines.append(f"input cost, estimated (wait + stolen CPU):      {_pct(att['input_cost_estimate_fraction'])}")
    lines.append(f"input-bound, direct (xprof input + h2d share):  {_pct(att.get('input_bound_fraction'))}")
    st = report.get("step_timer") or {}
    if st:
        lines.append(f"time blocked in next(), whole run (step timer): {_pct(st.get('input_wait_fraction'))}")
    lines += [x for x in (_input_gap(report), au_explained(report)) if x]
    lines += input_ops_lines(att)
    return "\n".join(x for line in lines for x in (wrap(line) if line else [line]))


def _input_gap(report: dict) -> str | None:
    """Why the headline's input figure and the blocked wait differ, when they differ by 10 points or more."""
    share, source = input_figure(report)
    wait = (report.get("attribution") or {}).get("input_bound_fraction")
    if share is None or wait is None or abs(share - wait) < 0.10 or source == "blocked wait only":
        return None
    return (f"  ({source} {pct(share)} vs blocked wait {pct(wait)}: the what-if also counts the CPU the pipeline "
            "takes from compute and the machine's drift between probe and steps; the wait counts waiting only)")


def input_ops_lines(att: dict, indent: str = "") -> list[str]:
    """The input-op lines `run` and `analyze` both print (the same figures, the same labels): xprof's own split
    per profiled step, then, for our runs, the split with our storage layer's read time (input_split_us)."""
    out = []
    # per step of wall time (≤ the step); xprof's sum over threads beside it, labelled (steptable.py)
    for key, label in (("input_ops_us", "input ops, µs/step of wall time (xprof)"),
                       ("input_split_us", "input ops, µs/step, with our storage read time")):
        ops = att.get(key) or {}
        if ops and (key == "input_split_us" or any(ops.values())):
            out.append(f"{indent}{label}: " + ", ".join(f"{k} {float(v):.0f}" for k, v in ops.items()))
            thread = att.get("input_ops_thread_us") or {}
            if key == "input_ops_us" and att.get("input_ops_concurrency"):
                out[-1] += (f" (summed over threads: {sum(thread.values()):.0f}, "
                            f"{att['input_ops_concurrency']:.1f}× — parallel and waiting iterators each count)")
    return out


_AU_CLAUSE = re.compile(r"; [^;]*AU \d+(?:\.\d+)?% [≥<] \d+% → (?:pass|fail)")
_CEILING_CLAUSE = re.compile(r"; input ceiling \d+ examples/s vs demand \d+ → headroom [\d.]+(?=;|$)")


_WHAT = re.compile(r"^(?:[a-z-]+-bound[^:]*|bound by [^:]*): ")
_INPUT_CLAUSE = re.compile(r"^input costs \d+% of the [\d.]+ ms step \([^()]*\)(?:; )?")


def verdict_line(report: dict) -> str:
    """"verdict: <bottleneck in words>[ — why]": the summary's reasoning with the figures said elsewhere left out
    (the headline's input cost, AU's own line, a comfortable input ceiling's), decimals to 3 significant digits."""
    summary = (report.get("verdict") or {}).get("summary") or ""
    why = _CEILING_CLAUSE.sub("", _AU_CLAUSE.sub("", summary))
    while _WHAT.match(why):
        why = _WHAT.sub("", why, count=1)
    why = tidy_numbers(_INPUT_CLAUSE.sub("", why).strip("; "))
    return f"verdict: {verdict_words(report)}" + (f" — {why}" if why else "")


ROW_LABELS = {
    "input": "input (blocked wait)",
    "host_to_device": "host→device",
    "device_compute": "device compute",
    "host_compute": "host compute",
    "kernel_launch": "kernel launch",
    "device_to_device": "device→device",
    "collectives": "collectives",
    "output": "output",
    "compile": "compile",
    "other": "other",
}


def host_table(att: dict, title: str) -> str:
    """Attribution block → text table (category, ms/step, %), nonzero categories only, then the input figures."""
    notes = [x for n in [*(att.get("step_table") or {}).get("notes", []), *step_gaps.note(att), *machine_load.note(
        att), *host_loader.unrecorded_note(att), *outside_steps.note(att)] for x in wrap(f"  {n}", "    ")]
    lines = [f"{title}: {att['steps_profiled']} steps, {att['step_time_ms']:.2f} ms/step", *notes,
             f"  {'category':<24}{'ms/step':>10}{'%':>8}"]
    for cat, label in ROW_LABELS.items():
        ms, fr = att["breakdown_ms"][cat], att["fractions"][cat]
        if ms > 0.0005 or cat in ("input", "other"):
            lines.append(f"  {label:<24}{ms:>10.2f}{fr * 100:>7.1f}%")
    lines.append(f"  {'input share, direct':<24}{'':>10}{att['input_bound_fraction'] * 100:>7.1f}%")
    if att.get("input_cost_estimate_fraction") is not None:
        lines.append(f"  {'input share, + stolen CPU':<24}{'':>10}{att['input_cost_estimate_fraction'] * 100:>7.1f}%"
                     f"   (blocked wait + CPU the pipeline took from compute on {att.get('cores_seen')} cores)")
    if att.get("input_cost_fraction") is not None:
        lines.append(f"  {'input cost, what-if':<24}{'':>10}{att['input_cost_fraction'] * 100:>7.1f}%")
    lines += input_ops_lines(att, "  ")
    tr = att.get("transfer")
    if tr and tr.get("steps_matched"):
        taken = ", ".join(f"{k} {v / att['steps_profiled']:.3f}" for k, v in tr["taken_from_ms"].items() if v > 0)
        lines.append(f"  host→device from the device planes: {tr['moved_ms'] / att['steps_profiled']:.3f} ms/step "
                     f"exposed ({tr['inflight_ms_per_step']:.3f} in flight), taken from xprof's {taken or '—'}")
    return "\n".join(lines)


def au_line(doc: dict) -> str:
    """AU and what it is: device busy ÷ wall on accelerators, MLPerf's T_c / T (or compute share) on the host."""
    att = doc.get("attribution") or {}
    au = doc["accelerator_utilization"]
    if att.get("compute_on") == "accelerator":
        over = "the unprofiled step (step file)" if att.get("unprofiled") else "wall over the profiled steps"
        text = f"AU {au:.1%} (device busy ÷ {over})"
    else:
        text = f"AU {au:.1%}"
    if att.get("au_compute_only_ratio") is not None and att.get("compute_on") == "accelerator":
        text += f", T_c/T {att['au_compute_only_ratio']:.1%}"
    return text


def regime_lines(report: dict) -> list[str]:
    """The two facts a user checks next — can the pipeline feed the device, is the CPU busy or waiting — and what
    the storage did (report.json input_ceiling, headroom, storage, host_utilization, max_accelerators).  The
    emulated devices' AU is au_line's, their settings used_lines' (each figure said once)."""
    out = []
    c = report.get("input_ceiling")
    if c:
        h = report.get("headroom")
        out.append(f"input ceiling: {sig(c['examples_per_sec'])} examples/s, {sig(c['mb_per_sec'])} MB/s (pipeline alone, "
                   f"{c['seconds']:.1f} s)" + (f"; headroom {_headroom(h)}× the demand" if h is not None else "")
                   + ("; below 1: the pipeline alone cannot feed the step" if h is not None and h < 1 else ""))
    line = storage_line(report.get("storage") or {})
    if line:
        out.append(line)
    u = report.get("host_utilization")
    if u and u.get("samples"):
        out.append(f"host: CPU {u['cpu_busy_fraction_mean']:.0%} busy (p95 {u['cpu_busy_fraction_p95']:.0%}; this run "
                   f"{u['process_cpu_fraction_mean']:.0%}), iowait {u['cpu_iowait_fraction_mean']:.0%}, RSS "
                   f"{u['rss_mb_max']:.0f} MB, disk read {u['disk_read_mb']:.1f} MB, net recv {u['net_rx_mb']:.1f} MB"
                   + _whole_run_io(u))
        th = u.get("thread_cpu") or {}
        if th:
            out.append(f"this run's threads: {th['process_cores_used']:.2f} cores used, "
                       f"{th['process_cores_wanted']:.2f} wanted (with the run queue's wait); busiest thread {th['busiest_thread_wanted_fraction']:.0%} "
                       f"of a core → CPU saturation {th['cpu_saturation_fraction']:.0%}")
    m = report.get("max_accelerators")
    if m:
        out.append(f"max accelerators: N = {m['n']} (AU {pct(m['au_at_n'])} at N, {pct(m['au_at_n_plus_1'])} at N+1; "
                   f"{sig(m['examples_per_sec_at_n'] or 0)} examples/s at N; {len(m['trials'])} short runs)")
    return ["", *out] if out else []


def _headroom(h: float) -> str:
    """Headroom as the verdict words it: two decimals up to its thin-margin mark, 3 significant digits above."""
    return f"{h:.2f}" if h < 10 else sig(h)


def _whole_run_io(u: dict) -> str:
    """The host's I/O over the whole run when it differs from the measured steps' (a small data set is read or
    staged before the measured steps begin: "net recv 0.0 MB" there, the reads came earlier)."""
    w = u.get("whole_run") or {}
    parts = [f"{k} {w[key]:.1f} MB" for k, key in (("disk read", "disk_read_mb"), ("net recv", "net_rx_mb"))
             if w.get(key) is not None and round(w[key], 1) != round(u.get(key) or 0.0, 1)]
    return f" in the measured steps ({', '.join(parts)} over the whole run)" if parts else ""


def storage_line(sto: dict) -> str | None:
    """Remote runs: what the storage did — requests, MB from the store (and, staged, from the local cache),
    read MB/s, request latency, retries and errors (report.json storage)."""
    if not sto or sto.get("backend") in (None, "local"):
        return None
    mb = (sto.get("bytes_read") or 0) / 1e6
    lat = sto.get("request_latency_ms") or {}
    text = (f"storage: {sto['backend']}/{sto.get('mode')}: {sto.get('requests', 0)} requests, {mb:.2f} MB from the "
            f"store at {sto.get('read_mb_per_sec') or 0:.1f} MB/s")
    if sto.get("cache_hit_bytes") is not None:
        text += (f" + {sto['cache_hit_bytes'] / 1e6:.2f} MB from the local stage cache ({sto.get('cache_hits', 0)} "
                 f"hits, {sto.get('cache_misses', 0)} misses)")
    return (text + f"; request p50 {lat.get('p50', 0):.1f} ms, p99 {lat.get('p99', 0):.1f} ms; retries "
            f"{sto.get('retries', 0)}, errors {sto.get('errors', 0)}")


def run_summary_lines(run_dir, report: dict) -> list[str]:
    """What `tfbertperf run` prints at the end, in reading order: the answer (one line), the run's size and speed,
    caveats, the breakdown and the other figures, the verdict's reasoning and advice, what the run used, the
    host and storage figures, where the files are.  No line is wider than headline.WIDTH (wrapped, not cut)."""
    tp = report["throughput"]
    out = [f"answer: {headline(report)['line']}", ""]
    out.append(f"BERT-{report['model'].get('size')} {report['model'].get('task')}: "
               f"{report['model'].get('parameters', 0):,} parameters; {tp['steps']} steps, "
               f"{sig(tp['examples_per_sec'])} examples/s, step time mean {sig(tp['step_time_ms']['mean'])} ms")
    if report.get("incomplete"):
        planned = ((report.get("config") or {}).get("train") or {}).get("steps")
        out.append(f"INCOMPLETE: interrupted (Ctrl-C) after step {report.get('interrupted_at_step')} of {planned}; "
                   "the figures cover the steps done")
    if report.get("resumed_from_step"):
        out.append(f"resumed from the checkpoint after step {report['resumed_from_step']}")
    out += [f"caveat: {c}" for c in report.get("caveats") or []]
    if report.get("attribution"):
        out += ["", attribution_table(report)]
        if report.get("devices"):
            from tfbertperf.profile.devices import format_device_table

            out += ["", format_device_table(report["devices"])]
        if report["attribution"].get("hardware_warning"):
            out.append(f"warning: {report['attribution']['hardware_warning']}")
        out += ["", verdict_line(report)]
        out += [f"  - {tidy_numbers(r)}" for r in (report.get("verdict") or {}).get("recommendations") or []]
    out += ["", "what this run used:"] + [f"  {line}" for line in used_lines(report)]
    out += regime_lines(report)
    for w in report.get("workers") or []:
        a = w.get("attribution") or {}
        out.append(f"worker {w['worker']}: {a.get('steps_profiled', 0)} steps profiled, step {sig(a.get('step_time_ms', 0))} "
                   f"ms, input cost {pct(a.get('input_cost_fraction') or 0)}, "
                   f"{(w.get('verdict') or {}).get('bottleneck')}-bound")
    out += ["", f"report: {run_dir / 'report.json'}   (also report.md, plots/)",
            f"TensorBoard: tensorboard --logdir {run_dir.parent}   → Text tab (the answer), Scalars, Profile"]
    return [x for line in out for piece in line.split("\n") for x in (wrap(piece, "    " if piece.startswith("  ")
                                                                              else "  ") if piece else [piece])]


def print_run_summary(run_dir, report: dict) -> None:
    """Print run_summary_lines (tools/readme_output.py pastes this into README)."""
    print()
    print("\n".join(run_summary_lines(run_dir, report)))


def measured_lines(doc: dict) -> list[str]:
    """What `analyze` measured rather than estimated (the step file's figures, profile/stepfile.py), or the line
    saying the cost is estimated; the capture's estimate beside a measured figure."""
    att, sf = doc.get("attribution") or {}, doc.get("step_file")
    pc = att.get("profiler_cost") or {}
    est = pc.get("added_ms_per_step_estimate")
    estimated = "" if est is None else f"profiler cost: ~{est:.1f} ms a step, estimated"
    if not sf:
        return [f"{estimated} (no step file beside the capture: tfbertperf.keras.ProfileCallback or "
                "tfbertperf.jax_steps write one)"] if estimated else []
    out = [f"step file {sf['file']}: {sf['unprofiled_steps']} unprofiled steps"]
    if sf["unprofiled_step_ms"] is not None:
        k = sf.get("batches_per_step") or 1  # steps_per_execution=k: a step is one call of k batches
        out[0] += f", {sf['unprofiled_step_ms']:.2f} ms/step" + (f" (a step: one call of {k} batches)" if k > 1 else "")
        if pc.get("not_measured"):
            out.append(f"{estimated or 'profiler cost'} — {pc['not_measured']}")
        elif pc.get("added_ms_per_step") is not None:
            out.append(f"profiler cost (measured): {pc['added_ms_per_step']:+.2f} ms a step "
                       f"({100 * (pc.get('added_fraction') or 0):.1f} % of the captured "
                       f"{pc['captured_step_ms']:.2f} ms step)")
    else:
        out[0] += " (every step was profiled or warm-up: the profiler's cost stays estimated)"
    if sf.get("input_cost_fraction") is not None:
        ci, cut, tail = sf.get("input_cost_ci95"), sf.get("compute_only_interrupted"), sf.get("probe_after_steps")
        out.append(f"input cost (measured): {100 * sf['input_cost_fraction']:.1f} %" + (
            f" ± {100 * ci:.1f} (95 %, from the spread of its blocks: more probe steps narrow it)" if ci is not None
            else "") + "  ((T − T_c) / T, each probe block against " + ("its stretch of the fit's steps, all run "
            "after its last step" if tail else "the real steps around it") + f": T "
            f"{sf['unprofiled_step_ms']:.2f} ms on the real pipeline, T_c {sf['compute_only_step_ms']:.2f} ms on one "
            f"cached batch, {sf['compute_only_steps']} probe steps in {len(sf['T_c_blocks_ms']) or 1} blocks"
            + (f", {cut} interrupted left out (over 4× the median)" if cut else "") + ")")
    unprof = att.get("input_cost_estimate_unprofiled_fraction")
    if unprof is not None:
        out.append(f"input cost (estimated from the capture, of the unprofiled step): {100 * unprof:.1f} %  (wait + "
                   "stolen CPU kept, the profiler's cost out of the rest)")
    if unprof is not None and att.get("input_cost_estimate_unprofiled_caveat"):
        out.append(f"  but {att['input_cost_estimate_unprofiled_caveat']}")
    if att.get("input_cost_estimate_fraction") is not None and (sf.get("input_cost_fraction"), unprof) != (None, None):
        out.append(f"input cost (estimated from the capture alone): {100 * att['input_cost_estimate_fraction']:.1f} %")
    from tfbertperf.profile.unprofiled import disagreement  # why the estimate and the measured figure differ
    return out + [f"  {why}" for why in [disagreement(att, sf)] if why]


def print_analysis(doc: dict) -> None:
    """What `tfbertperf analyze` prints: a table per host (and combined), the devices, AU, verdict, advice,
    validation.  Without step markers (doc["steps_marked"] False): the device table only (analyze adds the note)."""
    from tfbertperf.profile.devices import format_device_table

    devs = doc.get("devices") or []
    if doc.get("steps_marked") is False:
        print(format_device_table(devs))
        return
    if doc.get("headline"):  # first, as a run's console opens (report/headline.py)
        print("\n".join(wrap(f"answer: {doc['headline']['line']}")))
    hosts = doc["hosts"]
    for host, att in hosts.items():  # one host: its table is the run's attribution (with the joined input split)
        print(host_table(doc["attribution"] if len(hosts) == 1 else att, f"host {host}"))
    if len(hosts) > 1:
        print(host_table(doc["attribution"], f"combined ({len(hosts)} hosts)"))
    if devs:
        print(format_device_table(devs))
    att = doc.get("attribution") or {}
    if att.get("source") == "device_idle":  # say what the step is, and xprof's own reading beside it
        xs = att.get("xprof_step_time_ms")
        skipped = (att.get("xprof") or {}).get("ran") is False
        print(f"step = wall time from {att['step_source']}; device idle charged to the host's work"
              + (f" (xprof's own step: {xs:.2f} ms of device time)" if xs else
                 " (xprof's converter not run: --xprof always adds its step table)" if skipped else ""))
    warning = att.get("hardware_warning")
    if warning:
        print(f"warning: {warning}")
    for line in measured_lines(doc):
        print("\n".join(wrap(line)))
    if att.get("compute_on") == "accelerator":
        line = f"{au_line(doc)}   verdict: {doc['verdict']['summary']}"
    else:  # the CPU is the device: no accelerator utilization beside the verdict (issue 30)
        line = f"verdict: {_AU_CLAUSE.sub('', doc['verdict']['summary'])}"
    print("\n".join(wrap(line)))
    for r in doc["verdict"]["recommendations"]:
        print("\n".join(wrap(f"  → {r}", "    ")))
    v = doc.get("validation")
    if v:
        from tfbertperf.report.stats import fmt

        print(f"validation, {v['repeat']} runs each ({v['order']}); baseline "
              f"{fmt(v['baseline']['examples_per_sec'])} examples/s:")
        for r in v["results"]:
            print(f"  {'✓' if r['confirmed'] else '✗'} {r['advice']}: {fmt(r['examples_per_sec'])} examples/s → "
                  f"{r['note']}")
        print(f"  validated: {', '.join(v['validated']) or 'none'}")
