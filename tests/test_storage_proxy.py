"""The fault-injecting loopback proxy: latency, bandwidth cap, 503s and resets happen as configured, bodies
pass through intact, CONNECT tunnels go only to the configured target, and the CLI rejects bad values."""

from __future__ import annotations

import http.client
import http.server
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from tfbertperf.testing.proxy import FaultProxy

PAYLOAD = os.urandom(1_000_000)


class _Origin(http.server.BaseHTTPRequestHandler):
    """A plain HTTP server standing in for a storage service: GET → PAYLOAD, PUT → echoes the body length."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD)

    def do_PUT(self):
        n = len(self.rfile.read(int(self.headers["Content-Length"])))
        body = str(n).encode()
        self.send_response(201)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def origin():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _get(port: int, method="GET", body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, "/obj", body=body)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_bodies_pass_through_unchanged(origin):
    with FaultProxy(origin) as p:
        assert _get(p.port) == (200, PAYLOAD)
        assert _get(p.port, "PUT", b"x" * 12345) == (201, b"12345")
        assert p.stats["requests"] == 2 and p.stats["injected_503"] == 0


def test_latency_is_added_per_request(origin):
    with FaultProxy(origin) as fast, FaultProxy(origin, latency_ms=60) as slow:
        def timed(port):
            t0 = time.perf_counter()
            _get(port)
            return time.perf_counter() - t0

        # interleaved, and the fastest of each kind: a hiccup of the loaded machine slows one request, not all
        base, delayed = [], []
        for _ in range(5):
            base.append(timed(fast.port))
            delayed.append(timed(slow.port))
    assert min(delayed) - min(base) >= 0.055  # at least the injected 60 ms (less timer slack)


def test_bandwidth_cap_limits_throughput(origin):
    with FaultProxy(origin, bandwidth_mbps=10) as p:
        t0 = time.perf_counter()
        for _ in range(3):
            assert _get(p.port)[1] == PAYLOAD
        seconds = time.perf_counter() - t0
    assert 3 * len(PAYLOAD) / 1e6 / seconds <= 10.5  # 3 MB at 10 MB/s take at least ~0.3 s


def test_503s_and_resets_come_at_the_configured_rates(origin):
    outcomes = {"ok": 0, "503": 0, "reset": 0}
    with FaultProxy(origin, error_rate=0.2, reset_rate=0.2, seed=1) as p:
        for _ in range(150):
            try:
                status, body = _get(p.port)
                outcomes["503" if status == 503 else "ok"] += 1
                if status == 200:
                    assert body == PAYLOAD
            except (ConnectionError, http.client.IncompleteRead, http.client.RemoteDisconnected):
                outcomes["reset"] += 1
        stats = p.stats
    assert outcomes["503"] == stats["injected_503"] and outcomes["reset"] == stats["injected_resets"]
    assert 15 <= outcomes["503"] <= 45 and 15 <= outcomes["reset"] <= 45  # 20 % of 150 = 30 each


def test_connect_tunnels_only_to_the_configured_target(origin):
    port = int(origin.rsplit(":", 1)[1])
    with FaultProxy(connect_target=f"127.0.0.1:{port}") as p:
        s = socket.create_connection(("127.0.0.1", p.port))
        # Ask for a far-away host: the tunnel must still end at the loopback target.
        s.sendall(b"CONNECT storage.googleapis.com:443 HTTP/1.1\r\nHost: storage.googleapis.com:443\r\n\r\n")
        f = s.makefile("rb")
        assert f.readline().startswith(b"HTTP/1.1 200")
        while f.readline() not in (b"\r\n", b""):
            pass
        s.sendall(b"GET /obj HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = f.read()
        s.close()
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(PAYLOAD)
        assert p.stats["tunnels"] == 1


def test_cli_rejects_a_bad_rate_with_one_line():
    p = subprocess.run([sys.executable, "-m", "tfbertperf.testing.proxy", "--upstream", "http://127.0.0.1:1",
                        "--error-rate", "1.5"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "error_rate" in p.stderr


def test_cli_refuses_a_non_loopback_upstream():
    p = subprocess.run([sys.executable, "tools/faultproxy.py", "--upstream", "http://example.com:80"],
                       capture_output=True, text=True, timeout=60,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert p.returncode == 2 and "loopback" in p.stderr
