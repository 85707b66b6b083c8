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
     what it hands over; and, traced or not, the part of a step before its first hand-off when that hand-off is
     a host→device transfer (a loader that builds the batch, then `device_put`s it: without the Python tracer
     the thread records nothing until the transfer);
  4. compile: XLA/JIT compilation;
  5. kernel_launch: the host issuing work — op dispatch, executable launch, `cuLaunchKernel`/`cuGraphLaunch`
     (HTA's kernel wait: the device waits for the host to issue the next kernel);
  6. other, named: checkpoint (save/restore), profiler (the profiler's own start/stop and buffer flushes),
     sync (the host waiting on the device: `block_until_ready`, a jax.Array read back with `np.asarray` — Keras
     converting its logs every step — never the loader's work, whatever NumPy the frame holding it runs), python
     (the training thread running other Python), idle (no host event recorded at all).
Input that overlaps device compute is hidden and costs nothing by itself: only idle time is charged.  But the
training thread is serial: input (or staging) it ran while the device was busy delayed the dispatch that came
after it by as long, so launch idle that follows it in the same step is charged to input (the training thread's
own input only: a background loader delays no dispatch), then to host_to_device (staging on any thread: the
launch needs the batch), up to the hidden time ("delayed dispatch"; the host would have issued the work that
much earlier, while the device was still busy).  Per step and device, busy + the charged parts = the
step's wall time exactly.

Beside the time, what the profiler recorded there (its cost is shared by it: profile/unprofiled.py): per part the
training threads' host events that started in the idle time charged to it (with delayed dispatch, the hidden work's
events in proportion to the time moved), and the device's kernels that started in the step (CUPTI's cost per kernel).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from tfbertperf.profile import intervals as iv
from tfbertperf.profile.columns import is_python_frame
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
# (not jax.profiler.annotate_function's `wrapper`: the function it wraps is the program's, np.asarray of a jax.Array)
PROFILER = re.compile(r"profiler\.py(?!:\d+ wrapper\b)|start_trace|stop_trace|ProfilerSession|BUFFER_FLUSH")
# (not multiprocessing's synchronize.py: its locks guard a loader process's queue, not the device's results)
SYNC = re.compile(r"block_until_ready|BlockHostUntilReady|Wait for|WaitFor|\bsynchronize\b(?!\.py)|Await|"
                  r"np\.asarray\(jax\.Array\)|ToLiteral")

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
    events: dict[str, float] = field(default_factory=dict)  # the training threads' events recorded in each part
    kernels: int = 0  # the device's kernels that started in the step
    interpreter_held: int = 0  # of the input charged, the training thread awaiting a loader thread's Python (ps)


def _kind(name: str) -> str | None:
    for kind, rule in _HOST_RULES:
        if rule.search(name):
            return kind
    return None


_KINDS = tuple(kind for kind, _ in _HOST_RULES)


def _kind_code(name: str) -> int:
    """_kind as an index into _KINDS (-1: none), evaluated once per distinct event name (columns.Names)."""
    kind = _kind(name)
    return _KINDS.index(kind) if kind else -1


def _is_loader_frame(name: str) -> bool:
    return name.startswith("$") and bool(LOADER_LEAF.search(name.split(" ", 1)[-1]))


# the loader's own calls, for loader_only (host captures): not NumPy or a `get` anywhere — Keras' on_train_batch_end
# converts its logs with convert_to_numpy inside the step marker, waiting for the step's result
HOST_LOADER_LEAF = re.compile(r"\bsleep\b|\bread\w*\b|\brecv\w*\b|\b__next__\b|\bnext\b|\b__getitem__\b|queue\.py|"
                              r"\bload\w*\b|\bdecode\b", re.I)


def _is_host_loader_frame(name: str) -> bool:
    return name.startswith("$") and bool(HOST_LOADER_LEAF.search(name.split(" ", 1)[-1]))


def _python_frames(thread: HostThread, markers, loader_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(input frames, other Python frames) of the training thread (module docstring, rule 3), as interval rows.
    loader_only: only the frames that end in loader work (profile/host_loader.py: on the host, the Python before a
    step's first hand-off is also the framework's own — Keras' trainer spent ~150 µs of a 1.1 ms JAX step there)."""
    start, end = thread.start, thread.end
    n = len(start)
    if not n:
        return iv.EMPTY, iv.EMPTY
    kinds = thread.names.table(_kind_code, np.int8)[thread.name_id]
    own = np.isin(kinds, [_KINDS.index(k) for k in _HANDOFF])
    handoff = own.copy()
    loader = thread.mask(_is_host_loader_frame if loader_only else _is_loader_frame)
    waits = kinds == _KINDS.index("sync")  # the thread waiting for the device's results: never the loader's work
    parent, depth = thread.nesting()
    for d in range(int(depth.max()), 0, -1):  # children after parents: fold the flags up, deepest level first
        at = np.flatnonzero(depth == d)
        handoff[parent[at[handoff[at]]]] = True
        loader[parent[at[loader[at]]]] = True
        waits[parent[at[waits[at]]]] = True
    starts = start[own]  # the hand-off events themselves (sorted: the thread is)
    first_handoff = {}
    for m in markers:
        k = int(np.searchsorted(starts, m.start, side="left"))
        first = int(starts[k]) if k < len(starts) and starts[k] < m.end else m.end
        first_handoff[m.start] = (m.end, first)
    marker_starts = np.array(sorted(first_handoff), dtype=np.int64)
    first = np.array([first_handoff[s][1] for s in marker_starts.tolist()], dtype=np.int64)
    python = thread.mask(is_python_frame)
    has_parent = parent >= 0
    p = np.where(has_parent, parent, 0)
    judged = has_parent & python[p] & ~handoff[p]  # inside a frame already judged whole
    frame = python & ~judged
    # a frame that hands work to the device: the part before its first hand-off (its own time included, which the
    # tracer records no child frame for) is the loader preparing what it hands over; the rest is other Python
    split = frame & handoff
    h_start, h_end = start[split], end[split]
    k = np.searchsorted(starts, h_start, side="left")
    nxt = starts[np.minimum(k, len(starts) - 1)] if len(starts) else h_end
    h_first = np.where(k < len(starts), np.minimum(h_end, nxt), h_end)
    k = np.searchsorted(marker_starts, start, side="right") - 1  # the marker each frame starts in, if any
    before = (k >= 0) & (end <= (first[np.maximum(k, 0)] if len(first) else end - 1))
    inputs = frame & ~handoff & ~waits & (loader if loader_only else (before | loader))
    other = frame & ~handoff & ~inputs
    if loader_only:
        h_first = h_start  # no hand-off frame's lead-in either: the loader's own frames, as they end
    # (a hand-off frame's part before its first hand-off, [h_start, h_first), is input; the rest other)
    # empty parts (a frame whose first event is its hand-off) are dropped by the union host_activity takes
    return (iv.from_columns(np.concatenate([start[inputs], h_start]), np.concatenate([end[inputs], h_first])),
            iv.from_columns(np.concatenate([start[other], h_first]), np.concatenate([end[other], h_end])))


def _before_transfer(thread: HostThread, markers) -> np.ndarray:
    """Per step marker whose first hand-off on the thread is a host→device transfer, [marker start, transfer start):
    the loader preparing the batch it then hands over, traced frame by frame or not at all (module docstring)."""
    kinds = thread.names.table(_kind_code, np.int8)[thread.name_id]
    own = np.flatnonzero(np.isin(kinds, [_KINDS.index(k) for k in _HANDOFF]))
    starts, transfer = thread.start[own], kinds[own] == _KINDS.index("host_to_device")
    rows = []
    for m in markers:
        k = int(np.searchsorted(starts, m.start, side="left"))
        if k < len(starts) and starts[k] < m.end and transfer[k]:
            rows.append((m.start, int(starts[k])))
    return iv.as_array(rows) if rows else iv.EMPTY


def host_activity(trace: Trace) -> dict[str, np.ndarray]:
    """Per CHARGE_ORDER host category, the merged intervals (ps) during which the host was doing it."""
    acts: dict[str, list] = {k: [] for k in CHARGE_ORDER}
    markers = {id(t): [t.event(i) for i in t.marker_index().tolist()] for t in trace.threads}
    training = [t for t in trace.threads if markers[id(t)]] or \
               [t for t in trace.threads if t.mask(LAUNCH).any()]
    for t in trace.threads:
        kinds = t.names.table(_kind_code, np.int8)[t.name_id]
        for code, kind in enumerate(_KINDS):
            m = kinds == code
            if m.any():
                acts[kind].append(iv.from_columns(t.start[m], t.end[m]))
    acts["input_serial"] = []  # input on the training thread itself: it delays that thread's next dispatch
    acts["events"] = np.sort(np.concatenate([t.start for t in training])) if training else np.zeros(0, np.int64)
    for t in training:
        inputs, python = _python_frames(t, markers[id(t)])
        inputs = iv.union(np.concatenate([inputs, _before_transfer(t, markers[id(t)])]))
        acts["input"].append(inputs)
        acts["python"].append(python)
        acts["input_serial"].append(inputs)
        m = t.mask(GET_NEXT)
        acts["input_serial"].append(iv.from_columns(t.start[m], t.end[m]))
    held = _interpreter_held(trace, training)
    if len(held):  # the training thread stalled in its own Python while a loader thread ran Python (the GIL)
        acts["input"].append(held)
        acts["input_serial"].append(held)
        acts["interpreter_held"] = [held]
        # what the profiler recorded there is the loader thread's: its events lengthened the wait
        mine, theirs = {id(t) for t in training}, []
        for t in trace.threads:
            if id(t) not in mine:
                k = np.searchsorted(held[:, 0], t.start, side="right") - 1  # the held interval each starts in, if any
                theirs.append(t.start[(k >= 0) & (t.start < held[np.maximum(k, 0), 1])])
        acts["events"] = np.sort(np.concatenate([acts["events"], *theirs]))
    return {k: v if k == "events" else iv.union(np.concatenate(v) if v else iv.EMPTY) for k, v in acts.items()}


# a thread not running Python at these frames: waiting on a lock, a queue, a sleep, a join or a pipe (`<unknown>
# get`: a C queue's blocking get, e.g. multiprocessing.pool's result handler on its SimpleQueue; `connection.py …
# recv`: the same handler reading worker processes' results from their pipe; both across whole steps)
THREAD_WAIT = re.compile(r"threading\.py:\d+ wait|\bacquire\b|queue\.py:\d+ (get|put)\b|\bsleep\b|\bselect\b|"
                         r"\bjoin\b|\bwait\b|<unknown> get$|connection\.py:\d+ (_?recv\w*|poll)$")


def _python_owned(t: HostThread) -> np.ndarray:
    """The time whose innermost event on the thread is a Python frame (its own time: bytecode, or the interpreter
    lock awaited), as merged intervals: per nesting level, its Python frames less the events one level below."""
    parent, depth = t.nesting()
    py = t.mask(is_python_frame)
    out = []
    for d in range(int(depth.max()) + 1 if len(depth) else 0):
        at = depth == d
        mine = at & py
        if mine.any():
            below = depth == d + 1
            out.append(iv.subtract(iv.union(iv.from_columns(t.start[mine], t.end[mine])),
                                   iv.union(iv.from_columns(t.start[below], t.end[below]))))
    return iv.union(np.concatenate(out)) if out else iv.EMPTY


def running_python(t: HostThread) -> np.ndarray:
    """A thread's outermost Python frames less its waits (THREAD_WAIT), as merged intervals: when it ran Python (or
    wanted a core for it)."""
    py = t.mask(is_python_frame)
    parent, _ = t.nesting()
    outer = py & ~((parent >= 0) & py[np.where(parent >= 0, parent, 0)])
    waits = t.mask(THREAD_WAIT.search)
    return iv.subtract(iv.union(iv.from_columns(t.start[outer], t.end[outer])),
                       iv.union(iv.from_columns(t.start[waits], t.end[waits])))


def _interpreter_held(trace: Trace, training: list) -> np.ndarray:
    """Where a training thread sat in its own Python time while another thread of the process ran Python frames (not
    waiting: THREAD_WAIT): with one interpreter lock, the training thread waited for a loader thread (a Python loader
    run ahead in a thread: issue 29 on an H200, its 81 rounds of NumPy a batch read "other 75 %" against a truth of
    45 % input).  Empty where no other thread ran Python."""
    mine = {id(t) for t in training}
    runs = [running_python(t) for t in trace.threads if id(t) not in mine and t.mask(is_python_frame).any()]
    running = iv.union(np.concatenate(runs)) if runs else iv.EMPTY
    if not len(running):
        return iv.EMPTY
    return iv.union(np.concatenate([iv.intersect(running, _python_owned(t)) for t in training] or [iv.EMPTY]))


def _events_in(starts: np.ndarray, merged: np.ndarray) -> int:
    """How many of the sorted event starts fall inside the merged intervals (module docstring: what the profiler's
    cost is shared by)."""
    if not len(merged) or not len(starts):
        return 0
    return int((np.searchsorted(starts, merged[:, 1]) - np.searchsorted(starts, merged[:, 0])).sum())


def idle_by_step(trace: Trace, steps: list[Step]) -> list[StepIdle]:
    """One StepIdle per (step, device that ran kernels), charged as the module docstring says."""
    acts = host_activity(trace)
    out = []
    for d in trace.active_devices():
        h2d, d2h = d.copies.intervals("h2d"), d.copies.intervals("d2h")
        covers = {k: iv.union(np.concatenate([acts[k], h2d])) if k == "host_to_device" else
                  iv.union(np.concatenate([acts[k], d2h])) if k == "output" else acts[k] for k in CHARGE_ORDER}
        h2d_copy = d.copies.of("h2d")
        for st in steps:
            busy = iv.clip(d.busy, st.start, st.end)
            idle = iv.subtract([(st.start, st.end)], busy)
            res = StepIdle(st.label, d.name, st.ps, iv.length(busy))
            launch_idle = []
            for kind in CHARGE_ORDER:
                got = iv.intersect(idle, iv.clip(covers[kind], st.start, st.end))
                res.charged[kind] = iv.length(got)
                res.events[kind] = _events_in(acts["events"], got)
                if kind == "input" and "interpreter_held" in acts:
                    res.interpreter_held = iv.length(iv.intersect(got, acts["interpreter_held"]))
                launch_idle = got if kind == "kernel_launch" else launch_idle
                idle = iv.subtract(idle, got)
            res.charged["idle"] = iv.length(idle)
            res.events["idle"] = _events_in(acts["events"], idle)
            for kind, serial in (("input", "input_serial"), ("host_to_device", "host_to_device")):
                # delayed dispatch (module docstring): launch idle after the hidden work, up to its length
                hidden = iv.intersect(busy, iv.clip(acts[serial], st.start, st.end))
                after = iv.clip(launch_idle, hidden[0, 0], st.end) if len(hidden) else iv.EMPTY
                moved = min(iv.length(hidden), iv.length(after))
                res.charged["kernel_launch"] -= moved
                res.charged[kind] += moved
                res.delayed_dispatch[kind] = moved
                if moved:  # the hidden work's events delayed the dispatch: its share of them moves with the time
                    res.events[kind] += _events_in(acts["events"], hidden) * moved / iv.length(hidden)
                launch_idle = iv.subtract(launch_idle, after[:1]) if moved else launch_idle
            res.kernels = int(np.searchsorted(d.kernel_starts, st.end) - np.searchsorted(d.kernel_starts, st.start))
            inside = h2d_copy & (d.copies.start >= st.start) & (d.copies.start < st.end)
            res.transfer_bytes = int(d.copies.bytes[inside].sum())
            out.append(res)
    return out
