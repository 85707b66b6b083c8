"""Small helpers shared by the diff, the side-by-side and the text output: flattening, reading a nested key,
numbers from loosely typed values, and how a value is shown."""

from __future__ import annotations

import json
import math
import re
from typing import Any


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1, "c": [x, y]}} → {"a.b": 1, "a.c.0": x, "a.c.1": y}; empty dicts/lists stay as values."""
    out: dict[str, Any] = {}
    if isinstance(doc, dict) and doc:
        for k, v in doc.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(doc, list) and doc and any(isinstance(x, (dict, list)) for x in doc):
        for i, v in enumerate(doc):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = doc
    return out


def fmt(v: Any) -> str:
    """A value as shown in a sentence ('none' for missing)."""
    if v is None or v == "":
        return "none"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, list):
        return ", ".join(map(fmt, v)) or "none"
    return str(v)


def interpreter_difference(k, a, b):
    """Two names of one interpreter (…/python vs …/python3 vs …/python3.11 in one directory) are no difference;
    another directory is another install (a virtualenv, conda)."""
    same = lambda p: re.sub(r"python[\d.]*$", "python", str(p or ""))  # noqa: E731
    if same(a) == same(b):
        return None
    return f"Python interpreter {fmt(a)} vs {fmt(b)}: another install (its packages may differ)", 15


def num(v: Any) -> float | None:
    """A finite number from an int/float or a string starting with one ("15360 MiB"); None otherwise."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    try:
        return float(str(v).split()[0])
    except (TypeError, ValueError, IndexError):
        return None


def ratio(a: Any, b: Any) -> float | None:
    """max/min of two positive numbers, else None."""
    x, y = num(a), num(b)
    if x is None or y is None or x <= 0 or y <= 0:
        return None
    return max(x, y) / min(x, y)


def dig(doc: Any, *keys: str) -> Any:
    """doc[k1][k2]… or None where a level is missing or not a dict."""
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def to_json(doc: Any) -> str:
    """JSON text with inf/NaN written as null-safe strings (json.dumps would emit invalid Infinity)."""
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return str(x)
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(doc), indent=2, sort_keys=False)
