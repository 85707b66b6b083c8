"""One way to make a data set (issue 25), and what a user meets on the way (issue 23 items 1-2): `--set
data.corpus=F` (a run's route) and `prepare --corpus F` write the same data set, in one or in several worker
processes; `prepare --corpus F` without --out goes to a folder named after the corpus and leaves the default data
set alone; a classification CSV's label count comes from its data; every writer writes atomically through one
helper."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfbertperf.config import default_data_dir, load_config

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tfbertperf"
SETS = ["data.seq_len=64", "data.max_predictions=10", "data.dupe_factor=1", "data.num_shards=3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """~150 KB of real English in google-research/bert's format, and a vocab learned from it."""
    from tfbertperf.data.corpus import load_default_corpus
    from tfbertperf.data.vocab import learn_vocab, vocab_text

    docs = load_default_corpus().documents[:200]
    d = tmp_path_factory.mktemp("routes")
    (d / "wiki.txt").write_text("".join("\n".join(x.sentences) + "\n\n" for x in docs))
    (d / "vocab.txt").write_text(vocab_text(learn_vocab([s for x in docs for s in x.sentences], 1500)))
    return d


def _tree(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def test_data_corpus_and_prepare_corpus_write_the_same_data_set(corpus, tmp_path):
    """Same knobs, same corpus: the config route (what job.ensure_data runs) and the --corpus route write the same
    manifest (fields and values, source_sha256 included) and the same bytes, with 1 worker (in this process) or
    2 worker processes."""
    from tfbertperf.data import prepare_data
    from tfbertperf.data.prep.source import source_sha256

    sets = SETS + [f"data.vocab={corpus / 'vocab.txt'}"]
    by_config = prepare_data(load_config(sets=sets + [f"data.corpus={corpus / 'wiki.txt'}"]), str(tmp_path / "cfg"),
                             progress=False)
    by_cli = prepare_data(load_config(sets=sets), str(tmp_path / "cli"), progress=False,
                          corpus=str(corpus / "wiki.txt"), workers=2)
    assert by_config == by_cli
    assert by_config["schema"] == "tfbertperf.manifest/2" and by_config["corpus"] == "wiki.txt"
    assert by_config["source_sha256"] == source_sha256(str(corpus / "wiki.txt"), str(corpus / "vocab.txt"))
    assert len(by_config["shards"]) == len(by_config["text_shards"]) == 3 and by_config["num_examples"] > 300
    assert _tree(tmp_path / "cfg") == _tree(tmp_path / "cli")


def test_every_writer_records_its_source(corpus, tmp_path):
    """The bundled text, a classification CSV and synthetic shards: each manifest says what it was made from."""
    from tfbertperf.data import prepare_data
    from tfbertperf.data.corpus import default_corpus_sha256
    from tfbertperf.data.prep.synthetic_shards import write_synthetic

    bundled = prepare_data(load_config(sets=SETS + [f"data.vocab={corpus / 'vocab.txt'}"]), str(tmp_path / "b"),
                           progress=False)
    assert bundled["corpus_sha256"] == default_corpus_sha256() != bundled["source_sha256"]  # + the vocab file
    csv = tmp_path / "rev.csv"
    csv.write_text("".join(f"review {i} says {w} things,{w}\n" for i in range(30) for w in ("good", "bad", "odd")))
    labeled = prepare_data(load_config(sets=["model.task=classify", f"data.corpus={csv}", "data.num_shards=2",
                                             "data.vocab_size=200", "data.seq_len=32"]), str(tmp_path / "c"),
                           progress=False)
    assert labeled["num_labels"] == 3 and len(labeled["source_sha256"]) == 64
    syn = write_synthetic(str(tmp_path / "s"), examples=300, seq_len=32, max_predictions=5, vocab_size=500,
                          workers=1)
    again = write_synthetic(str(tmp_path / "s2"), examples=300, seq_len=32, max_predictions=5, vocab_size=500,
                            workers=1)
    assert syn["source_sha256"] == again["source_sha256"] and len(syn["source_sha256"]) == 64


def test_prepare_corpus_without_out_leaves_the_default_data_set_byte_identical(corpus, tmp_path, monkeypatch,
                                                                                 capsys):
    """Issue 23 item 2: before, `prepare --corpus F` wrote into the default data set's directory."""
    from tfbertperf.prepare import main

    monkeypatch.setenv("TFBERTPERF_DATA_HOME", str(tmp_path / "home"))
    sets = [x for s in SETS + [f"data.vocab={corpus / 'vocab.txt'}"] for x in ("--set", s)]
    assert main(["-q", *sets]) == 0
    default = Path(default_data_dir(load_config(sets=sets[1::2])))
    before = _tree(default)
    assert "manifest.json" in before
    capsys.readouterr()
    assert main(["--corpus", str(corpus / "wiki.txt"), *sets]) == 0
    said = capsys.readouterr().out
    assert _tree(default) == before
    mine = Path(default_data_dir(load_config(sets=sets[1::2] + [f"data.corpus={corpus / 'wiki.txt'}"])))
    assert mine != default and mine.name.startswith("pretrain-wiki-") and (mine / "manifest.json").is_file()
    assert f"at {mine} in " in said and "(no --out: the folder a run with --set data.corpus=" in said


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", TFBERTPERF_DATA_HOME=str(tmp_path / "h"))
    return subprocess.run([sys.executable, "-m", "tfbertperf.run", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.fixture()
def three_labels(tmp_path):
    csv = tmp_path / "rev.csv"
    words = {"a": "storage latency hurts", "b": "compute bound step", "c": "tokenizer is slow"}
    csv.write_text("".join(f"case {i} {w},{lab}\n" for i in range(40) for lab, w in words.items()))
    return ["--set", "model.task=classify", "--set", f"data.corpus={csv}", "--set", "model.size=tiny",
            "--set", "data.seq_len=32", "--set", "data.vocab_size=200", "--set", "data.num_shards=2",
            "--set", "train.batch_size=8", "--set", "train.steps=6", "--set", "profile.steps=none",
            "--set", "profile.probe_steps=0", "--set", "profile.ceiling_seconds=0", "--set", "profile.utilization_hz=0",
            "--set", f"run.out={tmp_path / 'runs'}"]


@pytest.mark.slow
def test_a_three_label_csv_trains_and_the_report_says_three_labels(three_labels, tmp_path):
    """Issue 23 item 1: before, model.num_labels stayed 2 and TensorFlow failed on label 2 mid-run."""
    r = _run(three_labels, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    (report,) = (tmp_path / "runs").rglob("report.json")
    assert json.loads(report.read_text())["config"]["model"]["num_labels"] == 3


def test_a_num_labels_that_disagrees_with_the_data_is_one_line_and_no_run_dir(three_labels, tmp_path):
    r = _run(three_labels + ["--set", "model.num_labels=2"], tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tfbertperf: error:")]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "model.num_labels=2" in lines[0] and "3 labels (a, b, c)" in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    from tfbertperf.storage.atomic import atomic_file, write_atomic

    target = tmp_path / "sub" / "f.json"
    write_atomic(target, b"old")
    with pytest.raises(RuntimeError):
        with atomic_file(target) as f:
            f.write(b"half")
            raise RuntimeError("killed")
    assert target.read_bytes() == b"old" and [p.name for p in target.parent.iterdir()] == ["f.json"]


def test_one_atomic_write_helper_serves_every_writer():
    """No module but storage/atomic.py makes its own temporary-then-rename file or fsyncs one (the checkpoint
    fsyncs the files TensorFlow wrote into its directory, which it then renames as a whole)."""
    own = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).as_posix()
        if rel == "storage/atomic.py":
            continue
        # a tuple of file-name suffixes to skip (storage/listing.py's NON_DATA_SUFFIXES) writes nothing
        text = "\n".join(ln for ln in path.read_text().splitlines() if not re.match(r"\s*(\w*_SUFFIXES = )?\(?\"\.", ln))
        patterns = ("mkstemp(", ".tmp\"", ".part\"", "os.fsync(") if rel != "train/checkpoint.py" else ("mkstemp(",)
        for pattern in patterns:
            if pattern in text:
                own.append(f"{rel}: {pattern}")
    assert not own, own


@pytest.mark.slow
def test_a_run_prepares_on_tensorflows_eager_runtime_alone_then_trains(corpus, tmp_path):
    """`tfbertperf run --set data.corpus=F` prepares before TensorFlow is imported: the tokenizer runs on the eager
    runtime loaded without the `tensorflow` package's __init__ (data/eager_runtime.py), a helper process forked
    before it loads makes some of the chunks, then training imports TensorFlow and Keras in full.  The run trains, and its data set is byte for byte the one this process (where
    TensorFlow is imported) prepares from the same corpus and knobs."""
    from tfbertperf.data import prepare_data

    sets = SETS + [f"data.vocab={corpus / 'vocab.txt'}", f"data.corpus={corpus / 'wiki.txt'}"]
    args = [x for s in sets + ["model.size=tiny", "train.batch_size=8", "train.steps=3", "profile.steps=none",
                               "profile.probe_steps=0", "profile.ceiling_seconds=0", "profile.utilization_hz=0",
                               f"run.out={tmp_path / 'runs'}"] for x in ("--set", s)]
    probe = ("import runpy, sys; import tfbertperf.data.eager_runtime as er; "
             "sys.argv = ['tfbertperf.run', *sys.argv[1:]]; "
             "orig = er._load_partial\n"
             "def spy():\n    rt = orig(); print('PARTIAL', rt.partial, 'tensorflow' in sys.modules, flush=True); "
             "return rt\n"
             "er._load_partial = spy; runpy.run_module('tfbertperf.run', run_name='__main__')")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TFBERTPERF_DATA_HOME=str(tmp_path / "h"))
    r = subprocess.run([sys.executable, "-c", probe, *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "PARTIAL True False" in r.stdout  # loaded without the package, and the stand-in removed after
    # two usable cores: a helper forked before the runtime loaded made some chunks (the bytes below are the same)
    assert ("1 helper process forked" in r.stderr) == (len(os.sched_getaffinity(0)) >= 2), r.stderr[-2000:]
    assert not [ln for ln in r.stderr.splitlines() if ln.startswith(("I0000", "W0000", "WARNING: All log"))]
    (report,) = (tmp_path / "runs").rglob("report.json")
    assert json.loads(report.read_text())["throughput"]["steps"] == 3
    (made,) = [p.parent for p in (tmp_path / "h").rglob("manifest.json")]
    prepare_data(load_config(sets=sets), str(tmp_path / "here"), progress=False)
    assert _tree(made) == _tree(tmp_path / "here")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the forked helper needs two usable cores")
def test_a_helper_process_that_dies_is_one_line_and_exit_2(corpus, tmp_path):
    """The forked helper killed mid-chunk (here: it exits inside its first chunk) stops `prepare` with one line
    naming --out and the way around it, not a hang or a traceback, and no manifest is written."""
    probe = ("import os, runpy, sys\nimport tfbertperf.data.prep.chunked as c\nparent, real = os.getpid(), c.chunk_job\n"
             "def job(j):\n    if os.getpid() != parent:\n        os._exit(9)\n    return real(j)\n"
             "c.chunk_job = job\nsys.argv = ['tfbertperf.prepare', *sys.argv[1:]]\n"
             "runpy.run_module('tfbertperf.prepare', run_name='__main__')")
    out = tmp_path / "out"
    sets = [x for s in SETS + [f"data.vocab={corpus / 'vocab.txt'}"] for x in ("--set", s)]
    r = subprocess.run([sys.executable, "-c", probe, "--corpus", str(corpus / "wiki.txt"), "--out", str(out), *sets],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("tfbertperf: error:")]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(errors) == 1 and f"prepare --out {out}: a worker process died" in errors[0], errors
    assert "--workers 1" in errors[0] and not (out / "manifest.json").exists()
