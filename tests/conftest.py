"""Shared fixtures: real storage emulators (Azurite, fake-gcs-server) on free 127.0.0.1 ports.

The emulators are session-scoped (started once, on first use, stopped at the end).  When one is genuinely not
installed the tests that need it are skipped with the install command as the reason — except in CI (CI=true),
where a missing emulator is a failure, because CI installs both.
"""

from __future__ import annotations

import os

import pytest


def _missing(reason: str):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI=true: emulators must be installed; see README)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def azurite():
    """A running Azurite blob service (tfbertperf.testing.emulators.Azurite)."""
    from tfbertperf.testing.emulators import Azurite, EmulatorMissing

    try:
        server = Azurite().start()
    except EmulatorMissing as e:
        _missing(str(e))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fake_gcs():
    """A running fake-gcs-server (HTTP for the SDK; HTTPS with a throwaway CA for TF's native gs://)."""
    from tfbertperf.testing.emulators import EmulatorMissing, FakeGcs

    try:
        server = FakeGcs(tls=True).start()
    except EmulatorMissing as e:
        _missing(str(e))
    yield server
    server.stop()


def _clear_azure_env(monkeypatch) -> None:
    for k in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_URL", "AZURE_STORAGE_KEY",
              "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture
def gcs_env(fake_gcs, monkeypatch):
    """STORAGE_EMULATOR_HOST pointing at the emulator; bucket 'tfbertperf-test' exists.  Returns the server."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    fake_gcs.create_bucket("tfbertperf-test")
    return fake_gcs


@pytest.fixture
def azure_env(azurite, monkeypatch):
    """AZURE_STORAGE_CONNECTION_STRING for Azurite; container 'tfbertperf-test' exists.  Returns the server."""
    _clear_azure_env(monkeypatch)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    azurite.create_container("tfbertperf-test")
    return azurite


@pytest.fixture(scope="session")
def tfrecord_shards(tmp_path_factory):
    """A local directory of 4 TFRecord shards (written by TF itself, records of varied sizes, one shard larger
    than a 64 KiB stream chunk several times over) plus a manifest.json; returns (dir, {shard name: records})."""
    import json
    import random

    import tensorflow as tf

    d = tmp_path_factory.mktemp("shards")
    rng = random.Random(7)
    shards = {}
    for s in range(4):
        name = f"train-{s:05d}-of-00004.tfrecord"
        records = [f"shard{s}-rec{i}-".encode() + rng.randbytes(rng.randint(0, 3000)) for i in range(60 + 40 * s)]
        with tf.io.TFRecordWriter(str(d / name)) as w:
            for r in records:
                w.write(r)
        shards[name] = records
    (d / "manifest.json").write_text(json.dumps({"shards": [{"name": n, "examples": len(r)}
                                                            for n, r in shards.items()]}))
    return str(d), shards


# The fast tier (`python -m pytest -m "not slow" -n 2`, docs/testing.md) stays fast only if tests that train end to end
# carry the slow marker.  A test not marked slow that takes longer than this is listed at the end of the session
# (a warning, not a failure: wall time depends on how busy the machine is, and a test must not).
FAST_TEST_WARN_SECONDS = 15.0
_slow_unmarked: list[tuple[str, float]] = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > FAST_TEST_WARN_SECONDS and "slow" not in report.keywords:
        _slow_unmarked.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter):
    if _slow_unmarked:
        terminalreporter.section("tests not marked slow that took over "
                                 f"{FAST_TEST_WARN_SECONDS:.0f} s (mark them slow if they train end to end)")
        for nodeid, seconds in sorted(_slow_unmarked, key=lambda x: -x[1]):
            terminalreporter.write_line(f"{seconds:7.1f} s  {nodeid}")


@pytest.fixture(autouse=True)
def _no_leaked_op_determinism(request):
    """A test that turns TF's op determinism on must turn it off again: it is process-wide, and on it makes every
    later pipeline with a stateful function (our emulated reads, random masking) interleave and map serially — two
    timing tests failed in the full suite, never alone, because test_keras_probe.py had left it on."""
    import sys

    yield
    if "tensorflow" not in sys.modules:
        return
    from tensorflow.python.framework import config as tf_config

    if tf_config.is_op_determinism_enabled():
        tf_config.disable_op_determinism()
        pytest.fail(f"{request.node.nodeid} left tf.config.experimental.enable_op_determinism() on "
                    "(process-wide: restore it in the test)", pytrace=False)
