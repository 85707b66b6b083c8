"""What software this process runs with, read locally: Python, OS, installed packages, TensorFlow's build,
thread pools, oneDNN, XLA, precision policy, determinism, and the relevant environment variables.

Every collector returns a JSON-ready dict.  Nothing here makes a network call or initialises the TensorFlow
runtime (no logical devices are created, so a run can still set threads, memory growth or virtual devices after
fingerprinting).  Values are redacted again by fingerprinting.fingerprint before they leave.
"""

from __future__ import annotations

import json
import os
import platform
import re
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


def read_text(path: str) -> str | None:
    """A small system file's text (stripped), or None where it does not exist or cannot be read."""
    try:
        return Path(path).read_text(errors="replace").strip()
    except OSError:
        return None


def error_entry(e: BaseException) -> dict:
    """{"error": "<type>: <message>"}, redacted and short: what a section holds when its collector failed."""
    return {"error": redact_text(f"{type(e).__name__}: {e}")[:300]}


# ---- Python / OS ----------------------------------------------------------------------------------------

def python_info() -> dict:
    """Python version, implementation and interpreter (a venv/conda prefix says which install is used)."""
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": os.path.realpath(sys.executable),  # python and python3 are one interpreter
        "prefix": sys.prefix,
        "virtualenv": sys.prefix != getattr(sys, "base_prefix", sys.prefix) or bool(os.environ.get("CONDA_PREFIX")),
    }


def os_info() -> dict:
    """Kernel, distribution and C library (glibc versions change malloc and libm behaviour)."""
    distro = None
    osr = read_text("/etc/os-release")
    if osr:
        m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', osr, re.M)
        distro = m.group(1) if m else None
    libc = platform.libc_ver()
    version_text = read_text("/proc/version") or ""
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "distro": distro,
        "libc": f"{libc[0]} {libc[1]}".strip() or None,
        "wsl": "microsoft" in version_text.lower(),
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
        build = error_entry(e)
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
        info["port_error"] = error_entry(e)["error"]
    return info


# ---- threads, kernels, precision ------------------------------------------------------------------------

def threads_info(tf) -> dict:
    """TF thread-pool settings (0 = TF decides, usually one per core) and the OpenMP/MKL env knobs."""
    out = {}
    try:
        out["intra_op"] = tf.config.threading.get_intra_op_parallelism_threads()
        out["inter_op"] = tf.config.threading.get_inter_op_parallelism_threads()
    except Exception as e:
        out.update(error_entry(e))
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
        return {"enabled": None, "TF_ENABLE_ONEDNN_OPTS": raw, **error_entry(e)}
    return {"enabled": enabled, "TF_ENABLE_ONEDNN_OPTS": raw,
            "source": "TF_ENABLE_ONEDNN_OPTS" if raw is not None else "default for this build/platform"}


def xla_info(tf) -> dict:
    """Global XLA auto-clustering and the XLA/TF_XLA flags (per-step jit_compile is in the run config)."""
    out = {"XLA_FLAGS": os.environ.get("XLA_FLAGS"), "TF_XLA_FLAGS": os.environ.get("TF_XLA_FLAGS")}
    try:
        out["auto_jit"] = tf.config.optimizer.get_jit() or "off"
        out["grappler"] = {k: v for k, v in tf.config.optimizer.get_experimental_options().items()}
    except Exception as e:
        out.update(error_entry(e))
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
        out.update(error_entry(e))
    try:
        out["tf32_enabled"] = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    except Exception as e:
        out["tf32_error"] = error_entry(e)["error"]
    return out


def determinism_info() -> dict:
    """Op determinism (tf.config.experimental.enable_op_determinism) and the env vars that request it."""
    out = {}
    try:
        from tensorflow.python.framework import config as tfconfig

        out["op_determinism"] = bool(tfconfig.is_op_determinism_enabled())
    except Exception as e:
        out["op_determinism"] = None
        out.update(error_entry(e))
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
