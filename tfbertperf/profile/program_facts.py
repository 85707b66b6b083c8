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
    what CUPTI adds to each kernel launch, and it is not a bound: the measured cost was 2.4× it on the H100
    BERT-large capture and 0.3–0.5× it on the H200 JAX loop captures (tests/fixtures/h200).
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from tfbertperf.profile import intervals as iv
from tfbertperf.profile import unprofiled
from tfbertperf.profile.trace import Trace
from tfbertperf.profile.xspace import hlo_pb2

HOST_EVENT_COST_US = 1.7
"""Measured cost of one host event that TensorFlow's profiler records, in microseconds: the median over 61
traced rounds of tools/bench/bench_python_tracer_cost.py (TF 2.21 eager ops; events counted from the xplane;
the workload thread's CPU time, which leaves out the waits for a core on the shared 2-core host; quartiles
0.6–3.0, another run of 21 rounds 1.1 — BENCHMARKS.md "issue 22: the profiler's cost per recorded event").
Measured on this project's CPU host (AMD EPYC) for TraceMe events: TF 2.21 ignores python_tracer_level, so the
cost of a Python tracer frame could not be measured here and is taken to be the same (its callback also builds
the frame's name: likely no cheaper; on the H200 captures, with the Python tracer on, it read 2–3× high).  The cost
is the machine's: on the project's later Intel Xeon host the same bench read 0.40 µs an eager event and 0.56–0.59
a tf.data one (`--workloads tf,tfdata_serial,tfdata_parallel`, 2026-11-26).  Measuring it per capture from the input
threads' CPU in the steps before the window was tried and dropped: 0–4 µs on captures of one program (BENCHMARKS.md)."""

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


def _graph_launch(name: str) -> bool:
    return name.startswith(("cuGraphLaunch", "command_buffer", "hipGraphLaunch"))


def cuda_graphs(trace: Trace) -> bool:
    """The host launched work as CUDA graphs / XLA command buffers (cuGraphLaunch, command_buffer events)."""
    return any(t.mask(_graph_launch).any() for t in trace.threads)


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


def _in_steps_ps(spans: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Picoseconds of each [a, b) inside the merged step intervals `spans` (sorted, disjoint): the steps' time
    before b less the steps' time before a."""
    before = np.concatenate([[0], np.cumsum(spans[:, 1] - spans[:, 0])])

    def upto(t):
        k = np.searchsorted(spans[:, 0], t, side="right") - 1
        kk = np.maximum(k, 0)
        return np.where(k >= 0, before[kk] + np.minimum(t, spans[kk, 1]) - spans[kk, 0], 0)
    return upto(b) - upto(a)


def programs_ran(trace: Trace, steps=None) -> list[dict]:
    """The XLA programs that ran on the devices that ran kernels, by program id (module docstring), largest
    first: [{"module", "program_id" (None where the kernels carry none), "device_ms" (their kernels' time inside
    `steps`, the whole capture without them), "device_share" (of all the programs' device time), "precision"
    (None: no HLO for it, or no matrix instructions)}].
    Reads the kernels' `hlo_module` and `program_id` stats that the parse kept (columns.py program_kernels, each
    active device's counted lines) and the HLO of the metadata plane by program id (trace.hlo_by_id)."""
    spans = iv.union([(s.start, s.end) for s in steps or ()])
    time_ps: Counter = Counter()
    for d in trace.active_devices():
        if not d.program_kernels or not len(d.program_kernels[0]):
            continue
        a, b, code = d.program_kernels
        dur = _in_steps_ps(spans, a, b) if len(spans) else b - a
        per = np.bincount(code, weights=dur.astype(np.float64), minlength=len(d.program_keys))
        for key, ps in zip(d.program_keys, per.tolist()):
            time_ps[key] += int(round(ps))
    hlo = trace.hlo_by_id if time_ps else {}
    total = sum(time_ps.values()) or 1
    out = []
    for (module, pid), ps in sorted(time_ps.items(), key=lambda kv: -kv[1]):
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
    if measured_step_ms and not unprofiled.moved(captured, float(measured_step_ms)):
        added = captured - float(measured_step_ms)
        return {"captured_step_ms": round(captured, 3), "unprofiled_step_ms": round(float(measured_step_ms), 3),
                "added_ms_per_step": round(added, 3),
                "added_fraction": round(added / captured, 4) if captured else None,
                "basis": "measured: the captured step against the run's always-on step timer"}
    lo, hi = (steps[0].start, steps[-1].end) if steps else (0, 0)
    events = sum(int(np.searchsorted(t.start, hi, "left") - np.searchsorted(t.start, lo, "left"))
                 for t in trace.threads)  # events starting in [lo, hi): each thread's starts are sorted
    est_ms = events / max(1, n) * HOST_EVENT_COST_US / 1e3
    moved = {"unprofiled_step_ms": round(float(measured_step_ms), 3),
             "not_measured": unprofiled.not_measured(captured, float(measured_step_ms))} if measured_step_ms else {}
    return {"captured_step_ms": round(captured, 3), "host_events_per_step": round(events / max(1, n)), **moved,
            "python_tracer": trace.python_tracer, "added_ms_per_step_estimate": round(est_ms, 3),
            "basis": f"estimate: host events recorded per step x {HOST_EVENT_COST_US:g} us (the cost of one "
                     "recorded event, measured: tools/bench/bench_python_tracer_cost.py); not a bound — the measured "
                     "cost was 0.3–2.4× it on real GPU captures (H200, H100: CUPTI's cost per launch is not in it)"}
