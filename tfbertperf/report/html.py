"""HTML views: comparison.html."""

from __future__ import annotations

import html


def comparison_html(doc: dict, md: str) -> str:
    """comparison.html: the stacked bars and the markdown."""
    body = html.escape(md)
    return ("<!doctype html><html><head><meta charset='utf-8'><title>tfbertperf comparison</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}pre{white-space:pre-wrap}</style>"
            f"</head><body><img src='plots/step_breakdown.png' alt='step-time breakdown' style='max-width:100%'>"
            f"<pre>{body}</pre></body></html>")
