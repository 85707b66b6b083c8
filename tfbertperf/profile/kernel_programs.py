"""The XLA programs a device plane's kernels belong to (columns.py `_device`): per program name the kernel count,
per program id, per (name, id) pair, and the kernels that carry a program with their (name, id) code, for each
program's device time inside the steps (program_facts.programs_ran).  A kernel's program is its `hlo_module` /
`program_id` stats; where the event has no `hlo_module` (TPU planes) its op's event metadata carries them."""

from __future__ import annotations

import numpy as np

from tfbertperf.profile.xspace import MISSING


def tally(ks: np.ndarray, ke: np.ndarray, km: np.ndarray, kp: np.ndarray, kmeta: np.ndarray, strings: list,
          meta_programs: dict) -> tuple:
    """(hlo_modules, program_ids, pairs, (start, end, key code) of the kernels with a program, keys) from the
    kernels' start, end, hlo_module (index into `strings`, -1: none), program_id (MISSING: none) and metadata id
    columns; meta_programs: event metadata id → (hlo_module, program id or None)."""
    hlo = {}
    for i in np.flatnonzero(counts := np.bincount(km[km >= 0], minlength=len(strings))).tolist():
        if strings[i]:
            hlo[strings[i]] = hlo.get(strings[i], 0) + int(counts[i])
    programs: dict = {}
    pairs: dict = {}  # (program name, program id) → kernels: one name may be compiled into several programs
    has = (km >= 0) | (kp != MISSING)
    if has.any():
        ids, inv = np.unique(kp[has], return_inverse=True)  # one sort: ids are arbitrary int64s
        per_id = np.bincount(inv, minlength=len(ids))
        programs = {pid: int(c) for pid, c in zip(ids.tolist(), per_id.tolist()) if pid != MISSING and c}
        pair = (km[has] + 1) * len(ids) + inv  # no name (-1) → 0
        counts = np.bincount(pair)
        for code in np.flatnonzero(counts).tolist():
            mod, pid = int(code // len(ids)) - 1, ids[code % len(ids)]
            key = (strings[mod] if mod >= 0 else None, None if pid == MISSING else int(pid))
            pairs[key] = pairs.get(key, 0) + int(counts[code])
    pm, pp, names_ext = km, kp, list(strings)
    if meta_programs and (km < 0).any():  # TPU: the op's metadata carries the program (module and id)
        miss = np.flatnonzero(km < 0)
        metas, inv = np.unique(kmeta[miss], return_inverse=True)
        got = [meta_programs.get(m) for m in metas.tolist()]
        mod = np.array([len(names_ext) + i if g else -1 for i, g in enumerate(got)], dtype=np.int64)
        names_ext += [g[0] if g else "" for g in got]
        pid = np.array([MISSING if not g or g[1] is None else g[1] for g in got], dtype=np.int64)
        pm, pp = km.copy(), kp.copy()
        pm[miss], pp[miss] = mod[inv.reshape(-1)], pid[inv.reshape(-1)]
    named = pm >= 0
    keys, key_code = [], np.zeros(0, dtype=np.int64)
    if named.any():
        codes, key_code = np.unique(np.stack([pm[named], pp[named]], axis=1), axis=0, return_inverse=True)
        key_code = key_code.reshape(-1)
        keys = [(names_ext[int(mod)], None if pid == MISSING else int(pid)) for mod, pid in codes.tolist()]
    program_kernels = (ks[named], ke[named], key_code)
    return hlo, programs, pairs, program_kernels, keys


def variant_words(att: dict) -> str:
    """"; jit_step ran as 2 compiled programs: #7 f32 80 % of device time, #3 bf16 20 %" for each module name that
    ran as several programs (device_attribution xla_program_variants), "" when none did."""
    names = set(att.get("xla_program_variants") or ())
    words = ""
    for name in sorted(names):
        rows = [p for p in att.get("xla_programs") or () if p["module"] == name]
        parts = ", ".join(f"#{p['program_id']} {p['precision'] or 'no matmul'} {p['device_share']:.0%}"
                          for p in rows)
        words += f"; {name} ran as {len(rows)} compiled programs ({parts} of device time)"
    return words
