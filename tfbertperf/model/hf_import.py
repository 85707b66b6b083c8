"""Load a local Hugging Face BERT directory (config.json + model.safetensors, the layout of bert-base-uncased)
into our Keras BERT (tfbertperf.model.bert).  Nothing is downloaded.

    cfg = read_hf_config("models/bert-base-uncased")          # our BertConfig from config.json
    encoder, report = load_hf_encoder("models/bert-base-uncased", seq_len=128)
    report = load_hf_weights(model, "models/bert-base-uncased")  # a build_model(...) model of the same shape

Name mapping (HF name → ours; a leading "bert." is optional, as BertModel saves without it; old checkpoints'
LayerNorm.gamma/beta are read as weight/bias):
    embeddings.{word,position,token_type}_embeddings.weight  → embeddings word / position / token_type
    embeddings.LayerNorm                                      → embeddings norm
    encoder.layer.i.attention.self.{query,key,value}          → block_i attention qkv (one fused Dense: the
                                                                three kernels side by side, q|k|v)
    encoder.layer.i.attention.output.dense / .LayerNorm       → block_i attention out / attention_norm
    encoder.layer.i.intermediate.dense / output.dense         → block_i ffn up / down
    encoder.layer.i.output.LayerNorm                          → block_i ffn_norm
    pooler.dense → pooler;  cls.predictions.transform.* and cls.predictions.bias → mlm head;
    cls.seq_relationship → nsp;  classifier → classifier
Linear weights: HF stores [out, in], Keras Dense kernels are [in, out], so they are transposed.
Embedding and encoder tensors are required; the pooler and heads are loaded when both sides have them, kept at
their initial values (listed in the report) when the checkpoint lacks them, and listed as ignored when our model
lacks them.  Every problem is a UsageError with one line naming the file and the tensor.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import numpy as np

from tfbertperf.errors import UsageError
from tfbertperf.model.bert import BertConfig, BertEncoder

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
# safetensors dtype → (numpy dtype, bytes per element); BF16 is read as uint16 and widened to float32.
_DTYPES = {"F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "I64": ("<i8", 8),
           "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1), "U8": ("u1", 1), "BOOL": ("?", 1)}
# HF config key → (our BertConfig field, HF's default when the key is absent, as transformers.BertConfig has it)
_ARCH = {"vocab_size": ("vocab_size", 30522), "num_hidden_layers": ("num_layers", 12),
         "hidden_size": ("hidden", 768), "num_attention_heads": ("num_heads", 12),
         "intermediate_size": ("intermediate", 3072), "max_position_embeddings": ("max_positions", 512),
         "type_vocab_size": ("type_vocab_size", 2)}
_ERF_GELU = ("gelu", "gelu_python")  # HF names of the exact erf GELU, the only activation our blocks have


def model_dir(path) -> str:
    d = os.fspath(path)
    if not os.path.exists(d):
        raise UsageError(f"Hugging Face model directory {d}: no such directory (--set model.init=…)")
    if not os.path.isdir(d):
        raise UsageError(f"{d}: not a directory (expected a Hugging Face BERT directory: config.json + …)")
    return d


def read_hf_config(path) -> BertConfig:
    """config.json of a HF BERT directory → our BertConfig (layers, hidden, heads, intermediate, vocab, max
    positions, type vocab, LayerNorm epsilon, dropout = hidden_dropout_prob, initializer_range).  Refuses, in one
    line, a non-BERT model_type, an activation other than the erf GELU, or non-absolute position embeddings."""
    cfg_path = os.path.join(model_dir(path), CONFIG_FILE)
    try:
        with open(cfg_path, encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        raise UsageError(f"{cfg_path}: no such file (a Hugging Face BERT directory has config.json)") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{cfg_path}: unreadable ({' '.join(str(e).split())})") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{cfg_path}: expected a JSON object")
    if raw.get("model_type") != "bert":
        raise UsageError(f"{cfg_path}: model_type {raw.get('model_type')!r} is not BERT (expected 'bert')")
    act = raw.get("hidden_act", "gelu")
    if act not in _ERF_GELU:
        raise UsageError(f"{cfg_path}: hidden_act {act!r} is not supported (our BERT uses the exact erf GELU, "
                         f"HF's 'gelu')")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise UsageError(f"{cfg_path}: position_embedding_type {raw['position_embedding_type']!r} is not "
                         f"supported (only 'absolute')")
    sizes = {}
    for key, (field, default) in _ARCH.items():
        v = raw.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise UsageError(f"{cfg_path}: {key}={v!r}: expected a positive integer")
        sizes[field] = v
    if sizes["hidden"] % sizes["num_heads"]:
        raise UsageError(f"{cfg_path}: hidden_size={sizes['hidden']} does not divide by "
                         f"num_attention_heads={sizes['num_heads']}")
    try:
        floats = {f: float(raw.get(k, d)) for f, k, d in (("layer_norm_eps", "layer_norm_eps", 1e-12),
                  ("dropout", "hidden_dropout_prob", 0.1), ("initializer_range", "initializer_range", 0.02))}
    except (TypeError, ValueError) as e:
        raise UsageError(f"{cfg_path}: {' '.join(str(e).split())}") from None
    return BertConfig(**sizes, **floats)


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
    """One .safetensors file → {name: array} (memory-mapped; BF16 widened to float32).  Format: 8-byte
    little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}, then the data."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 2 or 8 + n > size:
                raise UsageError(f"{path}: not a safetensors file (header length {n}, file {size} bytes)")
            header = json.loads(f.read(n))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise UsageError(f"{path}: unreadable ({e.strerror})") from None
    except ValueError:  # JSON or UTF-8 decoding
        raise UsageError(f"{path}: not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise UsageError(f"{path}: not a safetensors file (header is not a JSON object)")
    data = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, width = _DTYPES[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"{path}: tensor {name}: bad header entry {info!r:.80}") from None
        if end - begin != int(np.prod(shape)) * width or not 0 <= begin <= end <= size - 8 - n:
            raise UsageError(f"{path}: tensor {name}: data_offsets {[begin, end]} do not fit shape {shape} "
                             f"{info['dtype']} in a {size}-byte file (truncated?)")
        arr = data[8 + n + begin : 8 + n + end].view(dtype).reshape(shape)
        out[name] = (arr.astype(np.uint32) << 16).view(np.float32) if info["dtype"] == "BF16" else arr
    return out


def read_checkpoint(d: str) -> tuple[dict[str, np.ndarray], list[str]]:
    # One file: the largest BERT (340M parameters, 1.3 GB in float32) is far below HF's default shard size.
    single = os.path.join(d, WEIGHTS_FILE)
    if os.path.isfile(single):
        return _read_safetensors(single), [single]
    other = [n for n in ("pytorch_model.bin", "tf_model.h5") if os.path.isfile(os.path.join(d, n))]
    hint = f" ({other[0]} is not read: save the model with safe_serialization=True)" if other else ""
    raise UsageError(f"{d}: no {WEIGHTS_FILE}{hint}")


def canonical_name(name: str) -> str:
    """HF name → the form the map uses: no 'bert.' prefix; LayerNorm gamma/beta → weight/bias."""
    name = name[5:] if name.startswith("bert.") else name
    return re.sub(r"(LayerNorm)\.gamma$", r"\1.weight", re.sub(r"(LayerNorm)\.beta$", r"\1.bias", name))


def _dense(prefix: str, layer) -> list:  # Linear [out, in] → Dense kernel [in, out]
    return [([prefix + ".weight"], layer.kernel, "T"), ([prefix + ".bias"], layer.bias, "copy")]


def _norm(prefix: str, layer) -> list:
    return [([prefix + ".weight"], layer.gamma, "copy"), ([prefix + ".bias"], layer.beta, "copy")]


def _plan(enc: BertEncoder, heads: dict) -> dict[str, list]:
    """group → [(HF names, our variable, rule)]; rule: copy | T (transpose) | qkv (transpose, concat q|k|v)."""
    e = enc.embeddings
    body = [(["embeddings.word_embeddings.weight"], e.word.embeddings, "copy"),
            (["embeddings.position_embeddings.weight"], e.position, "copy"),
            (["embeddings.token_type_embeddings.weight"], e.token_type.embeddings, "copy"),
            *_norm("embeddings.LayerNorm", e.norm)]
    for i, b in enumerate(enc.blocks):
        p = f"encoder.layer.{i}."
        body += [([p + f"attention.self.{x}.weight" for x in ("query", "key", "value")], b.attn.qkv.kernel, "qkv"),
                 ([p + f"attention.self.{x}.bias" for x in ("query", "key", "value")], b.attn.qkv.bias, "qkv"),
                 *_dense(p + "attention.output.dense", b.attn.out),
                 *_norm(p + "attention.output.LayerNorm", b.attn_norm),
                 *_dense(p + "intermediate.dense", b.ffn.up), *_dense(p + "output.dense", b.ffn.down),
                 *_norm(p + "output.LayerNorm", b.ffn_norm)]
    groups = {"encoder": body, "pooler": _dense("pooler.dense", enc.pooler)}
    if "mlm" in heads:
        m = heads["mlm"]
        groups["mlm"] = [*_dense("cls.predictions.transform.dense", m.transform),
                         *_norm("cls.predictions.transform.LayerNorm", m.norm),
                         (["cls.predictions.bias"], m.output_bias, "copy")]
    for name, prefix in (("nsp", "cls.seq_relationship"), ("classifier", "classifier")):
        if name in heads:
            groups[name] = _dense(prefix, heads[name])
    return groups


def _hf_shape(var, rule: str, parts: int) -> tuple:
    shape = tuple(var.shape)
    if rule == "qkv":  # kernel (H, 3H) ← three [H, H]; bias (3H,) ← three (H,)
        return (shape[1] // parts, shape[0]) if len(shape) == 2 else (shape[0] // parts,)
    return shape[::-1] if rule == "T" else shape


def _parts(model) -> tuple[BertEncoder, dict]:
    if isinstance(model, BertEncoder):
        return model, {}
    enc = getattr(model, "encoder", None)
    if not isinstance(enc, BertEncoder):
        enc = next((l for l in getattr(model, "layers", []) if isinstance(l, BertEncoder)), None)
    if enc is None or not enc.weights:
        raise UsageError(f"load_hf_weights: {type(model).__name__} holds no built BertEncoder")
    return enc, {l.name: l for l in model.layers if l.name in ("mlm", "nsp", "classifier")}


def load_hf_weights(model, path) -> dict:
    """Copy a HF BERT checkpoint into `model` (a build_model model or a built BertEncoder) by name.

    Checks first, assigns after, so a failed load changes nothing.  Returns {"source", "files",
    "tensors_in_checkpoint", "tensors_loaded", "variables_set", "parameters_loaded" (elements),
    "ignored" {HF name: why}, "not_in_checkpoint" [our variable paths kept at their initial values],
    "config" (our BertConfig fields)}."""
    d = model_dir(path)
    cfg_path = os.path.join(d, CONFIG_FILE)
    hf_cfg = read_hf_config(d)
    enc, heads = _parts(model)
    for key, (field, _) in {**_ARCH, "layer_norm_eps": ("layer_norm_eps", None)}.items():
        if getattr(hf_cfg, field) != getattr(enc.cfg, field):
            raise UsageError(f"{cfg_path}: {key}={getattr(hf_cfg, field)} but the model has "
                             f"{field}={getattr(enc.cfg, field)}")
    tensors, files = read_checkpoint(d)
    by_canon: dict[str, str] = {}
    for name in tensors:
        if canonical_name(name) in by_canon:
            raise UsageError(f"{files[0]}: tensor {name} appears twice (as {by_canon[canonical_name(name)]})")
        by_canon[canonical_name(name)] = name
    prefix = "bert." if any(n.startswith("bert.") for n in tensors) else ""

    def shown(c: str) -> str:  # a missing tensor is named as the file would name it
        return c if c.startswith(("cls.", "classifier")) else prefix + c

    groups, assign, used, kept = _plan(enc, heads), [], set(), []
    for group, entries in groups.items():
        names = [c for hf_names, _, _ in entries for c in hf_names]
        present = [c for c in names if c in by_canon]
        if group == "mlm" and "cls.predictions.bias" not in by_canon and "cls.predictions.decoder.bias" in by_canon:
            by_canon["cls.predictions.bias"] = by_canon["cls.predictions.decoder.bias"]  # HF ties the two
            used.add("cls.predictions.decoder.bias")
            present.append("cls.predictions.bias")
        if group != "encoder" and not present:
            kept += [var.path for _, var, _ in entries]
            continue
        missing = [c for c in names if c not in by_canon]
        if missing:
            more = f" (+{len(missing) - 3} more)" if len(missing) > 3 else ""
            raise UsageError(f"{files[0]}: missing tensor {', '.join(shown(c) for c in missing[:3])}{more}")
        for hf_names, var, rule in entries:
            want = _hf_shape(var, rule, len(hf_names))
            arrays = []
            for c in hf_names:
                a = tensors[by_canon[c]]
                if tuple(a.shape) != want:
                    raise UsageError(f"{files[0]}: tensor {by_canon[c]} has shape {tuple(a.shape)}, expected "
                                     f"{want} (for {var.path})")
                if a.dtype.kind != "f":
                    raise UsageError(f"{files[0]}: tensor {by_canon[c]} has dtype {a.dtype}, expected floats")
                arrays.append(a.T if rule in ("T", "qkv") else a)
                used.add(c)
            assign.append((var, arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=-1)))

    ignored = {}
    word = tensors[by_canon["embeddings.word_embeddings.weight"]]
    for c, name in by_canon.items():
        if c in used:
            continue
        if c.startswith(("embeddings.", "encoder.")) and c != "embeddings.position_ids":
            raise UsageError(f"{files[0]}: unexpected tensor {name} (no such weight in a BERT of config.json's "
                             f"shape: {hf_cfg.num_layers} layers)")
        if c == "embeddings.position_ids":
            ignored[name] = "buffer (position ids), not a weight"
        elif c == "cls.predictions.decoder.weight":
            tied = tensors[name].shape == word.shape and np.array_equal(tensors[name], word)
            ignored[name] = ("tied: equals the word embeddings, which our MLM decoder uses" if tied else
                             "differs from the word embeddings; our MLM decoder is tied to them, so not loaded")
        elif c == "cls.predictions.decoder.bias":
            ignored[name] = "tied: same as cls.predictions.bias"
        else:
            ignored[name] = "no matching head in our model"
    for var, value in assign:
        var.assign(np.ascontiguousarray(value, dtype=var.dtype))
    return {"source": d, "files": [os.path.basename(f) for f in files], "tensors_in_checkpoint": len(tensors),
            "tensors_loaded": len({by_canon[c] for c in used}), "variables_set": len(assign),
            "parameters_loaded": int(sum(int(np.prod(v.shape)) for v, _ in assign)),
            "ignored": ignored, "not_in_checkpoint": kept, "config": dataclasses.asdict(hf_cfg)}


def load_hf_encoder(path, seq_len: int = 128) -> tuple[BertEncoder, dict]:
    """A BertEncoder (encoder + pooler) of the directory's architecture, built for `seq_len` tokens, with its
    weights loaded → (encoder, load report)."""
    import keras

    cfg = read_hf_config(path)
    if seq_len > cfg.max_positions:
        raise UsageError(f"seq_len {seq_len}: the checkpoint has {cfg.max_positions} positions")
    enc = BertEncoder(cfg, name="bert")
    ids = keras.Input(shape=(seq_len,), dtype="int32")
    enc(ids, ids, ids)  # builds the weights symbolically; no batch is run
    return enc, load_hf_weights(enc, path)
