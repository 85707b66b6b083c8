"""Run tests/programs/stall_loop.py in a subprocess (a foreign program: its own interpreter, its own TF) and
return its per-mode measurements {mode: {"logdir", "step_time_ms", "input_wait_ms", "steps"}}."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROGRAM = Path(__file__).with_name("stall_loop.py")


def run_program(out: Path, modes: str, steps: int = 40, window: str = "20:35", timeout_s: float = 240,
                rounds: int | None = None, threadcpu: bool = False) -> dict:
    """`rounds`: the stall's strength (stall_loop.py --rounds; None = its default); `threadcpu`: the threads' CPU
    written beside each capture (stall_loop.py --threadcpu)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    extra = (["--rounds", str(rounds)] if rounds else []) + (["--threadcpu"] if threadcpu else [])
    proc = subprocess.run(
        [sys.executable, str(PROGRAM), "--out", str(out), "--modes", modes, "--steps", str(steps),
         "--window", window, *extra],
        capture_output=True, text=True, env=env, timeout=timeout_s,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"stall_loop.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    res = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            res[r["mode"]] = r
    return res
