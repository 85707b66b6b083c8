"""Two fingerprints (or two reports, or one of each) → the differences that matter, ranked by likely impact on
speed and numerics.

Both documents are flattened to dotted keys ("cpu.flags.avx512f", "data.kind" …).  Each differing key is matched
against rules.RULES (first match wins): the group, what it affects, a score 0–100 and a one-sentence why, or
noise (dropped).  With two report.json files the run configs are diffed too (config.*: precision, batch size,
pipeline knobs …), and sidebyside.side_by_side puts attribution, throughput and loss trajectories next to each
other with a numerics verdict.
"""

from __future__ import annotations

import re
from typing import Any

from tfbertperf.envinfo.documents import document_kind, env_of
from tfbertperf.envinfo.rules import COMPILED_RULES, IGNORED
from tfbertperf.envinfo.sidebyside import side_by_side
from tfbertperf.envinfo.values import flatten
from tfbertperf.redact import redact_obj

DIFF_SCHEMA = "tfbertperf.envdiff/1"
HIGH, MEDIUM = 70, 40  # score thresholds for the impact labels
GROUP_ORDER = ("devices", "config", "framework", "precision", "cpu", "threads", "data", "env", "system")


def impact_label(score: int) -> str:
    """'high' (>= 70), 'medium' (>= 40) or 'low'."""
    return "high" if score >= HIGH else "medium" if score >= MEDIUM else "low"


# Facts of one kind of data location only: a local path's filesystem and read probe, an object store's bucket
# and access.  Between a local and a remote location the scheme and kind say the difference; these would only
# say "missing" on the other side ("not prepared yet", "spinning disk" for a gs:// data set).
LOCATION_ONLY = re.compile(r"^data\.(exists|path|mount_point|fstype|source|rotational|fuse_daemon|object_store_backed"
                           r"|probe(\..*)?|bucket|prefix|container|account|emulator|endpoint|access)$")


def _absent(v: Any) -> bool:
    """An unset value: None, or an empty string (an environment variable set to nothing)."""
    return v is None or v == ""


def diff_flat(fa: dict[str, Any], fb: dict[str, Any]) -> list[dict]:
    """Ranked differences between two flattened documents (see `diff`).  An unset value on both sides (missing,
    None or "") is no difference; between a local and a remote data location only the location's shared facts
    (scheme, kind, uri) are compared."""
    out = []
    remote_vs_local = fa.get("data.scheme") != fb.get("data.scheme") and "file" in (fa.get("data.scheme"),
                                                                                     fb.get("data.scheme"))
    for key in sorted(set(fa) | set(fb)):
        a, b = fa.get(key), fb.get(key)
        if a == b or IGNORED.match(key) or (_absent(a) and _absent(b)):
            continue
        if remote_vs_local and LOCATION_ONLY.match(key):
            continue
        if isinstance(a, (dict, list)) and not a and b is None or isinstance(b, (dict, list)) and not b and a is None:
            continue
        for rx, group, affects, fn in COMPILED_RULES:
            if rx.match(key):
                res = fn(key, a, b)
                break
        if res is None:
            continue
        why, score = res[0], int(res[1])
        if len(res) > 2:
            affects = res[2]
        out.append({"name": key, "group": group, "a": a, "b": b, "score": score, "impact": impact_label(score),
                    "affects": list(affects), "why": why})
    out.sort(key=lambda d: (-d["score"], GROUP_ORDER.index(d["group"]), d["name"]))
    return out


def diff(a: dict, b: dict) -> list[dict]:
    """Differences between two fingerprints (or two reports, or one of each), most impactful first.

    Each entry: {"name": dotted key ("cpu.flags.avx512f", "config.train.precision" …), "group": devices|config|
    framework|precision|cpu|threads|data|env|system, "a", "b": the two values, "score": 0-100 likely impact,
    "impact": high|medium|low, "affects": ["speed"] and/or ["numerics"], "why": one sentence}.
    With two report.json documents the run configs are compared too (keys "config.*").
    """
    fa, fb = flatten(env_of(a)), flatten(env_of(b))
    if document_kind(a) == "report" and document_kind(b) == "report":
        fa.update(flatten({"config": a.get("config") or {}, "tokenizer": a.get("tokenizer") or {}}))
        fb.update(flatten({"config": b.get("config") or {}, "tokenizer": b.get("tokenizer") or {}}))
    return redact_obj(diff_flat(fa, fb))


def explain(a: dict, b: dict, rtol: float = 1e-3, atol: float = 1e-5, names: tuple[str, str] = ("A", "B")) -> dict:
    """The whole comparison as one JSON document: {"schema", "a", "b", "kinds", "differences": diff(a, b),
    "summary": {"high", "medium", "low"} counts, and with two reports "side_by_side"}."""
    ka, kb = document_kind(a), document_kind(b)
    diffs = diff(a, b)
    out = {
        "schema": DIFF_SCHEMA, "a": names[0], "b": names[1], "kinds": [ka, kb],
        "summary": {lvl: sum(1 for d in diffs if d["impact"] == lvl) for lvl in ("high", "medium", "low")},
        "differences": diffs,
    }
    if ka == "report" and kb == "report":
        out["side_by_side"] = side_by_side(a, b, rtol=rtol, atol=atol)
    out["data"] = {"a": data_summary(a), "b": data_summary(b)}  # where each side's data came from
    return redact_obj(out)


def data_summary(doc: dict) -> str | None:
    """The one-line origin of a document's data: a report's `data.summary`, else its fingerprint's
    `data.dataset.summary` (None when neither says)."""
    d = doc.get("data") if document_kind(doc) == "report" else None
    if isinstance(d, dict) and d.get("summary"):
        return d["summary"]
    ds = (env_of(doc).get("data") or {}).get("dataset") if isinstance(env_of(doc).get("data"), dict) else None
    return ds.get("summary") if isinstance(ds, dict) else None
