"""Markdown views: report.md of a run and comparison.md of a comparison."""

from __future__ import annotations

from tfbertperf.report.console import attribution_table, regime_lines
from tfbertperf.report.plots import CATEGORY_ORDER


def run_markdown(report: dict) -> str:
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
        *[f"- {line}" for line in regime_lines(report) if line],
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


def _fmt(x, pct=False) -> str:
    if x is None:
        return "n/a"
    return f"{100 * float(x):.1f} %" if pct else f"{float(x):.2f}"


def comparison_markdown(doc: dict) -> str:
    """comparison.md: the table, the breakdown, the environment differences."""
    rows = doc["rows"]
    out = [f"# tfbertperf comparison `{doc['id']}`", ""]
    if doc.get("axes"):
        out += ["Matrix: " + " × ".join(f"`{k}` ∈ {{{', '.join(v)}}}" for k, v in doc["axes"]), ""]
    out += ["| run | examples/s | step ms | input-bound (direct) | input cost (what-if) | blocked in next() | AU | "
            "bottleneck |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['label']} | {_fmt(r['examples_per_sec'])} | {_fmt(r['step_time_ms'])} | "
                   f"{_fmt(r['input_bound_fraction'], True)} | {_fmt(r['input_cost_fraction'], True)} | "
                   f"{_fmt(r['input_wait_fraction'], True)} | {_fmt(r['accelerator_utilization'], True)} | "
                   f"{r['bottleneck']} |")
    if rows and rows[0].get("examples_per_sec"):
        base = rows[0]["examples_per_sec"]
        out += ["", "Throughput relative to the first run: " + ", ".join(
            f"{r['label']} {float(r['examples_per_sec'] or 0) / base:.2f}×" for r in rows)]
    out += ["", "## Breakdown, ms per profiled step", "",
            "| run | " + " | ".join(CATEGORY_ORDER) + " |", "|---|" + "---:|" * len(CATEGORY_ORDER)]
    for r in rows:
        out.append(f"| {r['label']} | " + " | ".join(_fmt(r['breakdown_ms'].get(c, 0.0)) for c in CATEGORY_ORDER) + " |")
    if doc.get("environment_diff"):
        out += ["", "## Environment differences (ranked by likely impact)", ""]
        for d in doc["environment_diff"]:
            out.append(f"- {d.get('why') or d.get('summary') or d}")
    out += ["", "![step-time breakdown](plots/step_breakdown.png)", ""]
    return "\n".join(out)
