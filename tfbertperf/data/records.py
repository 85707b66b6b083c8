"""What a BERT TFRecord must hold, checked record by record: the google-research/bert layouts (features.py), the
first record's lengths, ids below the vocabulary size, masked positions inside the sequence, labels below the
label count.  `RecordChecker` serves the description of the user's data before training (data/described.py) and
`data_errors`, which names the record behind TensorFlow's complaint met during training.
"""

from __future__ import annotations

import contextlib
import re

from tfbertperf.data.features import CLASSIFY_KEYS, PRETRAIN_KEYS, feature_shapes
from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import ObjectInfo

FORMATS = {"pretrain": "google-research pretraining features", "classify": "google-research classification features"}


def parse_example(record: bytes, where: str) -> dict[str, tuple[str, list]]:
    """{feature name: (kind, values)} of a serialized tf.train.Example; kind int64_list | float_list | bytes_list."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.example import example_pb2

    try:
        ex = example_pb2.Example.FromString(record)
    except DecodeError as e:
        raise UsageError(f"{where} is not a tf.train.Example ({e})") from None
    out = {}
    for name, feat in ex.features.feature.items():
        kind = feat.WhichOneof("kind") or "empty"
        out[name] = (kind, list(getattr(feat, kind).value) if kind != "empty" else [])
    return out


_KIND = {"int64": "int64_list", "float32": "float_list"}


def detect_task(features: dict, where: str) -> str:
    """pretrain | classify from a record's feature names; UsageError naming what is there otherwise."""
    names = set(features)
    if {"text_a", "a_range"} <= names:
        raise UsageError(f"{where} holds raw text (text_a, a_range): tfbertperf's shards for pipeline.tokenize="
                         "inline, which need their manifest.json; point data.uri at the folder prepare wrote")
    if names & {"masked_lm_positions", "masked_lm_ids", "masked_lm_weights", "next_sentence_labels"}:
        return "pretrain"
    if "label_ids" in names:
        return "classify"
    have = ", ".join(sorted(names)[:12]) or "none"
    if "input_ids" not in names:
        raise UsageError(f"{where} has no feature 'input_ids' (features: {have}); expected BERT features as "
                         f"google-research/bert writes them: pretraining ({', '.join(PRETRAIN_KEYS)}) or "
                         f"classification ({', '.join(CLASSIFY_KEYS)})")
    raise UsageError(f"{where} has input_ids but neither masked_lm_positions (pretraining) nor label_ids "
                     f"(classification) (features: {have})")


class RecordChecker:
    """Holds a record to the layout of the first one: the task's features, their dtype and length, ids below
    the vocabulary size, masked positions inside the sequence, labels below the label count (None = not known:
    the largest seen is kept instead).  `check(record, where)` raises the one-line UsageError naming `where`."""

    def __init__(self, task: str, seq_len: int, max_predictions: int, vocab_size: int | None = None,
                 vocab_source: str = "", num_labels: int | None = None, first: str = "record 0") -> None:
        self.task, self.seq_len, self.max_predictions = task, int(seq_len), int(max_predictions)
        self.vocab_size, self.vocab_source = vocab_size, vocab_source
        self.num_labels, self.first = num_labels, first
        self.shapes = feature_shapes(task, self.seq_len, self.max_predictions)
        self.max_id = -1
        self.max_label = -1
        self.records = 0
        self.record_bytes = 0

    def check(self, record: bytes, where: str) -> None:
        feats = parse_example(record, where)
        fmt = FORMATS[self.task]
        for name, (dtype, shape) in self.shapes.items():
            if name not in feats:
                raise UsageError(f"{where} has no feature '{name}' ({fmt} need {', '.join(self.shapes)})")
            kind, values = feats[name]
            if kind != _KIND[dtype]:
                raise UsageError(f"{where}: feature '{name}' is a {kind}, expected {_KIND[dtype]} ({fmt})")
            want = shape[0] if shape else 1
            if len(values) != want:
                what = {"input_ids": "data.seq_len", "masked_lm_positions": "data.max_predictions"}.get(
                    name, "its length")
                raise UsageError(f"{where}: '{name}' has {len(values)} values, {self.first} has {want} "
                                 f"(the same {what} in every record, padded as google-research/bert pads)")
        ids = feats["input_ids"][1] + (feats["masked_lm_ids"][1] if self.task == "pretrain" else [])
        lo, hi = min(ids), max(ids)
        if lo < 0:
            raise UsageError(f"{where}: a negative token id ({lo})")
        if self.vocab_size is not None and hi >= self.vocab_size:
            key = "input_ids" if hi in feats["input_ids"][1] else "masked_lm_ids"
            fix = ("name the vocabulary the data were made with: --set data.vocab=PATH/vocab.txt"
                   if self.vocab_source.startswith("inferred") else "the data were made with a larger vocabulary")
            raise UsageError(f"{where}: {key} holds id {hi} ≥ the vocabulary size {self.vocab_size} "
                             f"({self.vocab_source}); {fix}")
        self.max_id = max(self.max_id, hi)
        if self.task == "pretrain":
            pos = feats["masked_lm_positions"][1]
            if min(pos) < 0 or max(pos) >= self.seq_len:
                bad = min(pos) if min(pos) < 0 else max(pos)
                raise UsageError(f"{where}: masked_lm_positions holds {bad}, outside the {self.seq_len} tokens "
                                 "of input_ids")
            nsp = feats["next_sentence_labels"][1][0]
            if nsp not in (0, 1):
                raise UsageError(f"{where}: next_sentence_labels is {nsp}, expected 0 or 1")
        else:
            label = feats["label_ids"][1][0]
            if label < 0 or (self.num_labels is not None and label >= self.num_labels):
                raise UsageError(f"{where}: label_ids is {label}, outside the {self.num_labels} labels "
                                 f"(model.num_labels); leave model.num_labels unset to count them from the data")
            self.max_label = max(self.max_label, label)
        self.records += 1
        self.record_bytes += len(record)


def where(info: ObjectInfo, index: int) -> str:
    return f"shard {redact_text(info.uri)}: record {index}"



# ---- a bad record met during training -> one line naming it -----------------------------------------------
_TF_RECORD_ERRORS = (
    r"is required but could not be found", r"Data types don't match", r"values != expected",
    r"Can't parse serialized Example", r"is not in \[0, \d+\)", r"Received a label value of",
    r"Could not parse example input",
)


def find_bad_record(manifest: dict, backend, cfg, budget_bytes: int = 2 << 30) -> str | None:
    """The one-line problem of the first record (in file order) that breaks the data set's layout, reading at
    most `budget_bytes` (uncounted); None when none is found in that much."""
    from tfbertperf.storage.integrity import raw_chunks
    from tfbertperf.storage.tfrecord import gunzip_chunks, iter_record_batches

    checker = RecordChecker(manifest["task"], manifest["seq_len"], manifest["max_predictions"],
                            manifest.get("vocab_size"), manifest.get("vocab_source") or "the data set's vocabulary",
                            manifest.get("num_labels"))
    seen = 0
    for s in manifest.get("shards") or []:
        uri = s.get("uri") or backend.join(manifest["uri"], s["name"])
        info = ObjectInfo(uri, int(s.get("bytes") or 0))
        chunks = raw_chunks(backend, uri)
        if manifest.get("compression") == "gzip":
            chunks = gunzip_chunks(chunks, redact_text(uri))
        index = 0
        skip = (lambda _o, _w: None) if cfg.data.skip_corrupt else None
        try:
            for records in iter_record_batches(chunks, redact_text(uri), skip):
                for rec in records:
                    checker.check(rec, where(info, index))
                    index += 1
        except UsageError as e:
            return str(e)
        seen += info.size
        if seen >= budget_bytes:
            return None
    return None


@contextlib.contextmanager
def data_errors(manifest: dict, backend, cfg):
    """Re-raise TensorFlow's complaint about a record (a missing feature, a dtype, a length, an id outside the
    embedding, a label outside the classifier) as one line naming the file and record (find_bad_record)."""
    try:
        yield
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 — translated when TF names a record problem, re-raised otherwise
        msg = getattr(e, "message", None) or str(e)
        if "tensorflow" not in type(e).__module__ or not any(re.search(p, msg) for p in _TF_RECORD_ERRORS):
            raise
        problem = find_bad_record(manifest, backend, cfg)
        if problem is None:
            from tfbertperf.storage.integrity import _first_line

            problem = (f"data {redact_text(manifest.get('uri', '?'))}: TensorFlow could not use a record "
                       f"({_first_line(msg)})")
        raise UsageError(problem) from None
