"""--set model.init=DIR: a Hugging Face BERT directory (config.json + model.safetensors + vocab.txt) gives the
architecture, the weights and the vocabulary of a real run; bad directories are one line, exit 2, before a run
directory exists.  report.json records the tokenizer, and env --diff ranks a tokenizer/vocab difference."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tfbertperf.errors import UsageError
from test_hf_import import hf_weights, write_hf_dir

ROOT = Path(__file__).resolve().parents[1]
# Not a named size: 3 layers, H 64, 4 heads, FFN 96 — build_model must take every number from config.json.
ARCH = dict(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, intermediate_size=96, vocab_size=80,
            max_position_embeddings=64, type_vocab_size=2)
# A character-level WordPiece vocab ([PAD] first, as bert-base-uncased's): any lower-case ASCII word tokenizes.
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.ascii_lowercase, *string.digits,
         *("##" + c for c in string.ascii_lowercase + string.digits)]


def hf_dir(path, arch=ARCH, seed=0, **weights_kw) -> tuple[str, dict]:
    w = hf_weights(arch, seed=seed, heads=True, **weights_kw)
    d = write_hf_dir(path, arch, w, prefix="bert.")
    Path(d, "vocab.txt").write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
    return d, w


def test_build_model_takes_the_architecture_and_the_weights_from_the_directory(tmp_path):
    from tfbertperf.model.bert import describe, parameter_line
    from tfbertperf.model.build import build_model

    d, w = hf_dir(tmp_path / "hf")
    model = build_model(SimpleNamespace(size="tiny", task="pretrain", dropout=0.1, num_labels=2, init=d),
                        len(VOCAB), 32, 5)
    c = model.bert_config
    assert (c.num_layers, c.hidden, c.num_heads, c.intermediate, c.vocab_size, c.max_positions,
            c.type_vocab_size) == (3, 64, 4, 96, 80, 64, 2)
    enc = model.encoder
    np.testing.assert_array_equal(enc.embeddings.word.embeddings.numpy(), w["embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(enc.blocks[2].ffn.down.kernel.numpy(), w["encoder.layer.2.output.dense.weight"].T)
    np.testing.assert_array_equal(model.get_layer("nsp").kernel.numpy(), w["cls.seq_relationship.weight"].T)
    info = describe(model)
    assert info["size"] == "hf:hf" and (info["layers"], info["hidden"], info["heads"]) == (3, 64, 4)
    assert info["init"]["tensors_loaded"] == len(w) and info["init"]["not_in_checkpoint"] == []
    line = parameter_line(info)
    assert f"{len(w)} tensors" in line and d in line and "\n" not in line

    # the data's vocab may be smaller than the checkpoint's, never larger
    with pytest.raises(UsageError, match="the data's vocab has 81 tokens, the checkpoint 80"):
        build_model(SimpleNamespace(size="tiny", task="pretrain", dropout=0.1, num_labels=2, init=d), 81, 32, 5)


def test_the_vocab_beside_the_checkpoint_becomes_data_vocab(tmp_path):
    from tfbertperf.config import default_data_dir, load_config

    d, _ = hf_dir(tmp_path / "hf")
    cfg = load_config(sets=[f"model.init={d}"])
    assert cfg.data.vocab == os.path.join(d, "vocab.txt")
    assert default_data_dir(cfg) != default_data_dir(load_config())  # its own prepared data set
    mine = tmp_path / "mine.txt"
    assert load_config(sets=[f"model.init={d}", f"data.vocab={mine}"]).data.vocab == str(mine)  # given wins
    with pytest.raises(UsageError, match=r"model.init=.*nowhere: no such directory"):
        load_config(sets=[f"model.init={tmp_path / 'nowhere'}"])


def test_a_cased_checkpoint_is_refused_in_one_line(tmp_path):
    from tfbertperf.model.hf_preflight import preflight

    d = hf_dir(tmp_path / "cased")[0]
    assert preflight(d, 32, len(VOCAB)).num_layers == 3
    Path(d, "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    assert preflight(d, 32, len(VOCAB)).hidden == 64
    Path(d, "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    with pytest.raises(UsageError, match=r"tokenizer_config.json: do_lower_case=false \(a cased model\)"):
        preflight(d, 32, len(VOCAB))
    with pytest.raises(UsageError, match="data.seq_len=65: .* has 64 positions"):
        preflight(hf_dir(tmp_path / "short")[0], 65, len(VOCAB))


def _cli(*args, cwd) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.Popen([sys.executable, "-m", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_bad_checkpoints_are_one_line_exit_2_before_a_run_directory(tmp_path, capsys):
    shape = hf_dir(tmp_path / "shape")[0]
    w = hf_weights(ARCH, heads=True)
    w["encoder.layer.1.intermediate.dense.weight"] = w["encoder.layer.1.intermediate.dense.weight"][:, :32]
    write_hf_dir(shape, ARCH, w, prefix="bert.")
    gpt2 = hf_dir(tmp_path / "gpt2")[0]
    Path(gpt2, "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64}))
    garbage = hf_dir(tmp_path / "garbage")[0]
    Path(garbage, "model.safetensors").write_bytes(np.random.default_rng(1).bytes(2048))
    unreadable = hf_dir(tmp_path / "unreadable")[0]
    os.chmod(os.path.join(unreadable, "model.safetensors"), 0)
    cases = {
        shape: "bert.encoder.layer.1.intermediate.dense.weight has shape (96, 32), expected (96, 64)",
        gpt2: "model_type 'gpt2' is not BERT",
        garbage: "model.safetensors: not a safetensors file",
        str(tmp_path / "nowhere"): "nowhere: no such directory",
    }
    if os.geteuid() != 0:  # root reads a mode-000 file anyway
        cases[unreadable] = "model.safetensors: unreadable (Permission denied)"
    runs = tmp_path / "runs"
    # One case as the user meets it (a process of its own); the others through the same entry point in this
    # process (cli_entry: the one line and exit 2), which spares a TensorFlow start each.
    first, *rest = cases
    proc = _cli("tfbertperf.run", "--set", f"model.init={first}", "--set", f"run.out={runs}", cwd=tmp_path)
    out, err = proc.communicate(timeout=600)
    lines = [ln for ln in err.splitlines() if ln.startswith("tfbertperf: error:")]  # (TF's start-up chatter aside)
    assert proc.returncode == 2, (first, err)
    assert len(lines) == 1 and cases[first] in lines[0] and "Traceback" not in err, (first, err)
    from tfbertperf.run import main

    for d in rest:
        with pytest.raises(SystemExit) as e:
            main(["--set", f"model.init={d}", "--set", f"run.out={runs}"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("tfbertperf: error:") == 1 and cases[d] in err, (d, err)
    assert not runs.exists()  # refused before any data work or run directory


@pytest.mark.slow
def test_a_run_from_a_checkpoint_records_the_load_and_the_tokenizer(tmp_path):
    """The real CLI end to end: prepare with the checkpoint's vocab, train from its weights, report both."""
    from tfbertperf.data.vocab import vocab_sha256

    d, w = hf_dir(tmp_path / "hf")
    data, runs = tmp_path / "data", tmp_path / "runs"
    sets = ["--set", f"model.init={d}", "--set", "data.seq_len=32", "--set", "data.max_predictions=5"]
    p = _cli("tfbertperf.prepare", "--out", str(data), *sets, "--set", "data.dupe_factor=1",
             "--set", "data.num_shards=2", "-q", cwd=tmp_path)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["vocab_sha256"] == vocab_sha256(VOCAB) and manifest["vocab_size"] == len(VOCAB)
    p = _cli("tfbertperf.run", "--data", str(data), *sets, "--set", "train.steps=6", "--set", "train.batch_size=8",
             "--set", "profile.steps=none", "--set", "profile.probe_steps=0", "--set", f"run.out={runs}", cwd=tmp_path)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert f"{len(w)} tensors" in err + out  # the load line
    report = json.loads(next(runs.glob("*/report.json")).read_text())
    assert report["model"]["layers"] == 3 and report["model"]["init"]["tensors_loaded"] == len(w)
    assert report["config"]["model"]["init"] == d
    tok = report["tokenizer"]
    assert tok["name"] == "FastBertTokenizer" and tok["library"] == "tensorflow-text"
    assert tok["vocab_sha256"] == vocab_sha256(VOCAB) and tok["lower_case"] is True and tok["version"]


def test_env_diff_ranks_a_tokenizer_difference_as_a_numerics_cause():
    from tfbertperf.data.tokcheck import tokenizer_info
    from tfbertperf.envinfo import explain
    from tfbertperf.envinfo.diffing import diff

    env = {"schema": "tfbertperf.env/1", "cpu": {"model": "x", "usable_cores": 2}, "packages": {"keras": "3"}}
    a = {"schema": "tfbertperf.report/1", "environment": env, "config": {"train": {"steps": 60}},
         "tokenizer": tokenizer_info(None, sha256="a" * 64)}
    b = dict(a, tokenizer=dict(a["tokenizer"], vocab_sha256="b" * 64, lower_case=False),
             config={"train": {"steps": 80}})
    found = {d["name"]: d for d in diff(a, b)}
    sha, case = found["tokenizer.vocab_sha256"], found["tokenizer.lower_case"]
    assert sha["affects"] == ["numerics"] and sha["impact"] == "high" and "vocabulary" in sha["why"]
    assert case["affects"] == ["numerics"] and case["score"] >= 70
    ranked = [d["name"] for d in diff(a, b)]
    assert ranked.index("tokenizer.vocab_sha256") < ranked.index("config.train.steps")
    assert diff(a, dict(a)) == []
    assert "tokenizer.vocab_sha256" in json.dumps(explain(a, b))
