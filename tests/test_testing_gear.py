"""Test and demo gear (tfbertperf.testing) stays out of the product and works outside a checkout: Azurite is found
from $TFBERTPERF_AZURITE, the checkout or PATH, and its absence is one line saying how to install it; the proxy
and the emulators script answer --help; no other module imports the gear."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfbertperf.testing import emulators
from tfbertperf.testing.emulators import Azurite, EmulatorMissing

REPO = Path(__file__).resolve().parents[1]
CHECKOUT_BIN = REPO / "tools" / "azurite" / "node_modules" / ".bin"
NODE = shutil.which("node")  # looked up before any test empties PATH


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No Azurite anywhere: an empty PATH, no $TFBERTPERF_AZURITE, a repo root without tools/azurite."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("TFBERTPERF_AZURITE", raising=False)
    monkeypatch.setattr(emulators, "REPO_ROOT", tmp_path / "not-a-checkout")
    return tmp_path


def test_missing_azurite_is_one_line_saying_how_to_install_it(nowhere):
    with pytest.raises(EmulatorMissing) as e:
        Azurite().start()
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("Azurite is not installed")
    assert "npm ci --prefix tools/azurite" in msg and "npm install -g azurite" in msg


def test_tfbertperf_azurite_pointing_nowhere_is_named_in_one_line(nowhere, monkeypatch):
    monkeypatch.setenv("TFBERTPERF_AZURITE", str(nowhere / "no" / "azurite-blob"))
    with pytest.raises(EmulatorMissing, match=r"^TFBERTPERF_AZURITE=.*no/azurite-blob: no such executable") as e:
        emulators.azurite_command()
    assert "\n" not in str(e.value)


def test_the_emulators_script_reports_a_missing_azurite_in_one_line():
    # The checkout has tools/azurite, but without `node` on PATH it cannot run: exit 2, one line, no traceback.
    p = subprocess.run([sys.executable, "tools/emulators.py", "--only", "azure"], cwd=REPO, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PATH": "/nonexistent"})
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "tfbertperf: error:" in p.stderr
    assert "Traceback" not in p.stderr


def _bin_dir_with_node(root: Path) -> Path:
    """A PATH directory holding only `node` (Azurite's scripts start with `#!/usr/bin/env node`)."""
    if not (CHECKOUT_BIN / "azurite-blob").exists() or not NODE:
        pytest.skip("needs `npm ci --prefix tools/azurite` and node")
    d = root / "bin"
    d.mkdir()
    (d / "node").symlink_to(NODE)
    return d


def _serves(server: Azurite) -> None:
    from azure.storage.blob import BlobServiceClient

    with server:
        server.create_container("gear")
        names = [c.name for c in BlobServiceClient.from_connection_string(server.connection_string).list_containers()]
        assert names == ["gear"]


def test_azurite_from_the_environment_variable(nowhere, monkeypatch):
    monkeypatch.setenv("PATH", str(_bin_dir_with_node(nowhere)))
    monkeypatch.setenv("TFBERTPERF_AZURITE", str(CHECKOUT_BIN / "azurite-blob"))
    assert emulators.azurite_command() == [str(CHECKOUT_BIN / "azurite-blob")]
    _serves(Azurite())


@pytest.mark.parametrize("program", ["azurite-blob", "azurite"])
def test_azurite_from_path_outside_a_checkout(nowhere, monkeypatch, program):
    bin_dir = _bin_dir_with_node(nowhere)  # what `npm install -g azurite` leaves on PATH, beside node
    (bin_dir / program).symlink_to(CHECKOUT_BIN / program)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert emulators.azurite_command()[0] == str(bin_dir / program)
    _serves(Azurite())  # `azurite` also starts queue and table services: on free ports, not 10001/10002


def test_proxy_and_emulators_scripts_answer_help():
    for argv, usage in (([sys.executable, "-m", "tfbertperf.testing.proxy", "--help"],
                         "usage: python -m tfbertperf.testing.proxy"),
                        ([sys.executable, "tools/emulators.py", "--help"], "usage: python tools/emulators.py"),
                        ([sys.executable, "tools/faultproxy.py", "--help"], "--latency-ms")):
        p = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and usage in p.stdout, p.stderr


def test_no_product_module_imports_the_testing_gear():
    offenders = []
    for path in sorted((REPO / "tfbertperf").rglob("*.py")):
        if "testing" in path.relative_to(REPO / "tfbertperf").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if isinstance(node, ast.ImportFrom) and node.module == "tfbertperf":
                names = [f"tfbertperf.{a.name}" for a in node.names]
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n.startswith("tfbertperf.testing")]
    assert not offenders
