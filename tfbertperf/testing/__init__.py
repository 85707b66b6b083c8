"""Test and demo gear, not part of the product: no stage (storage, data, model, train, profile, report, envinfo)
and no command imports it.

- emulators.py  real storage servers on 127.0.0.1: Azurite (Azure Blob) and fake-gcs-server (GCS, with a
                throwaway CA for TF's native gs://), and `native_env` to point TF's own filesystem at them
- proxy.py      FaultProxy: a loopback proxy that injects latency, a bandwidth cap, 503s and resets in front of
                an emulator (`python -m tfbertperf.testing.proxy --help`); proxy_http.py is its HTTP server

Used by tests/, tools/emulators.py, tools/faultproxy.py and tools/bench/.
"""
