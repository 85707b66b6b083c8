"""The advice table: what to change for each bottleneck, as data (one row per piece of advice, most promising
first within a bottleneck).  Adding advice — for a new knob or a new kind of hardware — is adding a row.

A row applies when its bottleneck matches the verdict's, its `hardware` includes the profile's kind
("cpu" for xprof's CPU_ONLY, "gpu", "tpu"; "any" for all), its `runs` fits ("ours": the run's config is known,
"foreign": `analyze` on someone else's program, "any") and its `when` test holds.  Its text is a format string
over the context: `pipe`, `data`, `train` (the run's config sections), `storage` (report.json's storage
block), `ops` (the input-op split), `hw` (the accelerator's facts, profile/accelerator_facts.py classify_device; {} on
the host), `precision` (the Keras policy the hardware runs fast: mixed_float16 below compute capability 8.0 and
on T4/V100, mixed_bfloat16 from 8.0, on AMD matrix cores and TPU; "float32" otherwise), `launch` (the kernel
launch share of the step), `h2d` (the host→device share), `bigger_batch` (twice the run's batch size),
`cpu_bf16` (the run's CPU multiplies bfloat16 in hardware: True/False, None when its flags are unknown).
Bottleneck "any": a row that applies whatever bounds the step (a setting that slows this hardware down);
"--set section.key=value" in a text is what `analyze --validate` applies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from tfbertperf.profile.accelerator_facts import cpu_bf16_capable, measured_facts
from tfbertperf.profile.loaders import (LOADER_COMPUTES_SHARE, PYTHON_LOADER_SHARE, _PY_ELSE,  # noqa: F401
                                        _PY_SOURCE, _generator_share, _host_loader, _loader_computes,
                                        _loader_not_tfdata, _loader_thread, _loader_waits, _lock_held, _lock_light,
                                        _python_loader, _unseen, remedies as _loader_remedies)
from tfbertperf.profile.prefetch_stats import map_remedy


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


LAUNCH_BOUND_SHARE = 0.15
"""Launch-bound advice when kernel launches take ≥ 15 % of the step (xprof's "highly" kernel-launch bound)."""

COMPUTE_BOUND_BUSY = 0.75
"""A device that computes for ≥ 75 % of the step as the program runs without the profiler (attribution.unprofiled)
is compute-bound even where the host's dispatch takes the rest: taking all of that host time away would speed the
step up by at most 1.33×: the device's own work is the larger lever (issue 29: the H100 BERT-large capture, busy ~29
of its 36 ms unprofiled step).  Not for a captured view alone: its launch share holds the profiler's cost."""

PRECISION_BUSY_SHARE = 0.5
"""Mixed-precision advice also where the step is not compute-bound, when the device computes ≥ 50 % of the step in
float32 matrix kernels (then on its critical path).  Measured (issue 29, tests/fixtures/h200): a JAX BERT-base step
read launch-bound, busy 63 % of the unprofiled step in float32 (TF32) kernels, ran 1.40× faster in bfloat16."""


def _float32_busy(c: dict) -> bool:
    return _reduced_precision(c) and c["matmul"] == "f32" and c["busy"] >= PRECISION_BUSY_SHARE


def _launch_bound(c: dict) -> bool:
    return c["launch"] >= LAUNCH_BOUND_SHARE and c["busy_unprofiled"] < COMPUTE_BOUND_BUSY


def _not_compiled(c: dict) -> bool:
    """XLA advice only where the capture shows no XLA programs on the device (None: unknown, e.g. xprof only)."""
    return c["xla"] is not True


def _jit_pays(c: dict) -> bool:
    """Our run's step is not compiled yet (train.jit false, no XLA programs in the capture)."""
    return _not_compiled(c) and not c["train"].get("jit")


def _matmul_f32(c: dict) -> bool:
    """Mixed-precision advice only where the matrix kernels run float32 (or the capture cannot say)."""
    return c["matmul"] in (None, "f32")


AT_THE_END = ("Iterator::Root::Prefetch", "the prefetch tf.data injects at the end",
              "prefetch(tf.data.AUTOTUNE) at the end")
"""An autotuned prefetch at the pipeline's root, as the capture (trace.py) or the dataset (autotuned_prefetch.py) names
it: no advice to add one."""


def _tfdata_input(c: dict) -> bool:
    """The input is tf.data's own work: advice about its maps, reads and prefetch applies."""
    return not _loader_not_tfdata(c) and not _python_loader(c) and not _host_loader(c) and not _unseen(c) \
        and not _loader_thread(c) and not _lock_held(c)


def _reduced_precision(c: dict) -> bool:
    return c["precision"] != "float32"


def _cpu_slow_precision(c: dict) -> bool:
    """A reduced-precision policy this CPU runs slower than float32: float16 always (CPUs have no fast float16
    matrix kernels; 239 vs 165 ms/step measured on the default run, issue 17), bfloat16 without AVX512-BF16 /
    AMX (`cpu_bf16` False; unknown flags make no claim)."""
    p = c["train"].get("precision")
    return p == "mixed_float16" or (p == "mixed_bfloat16" and c["cpu_bf16"] is False)


ADVICE: tuple[Advice, ...] = (
    # ---- any bottleneck: a setting that makes this hardware slower, whatever bounds the step
    Advice("any", "train.precision {train[precision]} → float32 on this CPU: it has no fast kernels for that "
                  "precision, so every step converts and runs slower (--set train.precision=float32)",
           _cpu_slow_precision, hardware=("cpu",), runs="ours"),
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
    Advice("input", "the measured what-if puts {measured:.0%} of the step in input, the capture sees {seen:.0%}: the "
                    "pipeline works where this capture does not record it (jax.profiler records no tf.data threads, "
                    "and no wait for the interpreter lock a Python loader thread holds) — look at the pipeline "
                    "itself: tf.data's map(num_parallel_calls=AUTOTUNE),{end_prefetch} cache after the costly step; "
                    "a Python loader's work in processes (PyDataset(workers=N, use_multiprocessing=True)); or "
                    "prepare the batches offline", _unseen, runs="foreign"),
    Advice("input", _PY_SOURCE + " and its Python computes (it wanted {loader_ms:.1f} ms of CPU a {step_ms:.1f} "
                    "ms step), out of reach of tf.data's parallel map and prefetch: {computes_remedy}",
           lambda c: _python_loader(c) and _loader_computes(c), runs="foreign"),
    Advice("input", _PY_SOURCE + " and mostly wait (the loader wanted {loader_ms:.1f} ms of CPU a {step_ms:.1f} ms "
                    "step), out of reach of tf.data's parallel map and prefetch: {waits_remedy}",
           lambda c: _python_loader(c) and _loader_waits(c), runs="foreign"),
    Advice("input", _PY_SOURCE + ", out of reach of tf.data's parallel map and prefetch: load them in parallel — "
                    "PyDataset(workers=N), with use_multiprocessing=True for CPU-heavy __getitem__ — " + _PY_ELSE,
           lambda c: _python_loader(c) and c["loader_ms"] is None, runs="foreign"),
    Advice("input", "reads dominate the input pipeline: interleave files in parallel (cycle_length → autotune), "
                    "prefetch → autotune, stage remote shards to local disk",
           lambda c: _tfdata_input(c) and c["ops"].get("storage_read", 0) >= c["ops"].get("preprocessing", 0),
           runs="foreign"),
    Advice("input", "preprocessing dominates: {map_remedy}",
           lambda c: _tfdata_input(c) and c["ops"].get("storage_read", 0) < c["ops"].get("preprocessing", 0),
           runs="foreign"),
    Advice("input", "prefetch → autotune at the end of the pipeline (to train with: a what-if measured under it "
                    "reads low, measure with a fixed size)",  # not where the capture shows one there
           lambda c: _tfdata_input(c) and not c["root_autotuned"], runs="foreign"),
    Advice("input", "the training thread waits {held:.0%} of the step for the interpreter lock its loader thread "
                    "holds (Python and NumPy in threads run one at a time): move the loader's work to processes (a "
                    "multiprocessing pool, PyDataset(workers=N, use_multiprocessing=True), or a tf.data pipeline) or "
                    "let it release the lock (NumPy on whole arrays, not a Python loop over examples)",
           lambda c: _lock_held(c) and not _lock_light(c), runs="foreign"),
    Advice("input", "the training thread waits {held:.0%} of the step for the interpreter lock its loader threads "
                    "hold, for light Python ({input_cpu:.1f} ms of their CPU a {step_ms:.1f} ms step): make it release "
                    "the lock — NumPy on whole arrays, not a Python loop over examples; cache what does not change "
                    "between epochs — or build the input in tf.data; worker processes hand each batch over at a cost "
                    "such a loader does not win back", _lock_light, runs="foreign"),
    Advice("input", "the training thread waits {input:.0%} of the step in its own loader while the device idles: "
                    "load batches ahead of the step, off that thread — a background loader thread or a tf.data "
                    "pipeline with prefetch (and prefetch_to_device), so the next batch is ready when a step ends",
           lambda c: _loader_not_tfdata(c) and not _lock_held(c), runs="foreign"),
    Advice("input", "the training thread spends {input:.0%} of the step in its own Python loader, in line with the "
                    "compute: load batches ahead of the step, off that thread — a background thread (processes for "
                    "CPU-heavy Python), or a tf.data pipeline with prefetch", _host_loader, runs="foreign"),
    Advice("input", "a loader runs ahead of the step in a thread or a process (the training thread waits {input:.0%} of "
                    "it), and its CPU takes {stolen:.0%} of the step from XLA's compute on the same {cores} cores: make "
                    "each batch cheaper (NumPy on whole arrays, not a loop over examples; cache what does not change "
                    "between epochs), prepare the batches offline, or give the process more cores than the compute "
                    "uses",
           _loader_thread, runs="foreign"),
    Advice("input", "storage latency p50 {storage[request_latency_ms][p50]} ms per request: stage remote shards "
                    "(--set data.mode=stage) or raise data.concurrency",
           lambda c: (c["storage"].get("request_latency_ms") or {}).get("p50", 0) > 10),
    # ---- transfer-bound (host→device time: device copies, and host staging on device-idle readings)
    Advice("transfer", "host→device copies take {h2d:.0%} of the step: stage batches on the device ahead of the "
                       "step (--set pipeline.device_prefetch=2)",
           lambda c: not c["pipe"].get("device_prefetch"), hardware=("gpu",), runs="ours"),
    Advice("transfer", "host→device runs at {tr[effective_gb_per_s]:.1f} GB/s, pageable-memory speed (pinned "
                       "{tr[pinned_gb_per_s]:.1f} GB/s here, {tr[pinned_basis]}): copy from pinned host memory — "
                       "tf.data prefetch_to_device / a distributed dataset (experimental_fetch_to_device) stage "
                       "through pinned buffers; JAX: device_put from a pinned_host array; PyTorch: pin_memory=True",
           lambda c: c["tr"].get("memory") == "pageable"),
    Advice("transfer", "host→device copies take {h2d:.0%} of the step: overlap them with compute — prefetch to the "
                       "device (tf.data.experimental.prefetch_to_device or a distributed dataset's experimental_"
                       "fetch_to_device; JAX: device_put the next batches from a background thread), and send "
                       "fewer bytes per step (int32 token ids instead of float32 embeddings, no padding beyond the "
                       "longest sequence)", runs="foreign"),
    # ---- launch-bound (the host cannot issue kernels fast enough): more work per launch.  XLA only where the
    # device ran no XLA programs (program_facts.xla_compiled).
    Advice("compute", "kernel launches take {launch:.0%} of the step: more work per launch — raise the batch size "
                      "(--set train.batch_size={bigger_batch}) and compile the step (--set train.jit=true)",
           lambda c: _launch_bound(c) and _jit_pays(c), hardware=("gpu", "tpu"), runs="ours"),
    Advice("compute", "kernel launches take {launch:.0%} of the step: more work per launch — raise the batch size "
                      "(--set train.batch_size={bigger_batch})",
           lambda c: _launch_bound(c) and not _jit_pays(c), hardware=("gpu", "tpu"), runs="ours"),
    Advice("compute", "kernel launches take {launch:.0%} of the step: more work per launch — raise the batch size, "
                      "run several steps per call (Keras `steps_per_execution`, or a loop inside one compiled "
                      "function){xla_words}", _launch_bound, hardware=("gpu", "tpu"), runs="foreign"),
    Advice("other", "kernel launches take {launch:.0%} of the step: the host issues work slower than the device "
                    "runs it — more work per launch: raise the batch size{bigger_set}, run several steps per call "
                    "(a loop inside one compiled function, Keras `steps_per_execution`){graph_words}{xla_words}", _launch_bound, hardware=("gpu", "tpu")),
    Advice("other", "the device computes {busy:.0%} of the step, its matrix kernels in float32, on {hw[family]}: "
                    "mixed precision float32 → {precision} (--set train.precision={precision}){speedup_words}",
           lambda c: _float32_busy(c) and c["train"].get("precision") == "float32", hardware=("gpu", "tpu"),
           runs="ours"),
    Advice("other", "the device computes {busy:.0%} of the step, its matrix kernels in float32, on {hw[family]}: "
                    "mixed precision — keras.mixed_precision.set_global_policy(\"{precision}\"); JAX: compute in "
                    "{compute_dtype} (cast the parameters and activations in the step){speedup_words}",
           _float32_busy, hardware=("gpu", "tpu"), runs="foreign"),
    # ---- other (Python/eager overhead, idle)
    Advice("other", "time outside input and compute (Python/eager overhead): compile the step "
                    "(--set train.jit=true), raise the batch size, run several steps per tf.function call",
           lambda c: not _launch_bound(c) and not c["train"].get("jit"), hardware=("gpu", "tpu", "unknown"),
           runs="ours"),
    # On a CPU XLA measured 0.88× on the default run (issue 17): more work per step amortizes the overhead instead.
    Advice("other", "time outside input and compute (Python/eager overhead): more work per step amortizes it — "
                    "raise the batch size (--set train.batch_size={bigger_batch})",
           hardware=("cpu",), runs="ours"),
    Advice("other", "time outside input and compute (Python/eager overhead, an idle device): raise the batch size, "
                    "run several steps per call (Keras `steps_per_execution`){xla_words}",
           lambda c: not _launch_bound(c), runs="foreign"),
    # ---- compute-bound
    # XLA on the CPU measured 0.88× on the default run (issue 17): advised only where it pays.
    Advice("compute", "compute-bound: XLA jit false → true (--set train.jit=true)",
           lambda c: not c["train"].get("jit", False) and _not_compiled(c), hardware=("gpu", "tpu", "unknown"),
           runs="ours"),
    # Reduced precision pays on accelerators with matrix units for it: float16 Tensor Cores from compute
    # capability 7.0 (V100, T4), bfloat16 from 8.0 and on TPU (accelerator_facts.py).  On a CPU float16 is never advised
    # (slower everywhere), bfloat16 only with AVX512-BF16 or AMX in the run's CPU flags (measured on such a
    # 2-core VM: 1.06–1.21×; without them TF emulates bfloat16 and it is slower than float32).
    Advice("compute", "compute-bound on {hw[family]}: mixed precision float32 → {precision} "
                      "(--set train.precision={precision}){speedup_words}",
           lambda c: _reduced_precision(c) and _matmul_f32(c) and c["train"].get("precision") == "float32",
           hardware=("gpu", "tpu"), runs="ours"),
    Advice("compute", "compute-bound on {hw[family]}: mixed precision — "
                      "keras.mixed_precision.set_global_policy(\"{precision}\") (Keras 3, any backend){speedup_words}",
           lambda c: _reduced_precision(c) and _matmul_f32(c), hardware=("gpu", "tpu"), runs="foreign"),
    Advice("compute", "compute-bound: compile the step with XLA (tf.function(jit_compile=True))",
           _not_compiled, hardware=("gpu", "tpu"), runs="foreign"),
    Advice("compute", "compute-bound on a CPU with AVX512-BF16/AMX: mixed precision float32 → mixed_bfloat16 "
                      "(--set train.precision=mixed_bfloat16; a modest gain, 1.06–1.21× measured on such a CPU)",
           lambda c: c["cpu_bf16"] is True and c["train"].get("precision") == "float32", hardware=("cpu",),
           runs="ours"),
    Advice("compute", "compute-bound on CPU: the input pipeline keeps up; more cores or an accelerator is what "
                      "speeds this step up", hardware=("cpu",)),
    Advice("compute", "compute-bound: the input pipeline keeps up; speed comes from the model side "
                      "(precision, XLA, faster accelerator)", fallback=True),
)

_HARDWARE = {"CPU_ONLY": "cpu", "GPU": "gpu", "TPU": "tpu"}


def hardware_kind(hardware_type: str | None) -> str:
    """xprof's hardware_type ("CPU_ONLY", "GPU", "TPU", "") → an ADVICE hardware name ("" → "unknown")."""
    return _HARDWARE.get(str(hardware_type or "").upper(), "unknown")


def actions(bottleneck: str, att: dict, config: dict | None = None, storage: dict | None = None,
            cpu_flags=None) -> list[dict]:
    """Advice naming the knob and the value (the rows of ADVICE that apply), most promising first.
    `cpu_flags`: the run's CPU flags (environment cpu.flags); None = unknown (no bfloat16 claim for the CPU).

    Returns [{"advice": text, "set": ["section.key=value", …]}]; "set" holds the `--set` overrides that apply
    the advice to our runs (empty when it is advice for foreign code).
    """
    kind = hardware_kind(att.get("hardware_type"))
    hw = dict(att.get("accelerator") or {})
    if kind == "tpu" and not hw:
        hw = {"family": "TPU", "recommended_precision": "mixed_bfloat16"}
    hw.setdefault("family", "this accelerator")
    train = (config or {}).get("train") or {}
    # the shares of the program as it runs without the profiler where they were measured (profile/unprofiled.py)
    fr = (att.get("unprofiled") or {}).get("fractions") or att.get("fractions") or {}
    ctx = {"pipe": (config or {}).get("pipeline") or {}, "data": (config or {}).get("data") or {},
           "train": train, "storage": storage or {}, "ops": att.get("input_split_us") or att.get("input_ops_us") or {},
           "hw": hw, "precision": hw.get("recommended_precision") or "float32",
           "launch": float(fr.get("kernel_launch") or 0.0), "h2d": float(fr.get("host_to_device") or 0.0),
           "input": float(fr.get("input") or 0.0) + float(fr.get("host_to_device") or 0.0) * (  # + a hand-off
               "hand_off_ms_per_step" in (att.get("transfer") or {})), "xla": att.get("xla_compiled"),
           "busy": float(fr.get("device_compute") or 0.0), "held": float(att.get("input_interpreter_held_ms") or 0.0)
           * float(fr.get("input") or 0.0) / max(1e-9, float((att.get("breakdown_ms") or {}).get("input") or 0.0)),
           "busy_unprofiled": float(fr.get("device_compute") or 0.0) if att.get("unprofiled") else 0.0,
           "matmul": att.get("matmul_precision"), "tr": att.get("transfer") or {},
           "idle": att.get("source") == "device_idle",
           "pyloader": _generator_share(att), "loader_ms": att.get("input_loader_wanted_ms_per_step"),
           "pyframes": att.get("input_python_loader_ms_per_step"),
           "input_cpu": att.get("input_cpu_ms_per_step"),
           "step_ms": float(att.get("step_time_ms") or 0.0), "measured": att.get("input_cost_fraction")
           if att.get("au_compute_only_ratio") is not None else None,
           "estimate": float(att.get("input_cost_estimate_fraction") or 0.0), "cores": att.get("cores_seen"),
           "stolen": float(att.get("input_stolen_cpu_fraction") or 0.0),
           "root_autotuned": any(f["iterator"] in AT_THE_END for f in att.get("autotuned_prefetch") or ()),
           "bigger_batch": 2 * int(train.get("batch_size") or 16),
           "cpu_bf16": None if not cpu_flags else cpu_bf16_capable(cpu_flags)}
    ctx.update(_loader_remedies(att.get("input_loader_workers"), ctx["input"], ctx["estimate"]))  # its workers
    ctx["map_remedy"] = map_remedy(att.get("tfdata_maps"))  # what its tf.data maps already run
    ctx["seen"] = max(ctx["input"], ctx["estimate"])  # the capture's whole input reading: wait and stolen CPU
    ctx["end_prefetch"] = "" if ctx["root_autotuned"] else " prefetch(AUTOTUNE),"
    ctx["compute_dtype"] = ctx["precision"].replace("mixed_", "")
    ctx["xla_words"] = ", compile with XLA (tf.function(jit_compile=True))" if _not_compiled(ctx) else ""
    ctx["graph_words"] = "" if att.get("cuda_graphs") else ", replay launches as CUDA graphs"
    ctx["bigger_set"] = f" (--set train.batch_size={ctx['bigger_batch']})" if config else ""
    facts = measured_facts(hw.get("model"), hw.get("family")) if kind in ("gpu", "tpu") else None
    ratio = (facts or {}).get("fp32_over_bf16_step")
    ctx["speedup_words"] = (f"; measured on {hw['family']} ({facts['source']}): the float32 (TF32) step took "
                            f"{ratio:g}× the bfloat16 step" if ratio else "")
    runs = "ours" if config else "foreign"
    texts: list[str] = []
    for row in ADVICE:
        if row.bottleneck not in (bottleneck, "any") or row.runs not in (runs, "any"):
            continue
        if "any" not in row.hardware and kind not in row.hardware:
            continue
        if row.fallback and texts:
            continue
        if row.when(ctx):
            texts.append(row.text.format(**ctx))
    return [{"advice": t, "set": re.findall(r"--set ([a-z_]+\.[a-z_]+=[A-Za-z0-9_.]+)", t)} for t in texts]


# Which `--set` keys act on reads (storage) and which on CPU work (preprocessing): refine() puts the rows for the
# cause the host utilization points at first.
CAUSE_KEYS = {
    "storage": ("pipeline.cycle_length", "pipeline.prefetch", "data.mode", "data.concurrency", "pipeline.preset"),
    "preprocessing": ("pipeline.parse_after_batch", "pipeline.num_parallel_calls", "pipeline.tokenize",
                      "pipeline.cache", "pipeline.preset"),
}


def order_for_cause(acts: list[dict], cause: str) -> list[dict]:
    """acts with the rows whose --set keys act on `cause` first (stable otherwise)."""
    keys = CAUSE_KEYS.get(cause, ())

    def first(a):
        return 0 if any(s.split("=", 1)[0] in keys for s in a.get("set") or ()) else 1

    return sorted(acts, key=first)
