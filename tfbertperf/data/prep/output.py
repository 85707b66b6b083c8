"""Where a prepared data set goes: its directory's life cycle, its shards' final names, vocab.txt, the one manifest
writer, and the one temp-dir-then-upload for gs:// and az://.

Output directory layout (local, or uploaded as is to gs:// / az://):
    vocab.txt                                    one token per line, line i = id i ([PAD] = 0)
    <task>-00000-of-00008.tfrecord …             pre-tokenized examples (google-research/bert feature spec)
    <task>-text-00000-of-00008.tfrecord …        the same examples as raw text (for pipeline.tokenize=inline)
    manifest.json                                what was written and how (written last: its presence means
                                                 the directory is complete)
Every file is written atomically and durably (storage/atomic.py).  For the same config and seed every byte of
every file is identical, whatever the number of workers (the manifest holds no timestamps).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

from tfbertperf.data.features import feature_spec_summary
from tfbertperf.data.manifest import MANIFEST_FILE, MANIFEST_SCHEMA, VOCAB_FILE, file_sha256, shard_name
from tfbertperf.data.vocab import special_ids, vocab_sha256, vocab_text
from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.atomic import write_atomic
from tfbertperf.storage.base import split_uri

TOKENIZER_DESCRIPTION = "tensorflow_text.FastBertTokenizer(lower_case_nfd_strip_accents=True, suffix='##')"


class Progress:
    """'prepare: [elapsed s] …' lines on stderr (or silence)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = bool(enabled)
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if self.enabled:
            sys.stderr.write(f"prepare: [{time.perf_counter() - self.t0:5.1f}s] {msg}\n")
            sys.stderr.flush()


def start_dir(out_dir: str) -> None:
    """Create `out_dir` and remove its manifest: from here until the new manifest lands the directory is
    incomplete, so no reader mixes old and new files.  Called once bad input has been ruled out."""
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(os.path.join(out_dir, MANIFEST_FILE)):
        os.remove(os.path.join(out_dir, MANIFEST_FILE))


def publish_shards(out_dir: str, task: str, parts: list[dict], text: bool) -> list[dict]:
    """Rename the written shard files `parts` [{path, examples, bytes}] (in order) to their final names
    <task>[-text]-<i>-of-<n>.tfrecord; returns the manifest's [{name, examples, bytes, sha256}]."""
    out = []
    for i, p in enumerate(parts):
        name = shard_name(task, i, len(parts), text=text)
        path = os.path.join(out_dir, name)
        os.replace(p["path"], path)
        out.append({"name": name, "examples": p["examples"], "bytes": p["bytes"], "sha256": file_sha256(path)})
    return out


def manifest_common(cfg, vocab: list[str], num_examples: int, record_bytes_mean: float,
                    text_record_bytes_mean: float | None, shards: list[dict], text_shards: list[dict]) -> dict:
    """The manifest's keys every preparation writes (task, sizes, vocab, tokenizer, knobs, shards)."""
    d, task = cfg.data, cfg.model.task
    return {
        "schema": MANIFEST_SCHEMA, "task": task, "seq_len": d.seq_len, "max_predictions": d.max_predictions,
        "vocab_size": len(vocab), "vocab_size_target": d.vocab_size, "vocab_sha256": vocab_sha256(vocab),
        "vocab_file": VOCAB_FILE, "special_ids": special_ids(vocab), "tokenizer": TOKENIZER_DESCRIPTION,
        "seed": d.seed, "dupe_factor": d.dupe_factor, "masked_lm_prob": d.masked_lm_prob,
        "short_seq_prob": d.short_seq_prob, "num_examples": num_examples,
        "record_bytes_mean": round(record_bytes_mean, 1),
        "text_record_bytes_mean": None if text_record_bytes_mean is None else round(text_record_bytes_mean, 1),
        "features": feature_spec_summary(task, d.seq_len, d.max_predictions),
        "shards": shards, "text_shards": text_shards,
    }


def write_dataset_files(out_dir: str, vocab: list[str], manifest: dict) -> dict:
    """vocab.txt, then manifest.json (last: its presence means the directory is complete).  Every manifest
    says what it was made from (source_sha256, data/prep/source.py); returns the manifest."""
    if not manifest.get("source_sha256") or not manifest.get("corpus_sha256"):
        raise ValueError("a manifest must carry corpus_sha256 and source_sha256")
    write_atomic(os.path.join(out_dir, VOCAB_FILE), vocab_text(vocab).encode("utf-8"))
    write_atomic(os.path.join(out_dir, MANIFEST_FILE), (json.dumps(manifest, indent=2) + "\n").encode("utf-8"))
    return manifest


def to_uri(out_uri: str, data_cfg, build, progress: bool = True, label: str = "--out"):
    """Run `build(local_dir)` into `out_uri`: a local path / file:// URI directly; gs://… / az://… into a local
    temporary directory, then uploaded (storage/upload.py: parallel, idempotent, manifest.json last).  Returns
    what `build` returns."""
    from tfbertperf.data.manifest import refuse_foreign

    scheme, _, path = split_uri(out_uri)
    if scheme == "file":
        if os.path.exists(path) and not os.path.isdir(path):
            raise UsageError(f"{label} {path}: exists and is not a directory")
        from tfbertperf.storage.local import LocalBackend

        refuse_foreign(path, LocalBackend(), label)  # the user's own TFRecords stay as they are
        return build(path)
    if scheme not in ("gs", "az"):
        raise UsageError(f"{label} {redact_text(out_uri)}: unknown URI scheme {scheme!r} (use a path, gs:// or az://)")
    from tfbertperf.storage import open_backend
    from tfbertperf.storage.upload import upload_dir

    refuse_foreign(out_uri, open_backend(out_uri, data_cfg), label)
    tmp = tempfile.mkdtemp(prefix="tfbertperf-prepare-")
    try:
        result = build(tmp)
        upload_dir(tmp, out_uri, data_cfg, progress=progress)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result
