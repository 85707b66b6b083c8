"""What a train step holds in memory, read from its traced graph (issue 17).

`kept_for_backward` lists the forward tensors that the gradient ops of the step read: TF keeps each of them
alive from the forward pass until its last gradient consumer has run, so their sum is the step's activation
memory (the part that grows with the batch).  It needs only a trace of the step (no batch runs), which the
first real step then reuses.  `preflight` adds the state (weights, gradients, optimizer slots) and refuses a
step that cannot fit the machine's free memory with one line and exit status 2, before the step runs.
"""

from __future__ import annotations

import collections
import re

MiB = 2**20


def kept_for_backward(graph) -> dict:
    """{"bytes": total, "tensors": count, "by_op": {op type: bytes}, "by_name": {name pattern: bytes}}.

    The forward pass is every op the step's outputs (loss, accuracy) depend on by data edges; a forward tensor
    read by any other op that runs (gradients, recomputation, the optimizer; not an unused op TF prunes) is kept
    until then.  A tensor counts once
    however many ops read it; Reshape/Identity outputs share their input's buffer in TF, so one whose input is
    counted too is not counted again.  Shapes must be static (trace with a fully defined batch spec)."""
    forward = _ancestors([t.op for t in graph.outputs], control=False)
    runs = _ancestors([t.op for t in graph.outputs] + list(graph.control_outputs), control=True)  # not pruned
    kept = {}
    for op in graph.get_operations():
        if op.name in forward or op.name not in runs:
            continue
        for t in op.inputs:
            src = t.op
            if src.name not in forward or src.type in ("ReadVariableOp", "Const", "Placeholder"):
                continue  # backward's own tensors, weights, constants, the batch
            n = t.shape.num_elements()
            if n is not None:
                kept[t.name] = (src, n * t.dtype.size)
    by_op, by_name = collections.Counter(), collections.Counter()
    total = 0
    for name, (src, size) in kept.items():
        if src.type in ("Reshape", "Identity") and src.inputs[0].name in kept:
            continue  # an alias of a counted buffer
        total += size
        by_op[src.type] += size
        by_name[re.sub(r"block_\d+", "block_N", name.split(":")[0])] += size
    return {"bytes": total, "tensors": len(kept), "by_op": dict(by_op.most_common()),
            "by_name": dict(by_name.most_common())}


def _ancestors(ops, control: bool) -> set:
    seen, todo = set(), list(ops)
    while todo:
        op = todo.pop()
        if op.name not in seen:
            seen.add(op.name)
            todo.extend(t.op for t in op.inputs)
            todo.extend(op.control_inputs if control else ())
    return seen


def traced_graph(step_fn, element_spec):
    """The step's graph for one batch spec (the trace the first call reuses)."""
    return step_fn.get_concrete_function(element_spec).graph


def state_bytes(model, optimizer) -> int:
    """Weights + one gradient per trainable weight + the optimizer's variables (AdamW: two slots)."""
    size = sum(variable_bytes(v) for v in model.weights)
    size += sum(variable_bytes(v) for v in model.trainable_variables)
    return size + sum(variable_bytes(v) for v in optimizer.variables)


def variable_bytes(v) -> int:
    """Bytes a variable holds, from its shape and dtype (a Keras or a tf.Variable; nothing is read)."""
    import numpy as np
    import tensorflow as tf

    return int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size


def available_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def preflight(step_fn, element_spec, model, optimizer, remat: bool) -> dict:
    """The step's memory need from its trace, checked against free memory; UsageError if it cannot fit.

    Returns {"activations_bytes", "state_bytes", "need_bytes", "available_bytes"}.  "need" = state + activations
    (peak working memory of the backward pass and the process's own ~1 GB come on top: refused only when
    even this lower bound exceeds what is free)."""
    from tfbertperf.errors import UsageError

    act = kept_for_backward(traced_graph(step_fn, element_spec))["bytes"]
    state = state_bytes(model, optimizer)
    need, free = act + state, available_bytes()
    out = {"activations_bytes": act, "state_bytes": state, "need_bytes": need, "available_bytes": free}
    if need > free:
        hint = "lower --set train.batch_size" + ("" if remat else " or --set train.remat=true")
        raise UsageError(f"train step needs ≥ {need / 2**30:.1f} GiB (activations {act / 2**30:.1f} GiB + weights, "
                         f"gradients, optimizer {state / 2**30:.1f} GiB) but {free / 2**30:.1f} GiB is free: {hint}")
    return out


def check_step(step_fn, iterator, global_batch: int, model, optimizer, remat: bool, say) -> dict | None:
    """`preflight` for a step fed by `iterator` (global batches of dicts); says the figures in one line.  None
    (nothing checked) when the batches are not plain tensors (a distributed iterator's per-replica values)."""
    import tensorflow as tf

    spec = getattr(iterator, "element_spec", None)
    if not isinstance(spec, dict) or not all(isinstance(s, tf.TensorSpec) for s in spec.values()):
        return None
    # The traced shape is the one the first step is called with (a batch's tensors have static shapes), so
    # the first step reuses this trace.
    spec = {k: tf.TensorSpec([global_batch, *s.shape[1:]], s.dtype) for k, s in spec.items()}
    if not all(s.shape.is_fully_defined() for s in spec.values()):
        return None
    out = preflight(step_fn, spec, model, optimizer, remat)
    say(f"memory: the step keeps {out['activations_bytes'] / 2**30:.2f} GiB of activations for its backward pass"
        f" + {out['state_bytes'] / 2**30:.2f} GiB of weights, gradients and optimizer state"
        f"{' (train.remat)' if remat else ''}; {out['available_bytes'] / 2**30:.1f} GiB free")
    return out


__all__ = ["kept_for_backward", "traced_graph", "state_bytes", "available_bytes", "preflight", "check_step"]
