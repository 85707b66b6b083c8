"""Training on the user's own TFRecords end to end (issue 28): google-research pretraining shards under the user's
names (wiki_00.tfrecord, part-r-00001; tests/userdata.py writes them as create_pretraining_data.py does), read
from a folder, a glob, one file and a comma list; locally, from fake-gcs-server and Azurite in stream and stage
modes; GZIP-compressed; through the tf.data service; by two workers; and a run_classifier.py set with 3 labels.

With deterministic input the loss trajectory of every way of reading the same two files equals the local
folder's step for step — the same records reached the model — and every report says where the data came from.
The runs are shared through module-scoped fixtures; the suite's fast tier skips them (slow)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import userdata  # noqa: E402

from tfbertperf.config import load_config  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SHORT_RUN = ["train.steps=6", "train.batch_size=8", "profile.steps=2:4", "profile.probe_steps=2",
             "pipeline.deterministic=true", "train.deterministic=true", "profile.ceiling_seconds=0",
             "profile.utilization_hz=0"]
BUCKET = "tfbertperf-test"
NAMES = ("part-r-00001", "wiki_00.tfrecord")  # the order a listing sorts them in, on every backend


def _digest(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    root = tmp_path_factory.mktemp("yourdata")
    plain, gz, cls = root / "wiki", root / "wiki-gz", root / "glue"
    userdata.write_pretrain_set(plain, NAMES)
    userdata.write_pretrain_set(gz, [n + ".gz" for n in NAMES], gzip=True)
    cls.mkdir()
    userdata.write_records(cls / "train.tf_record", userdata.classify_records(160, seq_len=32, num_labels=3))
    return {"plain": plain, "gz": gz, "cls": cls, "runs": root / "runs", "before": _digest(plain)}


def _run(uri: str, runs: Path, *extra: str) -> dict:
    from tfbertperf.job import run

    cfg = load_config(data_uri=uri, sets=SHORT_RUN + [f"run.out={runs}", *extra])
    return run(cfg, progress=False)[1]


def _cli(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", "tfbertperf.run", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def reference(user):
    """The one command of docs/your-data.md on the folder, through the console: the run every other is held to."""
    runs = user["runs"] / "cli"
    p = _cli("--set", f"data.uri={user['plain']}", *[x for s in SHORT_RUN for x in ("--set", s)],
             "--set", f"run.out={runs}")
    assert p.returncode == 0, p.stderr[-3000:]
    (report,) = runs.glob("*/report.json")
    return {"proc": p, "report": json.loads(report.read_text()), "dir": report.parent}


def test_the_one_command_trains_on_the_folder_and_says_whose_data_it_was(user, reference):
    r, p = reference["report"], reference["proc"]
    d = r["data"]
    assert d["origin"] == "user" and d["files"] == 2 and d["manifest"] is False and d["checksums_verified"] is False
    assert d["summary"].startswith("your data: 2 files, ") and "google-research pretraining features" in d["summary"]
    assert d["bytes"] == sum((user["plain"] / n).stat().st_size for n in NAMES)
    assert r["config"]["data"]["seq_len"] == 64 and r["config"]["data"]["max_predictions"] == 10
    assert r["throughput"]["steps"] == 6 and r["training"]["final_loss"] > 0
    assert [ln for ln in p.stdout.splitlines() if ln.strip().startswith("data: your data: 2 files")]
    md = (reference["dir"] / "report.md").read_text()
    assert d["summary"] in md
    env = json.loads((reference["dir"] / "environment.json").read_text())
    assert env["data"]["dataset"]["origin"] == "user" and env["data"]["dataset"]["summary"] == d["summary"]
    assert _digest(user["plain"]) == user["before"]  # read, never written


def test_a_glob_and_a_comma_list_read_the_same_records_and_one_file_its_own(user, reference):
    ref = reference["report"]["training"]["loss_trajectory"]
    glob = _run(f"{user['plain']}/*", user["runs"] / "glob")
    listed = _run(",".join(str(user["plain"] / n) for n in NAMES), user["runs"] / "list")
    assert glob["training"]["loss_trajectory"] == ref == listed["training"]["loss_trajectory"]
    one = _run(str(user["plain"] / "wiki_00.tfrecord"), user["runs"] / "one")
    assert one["data"]["files"] == 1 and one["throughput"]["steps"] == 6


def test_gzip_shards_train_on_exactly_the_plain_records(user, reference):
    r = _run(str(user["gz"]), user["runs"] / "gz")
    assert r["data"]["compression"] == "gzip" and ", GZIP," in r["data"]["summary"]
    assert r["training"]["loss_trajectory"] == reference["report"]["training"]["loss_trajectory"]


def test_classification_with_three_labels(user):
    r = _run(str(user["cls"]), user["runs"] / "cls")
    assert r["model"]["task"] == "classify" and r["config"]["model"]["num_labels"] == 3
    assert r["config"]["data"]["seq_len"] == 32
    assert "classification features (3 labels)" in r["data"]["summary"]


@pytest.fixture(scope="module")
def remote(user, fake_gcs, azurite):
    """The same user files uploaded under their own names to gs:// and az:// (nothing else beside them)."""
    from tfbertperf.storage import open_backend

    mp = pytest.MonkeyPatch()
    mp.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    mp.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    fake_gcs.create_bucket(BUCKET)
    azurite.create_container(BUCKET)
    for scheme in ("gs", "az"):
        b = open_backend(f"{scheme}://{BUCKET}/wiki")
        for folder, sub in ((user["plain"], "wiki"), (user["gz"], "wiki-gz")):
            for f in sorted(folder.iterdir()):
                b.upload(str(f), f"{scheme}://{BUCKET}/{sub}/{f.name}")
    yield
    mp.undo()


@pytest.mark.parametrize("uri,mode", [
    (f"gs://{BUCKET}/wiki/*", "stream"),                      # a glob
    (f"gs://{BUCKET}/wiki", "stage"),                         # a folder
    (f"az://{BUCKET}/wiki/part-r-00001,az://{BUCKET}/wiki/wiki_00.tfrecord", "stream"),  # a comma list
    (f"az://{BUCKET}/wiki-gz/", "stage"),                     # a folder of GZIP files
])
def test_remote_user_data_trains_on_exactly_the_local_records(remote, user, reference, uri, mode):
    r = _run(uri, user["runs"] / "remote", f"data.mode={mode}")
    s = r["storage"]
    assert s["mode"] == mode and s["bytes_read"] > 0 and s["errors"] == 0
    assert r["data"]["origin"] == "user" and r["data"]["files"] == 2
    assert r["training"]["loss_trajectory"] == reference["report"]["training"]["loss_trajectory"]


def test_prepare_into_the_users_bucket_prefix_refuses_and_writes_nothing(remote, capsys):
    from tfbertperf import prepare
    from tfbertperf.storage import open_backend

    b = open_backend(f"gs://{BUCKET}/wiki")
    before = [(o.uri, o.size) for o in b.list(f"gs://{BUCKET}/wiki/")]
    with pytest.raises(SystemExit) as e:
        prepare.main(["--out", f"gs://{BUCKET}/wiki", "-q"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "TFRecord file(s) tfbertperf did not write" in err
    assert [(o.uri, o.size) for o in b.list(f"gs://{BUCKET}/wiki/")] == before


def test_the_data_service_reads_gzip_user_shards_with_tfs_own_reader(user, reference):
    r = _run(str(user["gz"]), user["runs"] / "service", "pipeline.data_service=local:1")
    assert r["data_service"]["setting"] == "local:1" and r["data_service"]["elements"] >= 6
    assert r["training"]["loss_trajectory"] == reference["report"]["training"]["loss_trajectory"]


def test_two_workers_split_the_users_files(user):
    runs = user["runs"] / "workers"
    quick = SHORT_RUN + ["profile.steps=none", "profile.probe_steps=0"]  # two processes on shared cores: train only
    p = _cli("--set", f"data.uri={user['plain']}", "--workers", "2", *[x for s in quick for x in ("--set", s)],
             "--set", f"run.out={runs}")
    assert p.returncode == 0, p.stderr[-3000:]
    (report,) = runs.glob("*/report.json")
    r = json.loads(report.read_text())
    assert len(r["workers"]) == 2 and r["data"]["origin"] == "user"
    assert _digest(user["plain"]) == user["before"]


def test_native_mode_trains_on_the_users_gzip_shards_through_tfs_own_gs_filesystem(remote, user, reference,
                                                                                    fake_gcs):
    """TF's gs:// filesystem (a fresh process: TF reads https_proxy / CURL_CA_BUNDLE from its environment) reads
    the GZIP files a glob names; the listing and the description go through the SDK."""
    from tfbertperf.testing.emulators import native_env
    from tfbertperf.testing.proxy import FaultProxy

    runs = user["runs"] / "native"
    with FaultProxy(connect_target=f"127.0.0.1:{fake_gcs.tls_port}") as proxy:
        env = {**os.environ, **native_env(proxy.url, fake_gcs.certs["ca"]), "STORAGE_EMULATOR_HOST": fake_gcs.url,
               "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
        p = subprocess.run([sys.executable, "-m", "tfbertperf.run", "--set", f"data.uri=gs://{BUCKET}/wiki-gz/*",
                            "--set", "data.mode=native", *[x for s in SHORT_RUN for x in ("--set", s)],
                            "--set", f"run.out={runs}"], capture_output=True, text=True, cwd=ROOT, env=env,
                           timeout=900)
        tunnels = proxy.stats["tunnels"]
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(next(runs.glob("*/report.json")).read_text())
    assert r["storage"]["mode"] == "native" and tunnels > 0 and r["data"]["compression"] == "gzip"
    assert r["training"]["loss_trajectory"] == reference["report"]["training"]["loss_trajectory"]


def test_compare_runs_the_users_sets_side_by_side_and_names_each_runs_data(user):
    out = user["runs"] / "compare"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    quick = SHORT_RUN + ["profile.steps=none", "profile.probe_steps=0"]
    p = subprocess.run([sys.executable, "-m", "tfbertperf.compare", "--matrix",
                        f"data.uri={user['plain']},{user['gz']}", "--repeat", "1", "--out", str(out),
                        *[x for s in quick for x in ("--set", s)]], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (cdir,) = [d for d in out.iterdir() if d.name.endswith("-compare")]
    doc = json.loads((cdir / "comparison.json").read_text())
    summaries = [r["data"][0] for r in doc["rows"]]
    assert [", GZIP," in s for s in summaries] == [False, True] and all(s.startswith("your data: 2 files") for s in
                                                                       summaries)
    md = (cdir / "comparison.md").read_text()
    assert all(s in md for s in summaries) and summaries[1] in p.stdout
