"""README is a page a newcomer reads top to bottom (issue 30): at most 250 lines; the two commands, the output and
its headline, profiling one's own training and one's own data near the top; every docs/ link resolves; and no
number in its prose that is not checked — each one is in the pasted output block, or is a rule the code holds
(checked here against the code), or a fact tests/test_docs.py checks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

# docs pages other issues write (28: your own data, 29: your own training, 31: the tests); until their branches
# are merged the link may point ahead — after the merge every link must resolve (the lead drops this list)
PENDING: set[str] = set()


def _output_block() -> str:
    return re.search(r"## Reading the output.*?```\n(.*?)```", README, re.S).group(1)


def _prose() -> str:
    """README without fenced blocks, inline code, link targets and the paragraph tests/test_docs.py checks."""
    text = re.sub(r"```.*?```", "", README, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    start = text.index("Azurite 3.37")
    end = text.index("The fast tier")
    return text[:start] + text[end:]


def test_readme_is_at_most_250_lines():
    assert len(README.splitlines()) <= 250


def test_the_newcomers_sections_come_in_reading_order():
    order = ["## Two commands", "## Reading the output", "### The headline", "### Glossary",
             "## Profile your own training", "## Your own data", "## Settings", "## Storage", "## Comparisons",
             "## Environments"]
    at = [README.index(h) for h in order]
    assert at == sorted(at)
    assert "python -m tfbertperf.run --set data.uri=/path/to/your/tfrecords" in README
    assert "from tfbertperf.keras import ProfileCallback" in README and "StepTraceAnnotation" in README
    assert "pipeline.data_service=local:2" in README  # the tf.data service is named where people look


def test_every_link_to_a_local_file_resolves():
    for target in re.findall(r"\]\(([^)#:]+)\)", README):
        if target in PENDING:
            continue
        assert (ROOT / target).exists(), target
    for page in (ROOT / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            assert (page.parent / target).resolve().exists() or f"docs/{target}" in PENDING, (page.name, target)


def test_every_number_in_the_prose_is_checked():
    """A number in README's prose is either in the pasted output block or a rule the code holds."""
    from tfbertperf.report.headline import WIDTH, sig

    from tfbertperf.train import probe

    rules = {
        str(WIDTH): True,                         # "no console line is wider than 120 characters"
        "2–3": sig(1234.5) == "1,230" and sig(12.345) == "12.3",  # ratios to 2–3 significant digits
        # what ProfileCallback's auto probe costs (train/probe.py)
        "2.5": probe.AUTO_CI95 == 0.025,          # "more only while the interval is wider than ±2.5 pp"
        "60": probe.SETTLE_MAX_STEPS == 60,       # "at most 60" untimed steps a block
        "20": probe.AUTO_MAX_STEPS // probe.AUTO_BLOCK_STEPS == 20,  # "at most 20 blocks"
        "15": probe.AUTO_SPACING * probe.AUTO_BLOCK_STEPS == 15,     # "blocks 15 steps apart"
        "140": len(probe.auto_plan(140, 5, (19, 41))) == 6,          # "6 in a 140-step fit" (window 20:40)
    }
    block = _output_block()
    prose = _prose()
    for m in re.finditer(r"\d+(?:[.,–]\d+)*", prose):
        n = m.group(0)
        context = prose[max(0, m.start() - 40): m.end() + 40].replace("\n", " ")
        if n in rules:
            assert rules[n], (n, context)
            continue
        assert n in block, f"unchecked number {n!r} in README prose: …{context}…"
