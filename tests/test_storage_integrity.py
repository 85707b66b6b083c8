"""Damaged shards in every read mode (local, stream, stage, native): one line naming the shard and the byte
offset of the first bad frame; with data.skip_corrupt the read goes on, skips exactly the damaged records and
counts them.  Shards are written by TF itself and damaged here (one flipped payload byte, or cut mid-record)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import uuid

import pytest

from tfbertperf.config import DataConfig
from tfbertperf.errors import UsageError
from tfbertperf.storage import open_backend, open_shards
from tfbertperf.storage.integrity import storage_errors
from tfbertperf.storage.tfrecord import frame, iter_record_batches

BAD = "train-00001-of-00004.tfrecord"  # the damaged shard
FLIP_RECORD, CUT_RECORD = 5, 7
SMALL = DataConfig(chunk_mb=0.0625, concurrency=3, lookahead=2, cache_mb=64)


def frames(path: str) -> list[tuple[int, int]]:
    """(frame start, payload length) of every record of a sound TFRecord file."""
    out, pos, data = [], 0, open(path, "rb").read()
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        out.append((pos, n))
        pos += 16 + n
    return out


@pytest.fixture(scope="module")
def damaged(tfrecord_shards, tmp_path_factory):
    """{"flip": dir, "trunc": dir} — copies of the shards with BAD damaged — and the expected error lines
    (with the shard's path still to prefix), and the records that survive skipping."""
    src, shards = tfrecord_shards
    fr = frames(os.path.join(src, BAD))
    out = {}
    for kind in ("flip", "trunc"):
        d = tmp_path_factory.mktemp(kind)
        for n in shards:
            shutil.copy(os.path.join(src, n), d / n)
        data = bytearray((d / BAD).read_bytes())
        if kind == "flip":
            start, n = fr[FLIP_RECORD]
            data[start + 12 + n // 2] ^= 0x10
            want = f"corrupt TFRecord at byte {start} (data CRC mismatch)"
            keep = [r for i, r in enumerate(shards[BAD]) if i != FLIP_RECORD]
        else:
            start, n = fr[CUT_RECORD]
            data = data[: start + 12 + n // 2]
            want = f"truncated TFRecord at byte {start} ({12 + n // 2} trailing bytes)"
            keep = shards[BAD][:CUT_RECORD]
        (d / BAD).write_bytes(bytes(data))
        survivors = [r for name, recs in shards.items() for r in (keep if name == BAD else recs)]
        out[kind] = {"dir": str(d), "want": want, "survivors": sorted(survivors)}
    return out


def _read(backend, uris, cfg, data_uri, hashes=None) -> list[bytes]:
    src = open_shards(uris, cfg, backend, hashes=hashes)
    ds = src.filenames.interleave(src.read_batches or src.read, cycle_length=2, num_parallel_calls=2)
    if src.read_batches:
        ds = ds.unbatch()
    try:
        with storage_errors(backend, uris, data_uri):
            return [r.numpy() for r in ds]
    finally:
        src.close()


def _uris(backend, prefix):
    return [backend.join(prefix, f"train-{s:05d}-of-00004.tfrecord") for s in range(4)]


# ---- framing parser -------------------------------------------------------------------------------------
def test_parser_skips_exactly_the_damaged_frame_and_resyncs_after_a_damaged_length():
    recs = [bytes([i]) * (50 + i) for i in range(10)]
    blob = bytearray(b"".join(frame(r) for r in recs))
    starts = [sum(len(frame(r)) for r in recs[:i]) for i in range(10)]
    blob[starts[3] + 12 + 5] ^= 1  # payload of record 3
    blob[starts[6] + 2] ^= 1  # length field of record 6: frame boundary lost until record 7
    seen = []
    got = [r for b in iter_record_batches([bytes(blob[:200]), bytes(blob[200:])], "s",
                                          on_corrupt=lambda off, why: seen.append((off, why)))
           for r in b]
    assert got == [r for i, r in enumerate(recs) if i not in (3, 6)]
    assert seen == [(starts[3], "data CRC mismatch"),
                    (starts[6], "length CRC mismatch; not a TFRecord file, or damaged")]


# ---- local ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["flip", "trunc"])
def test_local_damaged_shard_is_named_with_its_offset(damaged, kind):
    d = damaged[kind]
    b = open_backend(d["dir"])
    with pytest.raises(UsageError) as e:
        _read(b, _uris(b, d["dir"]), DataConfig(), d["dir"])
    assert str(e.value) == f"shard {os.path.join(d['dir'], BAD)}: {d['want']}"


@pytest.mark.parametrize("kind", ["flip", "trunc"])
def test_local_skip_corrupt_reads_every_sound_record_and_counts_the_skipped(damaged, kind):
    d = damaged[kind]
    b = open_backend(d["dir"])
    got = _read(b, _uris(b, d["dir"]), DataConfig(skip_corrupt=True), d["dir"])
    assert sorted(got) == d["survivors"]
    s = b.metrics.summary()
    assert s["records_skipped"] == 1 and s["corrupt_shards"] == [os.path.join(d["dir"], BAD)]


# ---- stream and stage (fake-gcs-server) -------------------------------------------------------------------
@pytest.fixture(scope="module")
def remote_damaged(damaged, fake_gcs):
    from tfbertperf.storage.upload import upload_dir

    mp = pytest.MonkeyPatch()
    mp.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    fake_gcs.create_bucket("tfbertperf-test")
    out = {}
    for kind, d in damaged.items():
        prefix = f"gs://tfbertperf-test/damaged-{kind}-{uuid.uuid4().hex[:6]}"
        upload_dir(d["dir"], prefix, progress=False)
        out[kind] = dict(d, prefix=prefix)
    yield out
    mp.undo()


@pytest.mark.parametrize("mode", ["stream", "stage"])
@pytest.mark.parametrize("kind", ["flip", "trunc"])
def test_remote_damaged_shard_is_named_with_its_offset(remote_damaged, fake_gcs, monkeypatch, mode, kind):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    d = remote_damaged[kind]
    cfg = dataclasses.replace(SMALL, mode=mode)
    b = open_backend(d["prefix"], cfg)
    with pytest.raises(UsageError) as e:
        _read(b, _uris(b, d["prefix"]), cfg, d["prefix"])
    assert str(e.value) == f"shard {d['prefix']}/{BAD}: {d['want']}"


@pytest.mark.parametrize("mode", ["stream", "stage"])
@pytest.mark.parametrize("kind", ["flip", "trunc"])
def test_remote_skip_corrupt_reads_every_sound_record(remote_damaged, fake_gcs, monkeypatch, mode, kind):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    d = remote_damaged[kind]
    cfg = dataclasses.replace(SMALL, mode=mode, skip_corrupt=True)
    b = open_backend(d["prefix"], cfg)
    got = _read(b, _uris(b, d["prefix"]), cfg, d["prefix"])
    assert sorted(got) == d["survivors"]
    s = b.metrics.summary()
    assert s["records_skipped"] == 1 and s["corrupt_shards"] == [f"{d['prefix']}/{BAD}"]


# ---- native (TF's gs:// filesystem, in a fresh process) ---------------------------------------------------
def test_native_damaged_shards_named_and_skipped(remote_damaged, fake_gcs):
    from tfbertperf.testing.emulators import native_env
    from tfbertperf.testing.proxy import FaultProxy

    prog = textwrap.dedent(f"""
        import json, sys
        from tfbertperf.config import DataConfig
        from tfbertperf.errors import UsageError
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_storage_integrity import _read, _uris
        from tfbertperf.storage import open_backend
        out = {{}}
        for kind, d in json.loads(sys.argv[1]).items():
            for skip in (False, True):
                cfg = DataConfig(mode="native", skip_corrupt=skip)
                b = open_backend(d["prefix"], cfg)
                try:
                    got = _read(b, _uris(b, d["prefix"]), cfg, d["prefix"])
                    s = b.metrics.summary()
                    out[kind + str(skip)] = [sorted(r.hex() for r in got), s["records_skipped"], s["corrupt_shards"]]
                except UsageError as e:
                    out[kind + str(skip)] = str(e)
        print(json.dumps(out))
    """)
    arg = json.dumps({k: {"prefix": v["prefix"]} for k, v in remote_damaged.items()})
    with FaultProxy(connect_target=f"127.0.0.1:{fake_gcs.tls_port}") as proxy:
        env = dict(os.environ, STORAGE_EMULATOR_HOST=fake_gcs.url, **native_env(proxy.url, fake_gcs.certs["ca"]))
        p = subprocess.run([sys.executable, "-c", prog, arg], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    for kind, d in remote_damaged.items():
        assert out[kind + "False"] == f"shard {d['prefix']}/{BAD}: {d['want']}"
        recs, skipped, shards = out[kind + "True"]
        assert recs == [r.hex() for r in d["survivors"]]
        assert skipped == 1 and shards == [f"{d['prefix']}/{BAD}"]


# ---- the command: exit 2 and one line; skip_corrupt reported -----------------------------------------------
SMALL_DATA = ["data.dupe_factor=1", "data.num_shards=4", "data.vocab_size=2000"]
SHORT_RUN = ["train.steps=6", "profile.steps=2:4", "profile.probe_steps=2", "profile.ceiling_seconds=0"]


@pytest.fixture(scope="module")
def prepared_damaged(tmp_path_factory):
    """A prepared data dir whose first shard has a flipped payload byte in its 4th record; (dir, shard path,
    expected error line)."""
    from tfbertperf.config import load_config
    from tfbertperf.data import prepare_data

    d = str(tmp_path_factory.mktemp("prepared") / "data")
    prepare_data(load_config(sets=SMALL_DATA), d, progress=False)
    shard = os.path.join(d, json.load(open(os.path.join(d, "manifest.json")))["shards"][0]["name"])
    start, n = frames(shard)[3]
    data = bytearray(open(shard, "rb").read())
    data[start + 12 + n // 2] ^= 0x01
    open(shard, "wb").write(bytes(data))
    return d, shard, f"tfbertperf: error: shard {shard}: corrupt TFRecord at byte {start} (data CRC mismatch)"


def test_run_on_a_damaged_shard_exits_2_with_one_line_naming_it(prepared_damaged, tmp_path):
    d, _, want = prepared_damaged
    sets = [a for s in SMALL_DATA + SHORT_RUN + [f"run.out={tmp_path}"] for a in ("--set", s)]
    p = subprocess.run([sys.executable, "-m", "tfbertperf.run", "--data", d, *sets], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    assert [ln for ln in p.stderr.splitlines() if ln.startswith("tfbertperf: error")] == [want]
    assert p.stderr.rstrip().splitlines()[-1] == want


def test_stream_run_on_a_damaged_shard_exits_2_with_one_line_naming_it(prepared_damaged, fake_gcs, tmp_path):
    """Stream mode: the error starts as a Python exception inside tf.data (from_generator): still one line."""
    from tfbertperf.storage.upload import upload_dir

    d, shard, want = prepared_damaged
    prefix = f"gs://tfbertperf-test/run-damaged-{uuid.uuid4().hex[:6]}"
    fake_gcs.create_bucket("tfbertperf-test")
    env = dict(os.environ, STORAGE_EMULATOR_HOST=fake_gcs.url)
    os.environ["STORAGE_EMULATOR_HOST"] = fake_gcs.url
    try:
        upload_dir(d, prefix, progress=False)
    finally:
        os.environ.pop("STORAGE_EMULATOR_HOST")
    want = want.replace(shard, f"{prefix}/{os.path.basename(shard)}")
    sets = [a for s in SMALL_DATA + SHORT_RUN + [f"run.out={tmp_path}", "data.mode=stream"] for a in ("--set", s)]
    p = subprocess.run([sys.executable, "-m", "tfbertperf.run", "--data", prefix, *sets], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stderr.rstrip().splitlines()[-1] == want


@pytest.mark.slow
def test_run_with_skip_corrupt_reports_the_skipped_records_and_the_shard(prepared_damaged, tmp_path, capsys):
    from tfbertperf.config import load_config
    from tfbertperf.job import run

    d, shard, _ = prepared_damaged
    cfg = load_config(data_uri=d, sets=SMALL_DATA + SHORT_RUN + [f"run.out={tmp_path}", "data.skip_corrupt=true"])
    run_dir, report = run(cfg, progress=False)
    s = report["storage"]
    assert s["records_skipped"] >= 1 and s["corrupt_shards"] == [shard]
    assert json.load(open(run_dir / "report.json"))["storage"]["corrupt_shards"] == [shard]
    # said where a user reads (issue 23 item 7): on the console and in report.md, with the ceiling's drop
    from tfbertperf.report.console import print_run_summary

    (line,) = [c for c in report["caveats"] if c.startswith("data.skip_corrupt")]
    assert f"{s['records_skipped']} damaged record(s) skipped in 1 shard(s) ({shard})" in line and "ceiling" in line
    assert line in (run_dir / "report.md").read_text()
    print_run_summary(run_dir, report)
    # the console wraps long lines (issue 30), never cuts them
    assert " ".join(f"caveat: {line}".split()) in " ".join(capsys.readouterr().out.split())


# ---- manifest sha256 per shard (issue 15): same size, other bytes --------------------------------------------
def _sha(path: str) -> str:
    import hashlib

    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def reframed(tfrecord_shards, tmp_path_factory):
    """A copy of the shards where one record of BAD has a flipped payload byte re-framed with fresh CRCs: the
    size is the same and every frame is sound, so only the manifest's sha256 can tell; (dir, {name: sha256 of
    the shard as prepared}, records read back from the altered copy)."""
    src, shards = tfrecord_shards
    d = tmp_path_factory.mktemp("reframed")
    recs = list(shards[BAD])
    changed = bytearray(recs[FLIP_RECORD])
    changed[len(changed) // 2] ^= 0x10
    recs[FLIP_RECORD] = bytes(changed)
    for n in shards:
        shutil.copy(os.path.join(src, n), d / n)
    (d / BAD).write_bytes(b"".join(frame(r) for r in recs))
    assert os.path.getsize(d / BAD) == os.path.getsize(os.path.join(src, BAD))
    hashes = {n: _sha(os.path.join(src, n)) for n in shards}
    everything = sorted(r for name, rs in shards.items() for r in (recs if name == BAD else rs))
    return str(d), hashes, everything


def _want_hash_line(uri: str, got: str, want: str) -> str:
    return (f"shard {uri}: sha256 {got[:12]}… differs from manifest.json's {want[:12]}… "
            f"(damaged or replaced after prepare)")


def test_stage_mode_catches_a_same_size_change_by_its_sha256(reframed, fake_gcs, monkeypatch):
    """Stage mode downloads whole shards, so it hashes each against manifest.json on the way: the re-framed
    shard (sound CRCs, same size) is refused with one line naming it; without hashes it is read silently."""
    from tfbertperf.storage.upload import upload_dir

    d, hashes, everything = reframed
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    fake_gcs.create_bucket("tfbertperf-test")
    prefix = f"gs://tfbertperf-test/reframed-{uuid.uuid4().hex[:6]}"
    upload_dir(d, prefix, progress=False)
    cfg = dataclasses.replace(SMALL, mode="stage")
    b = open_backend(prefix, cfg)
    uris = _uris(b, prefix)
    by_uri = {u: hashes[u.rsplit("/", 1)[-1]] for u in uris}

    def read(cfg, hashes):
        b = open_backend(prefix, cfg)
        src = open_shards(uris, cfg, b, hashes=hashes)
        ds = src.filenames.interleave(src.read, cycle_length=2, num_parallel_calls=2)
        try:
            with storage_errors(b, uris, prefix):
                return sorted(r.numpy() for r in ds), b.metrics.summary()
        finally:
            src.close()

    assert read(cfg, None)[0] == everything  # the CRCs alone see nothing wrong
    with pytest.raises(UsageError) as e:
        read(cfg, by_uri)
    assert str(e.value) == _want_hash_line(f"{prefix}/{BAD}", _sha(os.path.join(d, BAD)), by_uri[f"{prefix}/{BAD}"])
    got, summary = read(dataclasses.replace(cfg, skip_corrupt=True), by_uri)  # goes on, and names the shard
    assert got == everything and summary["corrupt_shards"] == [f"{prefix}/{BAD}"] and summary["records_skipped"] == 0


def test_local_verify_sha256_is_opt_in_and_names_the_shard(reframed):
    d, hashes, everything = reframed
    b = open_backend(d)
    uris = _uris(b, d)
    by_uri = {u: hashes[os.path.basename(u)] for u in uris}
    src = open_shards(uris, DataConfig(), b, hashes=by_uri)  # default data.verify=none: sizes only, no reading
    src.close()
    with pytest.raises(UsageError) as e:
        open_shards(uris, DataConfig(verify="sha256"), b, hashes=by_uri)
    assert str(e.value) == _want_hash_line(os.path.join(d, BAD), _sha(os.path.join(d, BAD)), hashes[BAD])
    b = open_backend(d)  # with data.skip_corrupt the run goes on and the report names the shard
    assert sorted(_read(b, uris, DataConfig(verify="sha256", skip_corrupt=True), d, by_uri)) == everything
    assert b.metrics.summary()["corrupt_shards"] == [os.path.join(d, BAD)]
    with pytest.raises(UsageError, match="manifest.json records no shard hashes"):  # an older data set
        open_shards(uris, DataConfig(verify="sha256"), b, hashes={})


def test_prepare_records_each_shards_sha256_and_old_manifests_still_load(prepared_damaged, tmp_path):
    """Every prepare writer records the shard's sha256 (here: the default prepare; prepare --synthetic and
    corpus prep: test_synthetic_shards.py::test_manifest_and_the_projects_pipeline_read_it and
    test_corpus_prep.py::test_prepare_corpus_directory_in_worker_processes); a manifest without the key
    (written before it existed) loads as before."""
    from tfbertperf.data.manifest import load_manifest

    d, shard, _ = prepared_damaged
    m = json.load(open(os.path.join(d, "manifest.json")))
    for s in m["shards"] + m.get("text_shards", []):
        path = os.path.join(d, s["name"])
        assert (s["sha256"] == _sha(path)) == (path != shard), s["name"]  # the damaged one no longer matches
    old = tmp_path / "old"
    shutil.copytree(d, old)
    for s in m["shards"] + m.get("text_shards", []):
        s.pop("sha256")
    (old / "manifest.json").write_text(json.dumps(m))
    assert load_manifest(str(old), open_backend(str(old)))["shards"][0]["name"] == m["shards"][0]["name"]


def test_run_with_verify_sha256_names_the_changed_shard_in_one_line(prepared_damaged, tmp_path):
    """`--set data.verify=sha256` on local data: the hash check runs before the first step and the command's
    stderr ends with the one line naming the shard (its CRC check would have named the record offset)."""
    d, shard, _ = prepared_damaged
    want = json.load(open(os.path.join(d, "manifest.json")))["shards"][0]["sha256"]
    sets = [a for s in SMALL_DATA + SHORT_RUN + [f"run.out={tmp_path}", "data.verify=sha256"] for a in ("--set", s)]
    p = subprocess.run([sys.executable, "-m", "tfbertperf.run", "--data", d, *sets], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert p.stderr.rstrip().splitlines()[-1] == "tfbertperf: error: " + _want_hash_line(shard, _sha(shard), want)
    assert "Traceback" not in p.stderr and not list(tmp_path.iterdir()), "no run directory left behind"
