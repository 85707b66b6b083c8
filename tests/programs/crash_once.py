"""A multi-worker entry (train/multiworker.py `entry(cfg, worker_index, worker_dir, strategy)`) whose worker 0
dies of a real SIGSEGV (a read of address 0 through ctypes) on the group's first attempt and succeeds after —
the shape of TF 2.21's profiler crash (issue 15 item 4), to test that a re-run group records why."""

import ctypes
from pathlib import Path


def segfault_in_native_code() -> None:
    ctypes.string_at(0)  # SIGSEGV inside C, as the profiler's crash is; faulthandler prints this frame


def entry(cfg, worker_index, worker_dir, strategy):
    marker = Path(worker_dir).parent / "crashed-once"
    if worker_index == 0 and not marker.exists():
        marker.write_text("1")
        segfault_in_native_code()
    return {"ok": True, "replicas": strategy.num_replicas_in_sync}
