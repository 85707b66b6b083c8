"""What a capture says about the program itself, for advice that fits it (profile/advice.py): is it
XLA-compiled, which precision do its matrix kernels run, how much did the profiler cost.

Definitions:
  - xla_compiled: True when a device that ran kernels ran XLA programs (its kernels carry `hlo_module` stats,
    e.g. "jit_step"; TF's `XlaModule:` ops, JAX's jit), False when it ran kernels and none were XLA's, None
    without such a device.
  - matmul_precision: "bf16", "f16", "f32" (or another XLA type name in lower case) — the operand type of most
    of the dot/convolution instructions in the HLO modules that ran (the capture's `/host:metadata` plane
    carries them); without HLO, from the gemm kernels' names ("bf16" / "f16", "hgemm", "h884"…; "sgemm"/
    "tf32" → "f32"); None when neither says.
  - profiler cost (foreign captures): the host events the profiler recorded per step (every host thread); with
    the Python tracer on every Python call is one.  Estimate = events × HOST_EVENT_COST_US; it does not include
    what CUPTI adds to each kernel launch, so it is a lower bound.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from tfbertperf.profile.trace import Trace
from tfbertperf.profile.xspace import hlo_pb2

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


def xla_compiled(trace: Trace) -> bool | None:
    active = trace.active_devices()
    if not active:
        return None
    return any(d.hlo_modules for d in active)


def _graph_launch(name: str) -> bool:
    return name.startswith(("cuGraphLaunch", "command_buffer", "hipGraphLaunch"))


def cuda_graphs(trace: Trace) -> bool:
    """The host launched work as CUDA graphs / XLA command buffers (cuGraphLaunch, command_buffer events)."""
    return any(t.mask(_graph_launch).any() for t in trace.threads)


def _hlo_precision(trace: Trace) -> str | None:
    pb = hlo_pb2()
    ran = Counter()
    for d in trace.active_devices():
        ran.update(d.hlo_modules)
    if pb is None or not ran:
        return None
    votes = Counter()
    for name in ran:
        blob = trace.hlo_protos.get(name)
        if not blob:
            continue
        proto = pb.HloProto()
        try:
            proto.ParseFromString(blob)
        except Exception:  # a damaged HLO blob: no precision from it
            continue
        module = proto.hlo_module
        types = {i.id: i.shape.element_type for c in module.computations for i in c.instructions}
        enum = pb.HloProto.DESCRIPTOR.fields_by_name["hlo_module"].message_type.fields_by_name[
            "computations"].message_type.fields_by_name["instructions"].message_type.fields_by_name[
            "shape"].message_type.fields_by_name["element_type"].enum_type
        for c in module.computations:
            for ins in c.instructions:
                if ins.opcode in _MATMUL_OPS and ins.operand_ids:
                    t = types.get(ins.operand_ids[0])
                    if t is not None and t in enum.values_by_number:
                        votes[enum.values_by_number[t].name.lower()] += 1
    return votes.most_common(1)[0][0] if votes else None


def matmul_precision(trace: Trace) -> tuple[str | None, str]:
    """(precision, how it was read: "HLO dot operands" | "gemm kernel names" | "unknown")."""
    p = _hlo_precision(trace)
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
    events = sum(int(np.searchsorted(t.start, hi, "left") - np.searchsorted(t.start, lo, "left"))
                 for t in trace.threads)  # events starting in [lo, hi): each thread's starts are sorted
    est_ms = events / max(1, n) * HOST_EVENT_COST_US / 1e3
    return {"captured_step_ms": round(captured, 3), "host_events_per_step": round(events / max(1, n)),
            "python_tracer": trace.python_tracer, "added_ms_per_step_estimate": round(est_ms, 3),
            "basis": f"estimate: host events recorded per step x {HOST_EVENT_COST_US:g} us (the cost of one "
                     "recorded event, measured: tools/bench/bench_python_tracer_cost.py); a lower bound — CUPTI's "
                     "cost per kernel launch is not included"}
