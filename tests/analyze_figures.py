"""The figures `tfbertperf analyze --json` gives on every real capture in ../shared/fixtures/profiles, flattened
to {"attribution.fractions.input": value, …}: what tests/data/analyze_figures.json recorded from the code before
the columnar parse (issue 32), and what test_parse_scale compares the current code with.

    PYTHONPATH=<tree> python tests/analyze_figures.py --record   # rewrites tests/data/analyze_figures.json
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_fixtures import ATTENTION, FIXTURES, GEMM, H100, MANGLED, V100  # noqa: E402

RECORDED = Path(__file__).resolve().parent / "data" / "analyze_figures.json"
CAPTURES = {"v100": V100, "mi300x-gemm": GEMM, "mi300x-attention": ATTENTION, "corrupt": MANGLED,
            **{f"h100-{r}": H100 / f"h100-{r}.xplane.pb.gz" for r in ("compute", "stall", "h2d")}}


def unpacked(src: Path, folder: Path) -> Path:
    """The capture as an `.xplane.pb` file (the H100 ones are gzipped)."""
    if src.suffix != ".gz":
        return src
    out = folder / src.name.removesuffix(".gz")
    if not out.exists():
        out.write_bytes(gzip.decompress(src.read_bytes()))
    return out


def flatten(doc, prefix: str = "") -> dict:
    """{"a.b.c": leaf} of a JSON document (lists by index)."""
    if isinstance(doc, dict):
        return {k: v for key, val in doc.items() for k, v in flatten(val, f"{prefix}{key}.").items()}
    if isinstance(doc, list):
        return {k: v for i, val in enumerate(doc) for k, v in flatten(val, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): doc}


def figures(path: Path) -> dict:
    """analyze(path)'s document flattened, without where the file lies; a refused file gives {"error": line}."""
    import inspect

    from tfbertperf.analyze import analyze
    from tfbertperf.errors import UsageError

    # every figure, xprof's own included: code from issue 32 on runs xprof only where it adds something
    kw = {"xprof": "always"} if "xprof" in inspect.signature(analyze).parameters else {}
    try:
        doc = analyze(str(path), **kw)
    except UsageError as e:
        return {"error": str(e).replace(str(path), "<capture>")}
    doc.pop("profile", None)
    return flatten(doc)


def record() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return {name: figures(unpacked(src, Path(tmp))) for name, src in CAPTURES.items() if src.exists()}


if __name__ == "__main__" and "--record" in sys.argv:
    RECORDED.parent.mkdir(exist_ok=True)
    RECORDED.write_text(json.dumps({"fixtures": str(FIXTURES.name), "figures": record()}, indent=1,
                                   sort_keys=True) + "\n")
    print(RECORDED)
