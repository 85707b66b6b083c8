"""How much CPU this process's threads used and wanted over a span: the reading that tells a CPU-bound input
pipeline from one that waits, on a shared machine and whatever the pipeline's parallelism.

The machine's busy fraction cannot say it (other processes fill a shared machine; one sequential map saturates one
core of many: 3 % busy on 32 cores), so the reading is per thread, from two snapshots of /proc/self/task/*/schedstat
(Linux: ns on a CPU, and ns runnable but waiting for one — the run queue), taken at the span's ends:
  process_cores_used     Σ threads' CPU ÷ wall: cores' worth of CPU the process used
  process_cores_wanted   Σ threads' (CPU + run-queue wait) ÷ wall: cores it would have used with the machine to
                         itself (a CPU-bound thread on a loaded machine waits in the run queue, not in a sleep)
  busiest_thread_cpu_fraction, busiest_thread_wanted_fraction   the same for the single busiest thread, ÷ wall;
                         busiest_thread its name (which stage: tf.data's pool, the Python main thread, …)
  cpu_saturation_fraction   max(busiest thread wanted, process_cores_wanted ÷ cores), at most 1: ≥ 0.8 means
                         a stage of the run is bound by the CPU (one thread that never waits for anything but a
                         core, or all the cores wanted), which an idle storage wait never looks like.
Threads that ended inside the span are not counted (window_record keeps their sum), new ones count from 0; no
schedstat (not Linux): psutil's per-thread CPU times.  Cost ~4 ms (~100 threads) a snapshot; other load: machine_load.py
"""

from __future__ import annotations

import glob
import os
import threading
import time

from tfbertperf.profile import machine_load


def snapshot(loaders: bool = False) -> dict:
    """{"t": perf_counter seconds, "threads": {tid: (cpu_s, runqueue_wait_s)}, "names": {tid: name}} of this
    process now (names read here: a thread may have ended by the time the span is compared); with `loaders`
    also "python": {tid: name} of its Python threads but the main one (Keras' PyDataset workers, a generator's
    enqueuer) and "children": {pid: (cpu_s, runqueue_wait_s, name)} of its child processes (PyDataset's
    use_multiprocessing workers), all their threads summed."""
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
    out = {"t": t, "threads": threads, "names": {tid: _name(tid) for tid in threads}}
    if loaders:
        out["python"] = {th.native_id: th.name for th in threading.enumerate()  # not the training thread (this
                         if th not in (threading.main_thread(), threading.current_thread())  # one, a fit's)
                         and not isinstance(th, threading._DummyThread)}
        out["children"] = {pid: (*_task_sum(pid), _name(pid, pid)) for pid in _children()}
        out["process_cpu"] = time.process_time()  # every thread's, also those that end before the next snapshot
        out["children_done"] = sum(os.times()[2:4])  # the children reaped so far, their whole CPU
        out["machine"] = machine_load.snapshot()  # the cores' busy and stolen time: was the machine shared?
    return out


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # a thread or process that ended while we read
        return ""


def _children() -> set[int]:
    return {int(x) for p in glob.glob(f"/proc/{os.getpid()}/task/*/children") for x in _read(p).split()}


def _task_sum(pid: int) -> tuple[float, float]:  # (CPU s, run-queue wait s) of a process, all its threads
    rows = [r for r in (_read(p).split()[:2] for p in glob.glob(f"/proc/{pid}/task/*/schedstat")) if len(r) == 2]
    return sum(int(r[0]) for r in rows) / 1e9, sum(int(r[1]) for r in rows) / 1e9


def _name(tid: int, pid: int | None = None) -> str:
    """The thread's name (TF names its pools: tf_data_private_threadpool, tf_inter_op_…; truncated to 15)."""
    try:
        with open(f"/proc/{pid or os.getpid()}/task/{tid}/comm") as f:
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
    cores, busiest = max(1, int(cores)), max(wanted, key=wanted.get)
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


SIDECAR = "threadcpu.json"
"""The file beside a capture (in its session directory, next to the `.xplane.pb`) that holds the CPU each thread
of the profiled process used over the capture window: what `analyze` reads the input pipeline's CPU from."""
SIDECAR_SCHEMA = "tfbertperf.threadcpu/1"


def window_record(a: dict, b: dict) -> dict:
    """The sidecar's content for the span between snapshots a (capture start) and b (capture stop):
    {"schema", "seconds" (wall), "cores" (the cores this process may run on), "pid" (the main thread's tid),
    "clock" ("schedstat"), "threads": [{"tid", "line_id" (its line in the capture's host plane, line_ids; None
    where unknown), "name", "cpu_ms", "runqueue_ms", "python" (a Python thread's name)}], with loaders=True
    "children": [{"pid" (None: reaped inside the span), "name", "cpu_ms", "runqueue_ms"}], "exited": {"cpu_ms"
    of threads that ended inside the span, "python": the Python ones}} — new threads and children count from 0."""
    threads = []
    lines = line_ids(b["threads"])
    python = {**a.get("python", {}), **b.get("python", {})}
    for tid, (cpu, wait) in b["threads"].items():
        cpu0, wait0 = a["threads"].get(tid, (0.0, 0.0))
        threads.append({"tid": tid, "line_id": lines.get(tid),
                        "name": b.get("names", {}).get(tid) or a.get("names", {}).get(tid) or "?",
                        "cpu_ms": round(max(0.0, cpu - cpu0) * 1e3, 3),
                        "runqueue_ms": round(max(0.0, wait - wait0) * 1e3, 3),
                        **({"python": python[tid]} if tid in python else {})})
    before, rq = ({pid: v[i] for pid, v in a.get("children", {}).items()} for i in (0, 1))
    children = [{"pid": pid, "name": name, "cpu_ms": round(max(0.0, cpu - before.get(pid, 0.0)) * 1e3, 3),
                 "runqueue_ms": round(max(0.0, w - rq.get(pid, 0.0)) * 1e3, 3)}
                for pid, (cpu, w, name) in b.get("children", {}).items()]
    if "children_done" in a and "children_done" in b:  # reaped inside the span (a pool stopped at an epoch's end):
        done = b["children_done"] - a["children_done"] - sum(v for p, v in before.items() if p not in b["children"])
        children.append({"pid": None, "name": "ended inside the window", "cpu_ms": round(max(0.0, done) * 1e3, 3)})
    if "process_cpu" in a and "process_cpu" in b:  # threads that ended inside the span (a PyDataset's pool at the
        alive = sum(r["cpu_ms"] for r in threads)  # epoch's last batches): the process's CPU less the live ones'
        exited = {"cpu_ms": round(max(0.0, (b["process_cpu"] - a["process_cpu"]) * 1e3 - alive), 3),
                  "python": sorted(n for tid, n in a.get("python", {}).items() if tid not in b["threads"])}
    return {"schema": SIDECAR_SCHEMA, "seconds": round(b["t"] - a["t"], 6), "clock": "schedstat", "pid": os.getpid(),
            "cores": len(machine_load.cpus() or ()) or os.cpu_count() or 1,
            "threads": sorted(threads, key=lambda r: -r["cpu_ms"]),
            **({"children": children} if "children" in b else {}),
            **({"exited": exited} if "process_cpu" in a and "process_cpu" in b else {}),
            **machine_load.window(a, b, sum(c["cpu_ms"] for c in children))}


def write_beside_newest_capture(logdir: str, a: dict | None, b: dict | None, record: dict | None = None):
    """Write `record` or window_record(a, b) as SIDECAR into the newest profile session under `logdir`
    (logdir/plugins/profile/<session>/, where the capture that just stopped landed), atomically; returns its
    path, or None when there is no session directory (the capture wrote nothing)."""
    sessions = [p for p in glob.glob(os.path.join(str(logdir), "plugins", "profile", "*")) if os.path.isdir(p)]
    return write_in(max(sessions, key=os.path.getmtime), a, b, record) if sessions else None


def write_in(session, a: dict | None, b: dict | None, record: dict | None = None) -> str:
    """Write `record` or window_record(a, b) as SIDECAR into the folder `session`, atomically; returns its path."""
    import json

    from tfbertperf.storage.atomic import write_atomic

    path = os.path.join(str(session), SIDECAR)
    write_atomic(path, json.dumps(record or window_record(a, b)).encode(), durable=False)
    return path


def read_beside(xplane) -> dict | None:
    """The SIDECAR beside an `.xplane.pb` file (a gzipped capture's: beside the `.gz` the user gave, not its
    temporary copy), or None when there is none.  A damaged one raises UsageError (one line, naming the file)."""
    import json

    from tfbertperf.errors import UsageError
    from tfbertperf.profile.xprof_tools import source_file

    path = source_file(xplane).parent / SIDECAR
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        assert doc.get("schema") == SIDECAR_SCHEMA
        rows = [(str(r["name"]), float(r["cpu_ms"])) for r in doc["threads"]]
        rows += [("", float(c["cpu_ms"])) for c in doc.get("children") or ()]
        rows += [("", float((doc.get("exited") or {}).get("cpu_ms") or 0.0))]
        assert min(float(doc["seconds"]), int(doc["cores"])) > 0 and ("machine" not in doc or machine_load.reading(doc))
    except (OSError, ValueError, KeyError, TypeError, AssertionError, AttributeError):
        raise UsageError(f"{path}: damaged thread-CPU record beside the capture (not {SIDECAR_SCHEMA} JSON); "
                         f"delete it to analyze the capture without measured thread CPU") from None
    return doc


# ---- which profiler line is which thread -------------------------------------------------------------------
# TensorFlow's profiler names a host thread's line by `std::hash<std::thread::id>` of its pthread_t (libstdc++:
# _Hash_bytes(&pthread_t, 8, 0xc70f6907); checked against a capture's "python" line and the main thread's
# ident), while the kernel counts CPU by tid.  glibc keeps a thread's descriptor (pthread_t is its address) at
# the top of the thread's stack mapping, with the tid inside it; both offsets are learned from a Python thread
# whose pthread_t and tid are known, then every stack mapping's candidate descriptor is read through
# /proc/self/mem (an unmapped address is an error there, never a crash) and kept where it points to itself
# (glibc's x86-64 descriptor starts with its own address) and holds one of this process's tids.  Any step that does not hold (another libc, no /proc) gives no mapping: analyze then says the
# input threads' CPU was not measured.
_HASH_SEED = 0xC70F6907


def _hasher():
    import ctypes

    fn = ctypes.CDLL("libstdc++.so.6")._ZSt11_Hash_bytesPKvmm
    fn.restype, fn.argtypes = ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]

    def line_id(pthread_t: int) -> int:
        v = ctypes.c_uint64(pthread_t)
        return ctypes.c_int64(fn(ctypes.byref(v), 8, _HASH_SEED)).value  # the profiler writes it as int64
    return line_id


def _maps() -> list[tuple[int, int, str]]:
    out = []
    with open(f"/proc/{os.getpid()}/maps") as f:
        for ln in f:
            parts = ln.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi, parts[1]))
    return out


def _is_descriptor(mem_fd: int, pd: int) -> bool:
    """glibc's x86-64 thread descriptor begins with a pointer to itself (tcbhead_t.tcb)."""
    import struct

    try:
        return struct.unpack("<Q", os.pread(mem_fd, 8, pd))[0] == pd
    except (OSError, struct.error):
        return False


def _layout(mem_fd: int) -> tuple[int, int] | None:
    """(descriptor offset below its stack mapping's end, tid offset inside the descriptor), learned from a
    Python thread; None when its descriptor is not where glibc puts it."""
    import struct

    seen = {}
    ready, done = threading.Event(), threading.Event()

    def probe():
        seen["ident"], seen["tid"] = threading.get_ident(), threading.get_native_id()
        ready.set()
        done.wait(5)

    t = threading.Thread(target=probe, name="tfbertperf-threadmap", daemon=True)
    t.start()
    try:
        if not ready.wait(5):
            return None
        ident = seen["ident"]
        hi = next((h for lo, h, _ in _maps() if lo <= ident < h), None)
        if hi is None:
            return None
        if not _is_descriptor(mem_fd, ident):
            return None
        block = os.pread(mem_fd, 0x1000, ident)
        offs = [o for o in range(0, len(block) - 4, 4) if struct.unpack_from("<i", block, o)[0] == seen["tid"]]
        return (hi - ident, offs[0]) if offs else None
    finally:
        done.set()
        t.join(5)


def line_ids(tids) -> dict[int, int]:
    """tid → the profiler's host line id for the threads of this process it can find (module comment above);
    {} where the mapping cannot be made."""
    import struct

    tids = set(tids)
    try:
        line_id = _hasher()
        fd = os.open(f"/proc/{os.getpid()}/mem", os.O_RDONLY)
    except (OSError, AttributeError):
        return {}
    try:
        layout = _layout(fd)
        if layout is None:
            return {}
        below, tid_off = layout
        out = {}
        for lo, hi, perm in _maps():
            if not perm.startswith("rw") or hi - lo < below + tid_off + 4:
                continue
            pd = hi - below
            try:
                tid = struct.unpack("<i", os.pread(fd, 4, pd + tid_off))[0]
            except OSError:
                continue
            if tid in tids and tid not in out and _is_descriptor(fd, pd):
                out[tid] = line_id(pd)
        main = os.getpid()
        if main in tids:
            out[main] = line_id(threading.main_thread().ident)
        return out
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)


# ---- reading the record against a capture's thread names (profile/contention.py) -----------------------------

def line_id(name: str) -> int | None:
    """The capture's host line id a thread name carries ("tf_data_private_threadpool/-7007595809401127394"); None
    for a name without one (the main "python" thread)."""
    tail = name.rsplit("/", 1)[-1] if "/" in name else ""
    try:
        return int(tail)
    except ValueError:
        return None


def measured_cpu_us(record: dict | None) -> dict[int, float]:
    """line id → CPU µs over the capture window, from a SIDECAR record; {} without one."""
    out: dict[int, float] = {}
    for r in (record or {}).get("threads") or ():
        if r.get("line_id") is not None:
            out[int(r["line_id"])] = out.get(int(r["line_id"]), 0.0) + float(r["cpu_ms"]) * 1e3
    return out


def pool_share(record: dict | None, traced: set[int], inputs: set[int]) -> float:
    """Share of the compute's measured CPU that ran on threads the capture records no event for (TF's intra-op
    Eigen pool and oneDNN's OpenMP threads: parallel regions), against those it records (`traced` line ids: the
    inter-op threads, the training thread); 0 without a record.  The input threads (`inputs`) and this module's
    own thread are left out."""
    rows = (record or {}).get("threads") or ()
    # the training (main) thread: its tid is the process id, the smallest tid of the process
    pid = (record or {}).get("pid") or min((r.get("tid") or 0 for r in rows), default=None)
    pool = named = 0.0
    for r in rows:
        lid = r.get("line_id")
        if lid is None or lid in inputs or str(r.get("name", "")).startswith("tfbertperf"):
            continue
        if lid in traced or r.get("tid") == pid:
            named += float(r["cpu_ms"])
        else:
            pool += float(r["cpu_ms"])
    return pool / (pool + named) if pool + named > 0 else 0.0
