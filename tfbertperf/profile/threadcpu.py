"""How much CPU this process's threads used and wanted over a span: the reading that tells a CPU-bound input
pipeline from one that waits, on a shared machine and whatever the pipeline's parallelism.

The whole machine's busy fraction cannot say it: other processes fill the cores of a shared machine, and a
pipeline whose heavy stage is one sequential map saturates one core of many (the machine then reads 50 % busy
on 2 cores, 3 % on 32) — an engineer still calls that preprocessing-limited (vectorize, parallelize).  So the
reading is per thread, from two snapshots of /proc/self/task/*/schedstat (Linux: nanoseconds on a CPU, and
nanoseconds runnable but waiting for one — the run queue), taken at the span's ends:
  process_cores_used     Σ threads' CPU ÷ wall: cores' worth of CPU the process used
  process_cores_wanted   Σ threads' (CPU + run-queue wait) ÷ wall: cores it would have used with the machine to
                         itself (a CPU-bound thread on a loaded machine waits in the run queue, not in a sleep)
  busiest_thread_cpu_fraction, busiest_thread_wanted_fraction   the same for the single busiest thread, ÷ wall;
                         busiest_thread its name (which stage: tf.data's pool, the Python main thread, …)
  cpu_saturation_fraction   max(busiest thread wanted, process_cores_wanted ÷ cores), at most 1: ≥ 0.8 means
                         a stage of the run is bound by the CPU (one thread that never waits for anything but a
                         core, or all the cores wanted), which an idle storage wait never looks like.
Threads that ended inside the span are not counted; threads that started inside it count from 0.  Where there
is no schedstat (not Linux), psutil's per-thread CPU times stand in, with no run-queue wait (wanted = used).
Cost: two small file reads per thread (~100 TF threads: ~4 ms), at the span's two ends only.
"""

from __future__ import annotations

import glob
import os
import time


def snapshot() -> dict:
    """{"t": perf_counter seconds, "threads": {tid: (cpu_s, runqueue_wait_s)}, "names": {tid: name}} of this
    process now (names read here: a thread may have ended by the time the span is compared)."""
    threads: dict[int, tuple[float, float]] = {}
    t = time.perf_counter()
    for path in glob.glob(f"/proc/{os.getpid()}/task/*/schedstat"):
        try:
            with open(path) as f:
                run_ns, wait_ns = f.read().split()[:2]
            threads[int(path.split("/")[-2])] = (int(run_ns) / 1e9, int(wait_ns) / 1e9)
        except (OSError, ValueError):  # a thread that ended while we read
            continue
    if not threads:
        try:
            import psutil

            threads = {th.id: (th.user_time + th.system_time, 0.0) for th in psutil.Process().threads()}
        except Exception:  # noqa: BLE001 — no per-thread figures on this platform: the summary says so (empty)
            threads = {}
    return {"t": t, "threads": threads, "names": {tid: _name(tid) for tid in threads}}


def _name(tid: int) -> str:
    """The thread's name (TF names its pools: tf_data_private_threadpool, tf_inter_op_…; truncated to 15)."""
    try:
        with open(f"/proc/{os.getpid()}/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def compare(a: dict, b: dict, cores: int) -> dict:
    """The module docstring's figures between snapshots a (start) and b (end); {} when there are none."""
    wall = b["t"] - a["t"]
    if wall <= 0 or not b["threads"]:
        return {}
    used, wanted = {}, {}
    for tid, (cpu, wait) in b["threads"].items():
        cpu0, wait0 = a["threads"].get(tid, (0.0, 0.0))
        used[tid] = max(0.0, cpu - cpu0)
        wanted[tid] = used[tid] + max(0.0, wait - wait0)
    cores = max(1, int(cores))
    busiest = max(wanted, key=wanted.get)
    total_wanted = sum(wanted.values()) / wall
    return {
        "process_cores_used": round(sum(used.values()) / wall, 4),
        "process_cores_wanted": round(total_wanted, 4),
        "busiest_thread_cpu_fraction": round(min(1.0, max(used.values()) / wall), 4),
        "busiest_thread_wanted_fraction": round(min(1.0, wanted[busiest] / wall), 4),
        "cpu_saturation_fraction": round(min(1.0, max(wanted[busiest] / wall, total_wanted / cores)), 4),
        "busiest_thread": b.get("names", {}).get(busiest) or a.get("names", {}).get(busiest) or _name(busiest),
        "threads": len(wanted),
        "seconds": round(wall, 3),
    }
