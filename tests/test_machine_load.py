"""profile/machine_load.py: the other processes' CPU and the hypervisor's steal on the program's cores over a
capture window, in the thread-CPU record and on the console."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

import pytest

from tfbertperf.profile import machine_load, threadcpu


def _at(t, busy, steal, cpu):
    return {"machine": {"t": t, "busy_s": busy, "steal_s": steal}, "process_cpu": cpu}


def test_the_window_counts_the_busy_cores_less_the_programs_own_cpu():
    # 0.5 s: the cores were busy 0.9 s, the process used 0.2 s and its children 50 ms: others 1.3 cores
    got = machine_load.window(_at(10.0, 100.0, 3.0, 1.0), _at(10.5, 100.9, 3.1, 1.2), 50.0)["machine"]
    assert got == {"busy_cores": pytest.approx(1.8), "other_cores": pytest.approx(1.3),
                   "steal_cores": pytest.approx(0.2), "seconds": 0.5, "resolution_cores": 0.02}
    # the counters' resolution: one clock tick a core over the wall (2 cores over 20 ms: a whole core)
    two = machine_load.window(_at(0, 0, 0, 0) | {"machine": {"t": 0, "busy_s": 0, "steal_s": 0, "cpus": 2}},
                              {"machine": {"t": 0.02, "busy_s": 0.03, "steal_s": 0, "cpus": 2}, "process_cpu": 0.02},
                              0.0)["machine"]
    assert two["resolution_cores"] == pytest.approx(2 * machine_load.TICK_S / 0.02)
    # never below 0 (the clock ticks count 10 ms at a time); no reading without both snapshots
    assert machine_load.window(_at(0, 0, 0, 0), _at(1, 0.5, 0, 0.6), 0.0)["machine"]["other_cores"] == 0.0
    assert machine_load.window({"machine": None, "process_cpu": 0}, _at(1, 1, 0, 0), 0.0) == {}
    assert machine_load.window({"t": 0.0}, _at(1, 1, 0, 0), 0.0) == {}


def test_the_console_line_names_the_shared_machine_and_only_a_shared_one():
    assert machine_load.note({}) == [] and machine_load.note({"machine_other_cores": 0.1,
                                                               "machine_steal_cores": 0.1}) == []
    (said,) = machine_load.note({"machine_other_cores": 1.42, "machine_steal_cores": 0.0})
    assert "other processes used 1.4 cores" in said and "steal" not in said, said
    (said,) = machine_load.note({"machine_other_cores": 0.0, "machine_steal_cores": 0.6})
    assert "the hypervisor took 0.6 cores (steal)" in said and "other processes" not in said, said
    assert machine_load.reading({"machine": {"other_cores": 1.0, "steal_cores": 0.5}}) == {
        "machine_other_cores": 1.0, "machine_steal_cores": 0.5}  # no cores, no seconds: no resolution to say
    assert machine_load.reading(None) == {} and machine_load.reading({"machine": {"other_cores": "x"}}) == {}


def test_other_load_within_the_counters_resolution_names_no_shared_machine():
    # a quiet machine's 18 ms window (10 steps of 1.5 ms, 2 cores): /proc/stat's ticks read 0.43 cores of others
    # (a user's fit, nothing else running); one tick a core over 18 ms is 1.1 cores, so that says nothing
    quiet = {"cores": 2, "machine": {"busy_cores": 1.683, "other_cores": 0.43, "steal_cores": 0.0, "seconds": 0.018}}
    got = machine_load.reading(quiet)  # a record from before the resolution was written: from cores and seconds
    assert got["machine_resolution_cores"] == pytest.approx(2 * machine_load.TICK_S / 0.018, abs=1e-3)
    assert machine_load.note(got) == []
    # the same other load over 2 s is beyond the ticks' 0.01 cores: said
    (said,) = machine_load.note(machine_load.reading({**quiet, "machine": {**quiet["machine"], "seconds": 2.0}}))
    assert "other processes used 0.4 cores" in said, said


def _record_beside(proc) -> dict:
    """The thread-CPU record of one second of this process sleeping beside `proc` (killed after)."""
    try:
        time.sleep(0.3)
        a = threadcpu.snapshot(loaders=True)
        time.sleep(1.0)
        return threadcpu.window_record(a, threadcpu.snapshot(loaders=True))
    finally:
        proc()


@pytest.mark.skipif(machine_load.snapshot() is None, reason="no /proc/stat: not Linux")
def test_a_busy_process_beside_the_window_is_in_the_record_and_a_child_is_the_programs_own():
    # a busy loop not the program's (its parent has exited: not a child) reads as other processes' CPU; the same
    # loop as the program's child process counts as its own (a PyDataset's workers), not as other load
    spin = [sys.executable, "-c", "import time; t = time.time() + 30\nwhile time.time() < t: pass"]
    orphan = subprocess.run(["sh", "-c", f"{shlex.join(spin)} >/dev/null 2>&1 & echo $!"],
                            capture_output=True, text=True, check=True)
    rec = _record_beside(lambda: subprocess.run(["kill", orphan.stdout.split()[0]], check=False))
    # one spinning process has a core's worth to use (less on a busy machine: it shares with whatever else runs)
    assert rec["machine"]["other_cores"] >= 0.5 and rec["machine"]["seconds"] >= 0.9, rec["machine"]
    child = subprocess.Popen(spin)
    rec2 = _record_beside(lambda: (child.kill(), child.wait()))
    own = sum(c["cpu_ms"] for c in rec2["children"])
    assert own >= 200, rec2["children"]  # the child's CPU is in the record as the program's (a fifth of a core) …
    busy = rec2["machine"]["busy_cores"] * rec2["machine"]["seconds"] * 1e3
    assert rec2["machine"]["other_cores"] * rec2["machine"]["seconds"] * 1e3 <= busy - own + 30  # … not others'
