"""What a capture says about the program itself, for advice that fits it (profile/advice.py): is it
XLA-compiled, which precision do its matrix kernels run, how much did the profiler cost.

Definitions:
  - xla_compiled: True when a device that ran kernels ran XLA programs (its kernels carry `hlo_module` stats,
    e.g. "jit_step"; TF's `XlaModule:` ops, JAX's jit), False when it ran kernels and none were XLA's, None
    without such a device.
  - programs (programs_ran): the XLA programs that ran, told apart by program id — a process that compiles one
    function twice (JAX retracing it for float32 after bfloat16, a `tf.function` retraced for a new shape or
    dtype) holds several HLO modules of one name, and only the id says which one a kernel belongs to.  The
    device kernels carry `hlo_module` and `program_id` stats; the `/host:metadata` plane carries each program's
    HLO under "name(id)" with a `program_id` stat.  Each program's device time is its kernels' time inside the
    steps (the whole capture without steps); its precision is the operand type of most of its dot/convolution
    instructions.
  - matmul_precision: "bf16", "f16", "f32" (or another XLA type name in lower case) — the precision of the
    programs holding the most device time among those that ran matrix instructions (programs_ran); where the
    device events carry no program id, the HLO modules are matched by name (the last of a name wins); without
    HLO, from the gemm kernels' names ("bf16" / "f16", "hgemm", "h884"…; "sgemm"/"tf32" → "f32"); None when
    neither says.
  - profiler cost (foreign captures): the host events the profiler recorded per step (every host thread); with
    the Python tracer on every Python call is one.  Estimate = events × HOST_EVENT_COST_US; it does not include
    what CUPTI adds to each kernel launch, so it is a lower bound.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter

from tfbertperf.profile import devices
from tfbertperf.profile.trace import Trace
from tfbertperf.profile.xspace import hlo_pb2, read_space, stat_value

HOST_EVENT_COST_US = 1.7
"""Measured cost of one host event that TensorFlow's profiler records, in microseconds: the median over 61
traced rounds of tools/bench/bench_python_tracer_cost.py (TF 2.21 eager ops; events counted from the xplane;
the workload thread's CPU time, which leaves out the waits for a core on the shared 2-core host; quartiles
0.6–3.0, another run of 21 rounds 1.1 — BENCHMARKS.md "issue 22: the profiler's cost per recorded event").
Measured on this project's CPU host (AMD EPYC) for TraceMe events: TF 2.21 ignores python_tracer_level, so the
cost of a Python tracer frame could not be measured here and is taken to be the same (its callback also builds
the frame's name: likely no cheaper, so the estimate stays a lower bound)."""

_MATMUL_OPS = ("dot", "convolution")
_KERNEL_PRECISION = (("bf16", re.compile(r"bf16|bfloat16", re.I)),
                     ("f16", re.compile(r"(^|_)(f16|fp16|hgemm|h\d{3,4}gemm|half)", re.I)),
                     ("f32", re.compile(r"sgemm|tf32|(^|_)f32", re.I)))


def xla_compiled(trace: Trace, programs: list[dict] | None = None) -> bool | None:
    """True when XLA programs ran on a device that ran kernels — inside the steps where `programs`
    (programs_ran) says so — False when it ran kernels and none were XLA's, None without such a device."""
    active = trace.active_devices()
    if not active:
        return None
    if programs and any(p["device_ms"] > 0 for p in programs):
        return True
    return any(d.hlo_modules for d in active)


def cuda_graphs(trace: Trace) -> bool:
    """The host launched work as CUDA graphs / XLA command buffers (cuGraphLaunch, command_buffer events)."""
    return any(e.name.startswith(("cuGraphLaunch", "command_buffer", "hipGraphLaunch"))
               for t in trace.threads for e in t.events)


def _proto_precision(blob: bytes) -> str | None:
    """The operand type of most dot/convolution instructions of one serialized HloProto; None without any (or
    without XLA's hlo_pb2, or for a damaged blob)."""
    pb = hlo_pb2()
    if pb is None or not blob:
        return None
    proto = pb.HloProto()
    try:
        proto.ParseFromString(blob)
    except Exception:  # a damaged HLO blob: no precision from it
        return None
    module = proto.hlo_module
    types = {i.id: i.shape.element_type for c in module.computations for i in c.instructions}
    enum = pb.HloProto.DESCRIPTOR.fields_by_name["hlo_module"].message_type.fields_by_name[
        "computations"].message_type.fields_by_name["instructions"].message_type.fields_by_name[
        "shape"].message_type.fields_by_name["element_type"].enum_type
    votes = Counter()
    for c in module.computations:
        for ins in c.instructions:
            if ins.opcode in _MATMUL_OPS and ins.operand_ids:
                t = types.get(ins.operand_ids[0])
                if t is not None and t in enum.values_by_number:
                    votes[enum.values_by_number[t].name.lower()] += 1
    return votes.most_common(1)[0][0] if votes else None


_PROGRAM_STATS = ("hlo_module", "program_id")
_NAME_ID = re.compile(r"\((\d+)\)$")


def _hlo_by_program(trace: Trace) -> dict[int, tuple[str, bytes]]:
    """program id → (module name, serialized HloProto), from each file's `/host:metadata` plane: the event
    metadata that carry an "Hlo Proto" stat, their id from the `program_id` stat (else the name's "(id)")."""
    out = {}
    for path in trace.paths:
        for plane in read_space(path).planes:
            if plane.name != "/host:metadata":
                continue
            names = {k: m.name for k, m in plane.stat_metadata.items()}
            for meta in plane.event_metadata.values():
                st = {names.get(s.metadata_id): s for s in meta.stats}
                if "Hlo Proto" not in st:
                    continue
                pid = stat_value(st["program_id"], names) if "program_id" in st else None
                m = _NAME_ID.search(meta.name)
                pid = pid if pid is not None else (int(m.group(1)) if m else None)
                if pid is not None:
                    out[int(pid)] = (_NAME_ID.sub("", meta.name), st["Hlo Proto"].bytes_value)
    return out


def _in_steps(starts: list[int], ends: list[int], a: int, b: int) -> int:
    """Picoseconds of [a, b) inside the (sorted, disjoint) step intervals."""
    k = max(0, bisect.bisect_right(starts, a) - 1)
    got = 0
    while k < len(starts) and starts[k] < b:
        got += max(0, min(b, ends[k]) - max(a, starts[k]))
        k += 1
    return got


def programs_ran(trace: Trace, steps=None) -> list[dict]:
    """The XLA programs that ran on the devices that ran kernels, by program id (module docstring), largest
    first: [{"module", "program_id" (None where the kernels carry none), "device_ms" (their kernels' time inside
    `steps`, the whole capture without them), "device_share" (of all the programs' device time), "precision"
    (None: no HLO for it, or no matrix instructions)}].
    Reads only the kernels' `hlo_module` and `program_id` stats on each active device's counted lines
    (devices.py), and the HLO of the metadata plane (_hlo_by_program)."""
    spans = sorted((s.start, s.end) for s in steps or ())
    starts, ends = [a for a, _ in spans], [b for _, b in spans]
    time_ps: Counter = Counter()
    for d in trace.active_devices():
        plane = next((p for p in read_space(d.summary["path"]).planes if p.name == d.name), None)
        if plane is None:
            continue
        names = {k: m.name for k, m in plane.stat_metadata.items()}
        want = {k for k, n in names.items() if n in _PROGRAM_STATS}
        streams = [ln for ln in plane.lines if ln.name.startswith("Stream")]
        for line in streams or [ln for ln in plane.lines if ln.name == "XLA Ops"]:
            tags = devices.stream_tags(line.name)
            if tags and all(t.startswith("Memcpy") for t in tags):
                continue
            base = line.timestamp_ns * 1000
            for ev in line.events:
                if ev.WhichOneof("data") == "num_occurrences":
                    continue
                meta = plane.event_metadata.get(ev.metadata_id)
                if meta is not None and meta.name.startswith("Memcpy"):
                    continue
                st = {names[s.metadata_id]: stat_value(s, names) for s in ev.stats if s.metadata_id in want}
                if not st.get("hlo_module") and meta is not None:  # TPU: the op's metadata carries them
                    st = {names[s.metadata_id]: stat_value(s, names) for s in meta.stats if s.metadata_id in want}
                if not st.get("hlo_module"):
                    continue
                a = base + ev.offset_ps
                dur = _in_steps(starts, ends, a, a + ev.duration_ps) if spans else ev.duration_ps
                pid = st.get("program_id")
                time_ps[(str(st["hlo_module"]), None if pid is None else int(pid))] += dur
    hlo = _hlo_by_program(trace) if time_ps else {}
    total = sum(time_ps.values()) or 1
    out = []
    for (module, pid), ps in time_ps.most_common():
        blob = hlo[pid][1] if pid in hlo else trace.hlo_protos.get(module)
        out.append({"module": module, "program_id": pid, "device_ms": round(ps / 1e9, 4),
                    "device_share": round(ps / total, 4), "precision": _proto_precision(blob)})
    return out


def variants(programs: list[dict]) -> dict[str, list[dict]]:
    """Module name → its programs, for the names that ran as more than one compiled program (programs_ran)."""
    by_name: dict[str, list[dict]] = {}
    for p in programs:
        by_name.setdefault(p["module"], []).append(p)
    return {k: v for k, v in by_name.items() if len(v) > 1}


def _hlo_precision(programs: list[dict]) -> str | None:
    """The precision holding the most device time among the programs that ran matrix instructions."""
    votes = Counter()
    for p in programs:
        if p["precision"]:
            votes[p["precision"]] += p["device_ms"] or 1e-9  # a program outside the steps still says something
    return votes.most_common(1)[0][0] if votes else None


def matmul_precision(trace: Trace, programs: list[dict] | None = None) -> tuple[str | None, str]:
    """(precision, how it was read: "HLO dot operands" | "gemm kernel names" | "unknown"); `programs` as
    programs_ran (read here when not given)."""
    p = _hlo_precision(programs_ran(trace) if programs is None else programs)
    if p:
        return p, "HLO dot operands"
    votes = Counter()
    for d in trace.active_devices():
        for name, n in d.kernel_names.items():
            if "gemm" in name.lower() or "matmul" in name.lower():
                for prec, rule in _KERNEL_PRECISION:
                    if rule.search(name):
                        votes[prec] += n
                        break
    return (votes.most_common(1)[0][0], "gemm kernel names") if votes else (None, "unknown")


def profiler_cost(trace: Trace, steps, measured_step_ms: float | None) -> dict:
    """The profiler's own cost per step.  With measured_step_ms (our always-on step timer, unprofiled) it is
    captured − measured; otherwise an estimate from the events recorded per step (module docstring)."""
    n = len(steps)
    captured = sum(s.ps for s in steps) / n / 1e9 if n else 0.0
    if measured_step_ms:
        added = captured - float(measured_step_ms)
        return {"captured_step_ms": round(captured, 3), "unprofiled_step_ms": round(float(measured_step_ms), 3),
                "added_ms_per_step": round(added, 3),
                "added_fraction": round(added / captured, 4) if captured else None,
                "basis": "measured: the captured step against the run's always-on step timer"}
    lo, hi = (steps[0].start, steps[-1].end) if steps else (0, 0)
    events = sum(1 for t in trace.threads for e in t.events if lo <= e.start < hi)
    est_ms = events / max(1, n) * HOST_EVENT_COST_US / 1e3
    return {"captured_step_ms": round(captured, 3), "host_events_per_step": round(events / max(1, n)),
            "python_tracer": trace.python_tracer, "added_ms_per_step_estimate": round(est_ms, 3),
            "basis": f"estimate: host events recorded per step x {HOST_EVENT_COST_US:g} us (the cost of one "
                     "recorded event, measured: tools/bench/bench_python_tracer_cost.py); a lower bound — CUPTI's "
                     "cost per kernel launch is not included"}
