"""Whole-tool sweeps (issue 15 items 8 and 9): planted secrets never reach any artifact or log of run, compare,
prepare, analyze and env; two runs started at once into the same runs root (and the same, not yet prepared,
default data home) never collide."""

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMALL_DATA = ["data.dupe_factor=1", "data.num_shards=4", "data.vocab_size=2000"]
SHORT_RUN = ["train.steps=12", "profile.steps=4:8", "profile.probe_steps=2", "train.batch_size=8",
             "profile.ceiling_seconds=0"]

SAS_SIG = "PLANTEDsasSIGNATURE0123456789abcdefXYZ"
BEARER = "ya29.PLANTEDbearerTOKEN0123456789abcdefghij"


def _sets(items) -> list[str]:
    return [x for s in items for x in ("--set", s)]


def _cmd(env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "tfbertperf", *args], env=env, cwd=cwd, capture_output=True,
                       timeout=600)
    assert r.returncode == 0, (args, r.stderr.decode(errors="replace")[-3000:])
    return r


@pytest.mark.slow
def test_planted_secrets_appear_in_no_artifact_or_log(azurite, tmp_path):
    from tfbertperf.testing.emulators import AZURITE_KEY

    azurite.create_container("sweep")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
           "TFBERTPERF_DATA_HOME": str(tmp_path / "home"),
           # the account key is really used (Azurite); the SAS token and the bearer token are set beside it
           "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string,
           "AZURE_STORAGE_SAS_TOKEN": f"sv=2024-01-01&ss=b&srt=co&sp=rl&sig={SAS_SIG}%3D",
           "GOOGLE_OAUTH_ACCESS_TOKEN": BEARER, "HTTP_AUTHORIZATION": f"Bearer {BEARER}"}
    uri = "az://sweep/ds"
    logs = []
    logs.append(_cmd(env, tmp_path, "prepare", "--out", uri, *_sets(SMALL_DATA)))
    logs.append(_cmd(env, tmp_path, "run", "--data", uri, *_sets(SMALL_DATA + SHORT_RUN + ["run.out=runs"])))
    (run_dir,) = (tmp_path / "runs").iterdir()
    logs.append(_cmd(env, tmp_path, "analyze", str(run_dir / "tensorboard"), "--json", "--no-trace"))
    logs.append(_cmd(env, tmp_path, "compare", "--reports", str(run_dir), str(run_dir), "--out", "cmp"))
    logs.append(_cmd(env, tmp_path, "env", "--data", uri, "--out", "env.json"))
    logs.append(_cmd(env, tmp_path, "env", "--diff", str(run_dir), "env.json", "--json"))

    planted = [AZURITE_KEY, AZURITE_KEY[:24], SAS_SIG, BEARER]
    needles = {p.encode() for p in planted} | {quote(p, safe="").encode() for p in planted}
    files = [f for f in tmp_path.rglob("*") if f.is_file() and "home" not in f.relative_to(tmp_path).parts]
    kinds = {f.suffix for f in files} | {"events" for f in files if f.name.startswith("events.out.tfevents")}
    # every kind of artifact was written and read: JSON, markdown, YAML, HTML, PNG, TensorBoard events, xplane
    assert {".json", ".md", ".yaml", ".html", ".png", ".pb", "events"} <= kinds, kinds
    hits = [(str(f.relative_to(tmp_path)), n.decode()[:12]) for f in files for n in needles if n in f.read_bytes()]
    hits += [(f"log of {' '.join(map(str, r.args[3:5]))}", n.decode()[:12]) for r in logs
             for n in needles if n in r.stdout + r.stderr]
    assert hits == []
    # the artifacts do describe the storage they used (so the sweep looked where secrets could have gone)
    report = json.loads((run_dir / "report.json").read_text())
    assert report["storage"]["backend"] == "azure" and report["storage"]["bytes_read"] > 0


@pytest.mark.slow
def test_two_runs_started_at_once_never_collide(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
           "TFBERTPERF_DATA_HOME": str(tmp_path / "home")}  # both must prepare the default data set
    args = [sys.executable, "-m", "tfbertperf.run", *_sets(SMALL_DATA + SHORT_RUN + ["run.out=runs", "run.name=twin"])]
    procs = [subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err.decode(errors="replace")[-3000:]
    dirs = sorted((tmp_path / "runs").iterdir())
    assert len(dirs) == 2
    for d in dirs:
        rep = json.loads((d / "report.json").read_text())
        assert rep["run_id"] == d.name and rep["throughput"]["steps"] == 12
        assert len(list((d / "tensorboard").rglob("*.xplane.pb"))) == 1  # its own profile, not the twin's
    # one default data set, complete, with every shard its manifest lists
    (data,) = (tmp_path / "home").iterdir()
    manifest = json.loads((data / "manifest.json").read_text())
    assert all((data / s["name"] if isinstance(s, dict) else data / s).is_file() for s in manifest["shards"])
    assert not [f for f in data.rglob("*") if f.name.endswith((".tmp", ".part"))]
