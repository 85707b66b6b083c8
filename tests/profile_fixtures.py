"""The real accelerator captures in ../shared/fixtures/profiles (README there: provenance and facts)."""

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "profiles"
V100 = FIXTURES / "v100x8-tf-bert-large-squad-mirrored.xplane.pb"
GEMM = FIXTURES / "mi300x-jax-gemm.xplane.pb"
ATTENTION = FIXTURES / "mi300x-jax-attention.xplane.pb"
MANGLED = FIXTURES / "corrupt-utf8-mangled.xplane.pb"
H100 = FIXTURES / "h100"


def synthetic_xspace(path, host: dict, device: dict | None = None, metadata_hlo: list | None = None):
    """Write a small XSpace to `path`, built from plain lists (times in microseconds):
    host = {thread name: [(event name, start_us, duration_us, {stat: value})]} → a `/host:CPU` plane;
    device = {line name ("Stream #1(Compute)", "Stream #2(MemcpyH2D)"): [(name, start_us, duration_us, stats)]}
    → `/device:GPU:0`; metadata_hlo = [(module name, program id, serialized HloProto)] → `/host:metadata` (each
    as event metadata "name(id)" with "Hlo Proto" and "program_id" stats, in that order).  Integer stats become
    int64_value, strings str_value."""
    from tfbertperf.profile.xspace import xplane_pb2

    pb = xplane_pb2()
    space = pb.XSpace(hostnames=["synthetic"])

    def plane(name, lines):
        p = space.planes.add(id=len(space.planes), name=name)
        names: dict[str, int] = {}

        def meta_id(table, key):
            if key not in names:
                names[key] = len(names) + 1
            i = names[key]
            table[i].id, table[i].name = i, key
            return i

        for li, (line_name, events) in enumerate(lines.items()):
            line = p.lines.add(id=li, name=line_name, display_name=line_name, timestamp_ns=0)
            for name, start_us, dur_us, stats in events:
                ev = line.events.add(metadata_id=meta_id(p.event_metadata, name), offset_ps=int(start_us * 1e6),
                                     duration_ps=int(dur_us * 1e6))
                for k, v in (stats or {}).items():
                    st = ev.stats.add(metadata_id=meta_id(p.stat_metadata, "stat:" + k))
                    p.stat_metadata[st.metadata_id].name = k
                    if isinstance(v, str):
                        st.str_value = v
                    else:
                        st.int64_value = int(v)
        return p

    plane("/host:CPU", host)
    if device:
        plane("/device:GPU:0", device)
    if metadata_hlo:  # [(module name, program id, serialized HloProto)], in this order
        meta = space.planes.add(id=len(space.planes), name="/host:metadata")
        meta.stat_metadata[1].id, meta.stat_metadata[1].name = 1, "Hlo Proto"
        meta.stat_metadata[2].id, meta.stat_metadata[2].name = 2, "program_id"
        for i, (name, program_id, blob) in enumerate(metadata_hlo, 1):
            m = meta.event_metadata[i]
            m.id, m.name = i, f"{name}({program_id})"
            m.stats.add(metadata_id=1, bytes_value=blob)
            m.stats.add(metadata_id=2, int64_value=program_id)
    path.write_bytes(space.SerializeToString())
    return path
