"""`tfbertperf env` / `python -m tfbertperf.env`: fingerprint this machine, or explain the difference of two.

    python -m tfbertperf.env                      # this machine, human-readable
    python -m tfbertperf.env --json               # environment.json on stdout
    python -m tfbertperf.env --data gs://b/p --out env.json
    python -m tfbertperf.env --diff A.json B.json # A, B = environment.json or report.json (or a run dir)

The logic is the env stage, tfbertperf.envinfo (fingerprint, load_doc, diff, explain, format_*).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfbertperf.cliargs import Parser
from tfbertperf.envinfo import explain, fingerprint, format_diff, format_fingerprint, load_doc, to_json
from tfbertperf.errors import UsageError, cli_entry, process_main
from tfbertperf.redact import redact_text


def check_out(path: str) -> None:
    """--out's directory must exist (checked before any work is done)."""
    if not Path(path).parent.is_dir():
        raise UsageError(f"--out {redact_text(path)}: directory {redact_text(str(Path(path).parent))} does not exist")


def write_json_atomic(path: str, doc: dict) -> None:
    """Write JSON to `path` via a temporary file + rename, so a killed process never leaves half a file."""
    check_out(path)
    target = Path(path)
    from tfbertperf.report.io import atomic_write_bytes

    atomic_write_bytes(target, (to_json(doc) + "\n").encode("utf-8"))


@cli_entry
def main(argv: list[str] | None = None) -> int:
    """CLI: fingerprint this machine, or explain the difference between two fingerprints/reports."""
    ap = Parser(
        prog="tfbertperf env",
        description="Fingerprint this machine (secrets redacted), or rank the differences between two "
                    "environment.json / report.json files by likely impact on speed and numerics.")
    ap.add_argument("--json", action="store_true", help="print the JSON document on stdout")
    ap.add_argument("--out", metavar="FILE", help="also write the JSON document to FILE")
    ap.add_argument("--data", metavar="URI", help="data location to describe and probe (default: the embedded "
                                                  "default data directory)")
    ap.add_argument("--no-probe", action="store_true", help="skip the local read probe")
    ap.add_argument("--diff", nargs=2, metavar=("A", "B"),
                    help="compare two environment.json / report.json files (or run directories)")
    ap.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance for loss comparison (1e-3)")
    ap.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance for loss comparison (1e-5)")
    args = ap.parse_args(argv)
    if args.out:
        check_out(args.out)
    if args.data:
        from tfbertperf.config import load_config

        load_config(data_uri=args.data)  # the URI rules every command shares (scheme, syntax)
    if args.diff:
        if args.data or args.no_probe:
            raise UsageError("--diff compares two files; --data/--no-probe apply to fingerprinting only")
        (_, a), (_, b) = load_doc(args.diff[0]), load_doc(args.diff[1])
        doc = explain(a, b, rtol=args.rtol, atol=args.atol,
                      names=(redact_text(args.diff[0]), redact_text(args.diff[1])))
        text = format_diff(doc)
    else:
        if not args.json:
            print("collecting the environment fingerprint (importing TensorFlow)…", file=sys.stderr, flush=True)
        doc = fingerprint(args.data, probe=not args.no_probe)
        text = format_fingerprint(doc)
    if args.out:
        write_json_atomic(args.out, doc)
        print(f"wrote {redact_text(args.out)}", file=sys.stderr)
    print(to_json(doc) if args.json else text)
    return 0


if __name__ == "__main__":
    process_main(main)
