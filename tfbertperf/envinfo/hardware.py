"""What machine this is, read locally: host (container, cloud/notebook hints), devices TF sees (and nvidia-smi),
CPU (cores usable by this process, cgroup quota, instruction-set flags) and memory.

Same rules as software.py: JSON-ready dicts, no network call, no TF runtime initialisation.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sys

from tfbertperf.envinfo.software import error_entry, read_text
from tfbertperf.redact import redact_text

# Env vars whose mere presence hints at the platform (values are not recorded).
CLOUD_ENV_HINTS = {
    "COLAB_RELEASE_TAG": "colab", "COLAB_GPU": "colab", "COLAB_TPU_ADDR": "colab",
    "KAGGLE_KERNEL_RUN_TYPE": "kaggle", "KAGGLE_URL_BASE": "kaggle",
    "SM_CURRENT_HOST": "aws-sagemaker", "SAGEMAKER_JOB_NAME": "aws-sagemaker", "AWS_EXECUTION_ENV": "aws",
    "AWS_REGION": "aws", "AWS_DEFAULT_REGION": "aws", "ECS_CONTAINER_METADATA_URI": "aws-ecs",
    "AZUREML_RUN_ID": "azureml", "AZUREML_EXPERIMENT_ID": "azureml", "MSI_ENDPOINT": "azure",
    "DATABRICKS_RUNTIME_VERSION": "databricks", "K_SERVICE": "gcp-cloud-run", "CLOUD_ML_JOB_ID": "gcp-vertex",
    "AIP_MODEL_DIR": "gcp-vertex", "CLOUDSDK_CONFIG": "gcp-sdk", "GOOGLE_CLOUD_PROJECT": "gcp",
    "GCE_METADATA_HOST": "gcp", "TPU_NAME": "gcp-tpu", "TPU_ACCELERATOR_TYPE": "gcp-tpu",
    "KUBERNETES_SERVICE_HOST": "kubernetes", "JPY_PARENT_PID": "jupyter", "VSCODE_PID": "vscode",
    "GITHUB_ACTIONS": "github-actions", "PAPERSPACE_CLUSTER_ID": "paperspace", "LIGHTNING_CLOUD_PROJECT_ID":
    "lightning", "SLURM_JOB_ID": "slurm",
}

# DMI strings → provider.  Read from /sys/class/dmi/id (no root needed for these fields).
_DMI_PROVIDERS = (
    ("google", "gcp"), ("amazon", "aws"), ("microsoft corporation", "azure"), ("alibaba", "alibaba"),
    ("oraclecloud", "oracle"), ("digitalocean", "digitalocean"), ("openstack", "openstack"),
    ("hetzner", "hetzner"), ("scaleway", "scaleway"), ("vmware", "vmware"), ("qemu", "kvm/qemu"),
    ("kvm", "kvm/qemu"), ("xen", "xen"), ("innotek", "virtualbox"), ("parallels", "parallels"),
)
_AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"

# CPU flags that decide which kernels oneDNN/Eigen/XLA can use for BERT's matmuls.
CPU_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "neon", "asimd", "sve",
)


def host_info() -> dict:
    """Hostname, container and cloud/notebook hints, from local files and env var *names* only."""
    env = os.environ
    dmi = {}
    for name in ("sys_vendor", "product_name", "product_version", "bios_vendor", "board_vendor", "chassis_vendor"):
        v = read_text(f"/sys/class/dmi/id/{name}")
        if v:
            dmi[name] = v
    asset = read_text("/sys/class/dmi/id/chassis_asset_tag")
    provider = None
    text = " ".join(dmi.values()).lower()
    for needle, name in _DMI_PROVIDERS:
        if needle in text:
            provider = name
            break
    if asset == _AZURE_ASSET_TAG:
        provider = "azure"
    hints = sorted({v for k, v in CLOUD_ENV_HINTS.items() if k in env})
    if "ipykernel" in sys.modules and "jupyter" not in hints:
        hints.append("jupyter")
    cgroup = read_text("/proc/1/cgroup") or ""
    container = None
    if os.path.exists("/.dockerenv"):
        container = "docker"
    elif os.path.exists("/run/.containerenv"):
        container = "podman"
    elif re.search(r"(docker|containerd|kubepods|lxc|libpod)", cgroup):
        container = "container"
    if "KUBERNETES_SERVICE_HOST" in env:
        container = f"{container or 'container'} (kubernetes)"
    cpuinfo = read_text("/proc/cpuinfo") or ""
    return {
        "hostname": socket.gethostname(),
        "container": container,
        "cloud_provider": provider,
        "platform_hints": hints,
        "dmi": dmi,
        "virtualized": bool(re.search(r"^flags\s*:.*\bhypervisor\b", cpuinfo, re.M)) or provider in (
            "kvm/qemu", "xen", "vmware", "virtualbox", "parallels"),
    }


def _nvidia_smi() -> dict | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    fields = ("name", "memory.total", "driver_version", "compute_cap", "pcie.link.gen.max",
              "pcie.link.width.max", "power.limit", "clocks.max.sm", "persistence_mode")
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=3,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return error_entry(e)
    if out.returncode != 0:
        return {"error": redact_text(" ".join((out.stderr or out.stdout).split()))[:300]}
    gpus = []
    for line in out.stdout.strip().splitlines():
        vals = [v.strip() for v in line.split(",")]
        gpus.append(dict(zip(fields, vals)))
    driver = gpus[0].get("driver_version") if gpus else None
    return {"driver_version": driver, "gpus": gpus}


def devices_info(tf) -> dict:
    """Physical devices TF sees (no runtime initialisation), GPU details and the NVIDIA driver if present."""
    out: dict = {}
    try:
        phys = tf.config.list_physical_devices()
    except Exception as e:
        return error_entry(e)
    out["physical"] = [d.name for d in phys]
    gpus = []
    for d in phys:
        if d.device_type != "GPU":
            continue
        g = {"name": d.name}
        try:
            det = tf.config.experimental.get_device_details(d)
            g["device_name"] = det.get("device_name")
            cc = det.get("compute_capability")
            g["compute_capability"] = ".".join(map(str, cc)) if cc else None
        except Exception as e:
            g.update(error_entry(e))
        gpus.append(g)
    out["gpus"] = gpus
    out["gpu_count"] = len(gpus)
    out["tpu_count"] = sum(1 for d in phys if d.device_type == "TPU")
    out["cpu_count"] = sum(1 for d in phys if d.device_type == "CPU")
    out["nvidia_smi"] = _nvidia_smi()
    return out


def _cgroup_cpu_limit() -> float | None:
    """CPUs allowed by the cgroup quota (cpu.max or cfs_quota/period); None when unlimited or unknown."""
    v2 = read_text("/sys/fs/cgroup/cpu.max")
    if v2:
        quota, _, period = v2.partition(" ")
        if quota != "max" and period:
            return round(int(quota) / int(period), 2)
        return None
    q, p = read_text("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), read_text("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
    try:
        if q and p and int(q) > 0:
            return round(int(q) / int(p), 2)
    except ValueError:
        pass
    return None


def cpu_info() -> dict:
    """CPU model, cores (logical, usable by this process, cgroup quota), sockets and the flags that matter."""
    text = read_text("/proc/cpuinfo") or ""

    def field(name):
        m = re.search(rf"^{name}\s*:\s*(.*)$", text, re.M)
        return m.group(1).strip() if m else None

    flags = set((field("flags") or field("Features") or "").split())
    physical = set()  # (socket, core) pairs: hyperthreads share one
    for block in text.split("\n\n"):
        pid = re.search(r"^physical id\s*:\s*(\d+)", block, re.M)
        cid = re.search(r"^core id\s*:\s*(\d+)", block, re.M)
        if pid and cid:
            physical.add((pid.group(1), cid.group(1)))
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    mhz = field("cpu MHz")
    return {
        "model": field("model name") or platform.processor() or None,
        "vendor": field("vendor_id"),
        "architecture": platform.machine(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "cgroup_cpu_limit": _cgroup_cpu_limit(),
        "physical_cores": len(physical) or None,
        "sockets": len(set(re.findall(r"^physical id\s*:\s*(\d+)", text, re.M))) or None,
        "mhz": round(float(mhz), 0) if mhz else None,
        "flags": {f: (f in flags) for f in CPU_FLAGS},
    }


def memory_info() -> dict:
    """Host RAM and the cgroup memory limit, in MiB."""
    text = read_text("/proc/meminfo") or ""

    def kb(name):
        m = re.search(rf"^{name}:\s*(\d+)", text, re.M)
        return int(m.group(1)) // 1024 if m else None

    limit = read_text("/sys/fs/cgroup/memory.max") or read_text("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    limit_mb = None
    if limit and limit != "max":
        try:
            b = int(limit)
            limit_mb = b // (1 << 20) if b < (1 << 60) else None  # 2^63-ish = unlimited in cgroup v1
        except ValueError:
            pass
    return {"total_mb": kb("MemTotal"), "available_mb": kb("MemAvailable"), "swap_total_mb": kb("SwapTotal"),
            "cgroup_limit_mb": limit_mb}
