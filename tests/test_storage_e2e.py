"""End to end from the emulators: prepare → upload → train a few steps from gs:// (fake-gcs-server) and az://
(Azurite) in stream and stage modes.  With deterministic input order, the loss trajectory must equal the local
run's step for step — the remote modes fed exactly the same examples — and storage bytes are reported."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tfbertperf.config import load_config

pytestmark = pytest.mark.slow

SMALL_DATA = ["data.dupe_factor=1", "data.num_shards=4", "data.vocab_size=2000"]
SHORT_RUN = ["train.steps=6", "profile.steps=2:4", "profile.probe_steps=2", "pipeline.deterministic=true",
             "train.deterministic=true", "profile.ceiling_seconds=0"]
BUCKET = "tfbertperf-test"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, fake_gcs, azurite):
    """The same small data set: prepared locally, prepared straight to gs:// (prepare uploads it), and
    uploaded to az:// with upload_dir.  Returns {"local": dir, "gs": uri, "az": uri, "runs": runs root}."""
    from tfbertperf.data import prepare_data
    from tfbertperf.storage.upload import upload_dir

    mp = pytest.MonkeyPatch()
    mp.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    mp.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    fake_gcs.create_bucket(BUCKET)
    azurite.create_container(BUCKET)
    local = str(tmp_path_factory.mktemp("e2e") / "data")
    cfg = load_config(sets=SMALL_DATA)
    prepare_data(cfg, local, progress=False)
    prepare_data(cfg, f"gs://{BUCKET}/e2e", progress=False)
    upload_dir(local, f"az://{BUCKET}/e2e", progress=False)
    yield {"local": local, "gs": f"gs://{BUCKET}/e2e", "az": f"az://{BUCKET}/e2e",
           "runs": str(tmp_path_factory.mktemp("runs"))}
    mp.undo()


def _run(uri: str, runs: str, *extra: str) -> dict:
    from tfbertperf.job import run

    cfg = load_config(data_uri=uri, sets=SMALL_DATA + SHORT_RUN + [f"run.out={runs}", *extra])
    return run(cfg, progress=False)[1]


@pytest.fixture(scope="module")
def local_report(prepared):
    return _run(prepared["local"], prepared["runs"])


@pytest.mark.slow
@pytest.mark.parametrize("scheme,mode", [("gs", "stream"), ("gs", "stage"), ("az", "stream"), ("az", "stage")])
def test_remote_run_trains_on_exactly_the_local_examples(prepared, local_report, scheme, mode):
    r = _run(prepared[scheme], prepared["runs"], f"data.mode={mode}")
    s = r["storage"]
    assert s["backend"] == {"gs": "gcs", "az": "azure"}[scheme] and s["mode"] == mode
    assert s["bytes_read"] > 0 and s["requests"] > 0 and s["errors"] == 0
    assert r["throughput"]["steps"] == local_report["throughput"]["steps"] == 6
    assert r["training"]["loss_trajectory"] == local_report["training"]["loss_trajectory"]
    if mode == "stream":
        # everything the 6 steps consumed (plus read-ahead) was parsed from the stream: at least 6 batches
        assert s["records_read"] >= 6 * r["training"]["global_batch_size"]
    else:
        assert s["cache_hits"] + s["cache_misses"] >= 1 and s["staged_bytes"] > 0


@pytest.mark.slow
def test_run_with_5_percent_faults_completes_with_retries_and_the_same_examples(prepared, local_report, fake_gcs,
                                                                                monkeypatch):
    from tfbertperf.testing.proxy import FaultProxy

    # seed 15: the 2nd and 6th of the first 20 requests fail, so the small run meets faults for sure
    with FaultProxy(fake_gcs.url, error_rate=0.025, reset_rate=0.025, seed=15) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = _run(prepared["gs"], prepared["runs"], "data.mode=stream", "data.chunk_mb=0.0625")  # 64 KiB reads
    s = r["storage"]
    assert proxy.stats["injected_503"] + proxy.stats["injected_resets"] > 0
    assert s["retries"] > 0 and s["retries"] == s["errors"]
    assert r["training"]["loss_trajectory"] == local_report["training"]["loss_trajectory"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["stream", "stage"])
def test_run_with_20_percent_faults_trains_on_exactly_the_local_examples(prepared, local_report, fake_gcs,
                                                                         monkeypatch, mode):
    """One request in five fails (503, reset mid-body, or a stall past the read timeout): the run retries them
    all (counted) and its loss trajectory is the local run's, step for step."""
    from tfbertperf.storage.remote import RemoteBackend
    from tfbertperf.testing.proxy import FaultProxy

    monkeypatch.setattr(RemoteBackend, "backoff_s", 0.01)
    monkeypatch.setattr(RemoteBackend, "read_timeout_s", 0.5)
    with FaultProxy(fake_gcs.url, error_rate=0.08, reset_rate=0.08, stall_rate=0.04, stall_s=1.5, seed=20) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = _run(prepared["gs"], prepared["runs"], f"data.mode={mode}", "data.chunk_mb=0.0625")
    s = r["storage"]
    injected = proxy.stats["injected_503"] + proxy.stats["injected_resets"] + proxy.stats["injected_stalls"]
    assert injected > 0 and s["retries"] > 0 and s["retries"] == s["errors"]
    assert r["training"]["loss_trajectory"] == local_report["training"]["loss_trajectory"]


def test_run_cli_with_a_sas_uri_fails_in_one_redacted_line(azurite, tmp_path):
    env = dict(os.environ, AZURE_STORAGE_ACCOUNT_URL=azurite.blob_endpoint)
    env.pop("AZURE_STORAGE_CONNECTION_STRING", None)
    p = subprocess.run([sys.executable, "-m", "tfbertperf.run", "--data",
                        "az://no-such-container/data?sv=2022-11-02&sp=rl&sig=TOPSECRETSIG%3D",
                        "--set", f"run.out={tmp_path}"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "TOPSECRETSIG" not in p.stderr + p.stdout
    errors = [ln for ln in p.stderr.splitlines() if "error" in ln.lower() and "no-such-container" in ln]
    assert len(errors) == 1 and "rejected the credentials" in errors[0]  # a made-up signature: HTTP 403


@pytest.mark.slow
def test_azure_stage_run_prints_our_lines_only_and_a_storage_line(prepared, azurite, tmp_path):
    """Issue 23 items 8 and 10: a staged Azure run's console holds our lines only (the SDK's and urllib3's log
    records go to the run's library.log) and says what the storage did."""
    from pathlib import Path

    sets = [a for s in SMALL_DATA + SHORT_RUN + [f"run.out={tmp_path}", "data.mode=stage"] for a in ("--set", s)]
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(AZURE_STORAGE_CONNECTION_STRING=azurite.connection_string,
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    p = subprocess.run([sys.executable, "-m", "tfbertperf.run", "--data", prepared["az"], *sets],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert all(ln.startswith("[tfbertperf]") for ln in p.stderr.splitlines()), p.stderr
    # console lines wrap at 120 characters (issue 30): the storage line with its continuation lines, joined
    lines = p.stdout.splitlines()
    (i,) = [k for k, ln in enumerate(lines) if ln.startswith("storage: azure/stage: ")]
    j = i + 1
    while j < len(lines) and lines[j].startswith("  "):
        j += 1
    line = " ".join([lines[i], *(ln.strip() for ln in lines[i + 1:j])])
    assert "MB from the store" in line and "from the local stage cache" in line and "errors 0" in line
