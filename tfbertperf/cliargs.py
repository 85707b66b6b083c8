"""Argument-parsing pieces the commands share (not a command itself): a parser whose errors are one line with
exit status 2, and the options that select a run (--workload, --data, --set)."""

from __future__ import annotations

import argparse

from tfbertperf.config import WORKLOAD_DIR
from tfbertperf.errors import UsageError


class Parser(argparse.ArgumentParser):
    """argparse with bad arguments reported as one UsageError line (exit 2), like every other bad input."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    names = ", ".join(sorted(f.stem for f in WORKLOAD_DIR.glob("*.yaml")))
    p.add_argument("--workload", metavar="NAME|FILE", help=f"workload name ({names}) or a YAML file")
    p.add_argument("--data", metavar="URI",
                   help="data location: path, file://, gs://bucket/prefix, az://container/prefix — a data set "
                        "prepared by tfbertperf, or your own TFRecords as they are (a folder, a glob such as "
                        "gs://b/wiki/*.tfrecord, one file, or a comma list; GZIP detected): shorthand for "
                        "--set data.uri=URI")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override any RunConfig field, e.g. --set pipeline.cycle_length=16 (repeatable)")
