"""Device planes read from real accelerator captures (../shared/fixtures/profiles, facts in its README)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tfbertperf.errors import UsageError
from tfbertperf.profile import devices as dev

from profile_fixtures import ATTENTION, FIXTURES, GEMM, MANGLED, V100

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"accelerator profile fixtures not found at {FIXTURES}")


def _by_name(path: Path) -> dict[str, dict]:
    return {d["name"]: d for d in dev.device_planes([str(path)])}


def test_v100_planes_match_the_readme_facts():
    t0 = time.perf_counter()
    planes = dev.device_planes([str(V100)])
    assert time.perf_counter() - t0 < 3.0  # a 3 MB capture parses in well under a few seconds
    assert [d["name"] for d in planes] == [f"/device:GPU:{i}" for i in range(8)]
    for d in planes:
        assert set(dev.CONTRACT_KEYS) <= set(d)
        assert d["kind"] == "GPU"
    by = {d["name"]: d for d in planes}
    for name, busy, memcpy, events in (("/device:GPU:4", 14.825, 0.198, 759), ("/device:GPU:6", 14.865, 0.239, 778)):
        assert by[name]["busy_ms"] == pytest.approx(busy, rel=0.01)
        assert by[name]["memcpy_ms"] == pytest.approx(memcpy, rel=0.01)
        assert by[name]["events"] == events
        assert by[name]["h2d_ms"] > 0 and by[name]["d2h_ms"] > 0
        # memcpy is the union of all copies, so at most the sum of its H2D and D2H parts
        assert by[name]["memcpy_ms"] <= by[name]["h2d_ms"] + by[name]["d2h_ms"] + 1e-3
        assert 0 < by[name]["busy_fraction"] <= 1
        assert by[name]["busy_fraction"] == pytest.approx(by[name]["busy_ms"] / by[name]["window_ms"], abs=1e-3)
    gpu1 = by["/device:GPU:1"]
    assert gpu1["memcpy_ms"] == pytest.approx(0.034, abs=0.0005)
    assert gpu1["h2d_ms"] == gpu1["memcpy_ms"] and gpu1["busy_ms"] == 0 and gpu1["events"] == 19
    for i in (0, 2, 3, 5, 7):
        idle = by[f"/device:GPU:{i}"]
        assert idle["events"] == 0
        assert all(idle[k] == 0 for k in dev.CONTRACT_KEYS if k not in ("name", "kind"))


def test_v100_active_summary_and_table():
    planes = dev.device_planes([str(V100)])
    summary = dev.active_summary(planes)
    assert summary == ("3 of 8 GPUs active: GPU:1, GPU:4, GPU:6; 5 idle: GPU:0, GPU:2, GPU:3, GPU:5, GPU:7")
    table = dev.format_device_table(planes)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["device", "kind", "busy"]
    assert len(lines) == 2 + 8 + 1 and lines[-1] == summary
    assert len({len(line) for line in lines[2:-1]}) == 1  # fixed width: every device row is as long
    row4 = next(line for line in lines if line.startswith("GPU:4 "))
    assert "14.825" in row4 and "0.198" in row4


def test_v100_h2d_per_step():
    paths = [str(V100)]
    steps = dev.device_steps(paths)
    assert [(s["device"], s["step"]) for s in steps] == [("/device:GPU:4", "0"), ("/device:GPU:6", "0")]
    assert steps[0]["duration_ms"] == pytest.approx(19.87, abs=0.01)
    gpu4 = dev.h2d_intervals(paths, device="GPU:4")
    assert gpu4 and all(s < e for s, e in gpu4) and all(a[1] < b[0] for a, b in zip(gpu4, gpu4[1:]))
    everything = (min(s for s, _ in gpu4) - 1, max(e for _, e in gpu4) + 1)
    assert dev.h2d_ms_between(paths, *everything, device="/device:GPU:4") == _by_name(V100)["/device:GPU:4"]["h2d_ms"]
    in_step = dev.h2d_ms_between(paths, steps[0]["start_ps"], steps[0]["end_ps"], device="GPU:4")
    assert 0 < in_step < _by_name(V100)["/device:GPU:4"]["h2d_ms"]  # some copies ran before the step began
    per_step = dev.h2d_ms_by_step(paths)
    assert set(per_step) == {"0"} and per_step["0"] >= in_step
    # the union over all planes never exceeds the sum of the per-plane H2D times
    total = sum(e - s for s, e in dev.h2d_intervals(paths)) / dev.PS_PER_MS
    assert 0 < total <= sum(d["h2d_ms"] for d in dev.device_planes(paths)) + 1e-3


@pytest.mark.parametrize("path, busy, window, events", [(GEMM, 3.475, 9.456, 54), (ATTENTION, 3.846, 32.563, 105)])
def test_mi300x_jax_captures(path, busy, window, events):
    planes = dev.device_planes([str(path)])
    assert len(planes) == 8
    gpu0 = planes[0]
    assert gpu0["name"] == "/device:GPU:0"
    assert gpu0["busy_ms"] == pytest.approx(busy, rel=0.01)
    assert gpu0["window_ms"] == pytest.approx(window, rel=0.01)
    assert gpu0["memcpy_ms"] == 0 and gpu0["h2d_ms"] == 0 and gpu0["events"] == events
    assert gpu0["busy_fraction"] == pytest.approx(busy / window, abs=0.002)
    assert dev.device_steps([str(path)]) == [] and dev.h2d_ms_by_step([str(path)]) == {}
    assert dev.active_summary(planes).startswith("1 of 8 GPUs active: GPU:0; 7 idle: GPU:1,")


def test_mangled_file_is_refused_in_one_line():
    with pytest.raises(UsageError) as info:
        dev.device_planes([str(MANGLED)])
    msg = str(info.value)
    assert "\n" not in msg and str(MANGLED) in msg and "damaged" in msg


def test_missing_and_non_profile_files_are_refused(tmp_path):
    with pytest.raises(UsageError, match="cannot read profile"):
        dev.device_planes([str(tmp_path / "absent.xplane.pb")])
    (tmp_path / "empty.xplane.pb").write_bytes(b"")
    with pytest.raises(UsageError, match="no profiler planes"):
        dev.device_planes([str(tmp_path / "empty.xplane.pb")])
    with pytest.raises(UsageError, match="README.md"):
        dev.device_planes([str(FIXTURES / "README.md")])


def test_summary_of_no_devices():
    assert "no accelerator" in dev.active_summary([])
    assert dev.format_device_table([]).splitlines()[-1] == dev.active_summary([])


def test_v100_exposed_h2d_busy_per_step_and_chip_stats():
    paths = [str(V100)]
    inflight, exposed = dev.h2d_ms_by_step(paths), dev.h2d_ms_by_step(paths, exposed=True)
    # copies overlapping a kernel on the same device cost the step nothing: exposed ≤ in flight
    assert inflight == {"0": pytest.approx(0.0511, abs=1e-4)} and exposed == {"0": pytest.approx(0.0225, abs=1e-4)}
    busy = dev.busy_ms_by_step(paths)["0"]
    host = dev.device_planes(paths)[0]["host"]
    assert busy == {(host, "/device:GPU:4"): pytest.approx(14.825, rel=0.01),
                    (host, "/device:GPU:6"): pytest.approx(14.865, rel=0.01)}
    gpu4 = _by_name(V100)["/device:GPU:4"]
    assert (gpu4["vendor"], gpu4["compute_capability"], gpu4["model"]) == (None, "7.0", None)
    amd = dev.device_planes([str(GEMM)])[0]
    assert (amd["vendor"], amd["compute_capability"]) == ("AMD", "9.4")
    assert dev.busy_ms_by_step([str(GEMM)]) == {}
