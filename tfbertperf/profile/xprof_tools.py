"""Finding profiles on disk and converting them with xprof's own converters (the only xplane parser we use).

A TensorFlow profile is a TensorBoard logdir holding `plugins/profile/<session>/<host>.xplane.pb`, one file per
host of a capture session.  `find_xplanes` turns whatever the user points at into that list of files;
`convert` runs one of xprof's tools in-process and returns its parsed JSON.  A gzipped capture
(`<host>.xplane.pb.gz`, as captures are shared) is read as it is: gunzipped once into a temporary session folder of
the same name, removed when the process exits; `source_dir` names the folder it came from.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tfbertperf.errors import UsageError

XPLANE_SUFFIX = ".xplane.pb"
GZ_SUFFIX = XPLANE_SUFFIX + ".gz"
_UNPACKED: dict[Path, Path] = {}  # gunzipped temporary file → the .xplane.pb.gz it came from

# The xprof tools this package reads.  "trace_viewer" is the legacy Chrome-trace JSON (every host event with
# thread names); "trace_viewer@" is the streaming variant TensorBoard uses.
TOOLS = ("input_pipeline_analyzer", "overview_page", "framework_op_stats", "trace_viewer", "trace_viewer@")


def host_of(xplane: Path | str) -> str:
    """Host name of one xplane file (`<host>.xplane.pb`)."""
    name = Path(xplane).name
    return name[: -len(XPLANE_SUFFIX)] if name.endswith(XPLANE_SUFFIX) else Path(xplane).stem


def _is_capture(name: str) -> bool:
    return name.endswith((XPLANE_SUFFIX, GZ_SUFFIX))


def _unpack(gz: Path) -> Path:
    """`gz` gunzipped into `<temporary>/<its folder's name>/<host>.xplane.pb` (the session name is kept for the
    report), removed at exit; a file that is not gzip is refused in one line naming it."""
    import atexit
    import gzip

    for tmp, src in _UNPACKED.items():
        if src == gz.resolve() and tmp.is_file():
            return tmp
    root = Path(tempfile.mkdtemp(prefix="tfbertperf-xplane-"))
    atexit.register(shutil.rmtree, root, True)
    out = root / (gz.resolve().parent.name or "session") / gz.name[: -len(".gz")]
    out.parent.mkdir(parents=True)
    try:
        with gzip.open(gz, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (OSError, EOFError) as e:
        shutil.rmtree(root, ignore_errors=True)
        raise UsageError(f"{gz}: not a readable gzip file ({e})") from None
    _UNPACKED[out] = gz.resolve()
    return out


def source_file(xplane: Path | str) -> Path:
    """The capture file as the user gave it (for a gzipped one, the .gz, not the temporary copy)."""
    p = Path(xplane)
    return _UNPACKED.get(p) or p


def _sessions(profile_dir: Path) -> list[Path]:
    return sorted((p for p in profile_dir.iterdir() if p.is_dir()), key=lambda p: p.name)


def sessions_under(path) -> list[Path]:
    """Every capture session directory find_xplanes would choose among for a logdir `path` (several runs' logdirs
    below it included); [] for a file, a session directory or a path that is none."""
    p = Path(path) if not isinstance(path, (list, tuple)) else None
    if p is None or not p.is_dir() or any(f.is_file() and _is_capture(f.name) for f in p.iterdir()):
        return []
    return [s for d in _profile_dirs(p) for s in _sessions(d)]


def _profile_dirs(p: Path) -> list[Path]:
    """Every plugins/profile directory below the logdir `p` (several runs' included), `p` itself where it is one."""
    return [d for d in p.rglob("plugins/profile") if d.is_dir()] + (
        [p] if p.name == "profile" and p.parent.name == "plugins" else [])


def _check_files(files: list[Path], where: str) -> list[Path]:
    if not files:
        raise UsageError(f"{where}: empty profile session (no *{XPLANE_SUFFIX} files)")
    for f in files:
        if f.stat().st_size == 0:
            raise UsageError(f"{f}: empty {XPLANE_SUFFIX} file (the profiler was interrupted?)")
    plain = [f for f in files if f.name.endswith(XPLANE_SUFFIX)]
    hosts = {host_of(f) for f in plain}
    # a host's .xplane.pb wins over its .gz beside it (the same capture, already unpacked)
    packed = [f for f in files if f.name.endswith(GZ_SUFFIX) and host_of(f.name[: -len(".gz")]) not in hosts]
    return sorted(plain + [_unpack(f) for f in packed], key=lambda f: f.name)


def find_xplanes(path: str | os.PathLike | list, session: str | None = None) -> list[Path]:
    """Resolve PATH to the xplane files of one profile session.

    Args:
      path: a TensorBoard logdir (searched for `plugins/profile/<session>/`; several logdirs below it are
        searched too), a session directory, one `.xplane.pb` file, or a list of `.xplane.pb` files; each may
        be gzipped (`.xplane.pb.gz`, gunzipped to a temporary folder: module docstring).
      session: session directory name to pick (default: the newest, by name — xprof names sessions by
        their UTC start time, so the name order is the time order).
    Returns:
      The session's `.xplane.pb` files (one per host), sorted.
    Raises:
      UsageError (one line naming the path) when there is no profile, the session is empty or unknown.
    """
    if isinstance(path, (list, tuple)):
        files = [Path(p) for p in path]
        for f in files:
            if not f.is_file():
                raise UsageError(f"{f}: no such profile file")
            if not _is_capture(f.name):
                raise UsageError(f"{f}: not a {XPLANE_SUFFIX} (or {GZ_SUFFIX}) file")
        return _check_files(files, str(path))
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{p}: no such file or directory")
    if p.is_file():
        if not _is_capture(p.name):
            raise UsageError(f"{p}: not a {XPLANE_SUFFIX} (or {GZ_SUFFIX}) file or a TensorBoard logdir")
        return _check_files([p], str(p))
    # A session directory: holds xplane files directly.
    direct = [f for f in p.iterdir() if f.is_file() and _is_capture(f.name)]
    if direct and session is None:
        return _check_files(direct, str(p))
    # A logdir: find every plugins/profile directory below it.
    profile_dirs = _profile_dirs(p)
    if not profile_dirs and (p / "tfbertperf_steps.json").is_file():  # profile/stepfile.py STEP_FILE
        raise UsageError(f"{p}: a step file (tfbertperf_steps.json) but no capture: the profiled window never ran "
                         "(profile_steps beyond the run's steps, or None) — capture a window inside the run")
    if not profile_dirs:
        raise UsageError(
            f"{p}: no profile found (expected plugins/profile/<session>/*{XPLANE_SUFFIX} under a TensorBoard "
            "logdir; capture one with tf.profiler.experimental.start/stop)"
        )
    sessions = [s for d in profile_dirs for s in _sessions(d)]
    if not sessions:
        raise UsageError(f"{p}: the profile directory holds no sessions")
    if session is not None:
        chosen = [s for s in sessions if s.name == session]
        if not chosen:
            known = ", ".join(sorted({s.name for s in sessions})[-5:])
            raise UsageError(f"--session {session}: no such session under {p} (newest: {known})")
        s = chosen[-1]
    else:
        s = max(sessions, key=lambda s: (s.name, str(s)))
    return _check_files([f for f in s.iterdir() if f.is_file() and _is_capture(f.name)], str(s))


@contextlib.contextmanager
def _quiet_native_stderr():
    """Hold back the C++ log lines (absl/TF) xprof writes to fd 2 while converting.

    A failure is reported by us as one line; xprof's own "Can't parse …" noise would make it several.  What was
    held back is replayed when TFBERTPERF_DEBUG is set.
    """
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (e.g. captured by a test runner)
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            if os.environ.get("TFBERTPERF_DEBUG"):
                held.seek(0)
                sys.stderr.write(held.read().decode("utf-8", errors="replace"))


def _raw_convert(xplanes: list[Path], tool: str, params: dict) -> bytes | str | None:
    with _quiet_native_stderr():  # importing xprof loads TF's native libraries, which log on import
        from xprof.convert.raw_to_tool_data import xspace_to_tool_data

    # xprof caches its intermediate result (ALL_HOSTS.op_stats*.pb) next to the inputs, even when told not to
    # reuse it.  Converting links in a private temp dir keeps the user's profile directory untouched (it may be
    # read-only) and stops a cached all-hosts result from answering a per-host question.
    tmp = tempfile.mkdtemp(prefix="tfbertperf-xprof-")
    try:
        links = []
        for i, x in enumerate(xplanes):
            link = Path(tmp) / f"{i}" / Path(x).name
            link.parent.mkdir()
            try:
                link.symlink_to(Path(x).resolve())
            except OSError:
                shutil.copyfile(x, link)
            links.append(str(link))
        with _quiet_native_stderr():
            out = xspace_to_tool_data(links, tool, {"use_saved_result": False, **params})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    data = out[0] if isinstance(out, tuple) else out
    return data


def convert(xplanes: list[Path] | Path | str, tool: str, params: dict | None = None):
    """Run one xprof tool on xplane files, in-process, and return its parsed JSON.

    Args:
      xplanes: xplane files of one session (several hosts are combined by xprof).
      tool: one of TOOLS ("input_pipeline_analyzer", "overview_page", "framework_op_stats", "trace_viewer",
        "trace_viewer@").
      params: extra xprof tool options.
    Returns:
      The tool's JSON document (gviz-style list of tables for the analyzers; Chrome trace dict for the traces).
    Raises:
      UsageError naming the file when xprof cannot read it (corrupt or not an XSpace).
    """
    if tool not in TOOLS:
        raise ValueError(f"unknown xprof tool {tool!r} (known: {', '.join(TOOLS)})")
    files = [Path(xplanes)] if isinstance(xplanes, (str, os.PathLike)) else [Path(x) for x in xplanes]
    stamps = []
    for f in files:
        try:
            st = f.stat()
        except OSError as e:
            raise UsageError(f"{f}: cannot read profile ({e.strerror or e})") from None
        stamps.append((str(f), st.st_mtime_ns, st.st_size))
    key = (tuple(stamps), tool, json.dumps(params or {}, sort_keys=True))
    if tool.startswith("trace_viewer"):  # every host event: read once by one caller, too large to keep
        return _convert.__wrapped__(*key)
    return copy.deepcopy(_convert(*key))


@functools.lru_cache(maxsize=4)
def _convert(stamps: tuple, tool: str, params_json: str):
    """convert's work, once per set of files (path, mtime, size), tool and options: one analysis never runs a
    conversion twice (callers get copies)."""
    files = [Path(p) for p, _, _ in stamps]
    params = json.loads(params_json)
    data = _raw_convert(files, tool, params or {})
    if data is None or (isinstance(data, (bytes, str)) and not data.strip()):
        # Find the culprit: convert each file on its own.
        for f in files:
            if len(files) == 1 or _raw_convert([f], tool, params or {}) is None:
                raise UsageError(f"{f}: corrupt or unreadable {XPLANE_SUFFIX} (xprof could not parse it)")
        raise UsageError(f"{files[0].parent}: xprof could not convert these profiles with {tool}")
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        raise UsageError(f"{files[0]}: xprof's {tool} returned no JSON (corrupt profile?)") from None


def by_host(xplanes: list[Path]) -> dict[str, list[Path]]:
    """Group a session's xplane files by host name (one file per host is the usual layout)."""
    hosts: dict[str, list[Path]] = {}
    for x in xplanes:
        hosts.setdefault(host_of(x), []).append(Path(x))
    return hosts
