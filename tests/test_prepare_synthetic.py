"""`tfbertperf prepare --synthetic`: the command writes shards the pipeline reads (the writer: test_synthetic_shards)."""

import json
import subprocess
import sys


def _prepare(*args):
    return subprocess.run([sys.executable, "-m", "tfbertperf", "prepare", "--synthetic", *args], capture_output=True,
                          text=True, timeout=300)


def test_synthetic_prepare_by_size_writes_a_manifest_of_that_size_with_progress(tmp_path):
    out = tmp_path / "syn"
    r = _prepare("--size", "4MB", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((out / "manifest.json").read_text())
    on_disk = sum(p.stat().st_size for p in out.glob("*.tfrecord*"))
    assert abs(on_disk - 4_000_000) < 0.02 * 4_000_000, on_disk
    assert m["seq_len"] == 128 and m["max_predictions"] == 20 and m["task"] == "pretrain"
    assert 700 < m["record_bytes_mean"] < 950  # seq 128 / 20 predictions ≈ 0.8 KB, as MLPerf's BERT records
    assert "MB/s" in r.stderr and "shard" in r.stderr


def test_synthetic_prepare_bad_input_is_one_line_exit_2(tmp_path):
    for args, culprit in ((["--size", "2XB"], "2XB"), (["--examples", "0"], "--examples 0"), ([], "--examples")):
        r = _prepare(*args, "--out", str(tmp_path / "x"))
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1 and culprit in lines[0], (args, r.stderr)
