"""`tfbertperf tokenize --check`: the command end to end (the parity logic itself: tests/test_tokcheck.py)."""

import json
import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "tfbertperf", "tokenize", *args], capture_output=True, text=True,
                          timeout=600)


def test_check_on_a_user_corpus_reports_the_share_and_names_the_difference(tmp_path):
    corpus = tmp_path / "c.txt"
    # Plain sentences tokenize identically; the ellipsis character is normalized differently by the two libraries.
    corpus.write_text("The statement is executed.\nA list of items follows.\nWait… what happened there.\n")
    r = _run("--check", "--corpus", str(corpus), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["sequences"] == 3 and doc["identical"] == 2
    assert doc["differences"][0]["reason"] == "casing/accents" and "Wait" in doc["differences"][0]["text"]
    assert doc["ours"]["library"] == "tensorflow-text" and doc["hf"]["library"] == "transformers"


def test_missing_corpus_is_one_line_exit_2(tmp_path):
    r = _run("--check", "--corpus", str(tmp_path / "nope.txt"))
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "nope.txt" in lines[0] and "Traceback" not in r.stderr
