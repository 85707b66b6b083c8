"""Markdown views: report.md of a run and comparison.md of a comparison."""

from __future__ import annotations

from tfbertperf.report.console import attribution_table, regime_lines, verdict_line
from tfbertperf.report.headline import glossary_markdown, headline, sig, tidy_numbers, used_lines
from tfbertperf.report.plots import CATEGORY_ORDER
from tfbertperf.report.stats import fmt, fmt_ratio


def run_markdown(report: dict) -> str:
    """report.md: the answer first, then what the run used, the evidence, and a glossary (each figure said once,
    the same words as the console's)."""
    m = report.get("model") or {}
    tp = report.get("throughput") or {}
    stm = tp.get("step_time_ms") or {}
    tr = report.get("training") or {}
    sto = report.get("storage") or {}
    v = report.get("verdict") or {}
    out = [
        f"# tfbertperf run `{report.get('run_id', '')}`",
        "",
        f"**Answer:** {headline(report)['line']}",
        "",
        "## What this run used",
        "",
        f"- created: {report.get('created', '')}  workload: `{report.get('workload', '')}`",
        f"- model: BERT-{m.get('size')} ({m.get('task')}), {int(m.get('parameters') or 0):,} parameters, "
        f"L{m.get('layers')}/H{m.get('hidden')}/A{m.get('heads')}",
        *[f"- {line}" for line in used_lines(report)],
        f"- training: {tp.get('steps')} steps, global batch {tr.get('global_batch_size')}, "
        f"{tr.get('replicas')} replica(s), final loss "
        + (f"{tr['final_loss']:.4f}" if isinstance(tr.get("final_loss"), (int, float)) else "n/a"),
        f"- throughput: {sig(tp.get('examples_per_sec'))} examples/s, {sig(tp.get('tokens_per_sec'))} tokens/s; step "
        f"time mean {sig(stm.get('mean'))} ms, p50 {sig(stm.get('p50'))}, p90 {sig(stm.get('p90'))}, "
        f"max {sig(stm.get('max'))}",
        *[f"- **caveat:** {c}" for c in report.get("caveats") or []],
        *[f"- {line}" for line in regime_lines(report) if line],
        "",
    ]
    if report.get("attribution"):
        out += ["## Where the step time goes", "", "```", attribution_table(report), "```", "",
                f"**Verdict:** {verdict_line(report).removeprefix('verdict: ')}", ""]  # the console's line, said once
    recs = v.get("recommendations") or []
    if recs:
        out += ["### Recommendations", ""] + [f"- {tidy_numbers(r)}" for r in recs] + [""]
    if sto:
        lat = sto.get("request_latency_ms") or {}
        out += [
            "## Storage",
            "",
            f"{sto.get('requests', 0)} requests, {sto.get('bytes_read', 0):,} bytes, "
            f"{sig(sto.get('read_mb_per_sec', 0))} MB/s; request latency p50 {sig(lat.get('p50'))} ms, p90 "
            f"{sig(lat.get('p90'))} ms, p99 {sig(lat.get('p99'))} ms; retries {sto.get('retries', 0)}, errors "
            f"{sto.get('errors', 0)}",
            "",
        ]
    art = report.get("artifacts") or {}
    for p in art.get("plots") or []:
        out.append(f"![{PLOT_ALT.get(p.rsplit('/', 1)[-1], p)}]({p})")
    out += [
        "",
        f"TensorBoard (the answer in the Text tab, scalars, the Profile tab): "
        f"`tensorboard --logdir {art.get('tensorboard', 'tensorboard')}`",
        "",
        *glossary_markdown(),
    ]
    return "\n".join(out)


PLOT_ALT = {  # each plot's alt text says what it shows
    "step_breakdown.png": "step-time breakdown of the profiled window, ms per step by category",
    "utilization.png": "host utilization over the run: CPU busy and iowait, this run's CPU, memory; profiled "
                       "window shaded",
}


def _au(r: dict) -> str:
    if r.get("device") == "cpu":
        return "— (the CPU is the device)"
    if r["stats"].get("accelerator_utilization") is None:
        return "—"
    runs = r.get("au_pass_runs")
    word = "pass" if r.get("au_pass") else ("fail" if runs and runs.startswith("0/") else "mixed")
    return f"{fmt(r['stats']['accelerator_utilization'], 0, pct=True)} {word} ({runs or '—'} runs pass)"


def comparison_tables(doc: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """The comparison's tables as (title, header, rows of cells); markdown and HTML render the same ones."""
    rows = doc["rows"]
    main, storage, breakdown = [], [], []
    for r in rows:
        s = r.get("stats") or {}
        if r["status"] == "failed":
            main.append([r["label"], "FAILED", "0"] + ["—"] * 5 + [r.get("error") or "failed"])
            continue
        vs = r.get("vs_fastest")
        # "noise" is what overlapping repeats show; one run a cell shows nothing either way
        noise = vs and vs["median"] < 1 and r["repeats"] >= 2 and (doc.get("repeat") or 1) >= 2
        real = " real" if r.get("real_difference_vs_fastest") else (" (noise)" if noise else "")
        status = "ok" if r["status"] == "ok" else f"partial: {r.get('error')}"
        fastest = r["label"] == (doc.get("ranking") or {}).get("fastest")
        main.append([r["label"], status, str(r["repeats"]), fmt(s.get("examples_per_sec")),
                     "1.00× (fastest)" if fastest else (fmt_ratio(vs) + real) if vs else "—", fmt(s.get("step_time_ms")),
                     fmt(s.get("input_cost_fraction"), pct=True), _au(r), r.get("bottleneck") or "—"])
        ceiling = fmt(s.get("input_ceiling_examples_per_sec"))
        storage.append([r["label"], f"{r['storage'].get('backend')}/{r['storage'].get('mode')}",
                        fmt(s.get("storage_read_ms_per_step"), 2), fmt(s.get("preprocessing_ms_per_step"), 2),
                        fmt(s.get("request_p50_ms")), fmt(s.get("request_p99_ms")), fmt(s.get("read_mb_per_sec")),
                        fmt(s.get("retries"), 0), ceiling, fmt(s.get("headroom"), 2)])
        breakdown.append([r["label"]] + [fmt(s.get(f"breakdown_ms.{c}"), 2) for c in CATEGORY_ORDER])
    return [
        ("Throughput and verdict (median of the repeats; spread min–max in parentheses)",
         ["cell", "status", "runs", "examples/s", "vs fastest", "step ms", "input cost (what-if)", "AU", "verdict"],
         main),
        ("Storage and input",
         ["cell", "backend/mode", "storage read ms/step", "preprocessing ms/step", "request p50 ms",
          "request p99 ms", "MB/s", "retries", "input ceiling ex/s", "headroom"], storage),
        ("Breakdown, ms per profiled step (median)", ["cell"] + CATEGORY_ORDER, breakdown),
    ]


def comparison_markdown(doc: dict) -> str:
    """comparison.md: the question (scenario), the explanation, the tables, each cell's advice and run dirs."""
    out = [f"# tfbertperf comparison `{doc['id']}`", ""]
    sc = doc.get("scenario")
    if sc:
        out += [f"**Scenario `{sc['name']}`: {sc['question']}**", ""]
    if doc.get("axes"):
        out += ["Matrix: " + " × ".join(f"`{k}` ∈ {{{', '.join(v)}}}" for k, v in doc["axes"]), ""]
    out += [f"Each cell ran {doc.get('repeat', 1)}×, {doc.get('order', '')}; a difference is called real only when "
            "the min–max ranges of the repeats do not overlap.", ""]
    out += ["## What the comparison says", ""] + [f"{i}. {ln}" for i, ln in
                                                   enumerate(doc["explanation"]["lines"], 1)] + [""]
    for title, header, cells in comparison_tables(doc):
        out += [f"## {title}", "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
        out += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells] + [""]
    out += ["## Recommendations per cell", ""]
    for r in doc["rows"]:
        if r["status"] == "failed":
            continue
        out.append(f"- **{r['label']}** ({r.get('verdict') or r.get('bottleneck')})")
        out += [f"  - {x}" for x in r.get("recommendations") or []]
    out += ["", "## Runs", ""]
    for r in doc["rows"]:
        data = list(r.get("data") or [])
        dirs = ", ".join(f"`{d}`" + (f" ({data[i]})" if i < len(data) and data[i] else "")
                         for i, d in enumerate(r.get("run_dirs") or [])) or f"none — {r.get('error')}"
        out.append(f"- {r['label']}: {dirs}")
    if doc.get("environment_diff"):
        out += ["", "## Environment differences, slowest vs fastest (ranked by likely impact)", ""]
        for d in doc["environment_diff"][:10]:
            out.append(f"- `{d.get('name')}`: {d.get('a')} → {d.get('b')} — {d.get('why')}")
    out += ["", f"TensorBoard: `{doc.get('tensorboard')}`", "",
            "![step-time breakdown](plots/step_breakdown.png)", "", "![throughput](plots/throughput.png)", ""]
    return "\n".join(out)
