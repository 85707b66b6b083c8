"""Two fingerprints → the differences that matter, ranked by likely impact on speed and numerics.

Both documents are flattened to dotted keys ("cpu.flags.avx512f", "data.kind" …).  Each differing key is matched
against RULES (first match wins); a rule gives the group, what it affects, a score 0–100 and a one-sentence why.
A rule may also decide a difference is noise (probe timings within 1.5×, a clock a few MHz apart) and drop it.
Scores are judgement, written down once here so they are reviewable: a missing GPU (100) outranks a different
TF release (85), which outranks a thread-count change (60), which outranks a kernel release (20).

With two report.json files the run configs are diffed too (config.*: precision, batch size, pipeline knobs …),
and `side_by_side` puts attribution, throughput and loss trajectories next to each other with a numerics verdict.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

HIGH, MEDIUM = 70, 40  # score thresholds for the impact labels

GROUP_ORDER = ("devices", "config", "framework", "precision", "cpu", "threads", "data", "env", "system")

# Keys that differ on every run or only restate another key: never a finding.
IGNORED = re.compile(
    r"^(schema|collected|collect_ms|tf_import_ms|tensorflow\.(version|git_version)|precision\.keras_version"
    r"|onednn\.(TF_ENABLE_ONEDNN_OPTS|source)|data\.probe\.(elapsed_ms|bytes_read|latency_samples|files|skipped"
    r"|first_byte_latency_ms\.(p90|max))|config\.run\..*|config\.train\.log_every|config\.workload"
    r"|devices\.physical.*|devices\.gpus\.\d+\.name"
    r"|env\.(OMP_NUM_THREADS|MKL_NUM_THREADS|TF_NUM_INTRAOP_THREADS|TF_NUM_INTEROP_THREADS"
    r"|KMP_BLOCKTIME|KMP_AFFINITY|OMP_PROC_BIND|TF_GPU_THREAD_MODE|XLA_FLAGS|TF_XLA_FLAGS|TF_DETERMINISTIC_OPS"
    r"|TF_CUDNN_DETERMINISTIC|PYTHONHASHSEED|TF_ENABLE_ONEDNN_OPTS)|.*\.error)$"
)


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


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    try:
        return float(str(v).split()[0])
    except (TypeError, ValueError, IndexError):
        return None


def _ratio(a: Any, b: Any) -> float | None:
    """max/min of two positive numbers, else None."""
    x, y = _num(a), _num(b)
    if x is None or y is None or x <= 0 or y <= 0:
        return None
    return max(x, y) / min(x, y)


def _only(a: Any, b: Any, what: str) -> str:
    """'<what> on A only' / '… on B only' for a boolean-ish difference."""
    return f"{what} on A only" if (a and not b) else f"{what} on B only"


# ---- rule functions: (key, a, b) → (sentence, score) or None (noise) ----------------------------------------

Explain = Callable[[str, Any, Any], "tuple[str, int] | str | None"]


def _gpu_count(k, a, b):
    kind = "TPU" if "tpu" in k else "GPU"
    a, b = int(a or 0), int(b or 0)
    if a == 0 or b == 0:
        who = "B" if b == 0 else "A"
        return (f"{who} sees no {kind}: every op runs on the CPU there (BERT steps are typically 10-100x "
                f"slower)", 100)
    return f"{a} {kind}s on A vs {b} on B: replicas, per-replica batch and collectives differ", 90


def _tf_version(k, a, b):
    if a is None or b is None:
        return f"TensorFlow is not installed on {'A' if a is None else 'B'}", 100
    return f"TF {fmt(a)} vs {fmt(b)}: kernels, grappler passes and XLA change between releases", 85


def _usable_cores(k, a, b):
    r = _ratio(a, b) or 1.0
    if r < 1.01:
        return None
    score = min(90, int(55 + 15 * math.log2(r)))
    few = "A" if _num(a) < _num(b) else "B"
    return (f"{few} can use only {fmt(min(_num(a), _num(b)))} cores vs {fmt(max(_num(a), _num(b)))}: "
            f"tf.data parallel reads/parses and intra-op threads scale with cores", score)


def _ratio_rule(threshold: float, lo: int, hi: int, sentence: Callable[[Any, Any, float], str],
                min_abs: float = 0.0) -> Explain:
    """A numeric difference that matters only beyond `threshold`× and `min_abs` apart (noise below that)."""

    def rule(k, a, b):
        r = _ratio(a, b)
        if r is None:  # measured on one side only (probe skipped there): data.exists / data.probe say why
            return None
        if r < threshold or abs(_num(a) - _num(b)) < min_abs:
            return None
        return sentence(a, b, r), min(hi, int(lo + (hi - lo) * min(1.0, math.log(r) / math.log(20))))

    return rule


def _latency_sentence(a, b, r):
    slow = "B" if (_num(b) or 0) > (_num(a) or 0) else "A"
    return (f"{slow}'s data is slower to first byte: {fmt(_num(a))} ms on A vs {fmt(_num(b))} ms on B "
            f"(cold 4 KiB read) — every shard open and small read pays it")


def _throughput_sentence(a, b, r):
    slow = "B" if (_num(b) or 0) < (_num(a) or 0) else "A"
    return (f"{slow} reads its data more slowly: {fmt(_num(a))} MB/s on A vs {fmt(_num(b))} MB/s on B "
            f"(cold sequential read)")


def _data_kind(k, a, b):
    far = {"network": "a network filesystem", "fuse": "a FUSE mount", "object-store": "an object store",
           "memory": "RAM (tmpfs)", "overlay": "a container overlay", "local": "a local disk",
           "unknown": "an unknown filesystem"}
    score = 90 if {a, b} & {"network", "fuse", "object-store"} else 45
    return f"data on {far.get(a, fmt(a))} on A vs {far.get(b, fmt(b))} on B: reads take a different path", score


def _cpu_flag(k, a, b):
    flag = k.rsplit(".", 1)[-1]
    if flag.startswith("amx"):
        return (_only(a, b, f"{flag.upper()}") + ": oneDNN runs bf16/int8 matmuls on AMX tiles there "
                "(mixed_bfloat16 is much faster with it)", 65, ["speed"])
    if flag in ("avx512f", "avx512bw", "avx512vl", "avx2", "fma", "avx"):
        return (_only(a, b, flag.upper()) + ": oneDNN/Eigen pick wider vector kernels there (faster matmuls; "
                "float summation order differs in the last bits)", 60, ["speed", "numerics"])
    if "bf16" in flag or "fp16" in flag:
        return _only(a, b, flag.upper()) + ": native reduced-precision math for mixed precision", 50, ["speed"]
    return _only(a, b, flag.upper()) + ": a CPU instruction-set extension TF kernels may use", 25, ["speed"]


def _policy(k, a, b):
    mixed = [x for x in (a, b) if x and str(x).startswith("mixed")]
    if mixed:
        who = "A" if a in mixed and b not in mixed else "B" if b in mixed and a not in mixed else "both"
        return (f"precision policy {fmt(a)} vs {fmt(b)}: {who} computes matmuls in reduced precision — "
                f"faster where the hardware supports it, and losses differ", 90)
    return f"precision policy {fmt(a)} vs {fmt(b)}", 80


def _env_var(k, a, b):
    name = k.split(".", 1)[1].split(".", 1)[0]
    specific = {
        "CUDA_VISIBLE_DEVICES": ("which GPUs TF may use", 80, ["speed"]),
        "KERAS_BACKEND": ("Keras backend", 80, ["speed", "numerics"]),
        "TF_USE_LEGACY_KERAS": ("Keras 2 (tf-keras) vs Keras 3", 70, ["speed", "numerics"]),
        "LD_PRELOAD": ("preloaded libraries (e.g. tcmalloc/jemalloc change host-side allocation speed)", 50,
                       ["speed"]),
        "TF_GPU_ALLOCATOR": ("GPU memory allocator", 45, ["speed"]),
        "TF_FORCE_GPU_ALLOW_GROWTH": ("GPU memory growth", 30, ["speed"]),
        "TF_CPP_MAX_VLOG_LEVEL": ("TF verbose logging (slows every op when high)", 40, ["speed"]),
        "TF_CPP_VMODULE": ("TF verbose logging per module", 35, ["speed"]),
        "STORAGE_EMULATOR_HOST": ("GCS emulator endpoint", 45, ["speed"]),
        "AZURE_STORAGE_CONNECTION_STRING": ("Azure storage account/endpoint", 45, ["speed"]),
        "HTTP_PROXY": ("HTTP proxy for remote reads", 35, ["speed"]),
        "HTTPS_PROXY": ("HTTPS proxy for remote reads", 35, ["speed"]),
        "https_proxy": ("HTTPS proxy for remote reads", 35, ["speed"]),
        "http_proxy": ("HTTP proxy for remote reads", 35, ["speed"]),
    }
    if name in specific:
        what, score, affects = specific[name]
        return f"${name} differs ({what}): {fmt(a)} vs {fmt(b)}", score, affects
    if name.startswith(("OMP_", "KMP_", "MKL_", "ONEDNN_", "DNNL_", "OPENBLAS_")):
        return f"${name} = {fmt(a)} vs {fmt(b)}: threading/kernel setting of the math library", 55, ["speed"]
    if name.startswith(("TF_", "XLA_", "TPU_", "CUDA_", "NVIDIA_")):
        return f"${name} = {fmt(a)} vs {fmt(b)}: a TensorFlow/accelerator runtime setting", 30, ["speed"]
    if name.startswith("MALLOC_") or name.startswith("TCMALLOC_"):
        return f"${name} = {fmt(a)} vs {fmt(b)}: memory allocator tuning", 30, ["speed"]
    return f"${name} = {fmt(a)} vs {fmt(b)}", 10, ["speed"]


def _cfg(score: int, affects: list[str], why: str) -> tuple:
    return ("config", affects, lambda k, a, b: (f"run config {k[7:]} = {fmt(a)} vs {fmt(b)}: {why}", score))


S, N, SN = ["speed"], ["numerics"], ["speed", "numerics"]

# (key regex, group, affects, explain) — explain returns (sentence, score[, affects]) or None for noise.
RULES: list[tuple[str, str, list[str], Explain]] = [
    # devices
    (r"devices\.(gpu|tpu)_count", "devices", S, _gpu_count),
    (r"devices\.gpus\.\d+\.device_name", "devices", SN,
     lambda k, a, b: (f"GPU model {fmt(a)} vs {fmt(b)}: different memory bandwidth, tensor cores and clocks", 90)
     if a and b else (f"{'B' if b else 'A'}'s extra GPU is a {fmt(a or b)}", 60)),
    (r"devices\.gpus\.\d+\.compute_capability", "devices", SN,
     # one side without the GPU: already said by gpu_count/device_name
     lambda k, a, b: (f"GPU compute capability {fmt(a)} vs {fmt(b)}: TF32 and bf16 tensor cores exist only on "
                      f">= 8.0, so matmul speed and precision differ", 70) if a and b else None),
    (r"devices\.nvidia_smi\.driver_version", "devices", S,
     lambda k, a, b: (f"NVIDIA driver {fmt(a)} vs {fmt(b)}: the driver bounds the usable CUDA version", 50)),
    (r"devices\.nvidia_smi\.gpus\.\d+\.memory\.total", "devices", S,
     lambda k, a, b: (f"GPU memory {fmt(a)} MiB vs {fmt(b)} MiB: limits batch size and activation memory", 60)),
    (r"devices\.nvidia_smi\.gpus\.\d+\.(power\.limit|clocks\.max\.sm)", "devices", S,
     lambda k, a, b: (f"GPU {k.split('.', 4)[-1]} {fmt(a)} vs {fmt(b)}: a power-capped or down-clocked GPU "
                      f"computes more slowly", 50)),
    (r"devices\.nvidia_smi\.gpus\.\d+\.pcie.*", "devices", S,
     lambda k, a, b: (f"PCIe {k.rsplit('.', 1)[-1]} {fmt(a)} vs {fmt(b)}: host-to-device copies of every "
                      f"batch cross this link", 50)),
    (r"devices\.nvidia_smi.*", "devices", S,
     lambda k, a, b: (f"nvidia-smi {k.split('.', 2)[-1] if k.count('.') > 1 else ''} {fmt(a)} vs {fmt(b)}", 30)),
    (r"devices\..*", "devices", S, lambda k, a, b: (f"device {k[8:]} {fmt(a)} vs {fmt(b)}", 40)),
    # run configuration (reports only)
    (r"config\.model\.size", *_cfg(95, SN, "a different model is being trained")),
    (r"config\.model\..*", *_cfg(70, SN, "the model differs")),
    (r"config\.train\.precision", *_cfg(90, SN, "reduced-precision matmuls change step time and losses")),
    (r"config\.train\.batch_size", *_cfg(85, SN, "work per step differs, so step time and losses differ")),
    (r"config\.data\.seq_len", *_cfg(85, SN, "attention cost grows with sequence length")),
    (r"config\.train\.jit", *_cfg(60, SN, "XLA fuses ops: faster steps, slightly different rounding")),
    (r"config\.train\.strategy", *_cfg(70, SN, "placement and replica count differ")),
    (r"config\.train\.(deterministic|seed)", *_cfg(40, N, "determinism and initial weights")),
    (r"config\.train\.learning_rate", *_cfg(50, N, "the optimisation itself differs")),
    (r"config\.data\.(read_latency_ms|read_bandwidth_mbps)",
     *_cfg(85, S, "emulated slow storage is injected into every local read")),
    (r"config\.data\.mode", *_cfg(70, S, "remote shards are read a different way (native/stream/stage)")),
    (r"config\.data\.(uri|seed|dupe_factor|vocab.*|corpus|masked_lm_prob|max_predictions|short_seq_prob)",
     *_cfg(45, SN, "the training data differ")),
    (r"config\.data\..*", *_cfg(45, S, "a storage read setting")),
    (r"config\.pipeline\.deterministic", *_cfg(45, SN, "deterministic interleave order is slower but reproducible")),
    (r"config\.pipeline\..*", *_cfg(60, S, "an input-pipeline knob (parallelism, prefetch, cache, parse)")),
    (r"config\.train\.steps", *_cfg(20, S, "a different number of steps is timed")),
    (r"config\.profile\..*", *_cfg(15, S, "profiling settings (tracer levels cost time inside the window)")),
    (r"config\..*", *_cfg(20, S, "a run setting")),
    # framework and packages
    (r"packages\.(tensorflow|tensorflow-cpu|tf-nightly)", "framework", SN, _tf_version),
    (r"tensorflow\.build\.is_cuda_build", "framework", S,
     lambda k, a, b: (_only(a, b, "a CUDA build of TF") + ": a CPU-only build cannot use a GPU even if present",
                      85)),
    (r"tensorflow\.build\.(cuda_version|cudnn_version)", "framework", SN,
     lambda k, a, b: (f"TF built for {k.rsplit('.', 1)[-1].split('_')[0].upper()} {fmt(a)} vs {fmt(b)}: "
                      f"GPU kernels (cuBLAS/cuDNN) differ", 65)),
    (r"tensorflow\.build\..*", "framework", S, lambda k, a, b: (f"TF build {k[16:]} {fmt(a)} vs {fmt(b)}", 30)),
    (r"tensorflow\.built_with_xla", "framework", S,
     lambda k, a, b: (_only(a, b, "XLA support") + ": jit_compile is unavailable without it", 45)),
    (r"packages\.(keras|tf-keras)", "framework", SN,
     lambda k, a, b: (f"{k[9:]} {fmt(a)} vs {fmt(b)}: layer implementations, optimizers and the train step "
                      f"are Keras code", 60)),
    (r"packages\.nvidia-.*", "framework", SN,
     lambda k, a, b: (f"{k[9:]} {fmt(a)} vs {fmt(b)}: the CUDA libraries TF loads", 60)),
    (r"packages\.tensorflow-text", "framework", S,
     lambda k, a, b: (f"tensorflow-text {fmt(a)} vs {fmt(b)}: inline tokenization kernels", 35)),
    (r"packages\.(tensorflow-io.*|google-cloud-storage|google-auth|azure-storage-blob|azure-core)", "framework", S,
     lambda k, a, b: (f"{k[9:]} {fmt(a)} vs {fmt(b)}: the client that reads remote shards", 35)),
    (r"packages\.(numpy|ml-dtypes|protobuf)", "framework", SN,
     lambda k, a, b: (f"{k[9:]} {fmt(a)} vs {fmt(b)}: host-side array/serialization library", 20)),
    (r"packages\.(xprof|tensorboard-plugin-profile|tensorboard)", "framework", S,
     lambda k, a, b: (f"{k[9:]} {fmt(a)} vs {fmt(b)}: profiles are converted by different code, so attribution "
                      f"figures may not be like-for-like", 15)),
    (r"packages\..*", "framework", S, lambda k, a, b: (f"{k[9:]} {fmt(a)} vs {fmt(b)}", 10)),
    (r"tensorflow\..*", "framework", S, lambda k, a, b: (f"TF {k[11:]} {fmt(a)} vs {fmt(b)}", 15)),
    # precision, determinism, XLA, oneDNN
    (r"precision\.keras_policy", "precision", SN, _policy),
    (r"precision\.keras_backend", "precision", SN,
     lambda k, a, b: (f"Keras backend {fmt(a)} vs {fmt(b)}: a different framework executes the model", 85)),
    (r"precision\.tf32_enabled", "precision", SN,
     lambda k, a, b: (_only(a, b, "TF32 matmuls") + ": on Ampere+ GPUs fp32 matmuls run with 10-bit mantissas "
                      "(faster, less precise)", 55)),
    (r"determinism\.op_determinism", "precision", SN,
     lambda k, a, b: (_only(a, b, "op determinism") + ": some ops use slower deterministic kernels; runs "
                      "reproduce bit-for-bit only there", 45)),
    (r"determinism\.(TF_DETERMINISTIC_OPS|TF_CUDNN_DETERMINISTIC)", "precision", SN,
     lambda k, a, b: (f"${k[12:]} = {fmt(a)} vs {fmt(b)}: requests deterministic GPU kernels", 45)),
    (r"determinism\.PYTHONHASHSEED", "precision", N,
     lambda k, a, b: (f"$PYTHONHASHSEED = {fmt(a)} vs {fmt(b)}: Python-side ordering may differ", 10)),
    (r"onednn\.enabled", "precision", SN,
     lambda k, a, b: (f"oneDNN {'off on B' if a and not b else 'off on A'}: TF falls back to Eigen kernels for "
                      f"CPU matmuls/convs — usually slower, and results differ in the last bits", 75)),
    (r"xla\.auto_jit", "precision", SN,
     lambda k, a, b: (f"global XLA auto-clustering {fmt(a)} vs {fmt(b)}: fused kernels change speed and rounding",
                      60)),
    (r"xla\.(XLA_FLAGS|TF_XLA_FLAGS)", "precision", SN,
     lambda k, a, b: (f"${k[4:]} = {fmt(a)} vs {fmt(b)}: XLA compiler options", 55)),
    (r"xla\..*", "precision", S, lambda k, a, b: (f"graph optimizer option {k[4:]} {fmt(a)} vs {fmt(b)}", 35)),
    # CPU and memory
    (r"cpu\.architecture", "cpu", SN,
     lambda k, a, b: (f"CPU architecture {fmt(a)} vs {fmt(b)}: entirely different kernels", 95)),
    (r"cpu\.model", "cpu", S, lambda k, a, b: (f"CPU model {fmt(a)} vs {fmt(b)}: per-core speed and cache differ",
                                               70)),
    (r"cpu\.vendor", "cpu", SN, lambda k, a, b: (f"CPU vendor {fmt(a)} vs {fmt(b)}: oneDNN tunes per vendor", 50)),
    (r"cpu\.usable_cores", "cpu", S, _usable_cores),
    (r"cpu\.cgroup_cpu_limit", "cpu", S,
     lambda k, a, b: (f"cgroup CPU quota {fmt(a)} vs {fmt(b)} CPUs (none = unlimited): a quota throttles every "
                      f"thread once it is used up", 80)),
    (r"cpu\.(logical_cores|physical_cores|sockets)", "cpu", S,
     lambda k, a, b: (f"{k[4:].replace('_', ' ')}: {fmt(a)} vs {fmt(b)}", 45)),
    (r"cpu\.mhz", "cpu", S, _ratio_rule(1.15, 30, 50, lambda a, b, r: f"CPU clock {fmt(a)} MHz vs {fmt(b)} MHz")),
    (r"cpu\.flags\..*", "cpu", S, _cpu_flag),
    (r"memory\.total_mb", "cpu", S, _ratio_rule(
        1.3, 35, 60, lambda a, b, r: f"RAM {fmt(a)} MiB vs {fmt(b)} MiB: less room for page cache, shuffle buffers "
                                     f"and cache=memory")),
    (r"memory\.cgroup_limit_mb", "cpu", S,
     lambda k, a, b: (f"cgroup memory limit {fmt(a)} vs {fmt(b)} MiB (none = unlimited): the page cache for "
                      f"shards counts against it", 50)),
    (r"memory\.available_mb", "cpu", S, _ratio_rule(
        2.0, 25, 45, lambda a, b, r: f"free RAM {fmt(a)} MiB vs {fmt(b)} MiB at fingerprint time")),
    (r"memory\..*", "cpu", S, lambda k, a, b: (f"{k[7:]} {fmt(a)} vs {fmt(b)}", 5)),
    # threads
    (r"threads\.(intra_op|inter_op)", "threads", S,
     lambda k, a, b: (f"TF {k[8:].replace('_', '-')} threads {fmt(a)} vs {fmt(b)} (0 = one per core): how many "
                      f"threads run each op / ops in parallel", 60)),
    (r"threads\..*", "threads", S,
     lambda k, a, b: (f"${k[8:]} = {fmt(a)} vs {fmt(b)}: math-library threading", 55)),
    # data location
    (r"data\.scheme", "data", S,
     lambda k, a, b: (f"data on {fmt(a)}:// on A vs {fmt(b)}:// on B: local file reads vs HTTP range requests"
                      if "file" in (a, b) else f"data on {fmt(a)}:// vs {fmt(b)}://", 90)),
    (r"data\.kind", "data", S, _data_kind),
    (r"data\.object_store_backed", "data", S,
     lambda k, a, b: (_only(a, b, "an object-store FUSE mount") + ": each file read is an HTTP request", 80)),
    (r"data\.fuse_daemon", "data", S, lambda k, a, b: (f"FUSE daemon {fmt(a)} vs {fmt(b)}", 60)),
    (r"data\.fstype", "data", S,
     lambda k, a, b: (f"data filesystem {fmt(a)} vs {fmt(b)}: different read path and caching", 55)),
    (r"data\.rotational", "data", S,
     lambda k, a, b: (f"data on a {'spinning disk' if a else 'non-rotational disk'} on A vs "
                      f"{'spinning disk' if b else 'non-rotational disk'} on B: seeks between shards cost "
                      f"milliseconds on a spinning disk", 50)),
    # Probe figures are single short measurements on possibly shared machines: only large gaps count
    # (a network filesystem is >= 0.5 ms to first byte; a local SSD or page-cached VM disk ~0.05-0.2 ms).
    (r"data\.probe\.first_byte_latency_ms\.p50", "data", S,
     _ratio_rule(3.0, 45, 90, _latency_sentence, min_abs=0.3)),
    (r"data\.probe\.read_mb_per_sec", "data", S, _ratio_rule(3.0, 45, 85, _throughput_sentence, min_abs=50)),
    (r"data\.probe\.cold", "data", S,
     lambda k, a, b: ("the read probe could drop the page cache on only one side: its figures are not "
                      "like-for-like", 10)),
    (r"data\.probe\..*", "data", S, lambda k, a, b: (f"data probe {k[11:]}: {fmt(a)} vs {fmt(b)}", 15)),
    (r"data\.(emulator|endpoint|access|account)", "data", S,
     lambda k, a, b: (f"storage {k[5:]} {fmt(a)} vs {fmt(b)}: an emulator on localhost and a cloud region have "
                      f"very different request latency", 45)),
    (r"data\.exists", "data", S,
     lambda k, a, b: ("data not prepared yet on " + ("A" if not a else "B") + ": its read probe was skipped", 20)),
    (r"data\..*", "data", S, lambda k, a, b: (f"data {k[5:]} {fmt(a)} vs {fmt(b)}", 10)),
    # environment variables
    (r"env\..*", "env", S, _env_var),
    # system
    (r"os\.machine", "system", SN, lambda k, a, b: (f"machine {fmt(a)} vs {fmt(b)}", 95)),
    (r"os\.wsl", "system", S,
     lambda k, a, b: (_only(a, b, "WSL") + ": file I/O across the Windows boundary is slow", 50)),
    (r"python\.version", "system", SN,
     lambda k, a, b: (f"Python {fmt(a)} vs {fmt(b)}: different wheels and interpreter speed for host-side code",
                      35)),
    (r"python\.implementation", "system", S, lambda k, a, b: (f"Python implementation {fmt(a)} vs {fmt(b)}", 60)),
    (r"os\.libc", "system", SN,
     lambda k, a, b: (f"C library {fmt(a)} vs {fmt(b)}: malloc and libm (exp/log/tanh) differ", 20)),
    (r"os\.(release|distro)", "system", S, lambda k, a, b: (f"OS {k[3:]} {fmt(a)} vs {fmt(b)}", 20)),
    (r"host\.container", "system", S,
     lambda k, a, b: (f"container {fmt(a)} vs {fmt(b)}: cgroup limits and overlay filesystems apply inside", 25)),
    (r"host\.(cloud_provider|platform_hints.*)", "system", S,
     lambda k, a, b: (f"platform {fmt(a)} vs {fmt(b)}: shared or throttled cloud/notebook machines vary", 25)),
    (r"host\.virtualized", "system", S,
     lambda k, a, b: (_only(a, b, "a hypervisor") + ": virtualised CPUs may be shared or throttled", 20)),
    (r"host\.dmi\..*", "system", S, lambda k, a, b: (f"hardware {k[9:]} {fmt(a)} vs {fmt(b)}", 15)),
    (r"host\.hostname", "system", S, lambda k, a, b: (f"host {fmt(a)} vs {fmt(b)}", 2)),
    (r".*", "system", S, lambda k, a, b: (f"{k} {fmt(a)} vs {fmt(b)}", 5)),
]
_COMPILED = [(re.compile(p + r"$"), g, aff, fn) for p, g, aff, fn in RULES]


def impact_label(score: int) -> str:
    """'high' (>= 70), 'medium' (>= 40) or 'low'."""
    return "high" if score >= HIGH else "medium" if score >= MEDIUM else "low"


def diff_flat(fa: dict[str, Any], fb: dict[str, Any]) -> list[dict]:
    """Ranked differences between two flattened documents (see `tfbertperf.env.diff`)."""
    out = []
    for key in sorted(set(fa) | set(fb)):
        a, b = fa.get(key), fb.get(key)
        if a == b or IGNORED.match(key):
            continue
        if isinstance(a, (dict, list)) and not a and b is None or isinstance(b, (dict, list)) and not b and a is None:
            continue
        for rx, group, affects, fn in _COMPILED:
            if rx.match(key):
                res = fn(key, a, b)
                break
        if res is None:
            continue
        if isinstance(res, str):
            res = (res, 10)
        why, score = res[0], int(res[1])
        if len(res) > 2:
            affects = res[2]
        out.append({"name": key, "group": group, "a": a, "b": b, "score": score, "impact": impact_label(score),
                    "affects": list(affects), "why": why})
    out.sort(key=lambda d: (-d["score"], GROUP_ORDER.index(d["group"]), d["name"]))
    return out


# ---- reports side by side ----------------------------------------------------------------------------------

# Config keys that, when different, make a loss comparison apples-to-oranges (beyond numerics noise).
_NUMERICS_CONFIG = re.compile(
    r"^config\.(model\..*|data\.(seq_len|max_predictions|vocab.*|seed|dupe_factor|masked_lm_prob|corpus"
    r"|short_seq_prob)|train\.(batch_size|seed|learning_rate)|pipeline\.(shuffle_buffer|preset))$"
)


def _get(doc: dict, path: str) -> Any:
    cur: Any = doc
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def compare_losses(traj_a: Any, traj_b: Any, rtol: float, atol: float) -> dict:
    """Compare two loss trajectories [[step, loss], …] at their common steps.

    Match = every common step satisfies |a − b| <= atol + rtol·|b| and neither is NaN/inf.
    Returns {"steps_compared", "max_abs_diff", "max_rel_diff", "first_divergent_step", "match", "identical"}.
    """
    def as_map(t):
        m = {}
        for item in t or []:
            if isinstance(item, (list, tuple)) and len(item) == 2 and _num(item[0]) is not None:
                m[int(item[0])] = item[1]
        return m

    ma, mb = as_map(traj_a), as_map(traj_b)
    common = sorted(set(ma) & set(mb))
    res = {"steps_compared": len(common), "rtol": rtol, "atol": atol, "max_abs_diff": None, "max_rel_diff": None,
           "first_divergent_step": None, "match": None, "identical": None}
    if not common:
        return res
    max_abs = max_rel = 0.0
    first_bad = None
    for s in common:
        a, b = _num(ma[s]), _num(mb[s])
        if a is None or b is None:  # NaN/inf/None
            first_bad = s if first_bad is None else first_bad
            max_abs = max_rel = math.inf
            continue
        d = abs(a - b)
        max_abs = max(max_abs, d)
        max_rel = max(max_rel, d / max(abs(a), abs(b), 1e-12))
        if d > atol + rtol * abs(b) and first_bad is None:
            first_bad = s
    res.update(max_abs_diff=max_abs, max_rel_diff=max_rel, first_divergent_step=first_bad,
               match=first_bad is None, identical=all(ma[s] == mb[s] for s in common))
    return res


def side_by_side(a: dict, b: dict, rtol: float = 1e-3, atol: float = 1e-5) -> dict:
    """Attribution, throughput and loss trajectories of two report.json documents next to each other.

    Returns {"metrics": [{"name", "a", "b", "ratio_b_over_a"}], "fractions": [{"name", "a", "b", "delta"}],
    "bottleneck": {"a", "b"}, "loss_trajectory": {"a", "b"}, "numerics": {…compare_losses…, "comparable",
    "verdict"}}.  Fractions are of the mean profiled step time (report.json attribution.fractions).
    """
    metric_paths = [
        ("step_time_ms (profiled)", "attribution.step_time_ms"),
        ("step_time_ms mean (all steps)", "throughput.step_time_ms.mean"),
        ("examples_per_sec", "throughput.examples_per_sec"),
        ("input_bound_fraction", "attribution.input_bound_fraction"),
        ("input_cost_fraction (what-if)", "attribution.input_cost_fraction"),
        ("step_timer input_wait_fraction", "step_timer.input_wait_fraction"),
        ("accelerator_utilization", "accelerator_utilization"),
        ("storage read_mb_per_sec", "storage.read_mb_per_sec"),
        ("storage request_latency_ms p50", "storage.request_latency_ms.p50"),
        ("final_loss", "training.final_loss"),
    ]
    metrics = []
    for name, path in metric_paths:
        va, vb = _get(a, path), _get(b, path)
        if va is None and vb is None:
            continue
        na, nb = _num(va), _num(vb)
        metrics.append({"name": name, "a": va, "b": vb,
                        "ratio_b_over_a": round(nb / na, 3) if na and nb is not None and na != 0 else None})
    fa, fb = _get(a, "attribution.fractions") or {}, _get(b, "attribution.fractions") or {}
    fractions = []
    for k in list(fa) + [k for k in fb if k not in fa]:
        va, vb = _num(fa.get(k)), _num(fb.get(k))
        fractions.append({"name": k, "a": va, "b": vb,
                          "delta": round(vb - va, 4) if va is not None and vb is not None else None})
    ta, tb = _get(a, "training.loss_trajectory"), _get(b, "training.loss_trajectory")
    numerics = compare_losses(ta, tb, rtol, atol)
    ca, cb = flatten({"config": a.get("config") or {}}), flatten({"config": b.get("config") or {}})
    differing = sorted(k[7:] for k in set(ca) | set(cb) if ca.get(k) != cb.get(k) and _NUMERICS_CONFIG.match(k))
    numerics["comparable"] = not differing
    numerics["config_differences"] = differing
    numerics["verdict"] = numerics_verdict(numerics, a, b)
    return {"metrics": metrics, "fractions": fractions,
            "bottleneck": {"a": _get(a, "verdict.bottleneck"), "b": _get(b, "verdict.bottleneck")},
            "loss_trajectory": {"a": ta, "b": tb}, "numerics": numerics}


def numerics_verdict(n: dict, a: dict, b: dict) -> str:
    """One sentence on whether the two runs' losses agree."""
    if not n["steps_compared"]:
        return "numerics not compared: the reports share no logged loss step"
    if n["config_differences"]:
        return ("numerics not comparable: the runs differ in " + ", ".join(n["config_differences"])
                + " (losses are expected to differ)")
    if n["identical"]:
        return f"numerics match: losses are bit-identical over {n['steps_compared']} common steps"
    tol = f"rtol={n['rtol']:g}, atol={n['atol']:g}"
    if n["match"]:
        return (f"numerics match within {tol} over {n['steps_compared']} common steps "
                f"(max relative difference {n['max_rel_diff']:.2g})")
    why = ""
    nondet = [x for x in ("a", "b") if not _get({"a": a, "b": b}[x], "config.pipeline.deterministic")
              and _get({"a": a, "b": b}[x], "config") is not None]
    if nondet:
        why = "; note pipeline.deterministic=false, so batch order alone can explain a difference"
    return (f"numerics differ beyond {tol}: first at step {n['first_divergent_step']}, max relative difference "
            f"{n['max_rel_diff']:.2g}{why}")


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
