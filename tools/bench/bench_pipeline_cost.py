"""What the input pipeline itself costs per example: the run's tf.data pipeline (data/pipeline.py build_dataset)
on synthetic pretraining shards, reading each shard as groups of records (one reader buffer / stream chunk per
element through the interleave, unbatched after it: ShardSource.read_batches) against one record per element
(read_batches withheld), side by side, the two taking turns for --reps rounds.  Prints examples/s, the process's
CPU µs per example (getrusage) and cores used, and the groups ÷ records ratio of each round.

Why it matters: on a small host the tuned pipeline is CPU-bound (issue 16: the input ceiling of tuned on gs:// at
20 ms was the presets' CPU ratio, not the storage's), so every µs per example is ceiling.

    python tools/bench/bench_pipeline_cost.py                       # local shards, tuned + naive, batch 32 and 256
    python tools/bench/bench_pipeline_cost.py --backends local,gs   # also gs:// on the GCS emulator (stream mode)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(ds, batch: int, batches: int, warmup: int = 30) -> dict:
    """examples/s, CPU µs per example and cores over `batches` batches after `warmup`."""
    it = iter(ds)
    for _ in range(warmup):
        next(it)
    c0, t0 = _cpu(), time.perf_counter()
    for _ in range(batches):
        next(it)
    dt, dc = time.perf_counter() - t0, _cpu() - c0
    del it
    n = batches * batch
    return {"ex_s": n / dt, "us_ex": dc / n * 1e6, "cores": dc / dt}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="24MB")
    ap.add_argument("--backends", default="local", help="local and/or gs (the GCS emulator, stream mode)")
    ap.add_argument("--presets", default="tuned,naive")
    ap.add_argument("--batches", default="32,256", help="global batch sizes")
    ap.add_argument("--examples", type=int, default=40000, help="examples measured per pipeline and round")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)

    from tfbertperf import job
    from tfbertperf.config import load_config
    from tfbertperf.data.pipeline import build_dataset
    from tfbertperf.data.prep.synthetic_shards import parse_size, write_synthetic
    from tfbertperf.storage import open_shards

    tmp = tempfile.mkdtemp(prefix="bench-pipe-")
    local = os.path.join(tmp, "syn")
    m = write_synthetic(local, size_bytes=parse_size(a.size), seq_len=128, shards=16)
    print(f"synthetic data: {m['num_examples']} examples, {a.size} in 16 shards; load {os.getloadavg()[0]:.1f}\n",
          file=sys.stderr)
    uris = {"local": (local, [])}
    gcs = None
    if "gs" in a.backends.split(","):
        from tfbertperf.storage.upload import upload_dir
        from tfbertperf.testing.emulators import FakeGcs

        gcs = FakeGcs(tls=False).__enter__()
        os.environ.update(gcs.env())
        gcs.create_bucket("bench")
        upload_dir(local, "gs://bench/syn", load_config().data, progress=False)
        uris["gs"] = ("gs://bench/syn", ["data.mode=stream", "data.chunk_mb=0.25", "data.concurrency=8"])

    print("| storage | preset | global batch | records: ex/s, µs CPU/ex (each round) | groups: ex/s, µs CPU/ex "
          "(each round) | groups ÷ records ex/s (each round) | median | load |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for kind in a.backends.split(","):
            uri, extra = uris[kind]
            for preset in a.presets.split(","):
                for batch in (int(b) for b in a.batches.split(",")):
                    cfg = load_config(data_uri=uri, sets=extra + [f"pipeline.preset={preset}",
                                                                  f"train.batch_size={batch}"])
                    inputs = job.Inputs(cfg, progress=False)
                    got: dict[str, list[dict]] = {"records": [], "groups": []}
                    for _ in range(a.reps):
                        for how in ("records", "groups"):
                            src = open_shards(inputs.shard_uris, cfg.data, inputs.backend, inputs.record_bytes_hint)
                            if how == "records":
                                src = dataclasses.replace(src, read_batches=None)
                            try:
                                got[how].append(measure(build_dataset(cfg, inputs.manifest, src), batch,
                                                        max(20, a.examples // batch)))
                            finally:
                                src.close()
                    ratios = [g["ex_s"] / r["ex_s"] for g, r in zip(got["groups"], got["records"])]
                    fmt = lambda rows: ", ".join(f"{x['ex_s']:.0f} ({x['us_ex']:.1f})" for x in rows)  # noqa: E731
                    print(f"| {kind} | {preset} | {batch} | {fmt(got['records'])} | {fmt(got['groups'])} | "
                          f"{', '.join(f'{x:.2f}' for x in ratios)} | **{statistics.median(ratios):.2f}×** | "
                          f"{os.getloadavg()[0]:.1f} |", flush=True)
    finally:
        if gcs is not None:
            gcs.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
