"""A tf.data prefetch that sizes its own buffer: where a user's fit has one, ProfileCallback's probe runs every block
after the fit's last step; where a what-if was measured with blocks inside such a fit, the figure may read low
(issue 29; BENCHMARKS.md, "the probe and tf.data's autotuned prefetch", "blocks after the last step").

tf.data's legacy prefetch autotuner (`prefetch(tf.data.AUTOTUNE)`, and the prefetch tf.data injects after a
`.repeat()` that ends a pipeline: `Options.experimental_optimization.inject_prefetch`, on by default) doubles its
buffer each time the buffer fills to its limit and is then drained to empty.  A fit whose pipeline is slower than
its step keeps that buffer empty and never grows it; each probe block inside the fit pauses the real pipeline for
tens of milliseconds, the buffer fills, the real steps after it drain it, and the limit doubles — so within a few
blocks the real steps between blocks all run on batches banked during the pauses, faster than the fit runs without
the probe, and T, hence the input cost (T − T_c) / T, reads low.  Measured on Keras' TensorFlow backend (a
per-example map, the probe against a plain fit beside it): with `prefetch(tf.data.AUTOTUNE)` at the end −18 to −26
pp (five pairs), with the injected prefetch 9–34 pp low; with a fixed `prefetch(2)` and nothing injected −2.2 to
+7.0 pp.  The recovery rule (train/recovery.py) could not see enough of it: the banked steps run at 0.7–0.8 of the
fit's pace, near the 20 % its test allows.

So the callback reads the dataset Keras iterates before the first block (`in_dataset`: the chain of the iterator
Keras hands its train_function, on either backend, and tf.data's own rule for the prefetch it injects) and, where it
finds such a prefetch, moves every block after the last step (keras_callback.py; tfbertperf/keras_jax.py through
jax_probe.JaxProbe.to_end): no pause inside the fit, so T is the fit's own pace; each block is then paired with its
stretch of the fit's steps (profile/stepfile.py, `probe_after_steps`), and the what-if says `after_steps`.  The
price: T_c is measured after T, not beside it, so a machine whose speed drifts over the fit widens the interval.

The capture shows such a prefetch too: its iterator events carry `autotune: true` and `autotune_mode` (columns.py
HostThread.prefetch, read by prefetch_stats.py); analyze lists both kinds as `attribution.autotuned_prefetch`.
`mark` reads a what-if measured with blocks inside such a fit (a step file written before, or a dataset the callback
could not read: a distributed one) as possibly low: it keeps an input-bound verdict whose figure already reaches the
line, and makes one below the line undecided between compute and input, its first action the fix for measuring (a
fixed prefetch size and no injected prefetch while the probe runs); ProfileCallback warns the same at the end of
such a fit (`in_capture`, `fit_warning`).  Only for a user's fit (no run report: `run`'s own probe, on its own
pipeline's autotuned prefetch, read a bandwidth-bound run −1.0…+1.8 pp off an unprobed run beside it, four pairs,
tools/bench/bench_run_probe_pace.py; why it differs from the Keras fit is not measured).
"""

from __future__ import annotations

FIX = ("for the measuring fit give every prefetch a fixed size — `prefetch(2)` in place of "
       "`prefetch(tf.data.AUTOTUNE)` — and turn tf.data's injected one off (`options = tf.data.Options(); "
       "options.experimental_optimization.inject_prefetch = False; ds = ds.with_options(options)`), then measure "
       "again with ProfileCallback(probe=True)")


def in_capture(session) -> list[dict]:
    """The autotuned prefetches a capture session's `.xplane.pb` files show ([] where there is none, or no
    readable capture: ProfileCallback asks at the end of a fit, which must not fail for it)."""
    from pathlib import Path

    from tfbertperf.profile.trace import load_trace

    try:
        files = sorted(Path(session).glob("*.xplane.pb"))
        return load_trace(files).autotuned_prefetch() if files else []
    except Exception:  # noqa: BLE001 — a damaged capture is analyze's to report, in one line, not the fit's
        return []


ASYNC = ("_ParallelMapDataset", "_ParallelInterleaveDataset", "_ParallelBatchDataset", "_MapAndBatchDataset",
         "_PrefetchDataset")  # a pipeline ending in one of these gets no injected prefetch
PASS_THROUGH = ("_OptionsDataset", "_AssertNextDataset", "_MaxIntraOpParallelismDataset",
                "_PrivateThreadPoolDataset")  # … looked through to the transformation before them


def in_dataset(iterator) -> list[dict]:
    """The autotuned prefetches a tf.data iterator's dataset will run, read from the dataset before the fit's first
    step, where no capture may come (`ProfileCallback(profile_steps=None, probe=True)`), or where a capture cannot
    show them (Keras on JAX: jax.profiler records no tf.data events; `_dataset_of`): each
    `prefetch(tf.data.AUTOTUNE)` in its chain, and the prefetch tf.data injects at the end (its default
    `inject_prefetch`, with autotuning on) unless the last transformation already runs ahead (a parallel map,
    interleave or batch, a prefetch) or is a map tf.data makes parallel (a stateless one: `map_parallelization`).
    Checked against real captures of eight pipelines (tests/test_autotuned_prefetch.py).  [] where the iterator
    is over no tf.data dataset or its dataset cannot be read (a distributed one): the check must not fail a fit."""
    try:
        return _walk(_dataset_of(iterator))
    except Exception:  # noqa: BLE001 — an iterator of another kind, a dataset of another TF version
        return []


def _dataset_of(iterator):
    """The tf.data dataset behind the iterator a Keras fit hands its train_function: on TensorFlow a tf.data
    iterator holding it; on JAX the adapter's generator (TFDatasetAdapter.get_jax_iterator), whose frame holds the
    adapter and its dataset.  Raises where there is none."""
    import tensorflow as tf

    if hasattr(iterator, "_dataset"):
        return iterator._dataset
    frame = iterator.gi_frame
    found = [d for d in (getattr(v, "_dataset", None) for v in frame.f_locals.values())
             if isinstance(d, tf.data.Dataset)]
    return found[0]


def _walk(root) -> list[dict]:
    import tensorflow as tf

    found, seen, todo, last = [], set(), [root], _last(root)
    while todo:
        ds = todo.pop()
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        if type(ds).__name__ == "_PrefetchDataset" and tf.get_static_value(ds._buffer_size) == tf.data.AUTOTUNE:
            found.append(_entry("prefetch(tf.data.AUTOTUNE)" + (" at the end" if ds is last else "")))
        todo.extend(ds._inputs())
    options = root.options()
    if options.experimental_optimization.inject_prefetch is not False and options.autotune.enabled is not False \
            and type(last).__name__ not in ASYNC and not (type(last).__name__ == "_MapDataset" and _stateless(last)):
        found.insert(0, _entry("the prefetch tf.data injects at the end"))
    return found


def _entry(name: str) -> dict:
    """in_capture's shape (trace.py Trace.autotuned_prefetch), its buffer unknown before the fit: "in" says so."""
    return {"iterator": name, "autotune_mode": "", "buffer_limit_max": None, "in": "dataset"}


def _last(root):
    """The pipeline's last transformation, looked through options and the like (PASS_THROUGH)."""
    while type(root).__name__ in PASS_THROUGH:
        root = root._input_dataset
    return root


def _stateless(ds) -> bool:
    """Whether a map's function has no stateful op (tf.data's map_parallelization then runs it in parallel)."""
    graph = ds._map_func.function.graph
    return not any(op._is_stateful for op in graph.get_operations()) and \
        ds.options().experimental_optimization.map_parallelization is not False


def reads_low(figure: str, found: list[dict]) -> str:
    """Why `figure` (the measured what-if, in words) may read low: the one sentence analyze and ProfileCallback
    give."""
    where = "the dataset has" if all(f.get("in") == "dataset" for f in found) else "the capture shows"
    return (f"{figure} may read low: {where} tf.data prefetching with a buffer it sizes itself "
            f"({words(found)}), which grows at each of the probe's pauses and can feed the real steps between its "
            "blocks from batches banked during them (a Keras fit read 18–28 pp low so)")


def fit_warning(what_if: dict, found: list[dict]) -> str:
    """ProfileCallback's warning at the end of a probed fit whose capture shows an autotuned prefetch."""
    figure = f"the measured input cost {what_if['input_cost_fraction']:.1%}"
    return f"tfbertperf ProfileCallback: {reads_low(figure, found)} — {FIX}"


def words(found: list[dict]) -> str:
    """The prefetches in a clause: "Iterator::Root::Prefetch (legacy autotune)"."""
    return ", ".join(f"{f['iterator']}" + (f" ({f['autotune_mode']} autotune)" if f["autotune_mode"] else "")
                     for f in found)


def mark(decided: dict, att: dict, threshold: float) -> dict:
    """`decided` with the what-if read as possibly low where the capture shows an autotuned prefetch and a user's
    probe measured the figure (module docstring); else `decided` unchanged."""
    found, icf = att.get("autotuned_prefetch"), att.get("input_cost_fraction")
    if not found or icf is None or att.get("what_if_after_steps") or decided.get("bottleneck") not in ("input",
                                                                                                     "compute"):
        return decided
    why = reads_low(f"the what-if {icf:.0%}", found)
    decided = {**decided, "summary": f"{decided['summary']}; {why}"}
    und = decided.get("undecided")
    if decided["bottleneck"] == "input" and not und:  # a low reading above the line: input-bound all the more
        return decided
    acts = decided.get("actions") or [{"advice": r, "set": []} for r in decided.get("recommendations") or []]
    if und:  # its interval straddles the line: a longer fit reads low the same way, the fix decides
        acts = acts[1:]
    decided["undecided"] = {**(und or {"between": ["compute", "input"], "input_cost_fraction": round(icf, 4),
                                       "ci95": att.get("input_cost_ci95"), "threshold": threshold}),
                            "probe_steps_to_decide": None, "longer_by": None, "source": "autotuned_prefetch"}
    advice = f"measure again before acting on this verdict, with the probe reading the fit's own pace: {FIX}"
    decided["actions"] = [{"advice": advice, "set": []}, *acts]
    decided["recommendations"] = [a["advice"] for a in decided["actions"]]
    return decided
