"""The advice table: what to change for each bottleneck, as data (one row per piece of advice, most promising
first within a bottleneck).  Adding advice — for a new knob or a new kind of hardware — is adding a row.

A row applies when its bottleneck matches the verdict's, its `hardware` includes the profile's kind
("cpu" for xprof's CPU_ONLY, "gpu", "tpu"; "any" for all), its `runs` fits ("ours": the run's config is known,
"foreign": `analyze` on someone else's program, "any") and its `when` test holds.  Its text is a format string
over the context: `pipe`, `data`, `train` (the run's config sections), `storage` (report.json's storage
block), `ops` (the input-op split).  "--set section.key=value" in a text is what `analyze --validate` applies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Advice:
    bottleneck: str  # input | transfer | other | compute
    text: str  # str.format template over the context (module docstring)
    when: Callable[[dict], bool] = lambda c: True
    hardware: tuple[str, ...] = ("any",)
    runs: str = "any"  # ours | foreign | any
    fallback: bool = False  # only when no other row of this bottleneck applied


def _small_int(v) -> bool:
    return isinstance(v, int) and v <= 2


ADVICE: tuple[Advice, ...] = (
    # ---- input-bound, our runs: the knob and its value
    Advice("input", "prefetch 0 → autotune (--set pipeline.prefetch=autotune)",
           lambda c: c["pipe"].get("prefetch") == 0, runs="ours"),
    Advice("input", "interleave cycle_length {pipe[cycle_length]} → autotune (--set pipeline.cycle_length=autotune)",
           lambda c: _small_int(c["pipe"].get("cycle_length")), runs="ours"),
    Advice("input", "num_parallel_calls {pipe[num_parallel_calls]} → autotune "
                    "(--set pipeline.num_parallel_calls=autotune)",
           lambda c: _small_int(c["pipe"].get("num_parallel_calls")), runs="ours"),
    Advice("input", "parse after batch: vectorized parse_example (--set pipeline.parse_after_batch=true)",
           lambda c: c["pipe"].get("parse_after_batch") is False, runs="ours"),
    Advice("input", "pipeline preset naive → tuned (--set pipeline.preset=tuned)",
           lambda c: c["pipe"].get("preset") == "naive", runs="ours"),
    Advice("input", "stage remote shards: data.mode {data[mode]} → stage (--set data.mode=stage)",
           lambda c: str(c["data"].get("uri") or "").startswith(("gs://", "az://"))
           and c["data"].get("mode") in ("native", "stream"), runs="ours"),
    Advice("input", "tokenize offline: pipeline.tokenize inline → pretokenized (--set pipeline.tokenize=pretokenized)",
           lambda c: c["pipe"].get("tokenize") == "inline", runs="ours"),
    Advice("input", "cache after parse when the data fits in memory (--set pipeline.cache=memory)",
           lambda c: c["pipe"].get("cache") == "none", runs="ours"),
    # ---- input-bound, foreign programs: what to look at in their pipeline
    Advice("input", "reads dominate the input pipeline: interleave files in parallel (cycle_length → autotune), "
                    "prefetch → autotune, stage remote shards to local disk",
           lambda c: c["ops"].get("storage_read", 0) >= c["ops"].get("preprocessing", 0), runs="foreign"),
    Advice("input", "preprocessing dominates: map num_parallel_calls → autotune, vectorize (map after batch), "
                    "cache after parse, or preprocess offline",
           lambda c: c["ops"].get("storage_read", 0) < c["ops"].get("preprocessing", 0), runs="foreign"),
    Advice("input", "prefetch → autotune at the end of the pipeline", runs="foreign"),
    Advice("input", "storage latency p50 {storage[request_latency_ms][p50]} ms per request: stage remote shards "
                    "(--set data.mode=stage) or raise data.concurrency",
           lambda c: (c["storage"].get("request_latency_ms") or {}).get("p50", 0) > 10),
    # ---- transfer-bound
    Advice("transfer", "host→device copies dominate: prefetch to device (tf.data.experimental.prefetch_to_device), "
                       "larger batches, or mixed precision (--set train.precision=mixed_bfloat16)"),
    # ---- other (Python/eager overhead, idle)
    Advice("other", "time outside input and compute (Python/eager overhead): compile the step "
                    "(--set train.jit=true), raise the batch size, run several steps per tf.function call"),
    # ---- compute-bound
    Advice("compute", "compute-bound: XLA jit false → true (--set train.jit=true)",
           lambda c: not c["train"].get("jit", False), runs="ours"),
    # Reduced precision pays on accelerators; on a CPU without bf16 units it was measured slower here
    # (tiny BERT, 2 cores: 0.69× with mixed_bfloat16), so it is not advised for CPU-only profiles.
    Advice("compute", "compute-bound: mixed precision float32 → mixed_bfloat16 (--set train.precision=mixed_bfloat16)",
           lambda c: c["train"].get("precision") == "float32", hardware=("gpu", "tpu", "unknown"), runs="ours"),
    Advice("compute", "compute-bound on CPU: the input pipeline keeps up; more cores or an accelerator is what "
                      "speeds this step up", hardware=("cpu",)),
    Advice("compute", "compute-bound: the input pipeline keeps up; speed comes from the model side "
                      "(precision, XLA, faster accelerator)", fallback=True),
)

_HARDWARE = {"CPU_ONLY": "cpu", "GPU": "gpu", "TPU": "tpu"}


def hardware_kind(hardware_type: str | None) -> str:
    """xprof's hardware_type ("CPU_ONLY", "GPU", "TPU", "") → an ADVICE hardware name ("" → "unknown")."""
    return _HARDWARE.get(str(hardware_type or "").upper(), "unknown")


def actions(bottleneck: str, att: dict, config: dict | None = None, storage: dict | None = None) -> list[dict]:
    """Advice naming the knob and the value (the rows of ADVICE that apply), most promising first.

    Returns [{"advice": text, "set": ["section.key=value", …]}]; "set" holds the `--set` overrides that apply
    the advice to our runs (empty when it is advice for foreign code).
    """
    ctx = {"pipe": (config or {}).get("pipeline") or {}, "data": (config or {}).get("data") or {},
           "train": (config or {}).get("train") or {}, "storage": storage or {},
           "ops": att.get("input_split_us") or att.get("input_ops_us") or {}}
    kind = hardware_kind(att.get("hardware_type"))
    runs = "ours" if config else "foreign"
    texts: list[str] = []
    for row in ADVICE:
        if row.bottleneck != bottleneck or row.runs not in (runs, "any"):
            continue
        if "any" not in row.hardware and kind not in row.hardware:
            continue
        if row.fallback and texts:
            continue
        if row.when(ctx):
            texts.append(row.text.format(**ctx))
    return [{"advice": t, "set": re.findall(r"--set ([a-z_]+\.[a-z_]+=[A-Za-z0-9_.]+)", t)} for t in texts]
