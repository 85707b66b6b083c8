"""Reproduction of TF 2.21's multi-worker profiler crash (issue 15 item 4): two local MultiWorkerMirrored workers
train tiny BERT on synthetic batches with a profiled window, GROUPS times (TFBERTPERF_HEARTBEAT_TIMEOUT_MS sets
the coordination service's heartbeat timeout, --heartbeat-ms).  Each crash is recorded by launch_workers
(attempt, worker, signal, the crashed worker's log kept, faulthandler stack); this prints them as JSON lines and
a summary.  Not a test: the crash is probabilistic (see "Why no test" below).  With `ulimit -c unlimited` the
crashed worker leaves a core in the working directory (core_pattern "core" here) for gdb.

    python tests/programs/mw_profiler_crash.py --out /tmp/mw --groups 10 [--heartbeat-ms 10000]

What crashes (2026-11-23, TF 2.21 wheel, libstdc++, 2-core VM): worker 1 dies of SIGABRT ("double free or
corruption (out)", "munmap_chunk(): invalid pointer") or SIGBUS inside `tf.profiler.experimental.stop()`
(profile/capture.py Capture.stop).  The native stack, the same in the cores of 3 crashed workers (gdb -batch
-ex bt; SIGABRT twice, SIGBUS once):

    free() <- tsl::profiler::(anon)::SplitEventTracker::FindStartAndMerge(TraceMeRecorder::Event*)
           <- tsl::profiler::TraceMeRecorder::Consume() <- TraceMeRecorder::Stop() <- HostTracer::Stop()
           <- ProfilerCollection::Stop() <- ProfilerSession::CollectData() <- ProfilerSessionWrapper::Export…

and in one of them free() was handed `main_arena+1856`: glibc's own bin pointer, written into a chunk when it is
freed — the string being assigned to lived in memory that had already been freed.

Why (xla/tsl/profiler/backends/cpu/traceme_recorder.cc): a TraceMe begun with ActivityStart on one thread and
ended with ActivityEnd on another is recorded as two halves that Consume() merges.  Consume() walks the per-
thread recorders in the order of an absl::flat_hash_map keyed by pointer (per-process random), moves each
thread's events into a std::deque, and when an end half comes before its start half it keeps a raw pointer into
that deque (SplitEventTracker::end_events_) and pushes the deque into `std::vector<ThreadEvents> result`.  When
`result` grows, the vector copies its ThreadEvents (std::deque's move constructor is not noexcept in
libstdc++, so vector reallocation copies instead of moving) and frees the old deques; HandleCrossThreadEvents()
then move-assigns the start's name into the freed Event: glibc aborts when that memory was reused (or the
write corrupts the heap silently).  Which cross-thread pairs: `CollectiveExecutor::CompleteParams`
(core/common_runtime/base_collective_executor.cc: ActivityStart where the collective op runs, ActivityEnd in
the param resolver's callback).  In a profiled window of this program worker 1 recorded 55 of them, each
started on a tf_Compute/python thread and ended on tf_GrpcWorkerEnvQueues; worker 0 recorded 56, ended on its
collective_ops threads — so worker 0 is exposed too, though no crash of worker 0 has been seen (0 of 24 groups).

Heartbeats are not the cause (train/strategy.py kept a 1-hour heartbeat timeout believed to avoid it), measured
here over groups of 2 workers, crashed attempts / groups:
    heartbeat 1 000 ms: 0 / 4;  10 000 ms (TF's default): 3 / 10;  3 600 000 ms (ours until now): 2 / 10
(all on worker 1; every group completed on its re-run).
The coordination heartbeat makes no split TraceMe; every crash stack above is the collectives' pairs.

Can it be avoided from outside TF?  Not without losing what the window is for: the pairs come from every collective
launch in every step (host_tracer_level 1 keeps them; they carry no filter mask); the recorder order is hashed per
process; stopping on another thread, or through the profiler server (tf.profiler.experimental.client), ends in the
same Consume() in the worker's process.  Profiling only the chief would drop the other workers' attribution
(report.json `workers`) and still not be safe by the mechanism above.  So runs keep the mitigation that works:
launch_workers re-runs the group when a worker dies of a signal and report.json records each crash in `retries`
(attempt, worker, signal, stack). Issue 31 asked whether the crash comes from two profiler sessions in one process, from the order of stop and
shutdown, or from TF itself.  Each worker is its own process and starts one session (profile/capture.py; TF
refuses a second with "Another profiler is running"); the crash is inside stop(), in Consume(), before anything
shuts down.  So it is TF's, and the code is unchanged upstream (openxla/xla 45bd14fd traceme_recorder.cc, where
TraceMeRecorder::Consume still pushes each thread's deque into `result` after SplitEventTracker kept a pointer
into it; a `result.reserve(recorders.size())` before the loop would close it).  No upstream issue was found for
it (searched tensorflow/tensorflow and openxla/xla issues for the message, TraceMeRecorder and SplitEventTracker,
2026-11-25).  Why no test: whether a run crashes depends on the per-process hash order of thread
recorders and on glibc noticing the write to freed memory, so no run is certain to crash or not to; a test would be
a coin flip.
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--heartbeat-ms", type=int, default=10000)
    a = ap.parse_args()
    os.environ["TFBERTPERF_HEARTBEAT_TIMEOUT_MS"] = str(a.heartbeat_ms)
    from tfbertperf.config import load_config
    from tfbertperf.train.multiworker import WorkerError, launch_workers

    cfg = load_config(overrides={"train.steps": 16, "train.batch_size": 8, "data.seq_len": 32,
                                 "data.max_predictions": 5, "profile.steps": "4:12", "profile.probe_steps": 0,
                                 "train.warmup_steps": 2})
    crashes, failed = [], 0
    for g in range(a.groups):
        out = Path(a.out) / f"group-{g}"
        try:
            results = launch_workers(cfg, 2, out, entry="tfbertperf.job:synthetic_worker", timeout_s=600,
                                     progress=None, retries=2)
            for c in results[0]["retries"]:
                crashes.append(c)
                print(json.dumps({"group": g, **c}), flush=True)
        except WorkerError as e:
            failed += 1
            print(json.dumps({"group": g, "failed": str(e)}), flush=True)
    print(json.dumps({"groups": a.groups, "crashed_attempts": len(crashes), "failed_groups": failed}))


if __name__ == "__main__":
    main()
