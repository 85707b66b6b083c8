"""The one corpus reader of data preparation, streamed.

Every source becomes local text files in google-research/bert's format (one sentence per line, a blank line
between documents; a new file starts a new document), read once, front to back, in chunks of whole documents:
  ""                       the bundled pydoc topics (data/corpus.py splits them into documents of sentences),
                           written as one such file (~470 KB) into the preparation's temporary directory;
  FILE, DIR                a file, or a directory's regular files (recursively, hidden ones skipped, sorted);
  gs://…, az://…           a prefix's objects (hidden names skipped, in URI order), copied into the temporary
                           directory in ranged reads of 16 MB;
comma-separated lists of these too.  `data.corpus` and `prepare --corpus` take the same specs.

The corpus's identity (manifest corpus_sha256, and source_sha256 with a user vocab): sha256 over every file's
base name, a NUL, its bytes and a NUL — computed while the chunks are read, and again (without preparing) by
`source_sha256` when a cached set is checked; the bundled text's is data/corpus.py's hash of the topics.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from tfbertperf.data.corpus import DEFAULT_CORPUS, default_corpus_sha256, load_default_corpus, read_bytes
from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import split_uri

DOWNLOAD_BYTES = 16 << 20  # one ranged read of a remote corpus object


@dataclass
class CorpusFiles:
    paths: list[str]  # local files, in reading order
    names: list[str]  # what errors call each (the user's path or URI)
    description: str  # manifest "corpus": "pydoc_data.topics", or the base names / URIs given, comma-separated
    total_bytes: int
    bundled: bool  # the pydoc topics (identity: default_corpus_sha256)


def _items(spec: str, label: str) -> list[str]:
    items = [p.strip() for p in spec.split(",") if p.strip()]
    if not items:
        raise UsageError(f"{label} {spec!r}: no corpus given")
    return items


def _dir_files(path: str) -> list[str]:
    return sorted(os.path.join(r, f) for r, _dirs, files in os.walk(path) for f in files
                  if not f.startswith(".") and "/." not in os.path.relpath(os.path.join(r, f), path))


def _remote_objects(uri: str, data_cfg, label: str):
    from tfbertperf.storage import open_backend

    backend = open_backend(uri, data_cfg)
    objs = [o for o in backend.list(uri) if o.size > 0 and not o.uri.rsplit("/", 1)[-1].startswith(".")]
    if not objs:
        raise UsageError(f"{label} {redact_text(uri)}: no objects under this prefix")
    return backend, objs


def _remote_blocks(backend, obj):
    for start in range(0, obj.size, DOWNLOAD_BYTES):
        yield backend.read_range(obj.uri, start, min(DOWNLOAD_BYTES, obj.size - start))


def open_corpus(spec: str, data_cfg, tmp_dir: str, say, label: str = "corpus file") -> CorpusFiles:
    """The corpus `spec` ("" = the bundled text) as local files (see the module docstring).  `label` names the
    setting in errors ("--corpus" or "corpus file")."""
    if not spec.strip():
        path = os.path.join(tmp_dir, "pydoc_data.topics.txt")
        with open(path, "w", encoding="utf-8") as f:
            for doc in load_default_corpus().documents:
                f.write("\n".join(doc.sentences) + "\n\n")
        return CorpusFiles([path], [DEFAULT_CORPUS], DEFAULT_CORPUS, os.path.getsize(path), True)
    paths, names, shown = [], [], []
    for item in _items(spec, label):
        if split_uri(item)[0] in ("gs", "az"):
            backend, objs = _remote_objects(item, data_cfg, label)
            for n, o in enumerate(objs):
                local = os.path.join(tmp_dir, f"corpus-{len(paths):05d}-{os.path.basename(o.uri.rstrip('/'))}")
                with open(local, "wb") as f:
                    for block in _remote_blocks(backend, o):
                        f.write(block)
                say(f"corpus: copied {redact_text(o.uri)} ({o.size / 1e6:.1f} MB)")
                paths.append(local)
                names.append(redact_text(o.uri))
            shown.append(redact_text(item))
            continue
        path = split_uri(item)[2]
        if os.path.isfile(path):
            found = [path]
        elif os.path.isdir(path):
            found = _dir_files(path)
            if not found:
                raise UsageError(f"{label} {item}: directory holds no files")
        else:
            raise UsageError(f"{label} {item}: no such file or directory")
        paths += found
        names += found
        shown.append(os.path.basename(path.rstrip("/")))
    for path, name in zip(paths, names):
        _check_not_blank(path, name)
    return CorpusFiles(paths, names, ",".join(shown), sum(os.path.getsize(p) for p in paths), False)


def _check_not_blank(path: str, name: str) -> None:
    """UsageError for a file without a single sentence, before anything is written (reads up to its first line
    of text: cheap; a file that is not UTF-8 further on is named while the chunks are read)."""
    try:
        with open(path, "rb") as f:
            if any(raw.strip() for raw in f):
                return
    except OSError as e:
        raise UsageError(f"corpus file {name}: cannot read ({e.strerror})") from None
    raise UsageError(f"corpus file {name}: empty (expected one sentence per line, blank line between documents)")


def _hash_file(sha, name: str, blocks) -> None:
    sha.update(os.path.basename(name.rstrip("/")).encode() + b"\0")
    for b in blocks:
        sha.update(b)
    sha.update(b"\0")


def with_vocab(corpus_sha256: str, vocab_path: str = "") -> str:
    """A data set's source identity: the corpus's hash, combined with a user vocab file's bytes."""
    if not vocab_path:
        return corpus_sha256
    return hashlib.sha256(corpus_sha256.encode() + b"\0" + read_bytes(vocab_path, "vocab file")).hexdigest()


def source_sha256(corpus_spec: str, vocab_path: str = "", data_cfg=None) -> str:
    """What a data set is made from, as one sha256 (module docstring), without preparing anything: cheap for
    local files and the bundled text, so a cached set is checked against its sources on every run
    (job.ensure_data); a gs:// / az:// corpus is read through its backend."""
    if not corpus_spec.strip():
        return with_vocab(default_corpus_sha256(), vocab_path)
    sha = hashlib.sha256()
    for item in _items(corpus_spec, "corpus file"):
        if split_uri(item)[0] in ("gs", "az"):
            backend, objs = _remote_objects(item, data_cfg, "corpus file")
            for o in objs:
                _hash_file(sha, o.uri, _remote_blocks(backend, o))
            continue
        path = split_uri(item)[2]
        if not os.path.exists(path):
            raise UsageError(f"corpus file {item}: no such file or directory")
        for p in _dir_files(path) if os.path.isdir(path) else [path]:
            _hash_file(sha, p, [read_bytes(p, "corpus file")])
    return with_vocab(sha.hexdigest(), vocab_path)


def _lines(corpus: CorpusFiles, sha=None):
    """(line, bytes consumed so far) over every file; a file end is a document end (yields "").  `sha`: fed each
    file's identity (module docstring).  UsageError naming the file: unreadable or not UTF-8 (open_corpus has
    ruled out blank files)."""
    done = 0
    for path, name in zip(corpus.paths, corpus.names):
        if sha is not None:
            sha.update(os.path.basename(name.rstrip("/")).encode() + b"\0")
        try:
            with open(path, "rb") as f:
                for n, raw in enumerate(f, 1):
                    done += len(raw)
                    if sha is not None:
                        sha.update(raw)
                    try:
                        line = raw.decode("utf-8").strip()
                    except UnicodeDecodeError:
                        raise UsageError(f"corpus file {name}: line {n} is not UTF-8 text") from None
                    yield line, done
        except OSError as e:
            raise UsageError(f"corpus file {name}: cannot read ({e.strerror})") from None
        if sha is not None:
            sha.update(b"\0")
        yield "", done


def chunks(corpus: CorpusFiles, chunk_bytes: float, sha=None):
    """Yield (documents, bytes read so far): whole documents (lists of sentences), a chunk ending at the first
    document end past each multiple of `chunk_bytes` of the corpus's bytes (so total / n gives at most n chunks)."""
    docs: list[list[str]] = []
    cur: list[str] = []
    cut = chunk_bytes
    for line, done in _lines(corpus, sha):
        if line:
            cur.append(line)
            continue
        if cur:
            docs.append(cur)
            cur = []
        if done >= cut and docs:
            yield docs, done
            docs = []
            while cut <= done:
                cut += chunk_bytes
    if docs:
        yield docs, corpus.total_bytes


def sample_sentences(corpus: CorpusFiles, nbytes: int) -> list[str]:
    """About `nbytes` of sentences, the first ones of every file in proportion to its size (to learn a vocab)."""
    out: list[str] = []
    for path, name in zip(corpus.paths, corpus.names):
        one = CorpusFiles([path], [name], name, 0, False)
        budget, got = nbytes * max(1, os.path.getsize(path)) / max(1, corpus.total_bytes), 0
        for line, _ in _lines(one):
            if got >= budget:
                break
            if line:
                out.append(line)
                got += len(line)
    return out


def read_sentences(spec: str, data_cfg=None) -> list[str]:
    """Every sentence of the corpus `spec` ("" = the bundled text), in order (tokenizer checks)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tfbertperf-corpus-") as tmp:
        corpus = open_corpus(spec, data_cfg, tmp, lambda m: None)
        return [line for line, _ in _lines(corpus) if line]
