"""Host utilization sampler on the real machine: busier under a CPU-burning thread than under a sleep, ≥ 10 Hz,
RSS seen, no GPU here (NVML skipped cleanly), summary keys, TensorBoard scalars and the timeline PNG."""

import hashlib
import threading
import time

import pytest

from tfbertperf.profile.utilization import UtilizationSampler, write_scalars

SUMMARY_KEYS = {"cpu_busy_fraction_mean", "cpu_iowait_fraction_mean", "rss_mb_max", "disk_read_mb", "net_rx_mb",
                "gpus", "cpu_busy_fraction_p90", "cores", "per_core_busy_fraction_mean", "samples", "hz"}


def _sample_while(work, seconds: float = 1.0, hz: float = 20.0):
    stop = threading.Event()
    threads = [threading.Thread(target=work, args=(stop,)) for _ in range(2)]
    with UtilizationSampler(hz=hz) as s:
        for th in threads:
            th.start()
        s.mark("profile_start")
        time.sleep(seconds)
        s.mark("profile_stop")
        stop.set()
        for th in threads:
            th.join()
    return s


def _burn(stop):
    # CPU work outside the GIL (hashlib releases it for large buffers), as tf.data's C++ threads work: a pure-Python
    # loop would also wait for the GIL (a futex sleep, not run-queue wait) while the sampler and the main thread
    # hold it, and read 0.65 of a core on a quiet machine (full suite, 2026-11-23).
    block = b"x" * (1 << 20)
    while not stop.is_set():
        hashlib.sha256(block).digest()


def _burn_holding_the_gil(stop):
    x = 0
    while not stop.is_set():
        x += 1


def _idle(stop):
    stop.wait()


@pytest.fixture(scope="module")
def busy_and_idle():
    return _sample_while(_burn), _sample_while(_idle)


def test_busier_under_a_cpu_burning_thread_than_under_a_sleep(busy_and_idle):
    busy, idle = busy_and_idle
    b, i = busy.summary(), idle.summary()
    # this process's share: the whole machine can be saturated by other processes on a shared box (both 1.0)
    assert b["process_cpu_fraction_mean"] > max(0.05, 3 * i["process_cpu_fraction_mean"]), (b, i)
    assert 0.0 <= i["cpu_busy_fraction_mean"] <= 1.0 and 0.0 <= b["cpu_busy_fraction_p90"] <= 1.0


def test_sampling_rate_rss_and_no_gpu(busy_and_idle):
    _, idle = busy_and_idle
    s = idle.summary()
    assert s["samples"] >= 15, "20 Hz asked over 1 s: at least the 10 Hz floor with slack"
    assert s["hz"] >= 10.0
    assert s["rss_mb_max"] > 0
    assert s["gpus"] == []  # no GPU / no NVML on this machine: skipped, no exception
    assert all(x["gpus"] == [] for x in idle.samples)
    assert s["tick_cost_us_mean"] > 0


def test_summary_keys_samples_and_marks(busy_and_idle):
    busy, _ = busy_and_idle
    s = busy.summary()
    assert SUMMARY_KEYS <= set(s)
    assert s["cores"] >= 1 and len(s["per_core_busy_fraction_mean"]) == s["cores"]
    assert s["disk_read_mb"] >= 0 and s["net_rx_mb"] >= 0 and s["cpu_iowait_fraction_mean"] >= 0
    ts = [x["t"] for x in busy.samples]
    assert ts == sorted(ts) and ts[0] > 0
    names = [m["name"] for m in busy.marks]
    assert names == ["profile_start", "profile_stop"] and busy.marks[0]["t"] < busy.marks[1]["t"]
    x = busy.samples[0]
    assert abs(x["cpu_user"] + x["cpu_system"] + x["cpu_iowait"] + x["cpu_idle"] - 1.0) < 0.2


def test_empty_summary_and_idempotent_stop():
    s = UtilizationSampler(hz=10)
    assert s.summary()["samples"] == 0 and s.summary()["gpus"] == []
    s.start()
    s.stop()
    s.stop()
    with pytest.raises(ValueError):
        UtilizationSampler(hz=0)


def test_tensorboard_scalars(busy_and_idle, tmp_path):
    import tensorflow as tf

    busy, _ = busy_and_idle
    n = write_scalars(str(tmp_path / "tb"), busy.samples)
    assert n == len(busy.samples)
    tags = set()
    for f in (tmp_path / "tb").iterdir():
        for e in tf.compat.v1.train.summary_iterator(str(f)):
            tags.update(v.tag for v in e.summary.value)
    assert {"host/cpu_busy", "host/rss_mb", "host/cpu_iowait", "host/disk_read_mb_per_s"} <= tags


def test_timeline_png(busy_and_idle, tmp_path):
    from tfbertperf.report.utilization_plot import write_utilization_plot

    busy, _ = busy_and_idle
    out = write_utilization_plot(tmp_path / "plots" / "utilization.png", busy.samples, busy.marks, "test run")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert [p.name for p in out.parent.iterdir()] == ["utilization.png"], "no temporary file left behind"
    # marks as a mapping, none at all
    write_utilization_plot(tmp_path / "b.png", busy.samples, {"profile_start": 0.1, "ckpt": 0.5}, "x")
    write_utilization_plot(tmp_path / "c.png", busy.samples, None, "x")


def test_process_cpu_matches_the_process_clock_with_threads_holding_the_gil():
    # Python threads holding the GIL delayed the sampler between its CPU reading and its wall stamp: one tick
    # read 12.8 cores' worth and the mean 163 % of the machine.  Now it must agree with the process clock.
    stop = threading.Event()
    threads = [threading.Thread(target=_burn_holding_the_gil, args=(stop,)) for _ in range(3)]
    c0, w0 = time.process_time(), time.perf_counter()
    with UtilizationSampler(hz=20) as s:
        for th in threads:
            th.start()
        time.sleep(1.5)
        stop.set()
        for th in threads:
            th.join()
    truth = (time.process_time() - c0) / (time.perf_counter() - w0) / s.summary()["cores"]
    got = s.summary()["process_cpu_fraction_mean"]
    assert abs(got - truth) < 0.1, (got, truth)
    assert max(x["process_cpu"] for x in s.samples) <= 1.5 and all(x["dt"] > 0 for x in s.samples)


def test_thread_cpu_tells_a_cpu_bound_thread_from_a_waiting_one():
    # One thread that never waits for anything but a core (saturated: used + run-queue wait ≈ wall, however
    # loaded the machine) against threads that wait on an event (what a pipeline waiting on storage does).
    def span(work):
        stop = threading.Event()
        th = threading.Thread(target=work, args=(stop,))
        with UtilizationSampler(hz=10) as s:
            th.start()
            s.mark("a")
            time.sleep(1.0)
            s.mark("b")
            stop.set()
            th.join()
        return s.thread_cpu("a", "b")

    busy, idle = span(_burn), span(_idle)
    assert busy["cpu_saturation_fraction"] >= 0.8 and busy["busiest_thread_wanted_fraction"] >= 0.8, busy
    assert busy["busiest_thread_cpu_fraction"] > 0.05 and 0.9 <= busy["seconds"] < 3, busy
    assert idle["cpu_saturation_fraction"] < 0.5, idle
    assert busy["process_cores_wanted"] >= busy["process_cores_used"] > idle["process_cores_used"]
    assert UtilizationSampler(hz=10).thread_cpu("a", "b") == {}  # no marks, no figures


def test_a_runs_host_figures_cover_the_measured_steps_when_the_sampler_caught_them():
    """compose/hostsampling.py's choice of span, in the fast tier: the measured steps (between the loop's
    measured_start / measured_end marks) when at least 3 samples fall in them, else the whole training; the report
    block adds the whole run and the threads over the same span."""
    from tfbertperf.compose.hostsampling import host_summary, host_utilization, start_sampler
    from tfbertperf.config import load_config

    assert start_sampler(load_config(sets=["profile.utilization_hz=0"])) is None
    s = start_sampler(load_config(sets=["profile.utilization_hz=20"]))
    try:
        s.mark("train_start")
        time.sleep(0.2)
        s.mark("measured_start")
        time.sleep(0.5)
        s.mark("measured_end")
        s.mark("train_end")
    finally:
        s.stop()
    summary, start, end = host_summary(s)
    marks = {m["name"]: m["t"] for m in s.marks}
    caught = s.summary(marks["measured_start"], marks["measured_end"]).get("samples", 0)
    assert (summary["span"], start, end) == (("measured steps", "measured_start", "measured_end") if caught >= 3
                                             else ("training", "train_start", "train_end"))
    block = host_utilization(s)
    assert block["span"] == summary["span"] and "cpu_busy_fraction_mean" in block["whole_run"]
    assert "thread_cpu" in block

    bare = start_sampler(load_config(sets=["profile.utilization_hz=20"]))
    bare.mark("train_start")
    time.sleep(0.1)
    bare.mark("train_end")
    bare.stop()
    assert host_summary(bare)[0]["span"] == "training"  # no measured marks: the whole training
