"""What this machine is, read locally: every function here returns a JSON-ready dict and never raises.

Nothing here makes a network call or initialises the TensorFlow runtime (no logical devices are created, so a
run can still set threads, memory growth or virtual devices after fingerprinting).  Values are redacted by the
caller (tfbertperf.env.fingerprint) before they leave.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from tfbertperf.redact import REDACTED, is_secret_name, redact_connection_string, redact_text

# Distributions whose version changes speed or numerics (or, for the SDKs, remote-read behaviour).
PACKAGES = (
    "tensorflow", "tensorflow-cpu", "tf-nightly", "keras", "tf-keras", "tensorflow-text", "tensorflow-io",
    "tensorflow-io-gcs-filesystem", "tensorboard", "tensorboard-plugin-profile", "xprof", "numpy", "protobuf",
    "ml-dtypes", "h5py", "transformers", "google-cloud-storage", "google-auth", "azure-storage-blob",
    "azure-core", "nvidia-cudnn-cu12", "nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12",
)

# Environment variables worth recording, by prefix or exact name: they change threading, kernels, device
# visibility, allocation, logging, XLA, or where/how data is read.
ENV_PREFIXES = (
    "TF_", "XLA_", "CUDA_", "NVIDIA_", "OMP_", "KMP_", "MKL_", "ONEDNN_", "DNNL_", "OPENBLAS_", "TPU_",
    "MALLOC_", "KERAS_", "TFBERTPERF_", "AZURE_STORAGE_", "HF_", "HUGGINGFACE_", "TCMALLOC_",
)
ENV_NAMES = (
    "PYTHONHASHSEED", "LD_PRELOAD", "LD_LIBRARY_PATH", "STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "GRPC_DNS_RESOLVER",
)

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


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace").strip()
    except OSError:
        return None


def _error(e: BaseException) -> dict:
    return {"error": redact_text(f"{type(e).__name__}: {e}")[:300]}


# ---- Python / OS / host ---------------------------------------------------------------------------------

def python_info() -> dict:
    """Python version, implementation and interpreter (a venv/conda prefix says which install is used)."""
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "virtualenv": sys.prefix != getattr(sys, "base_prefix", sys.prefix) or bool(os.environ.get("CONDA_PREFIX")),
    }


def os_info() -> dict:
    """Kernel, distribution and C library (glibc versions change malloc and libm behaviour)."""
    distro = None
    osr = _read("/etc/os-release")
    if osr:
        m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', osr, re.M)
        distro = m.group(1) if m else None
    libc = platform.libc_ver()
    version_text = _read("/proc/version") or ""
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "distro": distro,
        "libc": f"{libc[0]} {libc[1]}".strip() or None,
        "wsl": "microsoft" in version_text.lower(),
    }


def host_info() -> dict:
    """Hostname, container and cloud/notebook hints, from local files and env var *names* only."""
    env = os.environ
    dmi = {}
    for name in ("sys_vendor", "product_name", "product_version", "bios_vendor", "board_vendor", "chassis_vendor"):
        v = _read(f"/sys/class/dmi/id/{name}")
        if v:
            dmi[name] = v
    asset = _read("/sys/class/dmi/id/chassis_asset_tag")
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
    cgroup = _read("/proc/1/cgroup") or ""
    container = None
    if os.path.exists("/.dockerenv"):
        container = "docker"
    elif os.path.exists("/run/.containerenv"):
        container = "podman"
    elif re.search(r"(docker|containerd|kubepods|lxc|libpod)", cgroup):
        container = "container"
    if "KUBERNETES_SERVICE_HOST" in env:
        container = f"{container or 'container'} (kubernetes)"
    cpuinfo = _read("/proc/cpuinfo") or ""
    return {
        "hostname": socket.gethostname(),
        "container": container,
        "cloud_provider": provider,
        "platform_hints": hints,
        "dmi": dmi,
        "virtualized": bool(re.search(r"^flags\s*:.*\bhypervisor\b", cpuinfo, re.M)) or provider in (
            "kvm/qemu", "xen", "vmware", "virtualbox", "parallels"),
    }


# ---- packages and TensorFlow ----------------------------------------------------------------------------

def package_versions() -> dict:
    """Installed versions by distribution name (None = not installed); read from metadata, no import."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if name in ("tensorflow", "keras", "numpy", "protobuf"):
                out[name] = None  # always shown, so a diff can say "not installed on B"
        except Exception as e:  # a broken dist-info must not break the fingerprint
            out[name] = f"unreadable: {type(e).__name__}"
    return out


def tensorflow_info(tf) -> dict:
    """TF version and build: CUDA/cuDNN it was built for, compiler, XLA, oneDNN availability."""
    try:
        build = dict(tf.sysconfig.get_build_info())
    except Exception as e:
        build = _error(e)
    info = {
        "version": tf.version.VERSION,
        "git_version": tf.version.GIT_VERSION,
        "compiler": tf.version.COMPILER_VERSION,
        "build": {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in build.items()},
    }
    try:
        from tensorflow.python.util import _pywrap_util_port as port

        info["built_with_xla"] = bool(port.IsBuiltWithXLA())
        info["built_with_rocm"] = bool(port.IsBuiltWithROCm())
    except Exception as e:
        info["port_error"] = _error(e)["error"]
    return info


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
        return _error(e)
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
        return _error(e)
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
            g.update(_error(e))
        gpus.append(g)
    out["gpus"] = gpus
    out["gpu_count"] = len(gpus)
    out["tpu_count"] = sum(1 for d in phys if d.device_type == "TPU")
    out["cpu_count"] = sum(1 for d in phys if d.device_type == "CPU")
    out["nvidia_smi"] = _nvidia_smi()
    return out


# ---- CPU, memory, threads -------------------------------------------------------------------------------

def _cgroup_cpu_limit() -> float | None:
    """CPUs allowed by the cgroup quota (cpu.max or cfs_quota/period); None when unlimited or unknown."""
    v2 = _read("/sys/fs/cgroup/cpu.max")
    if v2:
        quota, _, period = v2.partition(" ")
        if quota != "max" and period:
            return round(int(quota) / int(period), 2)
        return None
    q, p = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
    try:
        if q and p and int(q) > 0:
            return round(int(q) / int(p), 2)
    except ValueError:
        pass
    return None


def cpu_info() -> dict:
    """CPU model, cores (logical, usable by this process, cgroup quota), sockets and the flags that matter."""
    text = _read("/proc/cpuinfo") or ""

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
    text = _read("/proc/meminfo") or ""

    def kb(name):
        m = re.search(rf"^{name}:\s*(\d+)", text, re.M)
        return int(m.group(1)) // 1024 if m else None

    limit = _read("/sys/fs/cgroup/memory.max") or _read("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    limit_mb = None
    if limit and limit != "max":
        try:
            b = int(limit)
            limit_mb = b // (1 << 20) if b < (1 << 60) else None  # 2^63-ish = unlimited in cgroup v1
        except ValueError:
            pass
    return {"total_mb": kb("MemTotal"), "available_mb": kb("MemAvailable"), "swap_total_mb": kb("SwapTotal"),
            "cgroup_limit_mb": limit_mb}


def threads_info(tf) -> dict:
    """TF thread-pool settings (0 = TF decides, usually one per core) and the OpenMP/MKL env knobs."""
    out = {}
    try:
        out["intra_op"] = tf.config.threading.get_intra_op_parallelism_threads()
        out["inter_op"] = tf.config.threading.get_inter_op_parallelism_threads()
    except Exception as e:
        out.update(_error(e))
    env = os.environ
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                 "KMP_BLOCKTIME", "KMP_AFFINITY", "OMP_PROC_BIND", "TF_GPU_THREAD_MODE"):
        out[name] = env.get(name)
    return out


def onednn_info() -> dict:
    """Whether TF's oneDNN (MKL) CPU kernels are on, and why (TF_ENABLE_ONEDNN_OPTS or the platform default)."""
    raw = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    try:
        from tensorflow.python.util import _pywrap_util_port as port

        enabled = bool(port.IsMklEnabled())
    except Exception as e:
        return {"enabled": None, "TF_ENABLE_ONEDNN_OPTS": raw, **_error(e)}
    return {"enabled": enabled, "TF_ENABLE_ONEDNN_OPTS": raw,
            "source": "TF_ENABLE_ONEDNN_OPTS" if raw is not None else "default for this build/platform"}


def xla_info(tf) -> dict:
    """Global XLA auto-clustering and the XLA/TF_XLA flags (per-step jit_compile is in the run config)."""
    out = {"XLA_FLAGS": os.environ.get("XLA_FLAGS"), "TF_XLA_FLAGS": os.environ.get("TF_XLA_FLAGS")}
    try:
        out["auto_jit"] = tf.config.optimizer.get_jit() or "off"
        out["grappler"] = {k: v for k, v in tf.config.optimizer.get_experimental_options().items()}
    except Exception as e:
        out.update(_error(e))
    return out


def precision_info(tf) -> dict:
    """The Keras global dtype policy (mixed_float16 / mixed_bfloat16 change speed and numerics) and TF32."""
    out = {}
    try:
        import keras

        out["keras_policy"] = keras.mixed_precision.global_policy().name
        out["keras_version"] = keras.__version__
        out["keras_backend"] = keras.backend.backend()
    except Exception as e:
        out["keras_policy"] = None
        out.update(_error(e))
    try:
        out["tf32_enabled"] = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    except Exception as e:
        out["tf32_error"] = _error(e)["error"]
    return out


def determinism_info() -> dict:
    """Op determinism (tf.config.experimental.enable_op_determinism) and the env vars that request it."""
    out = {}
    try:
        from tensorflow.python.framework import config as tfconfig

        out["op_determinism"] = bool(tfconfig.is_op_determinism_enabled())
    except Exception as e:
        out["op_determinism"] = None
        out.update(_error(e))
    for name in ("TF_DETERMINISTIC_OPS", "TF_CUDNN_DETERMINISTIC", "PYTHONHASHSEED"):
        out[name] = os.environ.get(name)
    return out


# ---- environment variables ------------------------------------------------------------------------------

def _credentials_file_info(path: str) -> dict:
    """A credentials JSON file: its path and `type` only — never any other content."""
    info = {"path": path, "exists": os.path.isfile(path)}
    if info["exists"]:
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read(1 << 20))
            t = doc.get("type") if isinstance(doc, dict) else None
            info["type"] = t if isinstance(t, str) and re.fullmatch(r"[a-z_]{1,40}", t) else None
        except (OSError, ValueError):
            info["type"] = "unreadable"
    return info


def env_vars() -> dict:
    """Relevant env vars (see ENV_PREFIXES/ENV_NAMES) with secret values replaced; connection strings keep
    their endpoint parts; credential-file variables show the path and file type, never the contents."""
    out: dict = {}
    for k, v in sorted(os.environ.items()):
        if not (k.startswith(ENV_PREFIXES) or k in ENV_NAMES):
            continue
        if k == "GOOGLE_APPLICATION_CREDENTIALS":
            out[k] = _credentials_file_info(v)
        elif "CONNECTION_STRING" in k.upper():
            out[k] = redact_connection_string(v)
        elif is_secret_name(k):
            out[k] = REDACTED if v else ""
        else:
            out[k] = redact_text(v)
    return out
