"""manifest.json: what a prepared data directory holds, read back through any storage backend.

Keys (written by data/prep/output.py; a reader may rely on these):
  schema "tfbertperf.manifest/2" (/1 sets still load: same keys, made by the writers before data/prep), task (pretrain|classify), seq_len, max_predictions, vocab_size (real size),
  vocab_size_target, vocab_sha256, vocab_file ("vocab.txt"), special_ids {token: id}, tokenizer, seed,
  dupe_factor, masked_lm_prob, short_seq_prob, num_examples, record_bytes_mean (bytes per serialized
  pre-tokenized record), text_record_bytes_mean, features {name: [dtype, shape]},
  shards / text_shards [{"name", "examples", "bytes", "sha256"}] (sha256: hex of the shard's bytes, written by
  every writer since issue 15; older manifests lack it and still load), corpus, corpus_sha256, vocab_source,
  stats {…},
  source_sha256 (corpus files' names + bytes and a user vocab's bytes: data/prep/source.py; in every manifest
  since /2), prepared_by;
  pretrain: num_documents, num_sentences, num_corpus_tokens, corpus_bytes; classify: num_labels, labels, pair,
  classify_source.
Schema /2 (issue 25): one writer for every source, so the bytes of a set made from the bundled text or
`data.corpus` changed (chunked instances as `prepare --corpus` makes them); text_record_bytes_mean is null
without raw-text shards; synthetic sets name their generator settings' hash as corpus_sha256.
`load_manifest` adds "uri": the data directory it was read from (not stored in the file).
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import split_uri
from tfbertperf.storage.listing import KIND_BYTES, base_uri, data_name, file_kind, read_head

MANIFEST_SCHEMA = "tfbertperf.manifest/2"
READABLE_SCHEMAS = ("tfbertperf.manifest/1", MANIFEST_SCHEMA)  # the keys a reader uses are the same in both
MANIFEST_FILE = "manifest.json"
VOCAB_FILE = "vocab.txt"
REQUIRED_KEYS = (
    "schema", "task", "seq_len", "max_predictions", "vocab_size", "vocab_sha256", "vocab_file", "seed",
    "dupe_factor", "num_examples", "record_bytes_mean", "shards",
)


class LazyText:
    """Text made when it is first shown (an error's advice that costs a listing only when the error happens)."""

    def __init__(self, make) -> None:
        self.make = make

    def __format__(self, spec: str) -> str:
        return format(self.make(), spec)


def shard_name(task: str, index: int, num_shards: int, text: bool = False) -> str:
    """'pretrain-00000-of-00008.tfrecord' (pre-tokenized) or 'pretrain-text-00000-of-00008.tfrecord'."""
    kind = f"{task}-text" if text else task
    return f"{kind}-{index:05d}-of-{num_shards:05d}.tfrecord"


def _basename(uri: str) -> str:
    return uri.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def load_manifest(uri: str, backend) -> dict:
    """Read and check `<uri>/manifest.json` through `backend` (a tfbertperf.storage Backend).

    Checks: the directory and manifest exist, the JSON parses with the expected schema and keys, and every
    pre-tokenized shard it lists exists with the recorded size (a half-finished upload is caught here).
    Returns the manifest dict plus "uri" = `uri`.
    Raises UsageError naming the data dir, manifest or shard.
    """
    shown = redact_text(uri)
    # the fix suggested for our folder: prepare it again — never where the user's own TFRecords are
    hint = LazyText(lambda: "(it also holds TFRecords tfbertperf did not write: give prepare another --out)"
                    if foreign_tfrecords(uri, backend) else f"(run `tfbertperf prepare --out {shown}`)")
    if backend.name == "local":
        from tfbertperf.storage.base import local_path

        if not os.path.isdir(local_path(uri)):
            raise UsageError(f"data dir {shown}: no such directory {hint}")
    mpath = backend.join(uri, MANIFEST_FILE)
    if not backend.exists(mpath):
        raise UsageError(f"data dir {shown}: no {MANIFEST_FILE} {hint}")
    raw = backend.read(mpath)
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{redact_text(mpath)}: not UTF-8 JSON {hint}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{redact_text(mpath)}: not valid JSON (line {e.lineno}: {e.msg}) {hint}") from None
    if not isinstance(manifest, dict):
        raise UsageError(f"{redact_text(mpath)}: expected a JSON object {hint}")
    if manifest.get("schema") not in READABLE_SCHEMAS:
        raise UsageError(f"{redact_text(mpath)}: schema {manifest.get('schema')!r}, expected {MANIFEST_SCHEMA!r} {hint}")
    missing = [k for k in REQUIRED_KEYS if k not in manifest]
    if missing:
        raise UsageError(f"{redact_text(mpath)}: missing key(s) {', '.join(missing)} {hint}")
    if manifest["task"] not in ("pretrain", "classify"):
        raise UsageError(f"{redact_text(mpath)}: unknown task {manifest['task']!r}")
    shards = manifest["shards"]
    if not isinstance(shards, list) or not shards or not all(isinstance(s, dict) and "name" in s for s in shards):
        raise UsageError(f"{redact_text(mpath)}: 'shards' must be a non-empty list of {{name, examples, bytes}}")
    _check_shards(uri, backend, shards, hint)
    manifest = dict(manifest)
    manifest["uri"] = uri
    return manifest


def _check_shards(uri: str, backend, shards: list[dict], hint: str) -> None:
    present = {_basename(o.uri): o.size for o in backend.list(uri)}
    for s in shards:
        name = s["name"]
        shown = redact_text(backend.join(uri, name))
        if name not in present:
            raise UsageError(f"shard {shown}: listed in {MANIFEST_FILE} but missing {hint}")
        if "bytes" in s and int(s["bytes"]) != present[name]:
            raise UsageError(
                f"shard {shown}: {present[name]} bytes, {MANIFEST_FILE} says {s['bytes']} (incomplete copy?) {hint}"
            )


def file_sha256(path: str, chunk: int = 4 << 20) -> str:
    """Hex sha256 of a local file's bytes (the manifest's per-shard "sha256")."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def shard_hashes(cfg, manifest: dict, backend) -> dict[str, str]:
    """{shard URI: sha256} for the shards `shard_uris` returns, from the manifest ({} for one written before the
    hashes were, or for shards without them)."""
    key = "text_shards" if cfg.pipeline.tokenize == "inline" else "shards"
    return {backend.join(manifest["uri"], s["name"]): s["sha256"] for s in manifest.get(key) or [] if s.get("sha256")}


def with_data_labels(cfg, manifest: dict):
    """`cfg` with model.num_labels = the prepared classification data's label count (the manifest's num_labels);
    unchanged for pretraining.  A model.num_labels set to another count is a UsageError (check_compatible)."""
    import dataclasses

    n = manifest.get("num_labels")
    if cfg.model.task != "classify" or not n or cfg.model.num_labels == n:
        return cfg
    _check_labels(cfg, manifest)
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, num_labels=int(n)))


def _check_labels(cfg, manifest: dict) -> None:
    n = manifest.get("num_labels")
    if cfg.model.task == "classify" and n and cfg.model.num_labels not in (0, n):
        shown = ", ".join(str(x) for x in manifest.get("labels") or []) or "?"
        raise UsageError(f"--set model.num_labels={cfg.model.num_labels}: the data set "
                         f"{redact_text(manifest.get('uri', '?'))} has {n} labels ({shown}); leave model.num_labels "
                         "unset to take them from the data")


def check_compatible(cfg, manifest: dict) -> None:
    """UsageError if the prepared data does not fit the run (task, seq_len, max_predictions, num_labels)."""
    _check_labels(cfg, manifest)
    where = f"data dir {redact_text(manifest.get('uri', '?'))}"
    hint = "re-run `tfbertperf prepare` with the same --set values"
    if manifest["task"] != cfg.model.task:
        raise UsageError(f"{where}: prepared for task {manifest['task']!r} but model.task={cfg.model.task!r}; {hint}")
    if int(manifest["seq_len"]) != cfg.data.seq_len:
        raise UsageError(f"{where}: prepared with seq_len {manifest['seq_len']} but data.seq_len={cfg.data.seq_len}; {hint}")
    if cfg.model.task == "pretrain" and int(manifest["max_predictions"]) != cfg.data.max_predictions:
        raise UsageError(
            f"{where}: prepared with max_predictions {manifest['max_predictions']} but "
            f"data.max_predictions={cfg.data.max_predictions}; {hint}"
        )


def shard_uris(cfg, manifest: dict, backend) -> tuple[list[str], int]:
    """(shard URIs to read, mean record bytes) for `cfg.pipeline.tokenize`: the pre-tokenized shards, or the
    raw-text shards for `inline`.  Pass both to `tfbertperf.storage.open_shards`."""
    uri = manifest["uri"]
    if cfg.pipeline.tokenize == "inline":
        text = manifest.get("text_shards")
        if not text:
            raise UsageError(
                f"data dir {redact_text(uri)}: no raw-text shards for pipeline.tokenize=inline "
                f"(re-run `tfbertperf prepare --out {redact_text(uri)}`)"
            )
        return [backend.join(uri, s["name"]) for s in text], int(manifest.get("text_record_bytes_mean") or 1024)
    # the user's files are named by their full URIs (data/described.py); ours by name inside the data dir
    uris = [s.get("uri") or backend.join(uri, s["name"]) for s in manifest["shards"]]
    return uris, int(manifest["record_bytes_mean"])


def load_vocab(manifest: dict, backend) -> list[str]:
    """The vocab of a prepared data dir (checked against the manifest's sha256)."""
    from tfbertperf.data.vocab import parse_vocab, vocab_sha256

    path = backend.join(manifest["uri"], manifest.get("vocab_file", VOCAB_FILE))
    if not backend.exists(path):
        raise UsageError(f"vocab {redact_text(path)}: missing from the data dir")
    tokens = parse_vocab(backend.read(path).decode("utf-8"), redact_text(path))
    if vocab_sha256(tokens) != manifest["vocab_sha256"]:
        raise UsageError(f"vocab {redact_text(path)}: sha256 differs from {MANIFEST_FILE} (re-run prepare)")
    return tokens


def stale_reason(cfg, manifest: dict) -> str | None:
    """Why a data set prepared from `cfg`'s own sources (the default data dir) must be prepared again: its
    corpus or vocab files changed since (sha256 of their bytes, data/prep/source.py source_sha256), it predates
    the hash, or an older writer made it (schema).  None = up to date.  Data sets named by data.uri are the
    user's and never re-prepared."""
    from tfbertperf.data.prep.source import source_sha256

    d = cfg.data
    if manifest.get("schema") != MANIFEST_SCHEMA:
        return f"made by an older version ({manifest.get('schema')}; now {MANIFEST_SCHEMA})"
    now = source_sha256(d.corpus, d.vocab, d)
    then = manifest.get("source_sha256")
    if then == now:
        return None
    what = " + ".join(f"{k} {v}" for k, v in (("data.corpus", d.corpus), ("data.vocab", d.vocab)) if v) \
        or "the bundled corpus"
    if then is None:
        return f"{what}: the cached set records no source hash, so an edit cannot be ruled out"
    return f"{what} changed since it was prepared: sha256 {then[:12]}… → {now[:12]}…"


# ---- `prepare --out` never lands in the user's data; no advice sends it there ------------------------------
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
        listed = backend.list(base_uri(uri).rstrip("/") + "/")
    maybe = [o for o in listed if o.size > 0 and data_name(o.uri)
             and not _OURS.match(o.uri.rstrip("/").rsplit("/", 1)[-1])]
    return [o.uri for o in maybe if file_kind(read_head(backend, o, KIND_BYTES)) is not None]


def refuse_foreign(uri: str, backend, label: str = "prepare --out") -> None:
    """One line, before anything is written, when `uri` holds TFRecords that are not ours (foreign_tfrecords)."""
    found = foreign_tfrecords(uri, backend)
    if found:
        names = ", ".join(f.rstrip("/").rsplit("/", 1)[-1] for f in found[:3]) + (", …" if len(found) > 3 else "")
        raise UsageError(f"{label} {redact_text(uri)}: holds {len(found)} TFRecord file(s) tfbertperf did not write "
                         f"({names}); nothing is written there — train on them as they are with --set "
                         f"data.uri={redact_text(uri)}, or give prepare an empty folder")
