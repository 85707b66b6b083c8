"""GCS and Azure backends against real emulators: list/stat/ranged read/upload, idempotent and resumable
upload_dir, and one-line, redacted errors for bad input."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from tfbertperf.errors import UsageError
from tfbertperf.storage import open_backend
from tfbertperf.testing.proxy import FaultProxy
from tfbertperf.storage.upload import upload_dir

SCHEMES = {"gcs": "gs", "azure": "az"}


@pytest.fixture(params=["gcs", "azure"])
def remote(request):
    """(backend name, a fresh prefix URI in the test bucket/container, the emulator)."""
    server = request.getfixturevalue("gcs_env" if request.param == "gcs" else "azure_env")
    return request.param, f"{SCHEMES[request.param]}://tfbertperf-test/{uuid.uuid4().hex[:8]}", server


def test_list_stat_ranged_read_and_upload_round_trip(remote, tmp_path):
    name, prefix, _ = remote
    payload = os.urandom(300_000)
    src = tmp_path / "blob.bin"
    src.write_bytes(payload)
    b = open_backend(prefix)
    assert b.name == name
    uri = b.join(prefix, "dir/blob.bin")
    b.upload(str(src), uri, sha256="f" * 64)
    b.upload(str(src), b.join(prefix, "other.bin"))
    assert [o.uri for o in b.list(prefix)] == sorted([uri, b.join(prefix, "other.bin")])
    assert b.stat(uri).size == len(payload)
    assert b.exists(uri) and not b.exists(b.join(prefix, "nope"))
    assert b.checksum(uri) == "f" * 64
    assert b.read_range(uri, 12_345, 100_000) == payload[12_345:112_345]
    assert b.read_range(uri, len(payload) - 10, 10_000) == payload[-10:]  # past the end: the tail only
    assert b.read(uri) == payload
    s = b.metrics.summary()
    assert s["requests"] == 3 and s["bytes_read"] == 100_000 + 10 + len(payload)
    assert s["retries"] == 0 and s["errors"] == 0 and s["request_latency_ms"]["p50"] > 0


def test_missing_object_is_a_one_line_usage_error(remote):
    _, prefix, _ = remote
    b = open_backend(prefix)
    with pytest.raises(UsageError, match="no such") as e:
        b.stat(b.join(prefix, "missing.tfrecord"))
    assert "\n" not in str(e.value)


def test_upload_dir_is_idempotent_and_writes_the_manifest_last(remote, tfrecord_shards):
    _, prefix, _ = remote
    local, shards = tfrecord_shards
    first = upload_dir(local, prefix, progress=False)
    assert first["uploaded"] == len(shards) + 1 and first["skipped"] == 0
    again = upload_dir(local, prefix, progress=False)
    assert again["uploaded"] == 0 and again["skipped"] == len(shards) + 1
    b = open_backend(prefix)
    for shard in shards:
        assert b.read(b.join(prefix, shard)) == open(os.path.join(local, shard), "rb").read()


def test_upload_dir_resumes_after_an_interruption(remote, tfrecord_shards, tmp_path, monkeypatch):
    """An outage after a few requests aborts the upload without a manifest; a re-run uploads only the rest."""
    name, prefix, server = remote
    local, shards = tfrecord_shards
    upstream = server.url if name == "gcs" else f"http://127.0.0.1:{server.port}"
    with FaultProxy(upstream, fail_after=6) as proxy:
        if name == "gcs":
            monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        else:
            monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                               server.connection_string.replace(f":{server.port}/", f":{proxy.port}/"))
        b = open_backend(prefix)
        b.max_attempts = 2  # fail fast: the outage does not end
        b.backoff_s = 0.01

        class OneAtATime:
            concurrency = 1

        with pytest.raises(UsageError, match="failed after 2 attempts"):
            upload_dir(local, prefix, OneAtATime(), progress=False, backend=b)
    if name == "gcs":
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
    else:
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", server.connection_string)
    b = open_backend(prefix)
    done_before = {o.uri.rsplit("/", 1)[1] for o in b.list(prefix)}
    assert "manifest.json" not in done_before and 0 < len(done_before) < len(shards)
    resumed = upload_dir(local, prefix, progress=False)
    assert resumed["skipped"] == len(done_before)
    assert resumed["uploaded"] == len(shards) + 1 - len(done_before)
    assert b.exists(b.join(prefix, "manifest.json"))


def test_reads_survive_injected_faults_with_retries_counted(remote, tmp_path, monkeypatch):
    name, prefix, server = remote
    payload = os.urandom(200_000)
    (tmp_path / "x").write_bytes(payload)
    uri = open_backend(prefix).join(prefix, "x")
    open_backend(prefix).upload(str(tmp_path / "x"), uri)
    upstream = server.url if name == "gcs" else f"http://127.0.0.1:{server.port}"
    with FaultProxy(upstream, error_rate=0.15, reset_rate=0.15, seed=3) as proxy:
        if name == "gcs":
            monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        else:
            monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                               server.connection_string.replace(f":{server.port}/", f":{proxy.port}/"))
        b = open_backend(prefix)
        b.backoff_s = 0.001
        for k in range(40):
            assert b.read_range(uri, k * 1000, 5000) == payload[k * 1000:k * 1000 + 5000]
        s = b.metrics.summary()
        assert proxy.stats["injected_503"] > 0 and proxy.stats["injected_resets"] > 0
        assert s["requests"] == 40 and s["retries"] > 0 and s["errors"] == s["retries"]


# ---- bad input --------------------------------------------------------------------------------------------
def test_unknown_scheme_is_named_and_its_sas_redacted():
    with pytest.raises(UsageError) as e:
        open_backend("s3://bucket/data?sv=2022-11-02&sig=TOPSECRETSIG")
    assert "unknown URI scheme 's3'" in str(e.value) and "TOPSECRETSIG" not in str(e.value)


def test_missing_bucket_and_container_are_named(gcs_env, azure_env):
    with pytest.raises(UsageError, match=r"gs://no-such-bucket: no such bucket"):
        open_backend("gs://no-such-bucket/data")
    with pytest.raises(UsageError, match=r"az://no-such-container: no such container"):
        open_backend("az://no-such-container/data")


def test_rejected_azure_key_is_one_line_without_the_key(azurite, monkeypatch):
    bad_key = "QmFkS2V5Rm9yVGVzdHNPbmx5" * 3
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_URL", azurite.blob_endpoint)
    monkeypatch.setenv("AZURE_STORAGE_KEY", bad_key)
    with pytest.raises(UsageError, match="rejected the credentials") as e:
        open_backend("az://tfbertperf-test/data")
    assert bad_key not in str(e.value) and "\n" not in str(e.value)


def test_sas_token_in_an_az_uri_is_never_echoed(azurite, monkeypatch):
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_URL", azurite.blob_endpoint)
    uri = "az://no-such-container/data?sv=2022-11-02&sp=r&sig=TOPSECRETSIG%3D"
    with pytest.raises(UsageError) as e:
        open_backend(uri)
    assert "TOPSECRETSIG" not in str(e.value) and "az://no-such-container" in str(e.value)


def test_a_real_sas_token_in_the_uri_grants_access_and_stays_hidden(azure_env, monkeypatch, tmp_path):
    import datetime

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    from tfbertperf.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

    (tmp_path / "f").write_bytes(b"hello sas")
    open_backend("az://tfbertperf-test/sas").upload(str(tmp_path / "f"), "az://tfbertperf-test/sas/f")
    sas = generate_container_sas(AZURITE_ACCOUNT, "tfbertperf-test", account_key=AZURITE_KEY,
                                 permission=ContainerSasPermissions(read=True, list=True),
                                 expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_URL", azure_env.blob_endpoint)
    b = open_backend(f"az://tfbertperf-test/sas?{sas}")
    assert [o.uri for o in b.list(f"az://tfbertperf-test/sas?{sas}")] == ["az://tfbertperf-test/sas/f"]
    assert b.read(b.join(f"az://tfbertperf-test/sas?{sas}", "f")) == b"hello sas"
    with pytest.raises(UsageError) as e:  # read-only token: the write is refused, and the token not echoed
        b.upload(str(tmp_path / "f"), "az://tfbertperf-test/sas/g")
    sig = [kv for kv in sas.split("&") if kv.startswith("sig=")][0][4:]
    assert "rejected the credentials" in str(e.value) and sig not in str(e.value)


def _cli(code: str, env: dict) -> subprocess.CompletedProcess:
    """Run `code` as a CLI entry point (cli_entry) in a clean process, as a user would hit it."""
    prog = ("from tfbertperf.errors import cli_entry\n"
            "from tfbertperf.storage import open_backend\n"
            f"cli_entry(lambda: {code})()\n")
    return subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=60)


def test_no_credentials_exit_2_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AZURE_", "GOOGLE_", "STORAGE_EMULATOR", "CLOUDSDK"))}
    # No metadata-server probe (it is not on the loopback) and no gcloud config: ADC has nothing to find.
    env.update(NO_GCE_CHECK="true", HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"))
    for uri, expect in (("gs://bucket/data", "no Google Cloud credentials"),
                        ("az://container/data?sig=TOPSECRETSIG", "no Azure Storage account")):
        p = _cli(f"open_backend({uri!r})", env)
        assert p.returncode == 2, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and expect in lines[0] and "TOPSECRETSIG" not in p.stderr, p.stderr
