"""Human-readable text of a fingerprint and of a diff (the JSON documents have everything)."""

from __future__ import annotations

import json
from typing import Any

from tfbertperf.envinfo.values import dig, fmt


def format_diff(doc: dict, show_low: bool = True) -> str:
    """Human-readable text of an `explain` document."""
    lines = [f"A = {doc['a']}", f"B = {doc['b']}"]
    data = doc.get("data") or {}
    lines += [f"{side} data: {data[side.lower()]}" for side in ("A", "B") if data.get(side.lower())]
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
    g = lambda *keys: dig(doc, *keys)  # noqa: E731
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
        ("data set", (data.get("dataset") or {}).get("summary") or "not described"),
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
