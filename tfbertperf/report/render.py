"""Human-readable views of a report.json: the printed attribution table and report.md."""

from __future__ import annotations

from tfbertperf.report.plots import CATEGORY_ORDER

SCHEMA = "tfbertperf.report/1"

LABELS = {
    "input": "input (storage + preprocessing wait)",
    "host_to_device": "host → device transfer",
    "device_compute": "device compute",
    "host_compute": "host compute",
    "kernel_launch": "kernel launch",
    "device_to_device": "device ↔ device",
    "collectives": "collectives",
    "output": "output",
    "compile": "compile",
    "other": "other / idle",
}


def _pct(x) -> str:
    return "n/a" if x is None else f"{100.0 * float(x):5.1f} %"


def attribution_table(report: dict) -> str:
    """The table printed at the end of a run: category, ms/step, % of the profiled step."""
    att = report.get("attribution") or {}
    bd = att.get("breakdown_ms") or {}
    fr = att.get("fractions") or {}
    lines = []
    head = f"{'category':<40} {'ms/step':>9} {'share':>8}"
    lines.append(head)
    lines.append("-" * len(head))
    for cat in CATEGORY_ORDER:
        ms = float(bd.get(cat, 0.0))
        if ms <= 0.0 and cat not in ("input", "device_compute", "host_compute", "other"):
            continue
        lines.append(f"{LABELS.get(cat, cat):<40} {ms:9.2f} {_pct(fr.get(cat, 0.0)):>8}")
    lines.append("-" * len(head))
    lines.append(f"{'step time (profiled window, ' + str(att.get('steps_profiled', 0)) + ' steps)':<40} "
                 f"{float(att.get('step_time_ms', 0.0)):9.2f} {'100.0 %':>8}")
    lines.append("")
    lines.append(f"input-bound, direct (xprof input + h2d share):   {_pct(att.get('input_bound_fraction'))}")
    lines.append(f"input cost, what-if ((T - T_c) / T, probe):      {_pct(att.get('input_cost_fraction'))}")
    st = report.get("step_timer") or {}
    if st:
        lines.append(f"time blocked in next(), whole run (step timer):  {_pct(st.get('input_wait_fraction'))}")
    au = report.get("accelerator_utilization")
    if au is not None:
        lines.append(f"accelerator utilization (MLPerf Storage):        {_pct(au)}")
    for key, label in (("input_ops_us", "input ops, µs/step (xprof)"),
                       ("input_split_us", "input ops, µs/step, with our storage read time")):
        ops = att.get(key) or {}
        if ops:
            lines.append(f"{label}: " + ", ".join(f"{k} {float(v):.0f}" for k, v in ops.items()))
    return "\n".join(lines)


def verdict_line(report: dict) -> str:
    v = report.get("verdict") or {}
    summary = v.get("summary") or ""
    if summary.startswith(f"{v.get('bottleneck')}-bound"):
        return f"verdict: {summary}"
    return f"verdict: {v.get('bottleneck', 'unknown')}-bound — {summary}".rstrip(" —")


def render_markdown(report: dict) -> str:
    """report.md: what a person reads first."""
    m = report.get("model") or {}
    tp = report.get("throughput") or {}
    stm = tp.get("step_time_ms") or {}
    tr = report.get("training") or {}
    sto = report.get("storage") or {}
    v = report.get("verdict") or {}
    cfg = report.get("config") or {}
    out = [
        f"# tfbertperf run `{report.get('run_id', '')}`",
        "",
        f"- created: {report.get('created', '')}  workload: `{report.get('workload', '')}`",
        f"- model: BERT-{m.get('size')} ({m.get('task')}), {int(m.get('parameters') or 0):,} parameters, "
        f"L{m.get('layers')}/H{m.get('hidden')}/A{m.get('heads')}",
        f"- data: `{sto.get('uri', '')}` (backend {sto.get('backend')}, mode {sto.get('mode')}), "
        f"pipeline preset `{(cfg.get('pipeline') or {}).get('preset')}`",
        f"- training: {tp.get('steps')} steps, global batch {tr.get('global_batch_size')}, "
        f"{tr.get('replicas')} replica(s), final loss {tr.get('final_loss')}",
        f"- throughput: {tp.get('examples_per_sec')} examples/s, {tp.get('tokens_per_sec')} tokens/s; step time "
        f"mean {stm.get('mean')} ms, p50 {stm.get('p50')}, p90 {stm.get('p90')}, max {stm.get('max')}",
        "",
        "## Where the step time goes",
        "",
        "```",
        attribution_table(report),
        "```",
        "",
        f"**Verdict: {v.get('bottleneck', 'unknown')}-bound.** {v.get('summary', '')}",
        "",
    ]
    recs = v.get("recommendations") or []
    if recs:
        out += ["### Recommendations", ""] + [f"- {r}" for r in recs] + [""]
    if sto:
        lat = sto.get("request_latency_ms") or {}
        out += [
            "## Storage",
            "",
            f"{sto.get('requests', 0)} requests, {sto.get('bytes_read', 0):,} bytes, "
            f"{sto.get('read_mb_per_sec', 0)} MB/s; request latency p50 {lat.get('p50')} ms, p90 {lat.get('p90')} ms, "
            f"p99 {lat.get('p99')} ms; retries {sto.get('retries', 0)}, errors {sto.get('errors', 0)}",
            "",
        ]
    art = report.get("artifacts") or {}
    for p in art.get("plots") or []:
        out.append(f"![step-time breakdown]({p})")
    out += [
        "",
        f"TensorBoard (scalars and the Profile tab): `tensorboard --logdir {art.get('tensorboard', 'tensorboard')}`",
        "",
        "Definitions: fractions are of the mean profiled step time. *input-bound (direct)* is xprof's input + "
        "host→device share; *input cost (what-if)* is (T − T_c) / T, where T_c is the step time of the same model "
        "fed a cached in-memory batch inside the same run; *accelerator utilization* is compute time / total time "
        "(MLPerf Storage).",
        "",
    ]
    return "\n".join(out)
