"""Step-time attribution, verdict and advice from a profile (report.json's `attribution`, `verdict`, AU).

Definitions (all times are means over the profiled steps that xprof found from the step markers):

- breakdown_ms: xprof's per-step breakdown (input_pipeline_analyzer's step table) mapped onto our categories:
  infeed → input, hostToDevice → host_to_device (xprof folds it into "input" on most devices; then 0 here),
  deviceCompute → device_compute, hostCompute → host_compute, kernelLaunch → kernel_launch,
  deviceToDevice → device_to_device, deviceCollectives → collectives, outfeed → output, compile → compile,
  other → other.  "other" also absorbs any remainder, so the categories sum to step_time_ms exactly.
  On a CPU-only host, TF's kernels run on the host: the training compute is `host_compute`.
- input_bound_fraction: direct measure — (input + host_to_device) / step time: the share of the step the loop
  stood blocked waiting for data.
- input_cost_fraction: what-if truth from our in-run probe — (T − T_c) / T with T the pipeline-fed step time and
  T_c the compute-only step time (model fed a cached in-memory batch).  None for a foreign profile.
- input_cost_estimate_fraction (additive): for any profile — (blocked get-next + CPU the input pipeline stole
  from compute) / step time, from the host threads in xprof's trace (see profile/contention.py).  Closer to
  the what-if truth than the direct measure when the pipeline competes with compute for CPU cores.
- accelerator_utilization (MLPerf Storage): compute time / total time = T_c / T when the probe ran; otherwise
  the compute categories' share of the step minus the stolen share (i.e. compute not spent on the input
  pipeline's behalf).  au_pass = AU ≥ au_threshold (config profile.au_threshold, default 0.90).
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from tfbertperf.errors import UsageError
from tfbertperf.profile import contention, xprof_tools

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
COMPUTE_CATEGORIES = ("device_compute", "host_compute", "kernel_launch", "device_to_device", "collectives")

# ---- verdict thresholds (the README quotes these) --------------------------------------------------------
INPUT_BOUND_THRESHOLD = 0.20
"""Bottleneck "input" when the input share of the step is ≥ 0.20 — the step would be ≥ 20 % shorter with free
input.  The input share is the best figure available: input_cost_fraction (probe) → input_cost_estimate_fraction
(trace) → input_bound_fraction (direct).  xprof itself calls ≥ 20 % "highly input-bound"."""

TRANSFER_BOUND_THRESHOLD = 0.15
"""Bottleneck "transfer" when host→device copies take ≥ 15 % of the step (and input is below its threshold)."""

OTHER_BOUND_THRESHOLD = 0.30
"""Bottleneck "other" when time outside input and compute (xprof's "other": Python/eager overhead, idle;
plus compile and output) is ≥ 30 % of the step."""

AU_THRESHOLD_DEFAULT = 0.90
"""MLPerf Storage's accelerator-utilization pass mark (compute time / total time)."""

STEP_MARKER_HINT = (
    "wrap each step as `with tf.profiler.experimental.Trace(\"train\", step_num=i, _r=1): batch = next(it); "
    "step(batch)` (next() inside the block), or use tfbertperf.keras.ProfileCallback with model.fit"
)


class NoStepsError(UsageError):
    """The profile holds no step markers xprof recognises."""


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
        for col, cat in XPROF_COLUMNS.items():
            row[cat] += _num(vals.get(col))
        parts = sum(row[c] for c in CATEGORIES)
        row["step_time_ms"] = _num(vals.get("stepTimeMs"), parts)
        rows.append(row)
    return rows


def _step_number(name: str) -> int | None:
    tail = name.strip().split(" ")[-1]
    return int(tail) if tail.lstrip("-").isdigit() else None


def _breakdown(rows: list[dict]) -> tuple[float, dict]:
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


def joined_input_split(ops_us: dict, storage: dict | None) -> dict | None:
    """xprof's input-op split joined with our storage layer's own read time (our runs only).

    Our reads run inside tf.data functions xprof cannot tell from preprocessing: the emulated latency of the
    local backend is a `py_function` in a map, the stream mode's SDK reads run under `from_generator`.  So the
    part of our measured read time (storage.read_ms_per_step: wall time inside reads over the run ÷ steps run)
    that xprof did not already file as a file read is moved to storage_read from preprocessing (then from
    unclassified), never more than those hold.  None when our storage metrics timed no reads.
    """
    read_us = float((storage or {}).get("read_ms_per_step") or 0.0) * 1e3
    if read_us <= 0 or not ops_us:
        return None
    out = {k: float(ops_us.get(k, 0.0)) for k in ("storage_read", "preprocessing", "enqueue", "unclassified")}
    missing = max(0.0, read_us - out["storage_read"])
    for k in ("preprocessing", "unclassified"):
        moved = min(missing, out[k])
        out[k] -= moved
        out["storage_read"] += moved
        missing -= moved
    return {k: round(v, 3) for k, v in out.items()}


def _contention_for(trace: dict, step_names: set[int]) -> dict | None:
    res = contention.step_contention(trace)
    steps = [v for k, v in res["steps"].items() if k in step_names] or list(res["steps"].values())
    if not steps:
        return None
    return {
        "cores": res["cores"],
        "wait_ms": statistics.fmean(s["wait_ms"] for s in steps),
        "stolen_ms": statistics.fmean(s["stolen_ms"] for s in steps),
        "step_ms": statistics.fmean(s["step_ms"] for s in steps),
    }


def attribute_host(xplanes: list[Path], *, step_time_ms: float | None = None,
                   compute_only_step_ms: float | None = None, trace: bool = True) -> dict:
    """The `attribution` block for one set of xplanes (one host, or several combined by xprof).

    Raises NoStepsError when xprof finds no steps.
    """
    ipa = xprof_tools.convert(xplanes, "input_pipeline_analyzer")
    rows = step_rows(ipa)
    if not rows:
        where = Path(xplanes[0]).parent if xplanes else "profile"
        raise NoStepsError(f"{where}: the profile has no step markers xprof recognises; {STEP_MARKER_HINT}")
    prof_step_ms, bd = _breakdown(rows)
    fr = {c: (v / prof_step_ms if prof_step_ms > 0 else 0.0) for c, v in bd.items()}
    input_bound = fr["input"] + fr["host_to_device"]
    T = step_time_ms if step_time_ms else prof_step_ms
    cost = None
    if compute_only_step_ms is not None and T and T > 0:
        cost = max(0.0, min(1.0, (T - compute_only_step_ms) / T))
    estimate = stolen_fraction = None
    cores = None
    if trace:
        numbers = {n for n in (_step_number(r["step"]) for r in rows) if n is not None}
        c = _contention_for(xprof_tools.convert(xplanes, "trace_viewer"), numbers)
        if c and c["step_ms"] > 0:
            cores = c["cores"]
            stolen_fraction = min(1.0, c["stolen_ms"] / c["step_ms"])
            # xprof's own blocked-input share + the stolen share (both of the profiled step)
            estimate = min(1.0, input_bound + stolen_fraction)
    return {
        "source": "xprof",
        "steps_profiled": len(rows),
        "step_time_ms": round(prof_step_ms, 4),
        "breakdown_ms": {c: round(v, 4) for c, v in bd.items()},
        "fractions": {c: round(v, 6) for c, v in fr.items()},
        "input_bound_fraction": round(input_bound, 6),
        "input_cost_fraction": None if cost is None else round(cost, 6),
        "input_cost_estimate_fraction": None if estimate is None else round(estimate, 6),
        "input_stolen_cpu_fraction": None if stolen_fraction is None else round(stolen_fraction, 6),
        "cores_seen": cores,
        "input_ops_us": input_ops_us(ipa, len(rows)),
        "hardware_type": ((_table_with(ipa, "stepnum") or {}).get("p") or {}).get("hardware_type", ""),
        "xprof_input_conclusion": ((_table_with(ipa, "stepnum") or {}).get("p") or {}).get("input_conclusion", ""),
    }


def input_share(att: dict) -> tuple[float, str]:
    """The best input share available and its name (probe → trace estimate → direct)."""
    for key in ("input_cost_fraction", "input_cost_estimate_fraction", "input_bound_fraction"):
        v = att.get(key)
        if v is not None:
            return float(v), key
    return 0.0, "input_bound_fraction"


def accelerator_utilization(att: dict, *, step_time_ms: float | None = None,
                            compute_only_step_ms: float | None = None) -> float:
    """AU = compute time / total time (module docstring)."""
    T = step_time_ms or att.get("step_time_ms") or 0.0
    if compute_only_step_ms is not None and T > 0:
        return max(0.0, min(1.0, compute_only_step_ms / T))
    fr = att["fractions"]
    compute = sum(fr[c] for c in COMPUTE_CATEGORIES)
    compute -= att.get("input_stolen_cpu_fraction") or 0.0
    return max(0.0, min(1.0, compute))


def _cfg_get(config: dict | None, section: str, key: str, default=None):
    if not config:
        return default
    return (config.get(section) or {}).get(key, default)


def actions(bottleneck: str, att: dict, config: dict | None = None, storage: dict | None = None) -> list[dict]:
    """Advice naming the knob and the value, derived from the run's config (RunConfig.to_dict()) when known.

    Returns [{"advice": text, "set": ["section.key=value", …]}], most promising first; "set" holds the
    `--set` overrides that apply the advice to our runs (empty when it is advice for foreign code).
    """
    recs: list[str] = []
    if bottleneck == "input":
        if config:
            pipe = config.get("pipeline") or {}
            data = config.get("data") or {}
            if pipe.get("prefetch") == 0:
                recs.append("prefetch 0 → autotune (--set pipeline.prefetch=autotune)")
            cl = pipe.get("cycle_length")
            if isinstance(cl, int) and cl <= 2:
                recs.append(f"interleave cycle_length {cl} → autotune (--set pipeline.cycle_length=autotune)")
            npc = pipe.get("num_parallel_calls")
            if isinstance(npc, int) and npc <= 2:
                recs.append(f"num_parallel_calls {npc} → autotune (--set pipeline.num_parallel_calls=autotune)")
            if pipe.get("parse_after_batch") is False:
                recs.append("parse after batch: vectorized parse_example (--set pipeline.parse_after_batch=true)")
            if pipe.get("preset") == "naive":
                recs.append("pipeline preset naive → tuned (--set pipeline.preset=tuned)")
            uri = str(data.get("uri") or "")
            mode = data.get("mode")
            if uri.startswith(("gs://", "az://")) and mode in ("native", "stream"):
                recs.append(f"stage remote shards: data.mode {mode} → stage (--set data.mode=stage)")
            if pipe.get("tokenize") == "inline":
                recs.append("tokenize offline: pipeline.tokenize inline → pretokenized (--set pipeline.tokenize=pretokenized)")
            if pipe.get("cache") == "none":
                recs.append("cache after parse when the data fits in memory (--set pipeline.cache=memory)")
        else:
            ops = att.get("input_split_us") or att.get("input_ops_us") or {}
            if ops.get("storage_read", 0) >= ops.get("preprocessing", 0):
                recs.append("reads dominate the input pipeline: interleave files in parallel (cycle_length → "
                            "autotune), prefetch → autotune, stage remote shards to local disk")
            else:
                recs.append("preprocessing dominates: map num_parallel_calls → autotune, vectorize (map after "
                            "batch), cache after parse, or preprocess offline")
            recs.append("prefetch → autotune at the end of the pipeline")
        if storage and storage.get("request_latency_ms", {}).get("p50", 0) > 10:
            recs.append(f"storage latency p50 {storage['request_latency_ms']['p50']} ms per request: stage remote "
                        "shards (--set data.mode=stage) or raise data.concurrency")
    elif bottleneck == "transfer":
        recs.append("host→device copies dominate: prefetch to device (tf.data.experimental.prefetch_to_device), "
                    "larger batches, or mixed precision (--set train.precision=mixed_bfloat16)")
    elif bottleneck == "other":
        recs.append("time outside input and compute (Python/eager overhead): compile the step (--set train.jit=true), "
                    "raise the batch size, run several steps per tf.function call")
    else:
        cpu_only = att.get("hardware_type") == "CPU_ONLY"
        if config and not _cfg_get(config, "train", "jit", False):
            recs.append("compute-bound: XLA jit false → true (--set train.jit=true)")
        # Reduced precision pays on accelerators; on a CPU without bf16 units it was measured slower here
        # (tiny BERT, 2 cores: 0.69× with mixed_bfloat16), so it is not advised for CPU-only profiles.
        if config and _cfg_get(config, "train", "precision") == "float32" and not cpu_only:
            recs.append("compute-bound: mixed precision float32 → mixed_bfloat16 (--set train.precision=mixed_bfloat16)")
        if cpu_only:
            recs.append("compute-bound on CPU: the input pipeline keeps up; more cores or an accelerator is what "
                        "speeds this step up")
        if not recs:
            recs.append("compute-bound: the input pipeline keeps up; speed comes from the model side "
                        "(precision, XLA, faster accelerator)")
    out = []
    for text in recs:
        sets = re.findall(r"--set ([a-z_]+\.[a-z_]+=[A-Za-z0-9_.]+)", text)
        out.append({"advice": text, "set": sets})
    return out


def recommendations(bottleneck: str, att: dict, config: dict | None = None, storage: dict | None = None) -> list[str]:
    """The advice texts of actions() (report.json verdict.recommendations)."""
    return [a["advice"] for a in actions(bottleneck, att, config, storage)]


def verdict(att: dict, au: float, *, config: dict | None = None, storage: dict | None = None,
            au_threshold: float = AU_THRESHOLD_DEFAULT) -> dict:
    """{"bottleneck", "summary", "recommendations"} from an attribution block (thresholds: module constants)."""
    fr = att["fractions"]
    share, source = input_share(att)
    other = fr["other"] + fr["compile"] + fr["output"]
    if share >= INPUT_BOUND_THRESHOLD:
        bottleneck = "input"
    elif fr["host_to_device"] >= TRANSFER_BOUND_THRESHOLD:
        bottleneck = "transfer"
    elif other >= OTHER_BOUND_THRESHOLD:
        bottleneck = "other"
    else:
        bottleneck = "compute"
    label = {"input_cost_fraction": "what-if probe", "input_cost_estimate_fraction": "wait + stolen CPU",
             "input_bound_fraction": "blocked wait"}[source]
    what = {"input": "input-bound", "compute": "compute-bound", "transfer": "transfer-bound",
            "other": "bound by other time (Python/eager overhead, idle)"}[bottleneck]
    summary = (f"{what}: input costs {share:.0%} of the {att['step_time_ms']:.1f} ms step ({label}; blocked wait "
               f"{att['input_bound_fraction']:.0%}); AU {au:.0%} {'≥' if au >= au_threshold else '<'} "
               f"{au_threshold:.0%} → {'pass' if au >= au_threshold else 'fail'}")
    acts = actions(bottleneck, att, config, storage)
    return {"bottleneck": bottleneck, "summary": summary,
            "recommendations": [a["advice"] for a in acts], "actions": acts}


def attribute(xplanes, *, step_time_ms: float | None = None, compute_only_step_ms: float | None = None,
              storage: dict | None = None, config: dict | None = None, trace: bool = True) -> dict:
    """Attribution, verdict and AU for a profile session (DESIGN.md report.json sections).

    Args:
      xplanes: the session's `.xplane.pb` files (see xprof_tools.find_xplanes), or anything find_xplanes takes.
      step_time_ms: mean step time T from the run's step timer (ms); default: xprof's mean profiled step.
      compute_only_step_ms: T_c from the what-if probe (ms); None for a foreign profile.
      storage: report.json `storage` block (adds latency-based advice).
      config: RunConfig.to_dict() of the run (advice names its knobs; profile.au_threshold).
      trace: also read xprof's trace for input_cost_estimate_fraction (costs a second conversion).
    Returns:
      {"attribution": {...}, "verdict": {...}, "accelerator_utilization": float,
       "hosts": {host: attribution block}}; with several hosts the top-level attribution is xprof's combined
      view, and the estimate/stolen share are the mean of the hosts'.
    Raises:
      NoStepsError (a UsageError) when the profile has no step markers; UsageError for unreadable profiles.
    """
    if not (isinstance(xplanes, (list, tuple)) and xplanes and all(str(x).endswith(".xplane.pb") for x in xplanes)):
        xplanes = xprof_tools.find_xplanes(xplanes)
    xplanes = [Path(x) for x in xplanes]
    hosts = xprof_tools.by_host(xplanes)
    per_host = {h: attribute_host(files, step_time_ms=step_time_ms, compute_only_step_ms=compute_only_step_ms,
                                  trace=trace)
                for h, files in hosts.items()}
    if len(per_host) == 1:
        att = dict(next(iter(per_host.values())))
    else:
        att = attribute_host(xplanes, step_time_ms=step_time_ms, compute_only_step_ms=compute_only_step_ms,
                             trace=False)
        est = [a["input_stolen_cpu_fraction"] for a in per_host.values() if a["input_stolen_cpu_fraction"] is not None]
        if est:
            stolen = statistics.fmean(est)
            att["input_stolen_cpu_fraction"] = round(stolen, 6)
            att["input_cost_estimate_fraction"] = round(min(1.0, att["input_bound_fraction"] + stolen), 6)
    split = joined_input_split(att.get("input_ops_us") or {}, storage)
    if split is not None:
        att["input_split_us"] = split
    threshold = float(_cfg_get(config, "profile", "au_threshold", AU_THRESHOLD_DEFAULT) or AU_THRESHOLD_DEFAULT)
    au = accelerator_utilization(att, step_time_ms=step_time_ms, compute_only_step_ms=compute_only_step_ms)
    att["au_threshold"] = threshold
    att["au_pass"] = bool(au >= threshold)
    return {
        "attribution": att,
        "verdict": verdict(att, au, config=config, storage=storage, au_threshold=threshold),
        "accelerator_utilization": round(au, 6),
        "hosts": per_host,
    }


def step_timer_summary(step_times_ms, input_wait_ms, warmup_steps: int) -> dict:
    """report.json `step_timer` from the always-on timer.

    Args:
      step_times_ms: wall time of every step (get-next + step), ms, in order.
      input_wait_ms: per step, wall time blocked in next(iterator), ms.
      warmup_steps: leading steps left out (tracing/compilation).
    Returns:
      {"steps": steps counted, "input_wait_fraction": Σ wait / Σ step time,
       "compute_fraction": 1 − input_wait_fraction} over the steps after warm-up (0.0s when none remain).
    """
    st = list(step_times_ms)[warmup_steps:]
    wt = list(input_wait_ms)[warmup_steps:]
    total = sum(st)
    if not st or total <= 0:
        return {"steps": len(st), "input_wait_fraction": 0.0, "compute_fraction": 0.0}
    wait = min(total, sum(wt[: len(st)]))
    f = wait / total
    return {"steps": len(st), "input_wait_fraction": round(f, 6), "compute_fraction": round(1.0 - f, 6)}
