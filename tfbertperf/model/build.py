"""BERT with its task head, built from the run's model config (the layers are in model/bert.py): the config's
named size, or the architecture and weights of a local Hugging Face directory (`--set model.init=DIR`:
model/hf_preflight.py checks it, model/hf_import.py loads it)."""

from __future__ import annotations

import os

import keras
from keras import layers

from tfbertperf.model.bert import BertEncoder, MaskedLMHead, config_for, initializer

FEATURES = {
    # name: (dtype, length key) — the google-research/bert TFRecord feature spec, as model inputs
    "pretrain": {
        "input_ids": "seq_len", "input_mask": "seq_len", "segment_ids": "seq_len",
        "masked_lm_positions": "max_predictions",
    },
    "classify": {"input_ids": "seq_len", "input_mask": "seq_len", "segment_ids": "seq_len"},
}


def build_model(model_cfg, vocab_size: int, seq_len: int, max_predictions: int = 20,
                remat: bool = False) -> keras.Model:
    """Build BERT with the task head named by `model_cfg.task` (a tfbertperf.config.ModelConfig).

    Returns a functional keras.Model taking a dict of int features (extra keys in a batch are ignored by the
    train step, which passes only `model.input_names`-like keys):
      pretrain → {"mlm_logits": (B, P, V) float32, "nsp_logits": (B, 2) float32}
      classify → {"logits": (B, num_labels) float32}
    `remat`: blocks recomputed in the backward pass (train.remat). Weights exist on return (built symbolically;
    no batch is run); the global Keras dtype policy at call time decides the compute dtype (mixed precision).
    """
    from tfbertperf.config.schema import DEFAULT_NUM_LABELS
    from tfbertperf.errors import UsageError

    init = getattr(model_cfg, "init", "")
    if init:  # architecture from the HF directory's config.json; weights loaded below
        from tfbertperf.model.hf_preflight import preflight

        cfg = preflight(init, seq_len, vocab_size)
    else:
        cfg = config_for(model_cfg.size, vocab_size, getattr(model_cfg, "dropout", 0.1))
    if seq_len > cfg.max_positions:
        raise UsageError(f"--set data.seq_len={seq_len}: BERT has {cfg.max_positions} positions")
    if model_cfg.task not in FEATURES:
        raise UsageError(f"--set model.task={model_cfg.task!r}: expected one of {', '.join(FEATURES)}")
    lengths = {"seq_len": seq_len, "max_predictions": max_predictions}
    inputs = {
        name: keras.Input(shape=(lengths[length],), dtype="int32", name=name)
        for name, length in FEATURES[model_cfg.task].items()
    }
    encoder = BertEncoder(cfg, remat=remat, name="bert")
    sequence, pooled = encoder(inputs["input_ids"], inputs["input_mask"], inputs["segment_ids"])
    if model_cfg.task == "pretrain":
        mlm = MaskedLMHead(cfg, encoder.embeddings.word, name="mlm")(sequence, inputs["masked_lm_positions"])
        nsp = layers.Dense(2, kernel_initializer=initializer(cfg), dtype="float32", name="nsp")(pooled)  # (B, 2)
        outputs = {"mlm_logits": mlm, "nsp_logits": nsp}
    else:
        x = layers.Dropout(cfg.dropout)(pooled)
        # num_labels 0 = "as many as the data has": a caller with no prepared data (synthetic batches, a plain
        # Keras fit) gets the default two
        num_labels = int(model_cfg.num_labels) or DEFAULT_NUM_LABELS
        logits = layers.Dense(num_labels, kernel_initializer=initializer(cfg), dtype="float32",
                              name="classifier")(x)
        outputs = {"logits": logits}  # (B, num_labels)
    model = keras.Model(inputs, outputs, name=f"bert_{model_cfg.size}_{model_cfg.task}")
    # What describe() and the report need, kept on the model so a built model describes itself.
    model.bert_config = cfg
    model.bert_size = model_cfg.size
    model.bert_task = model_cfg.task
    model.encoder = encoder
    model.feature_names = list(inputs)  # the batch keys the model reads (others are labels/weights)
    model.init_report = None
    if init:
        from tfbertperf.model.hf_import import load_hf_weights

        model.bert_size = "hf:" + os.path.basename(os.path.normpath(init))
        model.init_report = load_hf_weights(model, init)
    return model
