"""A loopback HTTP proxy that makes a local storage emulator behave like remote cloud storage.

In front of Azurite or fake-gcs-server it adds, per request: a fixed latency (time to first byte), a shared
bandwidth cap on response bodies (the VM's link), HTTP 503 answers and connection resets (mid-body) at given
rates.  The kernel here has no netem, so the latency has to come from a proxy like this one.

From a test or a benchmark:

    with FaultProxy("http://127.0.0.1:10000", latency_ms=20, error_rate=0.05) as p:
        ... point the client at p.url ...
        p.stats  # {"requests": …, "injected_503": …, "injected_resets": …}

From the command line (for a demo; prints what to export):

    python -m tfbertperf.storage.proxy --upstream http://127.0.0.1:10000 --latency-ms 20 --error-rate 0.05

With `connect_target`, it also answers HTTP CONNECT (as an https_proxy) by tunnelling *every* CONNECT to that
one loopback address, whatever host was asked for — how TF's native gs:// filesystem is pointed at the
emulator's TLS port without anything leaving the machine.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import random
import socket
import struct
import sys
import threading
import time
import urllib.parse

_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
        "transfer-encoding", "upgrade", "content-length", "host"}
_PIECE = 64 * 1024  # bytes written per bandwidth slot


class _Reset(Exception):
    pass


class FaultProxy:
    """Reverse proxy to `upstream` on 127.0.0.1:`port` (0 = a free port) with injected latency, bandwidth cap,
    503s and resets.

    Args:
      upstream: base URL of the real server, e.g. "http://127.0.0.1:10000".
      latency_ms: added before each request is forwarded (per request, like a far-away service).
      bandwidth_mbps: cap in MB/s (1e6 bytes) on all response bodies together; 0 = none.
      error_rate: fraction of requests answered with HTTP 503 instead of being forwarded.
      reset_rate: fraction of requests whose connection is reset (TCP RST) half-way through the response body.
      fail_after: after this many requests, every request is reset (an outage; for interruption tests).
      seed: for the fault dice (None = random).
      connect_target: "host:port" every CONNECT is tunnelled to (None = CONNECT refused).
    """

    def __init__(self, upstream: str = "", *, latency_ms: float = 0.0, bandwidth_mbps: float = 0.0,
                 error_rate: float = 0.0, reset_rate: float = 0.0, fail_after: int | None = None,
                 seed: int | None = None, connect_target: str | None = None, port: int = 0) -> None:
        for name, v in (("error_rate", error_rate), ("reset_rate", reset_rate)):
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
        self.fail_after = fail_after
        self.connect_target = connect_target
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._next_free = 0.0  # bandwidth: monotonic time the link is next free
        self.stats = {"requests": 0, "injected_503": 0, "injected_resets": 0, "bytes_out": 0, "tunnels": 0}
        self._server = _Server(("127.0.0.1", port), _Handler)
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
        """'ok' | '503' | 'reset' | 'outage' for the next request, counting it."""
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


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: FaultProxy

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._clients: set[socket.socket] = set()
        self._clients_lock = threading.Lock()

    def process_request(self, request, client_address):
        with self._clients_lock:
            self._clients.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._clients_lock:
            self._clients.discard(request)
        super().shutdown_request(request)

    def close_clients(self) -> None:
        with self._clients_lock:
            for s in list(self._clients):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as SDK clients expect
    server: _Server
    _up: http.client.HTTPConnection | None = None

    def log_message(self, *args) -> None:  # quiet: a proxy in a benchmark must not spam stderr
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (_Reset, ConnectionError, OSError):
            pass
        finally:
            if self._up is not None:
                self._up.close()

    # ---- request body -----------------------------------------------------------------------------------
    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _reset(self) -> None:
        """Abort the connection with a TCP RST (SO_LINGER 0), as a broken network path would."""
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        raise _Reset()

    # ---- forwarding -------------------------------------------------------------------------------------
    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        p = self.server.proxy
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        headers["Host"] = p.upstream.netloc
        if body or self.command in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body))
        for attempt in (1, 2):  # the upstream may have closed an idle keep-alive connection
            if self._up is None:
                self._up = http.client.HTTPConnection(p.upstream.hostname, p.upstream.port or 80, timeout=120)
            try:
                self._up.request(self.command, self.path, body=body or None, headers=headers)
                resp = self._up.getresponse()
                data = resp.read()
                return resp.status, resp.reason, resp.getheaders(), data
            except (http.client.HTTPException, OSError):
                self._up.close()
                self._up = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _proxy(self) -> None:
        p = self.server.proxy
        if p.upstream is None:
            self.send_error(502, "no upstream configured")
            return
        body = self._body()
        fate = p._fate()
        if p.latency_s:
            time.sleep(p.latency_s)
        if fate == "503":
            msg = b"Service Unavailable (injected by tfbertperf fault proxy)\n"
            self.send_response(503)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(msg)))
            self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(msg)
            return
        if fate == "outage":
            self._reset()
        try:
            status, reason, headers, data = self._forward(body)
        except (http.client.HTTPException, OSError):
            self.send_error(502, "upstream unreachable")
            return
        if fate == "reset" and len(data) < 2:
            self._reset()  # nothing to cut in half: reset before the status line, or the client would not notice
        self.send_response(status, reason)
        for k, v in headers:
            if k.lower() not in _HOP:
                self.send_header(k, v)
        no_body = self.command == "HEAD" or status in (204, 304) or 100 <= status < 200
        if self.command == "HEAD":
            cl = dict((k.lower(), v) for k, v in headers).get("content-length")
            if cl is not None:
                self.send_header("Content-Length", cl)
        elif not no_body:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if no_body:
            return
        cut = len(data) // 2 if fate == "reset" else len(data)
        for i in range(0, cut, _PIECE):
            piece = data[i:min(cut, i + _PIECE)]
            p._throttle(len(piece))
            self.wfile.write(piece)
        with p._lock:
            p.stats["bytes_out"] += cut
        if fate == "reset":
            self._reset()

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _proxy

    # ---- CONNECT tunnel (https_proxy for TF's native gs://) ---------------------------------------------
    def do_CONNECT(self) -> None:
        p = self.server.proxy
        if not p.connect_target:
            self.send_error(405, "CONNECT not enabled")
            return
        host, _, port = p.connect_target.rpartition(":")
        try:
            up = socket.create_connection((host, int(port)), timeout=30)
        except OSError:
            self.send_error(502, "tunnel target unreachable")
            return
        with p._lock:
            p.stats["tunnels"] += 1
        if p.latency_s:
            time.sleep(p.latency_s)
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        client = self.connection

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while True:
                    buf = src.recv(_PIECE)
                    if not buf:
                        break
                    dst.sendall(buf)
            except OSError:
                pass
            finally:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        t = threading.Thread(target=pump, args=(up, client), daemon=True)
        t.start()
        pump(client, up)
        t.join()
        up.close()


# ---------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    from tfbertperf.errors import UsageError, cli_entry

    @cli_entry
    def run(argv):
        ap = argparse.ArgumentParser(prog="python -m tfbertperf.storage.proxy",
                                     description="Loopback proxy that injects latency, a bandwidth cap, 503s and "
                                                 "connection resets in front of a local storage emulator.")
        ap.add_argument("--upstream", required=True, help="emulator base URL, e.g. http://127.0.0.1:10000")
        ap.add_argument("--port", type=int, default=0, help="listen port on 127.0.0.1 (0 = a free one)")
        ap.add_argument("--latency-ms", type=float, default=0.0, help="added per request (ms)")
        ap.add_argument("--bandwidth-mbps", type=float, default=0.0, help="cap on response bytes, MB/s (0 = none)")
        ap.add_argument("--error-rate", type=float, default=0.0, help="fraction of requests answered 503")
        ap.add_argument("--reset-rate", type=float, default=0.0, help="fraction of requests reset mid-body")
        ap.add_argument("--seed", type=int, default=None)
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
    main()
