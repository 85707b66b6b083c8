"""User-facing errors: one line on stderr naming the culprit, exit status 2, never a traceback."""

from __future__ import annotations

import functools
import importlib.abc
import os
import re
import sys
import tempfile
import warnings
from typing import NoReturn


class UsageError(Exception):
    """Bad input from the user (file, shard, flag, URI, value).  The message is shown as-is, on one line.

    Raise it anywhere below the CLI; `cli_entry` turns it into `tfbertperf: error: <message>` and exit 2.
    The message must already be redacted of secrets (see tfbertperf.redact).
    """


def _one_line(msg: str) -> str:
    return " ".join(str(msg).split())


def fail(msg: str, code: int = 2) -> NoReturn:
    """Print one line on stderr and exit (used by entry points only)."""
    from tfbertperf.redact import redact_text

    sys.stderr.write(f"tfbertperf: error: {redact_text(_one_line(msg))}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def cli_entry(fn):
    """Decorator for CLI entry points: UsageError → one line + exit 2; Ctrl-C → exit 130."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UsageError as e:
            fail(str(e))
        except KeyboardInterrupt:
            sys.stderr.write("tfbertperf: interrupted\n")
            raise SystemExit(130)

    return wrapper


# Packages whose frames stand between a user's `model.fit(…)` (or training loop) and our callbacks' warnings.
_LIBRARY_PACKAGES = ("tfbertperf", "keras", "tensorflow", "tf_keras", "keras_hub", "jax", "jaxlib", "optree")


def warn_user(message: str) -> None:
    """A UserWarning that names the user's line: the first frame outside tfbertperf and the libraries that call
    our callbacks (Keras' fit, TensorFlow, JAX; Python 3.12's skip_file_prefixes).  With stacklevel=2 a callback's
    warning named Keras' callback list or our own module (".../keras_callback.py:292: UserWarning: …
    self._write_steps()"), not the user's `model.fit(…)`."""
    roots = tuple(os.path.dirname(m.__file__) + os.sep for name in _LIBRARY_PACKAGES
                  if (m := sys.modules.get(name)) is not None and getattr(m, "__file__", None))
    frame, level = sys._getframe(1), 2  # 2: our caller's line
    while frame.f_back is not None and frame.f_code.co_filename.startswith(roots):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)


def process_main(main) -> NoReturn:
    """The `__main__` of every command (and the console script): run `main()` and leave the process.

    A command that stops on an error can leave tf.data threads in the middle of a Python call (a py_function or a
    from_generator of the stream reader).  Python's teardown then destroys the iterator, whose destructor waits for
    those calls while holding the GIL they need: the process hangs after printing its one-line error (seen on a
    damaged shard in stream mode).  So a command that fails once TensorFlow is loaded exits at once, its output
    flushed; everything it promises (report, marker, checkpoint) is written before this point.
    """
    quiet_tf_logs()
    keep_library_logs()
    try:
        code = main()
    except SystemExit as e:
        code = e.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # SystemExit("message"): Python prints it and exits 1
        sys.stderr.write(f"{code}\n")
        code = 1
    if code != 0 and "tensorflow" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


# TensorFlow's own C++ logging on our commands' stderr.  TF_CPP_MIN_LOG_LEVEL (0 all, 1 no INFO, 2 no WARNING,
# 3 no ERROR) filters what TF logs once it runs, but TF 2.21 logs its import through absl before that filter
# exists: absl's "WARNING: All log messages before absl::InitializeLog() …" and the INFO lines of the oneDNN
# notice, the CUDA stub and the CPU-feature guard print at every level (measured: 0-3 alike).  After import, on a
# host without a GPU driver, level 2 still lets through "E… failed call to cuInit" and, on CPUs without AVX-512,
# "E… oneDNN supports DT_INT64 only on platforms with AVX-512" — ERROR lines that are not errors of the run.
# So a command defaults the level to 3 (only FATAL, which also aborts) and drops the import's lines of a level
# below it, unless the user set TF_CPP_MIN_LOG_LEVEL: theirs is kept and the import's lines follow it.  Every
# failure of TF that matters to a run reaches us as a Python exception carrying TF's message (an OpError), which
# the commands turn into one line or a traceback; the trade-off is that TF's own advisory warnings (e.g. CUPTI's
# on a GPU host) need TF_CPP_MIN_LOG_LEVEL=0 to be seen.  Multi-worker worker processes get the user's setting
# (their logs are files, where TF's lines help), not ours.
QUIET_TF_LEVEL = "3"
_TF_LOG_LINE = re.compile(r"^(?P<sev>[IWEF])\d{4} [\d:.]+ +\d+ \S+:\d+\] ")  # absl: I0000 00:00:1795…  3180 f.cc:1]
_ABSL_PREINIT = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_CONTINUATION = "To enable the following instructions:"  # the CPU-feature guard's INFO spills onto a second line
user_tf_log_level: str | None = os.environ.get("TF_CPP_MIN_LOG_LEVEL")  # as the user left it (None: unset)


def quiet_tf_logs() -> None:
    """Default TF_CPP_MIN_LOG_LEVEL to QUIET_TF_LEVEL and filter TensorFlow's import-time lines (see above).

    Must run before TensorFlow is imported (process_main calls it first); a no-op when TF is already loaded."""
    if "tensorflow" in sys.modules or quiet_tf_logs_installed():
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_TF_LEVEL)
    sys.meta_path.insert(0, _QuietImport())


def filter_tf_import_lines(text: str, level: int) -> str:
    """The lines of `text` (what stderr got while TF was imported) that TF_CPP_MIN_LOG_LEVEL=`level` would keep:
    TF's C++ log lines below the level, absl's pre-init notice and the CPU guard's second line go; the rest stays."""
    keep, dropped_last = [], False
    for line in text.splitlines(keepends=True):
        m = _TF_LOG_LINE.match(line)
        if m:
            dropped_last = "IWEF".index(m["sev"]) < level
        elif line.startswith(_ABSL_PREINIT):
            dropped_last = level > 0
        elif not (dropped_last and line.startswith(_CONTINUATION)):
            dropped_last = False
        if not dropped_last:
            keep.append(line)
    return "".join(keep)


class _QuietImport(importlib.abc.MetaPathFinder):
    """Finds the top-level `tensorflow` package once and runs its import with fd 2 (the C++ stderr) redirected to
    a temporary file; what the import wrote is then replayed through filter_tf_import_lines."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, inner) -> None:
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.inner  # the package looks as if imported plainly
        run_filtering_tf_lines(lambda: self.inner.exec_module(module))


def quiet_tf_logs_installed() -> bool:
    """Whether this process filters TensorFlow's import lines (quiet_tf_logs ran and TF is not loaded yet)."""
    return any(isinstance(f, _QuietImport) for f in sys.meta_path)


def run_filtering_tf_lines(load):
    """`load()` with fd 2 (the C++ stderr) redirected to a temporary file; what it wrote is then replayed through
    filter_tf_import_lines at TF_CPP_MIN_LOG_LEVEL.  Used for the `tensorflow` import and for the partial load of
    TensorFlow's runtime by data preparation (data/eager_runtime.py)."""
    try:
        level = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        level = 0
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 to redirect: load as usual
        return load()
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            return load()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            rest = filter_tf_import_lines(tmp.read().decode(errors="replace"), level)
            if rest:
                sys.stderr.write(rest)
                sys.stderr.flush()


# Library log records (Python logging: tensorflow, transformers, azure, urllib3, google …) on our commands'
# stderr would interleave with our lines ("Connection pool is full" from urllib3 in a staged Azure run, TF's
# Python warnings in `analyze --validate`).  Our commands print our lines; the libraries' go to the run's log
# file (`library.log` in the run directory, job.py names it) — kept in memory until a run names its file, and
# dropped by a command that makes no run.  transformers prints through its own stderr handler and says
# "PyTorch was not found" when imported: its advisory lines are off by default (TRANSFORMERS_NO_ADVISORY_WARNINGS,
# a user's own setting is kept) and data/tokcheck.py hands its logger to this one after the import.
LIBRARY_LOG_KEEP = 2000  # records held before a run names its file (the oldest go first)


class LibraryLog:
    """The root logger's one handler: library records → `path` once set, else a bounded in-memory list."""

    def __init__(self) -> None:
        import logging

        self.handler = logging.Handler(logging.INFO)
        self.handler.emit = self._emit
        self.records: list[str] = []
        self.path: str | None = None
        self.fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def _emit(self, record) -> None:
        try:
            line = self.fmt.format(record)
        except Exception:  # a library's malformed record must not break the run
            line = f"{record.name}: {record.msg!r}"
        from tfbertperf.redact import redact_text

        line = redact_text(line)
        if self.path is None:
            self.records = (self.records + [line])[-LIBRARY_LOG_KEEP:]
            return
        with open(self.path, "a") as f:
            f.write(line + "\n")

    def to_file(self, path) -> None:
        """Write held and later records to `path` (appended: a resumed run adds to its log)."""
        self.path = str(path)
        held, self.records = self.records, []
        if held:
            with open(self.path, "a") as f:
                f.write("\n".join(held) + "\n")


library_log = LibraryLog()


def keep_library_logs() -> None:
    """Route Python logging and warnings of every library to `library_log` instead of stderr (see above)."""
    import logging

    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    root = logging.getLogger()
    if library_log.handler not in root.handlers:
        root.addHandler(library_log.handler)  # TF then adds no stderr handler of its own
    logging.captureWarnings(True)

