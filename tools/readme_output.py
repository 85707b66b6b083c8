"""README's "Reading the output" block, produced rather than typed: run README command 1 (`python -m
tfbertperf.run`, the embedded default) into a fresh runs root and print what it printed on stdout, with the
temporary runs root shown as `runs`.  `--report RUN_DIR` re-renders an existing run's summary instead (no run);
`--write` also replaces the block in README.md (the first ``` block after "## Reading the output").

    python tools/readme_output.py [--report RUN_DIR] [--write]

tests/test_run.py checks that the labels in README's block are the labels the code prints.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Reading the output"


def render(run_dir: Path) -> str:
    """The summary `tfbertperf run` printed for run_dir, its runs root shown as `runs`."""
    sys.path.insert(0, str(ROOT))
    from tfbertperf.report.console import print_run_summary

    report = json.loads((run_dir / "report.json").read_text())
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_run_summary(Path("runs") / run_dir.name, report)
    return buf.getvalue().strip("\n")


def run_default() -> tuple[str, float]:
    """README command 1 in a fresh runs root: (its stdout with the root shown as `runs`, wall seconds)."""
    with tempfile.TemporaryDirectory(prefix="tfbertperf-readme-") as d:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "tfbertperf.run", "--set", f"run.out={d}/runs"], cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
        if r.returncode:
            sys.exit(f"readme_output: the default run failed (exit {r.returncode})")
        return r.stdout.replace(f"{d}/runs", "runs").strip("\n"), time.perf_counter() - t0


def write_block(text: str, readme: Path = ROOT / "README.md") -> None:
    doc = readme.read_text()
    at = doc.index(SECTION)
    m = re.compile(r"```\n.*?```\n", re.S).search(doc, at)
    readme.write_text(doc[:m.start()] + f"```\n{text}\n```\n" + doc[m.end():])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", metavar="RUN_DIR", help="re-render an existing run instead of running")
    ap.add_argument("--write", action="store_true", help="replace README.md's output block")
    a = ap.parse_args(argv)
    if a.report:
        text = render(Path(a.report))
    else:
        text, seconds = run_default()
        print(f"(default run: {seconds:.0f} s wall)", file=sys.stderr)
    print(text)
    if a.write:
        write_block(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
