"""What README.md and the commands' help promise matches the code (issue 23 item 11): the tests that need
../shared are counted and named, Azurite's Node requirement is the pinned package's, `analyze --help` says what
--validate measures, scenario notes name real flags and files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _collected(path: str) -> list[str]:
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", path],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    return [ln for ln in p.stdout.splitlines() if ln.startswith(path + "::")]


def test_readme_counts_and_names_the_tests_that_skip_without_shared():
    """test_devices.py skips as a module, test_accelerator_attribution.py and test_parse_scale.py per test
    (@needs_fixtures), test_layout.py one test; README says how many and which."""
    devices = _collected("tests/test_devices.py")
    src = (ROOT / "tests" / "test_accelerator_attribution.py").read_text()
    marked = set(re.findall(r"@needs_fixtures\n(?:@[^\n]*\n)*def (test_\w+)", src))
    attribution = [t for t in _collected("tests/test_accelerator_attribution.py")
                   if t.split("::")[1].split("[")[0] in marked]
    layout = "tests/test_layout.py::test_report_schema_in_the_package_matches_the_design_document"
    assert "shared/DESIGN.md is not beside this checkout" in (ROOT / "tests" / "test_layout.py").read_text()
    idle = [t for t in _collected("tests/test_device_idle.py")  # the H100 tests (@needs_h100) and the MI300X ones
            if t.split("::")[1].startswith(("test_h100_", "test_mi300x_"))]
    scale_src = (ROOT / "tests" / "test_parse_scale.py").read_text()
    scale = set(re.findall(r"@needs_fixtures\n(?:@[^\n]*\n)*def (test_\w+)", scale_src))
    total = len(devices) + len(attribution) + len(idle) + len(scale) + 1
    assert f"{total} tests read material that lives beside the clone" in README
    text = " ".join(README.split())
    assert f"the {len(devices)} tests of `tests/test_devices.py`, {len(attribution)} of " \
           f"`tests/test_accelerator_attribution.py`, {len(idle)} of `tests/test_device_idle.py`" in text
    assert f"{len(scale)} of `tests/test_parse_scale.py`" in text
    assert f"`{layout}`" in README


def test_readme_states_the_node_version_the_pinned_azurite_declares():
    lock = json.loads((ROOT / "tools" / "azurite" / "package-lock.json").read_text())
    node = lock["packages"]["node_modules/azurite"]["engines"]["node"]  # ">=22.0.0"
    version = lock["packages"]["node_modules/azurite"]["version"]
    major = re.search(r"\d+", node).group()
    assert f"Azurite {version.rsplit('.', 1)[0]}" in README and f"declares Node ≥ {major}" in README


def test_analyze_help_says_what_validate_measures():
    p = subprocess.run([sys.executable, "-m", "tfbertperf.analyze", "--help"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    text = " ".join(p.stdout.split())
    assert "up to three recommendations" in text and "the top recommendation" not in text


def test_scenario_notes_name_real_flags_and_files():
    for f in (ROOT / "tfbertperf" / "scenarios").glob("*.yaml"):
        notes = f.read_text()
        assert "prepare --data" not in notes, f  # prepare writes with --out
        for path in re.findall(r"(?:tools|tfbertperf)/[\w/]+\.py", notes):
            assert (ROOT / path).is_file(), (f, path)
    assert (ROOT / "tools" / "emulators.py").is_file() and "python tools/emulators.py" in README
