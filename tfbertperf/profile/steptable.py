"""xprof's input_pipeline_analyzer tables mapped onto our categories (parsing stays in xprof; this reads its
gviz-style JSON).

- breakdown_ms: xprof's per-step breakdown (the step table) mapped onto our categories.  Generic table (CPU,
  GPU; XPROF_COLUMNS): infeed → input, deviceCompute → device_compute, hostCompute → host_compute,
  kernelLaunch → kernel_launch, deviceToDevice → device_to_device, deviceCollectives → collectives,
  outfeed → output, compile → compile, other → other.  xprof 2.24's generic table has no host→device column:
  its "Input" is host wait + the copies it recognises as HOST_TO_DEVICE (events named "MemcpyHToD…"), and it
  files TF's CUPTI copies ("MemcpyH2D") as device compute.  move_transfer() puts the copies measured on the
  device planes (profile/devices.py) into host_to_device.  TPU table (TPU_COLUMNS, from xprof's
  op_stats_to_input_pipeline_analysis.cc, GenerateTpuInputPipelineAnalysisDataTable): tcCompute and
  scv0Compute (SparseCore v0) → device_compute, tcInfeed and scv0Infeed → input, tcOutfeed → output,
  tcIdle → other, hostTransfer → host_to_device.  The TPU table has no step-time column: the step is the sum
  of its columns (xprof's TPU step also counts all-reduce time, which the table does not show).
  "other" absorbs any remainder, so the categories sum to the step time exactly.
  On a CPU-only host, TF's kernels run on the host: the training compute is `host_compute`.
- input-op figures (file reads, preprocessing, enqueue, unclassified: xprof's host input-op categories).  xprof
  (op_stats_to_input_pipeline_analysis.cc, GenerateHostResult) sums each input op's *self time* over the host
  op database: every thread, the whole capture (not only the steps of its step table).  Parallel iterators each
  count their own time, and an asynchronous iterator that waits for its buffer (ParallelMap, Prefetch on the
  consumer's thread) counts the wait as self time, because the work it waits on runs on other threads; with
  AUTOTUNE on many cores the sum is several times the wall clock.  So two figures, per step the capture spans
  (capture_steps = the capture's span ÷ the mean step, input_ops_per_step):
    input_ops_us         per step of wall time: the wall time in which at least one input op ran on some thread
                         (union over threads) ÷ capture_steps, split over the categories in proportion to xprof's
                         time; never more than the step;
    input_ops_thread_us  xprof's sum over threads ÷ capture_steps (labelled as such; may exceed the step);
                         their ratio is input_ops_concurrency (the input ops' mean parallelism, waits included).
"""

from __future__ import annotations

import math
import statistics

CATEGORIES = ("input", "host_to_device", "device_compute", "host_compute", "kernel_launch", "device_to_device",
              "collectives", "output", "compile", "other")
# xprof step-table column id → our category
XPROF_COLUMNS = {
    "infeedTimeMs": "input",
    "hostToDeviceTimeMs": "host_to_device",
    "deviceComputeTimeMs": "device_compute",
    "hostComputeTimeMs": "host_compute",
    "kernelLaunchTimeMs": "kernel_launch",
    "deviceToDeviceTimeMs": "device_to_device",
    "deviceCollectivesTimeMs": "collectives",
    "outfeedTimeMs": "output",
    "compileTimeMs": "compile",
    "otherTimeMs": "other",
}
# xprof's TPU step table (input_pipeline_analyzer on a TPU profile) → our category.  "communicationTimeMs"
# belongs to xprof's inference-latency table (host–device communication of a request), not to a step table.
TPU_COLUMNS = {
    "tcComputeTimeMs": "device_compute",
    "scv0ComputeTimeMs": "device_compute",
    "tcInfeedTimeMs": "input",
    "scv0InfeedTimeMs": "input",
    "tcOutfeedTimeMs": "output",
    "tcIdleTimeMs": "other",
    "hostTransferTimeMs": "host_to_device",
}
# Where move_transfer takes device-measured copy time from, in order (see its docstring).
TRANSFER_SOURCES = ("input", "device_compute", "other")
COMPUTE_CATEGORIES = ("device_compute", "host_compute", "kernel_launch", "device_to_device", "collectives")


def _num(v, default=0.0) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return f if math.isfinite(f) else default


def _table_with(doc: list, col_id: str) -> dict | None:
    for t in doc if isinstance(doc, list) else []:
        if any(c.get("id") == col_id for c in t.get("cols", []) or []):
            return t
    return None


def _input_ops_table(doc: list) -> dict | None:
    for t in doc if isinstance(doc, list) else []:
        p = t.get("p") or {}
        if "preprocessing_us" in p or "demanded_file_read_us" in p:
            return t
    return None


def step_rows(ipa: list) -> list[dict]:
    """xprof's per-step rows: [{"step": name, "step_time_ms", <category>: ms …}] from input_pipeline_analyzer."""
    t = _table_with(ipa, "stepnum")
    if t is None:
        return []
    ids = [c.get("id") for c in t.get("cols", [])]
    rows = []
    for r in t.get("rows", []) or []:
        vals = {i: (c or {}).get("v") for i, c in zip(ids, r.get("c", []))}
        row = {"step": str(vals.get("stepnum", "")), **{c: 0.0 for c in CATEGORIES}}
        for col, cat in (*XPROF_COLUMNS.items(), *TPU_COLUMNS.items()):
            row[cat] += _num(vals.get(col))
        parts = sum(row[c] for c in CATEGORIES)
        row["step_time_ms"] = _num(vals.get("stepTimeMs"), parts)
        rows.append(row)
    return rows


def move_transfer(rows: list[dict], h2d_ms: dict[str, float]) -> dict:
    """Put the host→device copy time measured on the device planes into each step row's host_to_device.

    h2d_ms: step name → ms (profile/devices.py h2d_ms_by_step), matched to a row by step number ("train 5" and
    "5" are step 5).  A row whose table already has host_to_device (xprof's TPU table) is left alone.  The
    time moves out of the row's categories in TRANSFER_SOURCES order, each at most what it holds, so the row
    still sums to its step time: first "input" (xprof's Input holds the copies it recognises), then
    "device_compute" (where xprof 2.24 files TF's CUPTI "MemcpyH2D" events: deleting the H2D streams from the
    V100 fixture lowers its device compute, not its input or "All others"), then "other".  Returns
    {"steps_matched", "moved_ms" (sum over rows), "taken_from_ms": {category: sum over rows}}.
    """
    by_number = {step_number(k): v for k, v in h2d_ms.items()}
    taken = {c: 0.0 for c in TRANSFER_SOURCES}
    matched = 0
    for row in rows:
        ms = by_number.get(step_number(row["step"]))
        if ms is None or row["host_to_device"] > 0:
            continue
        matched += 1
        for c in TRANSFER_SOURCES:
            part = min(ms, row[c])
            row[c] -= part
            row["host_to_device"] += part
            taken[c] += part
            ms -= part
    return {"steps_matched": matched, "moved_ms": round(sum(taken.values()), 6),
            "taken_from_ms": {c: round(v, 6) for c, v in taken.items()}}


def step_number(name: str) -> int | None:
    tail = name.strip().split(" ")[-1]
    return int(tail) if tail.lstrip("-").isdigit() else None


def breakdown(rows: list[dict]) -> tuple[float, dict]:
    step_ms = statistics.fmean(r["step_time_ms"] for r in rows)
    bd = {c: statistics.fmean(r[c] for r in rows) for c in CATEGORIES}
    named = sum(v for c, v in bd.items() if c != "other")
    bd["other"] = max(0.0, step_ms - named)  # "other" absorbs the remainder: the categories sum to the step
    if named > step_ms:  # rounding in xprof's columns: scale down so the sum still equals the step time
        scale = step_ms / named
        bd = {c: (v * scale if c != "other" else 0.0) for c, v in bd.items()}
    return step_ms, bd


def input_op_totals_us(ipa: list) -> dict:
    """xprof's input-op time by category (µs), summed over threads and the whole capture (module docstring)."""
    p = (_input_ops_table(ipa) or {}).get("p") or {}
    return {
        "storage_read": _num(p.get("demanded_file_read_us")) + _num(p.get("advanced_file_read_us")),
        "preprocessing": _num(p.get("preprocessing_us")),
        "enqueue": _num(p.get("enqueue_us")),
        "unclassified": _num(p.get("unclassified_nonequeue_us")),
    }


def input_ops_per_step(ipa: list, capture_steps: float, wall_us: float | None) -> dict:
    """{"input_ops_us", "input_ops_thread_us", "input_ops_concurrency", "input_ops_capture_steps"} (module
    docstring).  `capture_steps`:
    the steps the capture spans; `wall_us`: the capture's wall time with an input op running (None: unknown —
    input_ops_us is then the thread sum, and the concurrency None)."""
    totals = input_op_totals_us(ipa)
    n = max(1.0, float(capture_steps))
    thread_sum = sum(totals.values())
    scale = 1.0 if wall_us is None or thread_sum <= 0 else min(1.0, wall_us / thread_sum)
    return {
        "input_ops_us": {k: round(v * scale / n, 3) for k, v in totals.items()},
        "input_ops_thread_us": {k: round(v / n, 3) for k, v in totals.items()},
        "input_ops_concurrency": round(thread_sum / wall_us, 3) if wall_us and thread_sum else None,
        "input_ops_capture_steps": round(n, 3),
    }


def table_meta(ipa: list) -> dict:
    """The step table's properties: hardware_type ("CPU_ONLY", "GPU", "TPU", …) and xprof's input conclusion."""
    p = ((_table_with(ipa, "stepnum") or {}).get("p") or {})
    return {"hardware_type": p.get("hardware_type", ""), "xprof_input_conclusion": p.get("input_conclusion", "")}
