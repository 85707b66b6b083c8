"""model.init=DIR: the checks made before a run starts (a run directory is made only for a loadable checkpoint),
and the architecture build_model takes from the directory.

    cfg = preflight("models/bert-base-uncased", seq_len=128, vocab_size=30522)   # our BertConfig, or UsageError

Shapes are worked out from config.json alone (no model is built), so a wrong-shaped, missing or unexpected
tensor, a non-BERT config or an unreadable model.safetensors is one line before any TensorFlow work.
"""

from __future__ import annotations

import json
import os

from tfbertperf.errors import UsageError
from tfbertperf.model.bert import BertConfig
from tfbertperf.model.hf_import import CONFIG_FILE, canonical_name, model_dir, read_checkpoint, read_hf_config


def encoder_shapes(c: BertConfig) -> dict[str, tuple]:
    """HF name (canonical: no 'bert.') → shape of every embedding/encoder tensor a BERT of config `c` has."""
    H, I = c.hidden, c.intermediate
    out = {"embeddings.word_embeddings.weight": (c.vocab_size, H),
           "embeddings.position_embeddings.weight": (c.max_positions, H),
           "embeddings.token_type_embeddings.weight": (c.type_vocab_size, H),
           "embeddings.LayerNorm.weight": (H,), "embeddings.LayerNorm.bias": (H,)}
    for i in range(c.num_layers):
        p = f"encoder.layer.{i}."
        for name, n_out, n_in in [*((f"attention.self.{x}", H, H) for x in ("query", "key", "value")),
                                  ("attention.output.dense", H, H), ("intermediate.dense", I, H),
                                  ("output.dense", H, I)]:
            out[p + name + ".weight"], out[p + name + ".bias"] = (n_out, n_in), (n_out,)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            out[p + name + ".weight"], out[p + name + ".bias"] = (H,), (H,)
    return out


def _check_casing(d: str) -> None:
    """Our tokenizer lower-cases and strips accents (uncased BERT); a cased checkpoint's tokenizer_config.json
    says do_lower_case=false, and its vocab would be met with lower-cased text: refused rather than trained."""
    path = os.path.join(d, "tokenizer_config.json")
    try:
        with open(path, encoding="utf-8") as f:
            lower = json.load(f).get("do_lower_case", True)
    except FileNotFoundError:
        return
    except (OSError, ValueError, AttributeError) as e:
        raise UsageError(f"{path}: unreadable ({' '.join(str(e).split())})") from None
    if lower is False:
        raise UsageError(f"{path}: do_lower_case=false (a cased model); tfbertperf's tokenizer is uncased "
                         f"(lower-case + accent strip), so the data would not match this vocab")


def preflight(path, seq_len: int, vocab_size: int) -> BertConfig:
    """Check a HF BERT directory before anything is built or a run directory is made: config.json is BERT's,
    model.safetensors is readable, every embedding/encoder tensor is there in its shape and dtype, nothing
    unexpected is, and the data fit (seq_len ≤ max positions, the data's vocab ≤ the checkpoint's).  Returns
    our BertConfig; any problem is one UsageError line naming the file and the tensor."""
    d = model_dir(path)
    cfg = read_hf_config(d)
    _check_casing(d)
    tensors, files = read_checkpoint(d)
    have = {canonical_name(n): n for n in tensors}
    want = encoder_shapes(cfg)
    prefix = "bert." if any(n.startswith("bert.") for n in tensors) else ""
    for c, shape in want.items():
        if c not in have:
            raise UsageError(f"{files[0]}: missing tensor {prefix + c}")
        a = tensors[have[c]]
        if tuple(a.shape) != shape:
            raise UsageError(f"{files[0]}: tensor {have[c]} has shape {tuple(a.shape)}, expected {shape} "
                             f"(from {os.path.join(d, CONFIG_FILE)})")
        if a.dtype.kind != "f":  # BF16 is already widened to float32
            raise UsageError(f"{files[0]}: tensor {have[c]} has dtype {a.dtype}, expected floats")
    extra = [n for c, n in have.items() if c.startswith(("embeddings.", "encoder.")) and c not in want
             and c != "embeddings.position_ids"]
    if extra:
        raise UsageError(f"{files[0]}: unexpected tensor {extra[0]} (no such weight in a BERT of config.json's "
                         f"shape: {cfg.num_layers} layers)")
    if seq_len > cfg.max_positions:
        raise UsageError(f"--set data.seq_len={seq_len}: {d} has {cfg.max_positions} positions")
    if vocab_size > cfg.vocab_size:
        raise UsageError(f"{d}: the data's vocab has {vocab_size} tokens, the checkpoint {cfg.vocab_size} "
                         f"(prepare the data with --set data.vocab={os.path.join(d, 'vocab.txt')})")
    return cfg
