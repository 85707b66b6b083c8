"""Host (and GPU) utilization sampler: a background thread reading psutil (and NVML if present) at ≥ 10 Hz.

What it answers: while the step loop ran, were the host's cores busy (the input pipeline, or the emulated
accelerator's host), was the disk or the network the limit, how much memory did the process hold.

One sample (dict) per tick, `t` = seconds since start():
  cpu_user, cpu_system, cpu_iowait, cpu_idle   whole-machine fractions of CPU time over the tick (0..1;
                 user includes nice; iowait = idle while I/O was outstanding, 0 where the OS has no such counter)
  cpu_busy       1 − idle − iowait (so iowait is not counted as busy)
  per_core_busy  [busy fraction of each logical core]
  process_cpu    this process's CPU time (user + system, all its threads) during the tick ÷ (tick × cores): the
                 share of the machine the run itself used (cpu_busy also counts every other process); `dt`
                 the tick's wall seconds (the summary's mean weights each tick by it)
  rss_mb         this process's resident set size (MB = 10^6 bytes)
  disk_read_bytes, net_rx_bytes   system-wide bytes read from block devices / received on all interfaces
                 (loopback included) during the tick: the deltas of psutil.disk_io_counters().read_bytes and
                 net_io_counters().bytes_recv (read from /proc on Linux); 0 where the container hides them
  gpus           [{"index", "util", "mem_used_mb"}] — NVML utilization (fraction of the last sample period a
                 kernel ran) and memory used, only when pynvml (package nvidia-ml-py, optional, imported lazily)
                 imports and finds a GPU; [] otherwise, without an exception (checked here: no driver → []).
Marks (`mark(name)`): {"name", "t"} — e.g. profile_start / profile_stop around the profiled window; each also
snapshots the threads' CPU, and `thread_cpu(start, end)` reads it between two marks (profile/threadcpu.py).

Cost: one call set per tick (psutil.cpu_times(percpu) + Process.memory_info, /proc/diskstats, /proc/net/dev,
NVML when present), CPU time of the sampler thread measured per tick: ~90 µs in a tight loop, 350–370 µs as it
really runs at 10–50 Hz (cold caches, shared 2-core VM under load), i.e. ≈ 0.4 % of one core at 10 Hz;
`summary()["tick_cost_us_mean"]` reports it for every run.
"""

from __future__ import annotations

import math
import os
import threading
import time

from tfbertperf.profile import threadcpu

MB = 1e6


def _busy(delta) -> tuple[float, float, float, float, float]:
    """(user, system, iowait, idle, busy) fractions from a psutil scputimes delta."""
    total = sum(delta) or 1e-12
    user = (delta.user + getattr(delta, "nice", 0.0)) / total
    idle = delta.idle / total
    iowait = getattr(delta, "iowait", 0.0) / total
    return user, delta.system / total, iowait, idle, max(0.0, 1.0 - idle - iowait)


def _sub(a, b):
    return type(a)(*(max(0.0, x - y) for x, y in zip(a, b)))


class _IoCounters:
    """System-wide disk read / network receive byte counters: the same figures as psutil.disk_io_counters()
    .read_bytes (whole storage devices, i.e. /sys/block entries, 512-byte sectors) and net_io_counters()
    .bytes_recv (all interfaces, loopback included, so local storage emulators show), read straight from
    /proc/diskstats and /proc/net/dev on Linux (~25 µs instead of psutil's ~200 µs); psutil elsewhere."""

    def __init__(self, ps) -> None:
        self.ps = ps
        self.disk_f = self.net_f = None
        try:
            self.disk_f = open("/proc/diskstats", "rb")
            self.disks = {ln.split()[2] for ln in self.disk_f.read().splitlines()
                          if os.path.exists(b"/sys/block/" + ln.split()[2].replace(b"/", b"!"))}
            self.net_f = open("/proc/net/dev", "rb")
        except OSError:
            self.disk_f = self.net_f = None

    def disk_read_bytes(self) -> int:
        try:
            if self.disk_f is not None:
                self.disk_f.seek(0)
                return sum(int(p[5]) * 512 for p in (ln.split() for ln in self.disk_f.read().splitlines())
                           if p[2] in self.disks)
            c = self.ps.disk_io_counters()
            return c.read_bytes if c else 0
        except Exception:  # a container without block-device stats
            return 0

    def net_rx_bytes(self) -> int:
        try:
            if self.net_f is not None:
                self.net_f.seek(0)
                return sum(int(ln.split(b":", 1)[1].split()[0]) for ln in self.net_f.read().splitlines()[2:])
            c = self.ps.net_io_counters()
            return c.bytes_recv if c else 0
        except Exception:
            return 0

    def close(self) -> None:
        for f in (self.disk_f, self.net_f):
            if f is not None:
                f.close()


class _Nvml:
    """NVML through pynvml, if importable and a GPU exists; otherwise `handles` is empty (no exception)."""

    def __init__(self) -> None:
        self.handles: list = []
        self.names: list[str] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                self.handles.append(h)
                name = pynvml.nvmlDeviceGetName(h)
                self.names.append(name.decode() if isinstance(name, bytes) else str(name))
        except Exception:  # not installed, no driver, no GPU: GPU sampling is skipped
            self.handles = []

    def read(self) -> list[dict]:
        out = []
        for i, h in enumerate(self.handles):
            try:
                u = self.nv.nvmlDeviceGetUtilizationRates(h)
                m = self.nv.nvmlDeviceGetMemoryInfo(h)
                out.append({"index": i, "util": u.gpu / 100.0, "mem_used_mb": m.used / MB})
            except Exception:
                continue
        return out


class UtilizationSampler:
    """Background sampler.  `with UtilizationSampler(hz=10) as s: …; s.summary()` or start()/stop().

    Args:
      hz: samples per second (≥ 10 recommended; the thread keeps a fixed schedule, skipping missed ticks).
      gpus: sample NVML GPUs when available (False: never touch NVML).
    """

    def __init__(self, hz: float = 10.0, gpus: bool = True) -> None:
        if not (hz > 0 and math.isfinite(hz)):
            raise ValueError(f"hz={hz!r}: must be > 0")
        self.hz = float(hz)
        self.samples: list[dict] = []
        self.marks: list[dict] = []
        self._want_gpus = gpus
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._cost_s = 0.0
        self._ticks = 0
        self.gpu_names: list[str] = []
        self._threads: dict[str, dict] = {}  # mark name → thread CPU snapshot

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> "UtilizationSampler":
        import psutil

        if self._thread is not None:
            return self
        self._ps = psutil
        self._proc = psutil.Process(os.getpid())
        self._nvml = _Nvml() if self._want_gpus else None
        self.gpu_names = self._nvml.names if self._nvml else []
        self._io = _IoCounters(psutil)
        self._prev = self._read_counters()
        self._t0 = time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tfbertperf-utilization", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> "UtilizationSampler":
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._io.close()
            if self._nvml and self._nvml.handles:
                try:
                    self._nvml.nv.nvmlShutdown()
                except Exception:
                    pass
        return self

    def __enter__(self) -> "UtilizationSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def mark(self, name: str) -> float:
        """Record an event (e.g. "profile_start") at the current time; returns its `t` (s since start)."""
        t = time.perf_counter() - self._t0 if self._t0 else 0.0
        self.marks.append({"name": str(name), "t": t})
        self._threads[str(name)] = threadcpu.snapshot()
        return t

    def thread_cpu(self, start: str, end: str) -> dict:
        """CPU used and wanted by this process's threads between two marks (profile/threadcpu.py); {} if none."""
        a, b = self._threads.get(start), self._threads.get(end)
        cores = len(self.samples[0]["per_core_busy"]) if self.samples else (os.cpu_count() or 1)
        return threadcpu.compare(a, b, cores) if a and b else {}

    # -- sampling --------------------------------------------------------------------------------------
    def _read_counters(self):
        # The process's CPU time and the wall clock are read back to back (process_time: one clock_gettime of
        # the whole process, every thread): a file read in between lets other threads take the GIL, and a
        # wall stamp taken 50 ms after the CPU figure made one tick read 12.8 cores' worth (a mean of 163 %).
        pcpu, now = time.process_time(), time.perf_counter()
        return (self._ps.cpu_times(percpu=True), self._proc.memory_info().rss, self._io.disk_read_bytes(),
                self._io.net_rx_bytes(), pcpu, now)

    def _tick(self, t: float) -> None:
        c0 = time.thread_time()  # CPU time of this thread: the sampler's own cost, not GIL waits
        cores, rss, disk, net, pcpu, now = cur = self._read_counters()
        pcores, _, pdisk, pnet, ppcpu, pnow = self._prev
        self._prev = cur
        deltas = [_sub(a, b) for a, b in zip(cores, pcores)]
        total = type(deltas[0])(*(sum(x) for x in zip(*deltas)))
        user, system, iowait, idle, busy = _busy(total)
        sample = {
            "t": t, "cpu_user": user, "cpu_system": system, "cpu_iowait": iowait, "cpu_idle": idle,
            "cpu_busy": busy, "per_core_busy": [_busy(d)[4] for d in deltas], "rss_mb": rss / MB,
            "process_cpu": max(0.0, pcpu - ppcpu) / max(1e-9, (now - pnow) * len(deltas)), "dt": now - pnow,
            "disk_read_bytes": max(0, disk - pdisk), "net_rx_bytes": max(0, net - pnet),
            "gpus": self._nvml.read() if self._nvml and self._nvml.handles else [],
        }
        self.samples.append(sample)
        self._cost_s += time.thread_time() - c0
        self._ticks += 1

    def _run(self) -> None:
        period = 1.0 / self.hz
        nxt = self._t0 + period
        while not self._stop.wait(max(0.0, nxt - time.perf_counter())):
            now = time.perf_counter()
            self._tick(now - self._t0)
            nxt += period
            if nxt < now:  # fell behind (a stalled process): skip, keep the phase
                nxt += period * math.ceil((now - nxt) / period)

    # -- results ---------------------------------------------------------------------------------------
    def summary(self, t_from: float | None = None, t_to: float | None = None) -> dict:
        """Aggregates over the samples with t_from < t ≤ t_to (s since start; None = unbounded; see the module
        docstring for units): cpu_busy_fraction_mean / _p90 / _p95, cpu_user / cpu_system / cpu_iowait
        _fraction_mean, process_cpu_fraction_mean (this process's CPU time ÷ (wall × cores)), rss_mb_max,
        disk_read_mb, net_rx_mb (totals), gpus [{index, name, util_mean, util_max, mem_used_mb_max}], cores,
        per_core_busy_fraction_mean [per core], samples (count), hz (achieved: samples per second of sampled
        time), seconds, tick_cost_us_mean, marks."""
        s = [x for x in self.samples if (t_from is None or x["t"] > t_from) and (t_to is None or x["t"] <= t_to)]
        n = len(s)

        def mean(xs):
            xs = list(xs)
            return sum(xs) / len(xs) if xs else 0.0

        busy = sorted(x["cpu_busy"] for x in s)
        cores = len(s[0]["per_core_busy"]) if s else (os.cpu_count() or 0)
        span = (s[-1]["t"] - (t_from or 0.0)) if s else 0.0

        def pct(q):
            return busy[min(n - 1, int(math.ceil(q * n)) - 1)] if n else 0.0
        gpus = []
        for i, name in enumerate(self.gpu_names):
            g = [x for smp in s for x in smp["gpus"] if x["index"] == i]
            gpus.append({"index": i, "name": name, "util_mean": mean(x["util"] for x in g),
                         "util_max": max((x["util"] for x in g), default=0.0),
                         "mem_used_mb_max": max((x["mem_used_mb"] for x in g), default=0.0)})
        return {
            "cpu_busy_fraction_mean": mean(busy),
            "cpu_busy_fraction_p90": pct(0.90),
            "cpu_busy_fraction_p95": pct(0.95),
            "cpu_user_fraction_mean": mean(x["cpu_user"] for x in s),
            "cpu_system_fraction_mean": mean(x["cpu_system"] for x in s),
            "cpu_iowait_fraction_mean": mean(x["cpu_iowait"] for x in s),
            # time-weighted (Σ CPU ÷ Σ wall × cores): ticks the GIL delayed count for the time they cover
            "process_cpu_fraction_mean": (sum(x["process_cpu"] * x["dt"] for x in s) / sum(x["dt"] for x in s)
                                          if s and sum(x["dt"] for x in s) > 0 else 0.0),
            "rss_mb_max": max((x["rss_mb"] for x in s), default=0.0),
            "disk_read_mb": sum(x["disk_read_bytes"] for x in s) / MB,
            "net_rx_mb": sum(x["net_rx_bytes"] for x in s) / MB,
            "gpus": gpus,
            "cores": cores,
            "per_core_busy_fraction_mean": [mean(x["per_core_busy"][c] for x in s) for c in range(cores)] if s else [],
            "samples": n,
            "hz": n / span if span > 0 else 0.0,
            "seconds": span,
            "tick_cost_us_mean": self._cost_s / self._ticks * 1e6 if self._ticks else 0.0,
            "marks": list(self.marks),
        }


def write_scalars(summary_writer_dir: str, samples: list[dict]) -> int:
    """Write the samples as TensorBoard scalars under `summary_writer_dir`: host/cpu_busy, host/cpu_iowait,
    host/cpu_user, host/cpu_system (fractions), host/rss_mb, host/disk_read_mb_per_s, host/net_rx_mb_per_s,
    gpu<i>/util, gpu<i>/mem_used_mb.  step = milliseconds since the sampler started.  Returns the number of
    samples written.  TensorFlow is imported here, not at module import."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(summary_writer_dir))
    prev_t = 0.0
    with writer.as_default():
        for smp in samples:
            step = int(round(smp["t"] * 1000))
            dt = max(1e-6, smp["t"] - prev_t)
            prev_t = smp["t"]
            for k in ("cpu_busy", "cpu_iowait", "cpu_user", "cpu_system", "rss_mb", "process_cpu"):
                if k in smp:
                    tf.summary.scalar(f"host/{k}", smp[k], step=step)
            tf.summary.scalar("host/disk_read_mb_per_s", smp["disk_read_bytes"] / MB / dt, step=step)
            tf.summary.scalar("host/net_rx_mb_per_s", smp["net_rx_bytes"] / MB / dt, step=step)
            for g in smp.get("gpus", []):
                tf.summary.scalar(f"gpu{g['index']}/util", g["util"], step=step)
                tf.summary.scalar(f"gpu{g['index']}/mem_used_mb", g["mem_used_mb"], step=step)
    writer.flush()
    writer.close()
    return len(samples)


__all__ = ["UtilizationSampler", "write_scalars"]
