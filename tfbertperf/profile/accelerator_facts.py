"""Per-hardware facts as data: which precision an accelerator runs fast, and whether a profile fits its host.

Sources for the numbers: NVIDIA's CUDA compute-capability table (developer.nvidia.com/cuda-gpus), the TF mixed
precision guide (Tensor Cores from compute capability 7.0; older GPUs gain no math speed from float16), AMD's
CDNA ISA guides (matrix cores with bf16 from MI100/gfx908) and the Cloud TPU docs (bfloat16 on every TPU).

Definitions:
  - fp16: the chip runs float16 arithmetic at least as fast as float32 (P100's native half does; P40/P4's
    compute capability 6.1 parts run it at 1/64 rate, so no).
  - fp16_tensor_cores: matrix units that multiply float16 (NVIDIA Tensor Cores, AMD matrix cores).
  - bf16: matrix units that multiply bfloat16 (NVIDIA from compute capability 8.0, AMD from gfx908, all TPUs).
  - recommended_precision: a Keras mixed-precision policy name; bf16 hardware gets "mixed_bfloat16" (same
    speed as float16 there and no loss scaling), fp16 Tensor Cores "mixed_float16", the rest "float32".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping

# NVIDIA: (name pattern, family, compute capability).  First match wins, so longer names come before their
# prefixes (A100 before A10, L40 before L4, GH200 before H200).
_NVIDIA = (
    (r"\bGB200\b", "GB200", "10.0"), (r"\bB200\b", "B200", "10.0"), (r"\bB100\b", "B100", "10.0"),
    (r"\bRTX\s*50\d0", "GeForce RTX 50", "12.0"),
    (r"\bGH200\b", "GH200", "9.0"), (r"\bH200\b", "H200", "9.0"), (r"\bH100\b", "H100", "9.0"),
    (r"\bH800\b", "H800", "9.0"), (r"\bH20\b", "H20", "9.0"),
    (r"\bL40S?\b", "L40", "8.9"), (r"\bL4\b", "L4", "8.9"), (r"\bRTX\s*40\d0", "GeForce RTX 40", "8.9"),
    (r"\bRTX\s*\d000\s*Ada", "RTX Ada", "8.9"),
    (r"\bA100\b", "A100", "8.0"), (r"\bA800\b", "A800", "8.0"), (r"\bA30\b", "A30", "8.0"),
    (r"\bA10G?\b", "A10", "8.6"), (r"\bA40\b", "A40", "8.6"), (r"\bA16\b", "A16", "8.6"), (r"\bA2\b", "A2", "8.6"),
    (r"\bRTX\s*A\d000", "RTX A-series", "8.6"), (r"\bRTX\s*30\d0", "GeForce RTX 30", "8.6"),
    (r"\bOrin\b", "Jetson Orin", "8.7"),
    (r"\bT4\b", "T4", "7.5"), (r"\bRTX\s*20\d0", "GeForce RTX 20", "7.5"), (r"\bQuadro\s*RTX", "Quadro RTX", "7.5"),
    (r"\bXavier\b", "Jetson Xavier", "7.2"),
    (r"\bV100", "V100", "7.0"), (r"\bTITAN\s*V\b", "TITAN V", "7.0"),
    (r"\bP100\b", "P100", "6.0"), (r"\bP40\b", "P40", "6.1"), (r"\bP4\b", "P4", "6.1"),
    (r"\bGTX\s*10\d0", "GeForce GTX 10", "6.1"),
    (r"\bM60\b", "M60", "5.2"), (r"\bM40\b", "M40", "5.2"), (r"\bK80\b", "K80", "3.7"), (r"\bK40", "K40", "3.5"),
)

# AMD Instinct: (name pattern, family, gfx architecture, fp16, matrix cores, bf16).
_AMD = (
    (r"\bMI3[0-9]{2}[A-Z]?\b", "MI300", "gfx942", True, True, True),  # MI300X, MI300A, MI325X
    (r"\bMI2[0-9]{2}X?\b", "MI200", "gfx90a", True, True, True),      # MI250X, MI250, MI210
    (r"\bMI100\b", "MI100", "gfx908", True, True, True),
    (r"\bMI(50|60)\b", "MI50", "gfx906", True, False, False),
)

_TPU = re.compile(r"\bTPU\s*v?(\d+)\s*(e|p|lite)?\b", re.I)


def _policy(bf16: bool, fp16_tc: bool) -> str:
    return "mixed_bfloat16" if bf16 else "mixed_float16" if fp16_tc else "float32"


def _from_cc(family: str, cc: str) -> dict:
    """NVIDIA facts follow from the compute capability alone (see the module docstring)."""
    major, _, minor = cc.partition(".")
    v = (int(major), int(minor or 0))
    bf16, fp16_tc = v >= (8, 0), v >= (7, 0)
    fp16 = fp16_tc or v in ((6, 0), (6, 2))  # P100 and Jetson TX2 have full-rate half; 6.1 parts do not
    note = None
    if fp16 and not fp16_tc:
        note = "float16 arithmetic but no Tensor Cores: mixed_float16 saves memory, not math time"
    return {"family": family, "vendor": "NVIDIA", "compute_capability": f"{v[0]}.{v[1]}", "bf16": bf16, "fp16": fp16,
            "fp16_tensor_cores": fp16_tc, "recommended_precision": _policy(bf16, fp16_tc), "note": note}


def classify_gpu(name: str, compute_capability: str | None = None) -> dict:
    """Facts about one accelerator from its model name ("Tesla V100-SXM2-16GB", "AMD Instinct MI300X", "TPU v4").

    Returns {"family", "vendor", "compute_capability" (NVIDIA "major.minor", else None), "bf16", "fp16",
    "fp16_tensor_cores", "recommended_precision", "note"} (definitions in the module docstring).  An NVIDIA name
    not in the table is classified from `compute_capability` when given (the environment fingerprint has it);
    anything else unknown gets family "unknown" and "float32".
    """
    text = " ".join(str(name or "").split())
    for pattern, family, cc in _NVIDIA:
        if re.search(pattern, text, re.I):
            return _from_cc(family, cc)
    for pattern, family, arch, fp16, matrix, bf16 in _AMD:
        if re.search(pattern, text, re.I):
            return {"family": family, "vendor": "AMD", "compute_capability": None, "arch": arch, "bf16": bf16,
                    "fp16": fp16, "fp16_tensor_cores": matrix, "recommended_precision": _policy(bf16, matrix),
                    "note": None if matrix else "float16 arithmetic but no matrix cores"}
    m = _TPU.search(text)
    if m or re.search(r"\bTrillium\b", text, re.I):
        family = f"TPU v{m.group(1)}{(m.group(2) or '').lower().replace('lite', 'e')}" if m else "TPU v6e"
        # The MXUs multiply bfloat16; float16 is not a TPU type, so the fp16 keys stay False.
        return {"family": family, "vendor": "Google", "compute_capability": None, "bf16": True, "fp16": False,
                "fp16_tensor_cores": False, "recommended_precision": "mixed_bfloat16", "note": None}
    if compute_capability and re.fullmatch(r"\d+(\.\d+)?", str(compute_capability)):
        return _from_cc(text or f"compute capability {compute_capability}", str(compute_capability))
    return {"family": "unknown", "vendor": None, "compute_capability": None, "bf16": False, "fp16": False,
            "fp16_tensor_cores": False, "recommended_precision": "float32",
            "note": f"{text or 'no name'!s} is not in tfbertperf's hardware table"}


def classify_device(kind: str, vendor: str | None = None, model: str | None = None,
                    compute_capability: str | None = None, env_devices=None) -> dict:
    """classify_gpu for a profile's device plane (profile/devices.py device_planes: kind, vendor, model,
    compute_capability), with the environment's GPU list (cross_check's env_devices forms) as the source of the
    model name when the plane has none and the name's compute capability does not contradict the plane's.

    TF's CUPTI planes carry only compute_cap_major/minor (the V100 fixture: 7.0 → mixed_float16); ROCm planes say
    device_vendor "AMD" and put the gfx version in the same stats (9.4 = gfx942 = MI300), so an AMD plane is not
    read as an NVIDIA compute capability.  A TPU plane without a model is a TPU all the same (bf16 everywhere).
    """
    acc = _env_accelerators(env_devices) if env_devices else None
    names = [label for k, label, _ in acc or [] if k == str(kind).upper() and not label.startswith("/")]
    if names and not model and (not compute_capability
                                or classify_gpu(names[0])["compute_capability"] in (None, compute_capability)):
        model = names[0]  # the environment's name, unless its compute capability contradicts the plane's
    if str(kind).upper() == "TPU":
        facts = classify_gpu(model or "")
        if facts["vendor"] != "Google":
            facts = dict(classify_gpu("TPU v4"), family="TPU")
        return facts
    if str(vendor or "").upper().startswith("AMD"):
        return classify_gpu(model or ("AMD Instinct MI300" if compute_capability == "9.4" else "AMD GPU"))
    return classify_gpu(model or "", compute_capability=compute_capability)


def cpu_bf16_capable(flags) -> bool:
    """True when the CPU multiplies bfloat16 in hardware: AVX512_BF16, or AMX (amx_bf16 / amx_tile).

    `flags` is a set of /proc/cpuinfo flag names, or the fingerprint's {"flag": bool} mapping (cpu.flags).
    Without these, TF emulates bf16 on CPU and mixed_bfloat16 is slower than float32.
    """
    have = {k for k, v in flags.items() if v} if isinstance(flags, Mapping) else set(flags or ())
    return bool({f.lower() for f in have} & {"avx512_bf16", "amx_bf16", "amx_tile"})


_KIND = re.compile(r"(?:^|[/:])(GPU|TPU|CPU)(?::|$)", re.I)


def _env_accelerators(env) -> list[tuple[str, str, bool]] | None:
    """(kind, label, seen by TF) per accelerator the environment lists; None when it lists nothing to go by.

    Accepts the fingerprint's devices section (envinfo.collect.devices_info: {"physical": [...], "gpus":
    [{"name", "device_name", "compute_capability"}], "nvidia_smi": {...}}), its "gpus" list, or a plain list of
    device names ("/physical_device:GPU:0") / dicts with "name", "device_type" or "device_name".
    """
    if isinstance(env, Mapping):
        if not any(k in env for k in ("physical", "gpus", "nvidia_smi")):
            return None  # e.g. {"error": …}: the fingerprint could not list devices
        items = list(env.get("gpus") or [])
        items += [p for p in env.get("physical") or [] if "TPU" in str(p).upper()]
        if not items and isinstance(env.get("nvidia_smi"), Mapping):
            # TF saw no GPU but the driver does: still a GPU host (TF built without CUDA, or libraries missing).
            items = [{"device_type": "GPU", "device_name": g.get("name"), "tf": False}
                     for g in env["nvidia_smi"].get("gpus") or []]
        env = items
    out = []
    for d in env or []:
        if isinstance(d, Mapping):
            kind = str(d.get("device_type") or "").upper()
            name = str(d.get("name") or "")
            label = d.get("device_name") or name
        else:
            kind, name = "", str(d)
            label = name
        if not kind:  # a bare model name ("NVIDIA A100…", "TPU v4") names an accelerator too
            m = _KIND.search(name)
            kind = m.group(1).upper() if m else "TPU" if "TPU" in str(label).upper() else "GPU" if label else ""
        if kind in ("GPU", "TPU"):
            out.append((kind, str(label or kind), not isinstance(d, Mapping) or d.get("tf", True)))
    return out


def _listing(kind: str, labels: list[str]) -> str:
    counts = Counter(n for n in labels if not n.startswith("/"))  # model names only, not "/physical_device:…"
    names = ", ".join(n if c == 1 else f"{c}× {n}" for n, c in counts.items())
    return f"{len(labels)} {kind}{'s' if len(labels) != 1 else ''}" + (f" ({names})" if names else "")


def cross_check(hardware_type: str, env_devices) -> str | None:
    """One-line warning when xprof's hardware type disagrees with the devices this environment lists; else None.

    hardware_type is xprof's overview value ("CPU_ONLY", "GPU", "TPU"; "CPU" is read as CPU_ONLY); other values
    and an empty device list give None (nothing to compare).  The usual mismatch: a GPU host whose CUPTI
    tracer failed records a CPU_ONLY profile, so device time is missing from the attribution.
    """
    hw = str(hardware_type or "").strip().upper()
    hw = "CPU_ONLY" if hw in ("CPU", "CPU_ONLY") else hw
    if hw not in ("CPU_ONLY", "GPU", "TPU") or not env_devices:
        return None
    acc = _env_accelerators(env_devices)
    if acc is None:
        return None
    gpus = [label for kind, label, _ in acc if kind == "GPU"]
    tpus = [label for kind, label, _ in acc if kind == "TPU"]
    if hw == "CPU_ONLY" and gpus and not any(tf for kind, _, tf in acc if kind == "GPU"):
        return (f"the profile says CPU_ONLY and TensorFlow saw no GPU, but nvidia-smi lists {_listing('GPU', gpus)}: "
                f"TensorFlow ran on the CPU (a CPU-only build or missing CUDA libraries), not on the GPU")
    if hw == "CPU_ONLY" and gpus:
        return (f"the profile says CPU_ONLY but this host has {_listing('GPU', gpus)}: GPU tracing (CUPTI) "
                f"probably failed — device time is missing from this attribution")
    if hw == "CPU_ONLY" and tpus:
        return (f"the profile says CPU_ONLY but this host has {_listing('TPU', tpus)}: TPU tracing probably "
                f"failed — device time is missing from this attribution")
    for kind, present in (("GPU", gpus), ("TPU", tpus)):
        if hw == kind and not present:
            return (f"the profile says {kind} but this host lists no {kind}: it was probably recorded on another "
                    f"machine — compare it with that machine's environment, not this one")
    return None


def measured_facts(model: str | None, family: str | None = None) -> dict | None:
    """The device table's measured figures (train/devices.yaml, a profile's `measured:` block) for a chip whose
    plane names it ("NVIDIA H100 80GB HBM3") or whose family is known ("H100"): {"profile", "source",
    "fp32_over_bf16_step", "pinned_h2d_gb_per_s", "pageable_h2d_gb_per_s": [low, high]}; None when the table
    has no measurement for it."""
    from tfbertperf.train.emulated_devices import load_profiles

    names = " ".join(x for x in (model, family) if x)
    if not names:
        return None
    for name, prof in load_profiles()["profiles"].items():
        m = prof.get("measured")
        if m and re.search(rf"\b{re.escape(m['matches'])}\b", names):
            return {"profile": name, **{k: v for k, v in m.items() if k != "matches"}}
    return None
