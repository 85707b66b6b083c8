"""A loopback HTTP proxy that makes a local storage emulator behave like remote cloud storage.

In front of Azurite or fake-gcs-server it adds, per request: a fixed latency (time to first byte), a shared
bandwidth cap on response bodies (the VM's link), HTTP 503 answers and connection resets (mid-body) at given
rates.  The kernel here has no netem, so the latency has to come from a proxy like this one.

From a test or a benchmark:

    with FaultProxy("http://127.0.0.1:10000", latency_ms=20, error_rate=0.05) as p:
        ... point the client at p.url ...
        p.stats  # {"requests": …, "injected_503": …, "injected_resets": …}

From the command line (for a demo; prints what to export):

    python -m tfbertperf.testing.proxy --upstream http://127.0.0.1:10000 --latency-ms 20 --error-rate 0.05

With `connect_target`, it also answers HTTP CONNECT (as an https_proxy) by tunnelling *every* CONNECT to that
one loopback address, whatever host was asked for — how TF's native gs:// filesystem is pointed at the
emulator's TLS port without anything leaving the machine.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import urllib.parse

from tfbertperf.testing.proxy_http import ProxyHandler, ProxyServer


class FaultProxy:
    """Reverse proxy to `upstream` on 127.0.0.1:`port` (0 = a free port) with injected latency, bandwidth cap,
    503s and resets.

    Args:
      upstream: base URL of the real server, e.g. "http://127.0.0.1:10000".
      latency_ms: added before each request is forwarded (per request, like a far-away service).
      bandwidth_mbps: cap in MB/s (1e6 bytes) on all response bodies together; 0 = none.
      error_rate: fraction of requests answered with HTTP 503 instead of being forwarded.
      reset_rate: fraction of requests whose connection is reset (TCP RST) half-way through the response body.
      stall_rate: fraction of requests held `stall_s` seconds before being forwarded (a client timeout).
      fail_after: after this many requests, every request is reset (an outage; for interruption tests).
      seed: for the fault dice (None = random).
      connect_target: "host:port" every CONNECT is tunnelled to (None = CONNECT refused).
    """

    def __init__(self, upstream: str = "", *, latency_ms: float = 0.0, bandwidth_mbps: float = 0.0,
                 error_rate: float = 0.0, reset_rate: float = 0.0, stall_rate: float = 0.0, stall_s: float = 5.0,
                 fail_after: int | None = None,
                 seed: int | None = None, connect_target: str | None = None, port: int = 0) -> None:
        for name, v in (("error_rate", error_rate), ("reset_rate", reset_rate), ("stall_rate", stall_rate)):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name}={v}: must be in [0, 1]")
        u = urllib.parse.urlsplit(upstream) if upstream else None
        if u is not None and (u.scheme != "http" or u.hostname not in ("127.0.0.1", "localhost", "::1")):
            raise ValueError(f"upstream {upstream!r}: must be http:// on the loopback")
        self.upstream = u
        self.latency_s = latency_ms / 1000.0
        self.bandwidth_bps = bandwidth_mbps * 1e6
        self.error_rate = error_rate
        self.reset_rate = reset_rate
        self.stall_rate, self.stall_s = stall_rate, stall_s
        self.fail_after = fail_after
        self.connect_target = connect_target
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._next_free = 0.0  # bandwidth: monotonic time the link is next free
        self.stats = {"requests": 0, "injected_503": 0, "injected_resets": 0, "injected_stalls": 0, "bytes_out": 0,
                      "tunnels": 0}
        self._server = ProxyServer(("127.0.0.1", port), ProxyHandler)
        self._server.proxy = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FaultProxy":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="tfbertperf-faultproxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._server.close_clients()

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- decisions (thread-safe) ------------------------------------------------------------------------
    def _fate(self) -> str:
        """'ok' | '503' | 'reset' | 'stall' | 'outage' for the next request, counting it."""
        with self._lock:
            self.stats["requests"] += 1
            if self.fail_after is not None and self.stats["requests"] > self.fail_after:
                self.stats["injected_resets"] += 1
                return "outage"  # reset without forwarding: the service never sees the request
            r = self._rng.random()
            if r < self.error_rate:
                self.stats["injected_503"] += 1
                return "503"
            if r < self.error_rate + self.reset_rate:
                self.stats["injected_resets"] += 1
                return "reset"
            if r < self.error_rate + self.reset_rate + self.stall_rate:
                self.stats["injected_stalls"] += 1
                return "stall"
            return "ok"

    def _throttle(self, nbytes: int) -> None:
        """Block until `nbytes` fit through the shared link (a reservation per piece, first come first served)."""
        if self.bandwidth_bps <= 0:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_free)
            self._next_free = start + nbytes / self.bandwidth_bps
            wait = self._next_free - now
        if wait > 0:
            time.sleep(wait)


# ---------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    from tfbertperf.errors import UsageError, cli_entry

    @cli_entry
    def run(argv):
        ap = argparse.ArgumentParser(prog="python -m tfbertperf.testing.proxy",
                                     description="Loopback proxy that injects latency, a bandwidth cap, 503s and "
                                                 "connection resets in front of a local storage emulator.")
        ap.add_argument("--upstream", required=True, help="emulator base URL, e.g. http://127.0.0.1:10000")
        ap.add_argument("--port", type=int, default=0, help="listen port on 127.0.0.1 (0 = a free one)")
        ap.add_argument("--latency-ms", type=float, default=0.0, help="added per request (ms)")
        ap.add_argument("--bandwidth-mbps", type=float, default=0.0, help="cap on response bytes, MB/s (0 = none)")
        ap.add_argument("--error-rate", type=float, default=0.0, help="fraction of requests answered 503")
        ap.add_argument("--reset-rate", type=float, default=0.0, help="fraction of requests reset mid-body")
        ap.add_argument("--seed", type=int, default=None, help="for the fault dice (default: random)")
        a = ap.parse_args(argv)
        try:
            proxy = FaultProxy(a.upstream, latency_ms=a.latency_ms, bandwidth_mbps=a.bandwidth_mbps,
                               error_rate=a.error_rate, reset_rate=a.reset_rate, seed=a.seed, port=a.port)
        except ValueError as e:
            raise UsageError(f"--upstream/--*-rate: {e}") from None
        except OSError as e:
            raise UsageError(f"--port {a.port}: cannot listen ({e.strerror})") from None
        proxy.start()
        up_port = proxy.upstream.port
        print(f"fault proxy on {proxy.url} -> {a.upstream} (latency {a.latency_ms} ms, bandwidth "
              f"{a.bandwidth_mbps or 'unlimited'} MB/s, 503 rate {a.error_rate}, reset rate {a.reset_rate})")
        print("point a client at it, e.g.:")
        print(f"  export STORAGE_EMULATOR_HOST={proxy.url}          # fake-gcs-server upstream")
        print(f"  # Azurite upstream: use BlobEndpoint=http://127.0.0.1:{proxy.port}/devstoreaccount1 in "
              f"AZURE_STORAGE_CONNECTION_STRING (instead of port {up_port})")
        print("Ctrl-C stops it.", flush=True)
        try:
            while True:
                time.sleep(3600)
        finally:
            proxy.stop()
            print(f"stats: {proxy.stats}", file=sys.stderr)

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
