"""Whether the machine was the program's while it was captured: the CPU other processes used on the cores the
program may run on, and the CPU the hypervisor took from them (steal), over the capture window.

A step time, and every estimate read off a capture alone, is the program's beside whatever else ran.  The input
cost estimate (profile/contention.py) shares the cores between the program's own threads; other processes on them
change what the input's CPU costs the step.  Measured on the stall program (tests/programs/stall_loop.py --rounds
24) beside two busy processes: from the capture alone the estimate read 48-68 % against truths of 32-56 % (quiet:
48-56 % against 45-51 %), with the threads' measured CPU 19-60 % (BENCHMARKS.md, "a shared machine named") —
other runnable threads take their share of the cores whether the input runs or not, and neither model sees them.
So the record says how busy the machine was, and analyze says it beside its figures.

The reading: two snapshots of /proc/stat's per-CPU counters (Linux; user, nice, system, irq, softirq: busy;
steal) of the CPUs in the process's affinity set, and the process's own CPU over the same span (its threads, its
child processes: profile/threadcpu.py's window record), in cores' worth over the wall time:
  busy_cores    the cores' busy time ÷ wall
  other_cores   busy less the process's own CPU, at least 0: other processes (and the kernel's work for them)
  steal_cores   the time the hypervisor ran another guest on these cores ÷ wall (a cloud VM's noisy neighbour)
/proc/stat counts in clock ticks (10 ms at USER_HZ 100), each core's counters by whole ticks: a figure is good to about
one tick a core over the window, `resolution_cores` = cores × tick ÷ wall (0.1 of a core on 2 cores over 0.2 s, 1.1
over the 18 ms of a 10-step window of 1.5 ms steps, where a quiet machine read "other processes used 0.4 cores").
Only other load beyond that resolution names the machine shared.
"""

from __future__ import annotations

import os
import time

SHARED_FROM_CORES = 0.25  # other processes using a quarter of a core or more on average: the machine was shared
TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def cpus() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def snapshot() -> dict | None:
    """{"t": perf_counter s, "busy_s", "steal_s"} summed over the CPUs this process may run on; None where
    /proc/stat cannot be read (not Linux)."""
    mine, busy, steal, seen = cpus(), 0, 0, 0
    try:
        with open("/proc/stat") as f:
            rows = [r.split() for r in f if r.startswith("cpu") and r[3:4].isdigit()]
    except OSError:
        return None
    for r in rows:
        if mine is None or int(r[0][3:]) in mine:
            v = [int(x) for x in r[1:9]] + [0] * max(0, 9 - len(r))
            busy += v[0] + v[1] + v[2] + v[5] + v[6]  # user (guest included), nice, system, irq, softirq
            steal += v[7]
            seen += 1
    return {"t": time.perf_counter(), "busy_s": busy * TICK_S, "steal_s": steal * TICK_S, "cpus": seen} if seen \
        else None


def window(a: dict, b: dict, children_ms: float) -> dict:
    """The window record's {"machine": {"busy_cores", "other_cores", "steal_cores", "seconds"}} between
    profile/threadcpu.py's snapshots a and b (loaders=True: their "machine" and "process_cpu"), `children_ms` the
    CPU the process's children used over the span; {} without both readings."""
    m0, m1 = a.get("machine"), b.get("machine")
    if not m0 or not m1 or m1["t"] <= m0["t"] or "process_cpu" not in a or "process_cpu" not in b:
        return {}
    wall = m1["t"] - m0["t"]
    busy = max(0.0, m1["busy_s"] - m0["busy_s"]) / wall
    own = (max(0.0, b["process_cpu"] - a["process_cpu"]) + children_ms / 1e3) / wall
    return {"machine": {"busy_cores": round(busy, 3), "other_cores": round(max(0.0, busy - own), 3),
                        "steal_cores": round(max(0.0, m1["steal_s"] - m0["steal_s"]) / wall, 3),
                        "seconds": round(wall, 3),
                        # one tick a core: the counters' resolution over this wall (module docstring)
                        "resolution_cores": round((m1.get("cpus") or 1) * TICK_S / wall, 3)}}


def reading(record: dict | None) -> dict:
    """The attribution's keys from a thread-CPU record's machine part (SCHEMA.md: machine_other_cores,
    machine_steal_cores, machine_resolution_cores); {} where the record has none.  A record written before the
    resolution was recorded gets it from its cores and seconds (one tick a core)."""
    m = (record or {}).get("machine")
    if not isinstance(m, dict):
        return {}
    try:
        out = {"machine_other_cores": float(m["other_cores"]), "machine_steal_cores": float(m["steal_cores"])}
    except (KeyError, TypeError, ValueError):
        return {}
    try:
        res = m.get("resolution_cores")
        out["machine_resolution_cores"] = float(res) if res is not None else round(
            int(record["cores"]) * TICK_S / float(m["seconds"]), 3)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        pass
    return out


def note(att: dict) -> list[str]:
    """The console's line when the machine was shared during the capture (SHARED_FROM_CORES beyond the counters'
    resolution), else []."""
    other, steal = att.get("machine_other_cores"), att.get("machine_steal_cores")
    if other is None or other + (steal or 0.0) - (att.get("machine_resolution_cores") or 0.0) < SHARED_FROM_CORES:
        return []
    parts = [f"other processes used {other:.1f} cores" if other >= 0.05 else "",
             f"the hypervisor took {steal:.1f} cores (steal)" if steal and steal >= 0.05 else ""]
    said = " and ".join(p for p in parts if p)
    return [f"the machine was shared during the capture: {said} of the cores this program may run on — its step "
            f"times, and any estimate read from the capture, are the program's beside them; measure on a quiet "
            f"machine to compare runs"]
