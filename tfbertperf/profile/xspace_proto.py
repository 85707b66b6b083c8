"""Parsing `.xplane.pb` files (XSpace protobufs) with TensorFlow's generated protobuf classes
(`tensorflow/tsl/profiler/protobuf/xplane_pb2.py`, and for the HLO modules a capture carries in its
`/host:metadata` plane `tensorflow/compiler/xla/service/hlo_pb2.py`; xprof 2.24 ships no Python copy of its own).
`read_space(path)` parses a file into an XSpace message and keeps the last few in memory (keyed on path, mtime and
size).  The rules read the columnar form instead (xspace.py read_columns); this is for what protobuf reads best:
plane headers, metadata, the HLO protos, and the tests that compare the two."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
import sys
import types
from pathlib import Path

from tfbertperf.errors import UsageError

_TF_IMPORT_RE = re.compile(r"^from tensorflow\.([\w.]+) import (\w+) as (\w+)$", re.M)


def _tf_root() -> str | None:
    spec = importlib.util.find_spec("tensorflow")  # locates the package without importing it
    for root in (spec.submodule_search_locations or []) if spec else []:
        return root
    return None


@functools.cache
def _generated(relpath: str) -> types.ModuleType | None:
    """Execute one of TensorFlow's generated `*_pb2.py` files (path relative to the tensorflow package) without
    importing TensorFlow: `import tensorflow…` would load all of it (~6 s, native libraries), while the
    generated files need only google.protobuf and each other.  Their `from tensorflow.x import y_pb2 as z`
    lines are satisfied by executing those files the same way first.  The default descriptor pool accepts the
    identical file twice, so a later real `import tensorflow` hands back the same message classes."""
    root = _tf_root()
    path = os.path.join(root, relpath) if root else ""
    if not path or not os.path.exists(path):
        return None
    source = Path(path).read_text()
    module = types.ModuleType("_tfbertperf_" + relpath.replace("/", "_").removesuffix(".py"))
    for pkg, name, alias in _TF_IMPORT_RE.findall(source):
        dep = _generated(os.path.join(*pkg.split("."), name + ".py"))
        if dep is None:
            return None
        setattr(module, alias, dep)
    try:
        exec(compile(_TF_IMPORT_RE.sub("", source), path, "exec"), module.__dict__)
    except Exception:  # e.g. a protobuf runtime too old for this gencode: the import fallback says why
        return None
    return module


def _proto_module(relpath: str, *names: str):
    if "tensorflow" not in sys.modules:
        module = _generated(relpath)
        if module is not None:
            return module
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


@functools.cache
def xplane_pb2():
    """TensorFlow's generated xplane_pb2 module; UsageError when neither TensorFlow nor tsl is installed."""
    module = _proto_module(os.path.join("tsl", "profiler", "protobuf", "xplane_pb2.py"),
                           "tensorflow.tsl.profiler.protobuf.xplane_pb2", "tsl.profiler.protobuf.xplane_pb2")
    if module is None:
        raise UsageError("cannot read .xplane.pb files: TensorFlow's xplane_pb2 protobuf module is not installed")
    return module


@functools.cache
def hlo_pb2():
    """XLA's generated hlo_pb2 module (HloProto), or None when it is not installed (no precision from HLO then)."""
    return _proto_module(os.path.join("compiler", "xla", "service", "hlo_pb2.py"),
                         "tensorflow.compiler.xla.service.hlo_pb2", "xla.service.hlo_pb2")


def _parse(path: Path):
    """Parse one file into an XSpace; a file that is not one raises UsageError (one line, names the file)."""
    from google.protobuf.message import DecodeError

    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot read profile ({e.strerror or e})") from None
    space = xplane_pb2().XSpace()
    try:
        # proto3 string fields are UTF-8 checked while parsing, so text mangled in transit ("…" bytes
        # replaced by EF BF BD) fails here too: either the lengths no longer add up or a string is invalid.
        space.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        reason = " ".join(str(e).split()).split(": ")[-1] or type(e).__name__
        raise UsageError(f"{path}: corrupt, not a readable XSpace profile ({reason}); the file is damaged or not "
                         f"an .xplane.pb") from None
    # Random bytes can parse as unknown fields; a real capture always has at least one plane, and U+FFFD in a
    # plane name only appears after a text-mode UTF-8 round trip.
    if not space.planes:
        said = f"; the profiler reported: {' '.join(space.errors[0].split())}" if space.errors else ""
        raise UsageError(f"{path}: no profiler planes in this file (empty, corrupt or not an .xplane.pb){said}")
    if any("\ufffd" in p.name for p in space.planes):
        raise UsageError(f"{path}: corrupt, not a readable XSpace profile (U+FFFD in plane names); the file is "
                         f"damaged")
    return space


@functools.lru_cache(maxsize=4)
def _cached(path: str, _mtime_ns: int, _size: int):
    return _parse(Path(path))


def file_key(path) -> tuple[str, int, int]:
    """(path, mtime ns, size) of a profile file: the key its parse is cached on, so a file rewritten in place is
    read again.  Raises UsageError (one line naming the file) for a missing or unreadable one."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise UsageError(f"{p}: cannot read profile ({e.strerror or e})") from None
    return str(p), st.st_mtime_ns, st.st_size


def read_space(path) -> object:
    """The parsed XSpace of one `.xplane.pb` file (cached on path + mtime + size: parsed once per analysis).
    Raises UsageError (one line naming the file) for a missing, unreadable or damaged file."""
    return _cached(*file_key(path))


def stat_value(stat, names: dict[int, str]):
    """One XStat's value: its number or string; a reference to a stat-metadata string (`ref_value`) is resolved
    to that string through `names` (plane.stat_metadata id → name)."""
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    return getattr(stat, kind) if kind else None
