"""Interval arithmetic in picoseconds on sorted numpy arrays: a merged list is an (n, 2) int64 array of disjoint,
non-touching [start, end) rows sorted by start (Perfetto and HTA keep a trace's spans as columns, not objects;
a capture of hundreds of MB has millions of them).  Every function also takes a list of (start, end) pairs."""

from __future__ import annotations

import numpy as np

EMPTY = np.zeros((0, 2), dtype=np.int64)


def as_array(intervals) -> np.ndarray:
    """(n, 2) array of (start, end) rows from an array, a list of pairs, or any iterable of pairs: int64
    (picoseconds), or float64 when the times are (xprof's trace gives microseconds as floats)."""
    if not isinstance(intervals, np.ndarray):
        intervals = np.array(intervals if isinstance(intervals, (list, tuple)) else list(intervals))
    if not intervals.size:
        return EMPTY
    return intervals.reshape(-1, 2).astype(np.float64 if intervals.dtype.kind == "f" else np.int64, copy=False)


def from_columns(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Rows (start, end) of two equal-length arrays (not merged)."""
    return np.stack([np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64)], axis=1) if len(start) \
        else EMPTY


def union(intervals) -> np.ndarray:
    """Merge (start, end) intervals into disjoint sorted ones; empty ones (end <= start) are dropped and touching
    ones joined."""
    a = as_array(intervals)
    a = a[a[:, 1] > a[:, 0]]
    if len(a) < 2:
        return a.copy()
    a = a[np.argsort(a[:, 0], kind="stable")]
    reach = np.maximum.accumulate(a[:, 1])
    new = np.empty(len(a), dtype=bool)
    new[0] = True
    new[1:] = a[1:, 0] > reach[:-1]  # a start beyond every end before it opens a new merged interval
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(a)) - 1
    return np.stack([a[first, 0], reach[last]], axis=1)


def length(merged) -> int | float:
    """Total length of a merged list (picoseconds: an int; xprof's float microseconds stay a float)."""
    a = as_array(merged)
    return (a[:, 1] - a[:, 0]).sum().item() if len(a) else 0


def clip(merged, start: int, end: int) -> np.ndarray:
    """The part of a merged list inside [start, end), found by bisection."""
    a = as_array(merged)
    i = int(np.searchsorted(a[:, 1], start, side="right"))
    j = int(np.searchsorted(a[:, 0], end, side="left"))
    if j <= i:
        return EMPTY
    out = a[i:j].copy()
    out[0, 0] = max(out[0, 0], start)
    out[-1, 1] = min(out[-1, 1], end)
    return out


def _sweep(a, b, keep) -> np.ndarray:
    """The parts of the line where keep(in_a, in_b) holds, a and b merged lists."""
    a, b = as_array(a), as_array(b)
    pts = np.concatenate([a[:, 0], a[:, 1], b[:, 0], b[:, 1]])
    if not len(pts):
        return EMPTY
    da = np.concatenate([np.ones(len(a), np.int8), -np.ones(len(a), np.int8), np.zeros(2 * len(b), np.int8)])
    db = np.concatenate([np.zeros(2 * len(a), np.int8), np.ones(len(b), np.int8), -np.ones(len(b), np.int8)])
    order = np.argsort(pts, kind="stable")
    pts, ca, cb = pts[order], np.cumsum(da[order]), np.cumsum(db[order])
    # after the last edge at each distinct point, the segment to the next point is in or out
    last = np.append(pts[1:] != pts[:-1], True)
    pts, ca, cb = pts[last], ca[last], cb[last]
    on = keep(ca[:-1] > 0, cb[:-1] > 0)
    return union(np.stack([pts[:-1][on], pts[1:][on]], axis=1))


def intersect(a, b) -> np.ndarray:
    """a ∩ b for two merged lists."""
    if not len(a) or not len(b):
        return EMPTY
    return _sweep(a, b, lambda x, y: x & y)


def subtract(a, b) -> np.ndarray:
    """a \\ b for two merged lists."""
    if not len(b) or not len(a):
        return as_array(a).copy()
    return _sweep(a, b, lambda x, y: x & ~y)


def parents(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent index or -1, depth) of each event of a thread sorted by (start, −end): the innermost earlier
    event still open when it starts (a stack walk; chunked so that only one chunk's Python ints exist)."""
    n = len(start)
    parent = np.empty(n, dtype=np.int64)
    depth = np.empty(n, dtype=np.int64)
    stack: list[int] = []
    ends: list[int] = []
    for lo in range(0, n, 1 << 18):
        s_chunk, e_chunk = start[lo:lo + (1 << 18)].tolist(), end[lo:lo + (1 << 18)].tolist()
        par, dep = [0] * len(s_chunk), [0] * len(s_chunk)
        for j, (s, e) in enumerate(zip(s_chunk, e_chunk)):
            while ends and ends[-1] <= s:
                ends.pop()
                stack.pop()
            par[j] = stack[-1] if stack else -1
            dep[j] = len(stack)
            stack.append(lo + j)
            ends.append(e)
        parent[lo:lo + len(par)] = par
        depth[lo:lo + len(dep)] = dep
    return parent, depth
