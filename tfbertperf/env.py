"""Environment fingerprint and diff: "what differs between the two machines, ranked by impact".

    python -m tfbertperf.env                      # this machine, human-readable
    python -m tfbertperf.env --json               # environment.json on stdout
    python -m tfbertperf.env --data gs://b/p --out env.json
    python -m tfbertperf.env --diff A.json B.json # A, B = environment.json or report.json (or a run dir)

`fingerprint()` is embedded in every report.json under "environment".  It reads only local state (files under
/proc and /sys, env vars, installed package metadata, TF's build info and physical-device list) — no network
call, no TF runtime initialisation — and every value passes through tfbertperf.redact before it is returned.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from tfbertperf.envinfo import collect
from tfbertperf.envinfo.datalocation import describe_location
from tfbertperf.envinfo.diffing import diff_flat, flatten, fmt, side_by_side, to_json
from tfbertperf.errors import UsageError, cli_entry
from tfbertperf.redact import redact_obj, redact_text

SCHEMA = "tfbertperf.env/1"
DIFF_SCHEMA = "tfbertperf.envdiff/1"
SECTIONS = ("host", "python", "os", "packages", "tensorflow", "devices", "cpu", "memory", "threads", "onednn",
            "xla", "precision", "determinism", "env", "data")


def _section(fn, *args) -> dict:
    """Run one collector; a failure becomes {"error": …} in that section instead of breaking the fingerprint."""
    try:
        return fn(*args)
    except Exception as e:  # a collector bug must never cost the user their run report
        return {"error": redact_text(f"{type(e).__name__}: {e}")[:300]}


def fingerprint(data_uri: str | None = None, probe: bool = True) -> dict:
    """Fingerprint this machine: everything that changes BERT training speed or numerics, secrets redacted.

    Args:
      data_uri: the data location to describe (a path, file://, gs://…, az://…); None or "" = the embedded default
        data directory (tfbertperf.config.default_data_dir()).
      probe: run the short read probe on local data (<= 0.6 s: cold 4 KiB first-byte latency and sequential
        MB/s, 10^6 bytes/s).  Remote URIs are never probed (no network calls here).
    Returns:
      {"schema": "tfbertperf.env/1", "collected": ISO-8601 UTC, "collect_ms": ms spent here, and one dict per
      section in SECTIONS}.  Costs well under 2 s beyond `import tensorflow`.
    """
    t_import = time.perf_counter()
    import tensorflow as tf  # the fingerprint is of the TF that this process runs

    t0 = time.perf_counter()

    if not data_uri:  # None or "" (RunConfig's "embedded default")
        from tfbertperf.config import default_data_dir

        data_uri = default_data_dir()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "collected": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": _section(collect.host_info),
        "python": _section(collect.python_info),
        "os": _section(collect.os_info),
        "packages": _section(collect.package_versions),
        "tensorflow": _section(collect.tensorflow_info, tf),
        "devices": _section(collect.devices_info, tf),
        "cpu": _section(collect.cpu_info),
        "memory": _section(collect.memory_info),
        "threads": _section(collect.threads_info, tf),
        "onednn": _section(collect.onednn_info),
        "xla": _section(collect.xla_info, tf),
        "precision": _section(collect.precision_info, tf),
        "determinism": _section(collect.determinism_info),
        "env": _section(collect.env_vars),
        "data": _section(describe_location, str(data_uri), probe),
    }
    doc["collect_ms"] = round((time.perf_counter() - t0) * 1e3, 1)  # excludes the TF import
    doc["tf_import_ms"] = round((t0 - t_import) * 1e3, 1)  # ~0 when TF was already imported
    # Belt and braces: every collector already redacts, this catches a secret in an unexpected place.  The env
    # section is exempt from the by-name pass only: its collector already replaced every secret-named value and
    # keeps the endpoint parts of connection strings visible (Azurite vs a real account); values still go
    # through the by-pattern pass.
    return {k: ({n: redact_obj(v) if not isinstance(v, str) else redact_text(v) for n, v in sec.items()}
                if k == "env" and isinstance(sec, dict) else redact_obj(sec))
            for k, sec in doc.items()}


# ---- loading A and B ----------------------------------------------------------------------------------------

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


def _env_of(doc: dict) -> dict:
    return doc["environment"] if document_kind(doc) == "report" else doc


# ---- diff ------------------------------------------------------------------------------------------------------

def diff(a: dict, b: dict) -> list[dict]:
    """Differences between two fingerprints (or two reports, or one of each), most impactful first.

    Each entry: {"name": dotted key ("cpu.flags.avx512f", "config.train.precision" …), "group": devices|config|
    framework|precision|cpu|threads|data|env|system, "a", "b": the two values, "score": 0-100 likely impact,
    "impact": high|medium|low, "affects": ["speed"] and/or ["numerics"], "why": one sentence}.
    With two report.json documents the run configs are compared too (keys "config.*").
    """
    fa, fb = flatten(_env_of(a)), flatten(_env_of(b))
    if document_kind(a) == "report" and document_kind(b) == "report":
        fa.update(flatten({"config": a.get("config") or {}}))
        fb.update(flatten({"config": b.get("config") or {}}))
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
    return redact_obj(out)


def format_diff(doc: dict, show_low: bool = True) -> str:
    """Human-readable text of an `explain` document."""
    lines = [f"A = {doc['a']}", f"B = {doc['b']}"]
    diffs = doc["differences"]
    s = doc["summary"]
    if not diffs:
        lines.append("No differences that matter for speed or numerics.")
    else:
        lines.append(f"{len(diffs)} differences ({s['high']} high, {s['medium']} medium, {s['low']} low impact), "
                     f"most likely to matter first:")
        for i, d in enumerate(diffs, 1):
            if d["impact"] == "low" and not show_low:
                continue
            aff = "+".join(d["affects"])
            lines.append(f"{i:3d}. [{d['impact']:<6} {aff:<15}] {d['why']}")
            lines.append(f"       {d['name']}: A={_short(d['a'])}  B={_short(d['b'])}")
    sbs = doc.get("side_by_side")
    if sbs:
        lines.append("")
        lines.append(f"{'Side by side':<34}{'A':>14}{'B':>14}{'B/A':>8}")
        for m in sbs["metrics"]:
            r = m["ratio_b_over_a"]
            lines.append(f"  {m['name']:<32}{_cell(m['a']):>14}{_cell(m['b']):>14}"
                         f"{(f'{r:.2f}x' if r is not None else ''):>8}")
        if sbs["fractions"]:
            lines.append(f"  {'attribution fractions':<32}")
            for f in sbs["fractions"]:
                if not f["a"] and not f["b"]:
                    continue  # a category neither run spends time in
                delta = f["delta"]
                lines.append(f"    {f['name']:<30}{_cell(f['a']):>14}{_cell(f['b']):>14}"
                             f"{(f'{delta:+.3f}' if delta is not None else ''):>8}")
        bn = sbs["bottleneck"]
        lines.append(f"  {'bottleneck':<32}{fmt(bn['a']):>14}{fmt(bn['b']):>14}")
        ta, tb = sbs["loss_trajectory"]["a"] or [], sbs["loss_trajectory"]["b"] or []
        mb = {int(s): v for s, v in tb if isinstance(s, (int, float))}
        common = [(int(s), v, mb[int(s)]) for s, v in ta if isinstance(s, (int, float)) and int(s) in mb]
        if common:
            lines.append(f"  {'loss at step':<32}")
            n = len(common)
            k = min(n, 8)  # at most 8 rows, evenly spaced, first and last included
            rows = sorted({round(j * (n - 1) / (k - 1)) for j in range(k)}) if k > 1 else [0]
            for s_, va, vb in [common[i] for i in rows]:
                lines.append(f"    {s_:<30}{_cell(va, 7):>14}{_cell(vb, 7):>14}")
        lines.append("Numerics: " + sbs["numerics"]["verdict"])
    return "\n".join(lines)


def _short(v: Any, n: int = 60) -> str:
    s = fmt(v) if not isinstance(v, (dict, list)) else json.dumps(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def _cell(v: Any, digits: int = 4) -> str:
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return fmt(v)


def format_fingerprint(doc: dict) -> str:
    """A short human-readable summary of a fingerprint (the JSON has everything)."""
    g = lambda *path: _dig(doc, path)  # noqa: E731
    gpus = g("devices", "gpus") or []
    flags = [k for k, v in (g("cpu", "flags") or {}).items() if v]
    data = g("data") or {}
    probe = data.get("probe") or {}
    lat = (probe.get("first_byte_latency_ms") or {}).get("p50")
    rows = [
        ("python / os", f"{g('python', 'version')} on {g('os', 'distro') or g('os', 'system')} "
                        f"(kernel {g('os', 'release')}, {g('os', 'libc')})"),
        ("host", f"{g('host', 'hostname')}; container={fmt(g('host', 'container'))}; "
                 f"cloud={fmt(g('host', 'cloud_provider'))}; hints={fmt(g('host', 'platform_hints'))}"),
        ("tensorflow", f"{g('tensorflow', 'version')} (CUDA build: {_yes(g('tensorflow', 'build', 'is_cuda_build'))}"
                       f", CUDA {fmt(g('tensorflow', 'build', 'cuda_version'))}, cuDNN "
                       f"{fmt(g('tensorflow', 'build', 'cudnn_version'))}); keras {fmt(g('packages', 'keras'))}"),
        ("devices", f"{g('devices', 'gpu_count')} GPU, {g('devices', 'tpu_count')} TPU"
                    + "".join(f"; {x.get('device_name')} cc {x.get('compute_capability')}" for x in gpus)
                    + (f"; driver {g('devices', 'nvidia_smi', 'driver_version')}" if g('devices', 'nvidia_smi')
                       else "; no nvidia-smi")),
        ("cpu", f"{g('cpu', 'model')}: {g('cpu', 'usable_cores')} usable of {g('cpu', 'logical_cores')} cores, "
                f"quota {fmt(g('cpu', 'cgroup_cpu_limit'))}; flags {', '.join(flags) or 'none'}"),
        ("memory", f"{fmt(g('memory', 'total_mb'))} MiB total, {fmt(g('memory', 'available_mb'))} MiB available, "
                   f"cgroup limit {fmt(g('memory', 'cgroup_limit_mb'))}"),
        ("threads", f"intra-op {g('threads', 'intra_op')}, inter-op {g('threads', 'inter_op')} (0 = auto); "
                    f"OMP_NUM_THREADS={fmt(g('threads', 'OMP_NUM_THREADS'))}"),
        ("oneDNN / XLA", f"oneDNN {fmt(g('onednn', 'enabled'))}; auto-jit {fmt(g('xla', 'auto_jit'))}; "
                         f"XLA_FLAGS={fmt(g('xla', 'XLA_FLAGS'))}"),
        ("precision", f"policy {fmt(g('precision', 'keras_policy'))}; TF32 {fmt(g('precision', 'tf32_enabled'))}; "
                      f"op determinism {fmt(g('determinism', 'op_determinism'))}"),
        ("data", f"{data.get('uri')}: {data.get('kind')} ({fmt(data.get('fstype') or data.get('scheme'))})"
                 + (f"; emulator {data['emulator']}" if data.get("emulator") else "")
                 + (f"; first byte {lat:.3g} ms, {probe.get('read_mb_per_sec')} MB/s cold"
                    if lat is not None else f"; probe: {probe.get('skipped', 'n/a')}")),
        ("env vars", ", ".join(sorted(g("env") or {})) or "none relevant"),
    ]
    width = max(len(r[0]) for r in rows)
    tail = (f"(collected in {doc.get('collect_ms')} ms after a {doc.get('tf_import_ms')} ms TF import; "
            f"--json for everything)")
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows) + "\n" + tail


def _yes(v: Any) -> str:
    return "yes" if v is True else "no" if v is False else fmt(v)


def _dig(doc: Any, path: tuple) -> Any:
    for p in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(p)
    return doc


def write_json_atomic(path: str, doc: dict) -> None:
    """Write JSON to `path` via a temporary file + rename, so a killed process never leaves half a file."""
    target = Path(path)
    if target.parent and not target.parent.exists():
        raise UsageError(f"--out {redact_text(path)}: directory {redact_text(str(target.parent))} does not exist")
    from tfbertperf.report.io import atomic_write_bytes

    atomic_write_bytes(target, (to_json(doc) + "\n").encode("utf-8"))


@cli_entry
def main(argv: list[str] | None = None) -> int:
    """CLI: fingerprint this machine, or explain the difference between two fingerprints/reports."""
    ap = argparse.ArgumentParser(
        prog="tfbertperf env",
        description="Fingerprint this machine (secrets redacted), or rank the differences between two "
                    "environment.json / report.json files by likely impact on speed and numerics.")
    ap.add_argument("--json", action="store_true", help="print the JSON document on stdout")
    ap.add_argument("--out", metavar="FILE", help="also write the JSON document to FILE")
    ap.add_argument("--data", metavar="URI", help="data location to describe and probe (default: the embedded "
                                                  "default data directory)")
    ap.add_argument("--no-probe", action="store_true", help="skip the local read probe")
    ap.add_argument("--diff", nargs=2, metavar=("A", "B"),
                    help="compare two environment.json / report.json files (or run directories)")
    ap.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance for loss comparison (1e-3)")
    ap.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance for loss comparison (1e-5)")
    args = ap.parse_args(argv)
    if args.diff:
        if args.data or args.no_probe:
            raise UsageError("--diff compares two files; --data/--no-probe apply to fingerprinting only")
        (ka, a), (kb, b) = load_doc(args.diff[0]), load_doc(args.diff[1])
        doc = explain(a, b, rtol=args.rtol, atol=args.atol,
                      names=(redact_text(args.diff[0]), redact_text(args.diff[1])))
        text = format_diff(doc)
    else:
        if not args.json:
            print("collecting the environment fingerprint (importing TensorFlow)…", file=sys.stderr, flush=True)
        doc = fingerprint(args.data, probe=not args.no_probe)
        text = format_fingerprint(doc)
    if args.out:
        write_json_atomic(args.out, doc)
        print(f"wrote {redact_text(args.out)}", file=sys.stderr)
    print(to_json(doc) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
