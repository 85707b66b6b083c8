"""A local tf.data service on 127.0.0.1 (`pipeline.data_service=local:N`): one DispatchServer and N WorkerServers,
each a child process of the run, so that a worker can be killed like a lost host and a server that misbehaves at
exit (TF 2.21 #113163: DispatchServer can crash while stopping) cannot take the run's result with it.

    with LocalCluster(workers=2) as cluster:      # dispatcher first, then the workers; ports bound by the servers
        cluster.address                          # "127.0.0.1:PORT" of the dispatcher (grpc)
        cluster.status()                         # per worker: pid, alive, exit, cpu_s, read_bytes
    # leaving: SIGTERM to every worker at once, wait; then to the dispatcher; SIGKILL after STOP_GRACE_S

Every server binds port 0 (the kernel picks a free one) and reports it on its stdout ("ready HOST:PORT"), so two
runs never race for a port.  A child's own logs go to a temporary file that `status()` names when it failed.
Process figures come from Linux /proc/<pid>: CPU seconds (utime + stime) and `rchar` (bytes the process passed
to read()/pread(): the workers' storage reads, page cache included; gRPC's recvmsg is not in it).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import tempfile
import time

from tfbertperf.errors import UsageError

START_TIMEOUT_S = 120.0  # a child has this long to import TF and print its address (2 shared cores, cold cache)
STOP_GRACE_S = 30.0  # after SIGTERM, before SIGKILL: a worker still serving a parallel_epochs job took over 10 s
# to stop on 2 cores shared with a second test process (CI); one that stops at once costs nothing more
HEARTBEAT_MS = 500  # local workers heartbeat this often ...
WORKER_TIMEOUT_MS = 3000  # ... and the dispatcher drops one silent this long (its tasks go to the others)


def _proc_figures(pid: int) -> dict:
    """{"cpu_s", "read_bytes"} of a live process from /proc (None each when it is gone or not Linux)."""
    out = {"cpu_s": None, "read_bytes": None}
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        out["cpu_s"] = round((int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK"), 3)
        with open(f"/proc/{pid}/io") as f:
            io = dict(line.split(": ") for line in f.read().splitlines())
        out["read_bytes"] = int(io["rchar"])
    except (OSError, IndexError, KeyError, ValueError):
        pass
    return out


class _Child:
    """One server process: `python -m tfbertperf.data.service_cluster ROLE [DISPATCHER]`."""

    def __init__(self, role: str, dispatcher: str | None = None) -> None:
        self.role = role
        self.log = tempfile.NamedTemporaryFile(prefix=f"tfbertperf-{role}-", suffix=".log", delete=False)
        cmd = [sys.executable, "-m", "tfbertperf.data.service_cluster", role] + ([dispatcher] if dispatcher else [])
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1"))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, env=env, text=True)
        self.address = ""
        self.last = {"cpu_s": None, "read_bytes": None}
        self.termed = False  # SIGTERM sent (terminate)

    def wait_ready(self, deadline: float) -> None:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(timeout=0.5):
                line = self.proc.stdout.readline()
                if line.startswith("ready "):
                    self.address = line.split()[1]
                    return
                if not line:
                    break
            if self.proc.poll() is not None:
                break
        raise UsageError(f"tf.data service {self.role} did not start on 127.0.0.1 "
                         f"(exit {self.proc.poll()}) — log: {self.log.name}")

    def figures(self) -> dict:
        if self.proc.poll() is None:
            self.last = _proc_figures(self.proc.pid)
        return self.last

    def terminate(self) -> None:
        """SIGTERM, once (its last figures read first); `stop` then waits for it.  Once: a second SIGTERM while
        the server stops can reach a thread that does not block it, and the default action kills the child."""
        if self.proc.poll() is None and not self.termed:
            self.figures()
            self.proc.send_signal(signal.SIGTERM)
            self.termed = True

    def stop(self, deadline: float | None = None) -> int | None:
        """SIGTERM, wait until `deadline` (default STOP_GRACE_S from now), SIGKILL; returns the exit code
        (negative: the signal that ended it)."""
        self.terminate()
        if self.proc.poll() is None:
            try:
                self.proc.wait(max(0.0, (deadline or time.monotonic() + STOP_GRACE_S) - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        if self.proc.returncode == 0:  # a clean stop leaves nothing to read: no log piles up in the temp folder
            try:
                os.unlink(self.log.name)
            except OSError:
                pass
        return self.proc.returncode


class LocalCluster:
    """A dispatcher and `workers` workers as child processes on 127.0.0.1 (module docstring)."""

    def __init__(self, workers: int) -> None:
        self.workers_wanted = int(workers)
        self.dispatcher: _Child | None = None
        self.workers: list[_Child] = []
        self.shutdown: dict = {}

    @property
    def address(self) -> str:
        return self.dispatcher.address if self.dispatcher else ""

    def start(self) -> "LocalCluster":
        atexit.register(self.stop)  # whatever happens to the run, no server outlives it
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            self.dispatcher = _Child("dispatcher")
            self.dispatcher.wait_ready(deadline)
            self.workers = [_Child("worker", self.address) for _ in range(self.workers_wanted)]
            for w in self.workers:
                w.wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> list[dict]:
        """Per worker: index, pid, address, alive, exit code (None while alive; negative = killed by that
        signal), cpu_s and read_bytes (the last reading while it was alive)."""
        return [{"worker": i, "pid": w.proc.pid, "address": w.address, "alive": w.proc.poll() is None,
                 "exit": w.proc.poll(), **w.figures()} for i, w in enumerate(self.workers)]

    def stop(self) -> dict:
        """Workers first, then the dispatcher (a worker stopping after its dispatcher retries it for long).
        Returns {"workers": [exit codes], "dispatcher": exit code, "clean": bool, and "logs": the stderr files of
        the servers that did not exit 0, kept (a clean server's log is removed)}; never raises: a server that
        crashes while stopping is recorded, not fatal (the run's result is already measured)."""
        if self.shutdown:
            return self.shutdown
        codes = []
        for w in self.workers:  # all of them told at once, then waited for within one grace period
            try:
                w.terminate()
            except Exception:  # noqa: BLE001 — see the docstring
                pass
        deadline = time.monotonic() + STOP_GRACE_S
        for w in self.workers:
            try:
                codes.append(w.stop(deadline))
            except Exception:  # noqa: BLE001 — see the docstring
                codes.append(None)
        disp = None
        if self.dispatcher is not None:
            try:
                disp = self.dispatcher.stop()
            except Exception:  # noqa: BLE001
                pass
        self.shutdown = {"workers": codes, "dispatcher": disp,
                         "clean": all(c == 0 for c in codes) and disp == 0}
        kept = [c.log.name for c in [*self.workers, self.dispatcher] if c is not None and os.path.exists(c.log.name)]
        if kept:  # a server that did not stop cleanly: its stderr, kept for the reader
            self.shutdown["logs"] = kept
        return self.shutdown

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _serve(role: str, dispatcher: str | None) -> int:
    """A server process: start it on a free port, print "ready 127.0.0.1:PORT", serve until SIGTERM."""
    import tensorflow as tf

    try:  # the service runs the pipeline's graph, whose inline tokenizer ops live in tensorflow_text
        import tensorflow_text  # noqa: F401
    except ImportError:
        pass
    svc = tf.data.experimental.service
    if role == "dispatcher":
        server = svc.DispatchServer(svc.DispatcherConfig(port=0, worker_timeout_ms=WORKER_TIMEOUT_MS))
        port = server.target.rsplit(":", 1)[1]
    else:
        server = svc.WorkerServer(svc.WorkerConfig(
            dispatcher_address=dispatcher, worker_address="127.0.0.1:%port%", port=0,
            heartbeat_interval_ms=HEARTBEAT_MS, data_transfer_address="127.0.0.1:%dts_port%"))
        port = server._address.rsplit(":", 1)[1]  # noqa: SLF001 — the bound port; no public accessor
    print(f"ready 127.0.0.1:{port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT}) if hasattr(signal, "sigwait") else server.join()
    server.stop()
    os._exit(0)  # skip interpreter teardown: TF servers' destructors at exit are where #113163 crashes


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # delivered to sigwait only
    sys.exit(_serve(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
