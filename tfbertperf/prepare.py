"""`tfbertperf prepare` / `python -m tfbertperf.prepare`: build vocab + TFRecord shards + manifest.json.

    tfbertperf prepare [--out URI] [--workload W] [--set data.x=v ...]

--out is a local directory, file://, gs://bucket/prefix or az://container/prefix (default: data.uri, or the
embedded default data directory).  The task comes from model.task (pretrain | classify); every data.* knob
(corpus, vocab, vocab_size, seq_len, max_predictions, dupe_factor, num_shards, masked_lm_prob, short_seq_prob,
seed) is reachable with --set.  Progress goes to stderr; a one-line summary to stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tfbertperf.errors import cli_entry


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfbertperf prepare",
        description="Build a WordPiece vocab and TFRecord shards (pretraining or classification examples) "
        "into a local directory, gs:// or az://.",
    )
    p.add_argument("--out", metavar="URI", help="output directory or gs://… / az://… prefix "
                   "(default: data.uri, else the embedded default data directory)")
    p.add_argument("--workload", metavar="NAME|FILE", help="workload YAML whose data/model sections apply")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a RunConfig field, e.g. --set data.dupe_factor=4 (repeatable)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


@cli_entry
def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ start-up chatter is not progress
    from tfbertperf.config import load_config
    from tfbertperf.data.prepare import prepare_data
    from tfbertperf.redact import redact_text

    cfg = load_config(args.workload, None, args.sets)
    out = args.out or cfg.resolved_data_uri()
    t0 = time.perf_counter()
    m = prepare_data(cfg, out, progress=not args.quiet)
    extra = f", {m['num_labels']} labels" if m["task"] == "classify" else ""
    print(
        f"prepared {m['num_examples']} {m['task']} examples (seq_len {m['seq_len']}, vocab {m['vocab_size']}"
        f"{extra}) in {len(m['shards'])} shards at {redact_text(out)} in {time.perf_counter() - t0:.1f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
