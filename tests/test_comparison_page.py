"""The comparison page's charts stay legible on a phone (issue 30): drawn in HTML/CSS, their labels are page text,
so at 390 px they keep the type size they have at 1280 px (a PNG scaled to the phone's width shrank its 13 px
labels to about 4 px).  Checked in a real headless browser (Debian's chromium) on a comparison of saved reports
(`compare --reports`: no training)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_compare import _box, _mask, _screenshot

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "reports"
CHART_BACKGROUND = "#f3f7fc"  # report/html.py .chart
MIN_TEXT_PX = 9  # the median height of a line of chart text, ascenders to descenders (14 px type gives 10-14)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp")
    reports = [FIXTURES / f"{n}.json" for n in ("cpu-tuned", "cpu-naive-slow-reads", "data-service",
                                               "emulated-slow-storage")]
    p = subprocess.run([sys.executable, "-m", "tfbertperf.compare", "--reports", *map(str, reports), "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    (cdir,) = [d for d in out.iterdir() if d.name.endswith("-compare")]
    return cdir / "index.html"


def text_line_heights(img, box) -> list[int]:
    """Heights in px of the runs of rows holding dark ink (≥ 3 near-black pixels: text, not the 2 px dashed or
    spread lines) inside box; runs under 4 px (the spread lines) left out."""
    x0, y0, x1, y1 = box
    ink = ((img[y0:y1 + 1, x0:x1 + 1] < 100).all(axis=2).sum(axis=1) >= 3).tolist() + [False]
    runs, start = [], None
    for i, on in enumerate(ink):
        if on and start is None:
            start = i
        elif not on and start is not None:
            runs.append(i - start)
            start = None
    return [r for r in runs if r >= 4]


def test_the_charts_are_page_text_not_images(page):
    html = page.read_text()
    assert "<img" not in html and "data:image/png" not in html
    assert "id='breakdown' class='chart'" in html and "id='throughput' class='chart'" in html


@pytest.mark.parametrize("width", [390, 1280])
def test_chart_text_keeps_its_size_at_390_and_1280_px(page, tmp_path, width):
    import statistics

    img = _screenshot(page, width, 6000, tmp_path)
    box = _box(_mask(img, CHART_BACKGROUND, 2))
    assert box is not None, "no chart on the page"
    assert box[2] < width, box  # inside the page: scaled to it, not cut off
    heights = text_line_heights(img, box)
    assert len(heights) >= 10, heights  # captions, one label line per cell and chart, the legend
    assert statistics.median(heights) >= MIN_TEXT_PX, heights
    # the bars are there too: host compute (green) and input (red) in the breakdown, throughput blue
    for color in ("#98df8a", "#d62728", "#1f77b4"):
        assert _mask(img, color).sum() > 200, color
