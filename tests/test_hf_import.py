"""tfbertperf.model.hf_import: a small random BERT written in the Hugging Face layout (transformers' own
config.json, safetensors' own writer) is loaded into our Keras BERT; every tensor must land where it belongs
and the forward pass must match a NumPy reference of BERT's math on those weights."""

from __future__ import annotations

import json
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest

from tfbertperf.errors import UsageError

SMALL = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=100,
             max_position_embeddings=64, type_vocab_size=2)
TINY = dict(SMALL, hidden_size=128, intermediate_size=512, max_position_embeddings=512)  # model.size=tiny


def hf_weights(arch: dict, seed: int = 0, heads: bool = False, num_labels: int = 0) -> dict[str, np.ndarray]:
    """Random weights with HF names (no 'bert.' prefix) and HF shapes (Linear: [out, in]).  Scales are large
    enough (0.2, not BERT's 0.02) that activations are O(1), so GELU variants and mix-ups are visible."""
    rng = np.random.default_rng(seed)
    H, I, V = arch["hidden_size"], arch["intermediate_size"], arch["vocab_size"]
    f = lambda *shape, s=0.2: rng.normal(0.0, s, shape).astype(np.float32)  # noqa: E731
    w = {"embeddings.word_embeddings.weight": f(V, H, s=1.0),
         "embeddings.position_embeddings.weight": f(arch["max_position_embeddings"], H, s=1.0),
         "embeddings.token_type_embeddings.weight": f(arch["type_vocab_size"], H, s=1.0)}

    def linear(p, n_out, n_in):
        w[p + ".weight"], w[p + ".bias"] = f(n_out, n_in), f(n_out, s=0.1)

    def norm(p):
        w[p + ".weight"], w[p + ".bias"] = 1.0 + f(H, s=0.1), f(H, s=0.1)

    norm("embeddings.LayerNorm")
    for i in range(arch["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for x in ("query", "key", "value"):
            linear(p + f"attention.self.{x}", H, H)
        linear(p + "attention.output.dense", H, H)
        norm(p + "attention.output.LayerNorm")
        linear(p + "intermediate.dense", I, H)
        linear(p + "output.dense", H, I)
        norm(p + "output.LayerNorm")
    linear("pooler.dense", H, H)
    if heads:
        linear("cls.predictions.transform.dense", H, H)
        norm("cls.predictions.transform.LayerNorm")
        w["cls.predictions.bias"] = f(V, s=0.1)
        linear("cls.seq_relationship", 2, H)
    if num_labels:
        linear("classifier", num_labels, H)
    return w


def write_hf_dir(d, arch: dict, weights: dict, prefix: str = "", legacy_ln: bool = False, extra=None) -> str:
    """config.json via transformers.BertConfig.save_pretrained, model.safetensors via safetensors.numpy."""
    import transformers
    from safetensors.numpy import save_file

    os.makedirs(d, exist_ok=True)
    transformers.BertConfig(**arch).save_pretrained(str(d))
    out = {}
    for name, a in weights.items():
        if legacy_ln and ".LayerNorm." in name:  # bert-base-uncased's original names
            name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        out[name if name.startswith(("cls.", "classifier")) else prefix + name] = a
    out.update(extra or {})
    save_file(out, os.path.join(str(d), "model.safetensors"))
    return str(d)


def _gelu_erf(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def reference_bert(w: dict, arch: dict, ids, segments, mask, gelu=_gelu_erf, eps=1e-12):
    """BERT's encoder + pooler in float64 NumPy on HF-layout weights: (sequence (B, T, H), pooled (B, H))."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    B, T = ids.shape
    nh = arch["num_attention_heads"]
    hs = arch["hidden_size"] // nh

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    def heads(x):  # (B, T, H) → (B, nh, T, hs)
        return x.reshape(B, T, nh, hs).transpose(0, 2, 1, 3)

    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:T][None]
         + w["embeddings.token_type_embeddings.weight"][segments])
    x = ln(x, "embeddings.LayerNorm")
    bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9)  # padding keys get no attention
    for i in range(arch["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (heads(lin(x, p + f"attention.self.{n}")) for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs) + bias
        probs = np.exp(s - s.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(B, T, nh * hs)
        x = ln(x + lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        x = ln(x + lin(gelu(lin(x, p + "intermediate.dense")), p + "output.dense"), p + "output.LayerNorm")
    return x, np.tanh(lin(x[:, 0], "pooler.dense"))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from tfbertperf.model.hf_import import load_hf_encoder

    w = hf_weights(SMALL)
    d = write_hf_dir(tmp_path_factory.mktemp("hf") / "small", SMALL, w)  # BertModel style: no 'bert.' prefix
    enc, report = load_hf_encoder(d, seq_len=16)
    return w, enc, report


def test_config_read_from_config_json(small, tmp_path):
    from tfbertperf.model.hf_import import read_hf_config

    w, enc, _ = small
    cfg = enc.cfg
    assert (cfg.num_layers, cfg.hidden, cfg.num_heads, cfg.intermediate, cfg.vocab_size, cfg.max_positions,
            cfg.type_vocab_size, cfg.layer_norm_eps) == (2, 64, 2, 128, 100, 64, 2, 1e-12)
    d = write_hf_dir(tmp_path / "eps", dict(SMALL, layer_norm_eps=1e-5, hidden_dropout_prob=0.2), w)
    assert (read_hf_config(d).layer_norm_eps, read_hf_config(d).dropout) == (1e-5, 0.2)


def test_every_tensor_lands_where_it_belongs(small):
    w, enc, report = small
    H = SMALL["hidden_size"]
    e = enc.embeddings
    got = lambda v: np.asarray(v.numpy())  # noqa: E731
    np.testing.assert_array_equal(got(e.word.embeddings), w["embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(got(e.position), w["embeddings.position_embeddings.weight"])
    np.testing.assert_array_equal(got(e.token_type.embeddings), w["embeddings.token_type_embeddings.weight"])
    np.testing.assert_array_equal(got(e.norm.gamma), w["embeddings.LayerNorm.weight"])
    np.testing.assert_array_equal(got(e.norm.beta), w["embeddings.LayerNorm.bias"])
    for i, b in enumerate(enc.blocks):
        p = f"encoder.layer.{i}."
        kernel, bias = got(b.attn.qkv.kernel), got(b.attn.qkv.bias)
        for j, x in enumerate(("query", "key", "value")):  # fused q|k|v, Linear weights transposed
            np.testing.assert_array_equal(kernel[:, j * H : (j + 1) * H], w[p + f"attention.self.{x}.weight"].T)
            np.testing.assert_array_equal(bias[j * H : (j + 1) * H], w[p + f"attention.self.{x}.bias"])
        for layer, name in ((b.attn.out, "attention.output.dense"), (b.ffn.up, "intermediate.dense"),
                            (b.ffn.down, "output.dense")):
            np.testing.assert_array_equal(got(layer.kernel), w[p + name + ".weight"].T)
            np.testing.assert_array_equal(got(layer.bias), w[p + name + ".bias"])
        for layer, name in ((b.attn_norm, "attention.output.LayerNorm"), (b.ffn_norm, "output.LayerNorm")):
            np.testing.assert_array_equal(got(layer.gamma), w[p + name + ".weight"])
            np.testing.assert_array_equal(got(layer.beta), w[p + name + ".bias"])
    np.testing.assert_array_equal(got(enc.pooler.kernel), w["pooler.dense.weight"].T)
    np.testing.assert_array_equal(got(enc.pooler.bias), w["pooler.dense.bias"])
    assert report["tensors_loaded"] == report["tensors_in_checkpoint"] == len(w)
    assert report["parameters_loaded"] == sum(int(v.size) for v in w.values())
    assert report["ignored"] == {} and report["not_in_checkpoint"] == []


def test_forward_pass_matches_numpy_reference(small):
    w, enc, _ = small
    rng = np.random.default_rng(1)
    ids = rng.integers(0, SMALL["vocab_size"], (2, 16))
    segments = np.array([[0] * 8 + [1] * 8, [0] * 5 + [1] * 11])
    mask = np.ones((2, 16), dtype=np.int64)
    mask[1, 11:] = 0  # padding in the second example
    seq, pooled = enc(ids.astype(np.int32), mask.astype(np.int32), segments.astype(np.int32), training=False)
    ref_seq, ref_pooled = reference_bert(w, SMALL, ids, segments, mask)
    diff = max(np.abs(np.asarray(seq) - ref_seq).max(), np.abs(np.asarray(pooled) - ref_pooled).max())
    print(f"max abs diff, Keras float32 vs NumPy float64 reference: {diff:.2e}")
    assert diff <= 1e-4
    # The check can tell the erf GELU (BERT's, HF's "gelu") from the tanh approximation on these weights.
    tanh_seq, _ = reference_bert(w, SMALL, ids, segments, mask, gelu=_gelu_tanh)
    assert np.abs(np.asarray(seq) - tanh_seq).max() > 100 * max(diff, 1e-6)


def test_heads_prefix_and_legacy_names_into_build_model(tmp_path):
    import keras

    from tfbertperf.model.build import build_model
    from tfbertperf.model.hf_import import load_hf_weights

    w = hf_weights(TINY, seed=2, heads=True)
    extra = {"cls.predictions.decoder.weight": w["embeddings.word_embeddings.weight"],  # tied, as HF saves it
             "bert.embeddings.position_ids": np.arange(512, dtype=np.int64)[None]}
    d = write_hf_dir(tmp_path / "pre", TINY, w, prefix="bert.", legacy_ln=True, extra=extra)
    keras.utils.set_random_seed(0)
    model = build_model(SimpleNamespace(size="tiny", task="pretrain", dropout=0.1, num_labels=2), 100, 32)
    report = load_hf_weights(model, d)
    mlm, nsp = model.get_layer("mlm"), model.get_layer("nsp")
    np.testing.assert_array_equal(mlm.transform.kernel.numpy(), w["cls.predictions.transform.dense.weight"].T)
    np.testing.assert_array_equal(mlm.norm.gamma.numpy(), w["cls.predictions.transform.LayerNorm.weight"])
    np.testing.assert_array_equal(mlm.output_bias.numpy(), w["cls.predictions.bias"])
    np.testing.assert_array_equal(nsp.kernel.numpy(), w["cls.seq_relationship.weight"].T)
    np.testing.assert_array_equal(model.encoder.blocks[1].ffn_norm.beta.numpy(),
                                  w["encoder.layer.1.output.LayerNorm.bias"])
    assert set(report["ignored"]) == {"cls.predictions.decoder.weight", "bert.embeddings.position_ids"}
    assert report["ignored"]["cls.predictions.decoder.weight"].startswith("tied")
    assert report["not_in_checkpoint"] == []

    classify = build_model(SimpleNamespace(size="tiny", task="classify", dropout=0.1, num_labels=3), 100, 32)
    report = load_hf_weights(classify, d)  # no MLM/NSP in a classifier: listed, not an error
    def legacy(n):
        return n.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")

    assert {n for n, why in report["ignored"].items() if why == "no matching head in our model"} == {
        legacy(n) for n in w if n.startswith("cls.")}
    assert report["not_in_checkpoint"] == ["classifier/kernel", "classifier/bias"]


def _error(fn, *args) -> str:
    with pytest.raises(UsageError) as e:
        fn(*args)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


def test_bad_inputs_are_one_line_usage_errors(small, tmp_path):
    from tfbertperf.model.hf_import import load_hf_encoder, load_hf_weights, read_hf_config

    w, enc, _ = small
    query = "encoder.layer.0.attention.self.query.weight"
    bad = dict(w, **{query: w[query][:, :32]})
    msg = _error(load_hf_encoder, write_hf_dir(tmp_path / "shape", SMALL, bad), 16)
    assert "encoder.layer.0.attention.self.query.weight has shape (64, 32), expected (64, 64)" in msg

    missing = {k: v for k, v in w.items() if k != "encoder.layer.1.output.dense.bias"}
    msg = _error(load_hf_encoder, write_hf_dir(tmp_path / "missing", SMALL, missing, prefix="bert."), 16)
    assert "missing tensor bert.encoder.layer.1.output.dense.bias" in msg

    extra = dict(w, **{"encoder.layer.2.output.dense.bias": w["encoder.layer.1.output.dense.bias"]})
    msg = _error(load_hf_encoder, write_hf_dir(tmp_path / "extra", SMALL, extra), 16)
    assert "unexpected tensor encoder.layer.2.output.dense.bias" in msg

    d = write_hf_dir(tmp_path / "deeper", dict(SMALL, num_hidden_layers=3), w)
    assert "num_hidden_layers=3 but the model has num_layers=2" in _error(load_hf_weights, enc, d)

    d = write_hf_dir(tmp_path / "gpt2", SMALL, w)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_layer": 2}, f)
    assert "model_type 'gpt2' is not BERT" in _error(read_hf_config, d)

    d = write_hf_dir(tmp_path / "garbage", SMALL, w)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(np.random.default_rng(3).bytes(4096))
    msg = _error(load_hf_encoder, d, 16)
    assert "model.safetensors: not a safetensors file" in msg

    d = write_hf_dir(tmp_path / "truncated", SMALL, w)
    path = os.path.join(d, "model.safetensors")
    os.truncate(path, os.path.getsize(path) - 1000)
    assert "model.safetensors: tensor" in _error(load_hf_encoder, d, 16)

    nowhere = str(tmp_path / "no-such-model")
    assert f"{nowhere}: no such directory" in _error(load_hf_encoder, nowhere, 16)
    os.remove(os.path.join(write_hf_dir(tmp_path / "noweights", SMALL, w), "model.safetensors"))
    assert "no model.safetensors" in _error(load_hf_encoder, str(tmp_path / "noweights"), 16)


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_half_precision_checkpoint_is_widened(half, tmp_path):
    import ml_dtypes  # installed with TensorFlow; lets safetensors.numpy write BF16

    from tfbertperf.model.hf_import import load_hf_encoder

    dtype = ml_dtypes.bfloat16 if half == "bfloat16" else np.float16
    w = {k: v.astype(dtype) for k, v in hf_weights(SMALL, seed=4).items()}
    enc, report = load_hf_encoder(write_hf_dir(tmp_path / half, SMALL, w), seq_len=16)
    assert report["tensors_loaded"] == len(w)
    np.testing.assert_array_equal(enc.embeddings.word.embeddings.numpy(),
                                  w["embeddings.word_embeddings.weight"].astype(np.float32))
    np.testing.assert_array_equal(enc.blocks[1].attn.qkv.kernel.numpy()[:, 64:128],
                                  w["encoder.layer.1.attention.self.key.weight"].astype(np.float32).T)
