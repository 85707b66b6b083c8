"""Library log noise stays out of our commands' output (issue 23 item 8): Python logging and warnings of
TensorFlow, transformers, azure, urllib3 … go to the run's library.log, not to stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMERS_NO_ADVISORY_WARNINGS", "TF_CPP_MIN_LOG_LEVEL")}
ENV["PYTHONPATH"] = str(ROOT)


def test_library_records_go_to_the_runs_log_file_not_to_stderr(tmp_path):
    """A command (process_main) whose libraries log and warn before and after its run directory exists: stderr
    holds only our line; library.log holds theirs, the early ones included."""
    prog = textwrap.dedent(f"""
        import logging, sys, warnings
        from pathlib import Path
        from tfbertperf.errors import process_main
        from tfbertperf.config import load_config
        from tfbertperf.report.build import write_config

        def main():
            logging.getLogger("azure.core.pipeline").warning("azure says retrying")
            warnings.warn("a library's UserWarning")
            write_config(Path({str(tmp_path)!r}), load_config())
            logging.getLogger("urllib3.connectionpool").warning("Connection pool is full, discarding connection")
            import tensorflow as tf
            tf.get_logger().warning("tensorflow python warning")
            print("tfbertperf: our line", file=sys.stderr)
            return 0

        process_main(main)
    """)
    p = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip().splitlines() == ["tfbertperf: our line"], p.stderr
    log = (tmp_path / "library.log").read_text()
    for needle in ("azure says retrying", "UserWarning", "Connection pool is full", "tensorflow python warning"):
        assert needle in log, (needle, log)


def test_tokenize_check_prints_no_transformers_lines():
    p = subprocess.run([sys.executable, "-m", "tfbertperf.tokenize", "--check"], capture_output=True, text=True,
                       env=ENV, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "[transformers]" not in p.stderr and "PyTorch was not found" not in p.stderr + p.stdout
