"""Environment fingerprint and diff (issue 5): the real fingerprint of this machine, planted differences,
planted secrets, bad input.  Runs in ~30 s (a few subprocesses import TensorFlow)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfbertperf import envinfo
from tfbertperf.envinfo import datalocation
from tfbertperf.redact import REDACTED, redact_connection_string

REPO = Path(__file__).resolve().parents[1]


def _run_cli(args, env_extra=None, cwd=None, timeout=120):
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "tfbertperf.env", *args], capture_output=True, text=True,
                          env=env, cwd=cwd or REPO, timeout=timeout)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A small directory of shard-like files for the read probe (2 × 2 MiB)."""
    d = tmp_path_factory.mktemp("shards")
    for i in range(2):
        (d / f"train-{i:05d}.tfrecord").write_bytes(os.urandom(2 << 20))
    return d


@pytest.fixture(scope="module")
def fp(data_dir):
    return envinfo.fingerprint(str(data_dir))


# ---- the fingerprint ---------------------------------------------------------------------------------------

def test_fingerprint_of_this_machine_has_every_section_filled(fp, data_dir):
    import tensorflow as tf

    assert fp["schema"] == envinfo.SCHEMA
    for s in envinfo.SECTIONS:
        assert isinstance(fp[s], dict), s
        assert "error" not in fp[s], (s, fp[s])
    assert fp["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert fp["packages"]["tensorflow"] == tf.__version__
    for pkg in ("keras", "numpy", "protobuf", "tensorflow-text", "xprof", "transformers", "google-cloud-storage",
                "azure-storage-blob"):
        assert fp["packages"].get(pkg), pkg
    assert fp["tensorflow"]["build"]["cuda_version"]  # the build info of this wheel
    assert fp["devices"]["cpu_count"] >= 1 and fp["devices"]["gpu_count"] == len(tf.config.list_physical_devices("GPU"))
    assert fp["cpu"]["logical_cores"] == os.cpu_count()
    assert fp["cpu"]["usable_cores"] == len(os.sched_getaffinity(0))
    with open("/proc/cpuinfo") as f:
        assert ("avx2" in f.read().split()) == fp["cpu"]["flags"]["avx2"]
    assert fp["memory"]["total_mb"] > 100
    assert fp["threads"]["intra_op"] == tf.config.threading.get_intra_op_parallelism_threads()
    assert fp["onednn"]["enabled"] in (True, False)
    assert fp["precision"]["keras_policy"] == "float32"
    assert fp["determinism"]["op_determinism"] is False
    assert fp["xla"]["auto_jit"] == "off"
    d = fp["data"]
    assert d["scheme"] == "file" and d["exists"] and d["kind"] in ("local", "overlay", "memory", "network", "fuse")
    assert d["fstype"] == datalocation.mount_of(str(data_dir))["fstype"]
    p = d["probe"]
    assert p["files"] == 2 and p["latency_samples"] > 0 and p["first_byte_latency_ms"]["p50"] > 0
    assert 0 < p["bytes_read"] <= 2 << 20 and p["read_mb_per_sec"] > 0
    json.dumps(fp)  # JSON-ready as is


def test_fingerprint_is_fast_and_leaves_the_tf_runtime_uninitialised(tmp_path):
    # In a fresh process: TF's runtime must still accept thread settings afterwards (run.py configures after
    # fingerprinting), and the fingerprint itself costs less than the TF import it follows — both measured in the
    # same process, so a loaded machine slows both (a ratio, not a wall-clock threshold).
    code = (
        "import json, time\n"
        "t0 = time.perf_counter()\n"
        "import tensorflow as tf\n"
        "import_ms = (time.perf_counter() - t0) * 1e3\n"
        "from tfbertperf.envinfo import fingerprint\n"
        f"fp = fingerprint({str(tmp_path)!r})\n"
        "tf.config.threading.set_intra_op_parallelism_threads(1)\n"
        "print(json.dumps({'collect_ms': fp['collect_ms'], 'tf_import_ms': fp['tf_import_ms'],"
        " 'import_ms': import_ms}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr[-2000:]
    t = json.loads(out.stdout.strip().splitlines()[-1])
    assert t["collect_ms"] < t["import_ms"], t
    assert t["tf_import_ms"] < 0.05 * t["import_ms"], t  # TF was imported before: nothing charged twice


def test_remote_data_locations_are_described_without_probing(monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:4443")
    g = datalocation.describe_location("gs://my-bucket/bert/shards")
    assert (g["scheme"], g["bucket"], g["prefix"]) == ("gs", "my-bucket", "bert/shards")
    assert g["emulator"] == "http://127.0.0.1:4443" and "skipped" in g["probe"]
    key = "Zm9vYmFyYmF6cXV4" * 5 + "=="
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
                       f"AccountKey={key};BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;")
    a = datalocation.describe_location("az://container/prefix")
    assert a["emulator"] == "http://127.0.0.1:10000/devstoreaccount1" and a["account"] == "devstoreaccount1"
    assert key not in json.dumps(a) and "skipped" in a["probe"]


def test_filesystem_types_are_classified_by_read_path(tmp_path):
    assert datalocation.classify_fstype("nfs4") == "network"
    assert datalocation.classify_fstype("cifs") == "network"
    assert datalocation.classify_fstype("fuse.gcsfuse") == "fuse"
    assert datalocation.classify_fstype("tmpfs") == "memory"
    assert datalocation.classify_fstype("overlay") == "overlay"
    assert datalocation.classify_fstype("ext4") == "local"
    # Longest mount-point prefix wins; octal escapes in mount points are decoded.
    mi = tmp_path / "mountinfo"
    mi.write_text(
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "40 27 0:50 / /mnt/data\\040set rw - nfs4 fileserver:/export rw\n"
        "41 27 0:51 / /mnt/gcs rw - fuse.gcsfuse my-bucket rw\n"
    )
    mounts = datalocation.read_mounts(str(mi))
    assert datalocation.mount_of("/mnt/data set/shards/x.tfrecord", mounts)["fstype"] == "nfs4"
    assert datalocation.mount_of("/mnt/gcs/a", mounts)["fstype"] == "fuse.gcsfuse"
    assert datalocation.mount_of("/mnt/database", mounts)["fstype"] == "ext4"  # not a prefix match
    if os.path.ismount("/dev/shm"):
        assert datalocation.describe_location("/dev/shm", probe=False)["kind"] == "memory"


# ---- the diff ------------------------------------------------------------------------------------------------

def _plant(fp):
    b = copy.deepcopy(fp)
    b["packages"]["tensorflow"] = "2.19.0"
    b["devices"]["gpu_count"] = 1
    b["devices"]["gpus"] = [{"name": "/physical_device:GPU:0", "device_name": "NVIDIA A100-SXM4-40GB",
                             "compute_capability": "8.0"}]
    b["precision"]["keras_policy"] = "mixed_float16"
    b["data"].update(kind="network", fstype="nfs4")
    b["data"]["probe"]["first_byte_latency_ms"]["p50"] = 18.0
    b["threads"]["intra_op"] = 1 if fp["threads"]["intra_op"] != 1 else 2
    b["onednn"]["enabled"] = not fp["onednn"]["enabled"]
    b["cpu"]["flags"]["avx512f"] = not fp["cpu"]["flags"]["avx512f"]
    return b


def test_diff_ranks_planted_differences_and_explains_each(fp):
    b = _plant(fp)
    diffs = envinfo.diff(fp, b)
    by_key = {d["name"]: d for d in diffs}
    planted = ["devices.gpu_count", "devices.gpus.0.device_name", "packages.tensorflow", "precision.keras_policy",
               "data.kind", "data.fstype", "data.probe.first_byte_latency_ms.p50", "threads.intra_op",
               "onednn.enabled", "cpu.flags.avx512f"]
    for k in planted:
        assert k in by_key, k
        assert by_key[k]["why"] and by_key[k]["affects"], k
    assert not set(by_key) - set(planted), set(by_key) - set(planted)  # nothing else is reported
    assert diffs[0]["name"] == "devices.gpu_count" and "A sees no GPU" in diffs[0]["why"]
    assert "2.19.0" in by_key["packages.tensorflow"]["why"]
    assert "mixed_float16" in by_key["precision.keras_policy"]["why"]
    assert "numerics" in by_key["precision.keras_policy"]["affects"]
    assert "network filesystem" in by_key["data.kind"]["why"]
    assert "18 ms on B" in by_key["data.probe.first_byte_latency_ms.p50"]["why"]
    assert "oneDNN off on" in by_key["onednn.enabled"]["why"]
    scores = [d["score"] for d in diffs]
    assert scores == sorted(scores, reverse=True)
    rank = {d["name"]: i for i, d in enumerate(diffs)}
    # a missing accelerator and data on NFS outrank a TF release, which outranks a thread setting
    assert rank["devices.gpu_count"] < rank["packages.tensorflow"] < rank["threads.intra_op"]
    assert rank["data.kind"] < rank["threads.intra_op"]
    assert {by_key[k]["impact"] for k in ("devices.gpu_count", "precision.keras_policy", "data.kind")} == {"high"}


def test_two_real_fingerprints_of_one_machine_differ_only_in_measurement_noise(fp, data_dir):
    again = envinfo.fingerprint(str(data_dir))
    for d in envinfo.diff(fp, again):
        assert d["name"].startswith(("data.probe.", "memory.available_mb")), d


def _report(environment, losses, step_ms, input_frac, **config_sets):
    from tfbertperf.config import load_config

    cfg = load_config(overrides={"train.steps": 60, **config_sets}).to_dict()
    keys = ["input", "host_to_device", "device_compute", "host_compute", "kernel_launch", "device_to_device",
            "collectives", "output", "compile", "other"]
    fractions = dict.fromkeys(keys, 0.0)
    fractions.update(input=input_frac, host_compute=1.0 - input_frac)
    return {
        "schema": "tfbertperf.report/1", "run_id": "r", "created": "2025-01-01T00:00:00+00:00",
        "workload": "default", "config": cfg, "environment": environment,
        "model": {"size": "tiny", "task": "pretrain", "parameters": 1, "layers": 2, "hidden": 128, "heads": 2},
        "training": {"loss_trajectory": [[i * 10, v] for i, v in enumerate(losses)], "final_loss": losses[-1],
                     "global_batch_size": 32, "replicas": 1},
        "throughput": {"steps": 60, "examples_per_sec": 32000 / step_ms, "tokens_per_sec": 0.0,
                       "step_time_ms": {"mean": step_ms, "p50": step_ms, "p90": step_ms, "max": step_ms}},
        "attribution": {"source": "xprof", "steps_profiled": 20, "step_time_ms": step_ms,
                        "breakdown_ms": {k: v * step_ms for k, v in fractions.items()}, "fractions": fractions,
                        "input_bound_fraction": input_frac, "input_cost_fraction": input_frac,
                        "input_ops_us": {"storage_read": 0.0, "preprocessing": 0.0, "enqueue": 0.0}},
        "step_timer": {"steps": 60, "input_wait_fraction": input_frac, "compute_fraction": 1 - input_frac},
        "accelerator_utilization": 1 - input_frac,
        "verdict": {"bottleneck": "input" if input_frac > 0.5 else "compute", "summary": "", "recommendations": []},
    }


LOSSES = [10.4, 9.8, 9.1, 8.7, 8.2, 7.9]


def test_diff_of_two_reports_puts_attribution_and_losses_side_by_side(fp, tmp_path):
    a = _report(fp, LOSSES, 120.0, 0.08)
    b = _report(_plant(fp), [x * (1 + 2e-5) for x in LOSSES], 370.0, 0.62,
                **{"data.read_latency_ms": 20.0, "train.precision": "mixed_float16"})
    doc = envinfo.explain(a, b)
    keys = [d["name"] for d in doc["differences"]]
    assert "config.train.precision" in keys and "config.data.read_latency_ms" in keys
    sbs = doc["side_by_side"]
    m = {x["name"]: x for x in sbs["metrics"]}
    assert m["step_time_ms (profiled)"]["ratio_b_over_a"] == pytest.approx(370 / 120, abs=1e-3)
    f = {x["name"]: x for x in sbs["fractions"]}
    assert f["input"]["delta"] == pytest.approx(0.54)
    assert sbs["bottleneck"] == {"a": "compute", "b": "input"}
    n = sbs["numerics"]
    assert n["match"] is True and n["identical"] is False and n["steps_compared"] == 6 and n["comparable"]
    assert n["verdict"].startswith("numerics match within")

    # Diverging losses (from step 30 on) are caught and located
    c = _report(fp, LOSSES[:3] + [x * 1.05 for x in LOSSES[3:]], 121.0, 0.08)
    n2 = envinfo.explain(a, c)["side_by_side"]["numerics"]
    assert n2["match"] is False and n2["first_divergent_step"] == 30
    assert "differ beyond" in n2["verdict"]
    # A different batch size makes the losses incomparable, and says why
    d = _report(fp, LOSSES, 120.0, 0.08, **{"train.batch_size": 64})
    n3 = envinfo.explain(a, d)["side_by_side"]["numerics"]
    assert n3["comparable"] is False and "train.batch_size" in n3["verdict"]

    # The CLI prints the same, ranked, with a side-by-side table
    pa, pb = tmp_path / "a" / "report.json", tmp_path / "b.json"
    pa.parent.mkdir()
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    out = _run_cli(["--diff", str(pa.parent), str(pb)])  # a run directory works as A
    assert out.returncode == 0, out.stderr
    assert "sees no GPU" in out.stdout and "Side by side" in out.stdout and "Numerics: numerics match" in out.stdout
    assert out.stdout.index("sees no GPU") < out.stdout.index("intra-op threads")


# ---- secrets ---------------------------------------------------------------------------------------------

SECRET_ACCOUNT_KEY = "U2VjcmV0QWNjb3VudEtleVZhbHVlMTIzNDU2Nzg5MA" + "x" * 40 + "=="
SECRET_STORAGE_KEY = "c3RvcmFnZWtleXNlY3JldHZhbHVlOTg3NjU0MzIx=="
SECRET_SAS_SIG = "sIgSeCrEt0123456789abcdefXYZ%3D"
SECRET_HF = "hf_PlantedHuggingFaceTokenValue0123456789"
SECRET_BEARER = "eyJhbGciOiJIUzI1NiJ9.plantedBearerPayload.sig987"
SECRET_PROXY_PW = "pr0xyPassw0rdPlanted"
SECRET_PRIVATE_KEY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjPLANTEDKEY"
SECRET_PRIVATE_KEY_ID = "0123456789abcdefplantedkeyid"


def _plant_secrets(tmp_path):
    creds = tmp_path / "creds.json"
    creds.write_text(json.dumps({
        "type": "service_account", "project_id": "p", "private_key_id": SECRET_PRIVATE_KEY_ID,
        "private_key": f"-----BEGIN PRIVATE KEY-----\n{SECRET_PRIVATE_KEY}\n-----END PRIVATE KEY-----\n",
        "client_email": "x@p.iam.gserviceaccount.com",
    }))
    env = {
        "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
                                           f"AccountKey={SECRET_ACCOUNT_KEY};"
                                           "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;",
        "AZURE_STORAGE_KEY": SECRET_STORAGE_KEY,
        "AZURE_STORAGE_ACCOUNT_URL": f"https://acct.blob.core.windows.net/?sv=2022-11-02&ss=b&sig={SECRET_SAS_SIG}",
        "AZURE_STORAGE_SAS_TOKEN": f"sv=2022-11-02&ss=b&srt=co&sp=rl&sig={SECRET_SAS_SIG}",
        "HF_TOKEN": SECRET_HF,
        "SOME_BEARER_TOKEN": f"Bearer {SECRET_BEARER}",
        "TF_PLANTED_HEADER": f"Authorization: Bearer {SECRET_BEARER}",  # secret in a value, harmless name
        "HTTPS_PROXY": f"http://user:{SECRET_PROXY_PW}@127.0.0.1:3128",
        "GOOGLE_APPLICATION_CREDENTIALS": str(creds),
    }
    return env, [SECRET_ACCOUNT_KEY, SECRET_STORAGE_KEY, SECRET_SAS_SIG, SECRET_HF, SECRET_BEARER,
                 SECRET_PROXY_PW, SECRET_PRIVATE_KEY, SECRET_PRIVATE_KEY_ID]


def test_planted_secrets_appear_in_no_output(fp, tmp_path):
    env, secrets = _plant_secrets(tmp_path)
    out_env = tmp_path / "environment.json"
    sas_uri = f"az://container/prefix?sv=2022-11-02&sig={SECRET_SAS_SIG}"
    r1 = _run_cli(["--json", "--out", str(out_env), "--data", sas_uri], env_extra=env)
    assert r1.returncode == 0, r1.stderr[-2000:]
    r2 = _run_cli(["--data", sas_uri], env_extra=env)  # human-readable form
    assert r2.returncode == 0, r2.stderr[-2000:]
    planted_fp = json.loads(out_env.read_text())
    # key names are kept, values replaced
    e = planted_fp["env"]
    assert e["AZURE_STORAGE_KEY"] == REDACTED and e["HF_TOKEN"] == REDACTED
    assert "AccountKey=" + REDACTED in e["AZURE_STORAGE_CONNECTION_STRING"]
    assert "127.0.0.1:10000" in e["AZURE_STORAGE_CONNECTION_STRING"]
    assert e["GOOGLE_APPLICATION_CREDENTIALS"] == {"path": env["GOOGLE_APPLICATION_CREDENTIALS"], "exists": True,
                                                  "type": "service_account"}
    assert planted_fp["data"]["emulator"] == "http://127.0.0.1:10000/devstoreaccount1"
    # a diff against a clean fingerprint lists the planted env vars, still redacted; also as a report
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(fp))
    rep = tmp_path / "report.json"
    rep.write_text(json.dumps(_report(planted_fp, LOSSES, 100.0, 0.1)))
    diff_out = tmp_path / "diff.json"
    r3 = _run_cli(["--diff", str(clean), str(out_env), "--json", "--out", str(diff_out)], env_extra=env)
    assert r3.returncode == 0, r3.stderr[-2000:]
    assert "env.AZURE_STORAGE_KEY" in r3.stdout
    r4 = _run_cli(["--diff", str(out_env), str(rep)], env_extra=env)
    assert r4.returncode == 0, r4.stderr[-2000:]
    # an error message quoting a SAS URI
    r5 = _run_cli(["--diff", f"/nonexistent/x.json?sig={SECRET_SAS_SIG}", str(clean)], env_extra=env)
    assert r5.returncode == 2
    outputs = [r.stdout + r.stderr for r in (r1, r2, r3, r4, r5)]
    outputs += [p.read_text() for p in (out_env, diff_out)]
    for text in outputs:
        for s in secrets:
            assert s not in text


def test_connection_string_keeps_endpoints_and_drops_unknown_parts():
    s = redact_connection_string("AccountName=a;AccountKey=K1;SharedAccessSignature=sv=1&sig=S2;"
                                 "BlobEndpoint=https://a.blob.core.windows.net/?sig=S3;Weird=W4")
    assert "AccountName=a" in s and "BlobEndpoint=https://a.blob.core.windows.net/" in s
    for secret in ("K1", "S2", "S3", "W4"):
        assert secret not in s


# ---- bad input -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content,expect", [
    (None, "no such file"),
    ("{not json", "not valid JSON (line 1"),
    ('{"foo": 1, "bar": [2]}', "neither an environment.json"),
    ("[1, 2, 3]", "neither an environment.json"),
    ('{"schema": "tfbertperf.report/1", "attribution": {}}', "neither an environment.json"),
])
def test_bad_diff_input_is_one_line_and_exit_2(tmp_path, fp, content, expect):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(fp))
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    r = _run_cli(["--diff", str(good), str(bad)])
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfbertperf: error: "), r.stderr
    assert str(bad) in lines[0] and expect in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_out_into_a_missing_directory_is_a_usage_error(tmp_path, fp):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(fp))
    r = _run_cli(["--diff", str(good), str(good), "--out", str(tmp_path / "nope" / "d.json")])
    assert r.returncode == 2 and "does not exist" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_identical_losses_under_a_numerics_setting_are_not_called_expected_to_differ(fp):
    """Issue 17 finding 4: `env --diff` of a naive and a tuned run with bit-identical losses printed the losses
    and then "losses are expected to differ"; it now says the difference did not reach the numerics."""
    a = _report(fp, LOSSES, 120.0, 0.08)
    b = _report(fp, LOSSES, 150.0, 0.08, **{"pipeline.preset": "naive"})
    n = envinfo.explain(a, b)["side_by_side"]["numerics"]
    assert n["identical"] and not n["comparable"]
    assert "expected to differ" not in n["verdict"]
    assert "pipeline.preset" in n["verdict"] and "did not reach the numerics" in n["verdict"]
    c = _report(fp, [x * 1.01 for x in LOSSES], 150.0, 0.08, **{"pipeline.preset": "naive"})
    assert "expected to differ" in envinfo.explain(a, c)["side_by_side"]["numerics"]["verdict"]


def test_diff_with_remote_data_says_only_true_things(fp):
    """Issue 23 item 5: a gs:// data set on B is not "not prepared yet" nor a "spinning disk"; an unset proxy on
    both sides (missing on one, empty on the other) is no difference; python and python3 in one directory are
    one interpreter; another directory still is a difference."""
    import copy

    b = copy.deepcopy(fp)
    b["data"] = datalocation.describe_location("gs://my-bucket/bert/shards")
    a = copy.deepcopy(fp)
    a.setdefault("env", {}).pop("NO_PROXY", None)
    b.setdefault("env", {})["NO_PROXY"] = ""
    a["python"]["executable"], b["python"]["executable"] = "/usr/bin/python", "/usr/bin/python3"
    d = envinfo.diff(a, b)
    names = {x["name"] for x in d}
    whys = " ".join(x["why"] for x in d)
    assert "data.scheme" in names and "not prepared" not in whys and "spinning" not in whys
    assert not names & {"data.exists", "data.rotational", "data.fstype", "env.NO_PROXY", "python.executable"}, names
    b["python"]["executable"] = "/opt/venv/bin/python3"
    assert "python.executable" in {x["name"] for x in envinfo.diff(a, b)}
