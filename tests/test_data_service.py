"""The tf.data service (issue 24): real DispatchServer / WorkerServer processes on 127.0.0.1, started and stopped by
each test (no process outlives it).  Bad settings and an unreachable dispatcher are one line and exit 2; a Python
dataset is refused; the service gives the same batches and the same loss trajectory as the local pipeline at one
worker and a fixed seed; a worker killed mid-run costs what the processing mode says and the run completes."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tfbertperf.config import load_config
from tfbertperf.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["data.dupe_factor=1", "data.num_shards=4", "data.vocab_size=2000"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from tfbertperf.data import prepare_data

    d = tmp_path_factory.mktemp("service") / "pretrain"
    prepare_data(load_config(sets=SMALL), str(d), progress=False)
    return d


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"


@pytest.mark.parametrize("value, culprit", [("local:0", "local:N"), ("local:two", "local:N"), ("remote", "off, local"),
                                            ("grpc://nohost", "grpc://HOST:PORT"), ("grpc://h:99999", "grpc://")])
def test_bad_settings_are_one_line_and_exit_2(value, culprit, capsys, monkeypatch, tmp_path):
    from tfbertperf.run import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["--set", f"pipeline.data_service={value}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and culprit in err[0] and "pipeline.data_service" in err[0], err
    with pytest.raises(UsageError, match="data_service_mode"):
        load_config(sets=["pipeline.data_service_mode=round_robin"])


def test_unreachable_dispatcher_is_named_within_the_timeout(data_dir, tmp_path):
    port = _free_port()  # nothing listens here
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "tfbertperf", "run", "--data", str(data_dir),
                        "--set", f"pipeline.data_service=grpc://127.0.0.1:{port}", "--set", f"run.out={tmp_path}"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr[-2000:]
    assert lines[-1].startswith("tfbertperf: error:") and f"127.0.0.1:{port}" in lines[-1], lines[-1]
    assert "Traceback" not in r.stderr and not list(tmp_path.glob("*/report.json"))
    assert time.monotonic() - t0 < 280


def _pipeline(uri, sets, session=None, **kw):
    from tfbertperf.data.manifest import load_manifest, shard_uris
    from tfbertperf.data.pipeline import build_dataset
    from tfbertperf.storage import open_backend, open_shards

    cfg = load_config(data_uri=str(uri), sets=SMALL + sets)
    backend = open_backend(str(uri), cfg.data)
    manifest = load_manifest(str(uri), backend)
    uris, hint = shard_uris(cfg, manifest, backend)
    if session is not None:
        cfg = session.config(cfg)
    return build_dataset(cfg, manifest, open_shards(uris, cfg.data, backend, hint), service=session, **kw), manifest


def _session(uri, sets):
    from tfbertperf.data.service_session import ServiceSession

    cfg = load_config(data_uri=str(uri), sets=SMALL + sets)
    from tfbertperf.data.manifest import load_manifest
    from tfbertperf.storage import open_backend

    return ServiceSession(cfg, load_manifest(str(uri), open_backend(str(uri), cfg.data))["num_examples"]).start(cfg)


def test_python_datasets_and_python_read_modes_are_refused(data_dir):
    import tensorflow as tf

    from tfbertperf.data.service import distribute

    cfg = load_config(sets=["pipeline.data_service=grpc://127.0.0.1:1"])
    gen = tf.data.Dataset.from_generator(lambda: iter([1, 2]), output_signature=tf.TensorSpec([], tf.int32))
    with pytest.raises(UsageError, match="50252"):
        distribute(gen, cfg)
    with pytest.raises(UsageError, match="read_latency_ms"):
        _session(data_dir, ["pipeline.data_service=local:1", "data.read_latency_ms=5"])


def test_one_worker_gives_the_local_pipelines_batches(data_dir):
    sets = ["train.deterministic=true", "train.batch_size=16", "pipeline.tokenize=pretokenized"]
    local, _ = _pipeline(data_dir, sets)
    want = [b["input_ids"].numpy() for b, _ in zip(local, range(12))]
    session = _session(data_dir, sets + ["pipeline.data_service=local:1"])
    pids = [w.proc.pid for w in session.cluster.workers] + [session.cluster.dispatcher.proc.pid]
    try:
        ds, _ = _pipeline(data_dir, sets + ["pipeline.data_service=local:1"], session)
        got = [b["input_ids"].numpy() for b, _ in zip(ds, range(12))]
    finally:
        session.stop()
    assert all((a == b).all() for a, b in zip(want, got)) and len(got) == 12
    assert session.tally.elements >= 12
    assert all(_gone(p) for p in pids), "a server outlived its session"


def _drain(it, n: int | None, timeout_s: float = 240.0) -> int:
    """Pull n elements (None: to the end) from `it` in a daemon thread; fail instead of hanging."""
    import threading

    got = []

    def pull():
        for i, _ in enumerate(it, 1):
            got.append(i)
            if n is not None and i >= n:
                return

    t = threading.Thread(target=pull, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"the service stopped delivering after {len(got)} elements"
    return len(got)


@pytest.mark.slow  # a dispatcher and two worker processes, one killed, per mode (~20 s each under load)
@pytest.mark.parametrize("mode", ["distributed_epoch", "parallel_epochs"])
def test_a_killed_worker_leaves_the_survivor_delivering(data_dir, mode, tmp_path, monkeypatch):
    """2 workers on the training pipeline (repeating); worker 0 is killed (SIGKILL) after the first batches arrive:
    the survivor goes on delivering two passes' worth and the session reports the loss.  (A finite pass is not
    covered: TF 2.21's client then waits on the dead worker's task — training pipelines always repeat.)"""
    sets = ["train.batch_size=8", f"pipeline.data_service_mode={mode}", "pipeline.data_service=local:2"]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the servers' stderr files
    session = _session(data_dir, sets)
    cluster = session.cluster
    try:
        ds, manifest = _pipeline(data_dir, sets, session)
        it = iter(ds)
        _drain(it, 3)
        cluster.workers[0].proc.send_signal(signal.SIGKILL)
        total = int(manifest["num_examples"])
        rest = _drain(it, 2 * total // 8)
        session.training_ended(type("R", (), {"input_wait_ms": [0.0], "warmup_steps": 0})())
    finally:
        session.stop()
    block = session.block()
    assert rest == 2 * total // 8 and block["workers_lost"] == 1 and block["examples"] == 8 * block["elements"]
    assert block["workers"][0]["killed_by_signal"] == signal.SIGKILL and block["workers"][1]["alive"]
    assert block["shutdown"]["dispatcher"] == 0 and block["repeated_examples"] > 0
    # the killed worker's stderr is kept and named; the servers that stopped cleanly removed theirs
    assert block["shutdown"]["logs"] == [cluster.workers[0].log.name]
    assert sorted(p.name for p in tmp_path.glob("tfbertperf-*.log")) == [Path(cluster.workers[0].log.name).name]
    assert ("at most once" in block["loss_semantics"]) == (mode == "distributed_epoch")
    assert all(_gone(w.proc.pid) for w in cluster.workers)


def _run(data_dir, out, *sets, wait=None):
    cmd = [sys.executable, "-m", "tfbertperf", "run", "--data", str(data_dir), "--set", f"run.out={out}",
           "--set", "profile.steps=none", "--set", "profile.probe_steps=0", "--set", "profile.ceiling_seconds=0.5",
           "--set", "profile.utilization_hz=0", *[x for s in sets for x in ("--set", s)]]
    tmp = Path(out).parent / f"{Path(out).name}-tmp"  # the run's temp files (the servers' stderr among them)
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    if wait is not None:
        wait(proc)
    out_, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    (report,) = Path(out).glob("*/report.json")
    return json.loads(report.read_text()), err


@pytest.mark.slow
def test_same_loss_trajectory_with_and_without_the_service(data_dir, tmp_path):
    sets = ["train.deterministic=true", "train.steps=12", "train.batch_size=8", "train.warmup_steps=2"]
    off, _ = _run(data_dir, tmp_path / "off", *sets)
    on, _ = _run(data_dir, tmp_path / "on", *sets, "pipeline.data_service=local:1")
    assert off["training"]["loss_trajectory"] == on["training"]["loss_trajectory"]
    assert "data_service" not in off
    block = on["data_service"]
    assert block["setting"] == "local:1" and block["elements"] >= 12 and block["workers_read_bytes"] > 0
    assert block["shutdown"]["clean"] and on["storage"]["shard_reads_in"].startswith("tf.data service")
    assert "logs" not in block["shutdown"] and not list((tmp_path / "on-tmp").glob("tfbertperf-*.log"))


def _service_children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"tfbertperf.data.service_cluster" in cmdline and b"worker" in cmdline:
            out.append(int(stat.parent.name))
    return sorted(out)


@pytest.mark.slow
def test_a_run_with_a_worker_killed_mid_run_completes_and_says_so(data_dir, tmp_path):
    killed = []

    def kill_after_step_10(proc):
        for line in proc.stderr:
            if "step 10/" in line:
                workers = _service_children(proc.pid)
                assert len(workers) == 2, workers
                os.kill(workers[0], signal.SIGKILL)
                killed.extend(workers)
                return

    rep, _ = _run(data_dir, tmp_path, "train.steps=24", "train.log_every=10", "train.batch_size=8",
                  "pipeline.data_service=local:2", "pipeline.data_service_mode=distributed_epoch",
                  wait=kill_after_step_10)
    block = rep["data_service"]
    assert killed and rep["throughput"]["steps"] == 24
    assert block["workers_lost"] == 1 and block["repeated_examples"] >= 0
    (dead,) = [w for w in block["workers"] if not w["alive"]]
    assert dead["pid"] == killed[0] and dead["killed_by_signal"] == signal.SIGKILL
    assert all(_gone(p) for p in killed), "a service worker outlived the run"
    (kept,) = block["shutdown"]["logs"]  # the killed worker's stderr, kept and named; the clean servers' removed
    assert Path(kept).parent == tmp_path.parent / f"{tmp_path.name}-tmp" and "worker" in Path(kept).name
    assert [p.name for p in Path(kept).parent.glob("tfbertperf-*.log")] == [Path(kept).name]


def test_scale_out_advice_only_for_a_cpu_bound_input():
    from tfbertperf.compose.dataservice import scale_out_advice

    verdict = {"bottleneck": "input", "input_cause": "preprocessing", "actions": [{"advice": "x", "set": []}]}
    out = scale_out_advice(verdict, 0.3, load_config())
    assert out["actions"][-1]["set"] == ["pipeline.data_service=local:4"] and "4 tf.data service" in out["actions"][-1]["advice"]
    assert out["recommendations"][-1] == out["actions"][-1]["advice"]
    assert scale_out_advice({**verdict, "input_cause": "storage"}, 0.3, load_config()) == {**verdict, "input_cause": "storage"}
    assert scale_out_advice(verdict, 0.3, load_config(sets=["pipeline.data_service=local:2"])) == verdict


@pytest.mark.slow
def test_two_trainers_read_from_one_service(data_dir, tmp_path):
    """`run --workers 2` (MultiWorkerMirrored on loopback) with local:1: the launcher starts one service, both
    trainers share one job of it, and the report has the service's view and each trainer's."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    r = subprocess.run([sys.executable, "-m", "tfbertperf", "run", "--workers", "2", "--data", str(data_dir),
                        "--set", "train.steps=12", "--set", "train.batch_size=8", "--set", "profile.steps=none",
                        "--set", "profile.probe_steps=0",
                        "--set", "profile.ceiling_seconds=0", "--set", "profile.utilization_hz=0",
                        "--set", "pipeline.data_service=local:1", "--set", f"run.out={tmp_path}"],
                       capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    (report,) = tmp_path.glob("*/report.json")
    block = json.loads(report.read_text())["data_service"]
    assert block["setting"] == "local:1" and block["workers_lost"] == 0
    assert set(block["shutdown"]) == {"workers", "dispatcher", "clean"}  # recorded, clean or not (TF #113163)
    assert block["workers"][0]["read_bytes"] > 0
    trainers = block["trainers"]
    assert len(trainers) == 2 and all(t["elements"] >= 12 for t in trainers)
    assert trainers[0]["address"] == trainers[1]["address"] and "/" in trainers[0]["address"]  # one shared job


def test_stopping_the_cluster_signals_each_server_once_and_waits_for_all_together(tmp_path):
    # A second SIGTERM while a server stops can reach a thread that does not block it (the child died -15 in a
    # run that told the workers at once and then stopped each); every child gets exactly one.  Stand-in servers:
    # Python children that count the SIGTERMs they get for 1 s after the first, write when the first came, and
    # exit with the count.
    from tfbertperf.data import service_cluster as sc

    script = ("import signal, sys, time\n"
              "n = []\n"
              "signal.signal(signal.SIGTERM, lambda *a: n.append(time.monotonic()))\n"
              "print('ready 127.0.0.1:1', flush=True)\n"
              "while not n: time.sleep(0.01)\n"
              "open(sys.argv[1], 'w').write(repr(n[0]))\n"
              "time.sleep(1.0)\n"
              "sys.exit(len(n))\n")
    children = []
    for k, role in enumerate(("worker", "worker", "dispatcher")):
        c = sc._Child.__new__(sc._Child)
        c.role, c.address, c.last, c.termed = role, "", {"cpu_s": None, "read_bytes": None}, False
        c.log = tempfile.NamedTemporaryFile(dir=tmp_path, suffix=".log", delete=False)
        c.proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / f"term{k}")], stdout=subprocess.PIPE,
                                  text=True)
        c.wait_ready(time.monotonic() + 60)
        children.append(c)
    cluster = sc.LocalCluster(2)
    cluster.workers, cluster.dispatcher = children[:2], children[2]
    out = cluster.stop()
    assert {k: out[k] for k in ("workers", "dispatcher", "clean")} == {"workers": [1, 1], "dispatcher": 1,
                                                                       "clean": False}  # one SIGTERM each (= exit)
    # servers that did not exit 0 keep their stderr, named in the result
    assert sorted(out["logs"]) == sorted(c.log.name for c in children) and all(os.path.exists(f) for f in out["logs"])
    t = [float((tmp_path / f"term{k}").read_text()) for k in range(3)]
    # told at once: the second worker had its SIGTERM before the first one's second of stopping was over (one
    # after the other it would come after the first had exited), and the dispatcher only after both
    assert t[1] < t[0] + 1.0 and t[2] >= max(t[0], t[1]) + 1.0


def test_a_server_that_stops_cleanly_leaves_no_log_behind(tmp_path, monkeypatch):
    # every data-service run started a dispatcher and workers whose stderr files stayed in the temp folder (910 of
    # them after a day of tests); a server that exits 0 now removes its own, one that fails keeps it (previous test)
    from tfbertperf.data import service_cluster as sc

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
              "print('ready 127.0.0.1:1', flush=True)\n"
              "sys.stderr.write('serving\\n'); sys.stderr.flush()\n"
              "while True: time.sleep(0.01)\n")
    popen = subprocess.Popen  # stand-in servers: the same _Child plumbing, a Python child for the TF server
    monkeypatch.setattr(sc.subprocess, "Popen", lambda cmd, **kw: popen([sys.executable, "-c", script], **kw))
    cluster = sc.LocalCluster(1).start()
    logs = [cluster.dispatcher.log.name, cluster.workers[0].log.name]
    assert all(os.path.dirname(f) == str(tmp_path) and os.path.exists(f) for f in logs)
    assert cluster.stop() == {"workers": [0], "dispatcher": 0, "clean": True}
    assert not any(os.path.exists(f) for f in logs)
