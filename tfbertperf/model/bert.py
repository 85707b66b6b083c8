"""BERT in Keras 3, readable top to bottom (after google-research/bert and Devlin et al. 2018).

Reading order: the config and named sizes (data, not code) → embeddings → self-attention → feed-forward →
transformer block (post-LN, as in the paper) → encoder + pooler → the two task heads; model/build.py puts them together
(`build_model`).

Shapes are commented where they change: B = batch, T = seq_len, H = hidden, nh = heads, hs = H / nh,
P = max_predictions (masked positions per example), V = vocab size.

With a 30,522-token vocabulary the encoder + pooler has exactly 109,482,240 parameters for `base` and
335,141,888 for `large` — the published BERT-Base/Large counts (tests/test_model.py pins both).
"""

from __future__ import annotations

from dataclasses import dataclass

import keras
from keras import layers, ops

from tfbertperf.model.lowmem import SeededDropout, gelu_exact, recomputed


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522  # WordPiece vocabulary (from the data's vocab.txt)
    num_layers: int = 2  # transformer blocks (L)
    hidden: int = 128  # model width (H)
    num_heads: int = 2  # attention heads (A); H must divide by it
    intermediate: int = 512  # feed-forward width, 4H in every published size
    max_positions: int = 512  # learned position embeddings
    type_vocab_size: int = 2  # segment (token type) ids: sentence A / sentence B
    dropout: float = 0.1  # hidden and attention-probability dropout
    layer_norm_eps: float = 1e-12  # as in the original TF implementation
    initializer_range: float = 0.02  # stddev of the truncated-normal weight init


# Named sizes (L, H, A) of the BERT family (Turc et al. 2019 for the small ones); FFN = 4H everywhere.
SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


def config_for(size: str, vocab_size: int, dropout: float = 0.1) -> BertConfig:
    """The BertConfig of a named size ('tiny' … 'large') for a vocabulary of `vocab_size` tokens."""
    if size not in SIZES:
        from tfbertperf.errors import UsageError

        raise UsageError(f"--set model.size={size!r}: expected one of {', '.join(SIZES)}")
    num_layers, hidden, heads = SIZES[size]
    return BertConfig(
        vocab_size=vocab_size, num_layers=num_layers, hidden=hidden, num_heads=heads,
        intermediate=4 * hidden, dropout=dropout,
    )


def initializer(cfg: BertConfig):
    return keras.initializers.TruncatedNormal(stddev=cfg.initializer_range)


def gelu(x):
    # BERT's GELU is the exact erf form, not the tanh approximation; differentiated from x alone (model/lowmem.py).
    return gelu_exact(x)


# ---- embeddings ------------------------------------------------------------------------------------------


class Embeddings(layers.Layer):
    """word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: BertConfig, **kw):
        super().__init__(**kw)
        self.cfg = cfg
        self.word = layers.Embedding(cfg.vocab_size, cfg.hidden, embeddings_initializer=initializer(cfg), name="word")
        self.token_type = layers.Embedding(
            cfg.type_vocab_size, cfg.hidden, embeddings_initializer=initializer(cfg), name="token_type"
        )
        self.norm = layers.LayerNormalization(epsilon=cfg.layer_norm_eps, name="norm")
        self.drop = layers.Dropout(cfg.dropout)

    def build(self, input_shape):
        # Positions are a plain weight (not an Embedding lookup): the first T rows are sliced, no gather needed.
        self.position = self.add_weight(
            shape=(self.cfg.max_positions, self.cfg.hidden), initializer=initializer(self.cfg), name="position"
        )

    def call(self, input_ids, segment_ids, training=None):
        seq_len = ops.shape(input_ids)[1]
        x = self.word(input_ids)  # (B, T, H)
        x = x + self.token_type(segment_ids)  # (B, T, H)
        x = x + ops.cast(self.position[None, :seq_len, :], x.dtype)  # (1, T, H) broadcast over B
        return self.drop(self.norm(x), training=training)


# ---- transformer block -----------------------------------------------------------------------------------


class SelfAttention(layers.Layer):
    """Multi-head scaled dot-product self-attention with a padding mask; one fused Q/K/V projection."""

    def __init__(self, cfg: BertConfig, **kw):
        super().__init__(**kw)
        assert cfg.hidden % cfg.num_heads == 0, "hidden must divide by num_heads"
        self.nh, self.hs = cfg.num_heads, cfg.hidden // cfg.num_heads
        # One (H, 3H) matmul instead of three (H, H): same parameters as BERT's separate q/k/v, fewer kernels.
        self.qkv = layers.Dense(3 * cfg.hidden, kernel_initializer=initializer(cfg), name="qkv")
        self.out = layers.Dense(cfg.hidden, kernel_initializer=initializer(cfg), name="out")
        self.attn_drop = SeededDropout(cfg.dropout)

    def call(self, x, mask_bias, training=None, seed=None):
        B, T = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(self.qkv(x), (B, T, 3, self.nh, self.hs))  # (B, T, 3, nh, hs)
        # One transpose to (3, B, nh, T, hs), then unstack: its gradient is a cheap stack, unlike slicing's.
        q, k, v = ops.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)), 3, axis=0)  # each (B, nh, T, hs)
        q = q * ops.cast(1.0 / self.hs**0.5, q.dtype)  # scale the smaller tensor, not the (T, T) scores
        scores = ops.matmul(q, ops.swapaxes(k, -1, -2))  # (B, nh, T, T)
        scores = scores + ops.cast(mask_bias, scores.dtype)  # (B, 1, 1, T): -1e4 on padding keys
        if scores.dtype != "float32":
            # fp16/bf16 softmax over long rows loses precision; do it in float32 like the reference models.
            probs = ops.cast(ops.softmax(ops.cast(scores, "float32"), axis=-1), x.dtype)
        else:
            probs = ops.softmax(scores, axis=-1)
        probs = self.attn_drop(probs, training=training, seed=seed)
        y = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))  # (B, nh, T, hs) → (B, T, nh, hs)
        return self.out(ops.reshape(y, (B, T, self.nh * self.hs)))  # (B, T, H)


class FeedForward(layers.Layer):
    """Position-wise MLP: H → 4H (GELU) → H."""

    def __init__(self, cfg: BertConfig, **kw):
        super().__init__(**kw)
        self.up = layers.Dense(cfg.intermediate, activation=gelu, kernel_initializer=initializer(cfg), name="up")
        self.down = layers.Dense(cfg.hidden, kernel_initializer=initializer(cfg), name="down")

    def call(self, x):
        return self.down(self.up(x))  # (B, T, 4H) → (B, T, H)


class Block(layers.Layer):
    """Post-LN transformer block (BERT): x = LN(x + attn(x)); x = LN(x + ffn(x)); `remat`: see model/lowmem.py."""

    def __init__(self, cfg: BertConfig, remat: bool = False, **kw):
        super().__init__(**kw)
        self.remat = remat
        self.attn = SelfAttention(cfg, name="attention")
        self.attn_norm = layers.LayerNormalization(epsilon=cfg.layer_norm_eps, name="attention_norm")
        self.ffn = FeedForward(cfg, name="ffn")
        self.ffn_norm = layers.LayerNormalization(epsilon=cfg.layer_norm_eps, name="ffn_norm")
        self.drop = SeededDropout(cfg.dropout)

    def call(self, x, mask_bias, training=None):
        if not (self.remat and training):
            return self._body(x, mask_bias, training, (None, None, None))
        seeds = (self.attn.attn_drop.draw(), self.drop.draw(), self.drop.draw())  # drawn once, reused on recompute
        return recomputed(lambda x, m: self._body(x, m, training, seeds))(x, mask_bias)

    def _body(self, x, mask_bias, training, seeds):
        a = self.attn(x, mask_bias, training=training, seed=seeds[0])
        x = self.attn_norm(x + self.drop(a, training=training, seed=seeds[1]))
        return self.ffn_norm(x + self.drop(self.ffn(x), training=training, seed=seeds[2]))  # (B, T, H)


# ---- encoder + pooler ------------------------------------------------------------------------------------


class BertEncoder(layers.Layer):
    """Embeddings → L blocks → (sequence output (B, T, H), pooled [CLS] output (B, H))."""

    def __init__(self, cfg: BertConfig, remat: bool = False, **kw):
        super().__init__(**kw)
        self.cfg = cfg
        self.embeddings = Embeddings(cfg, name="embeddings")
        self.blocks = [Block(cfg, remat=remat, name=f"block_{i}") for i in range(cfg.num_layers)]
        self.pooler = layers.Dense(cfg.hidden, activation="tanh", kernel_initializer=initializer(cfg), name="pooler")

    def call(self, input_ids, input_mask, segment_ids, training=None):
        x = self.embeddings(input_ids, segment_ids, training=training)  # (B, T, H)
        # Padding keys get -1e4 before the softmax (representable in fp16/bf16, unlike -inf arithmetic).
        mask_bias = (1.0 - ops.cast(input_mask, x.dtype))[:, None, None, :] * -10000.0  # (B, 1, 1, T)
        for block in self.blocks:
            x = block(x, mask_bias, training=training)
        pooled = self.pooler(x[:, 0, :])  # (B, H): tanh(dense([CLS]))
        return x, pooled


# ---- heads -----------------------------------------------------------------------------------------------


class MaskedLMHead(layers.Layer):
    """dense + GELU + LN on the masked positions, then logits against the (tied) word embeddings + a bias."""

    def __init__(self, cfg: BertConfig, word_embeddings: layers.Embedding, **kw):
        super().__init__(**kw)
        self.word_embeddings = word_embeddings  # tied: the decoder matrix is the input embedding matrix
        self.transform = layers.Dense(cfg.hidden, activation=gelu, kernel_initializer=initializer(cfg), name="transform")
        self.norm = layers.LayerNormalization(epsilon=cfg.layer_norm_eps, name="norm")
        self.vocab_size = cfg.vocab_size

    def build(self, input_shape):
        self.output_bias = self.add_weight(shape=(self.vocab_size,), initializer="zeros", name="output_bias")

    def call(self, sequence_output, positions):
        # Gather first: only P of the T positions need the (H × V) decoder, the expensive part of pretraining.
        h = ops.take_along_axis(sequence_output, ops.cast(positions, "int32")[:, :, None], axis=1)  # (B, P, H)
        h = self.norm(self.transform(h))  # (B, P, H)
        table = ops.cast(self.word_embeddings.embeddings, h.dtype)  # (V, H)
        logits = ops.einsum("bph,vh->bpv", h, table) + ops.cast(self.output_bias, h.dtype)  # (B, P, V)
        return ops.cast(logits, "float32")  # losses in float32 under mixed precision


def build_encoder(size: str, vocab_size: int, seq_len: int = 128) -> BertEncoder:
    """Just the encoder + pooler (what the published parameter counts cover), built symbolically."""
    enc = BertEncoder(config_for(size, vocab_size), name="bert")
    ids = keras.Input(shape=(seq_len,), dtype="int32")
    enc(ids, ids, ids)
    return enc


def encoder_parameters(cfg: BertConfig) -> int:
    """Closed-form parameter count of encoder + pooler (checks the built model; no weights needed)."""
    H, I = cfg.hidden, cfg.intermediate
    embeddings = (cfg.vocab_size + cfg.max_positions + cfg.type_vocab_size) * H + 2 * H  # tables + LN
    block = (H * 3 * H + 3 * H) + (H * H + H) + 2 * H + (H * I + I) + (I * H + H) + 2 * H
    pooler = H * H + H
    return embeddings + cfg.num_layers * block + pooler


def head_parameters(cfg: BertConfig, task: str, num_labels: int = 2) -> int:
    """Closed-form parameter count of a task head (the MLM decoder matrix is tied, so not counted again)."""
    H = cfg.hidden
    if task == "pretrain":
        return (H * H + H) + 2 * H + cfg.vocab_size + (H * 2 + 2)  # transform, LN, output bias, NSP
    return H * num_labels + num_labels


def describe(model_or_cfg, vocab_size: int | None = None) -> dict:
    """What the report's `model` block holds: {"size","task","parameters","layers","hidden","heads"}.

    `parameters` = every trainable weight of the model incl. its task head (tied MLM decoder counted once).
    Accepts a model from model/build.py's build_model, or a ModelConfig (+ `vocab_size`, default 30,522) for a closed-form count.
    """
    if isinstance(model_or_cfg, keras.Model):
        cfg = model_or_cfg.bert_config
        size, task = model_or_cfg.bert_size, model_or_cfg.bert_task
        params = int(model_or_cfg.count_params())
    else:
        size, task = model_or_cfg.size, model_or_cfg.task
        cfg = config_for(size, vocab_size or 30522)
        params = encoder_parameters(cfg) + head_parameters(cfg, task, getattr(model_or_cfg, "num_labels", 0) or 2)
    out = {
        "size": size, "task": task, "parameters": params,
        "layers": cfg.num_layers, "hidden": cfg.hidden, "heads": cfg.num_heads,
    }
    init = getattr(model_or_cfg, "init_report", None)
    if init:  # model.init: what was loaded from the HF directory, and what was not
        out["init"] = {k: init[k] for k in ("source", "tensors_loaded", "parameters_loaded", "ignored",
                                            "not_in_checkpoint")}
    return out


def parameter_line(info: dict) -> str:
    """'number of parameters: 4.39M (tiny, pretrain: L2/H128/A2)' — what a user wants to check first."""
    line = (f"number of parameters: {info['parameters'] / 1e6:.2f}M "
            f"({info['size']}, {info['task']}: L{info['layers']}/H{info['hidden']}/A{info['heads']})")
    init = info.get("init")
    if init:
        kept = init["not_in_checkpoint"]
        line += (f"; {init['tensors_loaded']} tensors ({init['parameters_loaded'] / 1e6:.2f}M values) loaded from "
                 f"{init['source']}" + (f"; kept at init (not in checkpoint): {', '.join(kept)}" if kept else "")
                 + (f"; ignored: {', '.join(init['ignored'])}" if init["ignored"] else ""))
    return line


__all__ = [
    "BertConfig", "SIZES", "config_for", "initializer", "build_encoder", "describe", "encoder_parameters",
    "head_parameters", "parameter_line",
]
