"""HTML views: a comparison's index.html — one self-contained page (inline CSS, no script, no fonts or anything
fetched from the network) that reads at 1280 px and on a phone.  Its charts are drawn in HTML and CSS, not pasted
as images: bars are boxes sized in per cent of the row and every label is page text at the page's type size, so a
390 px phone shows 14 px labels where a scaled-down PNG showed 4 px ones (the PNGs stay in plots/ for
comparison.md)."""

from __future__ import annotations

import html
import os
from pathlib import Path

from tfbertperf.report.headline import sig
from tfbertperf.report.markdown import comparison_tables
from tfbertperf.report.plots import CATEGORY_ORDER, COLORS, comparison_bars

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;padding:12px;max-width:1240px;
color:#222;line-height:1.4}
h1{font-size:1.3em;word-break:break-all}h2{font-size:1.1em;margin-top:1.4em}
.q{background:#eef4fb;border-left:4px solid #1f77b4;padding:8px 12px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0;width:100%}
th,td{border:1px solid #ccc;padding:3px 5px;text-align:right;vertical-align:top}
th{background:#f4f4f4}
th:first-child,td:first-child{text-align:left;min-width:8em}
td.key{background:#fff3c4;text-align:left}
tr.failed td{background:#fde8e8}
figure{margin:10px 0}
.chart{background:#f3f7fc;border:1px solid #dde5ef;padding:10px 12px;font-size:14px;color:#111}
.chart figcaption{font-weight:600;margin-bottom:8px}
.crow{display:flex;align-items:center;gap:8px;margin:6px 0}
.clabel{flex:0 0 26%;overflow-wrap:anywhere}
.ctrack{flex:1;position:relative;height:22px}
.cbar{display:flex;height:100%}.cbar span{height:100%}
.cval{flex:0 0 6.5em;text-align:right;white-space:nowrap}
.whatif{position:absolute;top:-3px;bottom:-3px;border-left:2px dashed #000}
.spread{position:absolute;top:50%;height:2px;margin-top:-1px;background:#000}
.legend{list-style:none;padding:0;margin:8px 0 0;display:flex;flex-wrap:wrap;gap:4px 14px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-1px}
.legend i.dash{width:0;border-left:2px dashed #000;height:14px}
code{background:#f4f4f4;padding:1px 4px;word-break:break-all}
li{margin:3px 0}
@media (max-width:700px){
 .crow{flex-wrap:wrap;gap:2px 8px}.clabel{flex:0 0 100%}
 table,thead,tbody,tr,th,td{display:block;width:auto}
 thead{display:none}
 tr{border:1px solid #bbb;margin:0 0 10px;padding:2px 0}
 td{border:none;border-bottom:1px solid #eee;text-align:left;min-width:0}
 td::before{content:attr(data-label) ": ";font-weight:600;color:#555}
 td:first-child{font-weight:600;background:#eef4fb}
}
"""
# The columns a reader looks for first (the verdict, the headroom): highlighted, and never cut off.
KEY_COLUMNS = ("verdict", "headroom")


def _pct_of(v: float, top: float) -> str:
    return f"{100.0 * v / top:.2f}%" if top > 0 else "0%"


def breakdown_chart(rows: list[dict]) -> str:
    """Stacked horizontal bars, one per cell (median ms per profiled step by category), the what-if input cost as a
    dashed line, the step's ms at the end of the row, a legend of the categories shown."""
    e = html.escape
    bars = comparison_bars(rows)
    used = [c for c in CATEGORY_ORDER if any((b or {}).get(c, 0) > 0 for _, b in bars)]
    totals = [sum(float(b.get(c, 0.0)) for c in used) for _, b in bars]
    top = max(totals + [max((b.get("_what_if_input_ms") or 0.0 for _, b in bars), default=0.0)] or [0.0])
    out = ["<figure id='breakdown' class='chart' role='img' aria-label='step-time breakdown by cell'>",
           "<figcaption>Step-time breakdown by cell: median ms per profiled step; dashed line: what-if input cost"
           "</figcaption>"]
    for (label, b), total in zip(bars, totals):
        spans = "".join(f"<span style='width:{_pct_of(float(b.get(c, 0.0)), total)};background:{COLORS[c]}' "
                        f"title='{e(c.replace('_', ' '))} {float(b.get(c, 0.0)):.2f} ms'></span>"
                        for c in used if b.get(c, 0) > 0)
        w = b.get("_what_if_input_ms")
        marker = f"<i class='whatif' style='left:{_pct_of(w, top)}' title='what-if input cost {w:.1f} ms'></i>" \
            if w is not None else ""
        out.append(f"<div class='crow'><div class='clabel'>{e(label)}</div><div class='ctrack'>"
                   f"<div class='cbar' style='width:{_pct_of(total, top)}'>{spans}</div>{marker}</div>"
                   f"<div class='cval'>{total:.1f} ms</div></div>")
    legend = "".join(f"<li><i style='background:{COLORS[c]}'></i>{e(c.replace('_', ' '))}</li>" for c in used)
    if any(b.get("_what_if_input_ms") is not None for _, b in bars):
        legend += "<li><i class='dash'></i>what-if input cost</li>"
    out.append(f"<ul class='legend'>{legend}</ul></figure>")
    return "".join(out)


def throughput_chart(rows: list[dict]) -> str:
    """Horizontal bars of each cell's median examples/s, the repeats' min–max as a line across the bar's end."""
    e = html.escape
    stats = [(r["label"], (r.get("stats") or {}).get("examples_per_sec") or {"median": 0.0, "min": 0.0, "max": 0.0})
             for r in rows]
    top = max([s["max"] for _, s in stats] or [0.0])
    out = ["<figure id='throughput' class='chart' role='img' aria-label='throughput by cell'>",
           "<figcaption>Throughput by cell: median examples/s; black line: min–max of the repeats</figcaption>"]
    for label, s in stats:
        spread = (f"<i class='spread' style='left:{_pct_of(s['min'], top)};width:{_pct_of(s['max'] - s['min'], top)}'>"
                  "</i>") if s["max"] > s["min"] else ""
        out.append(f"<div class='crow'><div class='clabel'>{e(label)}</div><div class='ctrack'>"
                   f"<div class='cbar' style='width:{_pct_of(s['median'], top)}'><span style='width:100%;"
                   f"background:#1f77b4'></span></div>{spread}</div><div class='cval'>{sig(s['median'])}/s</div></div>")
    out.append("</figure>")
    return "".join(out)


def _link(out_dir: str | None, run_dir: str) -> str:
    """A relative link to a run directory when it lies under the comparison directory, else a file path."""
    p = Path(run_dir)
    href = str(p)
    if out_dir:
        try:
            href = os.path.relpath(p.resolve(), Path(out_dir).resolve())
        except ValueError:
            href = str(p)
    return f"<a href='{html.escape(href)}/'>{html.escape(p.name)}</a>"


def comparison_page(doc: dict, out_dir: str | None = None) -> str:
    e = html.escape
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
             "<meta name='viewport' content='width=device-width, initial-scale=1'>",
             f"<title>tfbertperf comparison {e(doc['id'])}</title><style>{CSS}</style></head><body>",
             f"<h1>tfbertperf comparison <code>{e(doc['id'])}</code></h1>"]
    sc = doc.get("scenario")
    if sc:
        parts.append(f"<p class='q'><b>Scenario {e(sc['name'])}:</b> {e(sc['question'])}<br>"
                     f"<b>Answer:</b> {e(doc['explanation'].get('answer') or 'no answer: too few cells ran')}</p>")
    parts.append(f"<p>Each cell ran {doc.get('repeat', 1)}×, {e(doc.get('order', ''))}; figures are medians, the "
                 "spread (min–max) is in parentheses; a difference is called real only when the ranges do not "
                 "overlap.</p>")
    parts.append("<h2>What the comparison says</h2><ol id='explanation'>"
                 + "".join(f"<li>{e(x)}</li>" for x in doc["explanation"]["lines"]) + "</ol>")
    for i, (title, header, rows) in enumerate(comparison_tables(doc)):
        tid = "cells" if i == 0 else f"table{i}"
        parts.append(f"<h2>{e(title)}</h2><table id='{tid}'><thead><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr></thead><tbody>")
        for row in rows:
            cls = " class='failed'" if len(row) > 1 and row[1] == "FAILED" else ""
            parts.append(f"<tr{cls}>" + "".join(
                f"<td data-label='{e(h)}'{' class=key' if h in KEY_COLUMNS else ''}>{e(c)}</td>"
                for h, c in zip(header, row)) + "</tr>")
        parts.append("</tbody></table>")
    ok = [r for r in doc["rows"] if r["status"] != "failed"]
    parts.append("<h2>Charts</h2><div class='charts'>" + breakdown_chart(ok) + throughput_chart(ok) + "</div>")
    parts.append("<h2>Recommendations per cell</h2><ul>")
    for r in doc["rows"]:
        if r["status"] == "failed":
            parts.append(f"<li><b>{e(r['label'])}</b>: failed — {e(r.get('error') or '')}</li>")
            continue
        recs = "".join(f"<li>{e(x)}</li>" for x in r.get("recommendations") or [])
        parts.append(f"<li><b>{e(r['label'])}</b> — {e(r.get('verdict') or r.get('bottleneck') or '')}"
                     f"<ul>{recs}</ul></li>")
    parts.append("</ul><h2>Runs</h2><ul>")
    for r in doc["rows"]:
        data = list(r.get("data") or [])
        runs = "".join(f"<li>{_link(out_dir, d)} — <code>tensorboard --logdir {e(str(Path(d) / 'tensorboard'))}"
                       f"</code>" + (f" — {e(data[i])}" if i < len(data) and data[i] else "") + "</li>"
                       for i, d in enumerate(r.get("run_dirs") or []))
        parts.append(f"<li>{e(r['label'])}: " + (f"<ul>{runs}</ul>" if runs else e(f"none — {r.get('error')}"))
                     + "</li>")
    parts.append(f"</ul><p>TensorBoard (every run, scalars and the Profile tab): "
                 f"<code>{e(doc.get('tensorboard') or '')}</code></p>")
    env = doc.get("environment_diff") or []
    if env:
        parts.append("<h2>Environment differences, slowest vs fastest</h2><ul>" + "".join(
            f"<li><code>{e(str(d.get('name')))}</code>: {e(str(d.get('a')))} → {e(str(d.get('b')))} — "
            f"{e(str(d.get('why')))}</li>" for d in env[:10]) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
