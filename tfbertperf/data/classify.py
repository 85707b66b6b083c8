"""Sequence-classification examples: from a user TSV/CSV, or a built-in sentence-pair task made from the corpus.

User files (`data.corpus` with `model.task=classify`): rows `text,label` or `text,text_b,label`; `.tsv` is
tab-separated, `.csv` comma-separated (anything else: tab if the first line has one); an optional header row
whose last column is `label` is skipped.  Labels are names; their sorted list (numerically, if all are
integers) defines the ids, recorded in the manifest.

Built-in task "same_topic" (offline, from the corpus): for every sentence A of every document, B is another
sentence of the same topic (label 1) or a sentence of a different topic (label 0), 50/50, repeated
`dupe_factor` times with fresh draws.

Pairs are truncated as google-research/bert `run_classifier.py` does (drop tokens from the end of the longer
segment until [CLS] A [SEP] B [SEP] fits seq_len).
"""

from __future__ import annotations

import csv
import io
import os
import random
from dataclasses import dataclass

from tfbertperf.data.corpus import Corpus, corpus_files, read_text_file
from tfbertperf.errors import UsageError

BUILTIN_TASK = "same_topic"
BUILTIN_LABELS = ["different_topic", "same_topic"]


@dataclass
class ClassifyRow:
    text_a: str
    text_b: str  # "" = single-segment example
    label: int


def read_labeled_files(spec: str) -> tuple[list[ClassifyRow], list[str]]:
    """Rows and label names from the user's TSV/CSV files (UsageError naming file:line on bad rows)."""
    raw: list[tuple[str, str, str, str]] = []  # (text_a, text_b, label, where)
    for path in corpus_files(spec):
        text = read_text_file(path)
        ext = os.path.splitext(path)[1].lower()
        first = text.split("\n", 1)[0]
        delim = "\t" if ext == ".tsv" else "," if ext == ".csv" else ("\t" if "\t" in first else ",")
        reader = csv.reader(io.StringIO(text), delimiter=delim)
        width = None
        n = 0
        for lineno, row in enumerate(reader, 1):
            if not row or all(not c.strip() for c in row):
                continue
            if lineno == 1 and row[-1].strip().lower() == "label":
                width = len(row)
                continue
            if len(row) not in (2, 3):
                raise UsageError(
                    f"{path}:{lineno}: expected text,label or text,text_b,label ({len(row)} columns found)"
                )
            if width is not None and len(row) != width:
                raise UsageError(f"{path}:{lineno}: {len(row)} columns, but earlier rows have {width}")
            width = len(row)
            label = row[-1].strip()
            if not label or not row[0].strip():
                raise UsageError(f"{path}:{lineno}: empty text or label")
            raw.append((row[0].strip(), row[1].strip() if len(row) == 3 else "", label, f"{path}:{lineno}"))
            n += 1
        if n == 0:
            raise UsageError(f"corpus file {path}: no labeled rows (expected text[,text_b],label per line)")
    names = sorted({r[2] for r in raw})
    if all(_is_int(x) for x in names):
        names = sorted(names, key=int)
    if len(names) < 2:
        raise UsageError(f"{spec}: only one label ({names[0]!r}); classification needs at least 2")
    index = {n: i for i, n in enumerate(names)}
    return [ClassifyRow(a, b, index[lab]) for a, b, lab, _ in raw], names


def _is_int(s: str) -> bool:
    try:
        int(s)
        return True
    except ValueError:
        return False


def builtin_pairs(corpus: Corpus, dupe_factor: int, seed: int) -> tuple[list[ClassifyRow], list[str]]:
    """The 'same_topic' sentence-pair task (see module docstring)."""
    rng = random.Random(seed)
    by_group: dict[str, list[str]] = {}
    for d in corpus.documents:
        by_group.setdefault(d.group, []).extend(d.sentences)
    groups = sorted(by_group)
    if len(groups) < 2:
        raise UsageError(f"corpus {corpus.description}: the built-in pair task needs at least 2 documents")
    rows = []
    for _ in range(dupe_factor):
        for gi, g in enumerate(groups):
            sentences = by_group[g]
            for i, a in enumerate(sentences):
                if len(sentences) >= 2 and rng.random() < 0.5:
                    j = rng.randint(0, len(sentences) - 2)
                    b = sentences[j + (j >= i)]  # any other sentence of the same topic
                    rows.append(ClassifyRow(a, b, 1))
                else:
                    k = rng.randint(0, len(groups) - 2)
                    ob = by_group[groups[k + (k >= gi)]]  # any other topic
                    rows.append(ClassifyRow(a, ob[rng.randint(0, len(ob) - 1)], 0))
    rng.shuffle(rows)
    return rows, list(BUILTIN_LABELS)


def truncate_pair(len_a: int, len_b: int, max_len: int) -> tuple[int, int]:
    """run_classifier.py's _truncate_seq_pair: lengths kept of A and B (tokens dropped from the longer's end)."""
    while len_a + len_b > max_len:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def classify_features(ids_a: list[int], ids_b: list[int], label: int, seq_len: int, cls_id: int, sep_id: int,
                      has_b: bool) -> tuple[dict, tuple[int, int], tuple[int, int]]:
    """Padded pre-tokenized features, plus the kept token ranges of A and B (for the raw-text record)."""
    if has_b:
        ka, kb = truncate_pair(len(ids_a), len(ids_b), seq_len - 3)
        tokens = [cls_id] + ids_a[:ka] + [sep_id] + ids_b[:kb] + [sep_id]
        segment_ids = [0] * (ka + 2) + [1] * (kb + 1)
    else:
        ka, kb = min(len(ids_a), seq_len - 2), 0
        tokens = [cls_id] + ids_a[:ka] + [sep_id]
        segment_ids = [0] * (ka + 2)
    pad = seq_len - len(tokens)
    feats = {
        "input_ids": tokens + [0] * pad,
        "input_mask": [1] * len(tokens) + [0] * pad,
        "segment_ids": segment_ids + [0] * pad,
        "label_ids": [label],
    }
    return feats, (0, ka), (0, kb)
