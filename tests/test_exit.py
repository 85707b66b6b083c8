"""A failed command leaves the process even while tf.data is inside a Python call (errors.process_main).

Python's own teardown destroys a live tf.data iterator under the GIL while its parallel map waits for a
py_function that needs that GIL: `sys.exit(main())` then hangs forever after the error line (reproduced with
`tests/programs/teardown_hang.py plain`; seen in the suite on a damaged shard in stream mode)."""

import configparser
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_failed_command_exits_with_its_one_line_while_a_py_function_is_in_flight():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, str(ROOT / "tests/programs/teardown_hang.py")], capture_output=True,
                       text=True, timeout=240, env=env)  # hangs (and times out) without process_main
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.rstrip().splitlines()[-1] == "tfbertperf: error: shard x: corrupt TFRecord at byte 12"
    assert "Traceback" not in p.stderr


def test_every_command_and_the_console_script_leave_through_process_main():
    for cmd in ("run", "prepare", "compare", "analyze", "env", "tokenize", "cli"):
        src = (ROOT / "tfbertperf" / f"{cmd}.py").read_text()
        assert 'if __name__ == "__main__":\n    process_main(main)' in src, cmd
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert "tfbertperf.cli:entry" in cfg["options.entry_points"]["console_scripts"]
