"""A JAX loop on the CPU whose loader runs ahead of the step, in a thread or a child process (profile/host_loader.py):
synthetic captures with the thread-CPU record beside them, so each rule is checked by hand.  The real programs are
in tests/test_jax_cpu_loader.py (tests/programs/jax_cpu_loader.py --thread / --process)."""

from __future__ import annotations

import json

import pytest

from profile_fixtures import synthetic_xspace
from tfbertperf.profile import host_loader

STEP_US, STEPS = 10_000, 4


def _capture(tmp_path, loader_events, training_extra=lambda t: ()):
    """4 steps of 10 ms: markers and a frame after XLA's run on "python" (line 0), XLA's CPU runtime 1-9 ms into each step on two
    intra-op threads (lines 1, 2), loader_events(t) on an unnamed loader thread (line 3)."""
    host = {"python": [], "tf_XLAEigen/1": [], "tf_XLAEigen/2": [], "": []}
    for i in range(STEPS):
        t = STEP_US * i
        host["python"] += [("train", t, STEP_US - 10, {"step_num": i, "_r": 1}),
                           ("$train.py:20 dispatch", t + 9_050, 900, {}), *training_extra(t)]
        for pool in ("tf_XLAEigen/1", "tf_XLAEigen/2"):
            host[pool].append(("ThunkExecutor::Execute", t + 1_000, 8_000, {}))
        host[""] += loader_events(t)
    return [synthetic_xspace(tmp_path / "vm.xplane.pb", host)]


def _record(loader_cpu_ms: float, children: tuple = (), pool_waited_ms: float = 0.0) -> dict:
    """threadcpu.json's record: the line ids are synthetic_xspace's (the lines' order); `pool_waited_ms` the XLA
    pool threads' run-queue time over the window (0 everywhere: a record without run-queue figures)."""
    threads = [{"tid": 1, "line_id": 0, "name": "python", "cpu_ms": 8.0},
               {"tid": 2, "line_id": 1, "name": "tf_XLAEigen", "cpu_ms": 32.0, "runqueue_ms": pool_waited_ms},
               {"tid": 3, "line_id": 2, "name": "tf_XLAEigen", "cpu_ms": 32.0, "runqueue_ms": pool_waited_ms},
               {"tid": 4, "line_id": 3, "name": "python", "cpu_ms": loader_cpu_ms, "python": "Thread-2 (<lambda>)"}]
    return {"schema": "tfbertperf.threadcpu/1", "seconds": 0.04, "cores": 2, "pid": 1, "threads": threads,
            "children": list(children)}


P = 64.0 / 72.0  # XLA's pool share of the compute's CPU: the two intra-op threads against them and the training thread


def test_a_loader_threads_cpu_costs_the_step_where_it_overlapped_xla_by_the_fair_share(tmp_path):
    # the loader makes a batch 2-6 ms into each step (4 ms running, 4 ms of CPU each): all of it beside XLA's run;
    # one thread beside a compute 2 wide on 2 cores loses a core-ms of the compute's per core-ms it takes (f·C = 1)
    xplanes = _capture(tmp_path, lambda t: [("$loader.py:5 make", t + 2_000, 4_000, {})])
    stolen, cpu = host_loader.thread_stolen_by_step(xplanes, _record(16.0))
    assert sorted(stolen) == [0, 1, 2, 3] and cpu == pytest.approx(4.0, rel=1e-3)
    assert all(v == pytest.approx(4.0 * P, rel=1e-3) for v in stolen.values()), stolen


def test_the_compute_loses_no_more_than_its_pool_threads_waited_for_a_core(tmp_path):
    # the same loader, but XLA's pool threads waited 8 ms for a core over the 40 ms window: 2 ms a 10 ms step at
    # most, where the fair share says 3.6 (a loader that had the cores to itself between XLA's runs reads high)
    xplanes = _capture(tmp_path, lambda t: [("$loader.py:5 make", t + 2_000, 4_000, {})])
    stolen, _ = host_loader.thread_stolen_by_step(xplanes, _record(16.0, pool_waited_ms=8.0))
    assert sum(stolen.values()) / len(stolen) == pytest.approx(8.0 / 40.0 * (STEP_US - 10) / 1e3, rel=1e-3), stolen
    # waited longer than the share: the share stands
    stolen, _ = host_loader.thread_stolen_by_step(xplanes, _record(16.0, pool_waited_ms=30.0))
    assert all(v == pytest.approx(4.0 * P, rel=1e-3) for v in stolen.values()), stolen


def test_a_loader_thread_waiting_on_its_queue_or_outside_xlas_run_takes_nothing(tmp_path):
    # the same 4 ms of work, but 3 ms of the frame is a full queue's put (a wait) and it runs 9-10 ms, after XLA
    xplanes = _capture(tmp_path, lambda t: [("$loader.py:5 make", t + 9_000, 990, {}),
                                            ("$queue.py:122 put", t + 100, 3_000, {})])
    stolen, _ = host_loader.thread_stolen_by_step(xplanes, _record(4.0))
    assert all(v == pytest.approx(0.0, abs=1e-9) for v in stolen.values()), stolen
    # no record (a capture made without StepTimer): nothing measured, nothing claimed
    assert host_loader.thread_stolen_by_step(xplanes, None) == ({}, None)


def test_a_loader_process_is_spread_over_the_capture_which_records_none_of_its_work(tmp_path):
    # a child process used 16 ms of CPU over the window: XLA ran 8 of each 10 ms, so 0.8 of its CPU overlapped
    xplanes = _capture(tmp_path, lambda t: [])
    stolen, cpu = host_loader.thread_stolen_by_step(xplanes, _record(0.0, [{"pid": 9, "name": "python",
                                                                            "cpu_ms": 16.0}]))
    assert cpu > 0 and stolen, (stolen, cpu)
    per_step = sum(stolen.values()) / len(stolen)
    assert per_step == pytest.approx(16.0 / STEPS * 0.8 * P, rel=0.02), stolen


def test_a_batch_taken_from_a_multiprocessing_queue_is_the_loaders_time_not_a_device_sync(tmp_path):
    # multiprocessing's queue takes its lock in synchronize.py: "synchronize" read as the device's sync, and the
    # whole `next` (reading 512 KB from the pipe, ~1 ms a step) was left out of the input: 0 % against truths of 22-36 %
    def get(t):
        return [("$builtins next", t + 100, 800, {}), ("$queues.py:98 get", t + 110, 780, {}),
                ("$synchronize.py:94 __enter__", t + 120, 5, {}), ("$connection.py:208 recv_bytes", t + 130, 700, {})]

    xplanes = _capture(tmp_path, lambda t: [], training_extra=get)
    loader = host_loader.loader_ms_by_step(xplanes)
    assert sorted(loader) == [0, 1, 2, 3] and all(v == pytest.approx(0.8, rel=0.01) for v in loader.values()), loader


def test_the_training_thread_waiting_out_a_loader_threads_python_after_the_compute_is_input(tmp_path):
    # Keras-JAX reads the step's logs back (convert_to_numpy) from 0.5 ms until 9.8 ms; XLA's run ends at 9 ms and a
    # loader thread runs Python 8.5-9.8 ms: the 0.8 ms after the compute is the interpreter lock the loader holds.
    # Before: all of it host compute ("compute-bound, 15 %" on a PyDataset(workers=2) whose what-if read 44 %)
    def result_wait(t):
        return [("$core.py:404 convert_to_numpy", t + 500, 9_300, {}), ("$numpy array", t + 510, 9_280, {})]

    xplanes = _capture(tmp_path, lambda t: [("$loader.py:5 make", t + 8_500, 1_300, {})], training_extra=result_wait)
    held = host_loader.lock_wait_by_step(xplanes)
    assert sorted(held) == [0, 1, 2, 3] and all(v == pytest.approx(0.8, rel=1e-3) for v in held.values()), held
    rows = [{"step": str(i), "input": 0.0, "host_compute": 9.0, "other": 1.0} for i in range(STEPS)]
    moved, _, held_ms = host_loader.move_to_input(rows, xplanes)
    assert held_ms == pytest.approx(0.8, rel=1e-3) and all(r["input"] == pytest.approx(0.8, rel=1e-3) for r in moved)
    # the same loader asleep there (a wait: no lock held), or no loader at all: nothing moves
    (tmp_path / "sleep").mkdir(), (tmp_path / "none").mkdir()
    xplanes = _capture(tmp_path / "sleep", lambda t: [("$loader.py:5 make", t + 8_500, 1_300, {}),
                                                      ("$time sleep", t + 8_510, 1_280, {})], training_extra=result_wait)
    assert all(v < 0.02 for v in host_loader.lock_wait_by_step(xplanes).values())  # its 10 µs out of the sleep
    assert host_loader.lock_wait_by_step(_capture(tmp_path / "none", lambda t: [], training_extra=result_wait)) == {}


def test_a_loader_whose_cpu_was_mostly_the_tracers_is_another_program_under_the_profiler(tmp_path):
    # a pure-Python loader thread ran 5-10x slower captured: the step's wait for it, kept as the input's own ms against
    # the unprofiled step, read 56-80 % where the truths were 26-37 %.  Its 4 recorded frames cost 0.8 µs of the 1 µs
    # of CPU the record gives it: 80 % the tracer's; a NumPy loader's CPU (16 ms for the same frames) is its own
    xplanes = _capture(tmp_path, lambda t: [("$loader.py:5 make", t + 2_000, 4_000, {})])
    beside = tmp_path / "threadcpu.json"
    beside.write_text(json.dumps(_record(0.001)))
    said = host_loader.traced_loader(xplanes)
    assert said and said.startswith("80% of the loader threads' CPU was the Python tracer's"), said
    beside.write_text(json.dumps(_record(16.0)))
    assert host_loader.traced_loader(xplanes) is None
    beside.unlink()
    assert host_loader.traced_loader(xplanes) is None  # no record: nothing measured, nothing claimed
