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

from tfbertperf.envinfo.values import fmt, interpreter_difference, num, ratio

# Keys that differ on every run or only restate another key: never a finding.
IGNORED = re.compile(
    r"^(schema|collected|collect_ms|tf_import_ms|tensorflow\.(version|git_version)|precision\.keras_version"
    r"|onednn\.(TF_ENABLE_ONEDNN_OPTS|source)|data\.probe\.(elapsed_ms|bytes_read|latency_samples|files|skipped"
    r"|first_byte_latency_ms\.(p90|max))|config\.run\..*|config\.train\.log_every|config\.workload"
    r"|devices\.physical.*|devices\.gpus\.\d+\.name|data\.dataset\.(summary|manifest)"
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
        return (f"{who} sees no {kind}: every op runs on the CPU there (BERT steps are typically 10-100x slower)", 100)
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


def _section(group: str, rows: list[tuple]) -> list[tuple[str, str, list[str], Explain]]:
    """Rows of one group as RULES entries.  Most rules only quote the two values, so a row is data and reads as
    one line: (regex, affects, how[, score[, skip]]) where `how` is a template string → _says(how, score, skip),
    a (what, why) pair → _one_side(what, why, score), or a function (key, a, b) for the genuinely different ones."""
    out = []
    for pattern, affects, how, *args in rows:
        if isinstance(how, str):
            how = _says(how, *args)
        elif isinstance(how, tuple):
            how = _one_side(*how, *args)
        out.append((pattern, group, affects, how))
    return out


S, N, SN = ["speed"], ["numerics"], ["speed", "numerics"]
CFG = "run config {key} = {a} vs {b}: "  # config.* rows: the key without "config." and why that setting matters

# (key regex, group, affects, explain) — explain returns (sentence, score[, affects]) or None for noise.
# Matched in order, first match wins: keep the specific patterns above the catch-alls of their group.
RULES: list[tuple[str, str, list[str], Explain]] = [
    *_section("devices", [
        (r"devices\.(gpu|tpu)_count", S, _gpu_count),
        (r"devices\.gpus\.\d+\.device_name", SN,
         lambda k, a, b: (f"GPU model {fmt(a)} vs {fmt(b)}: different memory bandwidth, tensor cores and clocks",
                          90) if a and b else (f"{'B' if b else 'A'}'s extra GPU is a {fmt(a or b)}", 60)),
        (r"devices\.gpus\.\d+\.compute_capability", SN,
         # one side without the GPU: already said by gpu_count/device_name
         lambda k, a, b: (f"GPU compute capability {fmt(a)} vs {fmt(b)}: TF32 and bf16 tensor cores exist only "
                          f"on >= 8.0, so matmul speed and precision differ", 70) if a and b else None),
        (r"devices\.nvidia_smi\.driver_version", S, "NVIDIA driver {a} vs {b}: the driver bounds the usable CUDA "
                                                    "version", 50),
        (r"devices\.nvidia_smi\.gpus\.\d+\.memory\.total", S, "GPU memory {a} MiB vs {b} MiB: limits batch size "
                                                              "and activation memory", 60),
        (r"devices\.nvidia_smi\.gpus\.\d+\.(power\.limit|clocks\.max\.sm)", S,
         lambda k, a, b: (f"GPU {k.split('.', 4)[-1]} {fmt(a)} vs {fmt(b)}: a power-capped or down-clocked GPU "
                          f"computes more slowly", 50)),
        (r"devices\.nvidia_smi\.gpus\.\d+\.pcie.*", S,
         lambda k, a, b: (f"PCIe {k.rsplit('.', 1)[-1]} {fmt(a)} vs {fmt(b)}: host-to-device copies of every "
                          f"batch cross this link", 50)),
        (r"devices\.nvidia_smi.*", S, lambda k, a, b: (
            f"nvidia-smi {k.split('.', 2)[-1] if k.count('.') > 1 else ''} {fmt(a)} vs {fmt(b)}", 30)),
        (r"devices\..*", S, "device {key} {a} vs {b}", 40),
    ]),
    # run configuration (reports only)
    *_section("config", [
        (r"config\.model\.size", SN, CFG + "a different model is being trained", 95),
        (r"config\.model\..*", SN, CFG + "the model differs", 70),
        (r"config\.train\.precision", SN, CFG + "reduced-precision matmuls change step time and losses", 90),
        (r"config\.train\.batch_size", SN, CFG + "work per step differs, so step time and losses differ", 85),
        (r"config\.data\.seq_len", SN, CFG + "attention cost grows with sequence length", 85),
        (r"config\.train\.jit", SN, CFG + "XLA fuses ops: faster steps, slightly different rounding", 60),
        (r"config\.train\.strategy", SN, CFG + "placement and replica count differ", 70),
        (r"config\.train\.(deterministic|seed)", N, CFG + "determinism and initial weights", 40),
        (r"config\.train\.learning_rate", N, CFG + "the optimisation itself differs", 50),
        (r"config\.data\.(read_latency_ms|read_bandwidth_mbps)", S,
         CFG + "emulated slow storage is injected into every local read", 85),
        (r"config\.data\.mode", S, CFG + "remote shards are read a different way (native/stream/stage)", 70),
        (r"config\.data\.(uri|seed|dupe_factor|vocab.*|corpus|masked_lm_prob|max_predictions|short_seq_prob)",
         SN, CFG + "the training data differ", 45),
        (r"config\.data\..*", S, CFG + "a storage read setting", 45),
        (r"config\.pipeline\.deterministic", SN, CFG + "deterministic interleave order is slower but reproducible",
         45),
        (r"config\.pipeline\..*", S, CFG + "an input-pipeline knob (parallelism, prefetch, cache, parse)", 60),
        (r"tokenizer\.(vocab_sha256|vocab_size)", N, "tokenizer {key} {a} vs {b}: another vocabulary, so the same "
                                                    "text becomes other token ids (inputs and labels differ)", 80),
        (r"tokenizer\..*", N, "tokenizer {key} {a} vs {b}: tokenization of the text may differ (casing, accents, "
                               "splitting rules)", 75),
        (r"config\.train\.steps", S, CFG + "a different number of steps is timed", 20),
        (r"config\.profile\..*", S, CFG + "profiling settings (tracer levels cost time inside the window)", 15),
        (r"config\..*", S, CFG + "a run setting", 20),
    ]),
    # framework and packages
    *_section("framework", [
        (r"packages\.(tensorflow|tensorflow-cpu|tf-nightly)", SN, _tf_version),
        (r"tensorflow\.build\.is_cuda_build", S,
         ("a CUDA build of TF", ": a CPU-only build cannot use a GPU even if present"), 85),
        (r"tensorflow\.build\.(cuda_version|cudnn_version)", SN,
         lambda k, a, b: (f"TF built for {k.rsplit('.', 1)[-1].split('_')[0].upper()} {fmt(a)} vs {fmt(b)}: "
                          f"GPU kernels (cuBLAS/cuDNN) differ", 65)),
        (r"tensorflow\.build\..*", S, "TF build {key} {a} vs {b}", 30, 2),
        (r"tensorflow\.built_with_xla", S, ("XLA support", ": jit_compile is unavailable without it"), 45),
        (r"packages\.(keras|tf-keras)", SN,
         "{key} {a} vs {b}: layer implementations, optimizers and the train step are Keras code", 60),
        (r"packages\.nvidia-.*", SN, "{key} {a} vs {b}: the CUDA libraries TF loads", 60),
        (r"packages\.tensorflow-text", S, "tensorflow-text {a} vs {b}: inline tokenization kernels", 35),
        (r"packages\.(tensorflow-io.*|google-cloud-storage|google-auth|azure-storage-blob|azure-core)", S,
         "{key} {a} vs {b}: the client that reads remote shards", 35),
        (r"packages\.(numpy|ml-dtypes|protobuf)", SN, "{key} {a} vs {b}: host-side array/serialization library", 20),
        (r"packages\.(xprof|tensorboard-plugin-profile|tensorboard)", S, "{key} {a} vs {b}: profiles are converted "
                                                                         "by different code, so attribution "
                                                                         "figures may not be like-for-like", 15),
        (r"packages\..*", S, "{key} {a} vs {b}", 10),
        (r"tensorflow\..*", S, "TF {key} {a} vs {b}", 15),
    ]),
    # precision, determinism, XLA, oneDNN
    *_section("precision", [
        (r"precision\.keras_policy", SN, _policy),
        (r"precision\.keras_backend", SN, "Keras backend {a} vs {b}: a different framework executes the model", 85),
        (r"precision\.tf32_enabled", SN, ("TF32 matmuls", ": on Ampere+ GPUs fp32 matmuls run with 10-bit "
                                                          "mantissas (faster, less precise)"), 55),
        (r"determinism\.op_determinism", SN, ("op determinism", ": some ops use slower deterministic kernels; "
                                                                "runs reproduce bit-for-bit only there"), 45),
        (r"determinism\.(TF_DETERMINISTIC_OPS|TF_CUDNN_DETERMINISTIC)", SN,
         "${key} = {a} vs {b}: requests deterministic GPU kernels", 45),
        (r"determinism\.PYTHONHASHSEED", N, "$PYTHONHASHSEED = {a} vs {b}: Python-side ordering may differ", 10),
        (r"onednn\.enabled", SN,
         lambda k, a, b: (f"oneDNN {'off on B' if a and not b else 'off on A'}: TF falls back to Eigen kernels "
                          f"for CPU matmuls/convs — usually slower, and results differ in the last bits", 75)),
        (r"xla\.auto_jit", SN, "global XLA auto-clustering {a} vs {b}: fused kernels change speed and rounding", 60),
        (r"xla\.(XLA_FLAGS|TF_XLA_FLAGS)", SN, "${key} = {a} vs {b}: XLA compiler options", 55),
        (r"xla\..*", S, "graph optimizer option {key} {a} vs {b}", 35),
    ]),
    # CPU and memory
    *_section("cpu", [
        (r"cpu\.architecture", SN, "CPU architecture {a} vs {b}: entirely different kernels", 95),
        (r"cpu\.model", S, "CPU model {a} vs {b}: per-core speed and cache differ", 70),
        (r"cpu\.vendor", SN, "CPU vendor {a} vs {b}: oneDNN tunes per vendor", 50),
        (r"cpu\.usable_cores", S, _usable_cores),
        (r"cpu\.cgroup_cpu_limit", S, "cgroup CPU quota {a} vs {b} CPUs (none = unlimited): a quota throttles "
                                      "every thread once it is used up", 80),
        (r"cpu\.(logical_cores|physical_cores|sockets)", S,
         lambda k, a, b: (f"{k[4:].replace('_', ' ')}: {fmt(a)} vs {fmt(b)}", 45)),
        (r"cpu\.mhz", S, _ratio_rule(1.15, 30, 50, lambda a, b, r: f"CPU clock {fmt(a)} MHz vs {fmt(b)} MHz")),
        (r"cpu\.flags\..*", S, _cpu_flag),
        (r"memory\.total_mb", S, _ratio_rule(
            1.3, 35, 60, lambda a, b, r: f"RAM {fmt(a)} MiB vs {fmt(b)} MiB: less room for page cache, shuffle "
                                         f"buffers and cache=memory")),
        (r"memory\.cgroup_limit_mb", S, "cgroup memory limit {a} vs {b} MiB (none = unlimited): the page cache "
                                        "for shards counts against it", 50),
        (r"memory\.available_mb", S, _ratio_rule(
            2.0, 25, 45, lambda a, b, r: f"free RAM {fmt(a)} MiB vs {fmt(b)} MiB at fingerprint time")),
        (r"memory\..*", S, "{key} {a} vs {b}", 5),
    ]),
    *_section("threads", [
        (r"threads\.(intra_op|inter_op)", S,
         lambda k, a, b: (f"TF {k[8:].replace('_', '-')} threads {fmt(a)} vs {fmt(b)} (0 = one per core): how "
                          f"many threads run each op / ops in parallel", 60)),
        (r"threads\..*", S, "${key} = {a} vs {b}: math-library threading", 55),
    ]),
    # data location
    *_section("data", [
        (r"data\.dataset\..*", SN, "data set {key} {a} vs {b}: other records (user = the user's own TFRecords)", 60),
        (r"data\.scheme", S,
         lambda k, a, b: (f"data on {fmt(a)}:// on A vs {fmt(b)}:// on B: local file reads vs HTTP range "
                          f"requests" if "file" in (a, b) else f"data on {fmt(a)}:// vs {fmt(b)}://", 90)),
        (r"data\.kind", S, _data_kind),
        (r"data\.object_store_backed", S, ("an object-store FUSE mount", ": each file read is an HTTP request"), 80),
        (r"data\.fuse_daemon", S, "FUSE daemon {a} vs {b}", 60),
        (r"data\.fstype", S, "data filesystem {a} vs {b}: different read path and caching", 55),
        (r"data\.rotational", S,
         lambda k, a, b: (f"data on a {'spinning disk' if a else 'non-rotational disk'} on A vs "
                          f"{'spinning disk' if b else 'non-rotational disk'} on B: seeks between shards cost "
                          f"milliseconds on a spinning disk", 50)),
        # Probe figures are single short measurements on possibly shared machines: only large gaps count
        # (a network filesystem is >= 0.5 ms to first byte; a local SSD or page-cached VM disk ~0.05-0.2 ms).
        (r"data\.probe\.first_byte_latency_ms\.p50", S, _ratio_rule(3.0, 45, 90, _latency_sentence, min_abs=0.3)),
        (r"data\.probe\.read_mb_per_sec", S, _ratio_rule(3.0, 45, 85, _throughput_sentence, min_abs=50)),
        (r"data\.probe\.cold", S,
         lambda k, a, b: ("the read probe could drop the page cache on only one side: its figures are not "
                          "like-for-like", 10)),
        (r"data\.probe\..*", S, "data probe {key}: {a} vs {b}", 15, 2),
        (r"data\.(emulator|endpoint|access|account)", S, "storage {key} {a} vs {b}: an emulator on localhost and "
                                                          "a cloud region have very different request latency", 45),
        (r"data\.exists", S, lambda k, a, b: (
            "data not prepared yet on " + ("A" if not a else "B") + ": its read probe was skipped", 20)),
        (r"data\..*", S, "data {key} {a} vs {b}", 10),
    ]),
    *_section("env", [(r"env\..*", S, _env_var)]),
    *_section("system", [
        (r"os\.machine", SN, "machine {a} vs {b}", 95),
        (r"os\.wsl", S, ("WSL", ": file I/O across the Windows boundary is slow"), 50),
        (r"python\.version", SN, "Python {a} vs {b}: different wheels and interpreter speed for host-side code", 35),
        (r"python\.implementation", S, "Python implementation {a} vs {b}", 60),
        (r"python\.executable", S, interpreter_difference),
        (r"os\.libc", SN, "C library {a} vs {b}: malloc and libm (exp/log/tanh) differ", 20),
        (r"os\.(release|distro)", S, "OS {key} {a} vs {b}", 20),
        (r"host\.container", S, "container {a} vs {b}: cgroup limits and overlay filesystems apply inside", 25),
        (r"host\.(cloud_provider|platform_hints.*)", S,
         "platform {a} vs {b}: shared or throttled cloud/notebook machines vary", 25),
        (r"host\.virtualized", S, ("a hypervisor", ": virtualised CPUs may be shared or throttled"), 20),
        (r"host\.dmi\..*", S, "hardware {key} {a} vs {b}", 15, 2),
        (r"host\.hostname", S, "host {a} vs {b}", 2),
        (r".*", S, lambda k, a, b: (f"{k} {fmt(a)} vs {fmt(b)}", 5)),  # the catch-all: every key matches
    ]),
]
COMPILED_RULES = [(re.compile(p + r"$"), g, aff, fn) for p, g, aff, fn in RULES]
