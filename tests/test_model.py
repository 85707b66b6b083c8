"""BERT model family: published parameter counts, shapes, heads, weight tying, bad sizes."""

import numpy as np
import pytest

from tfbertperf.config import load_config
from tfbertperf.errors import UsageError
from tfbertperf.model import build_encoder, build_model, config_for, describe, encoder_parameters, parameter_line


@pytest.mark.parametrize("size, published", [("base", 109_482_240), ("large", 335_141_888)])
def test_the_closed_form_gives_the_published_bert_parameter_counts(size, published):
    assert encoder_parameters(config_for(size, 30522)) == published


@pytest.mark.parametrize("size", ["tiny", "mini"])
def test_a_built_encoder_has_the_closed_form_parameter_count(size):
    # the fast tier's check that the formula and the Keras model agree (base and large below build in full)
    assert build_encoder(size, vocab_size=30522).count_params() == encoder_parameters(config_for(size, 30522))


@pytest.mark.slow  # initialises 110 M and 335 M weights: ~1 min of the 2 cores
@pytest.mark.parametrize("size, published", [("base", 109_482_240), ("large", 335_141_888)])
def test_encoder_plus_pooler_has_published_bert_parameter_count(size, published):
    # Built symbolically (no batch runs); the closed form must agree with the built weights.
    encoder = build_encoder(size, vocab_size=30522)
    assert encoder.count_params() == published
    assert encoder_parameters(config_for(size, 30522)) == published


@pytest.mark.parametrize(
    "size, shape", [("tiny", (2, 128, 2)), ("mini", (4, 256, 4)), ("small", (4, 512, 8)), ("medium", (8, 512, 8))]
)
def test_named_sizes_have_their_layers_hidden_heads_and_4h_ffn(size, shape):
    cfg = config_for(size, 1000)
    assert (cfg.num_layers, cfg.hidden, cfg.num_heads) == shape
    assert cfg.intermediate == 4 * cfg.hidden and cfg.max_positions == 512 and cfg.type_vocab_size == 2


def _batch(task, B=3, T=32, P=5, V=500, seed=0):
    rng = np.random.default_rng(seed)
    f = {
        "input_ids": rng.integers(0, V, (B, T)),
        "input_mask": np.concatenate([np.ones((B, T - 4), "int64"), np.zeros((B, 4), "int64")], axis=1),
        "segment_ids": np.concatenate([np.zeros((B, T // 2), "int64"), np.ones((B, T - T // 2), "int64")], axis=1),
    }
    if task == "pretrain":
        f["masked_lm_positions"] = rng.integers(1, T - 4, (B, P))
    return f


def test_pretrain_model_outputs_mlm_logits_per_masked_position_and_nsp_logits():
    cfg = load_config(overrides={"model.task": "pretrain"})
    model = build_model(cfg.model, vocab_size=500, seq_len=32, max_predictions=5)
    out = model(_batch("pretrain"), training=False)
    assert tuple(out["mlm_logits"].shape) == (3, 5, 500)
    assert tuple(out["nsp_logits"].shape) == (3, 2)
    assert out["mlm_logits"].dtype.name == "float32"


def test_mlm_decoder_is_tied_to_word_embeddings():
    cfg = load_config()
    model = build_model(cfg.model, vocab_size=500, seq_len=32, max_predictions=5)
    word = model.encoder.embeddings.word.embeddings
    # Tied: no (V, H) matrix besides the input embeddings, and the model's count is the closed form.
    big = [w for w in model.trainable_weights if tuple(w.shape) == (500, 128)]
    assert len(big) == 1 and big[0] is word
    assert describe(model)["parameters"] == describe(cfg.model, vocab_size=500)["parameters"]


def test_padding_tokens_do_not_change_unpadded_positions():
    cfg = load_config()
    model = build_model(cfg.model, vocab_size=500, seq_len=32, max_predictions=5)
    a = _batch("pretrain")
    b = {k: v.copy() for k, v in a.items()}
    b["input_ids"][:, -4:] = 7  # change only padded (mask 0) tokens
    oa, ob = model(a, training=False), model(b, training=False)
    np.testing.assert_allclose(np.asarray(oa["mlm_logits"]), np.asarray(ob["mlm_logits"]), atol=1e-5)


def test_classifier_outputs_num_labels_logits_and_describe_names_it():
    cfg = load_config(overrides={"model.task": "classify", "model.num_labels": 3, "model.size": "mini"})
    model = build_model(cfg.model, vocab_size=500, seq_len=32)
    out = model(_batch("classify"), training=False)
    assert tuple(out["logits"].shape) == (3, 3)
    info = describe(model)
    assert info == {"size": "mini", "task": "classify", "parameters": info["parameters"], "layers": 4,
                    "hidden": 256, "heads": 4}
    assert "number of parameters" in parameter_line(info) and "L4/H256/A4" in parameter_line(info)


def test_unknown_size_and_too_long_sequence_are_usage_errors():
    with pytest.raises(UsageError, match="model.size"):
        config_for("huge", 100)
    cfg = load_config()
    with pytest.raises(UsageError, match="data.seq_len=600"):
        build_model(cfg.model, vocab_size=500, seq_len=600)
