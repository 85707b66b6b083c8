"""`python -m tfbertperf.run` — the main job: data → tf.data → Keras BERT → profiled training → attribution report.

With no arguments it runs the embedded default: tiny BERT, pretraining, local shards prepared on first use from
Python's bundled pydoc text, CPU, a profiled window — and prints where the step time went.

    python -m tfbertperf.run [--workload NAME|FILE] [--data URI] [--set section.key=value ...]
    python -m tfbertperf.run --resume RUN_DIR [--set section.key=value ...]   (needs train.checkpoint_every)

Ctrl-C stops training cleanly: the report of the steps done is written, marked incomplete, with an INTERRUPTED
marker in the run directory, and the exit status is 130.
"""

from __future__ import annotations

import sys

from tfbertperf.cliargs import Parser, add_run_arguments
from tfbertperf.config import load_config
from tfbertperf.errors import UsageError, cli_entry, process_main
from tfbertperf.redact import redact_text


@cli_entry
def main(argv=None) -> int:
    from tfbertperf import job
    from tfbertperf.report.console import print_run_summary
    from tfbertperf.train.checkpoint import resume_config
    from tfbertperf.train.multiworker import WorkerError

    p = Parser(prog="tfbertperf run", description=__doc__.split("\n\n")[0])
    add_run_arguments(p)
    p.add_argument("--workers", type=int, default=0,
                   help="multi_worker: launch N local workers on loopback ports (sets train.strategy=multi_worker)")
    p.add_argument("--max-accelerators", action="store_true",
                   help="emulated devices: search the largest emulate.accelerators N whose AU stays >= "
                        "profile.au_threshold with short runs (train.steps each); report N, AU at N and N+1")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a killed or interrupted run from its last checkpoint (train.checkpoint_every), "
                        "in the same run directory")
    args = p.parse_args(argv)
    sets = list(args.sets)
    if args.workers:
        if args.workers < 1:
            raise UsageError(f"--workers {args.workers}: must be >= 1")
        sets.append("train.strategy=multi_worker")
    if args.resume and (args.workload or args.data or args.workers):
        raise UsageError("--resume: the run's own config.yaml is used; only --set may be added")
    resume, cfg = resume_config(args.resume, sets) if args.resume else (None, None)
    cfg = cfg or load_config(args.workload, args.data, sets)
    if args.max_accelerators:
        from tfbertperf.accelerator_search import max_accelerators

        run_dir, report = max_accelerators(cfg)
        print_run_summary(run_dir, report)
        return 0
    if args.workers:
        try:
            run_dir, report = job.run_multi_worker(cfg, args.workers)
        except WorkerError as e:
            sys.stderr.write(f"tfbertperf: error: {redact_text(str(e))}\n")
            return 1
    else:
        run_dir, report = job.run(cfg, resume=resume)
    print_run_summary(run_dir, report)
    if report.get("incomplete"):
        sys.stderr.write(f"tfbertperf: interrupted after step {report['interrupted_at_step']}; report marked "
                         f"incomplete in {run_dir}\n")
        return 130
    return 0


if __name__ == "__main__":
    process_main(main)
