"""Storage faults against the real emulators: transient ones (503, connection reset, timeout, an emulator
restart) are retried with capped exponential backoff, counted, and the read still yields exactly the shards'
records; permanent ones (404, rejected credentials) fail at once in one line."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid

import pytest

from tfbertperf.config import DataConfig
from tfbertperf.errors import UsageError
from tfbertperf.storage import open_backend, open_shards
from tfbertperf.storage.integrity import storage_errors
from tfbertperf.storage.remote import RemoteBackend, TransientError
from tfbertperf.storage.upload import upload_dir
from tfbertperf.testing.proxy import FaultProxy

SMALL = DataConfig(chunk_mb=0.0625, concurrency=3, lookahead=2, cache_mb=64)


def _read(src, uris, backend, cycle_length=2) -> list[bytes]:
    ds = src.filenames.interleave(src.read, cycle_length=cycle_length, num_parallel_calls=cycle_length)
    with storage_errors(backend, uris, uris[0]):
        return [r.numpy() for r in ds]


def _point_at(monkeypatch, name, server, port):
    if name == "gcs":
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    else:
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                           server.connection_string.replace(f":{server.port}/", f":{port}/"))


def test_backoff_is_exponential_capped_and_counted(monkeypatch):
    """The delays between attempts: backoff_s doubling per attempt, capped at backoff_cap_s, jittered ±50 %."""

    class Flaky(RemoteBackend):
        name = "flaky"

        def _classify(self, exc, what):
            return exc

    b = Flaky("x://y")
    b.backoff_s, b.backoff_cap_s = 0.01, 0.04
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    fails = iter(range(5))

    def once():
        if next(fails, None) is not None:
            raise TransientError("HTTP 503")
        return b"ok"

    assert b.call("x://y/z", once, count_bytes=True) == b"ok"
    assert len(slept) == 5
    for got, base in zip(slept, [0.01, 0.02, 0.04, 0.04, 0.04]):
        assert 0.5 * base <= got <= 1.5 * base
    s = b.metrics.summary()
    assert (s["retries"], s["errors"], s["requests"]) == (5, 5, 1)


@pytest.mark.parametrize("rate,seed", [(0.05, 3), (0.20, 5)])
@pytest.mark.parametrize("mode", ["stream", "stage"])
@pytest.mark.parametrize("name", ["gcs", "azure"])
def test_faults_at_5_and_20_percent_give_exactly_the_records(request, tfrecord_shards, monkeypatch, name, mode,
                                                              rate, seed):
    """503s, resets and stalls past the read timeout, in equal parts."""
    server = request.getfixturevalue("gcs_env" if name == "gcs" else "azure_env")
    local, shards = tfrecord_shards
    prefix = f"{'gs' if name == 'gcs' else 'az'}://tfbertperf-test/faults-{uuid.uuid4().hex[:8]}"
    upload_dir(local, prefix, progress=False)
    monkeypatch.setattr(RemoteBackend, "backoff_s", 0.005)
    monkeypatch.setattr(RemoteBackend, "read_timeout_s", 0.5)
    with FaultProxy(f"http://127.0.0.1:{server.port}", error_rate=rate / 3, reset_rate=rate / 3,
                    stall_rate=rate / 3, stall_s=1.5, seed=seed) as proxy:
        _point_at(monkeypatch, name, server, proxy.port)
        cfg = dataclasses.replace(SMALL, mode=mode)
        b = open_backend(prefix, cfg)
        uris = [b.join(prefix, n) for n in sorted(shards)]
        src = open_shards(uris, cfg, b)
        got = _read(src, uris, b)
        src.close()
    assert sorted(got) == sorted(r for recs in shards.values() for r in recs)
    s = b.metrics.summary()
    injected = proxy.stats["injected_503"] + proxy.stats["injected_resets"] + proxy.stats["injected_stalls"]
    assert injected > 0 and s["retries"] > 0
    assert s["retries"] == s["errors"]  # every failed attempt was retried, none given up on


def test_an_emulator_restarted_mid_read_is_survived(tfrecord_shards, monkeypatch):
    """fake-gcs-server with its data on disk is stopped after the first shard and started again 1 s later on the
    same port; the stream reader retries through the outage (connection refused) and reads every record."""
    from tfbertperf.testing.emulators import FakeGcs

    local, shards = tfrecord_shards
    with FakeGcs(tls=False, memory=False) as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
        gcs.create_bucket("restart")
        upload_dir(local, "gs://restart/data", progress=False)
        cfg = dataclasses.replace(SMALL, mode="stream", concurrency=1)
        b = open_backend("gs://restart/data", cfg)
        b.backoff_s = 0.05
        # retries outlast the restart however long this machine takes to relaunch the emulator (the default
        # budget, ~2.6-7.7 s of backoff, is about real outages, not about this test)
        b.max_attempts = 40
        uris = [b.join("gs://restart/data", n) for n in sorted(shards)]
        src = open_shards(uris, cfg, b)
        got, first = [], len(shards[sorted(shards)[0]])
        done = threading.Event()  # the relaunching thread must outlive the read (see FakeGcs.relaunch)
        restarter = threading.Thread(target=lambda: (time.sleep(1.0), gcs.relaunch(), done.wait(120)))
        for r in src.filenames.interleave(src.read, cycle_length=1):
            got.append(r.numpy())
            if len(got) == first:  # first shard done, the others not requested yet: the service goes away
                gcs.kill()
                restarter.start()
        done.set()
        restarter.join()
        src.close()
    assert sorted(got) == sorted(r for recs in shards.values() for r in recs)
    assert b.metrics.summary()["retries"] > 0


def test_object_gone_mid_run_fails_at_once_in_one_line(tfrecord_shards, gcs_env):
    local, shards = tfrecord_shards
    prefix = f"gs://tfbertperf-test/gone-{uuid.uuid4().hex[:8]}"
    upload_dir(local, prefix, progress=False)
    cfg = dataclasses.replace(SMALL, mode="stream")
    b = open_backend(prefix, cfg)
    uris = [b.join(prefix, n) for n in sorted(shards)]
    src = open_shards(uris, cfg, b)  # shards stat'ed here
    b.bucket.blob(uris[2].split("/", 3)[3]).delete()
    t0 = time.perf_counter()
    with pytest.raises(UsageError) as e:
        _read(src, uris, b, cycle_length=1)
    src.close()
    assert str(e.value) == f"{uris[2]}: not found"
    s = b.metrics.summary()
    # each read of that shard in flight (up to 3 ahead) failed once; none was retried
    assert s["retries"] == 0 and 1 <= s["errors"] <= 3 and time.perf_counter() - t0 < 30


def test_rejected_credentials_fail_at_once_in_one_line(azurite, monkeypatch):
    from tfbertperf.testing.emulators import AZURITE_KEY

    bad_key = AZURITE_KEY[:10] + ("A" if AZURITE_KEY[10] != "A" else "B") + AZURITE_KEY[11:]
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_URL", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string.replace(AZURITE_KEY, bad_key))
    azurite.create_container("tfbertperf-test")
    t0 = time.perf_counter()
    with pytest.raises(UsageError) as e:
        open_backend("az://tfbertperf-test/data")
    assert str(e.value).startswith("az://tfbertperf-test: Azure Storage rejected the credentials (HTTP 403;")
    assert bad_key not in str(e.value) and time.perf_counter() - t0 < 10


@pytest.mark.parametrize("scheme", ["gs", "az"])
def test_unreachable_storage_host_is_retried_then_one_line_with_the_cause(scheme, monkeypatch):
    import socket

    from tfbertperf.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

    held = socket.socket()  # a loopback port held (bound, never listening): connections are refused
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    monkeypatch.setattr(RemoteBackend, "backoff_s", 0.001)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_URL", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
                       f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};")
    with pytest.raises(UsageError) as e:
        open_backend(f"{scheme}://tfbertperf-test/data")
    held.close()
    assert str(e.value) == (f"{scheme}://tfbertperf-test: storage request failed after {RemoteBackend.max_attempts} "
                            "attempts (connection refused)")


def test_a_host_name_that_does_not_resolve_fails_at_once():
    """No DNS query may leave this machine, so the SDK's own exception text (requests/urllib3) is given."""
    import requests

    from tfbertperf.storage.remote import network_failure

    exc = requests.exceptions.ConnectionError(
        "HTTPSConnectionPool(host='storage.example.invalid', port=443): Max retries exceeded with url: /b (Caused by "
        "NameResolutionError(\"<urllib3.connection.HTTPSConnection object at 0x7f>: Failed to resolve "
        "'storage.example.invalid' ([Errno -2] Name or service not known)\"))")
    err = network_failure(exc, "gs://b/x")
    assert isinstance(err, UsageError) and str(err) == "gs://b/x: storage host cannot be resolved"


@pytest.mark.parametrize("which", ["gcs", "azurite"])
def test_an_emulator_whose_free_port_was_taken_before_it_bound_starts_on_another(which):
    # CI: fake-gcs-server exited with "bind: address already in use" on the free port chosen for it a moment before;
    # Azurite picks its port the same way ("listen EADDRINUSE")
    import socket

    from tfbertperf.testing.emulators import Azurite, EmulatorMissing, FakeGcs

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = FakeGcs(tls=False) if which == "gcs" else Azurite()
        server.port = taken.getsockname()[1]  # as if another process took it between the choice and the bind
        try:
            with server:
                assert server.port != taken.getsockname()[1]
                if which == "gcs":
                    server.create_bucket("after-a-taken-port")
                else:
                    server.create_container("after-a-taken-port")
        except EmulatorMissing as e:
            pytest.skip(str(e))


def test_an_emulator_on_the_port_its_caller_chose_does_not_move_off_it():
    import socket

    from tfbertperf.testing.emulators import Azurite, EmulatorMissing

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            with pytest.raises(RuntimeError, match="EADDRINUSE"):
                Azurite(port=port).start()
        except EmulatorMissing as e:
            pytest.skip(str(e))
