"""The HTTP side of the fault proxy (proxy.FaultProxy): a threading server that can cut its clients off, and the
request handler that forwards to the upstream, injects the fault FaultProxy decides on, paces response bodies
through the shared bandwidth cap, and tunnels CONNECT to the one configured loopback target."""

from __future__ import annotations

import http.client
import http.server
import socket
import struct
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfbertperf.testing.proxy import FaultProxy

_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
        "transfer-encoding", "upgrade", "content-length", "host"}
_PIECE = 64 * 1024  # bytes written per bandwidth slot


class _Reset(Exception):
    """Raised after a connection was set to end in a TCP RST: unwinds the handler without another write."""


class ProxyServer(http.server.ThreadingHTTPServer):
    """Threading HTTP server on the loopback that remembers its clients, so stop() can cut them off."""

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


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    """One client connection: each request is forwarded (or failed) as FaultProxy._fate decides."""

    protocol_version = "HTTP/1.1"  # keep-alive, as SDK clients expect
    server: ProxyServer
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
        try:
            return self._exchange(headers, body)
        except (http.client.HTTPException, OSError):  # the upstream may have closed an idle keep-alive connection
            return self._exchange(headers, body)

    def _exchange(self, headers: dict[str, str], body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """One request on the kept-alive upstream connection (opened on demand, dropped on failure)."""
        p = self.server.proxy
        if self._up is None:
            self._up = http.client.HTTPConnection(p.upstream.hostname, p.upstream.port or 80, timeout=120)
        try:
            self._up.request(self.command, self.path, body=body or None, headers=headers)
            resp = self._up.getresponse()
            return resp.status, resp.reason, resp.getheaders(), resp.read()
        except (http.client.HTTPException, OSError):
            self._up.close()
            self._up = None
            raise

    def _proxy(self) -> None:
        p = self.server.proxy
        if p.upstream is None:
            self.send_error(502, "no upstream configured")
            return
        body = self._body()
        fate = p._fate()
        if p.latency_s:
            time.sleep(p.latency_s)
        if fate == "stall":
            time.sleep(p.stall_s)  # the client times out first; then it is answered normally (or nobody listens)
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
