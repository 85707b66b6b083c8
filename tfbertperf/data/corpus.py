"""The bundled corpus (Python's `pydoc_data.topics`, ~465 KB of real English about the language) as documents of
sentences, and the reading of users' small text files (classification TSV/CSV).

A *document* is a list of sentence strings plus a *group* name (the topic it came from); sentence order matters
(next-sentence prediction pairs consecutive sentences).  Each topic is split into documents at its section
headings; prose paragraphs are unwrapped and split into sentences; indented blocks (grammar, code, tables)
contribute one "sentence" per line.  Pretraining corpora (this text, or users' files in google-research/bert's
format) are read by the one streamed reader, data/prep/source.py.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

from tfbertperf.errors import UsageError

DEFAULT_CORPUS = "pydoc_data.topics"

# A heading's underline: a line made only of one of these characters (reST style, as topics.py renders them).
_UNDERLINE = re.compile(r"^([*=\-~^\"'`#+])\1{2,}\s*$")
# Sentence end: . ! ? (optionally followed by a closing quote/bracket), then whitespace, then what starts a
# sentence.  Abbreviations such as "e.g. x" are rare enough in this corpus not to matter.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"”’)\]]))\s+(?=[A-Z0-9\"“‘(*])")
_TABLE_RULE = re.compile(r"^[+=\-\s]+$")
_BULLET = re.compile(r"^(\*|-|\d+\.|[a-z]\))\s+")


@dataclass(frozen=True)
class Document:
    group: str  # topic (default corpus) or "<file>#<n>" (user files)
    sentences: tuple[str, ...]


@dataclass(frozen=True)
class Corpus:
    documents: tuple[Document, ...]
    description: str  # "pydoc_data.topics" or the comma-separated file names
    sha256: str  # of the raw text read, so the manifest says exactly which text was used

    @property
    def num_sentences(self) -> int:
        return sum(len(d.sentences) for d in self.documents)

    def all_sentences(self) -> list[str]:
        return [s for d in self.documents for s in d.sentences]


def _split_prose(paragraph: str) -> list[str]:
    text = " ".join(line.strip() for line in paragraph.splitlines() if line.strip())
    text = _BULLET.sub("", text)
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _paragraph_sentences(paragraph: str) -> list[str]:
    """Prose is unwrapped and split into sentences; an indented block (grammar, code) gives one per line."""
    lines = paragraph.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    indent = len(first) - len(first.lstrip())
    if first.lstrip()[:1] in ("+", "|"):  # a grid table: one "sentence" per row line, borders dropped
        rows = (" ".join(ln.replace("|", " ").split()) for ln in lines)
        return [r for r in rows if r and not _TABLE_RULE.match(r)]
    if indent >= 3 and not _BULLET.match(first.strip()):
        return [ln.strip() for ln in lines if ln.strip()]
    return _split_prose(paragraph)


def split_topic(text: str) -> list[list[str]]:
    """One pydoc topic → documents (sections split at headings) of sentences; the headings themselves start
    their section as its first sentence."""
    lines = text.splitlines()
    sections: list[list[str]] = [[]]
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and lines[i].strip() and _UNDERLINE.match(lines[i + 1]):
            sections.append([lines[i]])
            i += 2
            continue
        sections[-1].append(lines[i])
        i += 1
    docs = []
    for sec in sections:
        sentences: list[str] = []
        for para in re.split(r"\n\s*\n", "\n".join(sec)):
            if para.strip():
                sentences.extend(_paragraph_sentences(para))
        if sentences:
            docs.append(sentences)
    return docs


def load_default_corpus() -> Corpus:
    """Python's bundled pydoc topics, split into sections (documents) of sentences.  Topics in key order."""
    from pydoc_data import topics

    docs = []
    for name in sorted(topics.topics):
        for sentences in split_topic(topics.topics[name]):
            docs.append(Document(name, tuple(sentences)))
    if not docs:  # a stripped-down Python; say so rather than train on nothing
        raise UsageError(f"{DEFAULT_CORPUS}: bundled corpus is empty; pass --set data.corpus=FILE")
    return Corpus(tuple(docs), DEFAULT_CORPUS, default_corpus_sha256())


def default_corpus_sha256() -> str:
    """sha256 of the bundled topics (names and texts in key order): the bundled corpus's identity."""
    from pydoc_data import topics

    h = hashlib.sha256()
    for name in sorted(topics.topics):
        h.update(name.encode() + b"\0" + topics.topics[name].encode() + b"\0")
    return h.hexdigest()


def read_bytes(path: str, what: str) -> bytes:
    """The whole file, or a one-line UsageError naming it (`what` says which file it is to the user)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot read ({e.strerror})") from None


def corpus_files(spec: str) -> list[str]:
    """`data.corpus` (comma-separated paths) → list of paths; UsageError naming a missing one."""
    files = [p.strip() for p in spec.split(",") if p.strip()]
    for p in files:
        if not os.path.isfile(p):
            raise UsageError(f"corpus file {p}: no such file (--set data.corpus=…)")
    if not files:
        raise UsageError(f"--set data.corpus={spec!r}: no file names given")
    return files


def read_text_file(path: str) -> str:
    raw = read_bytes(path, "corpus file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"corpus file {path}: not UTF-8 text (byte {e.start})") from None
