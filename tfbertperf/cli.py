"""The `tfbertperf` console script: `tfbertperf <command> ...` ≡ `python -m tfbertperf.<command> ...`."""

from __future__ import annotations

import importlib
import sys

from tfbertperf.errors import process_main

COMMANDS = {
    "run": "the main job: profiled BERT training → attribution report",
    "prepare": "build vocab + TFRecord shards to a local dir, gs:// or az://",
    "compare": "a matrix of runs (backends × pipeline presets × …) → one comparison report",
    "analyze": "attribution for any TF program's profile (TensorBoard logdir or .xplane.pb files)",
    "env": "fingerprint this machine, or --diff two fingerprints/reports",
    "tokenize": "--check: our in-graph tokenizer vs transformers' on the same vocab (parity, differences, reasons)",
}


def _usage() -> str:
    lines = ["usage: tfbertperf <command> [options]", "", "commands:"]
    lines += [f"  {k:<9} {v}" for k, v in COMMANDS.items()]
    lines += ["", "Run `tfbertperf <command> --help` for a command's options."]
    return "\n".join(lines)


def entry() -> None:
    """The console script: `main` run by errors.process_main (a failed command exits without TF's teardown)."""
    process_main(main)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("--version", "-V"):
        from tfbertperf import __version__

        print(f"tfbertperf {__version__}")
        return 0
    cmd = argv[0]
    if cmd not in COMMANDS:
        sys.stderr.write(f"tfbertperf: error: unknown command {cmd!r} (known: {', '.join(COMMANDS)})\n")
        return 2
    mod = importlib.import_module(f"tfbertperf.{cmd}")
    return int(mod.main(argv[1:]) or 0)


if __name__ == "__main__":
    process_main(main)
