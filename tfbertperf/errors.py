"""User-facing errors: one line on stderr naming the culprit, exit status 2, never a traceback."""

from __future__ import annotations

import functools
import os
import sys
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


def process_main(main) -> NoReturn:
    """The `__main__` of every command (and the console script): run `main()` and leave the process.

    A command that stops on an error can leave tf.data threads in the middle of a Python call (a py_function or a
    from_generator of the stream reader).  Python's teardown then destroys the iterator, whose destructor waits for
    those calls while holding the GIL they need: the process hangs after printing its one-line error (seen on a
    damaged shard in stream mode).  So a command that fails once TensorFlow is loaded exits at once, its output
    flushed; everything it promises (report, marker, checkpoint) is written before this point.
    """
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
