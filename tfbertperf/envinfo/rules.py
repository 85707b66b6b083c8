"""The judgement behind the diff: for each kind of key, which group it belongs to, what it affects (speed,
numerics), a score 0–100 and a one-sentence why — or that a difference is noise and dropped (probe timings
within 3×, a clock a few MHz apart).

Scores are written down once here so they are reviewable: a missing GPU (100) outranks a different TF release
(85), which outranks a thread-count change (60), which outranks a kernel release (20).  RULES is matched in
order against the dotted key (first match wins; the last rule matches everything).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

from tfbertperf.envinfo.values import fmt, num, ratio

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


def _only(a: Any, b: Any, what: str) -> str:
    """'<what> on A only' / '… on B only' for a boolean-ish difference."""
    return f"{what} on A only" if (a and not b) else f"{what} on B only"


# ---- rule functions: (key, a, b) → (sentence, score) or None (noise) ----------------------------------------

Explain = Callable[[str, Any, Any], "tuple | None"]


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
    r = ratio(a, b) or 1.0
    if r < 1.01:
        return None
    score = min(90, int(55 + 15 * math.log2(r)))
    few = "A" if num(a) < num(b) else "B"
    return (f"{few} can use only {fmt(min(num(a), num(b)))} cores vs {fmt(max(num(a), num(b)))}: "
            f"tf.data parallel reads/parses and intra-op threads scale with cores", score)


def _ratio_rule(threshold: float, lo: int, hi: int, sentence: Callable[[Any, Any, float], str],
                min_abs: float = 0.0) -> Explain:
    """A numeric difference that matters only beyond `threshold`× and `min_abs` apart (noise below that)."""

    def rule(k, a, b):
        r = ratio(a, b)
        if r is None:  # measured on one side only (probe skipped there): data.exists / data.probe say why
            return None
        if r < threshold or abs(num(a) - num(b)) < min_abs:
            return None
        return sentence(a, b, r), min(hi, int(lo + (hi - lo) * min(1.0, math.log(r) / math.log(20))))

    return rule


def _latency_sentence(a, b, r):
    slow = "B" if (num(b) or 0) > (num(a) or 0) else "A"
    return (f"{slow}'s data is slower to first byte: {fmt(num(a))} ms on A vs {fmt(num(b))} ms on B "
            f"(cold 4 KiB read) — every shard open and small read pays it")


def _throughput_sentence(a, b, r):
    slow = "B" if (num(b) or 0) < (num(a) or 0) else "A"
    return (f"{slow} reads its data more slowly: {fmt(num(a))} MB/s on A vs {fmt(num(b))} MB/s on B "
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


def _says(template: str, score: int, skip: int = 1) -> Explain:
    """A rule whose sentence quotes the two values, "{a}" and "{b}" in `template` (shown with fmt), and maybe
    "{key}": the key without its first `skip` dotted parts ("packages.keras" → "keras")."""
    return lambda k, a, b: (template.format(a=fmt(a), b=fmt(b), key=k.split(".", skip)[-1]), score)


def _one_side(what: str, why: str, score: int) -> Explain:
    """A rule for something present on one side only: "<what> on A only<why>"."""
    return lambda k, a, b: (_only(a, b, what) + why, score)


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
     _says("NVIDIA driver {a} vs {b}: the driver bounds the usable CUDA version", 50)),
    (r"devices\.nvidia_smi\.gpus\.\d+\.memory\.total", "devices", S,
     _says("GPU memory {a} MiB vs {b} MiB: limits batch size and activation memory", 60)),
    (r"devices\.nvidia_smi\.gpus\.\d+\.(power\.limit|clocks\.max\.sm)", "devices", S,
     lambda k, a, b: (f"GPU {k.split('.', 4)[-1]} {fmt(a)} vs {fmt(b)}: a power-capped or down-clocked GPU "
                      f"computes more slowly", 50)),
    (r"devices\.nvidia_smi\.gpus\.\d+\.pcie.*", "devices", S,
     lambda k, a, b: (f"PCIe {k.rsplit('.', 1)[-1]} {fmt(a)} vs {fmt(b)}: host-to-device copies of every "
                      f"batch cross this link", 50)),
    (r"devices\.nvidia_smi.*", "devices", S,
     lambda k, a, b: (f"nvidia-smi {k.split('.', 2)[-1] if k.count('.') > 1 else ''} {fmt(a)} vs {fmt(b)}", 30)),
    (r"devices\..*", "devices", S, _says("device {key} {a} vs {b}", 40)),
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
     _one_side("a CUDA build of TF", ": a CPU-only build cannot use a GPU even if present", 85)),
    (r"tensorflow\.build\.(cuda_version|cudnn_version)", "framework", SN,
     lambda k, a, b: (f"TF built for {k.rsplit('.', 1)[-1].split('_')[0].upper()} {fmt(a)} vs {fmt(b)}: "
                      f"GPU kernels (cuBLAS/cuDNN) differ", 65)),
    (r"tensorflow\.build\..*", "framework", S, _says("TF build {key} {a} vs {b}", 30, skip=2)),
    (r"tensorflow\.built_with_xla", "framework", S,
     _one_side("XLA support", ": jit_compile is unavailable without it", 45)),
    (r"packages\.(keras|tf-keras)", "framework", SN,
     _says("{key} {a} vs {b}: layer implementations, optimizers and the train step "
           "are Keras code", 60)),
    (r"packages\.nvidia-.*", "framework", SN,
     _says("{key} {a} vs {b}: the CUDA libraries TF loads", 60)),
    (r"packages\.tensorflow-text", "framework", S,
     _says("tensorflow-text {a} vs {b}: inline tokenization kernels", 35)),
    (r"packages\.(tensorflow-io.*|google-cloud-storage|google-auth|azure-storage-blob|azure-core)", "framework", S,
     _says("{key} {a} vs {b}: the client that reads remote shards", 35)),
    (r"packages\.(numpy|ml-dtypes|protobuf)", "framework", SN,
     _says("{key} {a} vs {b}: host-side array/serialization library", 20)),
    (r"packages\.(xprof|tensorboard-plugin-profile|tensorboard)", "framework", S,
     _says("{key} {a} vs {b}: profiles are converted by different code, so attribution "
           "figures may not be like-for-like", 15)),
    (r"packages\..*", "framework", S, _says("{key} {a} vs {b}", 10)),
    (r"tensorflow\..*", "framework", S, _says("TF {key} {a} vs {b}", 15)),
    # precision, determinism, XLA, oneDNN
    (r"precision\.keras_policy", "precision", SN, _policy),
    (r"precision\.keras_backend", "precision", SN,
     _says("Keras backend {a} vs {b}: a different framework executes the model", 85)),
    (r"precision\.tf32_enabled", "precision", SN,
     _one_side("TF32 matmuls", ": on Ampere+ GPUs fp32 matmuls run with 10-bit mantissas "
               "(faster, less precise)", 55)),
    (r"determinism\.op_determinism", "precision", SN,
     _one_side("op determinism", ": some ops use slower deterministic kernels; runs "
               "reproduce bit-for-bit only there", 45)),
    (r"determinism\.(TF_DETERMINISTIC_OPS|TF_CUDNN_DETERMINISTIC)", "precision", SN,
     _says("${key} = {a} vs {b}: requests deterministic GPU kernels", 45)),
    (r"determinism\.PYTHONHASHSEED", "precision", N,
     _says("$PYTHONHASHSEED = {a} vs {b}: Python-side ordering may differ", 10)),
    (r"onednn\.enabled", "precision", SN,
     lambda k, a, b: (f"oneDNN {'off on B' if a and not b else 'off on A'}: TF falls back to Eigen kernels for "
                      f"CPU matmuls/convs — usually slower, and results differ in the last bits", 75)),
    (r"xla\.auto_jit", "precision", SN,
     _says("global XLA auto-clustering {a} vs {b}: fused kernels change speed and rounding", 60)),
    (r"xla\.(XLA_FLAGS|TF_XLA_FLAGS)", "precision", SN,
     _says("${key} = {a} vs {b}: XLA compiler options", 55)),
    (r"xla\..*", "precision", S, _says("graph optimizer option {key} {a} vs {b}", 35)),
    # CPU and memory
    (r"cpu\.architecture", "cpu", SN,
     _says("CPU architecture {a} vs {b}: entirely different kernels", 95)),
    (r"cpu\.model", "cpu", S, _says("CPU model {a} vs {b}: per-core speed and cache differ", 70)),
    (r"cpu\.vendor", "cpu", SN, _says("CPU vendor {a} vs {b}: oneDNN tunes per vendor", 50)),
    (r"cpu\.usable_cores", "cpu", S, _usable_cores),
    (r"cpu\.cgroup_cpu_limit", "cpu", S,
     _says("cgroup CPU quota {a} vs {b} CPUs (none = unlimited): a quota throttles every "
           "thread once it is used up", 80)),
    (r"cpu\.(logical_cores|physical_cores|sockets)", "cpu", S,
     lambda k, a, b: (f"{k[4:].replace('_', ' ')}: {fmt(a)} vs {fmt(b)}", 45)),
    (r"cpu\.mhz", "cpu", S, _ratio_rule(1.15, 30, 50, lambda a, b, r: f"CPU clock {fmt(a)} MHz vs {fmt(b)} MHz")),
    (r"cpu\.flags\..*", "cpu", S, _cpu_flag),
    (r"memory\.total_mb", "cpu", S, _ratio_rule(
        1.3, 35, 60, lambda a, b, r: f"RAM {fmt(a)} MiB vs {fmt(b)} MiB: less room for page cache, shuffle buffers "
                                     f"and cache=memory")),
    (r"memory\.cgroup_limit_mb", "cpu", S,
     _says("cgroup memory limit {a} vs {b} MiB (none = unlimited): the page cache for "
           "shards counts against it", 50)),
    (r"memory\.available_mb", "cpu", S, _ratio_rule(
        2.0, 25, 45, lambda a, b, r: f"free RAM {fmt(a)} MiB vs {fmt(b)} MiB at fingerprint time")),
    (r"memory\..*", "cpu", S, _says("{key} {a} vs {b}", 5)),
    # threads
    (r"threads\.(intra_op|inter_op)", "threads", S,
     lambda k, a, b: (f"TF {k[8:].replace('_', '-')} threads {fmt(a)} vs {fmt(b)} (0 = one per core): how many "
                      f"threads run each op / ops in parallel", 60)),
    (r"threads\..*", "threads", S,
     _says("${key} = {a} vs {b}: math-library threading", 55)),
    # data location
    (r"data\.scheme", "data", S,
     lambda k, a, b: (f"data on {fmt(a)}:// on A vs {fmt(b)}:// on B: local file reads vs HTTP range requests"
                      if "file" in (a, b) else f"data on {fmt(a)}:// vs {fmt(b)}://", 90)),
    (r"data\.kind", "data", S, _data_kind),
    (r"data\.object_store_backed", "data", S,
     _one_side("an object-store FUSE mount", ": each file read is an HTTP request", 80)),
    (r"data\.fuse_daemon", "data", S, _says("FUSE daemon {a} vs {b}", 60)),
    (r"data\.fstype", "data", S,
     _says("data filesystem {a} vs {b}: different read path and caching", 55)),
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
    (r"data\.probe\..*", "data", S, _says("data probe {key}: {a} vs {b}", 15, skip=2)),
    (r"data\.(emulator|endpoint|access|account)", "data", S,
     _says("storage {key} {a} vs {b}: an emulator on localhost and a cloud region have "
           "very different request latency", 45)),
    (r"data\.exists", "data", S,
     lambda k, a, b: ("data not prepared yet on " + ("A" if not a else "B") + ": its read probe was skipped", 20)),
    (r"data\..*", "data", S, _says("data {key} {a} vs {b}", 10)),
    # environment variables
    (r"env\..*", "env", S, _env_var),
    # system
    (r"os\.machine", "system", SN, _says("machine {a} vs {b}", 95)),
    (r"os\.wsl", "system", S,
     _one_side("WSL", ": file I/O across the Windows boundary is slow", 50)),
    (r"python\.version", "system", SN,
     _says("Python {a} vs {b}: different wheels and interpreter speed for host-side code", 35)),
    (r"python\.implementation", "system", S, _says("Python implementation {a} vs {b}", 60)),
    (r"os\.libc", "system", SN,
     _says("C library {a} vs {b}: malloc and libm (exp/log/tanh) differ", 20)),
    (r"os\.(release|distro)", "system", S, _says("OS {key} {a} vs {b}", 20)),
    (r"host\.container", "system", S,
     _says("container {a} vs {b}: cgroup limits and overlay filesystems apply inside", 25)),
    (r"host\.(cloud_provider|platform_hints.*)", "system", S,
     _says("platform {a} vs {b}: shared or throttled cloud/notebook machines vary", 25)),
    (r"host\.virtualized", "system", S,
     _one_side("a hypervisor", ": virtualised CPUs may be shared or throttled", 20)),
    (r"host\.dmi\..*", "system", S, _says("hardware {key} {a} vs {b}", 15, skip=2)),
    (r"host\.hostname", "system", S, _says("host {a} vs {b}", 2)),
    (r".*", "system", S, lambda k, a, b: (f"{k} {fmt(a)} vs {fmt(b)}", 5)),
]
COMPILED_RULES = [(re.compile(p + r"$"), g, aff, fn) for p, g, aff, fn in RULES]
