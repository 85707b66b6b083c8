"""Device idle time per step, charged to what the host was doing then (HTA's idle-time breakdown, tied to the
cause on the host).  Reads a `Trace` (profile/trace.py) and the wall-time steps (profile/steps.py).

For each step and each device that ran kernels, the step's wall time splits into busy (the union of the
device's kernels) and idle.  Every idle picosecond is charged to the first of these that covers it:
  1. host_to_device: a host→device copy on the device (`MemcpyH2D`), or the host staging/copying a batch
     (TRANSFER events: `H2D Dispatch`, `TransferToDevice`, `BufferFromHostBuffer`, `device_put`, TF's
     `MemcpyH2D` and `CopyCPUTensorToDevice`) on any thread;
  2. output: a device→host copy;
  3. input: the training thread blocked getting the batch — tf.data's get-next ops on any thread, or on the
     training thread (the one holding the step markers or launches) an outermost Python frame that hands
     nothing to the device (no transfer, launch or compile inside it) and either runs inside a step marker
     before the marker's first hand-off, or ends in loader work (a sleep, a read, NumPy/PIL/tokenizer code,
     `next`/`__next__`, a queue get); and of a Python frame that does hand work to the device (a
     `next_batch` that ends in `device_put`), the part before its first hand-off — its own time included,
     which the tracer records no child frame for (NumPy indexing, the loop itself): the loader preparing
     what it hands over;
  4. compile: XLA/JIT compilation;
  5. kernel_launch: the host issuing work — op dispatch, executable launch, `cuLaunchKernel`/`cuGraphLaunch`
     (HTA's kernel wait: the device waits for the host to issue the next kernel);
  6. other, named: checkpoint (save/restore), profiler (the profiler's own start/stop and buffer flushes),
     sync (the host waiting on the device), python (the training thread running other Python), idle (no host
     event recorded at all).
Input that overlaps device compute is hidden and costs nothing by itself: only idle time is charged.  But the
training thread is serial: input (or staging) it ran while the device was busy delayed the dispatch that came
after it by as long, so launch idle that follows it in the same step is charged to input (the training thread's
own input only: a background loader delays no dispatch), then to host_to_device (staging on any thread: the
launch needs the batch), up to the hidden time ("delayed dispatch"; the host would have issued the work that
much earlier, while the device was still busy).  Per step and device, busy + the charged parts = the
step's wall time exactly.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from tfbertperf.profile import intervals as iv
from tfbertperf.profile.steps import Step
from tfbertperf.profile.trace import HostThread, Trace

TRANSFER = re.compile(r"H2D Dispatch|TransferToDevice|TransferLiteralToDevice|BufferFromHostBuffer|DevicePut|"
                      r"\bdevice_put\b|LinearizeInto|CopyRawHostToDevice|MemcpyH2D|MemcpyHtoD|cuMemcpyHtoD|"
                      r"hipMemcpyHtoD|CopyCPUTensorToDevice|CopyCPUTensorToGPU|InfeedEnqueue|TransferToInfeed")
GET_NEXT = re.compile(r"IteratorGetNext|Iterator::GetNext|MultiDeviceIteratorGetNextFromShard|OptionalGetValue")
LOADER_LEAF = re.compile(r"\bsleep\b|\bread\w*\b|\brecv\w*\b|numpy|PIL|Image|tokeni[sz]|\b__next__\b|\bnext\b|"
                         r"queue\.py|\bget\b|\bload\w*\b|\bdecode\b", re.I)
COMPILE = re.compile(r"\bcompile\b|_compile\b|::Compile\b|XlaCompile|backend_compile|Compilation|"
                     r"lower_sharding_computation|trace_to_jaxpr", re.I)
LAUNCH = re.compile(r"PjitFunction|Execute\b|ExecuteThunks|XLA GPU module|command_buffer|cuLaunch|cuGraphLaunch|"
                    r"cudaLaunch|hipLaunch|hipModuleLaunch|hipGraphLaunch|EagerExecute|EagerKernelExecute|"
                    r"ExecutorState::Process|ThunkExecutor|LaunchKernel|PJRT_LoadedExecutable|ExecuteHelper")
CHECKPOINT = re.compile(r"checkpoint|SaveV2|RestoreV2|MergeV2Checkpoints|orbax|\bsave\w*\b|\brestore\b", re.I)
PROFILER = re.compile(r"profiler\.py|start_trace|stop_trace|ProfilerSession|BUFFER_FLUSH")
SYNC = re.compile(r"block_until_ready|BlockHostUntilReady|Wait for|WaitFor|\bsynchronize\b|Await")

# Charge order (module docstring); the first covering an idle interval takes it.
CHARGE_ORDER = ("host_to_device", "output", "input", "compile", "kernel_launch", "checkpoint", "profiler", "sync",
                "python")
OTHER_NAMED = ("checkpoint", "profiler", "sync", "python", "idle")
_HOST_RULES = (("host_to_device", TRANSFER), ("input", GET_NEXT), ("compile", COMPILE),
               ("kernel_launch", LAUNCH), ("checkpoint", CHECKPOINT), ("profiler", PROFILER), ("sync", SYNC))
_HANDOFF = ("host_to_device", "kernel_launch", "compile")


@dataclass
class StepIdle:
    """One step on one device: wall, busy and the charged idle parts, all picoseconds."""
    label: str
    device: str
    wall: int
    busy: int
    charged: dict[str, int] = field(default_factory=dict)  # CHARGE_ORDER categories + "idle"
    transfer_bytes: int = 0
    delayed_dispatch: dict[str, int] = field(default_factory=dict)  # launch idle moved to input / host_to_device


def _kind(name: str) -> str | None:
    for kind, rule in _HOST_RULES:
        if rule.search(name):
            return kind
    return None


def _python_frames(thread: HostThread, markers) -> tuple[list, list]:
    """(input frames, other Python frames) of the training thread (module docstring, rule 3)."""
    evs = thread.events
    n = len(evs)
    handoff = [False] * n
    loader = [False] * n
    parent = [-1] * n
    stack: list[int] = []
    for i, e in enumerate(evs):
        while stack and evs[stack[-1]].end <= e.start:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    for i in range(n - 1, -1, -1):  # children come after parents: fold flags upward
        e = evs[i]
        handoff[i] = handoff[i] or _kind(e.name) in _HANDOFF
        loader[i] = loader[i] or bool(e.name.startswith("$") and LOADER_LEAF.search(e.name.split(" ", 1)[-1]))
        if parent[i] >= 0:
            handoff[parent[i]] |= handoff[i]
            loader[parent[i]] |= loader[i]
    starts = sorted(e.start for e in evs if _kind(e.name) in _HANDOFF)  # the hand-off events themselves
    first_handoff = {}
    for m in markers:
        k = bisect.bisect_left(starts, m.start)
        first = starts[k] if k < len(starts) and starts[k] < m.end else m.end
        first_handoff[m.start] = (m.end, first)
    marker_starts = sorted(first_handoff)
    inputs, python = [], []
    for i, e in enumerate(evs):
        if not e.name.startswith("$") or (parent[i] >= 0 and evs[parent[i]].name.startswith("$")
                                          and not handoff[parent[i]]):
            continue  # not Python, or inside a frame already judged whole
        if handoff[i]:
            # a frame that hands work to the device: the part before its first hand-off (its own time included,
            # which the tracer records no child frame for) is the loader preparing what it hands over
            k = bisect.bisect_left(starts, e.start)
            first = min(e.end, starts[k]) if k < len(starts) else e.end
            if first > e.start:
                inputs.append((e.start, first))
            python.append((first, e.end))
            continue
        k = bisect.bisect_right(marker_starts, e.start) - 1  # the marker this frame starts in, if any
        before = k >= 0 and e.end <= first_handoff[marker_starts[k]][1]
        (inputs if before or loader[i] else python).append((e.start, e.end))
    return inputs, python


def host_activity(trace: Trace) -> dict[str, list[tuple[int, int]]]:
    """Per CHARGE_ORDER host category, the merged intervals (ps) during which the host was doing it."""
    acts: dict[str, list] = {k: [] for k in CHARGE_ORDER}
    markers = {id(t): [e for e in t.events if e.step_num is not None] for t in trace.threads}
    training = [t for t in trace.threads if markers[id(t)]] or \
               [t for t in trace.threads if any(LAUNCH.search(e.name) for e in t.events)]
    for t in trace.threads:
        for e in t.events:
            kind = _kind(e.name)
            if kind:
                acts[kind].append((e.start, e.end))
    acts["input_serial"] = []  # input on the training thread itself: it delays that thread's next dispatch
    for t in training:
        inputs, python = _python_frames(t, markers[id(t)])
        acts["input"].extend(inputs)
        acts["python"].extend(python)
        acts["input_serial"].extend(inputs)
        acts["input_serial"].extend((e.start, e.end) for e in t.events if GET_NEXT.search(e.name))
    return {k: iv.union(v) for k, v in acts.items()}


def idle_by_step(trace: Trace, steps: list[Step]) -> list[StepIdle]:
    """One StepIdle per (step, device that ran kernels), charged as the module docstring says."""
    acts = host_activity(trace)
    out = []
    for d in trace.active_devices():
        h2d = iv.union((c.start, c.end) for c in d.copies if c.direction == "h2d")
        d2h = iv.union((c.start, c.end) for c in d.copies if c.direction == "d2h")
        covers = {k: iv.union(acts[k] + (h2d if k == "host_to_device" else d2h if k == "output" else []))
                  for k in CHARGE_ORDER}
        for st in steps:
            busy = iv.clip(d.busy, st.start, st.end)
            idle = iv.subtract([(st.start, st.end)], busy)
            res = StepIdle(st.label, d.name, st.ps, iv.length(busy))
            launch_idle = []
            for kind in CHARGE_ORDER:
                got = iv.intersect(idle, iv.clip(covers[kind], st.start, st.end))
                res.charged[kind] = iv.length(got)
                launch_idle = got if kind == "kernel_launch" else launch_idle
                idle = iv.subtract(idle, got)
            res.charged["idle"] = iv.length(idle)
            for kind, serial in (("input", "input_serial"), ("host_to_device", "host_to_device")):
                # delayed dispatch (module docstring): launch idle after the hidden work, up to its length
                hidden = iv.intersect(busy, iv.clip(acts[serial], st.start, st.end))
                after = iv.clip(launch_idle, hidden[0][0], st.end) if hidden else []
                moved = min(iv.length(hidden), iv.length(after))
                res.charged["kernel_launch"] -= moved
                res.charged[kind] += moved
                res.delayed_dispatch[kind] = moved
                launch_idle = iv.subtract(launch_idle, after[:1]) if moved else launch_idle
            res.transfer_bytes = sum(c.bytes or 0 for c in d.copies
                                     if c.direction == "h2d" and st.start <= c.start < st.end)
            out.append(res)
    return out
