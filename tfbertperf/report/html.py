"""HTML views: a comparison's index.html — one self-contained page (plots embedded as base64 PNG, inline CSS, no
script, no fonts or anything fetched from the network) that reads at 1280 px and on a phone."""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

from tfbertperf.report.markdown import comparison_tables

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
figure{margin:10px 0}figure img{width:100%;height:auto;border:1px solid #ddd}
code{background:#f4f4f4;padding:1px 4px;word-break:break-all}
li{margin:3px 0}
@media (max-width:700px){
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


def _img(png: bytes, alt: str, ident: str) -> str:
    b64 = base64.b64encode(png).decode("ascii")
    return (f"<figure id='{ident}'><img alt='{html.escape(alt)}' src='data:image/png;base64,{b64}'>"
            f"<figcaption>{html.escape(alt)}</figcaption></figure>")


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


def comparison_page(doc: dict, breakdown_png: bytes, throughput_png: bytes, out_dir: str | None = None) -> str:
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
    parts.append("<h2>Charts</h2><div class='charts'>"
                 + _img(breakdown_png, "Step-time breakdown by cell (median ms per profiled step; dashed: what-if "
                                       "input cost)", "breakdown")
                 + _img(throughput_png, "Throughput by cell: median examples/s, error bar = min–max of the repeats",
                        "throughput") + "</div>")
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
