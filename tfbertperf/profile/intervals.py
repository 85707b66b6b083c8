"""Interval arithmetic on (start, end) pairs in picoseconds: merged, disjoint, sorted lists."""

from __future__ import annotations

import bisect


def union(intervals) -> list[tuple[int, int]]:
    """Merge (start, end) intervals into disjoint sorted ones."""
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(merged) -> int:
    return sum(e - s for s, e in merged)


def clip(merged, start: int, end: int) -> list[tuple[int, int]]:
    """The part of a merged list inside [start, end); found by bisection (ends of a merged list are sorted)."""
    out = []
    for s, e in merged[bisect.bisect_right(merged, start, key=lambda iv: iv[1]):]:
        if s >= end:
            break
        out.append((max(s, start), min(e, end)))
    return out


def intersect(a, b) -> list[tuple[int, int]]:
    """a ∩ b for two merged lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a, b) -> list[tuple[int, int]]:
    """a \\ b for two merged lists."""
    out, j = [], 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out
