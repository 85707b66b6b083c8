"""Native gs:// (TF's own filesystem) as README documents it: `python tools/emulators.py`, export what it prints,
prepare to gs://, and `data.mode=native` trains from the demo bucket.  TF filesystem errors become one line
naming the URI and the cause."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SMALL_DATA = ["data.dupe_factor=1", "data.num_shards=4", "data.vocab_size=2000"]
SHORT_RUN = ["train.steps=6", "profile.steps=2:4", "profile.probe_steps=2", "profile.ceiling_seconds=0"]


def _sets(items):
    return [a for s in items for a in ("--set", s)]


@pytest.fixture(scope="module")
def demo_env():
    """tools/emulators.py --only gcs, started as a user would; the environment it prints, applied."""
    p = subprocess.Popen([sys.executable, str(REPO / "tools" / "emulators.py"), "--only", "gcs"], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    exports = {}
    for line in p.stdout:
        if line.startswith("export "):
            k, _, v = line[len("export "):].strip().partition("=")
            exports[k] = v.strip("'")
        if "CURL_CA_BUNDLE" in exports and "STORAGE_EMULATOR_HOST" in exports and "NO_PROXY" in exports:
            break
    if p.poll() is not None:
        pytest.fail(f"tools/emulators.py exited: {p.stderr.read()[-2000:]}")
    env = dict(os.environ, **exports, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    yield env
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)


@pytest.fixture(scope="module")
def demo_data(demo_env):
    uri = f"gs://tfbertperf-demo/ds-{uuid.uuid4().hex[:6]}"
    p = subprocess.run([sys.executable, "-m", "tfbertperf.cli", "prepare", "--out", uri, *_sets(SMALL_DATA)],
                       env=demo_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return uri


@pytest.mark.slow
def test_native_mode_trains_from_the_demo_bucket_with_the_printed_environment(demo_env, demo_data, tmp_path):
    p = subprocess.run([sys.executable, "-m", "tfbertperf.run", "--data", demo_data,
                        *_sets(SMALL_DATA + SHORT_RUN + [f"run.out={tmp_path}", "data.mode=native"])],
                       env=demo_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads(next(tmp_path.glob("*/report.json")).read_text())
    s = report["storage"]
    assert s["mode"] == "native" and s["bytes_read"] > 0 and s["requests"] > 0 and s["read_mb_per_sec"] > 0
    assert report["throughput"]["steps"] == 6


PROG = textwrap.dedent("""
    import json, sys
    from tfbertperf.config import DataConfig
    from tfbertperf.errors import UsageError
    from tfbertperf.storage import open_backend, open_shards
    from tfbertperf.storage.integrity import storage_errors
    prefix, delete = sys.argv[1], sys.argv[2] == "delete"
    cfg = DataConfig(mode="native")
    b = open_backend(prefix, cfg)
    uris = [o.uri for o in b.list(prefix) if o.uri.endswith(".tfrecord")][:2]
    src = open_shards(uris, cfg, b)
    if delete:
        b.bucket.blob(uris[0].split("/", 3)[3]).delete()
    try:
        with storage_errors(b, uris, prefix):
            print(json.dumps({"records": sum(1 for _ in src.filenames.interleave(src.read, cycle_length=1))}))
    except UsageError as e:
        print(json.dumps({"error": str(e), "uris": uris}))
    # as tfbertperf's commands do (errors.process_main): no interpreter teardown with a live tf.data iterator,
    # which can hang waiting for a py_function that needs the GIL (tests/test_exit.py)
    sys.stdout.flush()
    import os
    os._exit(0)
""")


def _native(env, prefix, delete=False, **over) -> dict:
    env = dict(env, GCS_RETRY_CONFIG_MAX_RETRIES="1", GCS_RETRY_CONFIG_INIT_DELAY_TIME_US="1000", **over)
    p = subprocess.run([sys.executable, "-c", PROG, prefix, "delete" if delete else "keep"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_native_unreachable_storage_host_is_one_line_naming_the_uri(demo_env, demo_data):
    import socket

    with socket.socket() as s:  # a loopback port held (bound, never listening): connections are refused
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        out = _native(demo_env, demo_data, https_proxy=dead, HTTPS_PROXY=dead)
    assert out["error"].startswith(f"{out['uris'][0]}: storage host unreachable (connection refused) (TensorFlow: ")
    assert "libcurl code 7" in out["error"] and "\n" not in out["error"], out


def test_native_missing_object_is_one_line_naming_the_uri(demo_env, demo_data):
    prefix = f"{demo_data}-copy-{uuid.uuid4().hex[:4]}"
    env = dict(demo_env)
    cp = textwrap.dedent(f"""
        from tfbertperf.storage import open_backend
        b = open_backend({demo_data!r})
        for o in b.list({demo_data!r}):
            b.bucket.copy_blob(b.bucket.blob(o.uri.split("/", 3)[3]), b.bucket,
                               o.uri.replace({demo_data!r}, {prefix!r}).split("/", 3)[3])
    """)
    subprocess.run([sys.executable, "-c", cp], env=env, check=True, timeout=120)
    out = _native(env, prefix, delete=True)
    assert out["error"].startswith(f"{out['uris'][0]}: not found (HTTP 404) (TensorFlow: ")
    assert "HTTP response code 404" in out["error"] and "\n" not in out["error"], out


@pytest.mark.parametrize("msg,cause", [
    ("Error executing an HTTP request: libcurl code 6 meaning 'Couldn't resolve host name', error details: Could "
     "not resolve host: storage.googleapis.com when reading gs://b/d/x.tfrecord", "storage host cannot be resolved"),
    ("Error executing an HTTP request: HTTP response code 401 with body '{}' when reading gs://b/d/x.tfrecord",
     "credentials rejected (HTTP 401)"),
    ("Error executing an HTTP request: HTTP response code 403 with body '{}' when reading gs://b/d/x.tfrecord",
     "access denied (HTTP 403)"),
])
def test_tf_filesystem_causes_we_cannot_provoke_here_map_to_one_line(msg, cause):
    """Causes the emulator cannot produce (it checks no credentials) or that need a DNS query off this machine:
    TF's message text (tsl curl_http_request.cc / gcs_file_system.cc wording) through the same translation."""
    import tensorflow as tf

    from tfbertperf.storage.base import Backend
    from tfbertperf.storage.integrity import translate

    err = translate(tf.errors.UnavailableError(None, None, msg), Backend(), ["gs://b/d/x.tfrecord"], "gs://b/d")
    assert str(err).startswith(f"gs://b/d/x.tfrecord: {cause} (TensorFlow: ")
    assert "\n" not in str(err)
