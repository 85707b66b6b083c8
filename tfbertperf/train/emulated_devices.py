"""Emulated accelerators: the accelerator's step time as a sleep, so any machine can show the accelerator regime.

DLIO's method (and MLPerf Storage's): the training loop consumes the real batch from the real input pipeline,
then, instead of computing, waits the time the emulated device would take for that batch.  The wait is a sleep
(no CPU), so the host's cores stay free for the input pipeline, as they would with a real accelerator.

Device profiles are data (devices.yaml, next to this module): sequences/s per device for (model size, seq_len)
under one precision, each row with its published source or its derivation.

Definitions (units in names):
  step_ms       time of one global step: each of N data-parallel devices processes `batch_size` examples in
                step_ms = batch_size / seq_per_s × 1000 (so the step time does not depend on N).
  global_batch_size = N × batch_size (examples per step).
  demand_examples_per_sec = global_batch_size / step_ms × 1000 — what the input pipeline must deliver for the
                emulated devices never to wait.
  AU (accelerator utilization, MLPerf Storage sense) = emulated compute time ÷ wall time over the measured steps
                (the first step excluded: it holds tracing and pipeline warm-up).  1.0 = the input never stalls.

Scaling.  A (model size, seq_len) without a row is scaled from the nearest row by `scaling_rule` in devices.yaml:
seq_per_s × (row params / params) × (row seq_len / seq_len) — training FLOPs per sequence taken proportional to
parameters × seq_len.  Emulation.source says so whenever it happens.

Precision of `emulated_step` (measured on the shared 2-core dev VM, load ≈ 3, Linux timer slack 50 µs):
time.sleep alone ends 106–115 µs late (median, 5 and 20 ms).  Sleeping to `guard_ms` (0.3 ms) before the
deadline and spinning the rest ends a median 2–7 µs late (p90 ≤ 13 µs at 20–100 ms steps; rare spikes of 0.3–4
ms are the scheduler preempting on the loaded machine) and costs ~0.3 ms of CPU per step: 1.1 % of the wall at
20 ms steps, 0.23 % at 100 ms, 21 % at 1 ms (use guard_ms=0 for very short steps if CPU matters more).
"""

from __future__ import annotations

import difflib
import math
import os
import time
from dataclasses import asdict, dataclass
from functools import lru_cache

from tfbertperf.errors import UsageError

DEVICES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "devices.yaml")
CUSTOM = "custom"  # device name allowed together with an explicit step_ms (no profile)
VOCAB_FOR_PARAMS = 30522


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def load_profiles(path: str | None = None) -> dict:
    """The parsed devices.yaml: {"profiles": {name: {device, precision, rows: [{model, seq_len, seq_per_s,
    source, [derived_from, factor, derivation, reference_batch]}]}}, "sources", "derivations", "model_sizes",
    "scaling_rule", …}.  A fresh copy (callers may modify it)."""
    import copy

    return copy.deepcopy(_load(path or DEVICES_FILE))


def bert_parameters(layers: int, hidden: int, vocab_size: int = VOCAB_FOR_PARAMS, max_positions: int = 512) -> int:
    """Encoder + pooler parameters of a BERT with FFN = 4H (as tfbertperf.model builds it): embeddings
    (V + positions + 2 types) × H + LayerNorm 2H; per layer 12H² + 13H; pooler H² + H."""
    h = hidden
    return (vocab_size + max_positions + 2) * h + 2 * h + layers * (12 * h * h + 13 * h) + h * h + h


@dataclass(frozen=True)
class Emulation:
    """A resolved emulated device: what the training loop waits per step and what it demands of the input."""

    device: str  # profile name (or "custom" with an explicit step_ms)
    model_size: str
    seq_len: int
    batch_size: int  # examples per device per step
    accelerators: int  # N data-parallel emulated devices
    seq_per_s_per_device: float  # sequences/s of one device (the profile's, scaled if needed)
    step_ms: float  # per global step (all N devices in parallel)
    global_batch_size: int  # N × batch_size
    demand_examples_per_sec: float  # global_batch_size / step_ms × 1000
    precision: str
    source: str  # where the figure comes from and any scaling applied

    def to_report(self) -> dict:
        """The report.json "emulation" block (shared/DESIGN.md) plus the other fields."""
        return asdict(self)


def _near(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.4)
    return f"did you mean {close[0]!r}? " if close else ""


def _pick_row(rows: list[dict], sizes: dict, model: str, seq_len: int) -> tuple[dict, float, str]:
    """(row, seq_per_s for (model, seq_len), how it was obtained)."""
    params = {m: bert_parameters(v["layers"], v["hidden"]) for m, v in sizes.items()}
    for r in rows:
        if r["model"] == model and int(r["seq_len"]) == seq_len:
            return r, float(r["seq_per_s"]), "as tabled"

    def distance(r):
        return abs(math.log(params[r["model"]] / params[model])) + abs(math.log(int(r["seq_len"]) / seq_len))

    r = min(rows, key=distance)
    pf = params[r["model"]] / params[model]
    sf = int(r["seq_len"]) / seq_len
    how = (f"scaled from the {r['model']}/seq {r['seq_len']} row ({r['seq_per_s']} seq/s) x params "
           f"{params[r['model']]:,}/{params[model]:,} x seq_len {r['seq_len']}/{seq_len} = x{pf * sf:.4g} "
           "(FLOPs per sequence taken proportional to params x seq_len)")
    return r, float(r["seq_per_s"]) * pf * sf, how


def resolve(device: str, model_size: str, seq_len: int, batch_size: int, accelerators: int = 1,
            step_ms: float | None = None) -> Emulation:
    """Resolve an emulated device for a run.

    Args:
      device: profile name from devices.yaml (e.g. "a100-80gb-amp"), or "custom" when `step_ms` is given.
      model_size: tiny|mini|small|medium|base|large (model.size).
      seq_len: tokens per example (data.seq_len).
      batch_size: examples per device per step (≥ 1).
      accelerators: N data-parallel emulated devices (≥ 1).
      step_ms: explicit per-step time in ms (> 0) overriding the profile (emulate.step_ms).
    Returns:
      Emulation (frozen).
    Raises:
      UsageError (one line naming the value): unknown profile (with a close match and the known names), unknown
      model size, accelerators / batch_size / seq_len < 1, step_ms ≤ 0.
    """
    data = _load(DEVICES_FILE)
    profiles, sizes = data["profiles"], data["model_sizes"]
    if not isinstance(accelerators, int) or isinstance(accelerators, bool) or accelerators < 1:
        raise UsageError(f"emulate.accelerators={accelerators!r}: must be an integer >= 1")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"train.batch_size={batch_size!r}: must be an integer >= 1")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise UsageError(f"data.seq_len={seq_len!r}: must be an integer >= 1")
    if step_ms is not None and not (isinstance(step_ms, (int, float)) and math.isfinite(step_ms) and step_ms > 0):
        raise UsageError(f"emulate.step_ms={step_ms!r}: must be a number > 0 (milliseconds per step)")
    if model_size not in sizes:
        raise UsageError(f"model.size={model_size!r}: {_near(str(model_size), list(sizes))}"
                         f"known sizes: {', '.join(sizes)}")
    if device not in profiles and not (device == CUSTOM and step_ms is not None):
        known = list(profiles)
        raise UsageError(f"emulate.device={device!r}: unknown device profile; {_near(str(device), known)}"
                         f"known profiles: {', '.join(known)} (or 'custom' with emulate.step_ms)")
    n = accelerators
    if device in profiles:
        prof = profiles[device]
        row, seq_per_s, how = _pick_row(prof["rows"], sizes, model_size, seq_len)
        src = data["sources"].get(row["source"], row["source"])
        source = f"{device} {model_size}/seq {seq_len}: {seq_per_s:.2f} seq/s per device {how}; source: {src}"
        if row.get("derivation"):
            source += f"; derived: {data['derivations'].get(row['derivation'], row['derivation'])}"
        precision = prof.get("precision", "")
    else:
        seq_per_s, source, precision = batch_size / step_ms * 1000.0, "", ""
    if step_ms is not None:
        seq_per_s_fixed = batch_size / step_ms * 1000.0
        source = (f"emulate.step_ms={step_ms:g} ms per step (explicit; {seq_per_s_fixed:.2f} seq/s per device)"
                  + (f" overriding profile {device} ({seq_per_s:.2f} seq/s per device)" if source else ""))
        seq_per_s, step = seq_per_s_fixed, float(step_ms)
    else:
        step = batch_size / seq_per_s * 1000.0
    gbs = n * batch_size
    return Emulation(device=device, model_size=model_size, seq_len=seq_len, batch_size=batch_size, accelerators=n,
                     seq_per_s_per_device=seq_per_s, step_ms=step, global_batch_size=gbs,
                     demand_examples_per_sec=gbs / step * 1000.0, precision=precision, source=source)


def from_config(cfg) -> Emulation | None:
    """The run's Emulation from a RunConfig: emulate.device / step_ms (0 = the profile's) / accelerators,
    model.size, data.seq_len, train.batch_size (per device).  None when emulate.device is "none" and step_ms 0;
    a step_ms with device "none" is a "custom" device."""
    e = cfg.emulate
    if e.device in ("", "none") and not e.step_ms:
        return None
    device = CUSTOM if e.device in ("", "none") else e.device
    return resolve(device, cfg.model.size, cfg.data.seq_len, cfg.train.batch_size, e.accelerators, e.step_ms or None)


def emulated_step(step_ms: float, start: float | None = None, guard_ms: float = 0.3) -> float:
    """Wait until `start + step_ms` (start: a time.perf_counter() value; None = now) without using the CPU:
    sleep to `guard_ms` before the deadline, then spin the last fraction of a millisecond (time.sleep alone
    overshoots by ~0.1 ms).  A deadline already past returns at once.  Returns the ms waited in this call."""
    t0 = time.perf_counter()
    deadline = (t0 if start is None else start) + step_ms / 1000.0
    guard = guard_ms / 1000.0
    while True:
        left = deadline - time.perf_counter()
        if left <= guard:
            break
        time.sleep(left - guard)
    while time.perf_counter() < deadline:
        pass
    return (time.perf_counter() - t0) * 1000.0


def au(compute_ms_total: float, wall_ms_total: float) -> float:
    """Accelerator utilization (MLPerf Storage): emulated compute time ÷ wall time over the measured steps (sum
    over the steps after the first).  0.0 when no wall time was measured; not clipped (> 1 means mis-measured)."""
    if compute_ms_total < 0 or wall_ms_total < 0:
        raise ValueError(f"au: negative time (compute {compute_ms_total} ms, wall {wall_ms_total} ms)")
    return compute_ms_total / wall_ms_total if wall_ms_total > 0 else 0.0


def au_from_steps(step_wall_ms: list[float], step_ms: float) -> float:
    """AU from per-step wall times (ms) of a run whose every step waited `step_ms`: the first step excluded."""
    measured = list(step_wall_ms)[1:]
    return au(step_ms * len(measured), sum(measured))


__all__ = ["Emulation", "load_profiles", "resolve", "from_config", "emulated_step", "au", "au_from_steps",
           "bert_parameters", "DEVICES_FILE", "CUSTOM"]
