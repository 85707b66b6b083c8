"""Issue 32: the capture read into columns (profile/xspace.py read_columns, profile/columns.py), the rules on
them, and xprof run only where it adds something — the same answers as the protobuf-object code on every real
capture in ../shared/fixtures/profiles (recorded before the change: tests/data/analyze_figures.json)."""

from __future__ import annotations

import gzip
import json
import random
import weakref

import numpy as np
import pytest

from analyze_figures import CAPTURES, RECORDED, flatten, unpacked
from profile_fixtures import FIXTURES, H100, V100, synthetic_xspace
from tfbertperf.analyze import analyze
from tfbertperf.errors import UsageError
from tfbertperf.profile import columns, intervals as iv
from tfbertperf.profile.intervals import parents as _parents
from tfbertperf.profile.xspace import MISSING, read_columns, read_space, stat_value

needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"shared captures not found at {FIXTURES}")
XPROF_ONLY = ("xprof_step_time_ms", "xprof_breakdown_ms", "xprof_transfer", "xprof_input_conclusion",
              "input_ops_capture_steps")
"""Keys that hold xprof's own figures (input_ops_capture_steps divides the capture by xprof's step when it ran,
by the wall-time step when it did not); with xprof skipped they are None or ours."""
ADDED = ("host_events_by_part", "kernels_per_step", "input_interpreter_held_ms")
"""Keys added after the record (what the profiler recorded in each part, the input awaiting a loader thread's
interpreter lock; issue 29): new figures, none changed."""


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    folder = tmp_path_factory.mktemp("captures")
    return {name: unpacked(src, folder) for name, src in CAPTURES.items() if src.exists()}


@pytest.fixture(scope="module")
def recorded():
    return json.loads(RECORDED.read_text())["figures"]


def _same(expected: dict, got: dict, skip=()) -> list:
    """Keys whose values differ beyond the report's rounding (4 decimals of a millisecond; strings exactly)."""
    out = []
    for k in sorted(set(expected) | set(got)):
        if any(f".{s}" in f".{k}" for s in skip) or k.startswith("attribution.xprof.") or ".xprof." in k:
            continue
        a, b = expected.get(k), got.get(k)
        if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
            if abs(a - b) > 5e-5:
                out.append((k, a, b))
        elif a != b:
            out.append((k, a, b))
    return out


def _doc(path, **kw) -> dict:
    doc = analyze(str(path), **kw)
    doc.pop("profile", None)
    return doc


@needs_fixtures
def test_every_capture_gives_the_recorded_figures_with_xprof_run_as_before(captures, recorded):
    for name, path in captures.items():
        if name == "corrupt":
            continue
        assert not _same(recorded[name], flatten(_doc(path, xprof="always")), skip=ADDED), name


@needs_fixtures
def test_xprof_is_skipped_where_it_adds_nothing_and_every_other_figure_is_unchanged(captures, recorded):
    for name, path in captures.items():
        if name == "corrupt":
            continue
        doc = _doc(path)
        att = doc["attribution"] or {}
        if name.startswith("h100"):  # JAX on a GPU, read from device idle time, no tf.data input op
            assert att["source"] == "device_idle" and att["xprof"]["ran"] is False and att["xprof"]["skipped"]
            assert att["xprof_breakdown_ms"] is None and att["hardware_type"] == "GPU"
        elif name == "v100":  # no device-idle reading: xprof's step table is the answer
            assert att["xprof"] == {"ran": True, "tools": ["input_pipeline_analyzer"], "skipped": None}
        assert not _same(recorded[name], flatten(doc), skip=XPROF_ONLY + ADDED), name


@needs_fixtures
def test_a_damaged_capture_is_refused_in_one_line_naming_it(captures, tmp_path):
    with pytest.raises(UsageError, match=r"corrupt, not a readable XSpace profile") as e:
        analyze(str(captures["corrupt"]))
    assert str(captures["corrupt"]) in str(e.value) and "\n" not in str(e.value)
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(V100.read_bytes()[:1_000_000])  # a capture cut short (a copy that did not finish)
    with pytest.raises(UsageError, match=r"cut\.xplane\.pb: corrupt"):
        read_columns(cut)


@needs_fixtures
def test_columns_hold_every_kept_event_and_stat_as_protobuf_reads_them(captures):
    for name, path in captures.items():
        if name == "corrupt":
            continue
        space, cols = read_space(path), read_columns(path)
        for pc in cols.planes:
            plane = next(p for p in space.planes if p.name == pc.name)
            names = {k: m.name for k, m in plane.stat_metadata.items()}
            for c in pc.lines:
                line = next(ln for ln in plane.lines if ln.id == c.id and ln.name == c.name)
                evs = [e for e in line.events if not (pc.name.startswith("/device")
                                                      and e.WhichOneof("data") == "num_occurrences")]
                assert c.start.tolist() == [line.timestamp_ns * 1000 + e.offset_ps for e in evs], (name, c.name)
                assert c.dur.tolist() == [e.duration_ps for e in evs] and c.meta.tolist() == [e.metadata_id
                                                                                            for e in evs]
                for stat, col in c.stats.items():
                    want = [[stat_value(s, names) for s in e.stats if names.get(s.metadata_id) == stat] for e in evs]
                    got = [None if v in (MISSING, -1) else pc.strings[v] if isinstance(w[-1:] and w[-1], str)
                           else v for v, w in zip(col.tolist(), want)]
                    assert got == [w[-1] if w else None for w in want], (name, c.name, stat)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(num: int, payload) -> bytes:
    if isinstance(payload, int):
        return _varint(num << 3) + _varint(payload)
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def test_events_written_in_any_field_order_read_the_same(tmp_path):
    """A writer need not follow field-number order (the fast path reads that order; the rest falls back)."""
    stat = _field(1, 7) + _field(4, 42)  # step_num = 42 (stat metadata 7)
    r_stat = _field(4, 1) + _field(1, 8)  # _r = 1, value before its id
    canonical = _field(1, 3) + _field(2, 5_000_000) + _field(3, 2_000_000) + _field(4, stat) + _field(4, r_stat)
    shuffled = _field(4, r_stat) + _field(3, 9_000_000) + _field(4, stat) + _field(2, 1 << 40) + _field(1, 3)
    negative = _field(1, 3) + _field(2, -5) + _field(3, 1)  # an int64 written as ten bytes
    aggregated = _field(1, 3) + _field(2, 7) + _field(5, 12)  # num_occurrences: no place in time
    line = (_field(1, -2) + _field(2, b"python3") + _field(3, 1000)
            + b"".join(_field(4, e) for e in (canonical, shuffled, negative, aggregated)))
    meta = _field(4, _field(1, 3) + _field(2, _field(1, 3) + _field(2, b"train")))
    stats = b"".join(_field(5, _field(1, i) + _field(2, _field(1, i) + _field(2, n))) for i, n in
                     ((7, b"step_num"), (8, b"_r")))
    plane = _field(1, 1) + _field(2, b"/host:CPU") + _field(3, line) + meta + stats
    path = tmp_path / "hand.xplane.pb"
    path.write_bytes(_field(1, plane) + _field(4, b"handmade"))
    [pc] = read_columns(path).planes
    [c] = pc.lines
    assert c.id == -2 and c.name == "python3"
    assert c.start.tolist() == [1_000_000 + 5_000_000, 1_000_000 + (1 << 40), 1_000_000 - 5, 1_000_000 + 7]
    assert c.dur.tolist() == [2_000_000, 9_000_000, 1, 0] and set(c.meta.tolist()) == {3}
    assert c.stats["step_num"].tolist()[:3] == [42, 42, MISSING] and c.stats["_r"].tolist()[:3] == [1, 1, MISSING]
    thread = columns.digest(path).threads[0]
    assert [e.step_num for e in thread.events if e.step_num is not None] == [42, 42]
    assert read_columns(path).host == "handmade"


@needs_fixtures
def test_a_gzipped_capture_reads_like_the_unpacked_one(captures):
    packed, plain = read_columns(H100 / "h100-h2d.xplane.pb.gz"), read_columns(captures["h100-h2d"])
    for a, b in zip(packed.planes, plain.planes):
        assert a.name == b.name and len(a.lines) == len(b.lines)
        for x, y in zip(a.lines, b.lines):
            assert np.array_equal(x.start, y.start) and np.array_equal(x.meta, y.meta)


@needs_fixtures
def test_a_large_capture_says_what_it_reads_on_stderr(captures, monkeypatch, capsys):
    monkeypatch.setattr(columns, "PROGRESS_FROM_BYTES", 1)
    columns._digest.cache_clear()
    columns.digest(captures["h100-h2d"])
    err = capsys.readouterr().err
    assert f"reading {captures['h100-h2d']} (7 MB)" in err
    assert "plane 3 of 5, '/device:GPU:0' (0 MB)" in err and "plane 5 of 5" in err


@needs_fixtures
def test_a_multi_host_session_is_read_one_file_at_a_time(captures, tmp_path, monkeypatch):
    from tfbertperf.profile.trace import load_trace

    session = tmp_path / "plugins" / "profile" / "2026_11_25"
    session.mkdir(parents=True)
    for host in ("worker0", "worker1"):
        (session / f"{host}.xplane.pb").write_bytes(captures["h100-h2d"].read_bytes())
    alive = []
    real = columns.read_columns

    def one_at_a_time(path, progress=None):
        assert all(r() is None for r in alive), "a file's columns were still held when the next was read"
        space = real(path, progress)
        alive.append(weakref.ref(space))
        return space

    monkeypatch.setattr(columns, "read_columns", one_at_a_time)
    columns._digest.cache_clear()
    trace = load_trace(sorted(session.glob("*.xplane.pb")))
    assert len(alive) == 2
    assert [d.name for d in trace.devices] == ["/device:GPU:0"] * 2 and len(trace.threads) == 32


def test_intervals_on_arrays_match_the_pairwise_definitions():
    def union(ivs):
        out = []
        for s, e in sorted(ivs):
            if e <= s:
                continue
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return [tuple(x) for x in out]

    def covered(ivs, t):
        return any(s <= t < e for s, e in ivs)

    rng = random.Random(32)
    for _ in range(500):
        a = [(s, s + rng.randint(-2, 9)) for s in (rng.randint(0, 40) for _ in range(rng.randint(0, 9)))]
        b = [(s, s + rng.randint(-2, 9)) for s in (rng.randint(0, 40) for _ in range(rng.randint(0, 9)))]
        ua, ub = union(a), union(b)
        assert [tuple(r) for r in iv.union(a).tolist()] == ua
        lo, hi = rng.randint(0, 30), rng.randint(30, 60)
        for got, rule in ((iv.intersect(ua, ub), lambda t: covered(ua, t) and covered(ub, t)),
                          (iv.subtract(ua, ub), lambda t: covered(ua, t) and not covered(ub, t)),
                          (iv.clip(ua, lo, hi), lambda t: covered(ua, t) and lo <= t < hi)):
            rows = [tuple(r) for r in got.tolist()]
            assert rows == union(rows)  # merged: sorted, disjoint, not touching
            assert [t for t in range(-5, 70) if covered(rows, t)] == [t for t in range(-5, 70) if rule(t)]


def test_parents_are_the_innermost_open_event_even_when_events_overlap():
    rng = random.Random(7)
    for _ in range(200):
        evs = sorted(((s, s + rng.randint(0, 12)) for s in (rng.randint(0, 50) for _ in range(rng.randint(1, 30)))),
                     key=lambda e: (e[0], -e[1]))
        parent, depth = _parents(np.array([s for s, _ in evs]), np.array([e for _, e in evs]))
        for i, (s, _) in enumerate(evs):
            open_before = [j for j in range(i) if evs[j][1] > s]
            assert parent[i] == (max(open_before) if open_before else -1)


def test_xprof_never_refuses_a_capture_whose_answer_is_xprofs_step_table(tmp_path):
    host_only = synthetic_xspace(tmp_path / "host.xplane.pb",
                                 {"python3": [("train", 10_000 * i, 9_000, {"step_num": i, "_r": 1})
                                              for i in range(3)]})
    with pytest.raises(UsageError, match=r"--xprof never.*xprof's step table"):
        analyze(str(host_only), xprof="never")


@needs_fixtures
def test_the_json_says_when_xprof_was_not_run_and_the_flag_runs_it(captures):
    import subprocess
    import sys

    def run(*flags):
        p = subprocess.run([sys.executable, "-m", "tfbertperf", "analyze", "--json", *flags,
                            str(captures["h100-h2d"])], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["attribution"]

    auto, always = run(), run("--xprof", "always")
    assert auto["xprof"]["ran"] is False and "--xprof always" in auto["xprof"]["skipped"]
    assert always["xprof"] == {"ran": True, "tools": ["input_pipeline_analyzer"], "skipped": None}
    assert auto["xprof_step_time_ms"] is None and always["xprof_step_time_ms"] > 0
    assert auto["fractions"] == always["fractions"]
