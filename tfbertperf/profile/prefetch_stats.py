"""The autotuned tf.data prefetches among a host line's events, from their iterator stats (xspace.HOST_STATS:
`autotune`, `autotune_mode`, `buffer_limit`) — columns.HostThread.prefetch; what they mean for a measured what-if:
autotuned_prefetch.py."""

from __future__ import annotations

import numpy as np

from tfbertperf.profile.xspace_wire import MISSING


def from_line(line, names, table, strings) -> tuple:
    """(iterator name, autotune mode, buffer_limit per event, start per event) per autotuned prefetch among a host
    line's events (its `autotune`, `autotune_mode` and `buffer_limit` stats: xspace.HOST_STATS; a limit not
    recorded reads 0).  The starts let the trace keep the prefetches that fed training steps (Trace.
    autotuned_prefetch: a validation dataset's injected prefetch runs between them).  Only prefetches: a
    `map` or `interleave` with num_parallel_calls=AUTOTUNE carries `autotune: true` too (our own pipeline's
    ParallelMapV2 and ParallelInterleaveV4), and tunes its parallelism, not a buffer the probe's pauses fill."""
    auto = line.stats.get("autotune")
    if auto is None:  # most lines: no tf.data iterator events (checked before the plane's strings are walked)
        return ()
    true = [i for i, v in enumerate(strings) if v == "true"]
    if not true:
        return ()
    hit = np.flatnonzero(np.isin(auto, true))
    mode, limit = line.stats.get("autotune_mode"), line.stats.get("buffer_limit")
    out: dict = {}
    for i in hit.tolist():
        name = names.values[table[i]]
        if not name.rsplit("::", 1)[-1].startswith("Prefetch"):  # a map or interleave whose parallelism is tuned
            continue
        key = (name, strings[mode[i]] if mode is not None and mode[i] >= 0 else "")
        out.setdefault(key, []).append((int(limit[i]) if limit is not None and limit[i] != MISSING else 0,
                                        int(line.start[i])))
    return tuple((name, m, np.array([x for x, _ in seen], dtype=np.int64),
                  np.array([t for _, t in seen], dtype=np.int64)) for (name, m), seen in sorted(out.items()))


MAP_KINDS = ("ParallelMapV2", "ParallelMap", "MapAndBatch", "Map")  # an iterator name's last part: a tf.data map
BATCH_KINDS = ("Batch", "BatchV2", "ParallelBatch", "PaddedBatch")  # … and its input's, for a map after a batch


def maps_from_line(line, names, table, strings) -> tuple:
    """((iterator name, autotuned, start per event) per tf.data map among a host line's iterator events, the names of
    the maps among them that read a batch): autotuned where its `autotune` stat is "true" —
    `map(num_parallel_calls=AUTOTUNE)`, or a map tf.data's own `map_parallelization` made parallel (a stateless `map(f)`
    with no num_parallel_calls shows it too) —, reading a batch where an iterator named after it is a batch
    (`…::ParallelMapV2::BatchV2`: `batch(…).map(f)`, vectorized).  Trace.tfdata_maps keeps the ones that fed training
    steps; advice.py reads them (never "num_parallel_calls → autotune" to a map that has it)."""
    codes, inverse = np.unique(table, return_inverse=True)  # each name classified once, not per event
    parts = [names.values[c].split("::") for c in codes.tolist()]
    kinds = [p[-1].split("[")[0] if p[0] == "Iterator" and len(p) > 1 else "" for p in parts]
    batched = frozenset("::".join(p[:-1]) for p, k in zip(parts, kinds)
                        if k in BATCH_KINDS and p[-2].split("[")[0] in MAP_KINDS)
    auto = line.stats.get("autotune")
    true = np.array([i for i, v in enumerate(strings) if v == "true"], dtype=np.int64)
    tuned = np.isin(auto, true) if auto is not None else np.zeros(len(table), dtype=bool)
    out = []
    for u, k in enumerate(kinds):
        if k in MAP_KINDS:
            mine = inverse == u
            for a in (False, True):
                at = line.start[mine & (tuned == a)]
                if len(at):
                    out.append((names.values[int(codes[u])], a, np.asarray(at, dtype=np.int64)))
    return tuple(sorted(out, key=lambda m: (m[0], m[1]))), batched


def map_remedy(maps: list | None) -> str:
    """The words of the "preprocessing dominates" advice (advice.py {map_remedy}) for the maps the capture shows
    (Trace.tfdata_maps): num_parallel_calls → autotune only where a map is not already tuned by tf.data, map after
    batch only where one runs per example; where all are tuned, more CPUs than this machine's are the remaining
    lever beside less work (tf.data service)."""
    maps = maps or []
    tuned, batched = bool(maps) and all(m["autotuned"] for m in maps), bool(maps) and all(m["after_batch"] for m in maps)
    said = ", ".join(sorted({m["iterator"].rsplit("::", 1)[-1] for m in maps}))
    parts = ([] if tuned else ["map num_parallel_calls → autotune"]) + \
        ([] if batched else ["vectorize (map after batch)"]) + ["cache after parse", "preprocess offline"]
    if not tuned:
        return ", ".join(parts[:-1]) + ", or " + parts[-1]
    return (f"its maps already run in parallel, tuned by tf.data ({said}: autotune{', on whole batches' * batched}; "
            "tf.data parallelizes a stateless map(f) itself) — " + ", ".join(parts) +
            ", or run it on more CPUs than this machine's (tf.data service workers)")
