"""The user's own TFRecords, as google-research/bert's create_pretraining_data.py / run_classifier.py, the TF Model
Garden or NVIDIA's TF2 BERT scripts write them, under any names, on any backend — described from the records.

`data.uri` names them as a folder, a glob (`gs://b/wiki/*.tfrecord`, `az://c/x/*`, `/data/part-r-*`), one file or
a comma list of those; local, gs:// or az://.  A folder holding our manifest.json is a data set we prepared
(data/manifest.py); anything else is the user's, and `open_data` describes it as a manifest-like dict that the
same pipeline, storage backends and read modes consume (one code path):

  files    a folder is listed recursively; names starting with "." or "_" (_SUCCESS, .crc) and files with a
           suffix in NON_DATA_SUFFIXES (vocab.txt, README.md …) are left out; a glob's `*` and `?` stay within one
           path segment, `**` crosses them; empty files hold no records and are left out.  Sizes come from the
           storage listing.
  format   every file's first bytes: a TFRecord frame header (its length CRC checks out) or the GZIP magic
           (data.compression=auto reads either; none / gzip insist).  A file that is neither is refused.
  task     from the feature names of the first record: pretraining (input_ids, input_mask, segment_ids,
           masked_lm_positions, masked_lm_ids, masked_lm_weights, next_sentence_labels) or classification
           (input_ids, input_mask, segment_ids, label_ids; is_real_example and other extras are ignored).
  sizes    seq_len = len(input_ids), max_predictions = len(masked_lm_positions).
  vocab    data.vocab's token count, else model.init's config.json vocab_size, else the largest id seen + 1
           ("inferred" — said as such in the report).
  labels   model.num_labels, else the largest label seen + 1 (at least 2).

Records checked up front: all of them when the files total at most SCAN_ALL_BYTES, else the first MiB of
SAMPLE_FILES files spread over the list.  A record that breaks the format (a missing feature, a wrong dtype, a
length that differs from the first record's, an id outside the vocabulary, a label outside the label count) is one
line naming the file and the record's index in it.  The same checker (`RecordChecker`) names a bad record that
only turns up during training (`data_errors`).  Nothing here writes anywhere.
"""

from __future__ import annotations

import contextlib
import os
import re
from concurrent.futures import ThreadPoolExecutor

from tfbertperf.data.features import CLASSIFY_KEYS, PRETRAIN_KEYS, feature_shapes
from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import ObjectInfo, split_uri

NON_DATA_SUFFIXES = (".txt", ".json", ".md", ".rst", ".csv", ".tsv", ".yaml", ".yml", ".py", ".sh", ".crc",
                     ".log", ".html", ".png", ".jpg", ".pdf", ".index", ".meta", ".ckpt", ".h5", ".pb", ".lock",
                     ".tmp", ".part", ".vocab", ".model", ".zip", ".tar")
GLOB_CHARS = "*?["
KIND_BYTES = 4096  # read of every file's start: its kind (a GZIP member inflates a frame header from far less)
SAMPLE_BYTES = 1 << 20  # per sampled file when the data set is large
SAMPLE_FILES = 8
SCAN_ALL_BYTES = 16 << 20  # data sets up to this size are checked record by record before training
FORMATS = {"pretrain": "google-research pretraining features", "classify": "google-research classification features"}
DEFAULTS = {"task": "pretrain", "seq_len": 128, "max_predictions": 20}  # RunConfig's defaults: "not set"


def split_spec(uri: str) -> list[str]:
    """data.uri → its items (a comma list; a single URI is a list of one).  An az:// SAS query stays with the
    item it ends."""
    return [x.strip() for x in uri.split(",") if x.strip()]


def is_glob(item: str) -> bool:
    """Whether an item of data.uri is a glob (an az:// SAS query's characters do not count)."""
    base = _base(item)
    return any(c in base for c in GLOB_CHARS)


def glob_regex(pattern: str) -> re.Pattern:
    """A glob as a regex over whole paths: `*` and `?` within one segment, `**` across segments, [...] a class."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:j].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def _data_name(uri: str) -> bool:
    """Whether a listed file may be a data file (module docstring: names that are left out)."""
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    return not name.startswith((".", "_")) and not name.lower().endswith(NON_DATA_SUFFIXES)


def _base(item: str) -> str:
    return item.split("?", 1)[0] if item.startswith("az://") else item


def list_files(uri: str, backend) -> list[ObjectInfo]:
    """The data files `uri` names (module docstring), sorted, each once.  UsageError naming the item for a path
    that does not exist, a glob matching nothing, a folder without data files, or a list that leaves the
    first item's bucket/container."""
    items = split_spec(uri)
    if not items:
        raise UsageError("--set data.uri: empty")
    first = split_uri(_base(items[0]))[:2]
    found: dict[str, ObjectInfo] = {}
    for item in items:
        shown = redact_text(item)
        base = _base(item)
        if backend.name == "local":
            base = os.path.expanduser(split_uri(base)[2])
        elif split_uri(base)[:2] != first:
            raise UsageError(f"--set data.uri={redact_text(uri)}: every item of a list must be in "
                             f"{first[0]}://{first[1]} (the first item's {'bucket' if first[0] == 'gs' else 'container'})")
        if is_glob(base):
            cut = min(base.index(c) for c in GLOB_CHARS if c in base)
            prefix = base[:cut]
            if backend.name == "local":
                prefix = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else "./"
                rx = glob_regex(os.path.normpath(base) if not base.startswith("./") else base)
                hits = [o for o in backend.list(prefix) if rx.match(os.path.normpath(o.uri))]
            else:
                rx = glob_regex(base)
                hits = [o for o in backend.list(prefix) if rx.match(o.uri)]
            hits = [o for o in hits if _data_name(o.uri) and o.size > 0]
            if not hits:
                raise UsageError(f"data.uri {shown}: the glob matches no data file")
        else:
            hits = _file_or_folder(base, backend, shown)
        for o in hits:
            found.setdefault(o.uri, o)
    return sorted(found.values(), key=lambda o: o.uri)


def _file_or_folder(base: str, backend, shown: str) -> list[ObjectInfo]:
    if backend.name == "local":
        if os.path.isfile(base):
            return [ObjectInfo(base, os.path.getsize(base))] if os.path.getsize(base) else []
        if not os.path.isdir(base):
            raise UsageError(f"data.uri {shown}: no such directory or file")
        listed = backend.list(base)
    else:
        if base.rstrip("/") == base and split_uri(base)[2] and backend.exists(base):
            info = backend.stat(base)
            return [info] if info.size else []
        listed = backend.list(base.rstrip("/") + "/" if split_uri(base)[2] else base)
        if not listed:
            raise UsageError(f"data.uri {shown}: no such object or prefix")
    hits = [o for o in listed if _data_name(o.uri) and o.size > 0]
    if not hits:
        raise UsageError(f"data.uri {shown}: a folder with no data files ({len(listed)} other file(s): names "
                         f"starting with . or _, or suffixes such as .txt/.json, are not read as TFRecords)")
    return hits


# ---- reading without counting (the run's storage figures are the training's reads) -------------------------
def read_head(backend, info: ObjectInfo, nbytes: int) -> bytes:
    """The first `nbytes` of a file (all of it when smaller), uncounted in the backend's metrics."""
    n = min(int(nbytes), int(info.size))
    if n <= 0:
        return b""
    if backend.name == "local":
        with open(info.uri, "rb") as f:
            return f.read(n)
    return backend.call(info.uri, lambda: backend._read_range(info.uri, 0, n))  # noqa: SLF001 — uncounted read


def _records(data: bytes, shown: str, gzip: bool, complete: bool, on_corrupt=None) -> list[bytes]:
    """The whole records in `data` (a file's first bytes, or all of them when `complete`)."""
    from tfbertperf.storage.tfrecord import gunzip_chunks, iter_record_batches

    if gzip:
        parts = []
        try:
            for block in gunzip_chunks([data], shown):
                parts.append(block)
        except UsageError as e:
            if complete or "truncated GZIP" not in str(e):
                raise
        data = b"".join(parts)
    out: list[bytes] = []
    batches = iter_record_batches([data], shown, on_corrupt)
    if complete:
        for b in batches:
            out.extend(b)
    else:
        out.extend(next(batches, []))  # the first chunk's whole records; its tail is cut, not damaged
    return out


# ---- the records ------------------------------------------------------------------------------------------
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
                raise UsageError(f"{where}: feature '{name}' is a {kind}, expected a {_KIND[dtype]} ({fmt})")
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
            raise UsageError(f"{where}: {key} holds id {hi} ≥ the vocabulary size {self.vocab_size} "
                             f"({self.vocab_source}); the data were made with a larger vocabulary")
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


def _where(info: ObjectInfo, index: int) -> str:
    return f"shard {redact_text(info.uri)}: record {index}"


def _vocab(cfg) -> tuple[int | None, str]:
    """(vocabulary size, where it comes from) named by the run: data.vocab, else model.init's config.json."""
    d = cfg.data
    if d.vocab:
        from tfbertperf.data.vocab import load_vocab_file

        return len(load_vocab_file(d.vocab)), f"data.vocab={d.vocab}"
    if cfg.model.init:
        import json

        path = os.path.join(cfg.model.init, "config.json")
        try:
            size = json.loads(open(path, encoding="utf-8").read()).get("vocab_size")
        except (OSError, ValueError):
            size = None
        if isinstance(size, int) and size > 0:
            return size, f"model.init's config.json vocab_size"
    return None, ""


def _compression(kinds: dict[str, str | None], files: list[ObjectInfo], setting: str) -> str:
    """none | gzip for the whole set, from each file's kind and data.compression (auto | none | gzip)."""
    for info in files:
        kind, shown = kinds[info.uri], redact_text(info.uri)
        if kind is None:
            raise UsageError(f"shard {shown}: not a TFRecord file (its first bytes are no TFRecord frame header "
                             "and no GZIP magic)")
        if kind == "gzip" and setting == "none":
            raise UsageError(f"shard {shown}: GZIP-compressed (it starts with 1f 8b) but data.compression=none; "
                             "use --set data.compression=gzip (or auto)")
        if kind == "tfrecord" and setting == "gzip":
            raise UsageError(f"shard {shown}: not GZIP-compressed, but data.compression=gzip; use "
                             "--set data.compression=none (or auto)")
    seen = {kinds[i.uri] for i in files}
    if len(seen) > 1:
        gz = next(i for i in files if kinds[i.uri] == "gzip")
        plain = next(i for i in files if kinds[i.uri] == "tfrecord")
        raise UsageError(f"shard {redact_text(gz.uri)} is GZIP-compressed but shard {redact_text(plain.uri)} is not: "
                         "one data set, one compression (name them apart with a glob)")
    return "gzip" if seen == {"gzip"} else "none"


def _spread(files: list, k: int) -> list:
    """At most k items of `files`, evenly spaced, first and last included."""
    if len(files) <= k:
        return list(files)
    return [files[round(j * (len(files) - 1) / (k - 1))] for j in range(k)]


def describe(uri: str, backend, cfg, say=lambda m: None, light: bool = False) -> dict:
    """The manifest-like description of the user's TFRecords at `uri` (module docstring).

    Returns {"origin": "user", "uri", "task", "seq_len", "max_predictions", "vocab_size", "vocab_source",
    "num_labels", "labels_source", "num_examples" (None unless every record was read), "records_checked",
    "record_bytes_mean", "compression" (none|gzip), "format", "shards": [{"name", "uri", "bytes"}], "files",
    "bytes", "checked": "all records" | "a sample"}.  `light` (env: no training follows) reads each of the first
    files' start and one record only.  Raises UsageError (one line, naming the file and record) for bad data.
    """
    files = list_files(uri, backend)
    total = sum(f.size for f in files)
    full = not light and total <= SCAN_ALL_BYTES
    say(f"your data: {len(files)} file(s), {human_bytes(total)} at {redact_text(uri)}; checking "
        + ("every record" if full else "each file's start and a sample of records"))
    kind_files = files[:4] if light else files
    workers = max(1, int(getattr(cfg.data, "concurrency", 4) or 4))
    nbytes = SCAN_ALL_BYTES if full else KIND_BYTES
    with ThreadPoolExecutor(workers) as pool:
        heads = dict(zip([f.uri for f in kind_files], pool.map(lambda f: read_head(backend, f, nbytes), kind_files)))
    kinds = {u: _kind_of(h) for u, h in heads.items()}
    compression = _compression(kinds, kind_files, cfg.data.compression)
    sampled = files[:1] if light else (files if full else _spread(files, SAMPLE_FILES))
    if not full:
        with ThreadPoolExecutor(workers) as pool:
            heads.update(zip([f.uri for f in sampled], pool.map(lambda f: read_head(backend, f, SAMPLE_BYTES),
                                                                sampled)))
    skipped = [0]
    on_corrupt = (lambda _o, _w: skipped.__setitem__(0, skipped[0] + 1)) if cfg.data.skip_corrupt else None
    first_info = sampled[0]
    recs = _records(heads[first_info.uri], redact_text(first_info.uri), compression == "gzip",
                    full or first_info.size <= len(heads[first_info.uri]), on_corrupt)
    if not recs:
        raise UsageError(f"shard {redact_text(first_info.uri)}: no whole record in its first "
                         f"{len(heads[first_info.uri])} bytes")
    first_where = _where(first_info, 0)
    feats = parse_example(recs[0], first_where)
    task = detect_task(feats, first_where)
    seq_len = len(feats.get("input_ids", ("", []))[1])
    max_pred = len(feats["masked_lm_positions"][1]) if task == "pretrain" and "masked_lm_positions" in feats \
        else int(cfg.data.max_predictions)
    if cfg.pipeline.tokenize == "inline":
        raise UsageError(f"--set pipeline.tokenize=inline: needs raw text, and the data at {redact_text(uri)} are "
                         f"pre-tokenized ({FORMATS[task]}); use pipeline.tokenize=pretokenized")
    vocab_size, vocab_source = _vocab(cfg)
    num_labels = cfg.model.num_labels or None
    checker = RecordChecker(task, seq_len, max_pred, vocab_size, vocab_source, num_labels, first=first_where)
    for info in sampled:
        data = heads[info.uri]
        records = recs if info is first_info else _records(
            data, redact_text(info.uri), compression == "gzip", full or info.size <= len(data), on_corrupt)
        for i, rec in enumerate(records[:1] if light else records):
            checker.check(rec, _where(info, i))
    if checker.records == 0:
        raise UsageError(f"data.uri {redact_text(uri)}: no readable record")
    how = "every record" if full else f"a sample of {checker.records} records"
    if vocab_size is None:
        vocab_size = checker.max_id + 1
        vocab_source = f"inferred: the largest id in {how} + 1"
    labels_source = "model.num_labels" if num_labels else f"inferred: the largest label in {how} + 1"
    if task == "classify" and not num_labels:
        num_labels = max(2, checker.max_label + 1)
    fmt = FORMATS[task]
    return {
        "origin": "user", "uri": uri, "task": task, "seq_len": seq_len, "max_predictions": max_pred,
        "vocab_size": int(vocab_size), "vocab_source": vocab_source,
        "num_labels": num_labels if task == "classify" else None,
        "labels_source": labels_source if task == "classify" else None,
        "num_examples": checker.records if full else None, "records_checked": checker.records,
        "records_skipped_at_check": skipped[0],
        "record_bytes_mean": max(1, round(checker.record_bytes / checker.records)),
        "compression": compression, "format": fmt,
        "shards": [{"name": f.uri.rstrip("/").rsplit("/", 1)[-1], "uri": f.uri, "bytes": f.size} for f in files],
        "files": len(files), "bytes": total, "checked": "all records" if full else "a sample",
    }


def _kind_of(head: bytes) -> str | None:
    """head_kind, looking inside a GZIP member for the frame header it must start with."""
    from tfbertperf.storage.tfrecord import head_kind

    kind = head_kind(head)
    if kind == "gzip":
        import zlib

        try:
            inner = zlib.decompressobj(wbits=31).decompress(head)
        except zlib.error:
            return None
        return "gzip" if head_kind(inner[:12]) == "tfrecord" and (len(inner) >= 12 or not inner) else None
    return kind


# ---- the run's configuration from the data ----------------------------------------------------------------
def fit_config(cfg, manifest: dict):
    """`cfg` with what the data say: for the user's data the task, data.seq_len, data.max_predictions and
    model.num_labels (a setting left at its default takes the data's value; one set to another value is a
    UsageError naming it); for ours the label count (manifest.with_data_labels)."""
    import dataclasses

    from tfbertperf.data.manifest import with_data_labels

    if manifest.get("origin") != "user":
        return with_data_labels(cfg, manifest)
    where = f"the data at {redact_text(manifest['uri'])} ({manifest['format']})"
    model, data = cfg.model, cfg.data
    if model.task != manifest["task"]:
        if model.task != DEFAULTS["task"]:
            raise UsageError(f"--set model.task={model.task}: {where} are for {manifest['task']}; leave model.task "
                             "unset to take it from the data")
        model = dataclasses.replace(model, task=manifest["task"])
    for key in ("seq_len", "max_predictions"):
        if key == "max_predictions" and manifest["task"] != "pretrain":
            continue
        have, want = getattr(data, key), int(manifest[key])
        if have != want:
            if have != DEFAULTS[key]:
                raise UsageError(f"--set data.{key}={have}: {where} have {key} {want}; leave data.{key} unset to "
                                 "take it from the data")
            data = dataclasses.replace(data, **{key: want})
    if data.max_predictions > data.seq_len:  # classify data shorter than the pretraining default
        data = dataclasses.replace(data, max_predictions=data.seq_len)
    if manifest["task"] == "classify" and model.num_labels != manifest["num_labels"]:
        model = dataclasses.replace(model, num_labels=int(manifest["num_labels"]))
    return dataclasses.replace(cfg, model=model, data=data)


def open_data(cfg, uri: str, backend, say=lambda m: None) -> dict:
    """The data set at `uri`: ours (a folder with manifest.json: load_manifest) or the user's (describe)."""
    from tfbertperf.data.manifest import MANIFEST_FILE, load_manifest

    items = split_spec(uri)
    if len(items) == 1 and not is_glob(_base(items[0])) and _has_manifest(items[0], backend, MANIFEST_FILE):
        manifest = load_manifest(items[0], backend)
        if cfg.data.compression == "gzip":
            raise UsageError(f"--set data.compression=gzip: {redact_text(uri)} was prepared by tfbertperf, "
                             "uncompressed")
        manifest.setdefault("compression", "none")
        return manifest
    desc = describe(uri, backend, cfg, say)
    if cfg.data.verify == "sha256":
        raise UsageError(f"--set data.verify=sha256: {redact_text(uri)} has no manifest.json, so there are no "
                         "checksums to verify against (sizes come from the storage listing); leave data.verify=none")
    return desc


def _has_manifest(item: str, backend, name: str) -> bool:
    """Whether `item` is a folder (prefix) holding our manifest.json."""
    if backend.name == "local":
        p = os.path.expanduser(split_uri(item)[2])
        return os.path.isdir(p) and os.path.isfile(os.path.join(p, name))
    return backend.exists(backend.join(_base(item), name))


# ---- where the data came from: report.json `data`, the console's line -------------------------------------
def human_bytes(n: int) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} bytes"


def data_block(manifest: dict, cfg=None, checksums_verified: bool = False) -> dict:
    """report.json `data`: {"origin": "user" | "prepared", "summary", "files", "bytes", "format", "compression",
    "manifest", "checksums_verified", "uri"} (redacted URI; sizes from the storage listing or the manifest)."""
    if manifest.get("origin") == "user":
        n, size = manifest["files"], manifest["bytes"]
        extra = ""
        if manifest["task"] == "classify":
            extra = f" ({manifest['num_labels']} labels)"
        gz = ", GZIP" if manifest["compression"] == "gzip" else ""
        summary = (f"your data: {n} file{'s' if n != 1 else ''}, {human_bytes(size)}{gz}, {manifest['format']}"
                   f"{extra}, no manifest (described from the data)")
        return {"origin": "user", "summary": summary, "files": n, "bytes": size, "format": manifest["format"],
                "compression": manifest["compression"], "manifest": False, "checksums_verified": False,
                "uri": redact_text(manifest["uri"]), "task": manifest["task"], "seq_len": manifest["seq_len"],
                "vocab_size": manifest["vocab_size"], "vocab_source": manifest["vocab_source"],
                "num_labels": manifest.get("num_labels"), "labels_source": manifest.get("labels_source"),
                "records_checked": manifest["records_checked"], "checked": manifest["checked"]}
    shards = manifest.get("shards") or []
    corpus = manifest.get("corpus") or "the bundled text"
    return {"origin": "prepared", "summary": f"prepared by tfbertperf from {corpus}", "files": len(shards),
            "bytes": int(sum(int(s.get("bytes") or 0) for s in shards)),
            "format": FORMATS.get(manifest.get("task"), manifest.get("task")), "compression": "none",
            "manifest": True, "checksums_verified": bool(checksums_verified), "uri": redact_text(manifest.get("uri", ""))}


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
                    checker.check(rec, _where(info, index))
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


# ---- `prepare --out` never lands in the user's data -------------------------------------------------------
_OURS = re.compile(r"^(pretrain|classify)(-text)?-(\d{5}-of-\d{5}|chunk-\d{5}-.+)\.tfrecord$")


def foreign_tfrecords(uri: str, backend) -> list[str]:
    """The TFRecord files under the folder `uri` that tfbertperf did not write (names other than our shards'),
    checked by their first bytes; [] for a folder that does not exist, is empty, or holds only ours."""
    if backend.name == "local":
        path = os.path.expanduser(split_uri(uri)[2])
        if not os.path.isdir(path):
            return []
        listed = backend.list(path)
    else:
        listed = backend.list(_base(uri).rstrip("/") + "/")
    maybe = [o for o in listed if o.size > 0 and _data_name(o.uri)
             and not _OURS.match(o.uri.rstrip("/").rsplit("/", 1)[-1])]
    return [o.uri for o in maybe if _kind_of(read_head(backend, o, KIND_BYTES)) is not None]


def refuse_foreign(uri: str, backend, label: str = "prepare --out") -> None:
    """One line, before anything is written, when `uri` holds TFRecords that are not ours (foreign_tfrecords)."""
    found = foreign_tfrecords(uri, backend)
    if found:
        names = ", ".join(f.rstrip("/").rsplit("/", 1)[-1] for f in found[:3]) + (", …" if len(found) > 3 else "")
        raise UsageError(f"{label} {redact_text(uri)}: holds {len(found)} TFRecord file(s) tfbertperf did not write "
                         f"({names}); nothing is written there — train on them as they are with --set "
                         f"data.uri={redact_text(uri)}, or give prepare an empty folder")
