"""`tfbertperf prepare` / `python -m tfbertperf.prepare`: build vocab + TFRecord shards + manifest.json.

    tfbertperf prepare [--out URI] [--workload W] [--set data.x=v ...]
    tfbertperf prepare --corpus FILE|DIR|gs://…|az://… [--workers N] [--out URI] [--set data.x=v ...]

--out is a local directory, file://, gs://bucket/prefix or az://container/prefix (default: data.uri, else the
data directory a run with the same --set values uses: the bundled text's, or with --corpus / data.corpus one
named after the corpus, so that `run --set data.corpus=…` finds it and the default data set is never touched).
`--corpus X` and `--set data.corpus=X` are the same preparation (data/prep/make.py).  The task comes from model.task (pretrain | classify); every data.* knob
(corpus, vocab, vocab_size, seq_len, max_predictions, dupe_factor, num_shards, masked_lm_prob, short_seq_prob,
seed) is reachable with --set.  Progress goes to stderr; a one-line summary to stdout.
"""

from __future__ import annotations

import os
import sys
import time

from tfbertperf.cliargs import Parser
from tfbertperf.errors import cli_entry, process_main


def _parser() -> Parser:
    p = Parser(
        prog="tfbertperf prepare",
        description="Build a WordPiece vocab and TFRecord shards (pretraining or classification examples) "
        "into a local directory, gs:// or az://.",
    )
    p.add_argument("--out", metavar="URI", help="output directory or gs://… / az://… prefix (default: data.uri, "
                   "else the run's data directory for these settings, named after the corpus when one is given)")
    p.add_argument("--workload", metavar="NAME|FILE", help="workload YAML whose data/model sections apply")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override any RunConfig field, e.g. --set data.dupe_factor=4 (repeatable)")
    p.add_argument("--corpus", metavar="FILE|DIR|URI",
                   help="corpus-scale pretraining data from text files (one sentence per line, blank line between "
                        "documents): a file, a directory, gs://… or az://… (comma-separated allowed); streamed in "
                        "chunks, instances made in --workers processes, progress with ETA")
    p.add_argument("--workers", type=int, metavar="N", help="--corpus: worker processes (default: usable cores)")
    p.add_argument("--no-text-shards", action="store_true",
                   help="--corpus: pre-tokenized shards only (no raw-text shards for pipeline.tokenize=inline)")
    p.add_argument("--synthetic", action="store_true",
                   help="random pretraining records in the exact feature spec at realistic sizes (no corpus), fast; "
                        "give --examples N or --size 2GiB (data.seq_len, data.max_predictions apply)")
    p.add_argument("--examples", type=int, metavar="N", help="--synthetic: number of examples")
    p.add_argument("--size", metavar="SIZE", help="--synthetic: bytes on disk, e.g. 500MB, 2GiB")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def _synthetic(cfg, out: str, args) -> dict:
    """--synthetic: write locally (in parallel processes), uploaded when `out` is gs:// or az://."""
    from tfbertperf.data.prep.output import to_uri
    from tfbertperf.data.prep.synthetic_shards import parse_size, write_synthetic
    from tfbertperf.errors import UsageError

    if (args.examples is None) == (args.size is None):
        raise UsageError("prepare --synthetic: give exactly one of --examples N or --size SIZE")
    if args.examples is not None and args.examples < 1:
        raise UsageError(f"--examples {args.examples}: must be >= 1")
    size = parse_size(args.size) if args.size is not None else None

    def say(d: dict) -> None:
        if not args.quiet:
            sys.stderr.write(f"[tfbertperf prepare] shard {d['shards_done']}/{d['shards']}: {d['bytes'] / 1e6:.1f}/"
                             f"{d['bytes_total'] / 1e6:.1f} MB, {d['mb_per_s']:.0f} MB/s, ETA {d['eta_s']:.0f} s\n")

    kw = dict(examples=args.examples, size_bytes=size, seq_len=cfg.data.seq_len, progress=say,
              max_predictions=cfg.data.max_predictions if any(x.startswith("data.max_predictions=")
                                                               for x in args.sets) else None)
    return to_uri(out, cfg.data, lambda local: write_synthetic(local, **kw), progress=not args.quiet)


def _default_out(cfg, args) -> str:
    """No --out: data.uri, else the data directory a run with these settings uses (with --corpus: the one of
    `--set data.corpus=<corpus>`, named after it; --synthetic: one named after its size), said on stderr.  Never
    the default data set, unless that is what these settings make.  Returns (the URI, what the summary line adds
    about it: said once the data set is there, not before the input is checked)."""
    import dataclasses
    import re

    from tfbertperf.config import data_home, default_data_dir

    if cfg.data.uri:
        return cfg.data.uri, ""
    if args.synthetic:
        how = re.sub(r"[^A-Za-z0-9.]+", "", str(args.size or f"{args.examples}examples"))
        out = os.path.join(data_home(), f"pretrain-synthetic-{how}-s{cfg.data.seq_len}")
        return out, f" (no --out: train on it with --set data.uri={out})"
    corpus = args.corpus or cfg.data.corpus
    if args.corpus:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, corpus=args.corpus))
    note = f" (no --out: the folder a run with --set data.corpus={corpus} reads)" if corpus else ""
    return default_data_dir(cfg), note


@cli_entry
def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ start-up chatter is not progress
    from tfbertperf.config import load_config
    from tfbertperf.data import prepare_data
    from tfbertperf.redact import redact_text

    cfg = load_config(args.workload, None, args.sets)
    out, where = (args.out, "") if args.out else _default_out(cfg, args)
    t0 = time.perf_counter()
    if args.workers is not None and (args.workers < 1 or not args.corpus):
        from tfbertperf.errors import UsageError

        raise UsageError(f"--workers {args.workers}: must be >= 1 and goes with --corpus")
    if args.synthetic:
        m = _synthetic(cfg, out, args)
    elif args.examples is not None or args.size is not None:
        from tfbertperf.errors import UsageError

        raise UsageError("--examples/--size go with --synthetic")
    else:
        if args.no_text_shards and not args.corpus:
            from tfbertperf.errors import UsageError

            raise UsageError("--no-text-shards goes with --corpus")
        m = prepare_data(cfg, out, progress=not args.quiet, corpus=args.corpus, workers=args.workers,
                         text_shards=not args.no_text_shards)
    extra = f", {m['num_labels']} labels" if m["task"] == "classify" else ""
    print(
        f"prepared {m['num_examples']} {m['task']} examples (seq_len {m['seq_len']}, vocab {m['vocab_size']}"
        f"{extra}) in {len(m['shards'])} shards at {redact_text(out)} in {time.perf_counter() - t0:.1f}s"
        f"{redact_text(where)}"
    )
    return 0


if __name__ == "__main__":
    process_main(main)
