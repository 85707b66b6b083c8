"""Command line: the README's two commands, the dispatcher, and one-line errors with exit status 2."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, env=None, timeout=300):
    e = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    e.update(env or {})
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=e, cwd=ROOT)


def _bash_blocks(md: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", md, re.S)]


def test_readme_shows_the_two_commands_and_ci_runs_the_second_verbatim():
    blocks = _bash_blocks((ROOT / "README.md").read_text())
    main_cmd, test_cmd = blocks[0], blocks[1]
    assert main_cmd.endswith("python -m tfbertperf.run") and "pip install" in main_cmd
    assert "pytest" in test_cmd and "npm ci --prefix tools/azurite" in test_cmd
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_cmd in ci, ".ci/run must run the README's test command verbatim"


def test_console_script_lists_commands():
    r = _run("-m", "tfbertperf", "--help")
    assert r.returncode == 0
    for cmd in ("run", "prepare", "compare", "analyze", "env"):
        assert cmd in r.stdout


def test_unknown_command_exits_2_in_one_line():
    r = _run("-m", "tfbertperf", "frobnicate")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "frobnicate" in r.stderr


def _assert_one_line_error(r, culprit):
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tfbertperf: error:")]
    assert len(lines) == 1, r.stderr[-2000:]
    assert culprit in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args, culprit",
    [
        (["--set", "pipeline.bogus=1"], "pipeline.bogus"),
        (["--set", "train.batch_size=lots"], "train.batch_size"),
        (["--set", "model.size=gigantic"], "model.size"),
        (["--data", "s3://bucket/shards"], "s3"),
        (["--workload", "no_such_workload"], "no_such_workload"),
        (["--bogus-flag"], "--bogus-flag"),
    ],
)
def test_run_bad_input_is_one_line_exit_2(args, culprit):
    _assert_one_line_error(_run("-m", "tfbertperf.run", *args), culprit)


def test_run_missing_data_dir_is_named(tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    _assert_one_line_error(_run("-m", "tfbertperf.run", "--data", str(missing)), str(missing))


def test_compare_bad_matrix_value_is_named(tmp_path):
    r = _run("-m", "tfbertperf.compare", "--matrix", "pipeline.preset=naive,turbo", "--out", str(tmp_path))
    _assert_one_line_error(r, "turbo")
