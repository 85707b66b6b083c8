"""Per-hardware facts: precision per accelerator and CPU, and the profile-vs-environment cross-check."""

from __future__ import annotations

import pytest

from tfbertperf.profile.accelerator_facts import classify_device, classify_gpu, cpu_bf16_capable, cross_check

KEYS = {"family", "compute_capability", "bf16", "fp16_tensor_cores", "recommended_precision"}


def test_cpu_without_bf16_flags():
    assert not cpu_bf16_capable({"sse4_2", "avx2", "fma", "avx512f", "avx512_vnni"})
    assert not cpu_bf16_capable({"avx512_bf16": False, "amx_bf16": False, "avx2": True})  # fingerprint shape
    assert not cpu_bf16_capable(set())


def test_cpu_with_bf16_flags():
    assert cpu_bf16_capable({"avx512f", "avx512_bf16"})
    assert cpu_bf16_capable({"amx_tile"})
    assert cpu_bf16_capable({"avx512_bf16": False, "amx_bf16": True})


def test_v100_is_fp16():
    f = classify_gpu("Tesla V100-SXM2-16GB")
    assert KEYS <= set(f)
    assert (f["family"], f["compute_capability"], f["bf16"], f["fp16_tensor_cores"]) == ("V100", "7.0", False, True)
    assert f["recommended_precision"] == "mixed_float16"


def test_t4_is_fp16():
    f = classify_gpu("Tesla T4")
    assert (f["compute_capability"], f["bf16"], f["recommended_precision"]) == ("7.5", False, "mixed_float16")


def test_p100_has_fp16_but_no_tensor_cores():
    f = classify_gpu("Tesla P100-PCIE-16GB")
    assert (f["compute_capability"], f["fp16"], f["fp16_tensor_cores"]) == ("6.0", True, False)
    assert f["recommended_precision"] == "float32" and "Tensor Cores" in f["note"]


@pytest.mark.parametrize("name, cc", [("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA A10G", "8.6"), ("NVIDIA L4", "8.9")])
def test_ampere_and_ada_are_bf16(name, cc):
    f = classify_gpu(name)
    assert (f["compute_capability"], f["bf16"], f["recommended_precision"]) == (cc, True, "mixed_bfloat16")


def test_a100_is_bf16_and_not_mistaken_for_a10():
    f = classify_gpu("NVIDIA A100-SXM4-80GB")
    assert f["family"] == "A100" and f["bf16"] and f["recommended_precision"] == "mixed_bfloat16"


def test_h100_is_bf16():
    f = classify_gpu("NVIDIA H100 80GB HBM3")
    assert (f["family"], f["compute_capability"], f["bf16"]) == ("H100", "9.0", True)
    assert f["recommended_precision"] == "mixed_bfloat16"


def test_tpu_is_bf16():
    f = classify_gpu("TPU v4")
    assert (f["family"], f["bf16"], f["fp16_tensor_cores"], f["compute_capability"]) == ("TPU v4", True, False, None)
    assert f["recommended_precision"] == "mixed_bfloat16"
    assert classify_gpu("TPU v5 lite")["family"] == "TPU v5e"


def test_mi300x_is_bf16():
    f = classify_gpu("AMD Instinct MI300X")
    assert (f["family"], f["bf16"], f["compute_capability"]) == ("MI300", True, None)
    assert f["recommended_precision"] == "mixed_bfloat16"


def test_unknown_name_uses_the_compute_capability_when_given():
    assert classify_gpu("Mystery Accelerator 9000")["recommended_precision"] == "float32"
    assert classify_gpu("NVIDIA Future GPU", compute_capability="9.0")["recommended_precision"] == "mixed_bfloat16"


# The fingerprint's devices section as envinfo.collect.devices_info writes it on a 1-GPU host.
A100_HOST = {"physical": ["/physical_device:CPU:0", "/physical_device:GPU:0"],
             "gpus": [{"name": "/physical_device:GPU:0", "device_name": "NVIDIA A100-SXM4-80GB",
                       "compute_capability": "8.0"}],
             "gpu_count": 1, "tpu_count": 0, "cpu_count": 1, "nvidia_smi": None}
CPU_HOST = {"physical": ["/physical_device:CPU:0"], "gpus": [], "gpu_count": 0, "tpu_count": 0, "cpu_count": 1,
            "nvidia_smi": None}


def test_cupti_failure_is_reported():
    msg = cross_check("CPU_ONLY", A100_HOST)
    assert msg and "\n" not in msg
    assert msg.startswith("the profile says CPU_ONLY but this host has 1 GPU (NVIDIA A100-SXM4-80GB)")
    assert "CUPTI" in msg and "device time is missing" in msg
    # the same from a plain list of device names or of gpus entries
    assert "8 GPUs" in cross_check("CPU_ONLY", [f"/physical_device:GPU:{i}" for i in range(8)])
    assert "2 GPUs (2× Tesla V100-SXM2-16GB)" in cross_check("CPU_ONLY", [
        {"name": f"/physical_device:GPU:{i}", "device_name": "Tesla V100-SXM2-16GB"} for i in range(2)])


def test_profile_from_another_machine_is_reported():
    assert "lists no GPU" in cross_check("GPU", CPU_HOST)
    assert "lists no TPU" in cross_check("TPU", ["/physical_device:CPU:0"])


def test_gpu_invisible_to_tensorflow_is_reported():
    host = dict(CPU_HOST, nvidia_smi={"driver_version": "550.54", "gpus": [{"name": "Tesla T4"}]})
    msg = cross_check("CPU_ONLY", host)
    assert "TensorFlow saw no GPU" in msg and "Tesla T4" in msg


def test_consistent_profiles_give_none():
    assert cross_check("GPU", A100_HOST) is None
    assert cross_check("CPU_ONLY", CPU_HOST) is None
    assert cross_check("TPU", ["/physical_device:CPU:0", "/physical_device:TPU:0"]) is None
    assert cross_check("UNKNOWN_HARDWARE", A100_HOST) is None  # nothing to compare
    assert cross_check("CPU_ONLY", {"error": "RuntimeError: no devices"}) is None


def test_device_planes_are_classified_from_their_stats_and_the_environment():
    v100 = classify_device("GPU", None, None, "7.0")  # TF's CUPTI plane: compute capability only
    assert (v100["vendor"], v100["recommended_precision"]) == ("NVIDIA", "mixed_float16")
    amd = classify_device("GPU", "AMD", None, "9.4")  # ROCm: the gfx version in the same stats, not an NVIDIA CC
    assert (amd["family"], amd["vendor"], amd["recommended_precision"]) == ("MI300", "AMD", "mixed_bfloat16")
    assert classify_device("TPU")["recommended_precision"] == "mixed_bfloat16"
    assert classify_device("GPU", None, None, None, A100_HOST)["family"] == "A100"  # named by the environment
    assert classify_device("GPU", None, None, "7.0", A100_HOST)["family"] != "A100"  # unless the CC contradicts it
