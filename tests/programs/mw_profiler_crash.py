"""Reproduction of TF 2.21's multi-worker profiler crash (issue 15 item 4): two local MultiWorkerMirrored workers
train tiny BERT on synthetic batches with a profiled window while the coordination service's heartbeats run
often (TFBERTPERF_HEARTBEAT_TIMEOUT_MS short: each heartbeat is TraceMe'd on its own thread during the trace),
GROUPS times.  Each crash is recorded by launch_workers (attempt, worker, signal, the crashed worker's log kept,
faulthandler stack); this prints them as JSON lines and a summary.  Not a test: the crash is probabilistic.

    python tests/programs/mw_profiler_crash.py --out /tmp/mw --groups 3 [--heartbeat-ms 10000]

Seen here (2026-11-23, 2-core VM under load, TF 2.21): worker 1 died of SIGABRT, glibc's "double free or
corruption (out)", inside `tf.profiler.experimental.stop()` (tensorflow/python/profiler/profiler_v2.py:149)
called by profile/capture.py `Capture.stop` when the loop closed the window — the profiler collecting and
saving the trace, on worker 1 as before (train/strategy.py MULTI_WORKER_HEARTBEAT_TIMEOUT_MS); the group re-ran
and its result recorded the crash.  1 crashed attempt in the first group of 3.
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--heartbeat-ms", type=int, default=10000)
    a = ap.parse_args()
    os.environ["TFBERTPERF_HEARTBEAT_TIMEOUT_MS"] = str(a.heartbeat_ms)
    from tfbertperf.config import load_config
    from tfbertperf.train.multiworker import WorkerError, launch_workers

    cfg = load_config(overrides={"train.steps": 16, "train.batch_size": 8, "data.seq_len": 32,
                                 "data.max_predictions": 5, "profile.steps": "4:12", "profile.probe_steps": 0,
                                 "train.warmup_steps": 2})
    crashes, failed = [], 0
    for g in range(a.groups):
        out = Path(a.out) / f"group-{g}"
        try:
            results = launch_workers(cfg, 2, out, entry="tfbertperf.job:synthetic_worker", timeout_s=600,
                                     progress=None, retries=2)
            for c in results[0]["retries"]:
                crashes.append(c)
                print(json.dumps({"group": g, **c}), flush=True)
        except WorkerError as e:
            failed += 1
            print(json.dumps({"group": g, "failed": str(e)}), flush=True)
    print(json.dumps({"groups": a.groups, "crashed_attempts": len(crashes), "failed_groups": failed}))


if __name__ == "__main__":
    main()
