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
- input_ops_us: the host input-op split (file reads, preprocessing, enqueue) per profiled step.
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


def input_ops_us(ipa: list, steps: int) -> dict:
    """Input-pipeline op time per profiled step (µs): storage_read (demanded + advanced file read),
    preprocessing, enqueue, unclassified — xprof's host input-op categories, divided by the steps profiled."""
    t = _input_ops_table(ipa)
    p = (t or {}).get("p") or {}
    n = max(1, steps)
    return {
        "storage_read": round((_num(p.get("demanded_file_read_us")) + _num(p.get("advanced_file_read_us"))) / n, 3),
        "preprocessing": round(_num(p.get("preprocessing_us")) / n, 3),
        "enqueue": round(_num(p.get("enqueue_us")) / n, 3),
        "unclassified": round(_num(p.get("unclassified_nonequeue_us")) / n, 3),
    }


def table_meta(ipa: list) -> dict:
    """The step table's properties: hardware_type ("CPU_ONLY", "GPU", "TPU", …) and xprof's input conclusion."""
    p = ((_table_with(ipa, "stepnum") or {}).get("p") or {})
    return {"hardware_type": p.get("hardware_type", ""), "xprof_input_conclusion": p.get("input_conclusion", "")}
