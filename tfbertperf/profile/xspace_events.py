"""One XLine's events decoded a chunk at a time (xspace.py read_columns, issue 32): the fast path for events
written in field-number order, the general decoder for the rest, and the wanted stats as columns."""

from __future__ import annotations

import mmap

import numpy as np

from tfbertperf.profile.xspace_wire import (MISSING, CorruptXSpace, _decode_messages, _last, _nvarint, _nvarint_wide,
                                            _Strings)

def _canonical_events(a: np.ndarray, words: np.ndarray, s: np.ndarray, e: np.ndarray, wanted_ids: np.ndarray):
    """The fast path: events written in field-number order (what every protobuf serializer does) —
    [1 metadata_id] [2 offset_ps] [3 duration_ps] [4 stats]* [5 num_occurrences].  Returns (meta, offset, dur,
    aggregated, (stat event indices, payload starts, payload ends), ok) where ok marks the events this order
    read to their end; the others go to the general decoder.  wanted_ids: bool per one-byte stat metadata id
    (0–127), True for the ids a rule reads: other stats are not returned."""
    n, top = len(s), len(a) - 1
    pos = s.copy()
    cols = [np.zeros(n, dtype=np.int64) for _ in range(3)]
    for tag, col in zip((0x08, 0x10, 0x18), cols):
        m = np.flatnonzero((pos < e) & (a[np.minimum(pos, top)] == tag))
        if m.size:
            v, q = (_nvarint if tag == 0x08 else
                    lambda a, p, lim: _nvarint_wide(a, words, p, lim))(a, pos[m] + 1, e[m])
            col[m] = v
            pos[m] = q
    si, ss, se = [], [], []
    m = np.flatnonzero((pos < e) & (a[np.minimum(pos, top)] == 0x22))
    cur, em = pos[m], e[m]  # the active events' positions and ends, compressed along with m
    while m.size:
        q = cur + 1
        ln = a[q]
        if ln.max() < 0x80:  # one-byte lengths (stats under 128 bytes: nearly all of them) need no varint pass
            q = q + 1
            end = q + ln
        else:
            ln, q = _nvarint(a, q, em)
            end = q + ln
        if np.any(end > em):
            raise CorruptXSpace("a stat runs past its event")
        # keep only the stats a rule may read: a payload that starts with a one-byte metadata id (0x08, id) not
        # wanted is skipped here; anything else is kept for the exact decode
        b1 = a[np.minimum(q + 1, top)]
        keep = (end > q) & ((a[q] != 0x08) | (b1 >= 0x80) | wanted_ids[b1 & 0x7F])
        si.append(m[keep])
        ss.append(q[keep])
        se.append(end[keep])
        more = end < em
        more[more] = a[end[more]] == 0x22
        done = ~more
        pos[m[done]] = end[done]
        m, cur, em = m[more], end[more], em[more]
    aggregated = np.zeros(n, dtype=bool)
    m = np.flatnonzero((pos < e) & (a[np.minimum(pos, top)] == 0x28))
    if m.size:
        _, pos[m] = _nvarint(a, pos[m] + 1, e[m])
        aggregated[m] = True
    cat = (lambda x: np.concatenate(x) if x else np.zeros(0, dtype=np.int64))
    return (*cols, aggregated, (cat(si), cat(ss), cat(se)), pos == e)


def _general_events(a: np.ndarray, s: np.ndarray, e: np.ndarray):
    """Any field order (the slow path, for events the fast path could not read); same results."""
    n = len(s)
    var, stats, _, _ = _decode_messages(a, s, e, (1, 2, 3, 5), nested=4)
    order = np.full(n, -1, dtype=np.int64)  # XEvent's `data` oneof: the later of offset_ps / num_occurrences wins
    order[var[2][0]] = 2
    order[var[5][0]] = 5
    return (_last(n, *var[1], 0, np.int64), _last(n, *var[2], 0, np.int64), _last(n, *var[3], 0, np.int64),
            order == 5, stats)


def _decode_events(a: np.ndarray, words: np.ndarray, mm, ev_s: np.ndarray, ev_e: np.ndarray, base_ps: int,
                   wanted: dict, strings: _Strings, drop_aggregated: bool):
    """One chunk of a line's events (payload starts/ends) → (start, dur, meta, stats) arrays."""
    n = len(ev_s)
    ids = {mid: name for mid, name in strings.stat_names.items() if name in wanted}
    table = np.zeros(128, dtype=bool)
    table[[i for i in ids if 0 <= i < 128]] = True
    meta, offset, dur, aggregated, (si, ss, se), ok = _canonical_events(a, words, ev_s, ev_e, table)
    if not ok.all():
        bad = np.flatnonzero(~ok)
        keep_stats = ~np.isin(si, bad)
        si, ss, se = si[keep_stats], ss[keep_stats], se[keep_stats]
        m2, o2, d2, g2, (i2, s2, e2) = _general_events(a, ev_s[bad], ev_e[bad])
        meta[bad], offset[bad], dur[bad], aggregated[bad] = m2, o2, d2, g2
        si, ss, se = np.concatenate([si, bad[i2]]), np.concatenate([ss, s2]), np.concatenate([se, e2])
    keep = ~aggregated if drop_aggregated and aggregated.any() else None
    stats = {}
    if ids and len(si):
        # only the stats a rule reads are decoded: their metadata id is the payload's first field (0x08) in
        # every serializer; a stat that starts otherwise is decoded in full
        top = len(a) - 1
        first = (ss < se) & (a[np.minimum(ss, top)] == 0x08)
        m = np.flatnonzero(first)
        sid = np.full(len(si), -1, dtype=np.int64)
        if m.size:
            sid[m] = _nvarint(a, ss[m] + 1, se[m])[0]
        sel = ~first | np.isin(sid, np.array(sorted(ids), dtype=np.int64))
        si, ss, se = si[sel], ss[sel], se[sel]
        sv, _, slen, sfixed = _decode_messages(a, ss, se, (1, 3, 4, 7), nested=None)
        m = len(si)
        mid = _last(m, *sv[1], 0, np.int64)
        want_ids = np.array(sorted(ids), dtype=np.int64)
        hit = np.isin(mid, want_ids)
        for stat_id, name in ids.items():
            rows = hit & (mid == stat_id)
            if not rows.any():
                continue
            kind = wanted[name]
            col = np.full(n, MISSING if kind == "int" else -1, dtype=np.int64)
            for f in (3, 4, 7):  # uint64, int64, ref — numbers, or (ref) a stat metadata name
                j, v = sv[f]
                sel = rows[j]
                if not sel.any():
                    continue
                ev, v = si[j[sel]], v[sel]
                if kind == "int" and f != 7:
                    col[ev] = v
                elif kind == "str":  # interned once per distinct value, not once per event
                    u, inv = np.unique(v, return_inverse=True)
                    codes = [strings.code(strings.stat_names.get(x, "") if f == 7 else
                                          str(x if f == 4 or x >= 0 else x + (1 << 64))) for x in u.tolist()]
                    col[ev] = np.array(codes, dtype=np.int64)[inv]
            if 1 in sfixed:  # double_value
                j, pos, num = sfixed[1]
                sel = rows[j] & (num == 2)
                if sel.any():
                    vals = np.frombuffer(b"".join(mm[q:q + 8] for q in pos[sel].tolist()), dtype="<f8")
                    col[si[j[sel]]] = (vals.astype(np.int64) if kind == "int" else
                                       [strings.code(repr(x)) for x in vals.tolist()])
            if 5 in slen and kind == "str":  # str_value: decoded one by one (rare: TF's memcpy_details)
                j, s0, s1 = slen[5]
                sel = rows[j]
                if sel.any():
                    try:
                        col[si[j[sel]]] = [strings.code(mm[x:y].decode("utf-8"))
                                           for x, y in zip(s0[sel].tolist(), s1[sel].tolist())]
                    except UnicodeDecodeError:
                        raise CorruptXSpace("a string stat is not valid UTF-8") from None
            stats[name] = col
    start = offset + base_ps
    if keep is not None:
        start, dur, meta = start[keep], dur[keep], meta[keep]
        stats = {k: v[keep] for k, v in stats.items()}
    return start, dur, meta, stats


def _release(mm, start: int, end: int) -> None:
    """Let the kernel drop the mapped file's pages of bytes already decoded: the capture's bytes are read once,
    so a 1 GB file need not stay resident (they would only count as this process's memory; the file is
    unchanged, and a page read again is read from it again)."""
    page = mmap.PAGESIZE
    lo = (start // page) * page
    if end > lo and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        try:
            mm.madvise(mmap.MADV_DONTNEED, lo, end - lo)
        except (OSError, ValueError):  # advice only
            pass
