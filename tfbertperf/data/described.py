"""The user's own TFRecords, as google-research/bert's create_pretraining_data.py / run_classifier.py, the TF Model
Garden or NVIDIA's TF2 BERT scripts write them, under any names, on any backend — described from the records.

`data.uri` names them as a folder, a glob (`gs://b/wiki/*.tfrecord`, `az://c/x/*`, `/data/part-r-*`), one file or
a comma list of those; local, gs:// or az:// (storage/listing.py: which files, their kind).  A folder holding our
manifest.json is a data set we prepared (data/manifest.py); anything else is the user's, and `open_data`
describes it as a manifest-like dict that the same pipeline, storage backends and read modes consume (one path):

  format   every file's first bytes: a TFRecord frame header (its length CRC checks out) or the GZIP magic
           (data.compression=auto reads either; none / gzip insist).  A file that is neither is refused.
  task     from the feature names of the first record: pretraining (input_ids, input_mask, segment_ids,
           masked_lm_positions, masked_lm_ids, masked_lm_weights, next_sentence_labels) or classification
           (input_ids, input_mask, segment_ids, label_ids; is_real_example and other extras are ignored).
  sizes    seq_len = len(input_ids), max_predictions = len(masked_lm_positions).
  vocab    data.vocab's token count, else model.init's config.json vocab_size, else the largest id seen + 1
           ("inferred" — said as such in the report).
  labels   model.num_labels, else the largest label seen + 1 (at least 2).

Records checked up front (data/records.py RecordChecker): all of them when the files total at most
SCAN_ALL_BYTES, else the first SAMPLE_BYTES of SAMPLE_FILES files spread over the list.  A record that breaks the
format is one line naming the file and the record's index in it.  Nothing here writes anywhere.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from tfbertperf.data.records import FORMATS, RecordChecker, detect_task, parse_example, where
from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import ObjectInfo, split_uri
from tfbertperf.storage.listing import (KIND_BYTES, base_uri, file_kind, human_bytes, is_glob, list_files, read_head,
                                        records_in, split_spec)

SAMPLE_BYTES = 1 << 20  # per sampled file when the data set is large
SAMPLE_FILES = 8
SCAN_ALL_BYTES = 16 << 20  # data sets up to this size are checked record by record before training
DEFAULTS = {"task": "pretrain", "seq_len": 128, "max_predictions": 20}  # RunConfig's defaults: "not set"


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
    kinds = {u: file_kind(h) for u, h in heads.items()}
    compression = _compression(kinds, kind_files, cfg.data.compression)
    sampled = files[:1] if light else (files if full else _spread(files, SAMPLE_FILES))
    if not full:
        with ThreadPoolExecutor(workers) as pool:
            heads.update(zip([f.uri for f in sampled], pool.map(lambda f: read_head(backend, f, SAMPLE_BYTES),
                                                                sampled)))
    skipped = [0]
    on_corrupt = (lambda _o, _w: skipped.__setitem__(0, skipped[0] + 1)) if cfg.data.skip_corrupt else None
    first_info = sampled[0]
    recs = records_in(heads[first_info.uri], redact_text(first_info.uri), compression == "gzip",
                    full or first_info.size <= len(heads[first_info.uri]), on_corrupt)
    if not recs:
        raise UsageError(f"shard {redact_text(first_info.uri)}: no whole record in its first "
                         f"{len(heads[first_info.uri])} bytes")
    first_where = where(first_info, 0)
    feats = parse_example(recs[0], first_where)
    task = detect_task(feats, first_where)
    seq_len = len(feats.get("input_ids", ("", []))[1])
    max_pred = len(feats["masked_lm_positions"][1]) if task == "pretrain" and "masked_lm_positions" in feats \
        else int(cfg.data.max_predictions)
    short = [(k, n) for k, n, least in (("input_ids", seq_len, 2), ("masked_lm_positions", max_pred, 1))
             if k in feats and n < least]
    if short:
        key, n = short[0]
        raise UsageError(f"{first_where}: '{key}' holds {n} value(s); BERT features are padded to a fixed length")
    if cfg.pipeline.tokenize == "inline":
        raise UsageError(f"--set pipeline.tokenize=inline: needs raw text, and the data at {redact_text(uri)} are "
                         f"pre-tokenized ({FORMATS[task]}); use pipeline.tokenize=pretokenized")
    vocab_size, vocab_source = _vocab(cfg)
    num_labels = cfg.model.num_labels or None
    checker = RecordChecker(task, seq_len, max_pred, vocab_size, vocab_source, num_labels, first=first_where)
    for info in sampled:
        data = heads[info.uri]
        records = recs if info is first_info else records_in(
            data, redact_text(info.uri), compression == "gzip", full or info.size <= len(data), on_corrupt)
        for i, rec in enumerate(records[:1] if light else records):
            checker.check(rec, where(info, i))
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
    if len(items) == 1 and not is_glob(base_uri(items[0])) and _has_manifest(items[0], backend, MANIFEST_FILE):
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
    return backend.exists(backend.join(base_uri(item), name))
