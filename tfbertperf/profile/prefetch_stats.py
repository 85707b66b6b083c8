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
