"""Reading the two sides of a diff: environment.json (a fingerprint) or report.json (or a run directory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tfbertperf.envinfo.fingerprinting import SCHEMA, SECTIONS
from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text


def load_doc(path: str) -> tuple[str, dict]:
    """Read an environment.json or report.json (or a run directory holding report.json).

    Returns (kind, document) with kind "env" or "report".  Raises UsageError naming the file when it is missing,
    not JSON, or neither kind.
    """
    p = Path(path)
    shown = redact_text(str(path))
    if p.is_dir():
        for name in ("report.json", "environment.json"):
            if (p / name).is_file():
                p = p / name
                shown = redact_text(str(p))
                break
        else:
            raise UsageError(f"{shown}: a directory without report.json or environment.json")
    if not p.is_file():
        raise UsageError(f"{shown}: no such file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{shown}: cannot read ({getattr(e, 'strerror', None) or type(e).__name__})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{shown}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    kind = document_kind(doc)
    if kind is None:
        raise UsageError(f"{shown}: neither an environment.json (schema {SCHEMA}) nor a report.json "
                         f"with an 'environment' section")
    return kind, doc


def document_kind(doc: Any) -> str | None:
    """'env', 'report' or None for a parsed JSON document."""
    if not isinstance(doc, dict):
        return None
    schema = str(doc.get("schema", ""))
    if schema.startswith("tfbertperf.env/"):
        return "env"
    if (schema.startswith("tfbertperf.report/") or "attribution" in doc) and isinstance(doc.get("environment"),
                                                                                      dict):
        return "report"
    if not schema and sum(1 for s in SECTIONS if isinstance(doc.get(s), dict)) >= 5:
        return "env"  # a fingerprint written without its schema tag (older or hand-made)
    return None


def env_of(doc: dict) -> dict:
    """The fingerprint in `doc`: a report's "environment" section, or the fingerprint itself."""
    return doc["environment"] if document_kind(doc) == "report" else doc
